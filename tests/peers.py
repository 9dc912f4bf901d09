"""What the daemon meets in the D-Bus tests, and the daemon itself as a process.

- ``Link``: a veth pair to play the Wi-Fi interface, its peer in a network namespace of its
  own, so that packets really leave through the interface's counters.  Quiet (no IPv6 chatter)
  until ``send()``.
- ``NetworkManagerMock`` and ``Polkit``: python-dbusmock's templates in processes of their own
  (``MockProcess`` in tests/conftest.py, like the wpa_supplicant mock).
- ``Peers``: NetworkManager and wpa_supplicant for one Wi-Fi interface, driven the way the real
  ones behave on connect, reconnect and restart.
- ``DaemonProcess``: scanguardd (python3 -m nm_scanguard) on a private bus.

The fixtures built on these (``link``, ``nm_mock``) are in tests/conftest.py.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from nm_scanguard.names import BUS_NAME as NAME
from nm_scanguard.peers.bus import BusError, call, get_property, name_has_owner
from nm_scanguard.dbuslib import MessageBus
from tests.conftest import MockProcess, MockSupplicant, stop_process

REPO = Path(__file__).resolve().parents[1]
BGSCAN = "simple:30:-70:86400"  # what NetworkManager writes for a profile without a BSSID


def env_for(address: str) -> dict[str, str]:
    """The environment of a process we start on the private bus at *address*."""
    env = dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=address, PYTHONPATH=str(REPO))
    env.pop("NOTIFY_SOCKET", None)
    return env


# ---- the interface ------------------------------------------------------------------------------

PEER_NS_PREFIX = "sgtest-"

def _link_local_pair(tag: str) -> tuple[str, str]:
    """A /30 in 169.254.0.0/16 (link-local: never routed) chosen by the link's tag, so that
    test runs going on at the same time on this machine do not share addresses."""
    n = int(tag, 16) % (1 << 14)  # 16384 /30 subnets in 169.254.0.0/16
    base = n * 4
    third, fourth = divmod(base, 256)
    return f"169.254.{third}.{fourth + 1}", f"169.254.{third}.{fourth + 2}"


class Link:
    """A veth pair: `ifname` in our namespace plays the Wi-Fi interface, its peer sits in a
    namespace of its own so that packets really leave through the interface's counters.

    IPv6 is off on both ends, so the counters do not move until the test calls ``send()``.
    """

    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:6]
        self.ifname = f"sgw{tag}"
        self.netns = f"{PEER_NS_PREFIX}{os.getpid()}-{tag}"  # the pid tells stale from in use
        peer = f"sgp{tag}"
        self.local_addr, self.peer_addr = _link_local_pair(tag)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        try:
            for cmd in (
                ["ip", "netns", "add", self.netns],
                ["ip", "link", "add", self.ifname, "type", "veth", "peer", "name", peer,
                 "netns", self.netns],
                ["sysctl", "-qw", f"net.ipv6.conf.{self.ifname}.disable_ipv6=1"],
                ["ip", "netns", "exec", self.netns, "sysctl", "-qw",
                 f"net.ipv6.conf.{peer}.disable_ipv6=1"],
                ["ip", "addr", "add", f"{self.local_addr}/30", "dev", self.ifname],
                ["ip", "link", "set", self.ifname, "up"],
                ["ip", "-n", self.netns, "addr", "add", f"{self.peer_addr}/30", "dev", peer],
                ["ip", "-n", self.netns, "link", "set", peer, "up"],
            ):
                subprocess.run(cmd, check=True)
        except BaseException:
            self.remove()
            raise

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
                    s.sendto(payload, (self.peer_addr, 9))
                    sent += 1
                time.sleep(0.005)

    def stop(self) -> None:
        """Stop the traffic started by send() (nothing if none)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def remove(self) -> None:
        self.stop()
        subprocess.run(["ip", "link", "del", self.ifname], stderr=subprocess.DEVNULL)
        subprocess.run(["ip", "netns", "del", self.netns], stderr=subprocess.DEVNULL)


