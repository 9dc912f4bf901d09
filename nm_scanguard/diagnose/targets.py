"""`scanguardctl diagnose`: the activated Wi-Fi interfaces to record, as NetworkManager
shows them, with each one's access point and its own IPv4 gateway."""

from __future__ import annotations

import ipaddress
import socket
import struct
from dataclasses import dataclass, field
from typing import Any

from ..dbuslib import MessageBus
from ..peers.bus import (
    BusError,
    call,
    get_all,
    get_property,
)
from ..peers.nm import ACTIVE, DEVICE, DEVICE_TYPE_WIFI, STATE_ACTIVATED
from ..peers.nm import NAME as NM
from ..peers.nm import PATH as NM_PATH
from ..text import NAME_CHARS, quoted, shown
from .findings import Link

WIRELESS = NM + ".Device.Wireless"
ACCESS_POINT = NM + ".AccessPoint"
IP4CONFIG = NM + ".IP4Config"
RTF_UP, RTF_GATEWAY = 0x0001, 0x0002  # /proc/net/route's flags (linux/route.h)


@dataclass
class Target:
    """An activated Wi-Fi interface as NetworkManager shows it."""

    interface: str
    ifindex: int
    ssid: bytes = b""
    strength: int | None = None  # NetworkManager's percent
    access_points: int | None = None  # of this SSID, in NetworkManager's list
    gateway: str = ""  # the interface's own IPv4 gateway
    link: Link = field(default_factory=lambda: Link(interface=""))


# ---- NetworkManager --------------------------------------------------------------------------

async def find_targets(bus: MessageBus, only: str | None) -> tuple[list[Target], list[str]]:
    """The activated Wi-Fi interfaces (only `only` when given), and notes on what was skipped."""
    notes: list[str] = []
    (paths,) = await call(bus, NM, NM_PATH, NM, "GetDevices")
    targets = []
    seen = []
    for path in paths:
        try:
            dev = await get_all(bus, NM, path, DEVICE)
        except BusError:
            continue  # gone meanwhile
        if dev.get("DeviceType") != DEVICE_TYPE_WIFI:
            continue
        name = str(dev.get("Interface", ""))
        seen.append(name)
        if only and name != only:
            continue
        if dev.get("State") != STATE_ACTIVATED:
            notes.append(f"{shown(name, NAME_CHARS)} is not connected; skipped")
            continue
        try:
            index = socket.if_nametoindex(name)
        except OSError:
            continue
        target = Target(interface=name, ifindex=index)
        await _read_access_point(bus, path, str(dev.get("ActiveConnection", "/")), target)
        target.gateway = await _gateway(bus, dev, name)
        targets.append(target)
    if only and only not in seen:
        raise LookupError(f"NetworkManager has no Wi-Fi interface {quoted(only)}"
                          + (f" (it has: {', '.join(shown(s, NAME_CHARS) for s in seen)})" if seen
                             else " (it has none)"))
    return targets, notes


async def _read_access_point(bus: MessageBus, path: str, connection: str, target: Target) -> None:
    """The access point's SSID and strength, and how many of the network's NetworkManager
    lists.  The device's ActiveAccessPoint, else the active connection's SpecificObject (which
    NetworkManager also sets to the access point)."""
    try:
        active = await get_property(bus, NM, path, WIRELESS, "ActiveAccessPoint")
    except BusError:
        active = "/"
    try:
        if active in ("", "/") and connection not in ("", "/"):
            active = await get_property(bus, NM, connection, ACTIVE, "SpecificObject")
        if active in ("", "/"):
            return
        ap = await get_all(bus, NM, active, ACCESS_POINT)
        target.ssid = bytes(ap.get("Ssid", b""))
        strength = ap.get("Strength")
        target.strength = None if strength is None else int(strength)
        listed = await get_property(bus, NM, path, WIRELESS, "AccessPoints")
        count = 0
        for ap_path in listed:
            try:
                if bytes(await get_property(bus, NM, ap_path, ACCESS_POINT, "Ssid")) == target.ssid:
                    count += 1
            except BusError:
                continue
        target.access_points = count
    except BusError:
        return


async def _gateway(bus: MessageBus, dev: dict[str, Any], name: str) -> str:
    config = dev.get("Ip4Config", "/")
    if config not in ("", "/"):
        try:
            gateway = str(await get_property(bus, NM, config, IP4CONFIG, "Gateway"))
            if gateway:
                return gateway
        except BusError:
            pass
    return route_gateway(name)


def route_gateway(name: str, path: str = "/proc/net/route") -> str:
    """The interface's own IPv4 gateway from the kernel's main routing table ("" if none): that
    of its default route with the lowest metric, else that of any other route through it.

    The second is for a VPN that owns the default route: the Wi-Fi interface's default route
    may be gone, but the route to the VPN's server still goes through the Wi-Fi's gateway."""
    best: tuple[bool, int, str] | None = None  # (not a default route, metric, gateway)
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            next(f, None)
            for line in f:
                cols = line.split()
                if len(cols) < 4 or cols[0] != name:
                    continue
                if int(cols[3], 16) & (RTF_UP | RTF_GATEWAY) != RTF_UP | RTF_GATEWAY:
                    continue
                gateway = str(ipaddress.IPv4Address(struct.pack("<I", int(cols[2], 16))))
                metric = int(cols[6]) if len(cols) > 6 else 0
                mask = cols[7] if len(cols) > 7 else "00000000"
                here = (not (cols[1] == "00000000" and mask == "00000000"), metric, gateway)
                if best is None or here < best:
                    best = here
    except (OSError, ValueError, struct.error):
        return ""
    return "" if best is None else best[2]
