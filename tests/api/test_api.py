"""The system-bus API of the real daemon, on a private bus, with NetworkManager and wpa_supplicant
mocked.  Every property, method and signal of io.github.nm_scanguard.ScanGuard1."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from nm_scanguard import __version__
from nm_scanguard.daemon.bgscan.journal import FILE_NAME as JOURNAL_FILE
from nm_scanguard.daemon.deferral import DEFER_FILE
from nm_scanguard.daemon.api.methods import xml_path
from nm_scanguard.daemon.api.export import load_interface
from nm_scanguard.names import XML_NAME
from nm_scanguard.dbuslib import Variant, introspection
from tests.api.harness import (BGSCAN, IFACE, NAME, PATH, REPO, Signals, api_call, env_for,
                               error_of, kill, named_holds, props, scanguardctl)
from tests.conftest import assert_eventually

ERR = IFACE + ".Error"
INVALID_ARGS = "org.freedesktop.DBus.Error.InvalidArgs"
QUOTED = f'"{BGSCAN}"'


def _shape(iface) -> dict:
    """Everything a client can rely on in an interface, comparable."""
    return {
        "methods": {m.name: ([(a.name, a.signature) for a in m.in_args],
                             [(a.name, a.signature) for a in m.out_args]) for m in iface.methods},
        "signals": {s.name: [(a.name, a.signature) for a in s.args] for s in iface.signals},
        "properties": {p.name: (p.signature, p.access.value if hasattr(p.access, "value") else p.access)
                       for p in iface.properties},
    }


async def test_exported_introspection_is_exactly_the_canonical_xml(scenario):
    reply = await api_call(scenario.bus, "Introspect", interface="org.freedesktop.DBus.Introspectable")
    node = introspection.Node.parse(reply.body[0])
    exported = {i.name: i for i in node.interfaces}
    with open(REPO / "nm_scanguard" / XML_NAME, encoding="utf-8") as f:
        canonical = introspection.Node.parse(f.read())
    (ours,) = canonical.interfaces
    assert _shape(exported[IFACE]) == _shape(ours)
    assert set(exported) == {IFACE, "org.freedesktop.DBus.Properties",
                             "org.freedesktop.DBus.Introspectable", "org.freedesktop.DBus.Peer"}
    assert _shape(load_interface(xml_path(), IFACE)) == _shape(ours)  # what the daemon dispatches on
    tree = await asyncio.to_thread(subprocess.run, ["busctl", f"--address={scenario.address}", "tree",
                                                    "--list", NAME], capture_output=True, text=True)
    assert PATH in tree.stdout.split(), tree.stdout + tree.stderr
    bogus = await api_call(scenario.bus, "NoSuchMethod")
    assert error_of(bogus)[0] == "org.freedesktop.DBus.Error.UnknownMethod"


async def test_version_and_devices_describe_the_activated_interface(scenario):
    p = await props(scenario.bus)
    assert p["Version"] == __version__
    assert p["ActiveHolds"] == []
    (dev,) = p["Devices"]
    assert dev["interface"] == scenario.ifname
    assert dev["state"] == "idle"
    assert dev["connection_id"] == "Home"
    assert dev["rx_bps"] == 0 and dev["tx_bps"] == 0
    assert dev["suspended_bgscan"] == ""
    assert dev["settings"]["sample_interval"] == 0.2
    assert dev["settings_sources"]["sample_interval"].endswith("scanguard.conf")
    assert dev["settings_sources"]["threshold_mbit"] == "default"
    get = await api_call(scenario.bus, "Get", "ss", [IFACE, "Version"],
                         interface="org.freedesktop.DBus.Properties")
    assert get.body[0].value == __version__


async def test_properties_are_read_only(scenario):
    reply = await api_call(scenario.bus, "Set", "ssv", [IFACE, "Version", Variant("s", "9")],
                           interface="org.freedesktop.DBus.Properties")
    name, text = error_of(reply)
    assert name == "org.freedesktop.DBus.Error.PropertyReadOnly"
    assert "Traceback" not in text


async def test_hold_suspends_bgscan_on_an_idle_link_and_release_restores_it(scenario):
    signals = Signals(scenario.bus)
    await signals.subscribe()
    reply = await api_call(scenario.bus, "Hold", "sss", ["video call", "org.example.Call", ""])
    assert error_of(reply) is None, reply.body
    (cookie,) = reply.body
    assert cookie != 0

    await assert_eventually(lambda: scenario.bgscan() == '""', message="bgscan suspended")
    dev = await scenario.device()
    assert dev["state"] == "held" and dev["rx_bps"] == 0 and dev["suspended_bgscan"] == BGSCAN
    (public,) = (await props(scenario.bus))["ActiveHolds"]
    assert public == {"cookie": cookie, "interface": "", "since": public["since"]}
    (hold,) = await named_holds(scenario.bus)
    assert hold["cookie"] == cookie and hold["reason"] == "video call"
    assert hold["application_id"] == "org.example.Call" and hold["interface"] == ""
    assert hold["caller"] == scenario.bus.unique_name and hold["caller_uid"] == 0
    assert abs(hold["since"] - time.time()) < 30
    await assert_eventually(lambda: [scenario.ifname, "held"] in
                            [s[:2] for s in signals.named("StateChanged")])

    reply = await api_call(scenario.bus, "Release", "u", [cookie])
    assert error_of(reply) is None, reply.body
    await assert_eventually(lambda: scenario.bgscan() == QUOTED, message="bgscan restored")
    await assert_eventually(lambda: signals.named("HoldReleased") == [[cookie]])
    assert (await props(scenario.bus))["ActiveHolds"] == []
    await assert_eventually(scenario.state, message="state known")
    assert await scenario.state() == "idle"
    def changed():  # ActiveHolds changes are coalesced: the last one comes within about 1 s
        return [c[1] for c in signals.named("PropertiesChanged") if c[0] == IFACE]
    await assert_eventually(lambda: any("ActiveHolds" in c and c["ActiveHolds"] == []
                                        for c in changed()), message="ActiveHolds [] announced")
    assert any("Devices" in c for c in changed())


async def test_hold_on_one_interface_and_unknown_interface(scenario):
    reply = await api_call(scenario.bus, "Hold", "sss", ["game", "", scenario.ifname])
    assert error_of(reply) is None, reply.body
    await assert_eventually(lambda: scenario.bgscan() == '""')
    reply = await api_call(scenario.bus, "Hold", "sss", ["game", "", "wlan99"])
    name, text = error_of(reply)
    assert name == INVALID_ARGS
    assert "wlan99" in text and scenario.ifname in text
    assert len((await props(scenario.bus))["ActiveHolds"]) == 1


async def test_hold_is_released_when_the_holder_process_is_killed(scenario):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER], env=env_for(scenario.address), cwd=REPO,
        stdout=subprocess.PIPE, text=True)
    try:
        cookie = int(holder.stdout.readline())
        await assert_eventually(lambda: scenario.bgscan() == '""', message="bgscan suspended")
        assert [h["cookie"] for h in (await props(scenario.bus))["ActiveHolds"]] == [cookie]
        kill(holder)
        await assert_eventually(lambda: scenario.bgscan() == QUOTED, message="bgscan restored")

        async def no_holds():
            return (await props(scenario.bus))["ActiveHolds"] == []
        await assert_eventually(no_holds)
    finally:
        kill(holder)


HOLDER = """
import asyncio
from nm_scanguard.dbuslib import Message, MessageBus, BusType
async def main():
    bus = await MessageBus(bus_type=BusType.SYSTEM).connect()
    reply = await bus.call(Message(destination="io.github.nm_scanguard.ScanGuard1",
        path="/io/github/nm_scanguard/ScanGuard1", interface="io.github.nm_scanguard.ScanGuard1",
        member="Hold", signature="sss", body=["test", "holder", ""]))
    print(reply.body[0], flush=True)
    await asyncio.sleep(3600)