def clear_stale_namespaces() -> None:
    """Delete the namespaces a run killed mid-way left behind: ours (sgtest-PID-*) whose test
    process is gone, never another project's, never those of a run still going on."""
    for name in os.listdir("/run/netns") if os.path.isdir("/run/netns") else []:
        if not name.startswith(PEER_NS_PREFIX):
            continue
        pid = name[len(PEER_NS_PREFIX):].split("-")[0]
        if pid.isdigit() and os.path.exists(f"/proc/{pid}"):
            continue
        subprocess.run(["ip", "netns", "del", name], stderr=subprocess.DEVNULL)


# ---- the mocked peers ---------------------------------------------------------------------------

NM_NAME = "org.freedesktop.NetworkManager"
NM_PATH = "/org/freedesktop/NetworkManager"
CONN_IFACE = NM_NAME + ".Settings.Connection"
DEVICE_DISCONNECTED = 30

# libnm commits a profile with Settings.Connection.Update2, which python-dbusmock 0.28's
# template lacks.  This one replaces the settings like NetworkManager does (Update merges).
UPDATE2 = (
    "self.settings = args[0]\n"
    "self.EmitSignal('org.freedesktop.NetworkManager.Settings.Connection', 'Updated', '', [])\n"
    "ret = dbus.Dictionary({}, signature='sv')\n"
)


# A profile store that loses user data on the way (netplan's keyfile round trip on Ubuntu splits
# `user` keys at their last dot: canonical/netplan#615): Update2 succeeds, and the profile reads
# back without its `user` setting.
UPDATE2_LOSING_USER_DATA = (
    "self.settings = dbus.Dictionary({k: v for k, v in args[0].items() if k != 'user'},\n"
    "                                signature='sa{sv}')\n"
    "self.EmitSignal('org.freedesktop.NetworkManager.Settings.Connection', 'Updated', '', [])\n"
    "ret = dbus.Dictionary({}, signature='sv')\n"
)


class NetworkManagerMock(MockProcess):
    """python-dbusmock's networkmanager template in its own process, driven with dbus-python."""

    TEMPLATE = "networkmanager"
    BUS_NAME = NM_NAME
    MAIN_OBJ = NM_PATH
    WHAT = "NetworkManager mock"

    def add_wifi(self, ifname: str, ssid: str = "Home", name: str = "home") -> tuple[str, str, str]:
        """A Wi-Fi device, an access point and a profile for it (device not activated)."""
        dev = self.control.AddWiFiDevice(f"dev_{ifname}", ifname, DEVICE_DISCONNECTED)
        ap = self.control.AddAccessPoint(dev, f"ap_{name}", ssid, "00:11:22:33:44:55", 2, 2437,
                                         54000, 80, 0x100)
        conn = self.add_profile(dev, name, ssid)
        return str(dev), str(ap), conn

    def add_profile(self, dev: str, name: str, ssid: str) -> str:
        conn = self.control.AddWiFiConnection(dev, name, ssid, "wpa-psk")
        self.mock_object(conn).AddMethod(CONN_IFACE, "Update2", "a{sa{sv}}ua{sv}", "a{sv}", UPDATE2)
        return str(conn)

    def lose_user_data(self, conn: str) -> None:
        """From now on, saving *conn* silently drops its user data (UPDATE2_LOSING_USER_DATA)."""
        self.mock_object(conn).AddMethod(CONN_IFACE, "Update2", "a{sa{sv}}ua{sv}", "a{sv}",
                                         UPDATE2_LOSING_USER_DATA)

    def activate(self, dev: str, conn: str, ap: str, name: str = "ac0") -> str:
        """The device goes ACTIVATED with *conn*, as NetworkManager signals it."""
        return str(self.control.AddActiveConnection([dev], conn, ap, name, 2))

    def deactivate(self, dev: str) -> None:
        self.control.SetDeviceDisconnected(dev)

    def settings(self, conn: str) -> dict[str, Any]:
        obj = self.connection.get_object(NM_NAME, conn, introspect=False)
        return obj.GetSettings(dbus_interface=CONN_IFACE)

    def user_data(self, conn: str) -> dict[str, str]:
        data = self.settings(conn).get("user", {}).get("data", {})
        return {str(k): str(v) for k, v in data.items()}

    def set_user_data(self, conn: str, data: dict[str, str]) -> None:
        """Replace the profile's user data with Update, as a client of NetworkManager would."""
        settings = self.settings(conn)
        settings["user"] = {"data": self._dbus.Dictionary(data, signature="ss")}
        self.connection.call_blocking(NM_NAME, conn, CONN_IFACE, "Update", "a{sa{sv}}", [settings])

    def rename_profile(self, conn: str, name: str) -> None:
        """Give the profile a new connection id with Update, as `nmcli connection modify ID
        connection.id NAME` would: NM signals Updated."""
        settings = self.settings(conn)
        settings["connection"]["id"] = self._dbus.String(name)
        self.connection.call_blocking(NM_NAME, conn, CONN_IFACE, "Update", "a{sa{sv}}", [settings])


