"""The pieces the API and policy tests share: NetworkManager mocked by python-dbusmock, a veth
interface with no traffic, the real daemon as a process, and a client for our bus API.

The bus and the wpa_supplicant mock come from tests/conftest.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator

from nm_scanguard.api import IFACE, NAME, PATH
from nm_scanguard.bus import unwrap
from nm_scanguard.dbuslib import Message, MessageBus, MessageType
from tests.conftest import MockSupplicant, assert_eventually, call_failed, stop_process

REPO = Path(__file__).resolve().parents[2]

NM_NAME = "org.freedesktop.NetworkManager"
NM_PATH = "/org/freedesktop/NetworkManager"
CONN_IFACE = NM_NAME + ".Settings.Connection"
MOCK_IFACE = "org.freedesktop.DBus.Mock"
DEVICE_DISCONNECTED = 30
BGSCAN = "simple:30:-70:86400"

# libnm commits a profile with Settings.Connection.Update2, which python-dbusmock 0.28's
# template lacks.  This one replaces the settings like NetworkManager does (Update merges).
UPDATE2 = (
    "self.settings = args[0]\n"
    "self.EmitSignal('org.freedesktop.NetworkManager.Settings.Connection', 'Updated', '', [])\n"
    "ret = dbus.Dictionary({}, signature='sv')\n"
)


def env_for(address: str) -> dict[str, str]:
    env = dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=address, PYTHONPATH=str(REPO))
    env.pop("NOTIFY_SOCKET", None)
    return env


class Link:
    """A veth pair left down: a real interface whose counters exist and never move."""

    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:6]
        self.ifname, self.peer = f"sga{tag}", f"sgb{tag}"
        subprocess.run(["ip", "link", "add", self.ifname, "type", "veth", "peer", "name", self.peer],
                       check=True)

    def remove(self) -> None:
        subprocess.run(["ip", "link", "del", self.ifname], stderr=subprocess.DEVNULL)


class NetworkManagerMock:
    """python-dbusmock's networkmanager template in its own process, driven with dbus-python."""

    def __init__(self, address: str, log_path: Path) -> None:
        import dbus

        self.dbus = dbus
        self.log_path = log_path
        self.connection = dbus.bus.BusConnection(address)
        with open(log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "dbusmock", "--system", "--template", "networkmanager"],
                stdout=log, stderr=subprocess.STDOUT, env=env_for(address))
        deadline = time.monotonic() + 10
        while not self.connection.name_has_owner(NM_NAME):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"NetworkManager mock did not start:\n{log_path.read_text()}")
            time.sleep(0.01)
        self.control = self.mock_object(NM_PATH)

    def mock_object(self, path: str) -> Any:
        obj = self.connection.get_object(NM_NAME, path, introspect=False)
        return self.dbus.Interface(obj, MOCK_IFACE)

    def add_wifi(self, ifname: str, ssid: str = "Home", name: str = "home") -> tuple[str, str, str]:
        """A Wi-Fi device, an access point and a profile for it (device not activated)."""
        dev = self.control.AddWiFiDevice(f"dev_{ifname}", ifname, DEVICE_DISCONNECTED)
        ap = self.control.AddAccessPoint(dev, f"ap_{name}", ssid, "00:11:22:33:44:55", 2, 2437,
                                         54000, 80, 0x100)
        conn = self.add_profile(dev, name, ssid)
        return dev, ap, conn

    def add_profile(self, dev: str, name: str, ssid: str) -> str:
        conn = self.control.AddWiFiConnection(dev, name, ssid, "wpa-psk")
        self.mock_object(conn).AddMethod(CONN_IFACE, "Update2", "a{sa{sv}}ua{sv}", "a{sv}", UPDATE2)
        return conn

    def activate(self, dev: str, conn: str, ap: str, name: str = "ac0") -> str:
        return self.control.AddActiveConnection([dev], conn, ap, name, 2)

    def settings(self, conn: str) -> dict[str, Any]:
        obj = self.connection.get_object(NM_NAME, conn, introspect=False)
        return obj.GetSettings(dbus_interface=CONN_IFACE)

    def user_data(self, conn: str) -> dict[str, str]:
        data = self.settings(conn).get("user", {}).get("data", {})
        return {str(k): str(v) for k, v in data.items()}

    def close(self) -> None:
        stop_process(self.process)
        self.connection.close()


class Polkit:
    """python-dbusmock's polkitd template: says no to every action until told otherwise."""

    NAME = "org.freedesktop.PolicyKit1"

    def __init__(self, address: str, log_path: Path) -> None:
        import dbus

        self.connection = dbus.bus.BusConnection(address)
        with open(log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "dbusmock", "--system", "--template", "polkitd"],
                stdout=log, stderr=subprocess.STDOUT, env=env_for(address))
        deadline = time.monotonic() + 10
        while not self.connection.name_has_owner(self.NAME):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise RuntimeError(f"polkit mock did not start:\n{log_path.read_text()}")
            time.sleep(0.01)
        obj = self.connection.get_object(self.NAME, "/org/freedesktop/PolicyKit1/Authority",
                                         introspect=False)
        self.control = dbus.Interface(obj, MOCK_IFACE)

    def allow(self, *actions: str) -> None:
        self.control.SetAllowed(list(actions))

    def close(self) -> None:
        stop_process(self.process)
        self.connection.close()