asyncio.run(main())
"""


async def test_release_errors_are_named_and_actionable(scenario):
    name, text = error_of(await api_call(scenario.bus, "Release", "u", [12345]))
    assert name == ERR + ".UnknownHold" and "12345" in text
    name, text = error_of(await api_call(scenario.bus, "Hold", "ss", ["a", "b"]))
    assert name == INVALID_ARGS and "(sss)" in text
    name, text = error_of(await api_call(scenario.bus, "Hold", "sss", ["x" * 300, "", ""]))
    assert name == INVALID_ARGS and "256" in text
    assert "Traceback" not in text


async def test_reload_rereads_the_file_and_refuses_a_bad_one(scenario):
    scenario.daemon.config.write_text("[scanguard]\nsample_interval = 0.2\nthreshold_mbit = banana\n")
    name, text = error_of(await api_call(scenario.bus, "Reload"))
    assert name == ERR + ".BadConfig"
    assert str(scenario.daemon.config) in text and "threshold_mbit" in text and "number" in text
    assert "Traceback" not in text
    assert (await scenario.device())["settings"]["threshold_mbit"] == 1.0

    scenario.daemon.config.write_text("[scanguard]\nsample_interval = 0.2\nthreshold_mbit = 7\n")
    assert error_of(await api_call(scenario.bus, "Reload")) is None

    async def reloaded():
        return (await scenario.device())["settings"]["threshold_mbit"] == 7.0
    await assert_eventually(reloaded)


async def test_device_event_is_checked_against_networkmanager(scenario):
    ok = await api_call(scenario.bus, "DeviceEvent", "sss", [scenario.ifname, "up", "some-uuid"])
    assert error_of(ok) is None, ok.body
    await assert_eventually(lambda: f"dispatcher: {scenario.ifname} up" in scenario.daemon.log())
    global_event = await api_call(scenario.bus, "DeviceEvent", "sss", ["", "connectivity-change", ""])
    assert error_of(global_event) is None
    name, text = error_of(await api_call(scenario.bus, "DeviceEvent", "sss",
                                         [scenario.ifname, "dhcp4-change", ""]))
    assert name == INVALID_ARGS and "up, down" in text
    name, text = error_of(await api_call(scenario.bus, "DeviceEvent", "sss", ["eth7", "up", ""]))
    assert name == INVALID_ARGS and "eth7" in text
    name, _ = error_of(await api_call(scenario.bus, "DeviceEvent", "sss", ["../x", "up", ""]))
    assert name == INVALID_ARGS


async def test_status_json_schema(scenario):
    r = scanguardctl(scenario.address, "status", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert set(data) == {"version", "off", "devices", "holds"} and data["off"] == ""
    (dev,) = data["devices"]
    types = {"interface": str, "state": str, "reason": str, "since": float, "rx_bps": float,
             "tx_bps": float, "pps": float, "suspended_bgscan": str, "network": str,
             "scans_guarding": int, "scans_idle": int, "connection_id": str,
             "connection_uuid": str, "error": str, "settings": dict, "settings_sources": dict}
    for key, kind in types.items():
        assert isinstance(dev[key], kind), (key, dev[key])
    assert dev["signal_dbm"] is None or isinstance(dev["signal_dbm"], int)
    assert dev["state"] in ("idle", "guarding", "held", "released-weak-signal", "disabled", "no-bgscan")

    human = scanguardctl(scenario.address, "status")
    assert human.returncode == 0
    assert human.stdout.startswith(f"{scenario.ifname} ('Home'): idle for ")


async def test_scanguardctl_hold_sleep_end_to_end(scenario):
    proc = subprocess.Popen([sys.executable, "-m", "nm_scanguard.cli.scanguardctl", "hold", "--reason", "e2e",
                             "--", "sleep", "1"], env=env_for(scenario.address), cwd=REPO,
                            stderr=subprocess.PIPE, text=True)
    try:
        async def held():
            holds = await named_holds(scenario.bus)
            return holds and holds[0]["application_id"] == "scanguardctl" and holds[0]["reason"] == "e2e"
        await assert_eventually(held, message="scanguardctl's hold is listed")
        await assert_eventually(lambda: scenario.bgscan() == '""', message="bgscan suspended")
        assert proc.wait(10) == 0, proc.stderr.read()
        assert (await props(scenario.bus))["ActiveHolds"] == []
        await assert_eventually(lambda: scenario.bgscan() == QUOTED, message="bgscan restored")
    finally:
        kill(proc)


async def test_scanguardctl_hold_returns_the_command_status(scenario):
    r = scanguardctl(scenario.address, "hold", "--", "sh", "-c", "exit 3")
    assert r.returncode == 3, r.stderr
    r = scanguardctl(scenario.address, "hold", "--", "/nonexistent/command")
    assert r.returncode == 127 and "command not found" in r.stderr
    assert (await props(scenario.bus))["ActiveHolds"] == []


async def test_monitor_prints_state_changes(scenario):
    proc = subprocess.Popen([sys.executable, "-m", "nm_scanguard.cli.scanguardctl", "monitor"],
                            env=env_for(scenario.address), cwd=REPO, stdout=subprocess.PIPE, text=True)
    out = Output(proc)
    try:
        await out.wait_for("monitoring nm-scanguard")
        await out.wait_for(f"{scenario.ifname} ('Home'): idle")
        reply = await api_call(scenario.bus, "Hold", "sss", ["watch me", "", ""])
        (cookie,) = reply.body
        await out.wait_for(f"{scenario.ifname}: -> held (held by an application)")
        await out.wait_for(f"hold {cookie} by ")
        assert "watch me" in out.line_with(f"hold {cookie} by ")
        await api_call(scenario.bus, "Release", "u", [cookie])
        await out.wait_for(f"hold {cookie} released")
        await out.wait_for(f"{scenario.ifname}: -> idle")
        proc.send_signal(signal.SIGINT)
        assert proc.wait(5) == 0
    finally:
        kill(proc)


class Output:
    """A process's stdout, read line by line in a thread so that the test's loop keeps running."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.lines: list[str] = []

    def line_with(self, text: str) -> str:
        return next((line for line in self.lines if text in line), "")

    async def wait_for(self, text: str, timeout: float = 10.0) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self.line_with(text):
            line = await asyncio.wait_for(loop.run_in_executor(None, self.proc.stdout.readline),
                                          max(0.1, deadline - loop.time()))
            assert line, f"output ended without {text!r}: {self.lines}"
            self.lines.append(line)


