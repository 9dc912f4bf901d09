"""The pieces the API and access tests share: a client for our bus API, the real CLI, and the
running scenario (the daemon as a process following one activated Wi-Fi interface).

The bus, the mocks, the link and the daemon process come from tests/conftest.py and tests/peers.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, AsyncIterator

from nm_scanguard.names import BUS_NAME as NAME, IFACE, PATH
from nm_scanguard.peers.bus import add_match, unwrap
from nm_scanguard.dbuslib import Message, MessageBus, MessageType
from tests.conftest import MockSupplicant, assert_eventually, call_failed
from tests.peers import (BGSCAN, REPO, DaemonProcess, Link, NetworkManagerMock,  # noqa: F401
                         Peers, env_for)


# ---- a client of our API, on the test's own connection ------------------------------------

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


async def named_holds(bus: MessageBus) -> list[dict[str, Any]]:
    """GetActiveHolds: every hold named for root (the tests' own connection), the property
    names nobody."""
    reply = await api_call(bus, "GetActiveHolds")
    assert reply.message_type == MessageType.METHOD_RETURN, reply.body
    return list(unwrap(reply.body[0]))


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
        await add_match(self.bus, f"type='signal',path='{PATH}'")

    def _on(self, msg: Message) -> None:
        if msg.message_type == MessageType.SIGNAL and msg.path == PATH:
            self.received.append(msg)

    def named(self, member: str) -> list[list[Any]]:
        return [unwrap(m.body) for m in self.received if m.member == member]


def scanguardctl(address: str, *args: str, timeout: float = 30, user: str | None = None,
                 **kwargs: Any) -> subprocess.CompletedProcess:
    """Run the real CLI against the private bus, optionally as another user (setpriv)."""
    cmd = [sys.executable, "-m", "nm_scanguard.cli.scanguardctl", *args]
    if user:
        cmd = ["setpriv", f"--reuid={user}", "--regid=nogroup", "--clear-groups", *cmd]
    return subprocess.run(cmd, env=env_for(address), cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, **kwargs)


def kill(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)
    process.wait()


class Scenario(Peers):
    """The peers of one activated Wi-Fi interface, scanguardd following it, and the test's own
    client connection (``bus``) on the private bus at ``address``."""

    def __init__(self, address: str, bus: MessageBus, ifname: str, nm: NetworkManagerMock,
                 wpa: MockSupplicant, daemon: DaemonProcess) -> None:
        super().__init__(bus, ifname, wpa, nm)
        self.address, self.daemon = address, daemon

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
    s = Scenario(address, bus, link.ifname, nm, wpa, daemon)
    try:
        await s.setup()
        daemon.start()
        await daemon.wait_ready(bus)
        await assert_eventually(s.state, timeout=10, message="daemon follows the interface")
        yield s
    finally:
        bus.disconnect()
        daemon.stop()
        if call_failed(request):
            print(f"--- scanguardd log ---\n{daemon.log()}")
