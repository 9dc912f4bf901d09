"""Fixtures for the daemon's D-Bus tests: a veth pair to push real traffic through, NetworkManager
mocked by python-dbusmock's template, our wpa_supplicant mock, and the daemon itself."""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
import uuid

import dbusmock
import pytest

from nm_scanguard.bus import call
from nm_scanguard.dbuslib import BusType, MessageBus, Variant
from tests.conftest import assert_eventually, stop_process

PEER_NS_PREFIX = "sgtest-"
LOCAL_ADDR, PEER_ADDR = "169.254.231.1", "169.254.231.2"  # link-local, inside our own netns pair


class Link:
    """A veth pair: `ifname` in our namespace plays the Wi-Fi interface, its peer sits in a
    namespace of its own so that packets really leave through the interface's counters."""

    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:6]
        self.ifname = f"sgw{tag}"
        self.netns = PEER_NS_PREFIX + tag
        peer = f"sgp{tag}"
        for cmd in (
            ["ip", "netns", "add", self.netns],
            ["ip", "link", "add", self.ifname, "type", "veth", "peer", "name", peer, "netns", self.netns],
            ["ip", "addr", "add", f"{LOCAL_ADDR}/30", "dev", self.ifname],
            ["ip", "link", "set", self.ifname, "up"],
            ["ip", "-n", self.netns, "addr", "add", f"{PEER_ADDR}/30", "dev", peer],
            ["ip", "-n", self.netns, "link", "set", peer, "up"],
        ):
            subprocess.run(cmd, check=True)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def send(self, mbit: float, pps: float | None = None) -> None:
        """Start sending UDP at `mbit` Mbit/s (or `pps` small packets/s) until stop()."""
        self.stop()
        self._stop.clear()
        size = 1400 if pps is None else 64
        rate = pps if pps is not None else mbit * 1e6 / 8 / size
        self._thread = threading.Thread(target=self._pump, args=(size, rate), daemon=True)
        self._thread.start()

    def _pump(self, size: int, per_second: float) -> None:
        payload = b"\0" * size
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, self.ifname.encode())
            start, sent = time.monotonic(), 0
            while not self._stop.is_set():
                due = int((time.monotonic() - start) * per_second) - sent
                for _ in range(min(due, 2000)):
                    s.sendto(payload, (PEER_ADDR, 9))
                    sent += 1
                time.sleep(0.005)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def remove(self) -> None:
        self.stop()
        subprocess.run(["ip", "link", "del", self.ifname], stderr=subprocess.DEVNULL)
        subprocess.run(["ip", "netns", "del", self.netns], stderr=subprocess.DEVNULL)


@pytest.fixture
def link():
    lk = Link()
    yield lk
    lk.remove()


@pytest.fixture(scope="session", autouse=True)
def _no_stale_namespaces():
    """A previous run killed mid-way may have left namespaces: clear ours, never others."""
    for name in os.listdir("/run/netns") if os.path.isdir("/run/netns") else []:
        if name.startswith(PEER_NS_PREFIX):
            subprocess.run(["ip", "netns", "del", name], stderr=subprocess.DEVNULL)
    yield


# ---- the mocked peers ---------------------------------------------------------------------------

NM_NAME, WPA_NAME = "org.freedesktop.NetworkManager", "fi.w1.wpa_supplicant1"
MOCK_IFACE = "org.freedesktop.DBus.Mock"
DEVICE_ACTIVATED, DEVICE_DISCONNECTED = 100, 30


def spawn_template(template: str) -> subprocess.Popen:
    proc, _ = dbusmock.DBusTestCase.spawn_server_template(template, {}, stdout=subprocess.DEVNULL,
                                                           system_bus=True)
    return proc


