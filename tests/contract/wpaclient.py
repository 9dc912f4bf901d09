"""A small test client for wpa_supplicant's D-Bus API (real or mock), on nm_scanguard.dbuslib.

Low-level on purpose: ``bus.call(Message(...))`` and raw signal messages, so that the tests see
exactly what is on the wire (error names, variant signatures, signal order).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Awaitable, Iterable
from xml.etree import ElementTree

import pytest

from nm_scanguard.dbuslib import DBusError, Message, MessageBus, MessageType, Variant

BUS_NAME = "fi.w1.wpa_supplicant1"
ROOT_PATH = "/fi/w1/wpa_supplicant1"
ROOT_IFACE = "fi.w1.wpa_supplicant1"
INTERFACE_IFACE = "fi.w1.wpa_supplicant1.Interface"
NETWORK_IFACE = "fi.w1.wpa_supplicant1.Network"
PROPS_IFACE = "org.freedesktop.DBus.Properties"
WPA_INTERFACES = (ROOT_IFACE, INTERFACE_IFACE, NETWORK_IFACE, PROPS_IFACE)


async def error_of(call: Awaitable[Any]) -> DBusError:
    """The error a call must end in (the test fails if it succeeds)."""
    with pytest.raises(DBusError) as info:
        await call
    return info.value


def error_detail(err: DBusError) -> str | None:
    """What wpa_supplicant's InvalidArgs says beyond its fixed text: its second string argument
    (the offending key, or a sentence), None when the error has none."""
    body = err.reply.body if err.reply is not None else []
    return body[1] if len(body) > 1 else None


@dataclass(frozen=True)
class Introspected:
    """One interface of an Introspect answer, as the types on the wire (argument names left out).

    methods: name -> ((direction, type), ...); signals: name -> (type, ...);
    properties: name -> (type, access)."""

    methods: dict[str, tuple[tuple[str, str], ...]]
    signals: dict[str, tuple[str, ...]]
    properties: dict[str, tuple[str, str]]


def parse_introspection(xml: str, interface: str) -> Introspected:
    node = ElementTree.fromstring(xml).find(f"interface[@name='{interface}']")
    assert node is not None, f"{interface} is not introspected"
    return Introspected(
        methods={m.get("name", ""): tuple((a.get("direction", "in"), a.get("type", ""))
                                          for a in m.findall("arg"))
                 for m in node.findall("method")},
        signals={s.get("name", ""): tuple(a.get("type", "") for a in s.findall("arg"))
                 for s in node.findall("signal")},
        properties={p.get("name", ""): (p.get("type", ""), p.get("access", ""))
                    for p in node.findall("property")})


class WpaClient:
    """Calls into fi.w1.wpa_supplicant1 and records every signal it sends.

    ``kind`` names the backend ("real", "mock", "model") and ``iface`` is the interface a
    contract scenario runs on (tests/contract/wpa_scenarios.py), once the fixture made it."""

    def __init__(self, bus: MessageBus):
        self.bus = bus
        self.signals: list[Message] = []
        self.kind = ""
        self.iface = ""

    @classmethod
    async def connect(cls, bus: MessageBus) -> "WpaClient":
        client = cls(bus)
        bus.add_message_handler(client._on_message)
        await client.call_bus("AddMatch", "s", [f"type='signal',sender='{BUS_NAME}'"])
        return client

    def _on_message(self, msg: Message) -> None:
        if msg.message_type == MessageType.SIGNAL and msg.interface in WPA_INTERFACES:
            self.signals.append(msg)

    async def call_bus(self, member: str, signature: str = "", body: Iterable[Any] = ()) -> list:
        reply = await self.bus.call(Message(
            destination="org.freedesktop.DBus", path="/org/freedesktop/DBus",
            interface="org.freedesktop.DBus", member=member, signature=signature,
            body=list(body)))
        return _body_or_raise(reply)

    async def call(self, path: str, interface: str, member: str, signature: str = "",
                   body: Iterable[Any] = ()) -> list:
        reply = await self.bus.call(Message(
            destination=BUS_NAME, path=path, interface=interface, member=member,
            signature=signature, body=list(body)))
        return _body_or_raise(reply)

    async def has_owner(self) -> bool:
        return (await self.call_bus("NameHasOwner", "s", [BUS_NAME]))[0]

    async def introspect(self, path: str, interface: str) -> Introspected:
        xml = (await self.call(path, "org.freedesktop.DBus.Introspectable", "Introspect"))[0]
        return parse_introspection(xml, interface)

    # --- properties ---
    async def get(self, path: str, interface: str, name: str) -> Variant:
        return (await self.call(path, PROPS_IFACE, "Get", "ss", [interface, name]))[0]

    async def set(self, path: str, interface: str, name: str, value: Variant) -> None:
        await self.call(path, PROPS_IFACE, "Set", "ssv", [interface, name, value])

    async def network_properties(self, net: str) -> dict[str, str]:
        """A network's Properties as {key: string}; fails if a value is not a string."""
        variant = await self.get(net, NETWORK_IFACE, "Properties")
        assert variant.signature == "a{sv}"
        assert all(v.signature == "s" for v in variant.value.values()), variant.value
        return {k: v.value for k, v in variant.value.items()}

    async def set_network_properties(self, net: str, values: dict[str, Variant]) -> None:
        await self.set(net, NETWORK_IFACE, "Properties", Variant("a{sv}", values))

    # --- methods ---
    async def create_interface(self, ifname: str, driver: str = "none") -> str:
        args = {"Ifname": Variant("s", ifname), "Driver": Variant("s", driver)}
        return (await self.call(ROOT_PATH, ROOT_IFACE, "CreateInterface", "a{sv}", [args]))[0]

    async def get_interface(self, ifname: str) -> str:
        return (await self.call(ROOT_PATH, ROOT_IFACE, "GetInterface", "s", [ifname]))[0]

    async def add_network(self, iface: str, **values: str) -> str:
        args = {k: Variant("s", v) for k, v in values.items()}
        return (await self.call(iface, INTERFACE_IFACE, "AddNetwork", "a{sv}", [args]))[0]

    async def select_network(self, iface: str, net: str) -> None:
        await self.call(iface, INTERFACE_IFACE, "SelectNetwork", "o", [net])

    async def remove_network(self, iface: str, net: str) -> None:
        await self.call(iface, INTERFACE_IFACE, "RemoveNetwork", "o", [net])

    async def remove_interface(self, iface: str) -> None:
        await self.call(ROOT_PATH, ROOT_IFACE, "RemoveInterface", "o", [iface])

    # --- recorded signals ---
    def signals_of(self, member: str, path: str | None = None,
                   interface: str | None = None) -> list[Message]:
        return [s for s in self.signals
                if s.member == member and (path is None or s.path == path)
                and (interface is None or s.interface == interface)]

    def property_changes(self, path: str, interface: str) -> list[tuple[str, dict[str, Any]]]:
        """Every announced change on *path*, as (kind, {name: value}) in arrival order.

        kind is "standard" for org.freedesktop.DBus.Properties.PropertiesChanged and
        "legacy" for wpa_supplicant's own <interface>.PropertiesChanged(a{sv}).
        """
        changes = []
        for s in self.signals:
            if s.path != path or s.member != "PropertiesChanged":
                continue
            if s.interface == PROPS_IFACE and s.body[0] == interface:
                changes.append(("standard", {k: v.value for k, v in s.body[1].items()}))
            elif s.interface == interface:
                changes.append(("legacy", {k: v.value for k, v in s.body[0].items()}))
        return changes

    def announced(self, path: str, interface: str, name: str, value: Any) -> set[str]:
        """Which kinds of PropertiesChanged announced *name* = *value* on *path*."""
        return {kind for kind, values in self.property_changes(path, interface)
                if values.get(name, object()) == value}


def _body_or_raise(reply: Message) -> list:
    if reply.message_type == MessageType.ERROR:
        raise DBusError(reply.error_name, reply.body[0] if reply.body else "", reply)
    return reply.body
