"""`scanguardctl diagnose` as user nobody on the private bus: NetworkManager's mock, the real
daemon (idle), wpa_supplicant's mock.  What only a bus shows: the interface and SSID found
through NetworkManager, the guard's state read without privileges, strict JSON, Ctrl-C, and
the errors a person sees.  This host has no cfg80211 and the mocked link no gateway: the
report must say that scans and latency could not be seen, and why, not invent them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dbus
import pytest

from tests.api.harness import scanguardctl
from tests.conftest import ALLOW_ALL_POLICY, PrivateBus, start_private_bus
from tests.peers import REPO, Link, env_for

AP_IFACE = "org.freedesktop.NetworkManager.AccessPoint"


@pytest.fixture
def system_bus(monkeypatch: pytest.MonkeyPatch):
    """The allow-all private bus of tests/conftest.py, which other users may also connect to:
    diagnose runs as nobody here (whom the real NetworkManager's policy lets read it too)."""
    bus: PrivateBus = start_private_bus(ALLOW_ALL_POLICY.replace(
        '<policy context="default">', '<policy context="default">\n    <allow user="*"/>'))
    monkeypatch.setenv("DBUS_SYSTEM_BUS_ADDRESS", bus.address)
    try:
        yield bus
    finally:
        bus.stop()


def strict(text: str):
    def refuse(name: str):
        raise ValueError(f"not strict JSON: {name}")
    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("ssid", ["Home", "Café ☕"])
async def test_diagnose_as_nobody_finds_the_link_and_the_guard(scenario, ssid):
    s = scenario
    if ssid != "Home":
        s.nm.mock_object(s.ap).UpdateProperties(AP_IFACE, {"Ssid": dbus.ByteArray(ssid.encode())})
    r = await asyncio.to_thread(scanguardctl, s.address, "diagnose", "--seconds", "3", "--json",
                                user="nobody", timeout=90)
    assert r.returncode == 0, r.stderr
    doc = strict(r.stdout)
    (link,) = doc["links"]
    assert (link["interface"], link["ssid"]) == (s.ifname, ssid)
    guard = link["guard"]
    assert guard["installed"] and guard["running"] and guard["state"] == "idle", guard
    assert guard["states_seen"] == ["idle"]
    # Without cfg80211 nothing is seen, and the report says so instead of "no scans".
    assert doc["scan_events"].startswith(("seen in the kernel", "not seen: this kernel has no Wi-Fi"))
    assert link["latency_method"] == no_gateway(s.ifname)
    assert link["latency_try"] == try_target(s.ifname)
    assert link["verdict"] == unmeasured_verdict(doc, s.ifname)
    assert doc["duration"] >= 2.5 and not doc["interrupted"]
    assert link["bgscan_source"], link


async def test_diagnose_ctrl_c_ends_early_and_still_reports(scenario):
    s = scenario
    cmd = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", sys.executable,
           "-m", "nm_scanguard.cli.scanguardctl", "diagnose", "--seconds", "120"]
    p = subprocess.Popen(cmd, env=env_for(s.address), cwd=REPO, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        await asyncio.sleep(5)
        p.send_signal(signal.SIGINT)
        out, err = await asyncio.to_thread(p.communicate, timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    assert "(ended early by Ctrl-C)" in out.splitlines()[0], out
    assert f"== {s.ifname} ('Home')" in out
    assert "nm-scanguard: installed, running, idle during the run" in out
    assert "Spike: a spike is an echo" in out


@pytest.mark.parametrize("name", ["wlan9", "Café☕"])
async def test_an_unknown_interface_is_named_with_the_ones_there_are(scenario, name):
    s = scenario
    r = await asyncio.to_thread(scanguardctl, s.address, "diagnose", "--seconds", "1",
                                "--interface", name, user="nobody", timeout=60)
    assert r.returncode == 1 and r.stdout == ""
    assert f"NetworkManager has no Wi-Fi interface '{name}'" in r.stderr
    assert s.ifname in r.stderr


async def test_without_networkmanager_it_says_so(system_bus):
    r = await asyncio.to_thread(scanguardctl, system_bus.address, "diagnose", "--seconds", "1",
                                user="nobody", timeout=60)
    assert r.returncode == 1
    assert "NetworkManager could not be asked" in r.stderr and "is it running?" in r.stderr


# ---- a verdict only for what was measured (issue 34, item 2) ----------------------------------

def no_gateway(ifname: str) -> str:
    return (f"{ifname} has no IPv4 gateway of its own to send echoes to: NetworkManager names "
            f"none, and no route in the kernel's main table goes through one on {ifname}")


def try_target(ifname: str) -> str:
    return (f"try `--target ADDR`, an IPv4 address that answers pings through {ifname} (its "
            "gateway, or a host on its network)")


def unmeasured_verdict(doc: dict, ifname: str) -> list[str]:
    """What diagnose must say of a run on a link with no gateway: no latency, and scans only
    when the kernel's scan events were seen."""
    why = f"no latency measured because {no_gateway(ifname)}; {try_target(ifname)}"
    if doc["scan_events"].startswith("seen in the kernel"):
        return [f"No Wi-Fi scan ran on {ifname}; cannot tell whether it stalled for another "
                f"reason: {why}."]
    unseen = doc["scan_events"].removeprefix("not seen: ")
    return [f"Cannot tell whether Wi-Fi scans ran on {ifname}: the kernel's scan events were "
            f"not seen ({unseen}).", f"Cannot tell whether {ifname} stalled either: {why}."]


@pytest.mark.parametrize("ssid", ["Home", "Café ☕"])
async def test_nothing_measured_is_never_all_is_well(scenario, ssid):
    """The report a person reads, on a link without a gateway: "cannot tell", with what to try,
    never "latency stayed steady"."""
    s = scenario
    if ssid != "Home":
        s.nm.mock_object(s.ap).UpdateProperties(AP_IFACE, {"Ssid": dbus.ByteArray(ssid.encode())})
    r = await asyncio.to_thread(scanguardctl, s.address, "diagnose", "--seconds", "3",
                                user="nobody", timeout=90)
    assert r.returncode == 0, r.stderr
    j = await asyncio.to_thread(scanguardctl, s.address, "diagnose", "--seconds", "1", "--json",
                                user="nobody", timeout=90)
    expected = unmeasured_verdict(strict(j.stdout), s.ifname)
    lines = r.stdout.splitlines()
    assert lines[2] == f"== {s.ifname} ('{ssid}')"
    assert lines[3:3 + len(expected)] == [f"* {line}" for line in expected]
    assert f"Latency: not measured ({no_gateway(s.ifname)})" in lines
    assert "steady" not in r.stdout


@contextlib.contextmanager
def route(*spec: str):
    subprocess.run(["ip", "route", "add", *spec], check=True)
    try:
        yield
    finally:
        subprocess.run(["ip", "route", "del", *spec], stderr=subprocess.DEVNULL)


def measured(doc: dict, ifname: str) -> dict:
    """The link of a run whose echoes were answered, and the verdict only for that."""
    (link,) = doc["links"]
    assert link["interface"] == ifname
    summary = link["summary"]
    assert summary["answered"] > 0 and summary["median_rtt_ms"] is not None, link
    assert not any("no latency measured" in line for line in link["verdict"]), link["verdict"]
    assert "steady" not in " ".join(link["verdict"]) or summary["scans"] == 0
    return link


async def test_the_wifi_gateway_is_pinged_when_the_default_route_is_elsewhere(scenario, link: Link):
    """A VPN's shape: the default route is not the interface's (here, the host's own), and the
    interface keeps a route to the VPN's server (198.51.100.7) through its gateway.  diagnose
    finds that gateway and echoes it through the interface.  Run as root: this host's
    net.ipv4.ping_group_range may exclude every group, and root's raw socket is bound the same
    way as the ping socket."""
    s = scenario
    with route("198.51.100.7/32", "via", link.peer_addr, "dev", s.ifname):
        r = await asyncio.to_thread(scanguardctl, s.address, "diagnose", "--seconds", "3",
                                    "--json", timeout=90)
    assert r.returncode == 0, r.stderr
    found = measured(strict(r.stdout), s.ifname)
    assert found["gateway"] == found["target"] == link.peer_addr
    assert found["latency_method"].startswith(
        f"ICMP echo to the gateway {link.peer_addr} through {s.ifname} every 0.2 s ("), found
    assert found["latency_try"] == ""


async def test_target_is_pinged_through_the_interface(scenario, link: Link):
    s = scenario
    r = await asyncio.to_thread(scanguardctl, s.address, "diagnose", "--seconds", "3", "--json",
                                "--target", link.peer_addr, timeout=90)
    assert r.returncode == 0, r.stderr
    found = measured(strict(r.stdout), s.ifname)
    assert (found["gateway"], found["target"]) == ("", link.peer_addr)
    assert found["latency_method"].startswith(
        f"ICMP echo to {link.peer_addr} (--target) through {s.ifname} every 0.2 s ("), found


# ---- --plot (issue 34, item 1) ----------------------------------------------------------------

@contextlib.contextmanager
def shared_folder():
    """A folder user nobody may write into (pytest's tmp_path is root's alone)."""
    folder = Path(tempfile.mkdtemp(prefix="scanguard-diagnose-"))
    try:
        os.chmod(folder, 0o777)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def as_nobody(folder: Path, *args: str) -> list[str]:
    """The command line and environment of scanguardctl run as nobody, with matplotlib's own
    folder in `folder`: nobody's HOME here is root's, which matplotlib would say at length."""
    return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "env",
            f"MPLCONFIGDIR={folder}", sys.executable, "-m", "nm_scanguard.cli.scanguardctl", *args]


@pytest.mark.parametrize("name", ["x.txt", "Café ☕.txt"])
async def test_a_plot_format_matplotlib_cannot_write_is_refused_before_recording(scenario, name):
    s = scenario
    with shared_folder() as folder:
        out = folder / name
        began = time.monotonic()
        r = await asyncio.to_thread(scanguardctl, s.address, "diagnose", "--seconds", "60",
                                    "--plot", str(out), user="nobody", timeout=50)
        took = time.monotonic() - began
        assert not out.exists()
    assert r.returncode == 2 and r.stdout == ""
    assert (f"scanguardctl diagnose: error: argument --plot: cannot write the plot to '{out}': "
            "matplotlib does not write .txt files (it writes eps, ") in r.stderr, r.stderr
    assert took < 20  # refused at once, not after a minute of recording


@pytest.mark.parametrize("ssid", ["Home", "Café ☕"])
async def test_a_plot_is_drawn_after_the_report_without_matplotlibs_chatter(scenario, ssid):
    """No echo is answered on this link, so the latency panel has nothing labelled: matplotlib's
    "No artists with labels found to put in legend" must not reach the user."""
    s = scenario
    if ssid != "Home":
        s.nm.mock_object(s.ap).UpdateProperties(AP_IFACE, {"Ssid": dbus.ByteArray(ssid.encode())})
    with shared_folder() as folder:
        out = folder / f"{ssid}.png"
        r = await asyncio.to_thread(
            subprocess.run, as_nobody(folder, "diagnose", "--seconds", "2", "--plot",
                                      str(out)),
            env=env_for(s.address), cwd=REPO, capture_output=True, text=True, timeout=90)
        assert r.returncode == 0, r.stderr
        assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert r.stderr == ""
    assert r.stdout.startswith("scanguardctl diagnose:")
    assert f"== {s.ifname} ('{ssid}')" in r.stdout and r.stdout.endswith(f"Plot: {out}\n")


async def recording(pid: int, timeout: float = 60) -> None:
    """Wait until scanguardctl diagnose (`pid`) has connected to the bus: it checks its
    arguments, the plot's folder included, before it opens any socket, and records after."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            if any(os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:") for fd in fds):
                return
        except FileNotFoundError:
            pass  # an fd closed while we looked; look again
        await asyncio.sleep(0.05)
    raise AssertionError(f"scanguardctl diagnose (pid {pid}) did not connect to the bus in "
                         f"{timeout:.0f} s")


@pytest.mark.parametrize("ssid", ["Home", "Café ☕"])
async def test_a_plot_that_fails_after_recording_costs_no_report(scenario, ssid):
    """The folder is removed while diagnose records: the plot cannot be written, and the
    report is on stdout all the same, before the error."""
    s = scenario
    if ssid != "Home":
        s.nm.mock_object(s.ap).UpdateProperties(AP_IFACE, {"Ssid": dbus.ByteArray(ssid.encode())})
    with shared_folder() as top:
        folder = top / ssid
        folder.mkdir(mode=0o777)
        os.chmod(folder, 0o777)
        out = folder / "wifi.png"
        cmd = as_nobody(top, "diagnose", "--seconds", "8", "--plot", str(out))
        p = subprocess.Popen(cmd, env=env_for(s.address), cwd=REPO, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        try:
            await recording(p.pid)  # past the checks of the arguments
            shutil.rmtree(folder)
            stdout, stderr = await asyncio.to_thread(p.communicate, timeout=60)
        finally:
            if p.poll() is None:
                p.kill()
    assert p.returncode == 1, stderr
    assert stdout.startswith("scanguardctl diagnose: 8 s from ")
    assert f"== {s.ifname} ('{ssid}')" in stdout and "Spike: a spike is an echo" in stdout
    assert "Plot:" not in stdout
    assert stderr == (f"scanguardctl: cannot write the plot to '{out}': No such file or "
                      "directory\n")