class Peers:
    """NetworkManager (dbusmock template) and wpa_supplicant (our template) for one Wi-Fi
    interface, driven the way the real ones behave on connect, reconnect and restart."""

    def __init__(self, bus: MessageBus, ifname: str, wpa) -> None:
        self.bus, self.ifname, self.wpa = bus, ifname, wpa
        self.nm = spawn_template("networkmanager")
        self.n = 0

    async def nm_mock(self, path, member, sig="", body=()):
        return await call(self.bus, NM_NAME, path, MOCK_IFACE, member, sig, body)

    async def wpa_mock(self, member, sig="", body=()):
        return await call(self.bus, WPA_NAME, "/fi/w1/wpa_supplicant1", MOCK_IFACE, member, sig, body)

    async def setup(self, bgscan="simple:30:-70:86400", user_data=None, activate=True):
        nm = "/org/freedesktop/NetworkManager"
        (self.dev,) = await self.nm_mock(nm, "AddWiFiDevice", "ssi", ["wifi0", self.ifname, DEVICE_DISCONNECTED])
        (self.ap,) = await self.nm_mock(nm, "AddAccessPoint", "ssssuuuyu",
                                        [self.dev, "ap0", "Home", "00:11:22:33:44:55", 2, 2437, 54000, 80, 0x100])
        (self.conn,) = await self.nm_mock(nm, "AddWiFiConnection", "ssss", [self.dev, "home", "Home", "wpa-psk"])
        if user_data:
            await self.set_user_data(user_data)
        (self.iface,) = await self.wpa_mock("AddWifiInterface", "s", [self.ifname])
        await self.new_network(bgscan)
        if activate:
            await self.activate()

    async def new_network(self, bgscan):
        """What NM does on every activation: AddNetwork + select; the association completes."""
        (self.net,) = await self.wpa_mock("AddNetworkWithBgscan", "oss", [self.iface, "Home", bgscan])
        await self.wpa_mock("SetCurrentNetwork", "oo", [self.iface, self.net])
        return self.net

    async def activate(self):
        self.n += 1
        (self.active,) = await self.nm_mock("/org/freedesktop/NetworkManager", "AddActiveConnection",
                                            "assssu", [[self.dev], self.conn, self.ap, f"ac{self.n}", 2])

    async def deactivate(self):
        await self.nm_mock("/org/freedesktop/NetworkManager", "SetDeviceDisconnected", "s", [self.dev])

    async def set_user_data(self, data: dict[str, str]):
        (settings,) = await call(self.bus, NM_NAME, self.conn,
                                 "org.freedesktop.NetworkManager.Settings.Connection", "GetSettings")
        settings["user"] = {"data": Variant("a{ss}", data)}
        await call(self.bus, NM_NAME, self.conn, "org.freedesktop.NetworkManager.Settings.Connection",
                   "Update", "a{sa{sv}}", [settings])

    async def remove_network(self, net):
        await call(self.bus, WPA_NAME, self.iface, "fi.w1.wpa_supplicant1.Interface", "RemoveNetwork", "o", [net])

    async def sets(self, net=None):
        (rows,) = await self.wpa_mock("GetPropertiesSets", "o", [net or self.net])
        return [{k: v.value for k, v in row.items()} for row in rows]

    async def restart_wpa(self, bgscan="simple:30:-70:86400"):
        self.wpa.restart()
        (self.iface,) = await self.wpa_mock("AddWifiInterface", "s", [self.ifname])
        return await self.new_network(bgscan)

    def close(self):
        stop_process(self.nm)


@pytest.fixture
async def bus(system_bus):
    b = await MessageBus(bus_type=BusType.SYSTEM).connect()
    yield b
    b.disconnect()


@pytest.fixture
async def peers(bus, link, wpa_supplicant_mock):
    p = Peers(bus, link.ifname, wpa_supplicant_mock)
    yield p
    p.close()


async def eventually(cond, timeout=10.0, what="condition") -> float:
    """assert_eventually, returning how long it took (the figures in the closing note)."""
    start = time.monotonic()
    await assert_eventually(cond, timeout, 0.05, what)
    return time.monotonic() - start


FIGURES: dict[str, list[float]] = {}


def record(what: str, seconds: float) -> None:
    FIGURES.setdefault(what, []).append(seconds)


def pytest_terminal_summary(terminalreporter):
    if FIGURES:
        terminalreporter.section("figures (sample_interval 0.2 s, engage_after 2, release_after 1 s)")
        for what, values in FIGURES.items():
            terminalreporter.write_line(f"{what}: n={len(values)} min={min(values):.2f} s "
                                        f"max={max(values):.2f} s")
