"""Contract: our wpa_supplicant mock answers like the real wpa_supplicant 2.10 binary.

Every scenario of tests/contract/wpa_scenarios.py runs twice, against ``/sbin/wpa_supplicant
-u`` and against tests/mocks/wpa_supplicant.py, each on its own private system bus, through the
same client calls, and asserts the same results (and a third time against the model rung's
simulated wpa_supplicant: tests/contract/test_model_wpa_supplicant.py).  The interface is
``lo`` with driver ``none`` (CreateInterface), so the real one has no radio: it cannot
associate, its scans fail, SignalPoll always fails.  Associated behaviour (State "completed", a
working SignalPoll) is therefore only in the mock, modelled on
wpa_supplicant/dbus/dbus_new_handlers.c, and documented in the template.

When a test fails, the real wpa_supplicant's debug log (-dd) or the mock's call log is printed.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

import pytest

from nm_scanguard.dbuslib import BusType, MessageBus
from tests.conftest import (DEFAULT_DENY_POLICY, MockSupplicant, assert_eventually, call_failed,
                            start_private_bus, stop_process)
from tests.contract.wpa_scenarios import NM_BGSCAN, SCENARIOS, Scenario
from tests.contract.wpaclient import WpaClient

WPA_SUPPLICANT = "/sbin/wpa_supplicant"


async def _wait_for_name(client: WpaClient) -> None:
    await assert_eventually(client.has_owner, timeout=10, message="fi.w1.wpa_supplicant1 on the bus")


@pytest.fixture(params=["real", "mock"])
async def wpa(request, system_bus, tmp_path):
    """A WpaClient on the real or the mock wpa_supplicant, with ``lo`` (driver none) created.

    ``wpa.kind`` is "real" or "mock"; ``wpa.iface`` the interface path.  Signals are recorded
    from before CreateInterface.
    """
    kind = request.param
    process = mock = None
    log = tmp_path / f"wpa_supplicant-{kind}.log"
    if kind == "real":
        if not os.access(WPA_SUPPLICANT, os.X_OK):
            pytest.fail(f"{WPA_SUPPLICANT} not installed: run `make test` (it installs wpasupplicant)")
        if os.geteuid() != 0:
            pytest.fail("the contract tests need root: the real wpa_supplicant must control an interface")
        process = subprocess.Popen([WPA_SUPPLICANT, "-u", "-dd", "-t", "-f", str(log)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    else:
        mock = MockSupplicant(system_bus.address, log)
    bus = await MessageBus(bus_type=BusType.SYSTEM).connect()
    try:
        client = await WpaClient.connect(bus)
        client.kind = kind
        await _wait_for_name(client)
        client.iface = await client.create_interface("lo", "none")
        yield client
    finally:
        bus.disconnect()
        if process:
            stop_process(process)
        if mock:
            mock.close()
        if call_failed(request) and log.exists():
            print(f"--- {kind} wpa_supplicant log ({log}) ---\n{log.read_text(errors='replace')}")


# --- the scenarios (tests/contract/wpa_scenarios.py), which the model's wpa_supplicant runs too

@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
async def test_scenario(wpa: WpaClient, scenario: Scenario) -> None:
    await scenario.run(wpa)


# --- D-Bus policy: Debian lets group netdev talk to wpa_supplicant -------------------------

_POLICY_FILES = [Path("/usr/share/dbus-1/system.d/wpa_supplicant.conf"),
                 Path("/etc/dbus-1/system.d/wpa_supplicant.conf")]

_CLIENT = r"""
import asyncio, json, sys
sys.path.insert(0, sys.argv[1])
from nm_scanguard.dbuslib import BusType, MessageBus, Variant
from nm_scanguard.peers.supplicant import Supplicant
from tests.contract.wpaclient import WpaClient

async def main():
    bus = await MessageBus(bus_type=BusType.SYSTEM).connect()
    client = WpaClient(bus)
    try:
        iface = await client.get_interface("lo")
        net = sys.argv[2]
        await client.set_network_properties(net, {"bgscan": Variant("s", "")})
        result = {"iface": iface, "bgscan": (await client.network_properties(net))["bgscan"]}
        await Supplicant(bus).scan(iface)  # asked for on a release for a weak signal
        result["scan"] = "accepted"
    except Exception as e:
        result = {"error": getattr(e, "type", repr(e))}
    print(json.dumps(result))

asyncio.run(main())
"""


def _run_as(uid: int, gid: int, groups: str, address: str, net: str) -> dict:
    """Run the client above as another user; *groups* is setpriv's --groups (or "" for none)."""
    repo = Path(__file__).resolve().parents[2]
    group_args = [f"--groups={groups}"] if groups else ["--clear-groups"]
    out = subprocess.run(
        ["setpriv", f"--reuid={uid}", f"--regid={gid}", *group_args, "--",
         "/usr/bin/python3", "-c", _CLIENT, str(repo), net],
        env={"DBUS_SYSTEM_BUS_ADDRESS": address, "PATH": "/usr/bin:/bin",
             "PYTHONDONTWRITEBYTECODE": "1"},
        capture_output=True, text=True, timeout=30, check=False)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


async def test_policy_netdev_member_may_configure(tmp_path):
    """On a default-deny bus with Debian's policy file, netdev may call; others may not."""
    policy = next((p for p in _POLICY_FILES if p.exists()), None)
    if policy is None:
        pytest.fail("no wpa_supplicant D-Bus policy file installed (apt install wpasupplicant)")
    if os.geteuid() != 0 or not os.access(WPA_SUPPLICANT, os.X_OK):
        pytest.fail("needs root and the real wpa_supplicant (run `make test` as root)")
    import grp
    netdev = grp.getgrnam("netdev").gr_gid
    nobody, nogroup = 65534, 65534

    bus_daemon = start_private_bus(DEFAULT_DENY_POLICY, [policy])
    log = tmp_path / "wpa_supplicant.log"
    env = dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=bus_daemon.address)
    process = subprocess.Popen([WPA_SUPPLICANT, "-u", "-dd", "-t", "-f", str(log)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    bus = None
    try:
        bus = await MessageBus(bus_address=bus_daemon.address).connect()
        root = await WpaClient.connect(bus)
        await _wait_for_name(root)
        iface = await root.create_interface("lo", "none")
        net = await root.add_network(iface, ssid="myssid", bgscan=NM_BGSCAN)

        member = await asyncio.to_thread(_run_as, nobody, nogroup, str(netdev),
                                         bus_daemon.address, net)
        assert member == {"iface": iface, "bgscan": '""', "scan": "accepted"}

        outsider = await asyncio.to_thread(_run_as, nobody, nogroup, "",
                                           bus_daemon.address, net)
        assert outsider == {"error": "org.freedesktop.DBus.Error.AccessDenied"}
    except BaseException:
        if log.exists():
            print(f"--- wpa_supplicant log ---\n{log.read_text(errors='replace')}")
        raise
    finally:
        if bus:
            bus.disconnect()
        stop_process(process)
        bus_daemon.stop()