async def test_second_instance_refuses_to_start(scenario):
    r = subprocess.run([sys.executable, "-m", "nm_scanguard", "-c", str(scenario.daemon.config),
                        "--state-dir", str(scenario.daemon.state_dir) + "2"],
                       env=env_for(scenario.address), cwd=REPO, capture_output=True, text=True,
                       timeout=20)
    assert r.returncode == 1
    assert "already owned by another process" in r.stderr
    assert "Traceback" not in r.stderr


async def test_a_second_instance_on_the_same_state_dir_leaves_the_first_ones_work_alone(scenario):
    """A second scanguardd (root starting it by hand beside the service) finds the name taken
    and exits 1.  Its journal and scan-deferral file are the first instance's: it neither
    restores what that one suspended nor removes its files."""
    reply = await api_call(scenario.bus, "Hold", "sss", ["Café ☕", "", ""])
    assert error_of(reply) is None, reply.body
    await assert_eventually(lambda: scenario.bgscan() == '""', message="bgscan suspended")
    state_dir = Path(scenario.daemon.state_dir)
    journal, deferral = state_dir / JOURNAL_FILE, state_dir / DEFER_FILE
    await assert_eventually(lambda: journal.exists() and deferral.exists(),
                            message="the journal entry and the deferral file are written")
    before = journal.read_bytes(), deferral.read_bytes()
    r = subprocess.run([sys.executable, "-m", "nm_scanguard", "-c", str(scenario.daemon.config),
                        "--state-dir", str(state_dir)],
                       env=env_for(scenario.address), cwd=REPO, capture_output=True, text=True,
                       timeout=20)
    assert r.returncode == 1 and "already owned by another process" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "restor" not in r.stderr, r.stderr
    assert (journal.read_bytes(), deferral.read_bytes()) == before
    assert scenario.bgscan() == '""', "the first instance's suspension stands"
    assert (await scenario.device())["state"] == "held"


async def test_service_absent_gives_a_clear_error(system_bus):
    r = scanguardctl(system_bus.address, "status")
    assert r.returncode == 1
    assert "scanguard service is not running" in r.stderr and "Traceback" not in r.stderr



async def test_monitor_ends_quietly_when_its_reader_goes(scenario):
    """`scanguardctl monitor | head -3`: the first line after the reader left ends it."""
    read, write = os.pipe()
    proc = subprocess.Popen([sys.executable, "-m", "nm_scanguard.cli.scanguardctl", "monitor"],
                            env=env_for(scenario.address), cwd=REPO, stdout=write,
                            stderr=subprocess.PIPE, text=True)
    os.close(write)
    try:
        with os.fdopen(read, "rb") as reader:
            assert b"monitoring nm-scanguard" in reader.readline()
        for reason in ("Café ☕", "again"):  # something to print, after the reader is gone
            (cookie,) = (await api_call(scenario.bus, "Hold", "sss", [reason, "", ""])).body
            await api_call(scenario.bus, "Release", "u", [cookie])
        _, err = await asyncio.to_thread(proc.communicate, timeout=15)
        assert proc.returncode == 141, err
        assert err == ""
    finally:
        kill(proc)