class DaemonProcess:
    """scanguardd itself (python3 -m nm_scanguard), on the private bus."""

    def __init__(self, address: str, workdir: Path, config: str = "") -> None:
        self.address = address
        self.config = workdir / "scanguard.conf"
        self.config.write_text(config or "[scanguard]\nsample_interval = 0.2\n")
        self.state_dir = workdir / "state"
        self.log_path = workdir / "scanguardd.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "nm_scanguard", "-v", "-c", str(self.config),
                 "--state-dir", str(self.state_dir)],
                stdout=log, stderr=subprocess.STDOUT, env=env_for(self.address), cwd=REPO)

    async def wait_ready(self, bus: MessageBus, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not await has_owner(bus, NAME):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"scanguardd did not take its bus name:\n{self.log()}")
            await asyncio.sleep(0.02)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.process is not None:
            stop_process(self.process, timeout=10)
            self.process = None


# ---- a client of our API, on the test's own connection ------------------------------------

async def has_owner(bus: MessageBus, name: str) -> bool:
    reply = await bus.call(Message(destination="org.freedesktop.DBus", path="/org/freedesktop/DBus",
                                   interface="org.freedesktop.DBus", member="NameHasOwner",
                                   signature="s", body=[name]))
    return bool(reply.body[0])


async def api_call(bus: MessageBus, member: str, signature: str = "", body: list | None = None,
                   interface: str | None = IFACE, flags: int = 0) -> Message:
    """Call our service; returns the reply, error or not, so that tests can look at errors."""
    return await asyncio.wait_for(bus.call(Message(
        destination=NAME, path=PATH, interface=interface, member=member, signature=signature,
        body=body or [])), 10)


async def props(bus: MessageBus) -> dict[str, Any]:
    reply = await api_call(bus, "GetAll", "s", [IFACE], interface="org.freedesktop.DBus.Properties")
    assert reply.message_type == MessageType.METHOD_RETURN, reply.body
    return unwrap(reply.body[0])


def error_of(reply: Message) -> tuple[str, str] | None:
    if reply.message_type != MessageType.ERROR:
        return None
    return reply.error_name, reply.body[0] if reply.body else ""


class Signals:
    """Collects the signals our service sends to one connection."""

    def __init__(self, bus: MessageBus) -> None:
        self.bus = bus
        self.received: list[Message] = []
        bus.add_message_handler(self._on)

    async def subscribe(self) -> None:
        await bus_call(self.bus, "AddMatch", "s", [f"type='signal',path='{PATH}'"])

    def _on(self, msg: Message) -> None:
        if msg.message_type == MessageType.SIGNAL and msg.path == PATH:
            self.received.append(msg)

    def named(self, member: str) -> list[list[Any]]:
        return [unwrap(m.body) for m in self.received if m.member == member]


async def bus_call(bus: MessageBus, member: str, signature: str, body: list) -> list[Any]:
    reply = await bus.call(Message(destination="org.freedesktop.DBus", path="/org/freedesktop/DBus",
                                   interface="org.freedesktop.DBus", member=member,
                                   signature=signature, body=body))
    assert reply.message_type == MessageType.METHOD_RETURN, reply.body
    return reply.body


def scanguardctl(address: str, *args: str, timeout: float = 30, user: str | None = None,
                 **kwargs: Any) -> subprocess.CompletedProcess:
    """Run the real CLI against the private bus, optionally as another user (setpriv)."""
    cmd = [sys.executable, "-m", "nm_scanguard.cli", *args]
    if user:
        cmd = ["setpriv", f"--reuid={user}", "--regid=nogroup", "--clear-groups", *cmd]
    return subprocess.run(cmd, env=env_for(address), cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, **kwargs)


def kill(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)
    process.wait()


@dataclass
class Scenario:
    address: str
    ifname: str
    nm: NetworkManagerMock
    wpa: MockSupplicant
    daemon: DaemonProcess
    bus: MessageBus  # the test's own client connection
    dev: str = ""
    ap: str = ""
    conn: str = ""
    iface: str = ""
    net: str = ""

    def bgscan(self) -> str:
        """The network's bgscan as wpa_supplicant reports it (quoted), "" if absent."""
        obj = self.wpa.connection.get_object("fi.w1.wpa_supplicant1", self.net, introspect=False)
        value = obj.Get("fi.w1.wpa_supplicant1.Network", "Properties",
                        dbus_interface="org.freedesktop.DBus.Properties")
        return str(value.get("bgscan", ""))

    async def device(self) -> dict[str, Any] | None:
        for d in (await props(self.bus))["Devices"]:
            if d["interface"] == self.ifname:
                return d
        return None

    async def state(self) -> str | None:
        d = await self.device()
        return d["state"] if d else None


@contextlib.asynccontextmanager
async def running_scenario(address: str, nm: NetworkManagerMock, wpa: MockSupplicant, link: Link,
                           workdir: Path, request: Any) -> AsyncIterator[Scenario]:
    """Connect 'Home' on `link` (NM's bgscan on its wpa_supplicant network), start scanguardd,
    wait until it follows the interface; stop it afterwards and show its log if the test failed."""
    daemon = DaemonProcess(address, workdir)
    bus = await MessageBus(bus_address=address).connect()
    s = Scenario(address, link.ifname, nm, wpa, daemon, bus)
    try:
        s.dev, s.ap, s.conn = nm.add_wifi(link.ifname)
        s.iface = str(wpa.control.AddWifiInterface(link.ifname))
        s.net = str(wpa.control.AddNetworkWithBgscan(s.iface, "Home", BGSCAN))
        wpa.control.SetCurrentNetwork(s.iface, s.net)
        nm.activate(s.dev, s.conn, s.ap)
        daemon.start()
        await daemon.wait_ready(bus)
        await assert_eventually(s.state, timeout=10, message="daemon follows the interface")
        yield s
    finally:
        bus.disconnect()
        daemon.stop()
        if call_failed(request):
            print(f"--- scanguardd log ---\n{daemon.log()}")