class Polkit(MockProcess):
    """python-dbusmock's polkitd template: says no to every action until told otherwise."""

    TEMPLATE = "polkitd"
    BUS_NAME = "org.freedesktop.PolicyKit1"
    MAIN_OBJ = "/org/freedesktop/PolicyKit1/Authority"
    WHAT = "polkit mock"

    def allow(self, *actions: str) -> None:
        self.control.SetAllowed(list(actions))


class Peers:
    """NetworkManager and wpa_supplicant for one Wi-Fi interface, driven the way the real ones
    behave on connect, reconnect and restart.

    NetworkManager through ``nm`` (dbus-python, blocking: the mock is another process);
    wpa_supplicant through *bus*, a connection of our own D-Bus library.  After ``setup()``:
    ``dev``, ``ap``, ``conn`` (NetworkManager objects), ``iface`` and ``net`` (wpa_supplicant's).
    """

    def __init__(self, bus: MessageBus, ifname: str, wpa: MockSupplicant,
                 nm: NetworkManagerMock) -> None:
        self.bus, self.ifname, self.wpa, self.nm = bus, ifname, wpa, nm
        self.dev = self.ap = self.conn = self.active = self.iface = self.net = ""
        self.n = 0
        self.ssid = "Home"  # the network's SSID (setup)

    async def wpa_mock(self, member, sig="", body=()):
        return await call(self.bus, MockSupplicant.BUS_NAME, MockSupplicant.MAIN_OBJ,
                          "org.freedesktop.DBus.Mock", member, sig, body)

    async def setup(self, bgscan=BGSCAN, user_data=None, activate=True, ssid="Home"):
        """Profile 'Home' on the interface for the network `ssid`, NM's bgscan on its
        wpa_supplicant network, and the device activated (unless *activate* is false)."""
        self.ssid = ssid
        self.dev, self.ap, self.conn = self.nm.add_wifi(self.ifname, ssid)
        if user_data:
            await self.set_user_data(user_data)
        (self.iface,) = await self.wpa_mock("AddWifiInterface", "s", [self.ifname])
        await self.new_network(bgscan)
        if activate:
            await self.activate()

    async def new_network(self, bgscan):
        """What NM does on every activation: AddNetwork + select; the association completes."""
        (self.net,) = await self.wpa_mock("AddNetworkWithBgscan", "oss",
                                          [self.iface, self.ssid, bgscan])
        await self.wpa_mock("SetCurrentNetwork", "oo", [self.iface, self.net])
        return self.net

    async def activate(self):
        self.n += 1
        self.active = self.nm.activate(self.dev, self.conn, self.ap, f"ac{self.n}")

    async def deactivate(self):
        self.nm.deactivate(self.dev)

    async def set_user_data(self, data: dict[str, str]):
        self.nm.set_user_data(self.conn, data)

    async def remove_network(self, net):
        await call(self.bus, MockSupplicant.BUS_NAME, self.iface, "fi.w1.wpa_supplicant1.Interface",
                   "RemoveNetwork", "o", [net])

    async def sets(self, net=None):
        """Every Properties set on the network (*net* or the current one), oldest first."""
        (rows,) = await self.wpa_mock("GetPropertiesSets", "o", [net or self.net])
        return [{k: v.value for k, v in row.items()} for row in rows]

    async def restart_wpa(self, bgscan=BGSCAN):
        self.wpa.restart()
        (self.iface,) = await self.wpa_mock("AddWifiInterface", "s", [self.ifname])
        return await self.new_network(bgscan)

    async def reactivate(self, bgscan=BGSCAN):
        """`nmcli connection up` again: NM removes the network and adds a fresh one with its
        bgscan (wpa_supplicant reuses the id, so usually the same path), then selects it."""
        try:
            await self.remove_network(self.net)
        except BusError:
            pass  # already gone (a wpa_supplicant restart raced us): NM only adds
        return await self.new_network(bgscan)

    async def restart_nm(self, bgscan=BGSCAN):
        """NetworkManager restarts: it leaves the bus, comes back without devices, finds the
        device and profile again and activates it with a fresh wpa_supplicant network."""
        self.nm.stop()
        self.nm.start()
        self.dev, self.ap, self.conn = self.nm.add_wifi(self.ifname)
        net = await self.reactivate(bgscan)
        await self.activate()
        return net

    async def networks(self) -> dict[str, str | None]:
        """Every network of every interface wpa_supplicant has now: path -> bgscan as read
        (quoted), None when the network has no bgscan key."""
        found: dict[str, str | None] = {}
        root = MockSupplicant.MAIN_OBJ
        for iface in await get_property(self.bus, MockSupplicant.BUS_NAME, root,
                                        "fi.w1.wpa_supplicant1", "Interfaces"):
            for net in await get_property(self.bus, MockSupplicant.BUS_NAME, iface,
                                          "fi.w1.wpa_supplicant1.Interface", "Networks"):
                props = await get_property(self.bus, MockSupplicant.BUS_NAME, net,
                                           "fi.w1.wpa_supplicant1.Network", "Properties")
                found[net] = props.get("bgscan")
        return found

    async def clear_wpa_faults(self):
        """Undo SetSetDelay, SetHang and SetFailNext (hung calls are carried out now)."""
        await self.wpa_mock("SetFailNext", "su", ["", 0])
        await self.wpa_mock("SetHang", "b", [False])
        await self.wpa_mock("SetSetDelay", "u", [0])


# ---- the daemon ---------------------------------------------------------------------------------

class DaemonProcess:
    """scanguardd itself (python3 -m nm_scanguard) on the bus at *address*.

    Its configuration file, state directory and log (stdout and stderr) are in *workdir*; a
    second instance in the same *workdir* shares them.  *notify* is a NOTIFY_SOCKET path.
    """

    def __init__(self, address: str, workdir: Path, config: str = "", notify: str | None = None,
                 verbose: bool = True) -> None:
        self.address = address
        self.config = workdir / "scanguard.conf"
        self.config.write_text(config or "[scanguard]\nsample_interval = 0.2\n")
        self.state_dir = workdir / "state"
        self.log_path = workdir / "scanguardd.log"
        self.notify, self.verbose = notify, verbose
        self.process: subprocess.Popen | None = None

    def start(self) -> DaemonProcess:
        env = env_for(self.address)
        if self.notify:
            env["NOTIFY_SOCKET"] = self.notify
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "nm_scanguard", *(["-v"] if self.verbose else []),
                 "-c", str(self.config), "--state-dir", str(self.state_dir)],
                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        return self

    async def wait_ready(self, bus: MessageBus, timeout: float = 10.0) -> None:
        """Until the daemon owns its bus name."""
        deadline = time.monotonic() + timeout
        while not await name_has_owner(bus, NAME):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"scanguardd did not take its bus name:\n{self.log()}")
            await asyncio.sleep(0.02)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process, timeout=10)
            self.process = None

    close = stop

    def returncode(self) -> int | None:
        """The exit status if the process has ended (and was not stopped by us), else None."""
        return self.process.poll() if self.process is not None else None

    def max_rss_kib(self) -> int | None:
        """The process's peak resident memory (VmHWM, KiB) so far; None once it has ended."""
        if self.process is None or self.process.poll() is not None:
            return None
        try:
            with open(f"/proc/{self.process.pid}/status", encoding="ascii") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1])
        except OSError:
            return None
        return None
