"""`scanguardctl diagnose`: record latency, throughput and every scan, then say what they show.

Runs as an ordinary user and changes nothing: it reads NetworkManager's and the guard's public
properties, sends ICMP echoes to the Wi-Fi interface's own gateway (or `--target`) from an
unprivileged ping socket bound to that interface (what `net.ipv4.ping_group_range` allows;
systemd opens it to every group), so that they cross the Wi-Fi also when a VPN owns the
default route, reads the interface's byte counters from sysfs once a second, and listens to
the kernel's nl80211 scan events, which any user may receive and which show every scan
whoever asked for it.  wpa_supplicant is asked
for the bgscan string and the signal where its D-Bus policy lets the user (root and group
`netdev` on Debian); otherwise the report says what it used instead.

What was seen goes into a `findings.Recording`; who asked for each scan is decided at the end,
with all the evidence (`attribution`), and `findings` makes the figures and the verdict.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import os
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .. import attribution
from ..attribution import GEOCLUE_NAME, Evidence, Request
from ..dbuslib import MessageBus
from ..names import ACCESS_DENIED, BUS_NAME, UNKNOWN_METHOD
from ..names import IFACE as GUARD_IFACE
from ..names import PATH as GUARD_PATH
from ..peers.bus import (
    BusError,
    call,
    connect_system,
    get_all,
    get_property,
    name_has_owner,
    owner_pid,
    unwrap,
)
from ..peers.nl80211 import Nl80211Error, ScanEvent, ScanEvents
from ..peers.nm import ACTIVE, DEVICE, DEVICE_TYPE_WIFI, STATE_ACTIVATED
from ..peers.nm import NAME as NM
from ..peers.nm import PATH as NM_PATH
from ..peers.supplicant import Supplicant, SupplicantError
from ..text import NAME_CHARS, clipped, quoted, shown
from .findings import ECHO_TIMEOUT, TRY_TARGET, Echo, Guard, Link, Recording, Scan, Second, explain_bgscan

WIRELESS = NM + ".Device.Wireless"
ACCESS_POINT = NM + ".AccessPoint"
IP4CONFIG = NM + ".IP4Config"

ECHO_INTERVAL = 0.2  # seconds between echoes: five a second
SAMPLE_INTERVAL = 1.0  # counters, the guard's state
ECHO_ID = 0  # a ping socket's kernel chooses the identifier
ICMP_ECHO_REQUEST, ICMP_ECHO_REPLY = 8, 0
ICMP_HEADER = struct.Struct("!BBHHH")  # type, code, checksum, identifier, sequence
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


# ---- latency ---------------------------------------------------------------------------------

def address_argument(text: str) -> str:
    """`--target ADDR` as argparse reads it: the address of one IPv4 host, written as digits
    (names are not looked up: a lookup could go through the VPN's resolver, or hang)."""
    if not text:
        return text  # argparse passes the default "" through here too: the gateway
    try:
        address = ipaddress.IPv4Address(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{quoted(text)} is not an IPv4 address; give one such as 192.168.1.1 (a host "
            "name is not looked up)") from None
    if address.is_multicast or address.is_unspecified or address.packed == b"\xff" * 4:
        raise argparse.ArgumentTypeError(f"{quoted(text)} is not the address of one host; give "
                                         "one such as 192.168.1.1")
    return str(address)


def ping_groups(path: str = "/proc/sys/net/ipv4/ping_group_range") -> str:
    try:
        with open(path, encoding="ascii") as f:
            return " ".join(f.read().split())
    except OSError:
        return "unreadable"


def checksum(data: bytes) -> int:
    """The Internet checksum (RFC 1071) that a raw socket's echo must carry itself."""
    if len(data) % 2:
        data += b"\0"
    total = int(sum(struct.unpack(f"!{len(data) // 2}H", data)))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def echo_request(seq: int, ident: int | None = None, payload: bytes = b"nm-scanguard diagnose") -> bytes:
    """An ICMP echo request.  For a ping socket (`ident` None) the kernel sets the identifier
    and the checksum (net/ipv4/ping.c); a raw socket's must carry both."""
    if ident is None:
        return ICMP_HEADER.pack(ICMP_ECHO_REQUEST, 0, 0, ECHO_ID, seq & 0xFFFF) + payload
    bare = ICMP_HEADER.pack(ICMP_ECHO_REQUEST, 0, 0, ident, seq & 0xFFFF) + payload
    return ICMP_HEADER.pack(ICMP_ECHO_REQUEST, 0, checksum(bare), ident, seq & 0xFFFF) + payload


def echo_reply_seq(data: bytes, ident: int | None = None) -> int | None:
    """The sequence number of an echo reply, or None.  A raw socket receives the IP header
    first and every process's replies: those with another identifier are not ours."""
    if ident is not None:
        if len(data) < 20:
            return None
        data = data[(data[0] & 0x0F) * 4:]
    if len(data) < ICMP_HEADER.size:
        return None
    kind, code, _sum, their_ident, seq = ICMP_HEADER.unpack_from(data)
    if kind != ICMP_ECHO_REPLY or code != 0 or (ident is not None and their_ident != ident):
        return None
    return int(seq)


class Pinger:
    """ICMP echoes to one address from an unprivileged ping socket, ECHO_INTERVAL apart.
    Each echo lands in `link.echoes` once answered or once ECHO_TIMEOUT has passed.

    With `device`, the socket is bound to that interface (SO_BINDTODEVICE, which Linux allows
    an ordinary user since 5.7 on a socket not yet bound): the echoes leave through it whatever
    the routing table prefers, e.g. a VPN's default route.  `bound` says whether that worked."""

    def __init__(self, address: str, echoes: list[Echo], clock: Callable[[], float],
                 raw: bool = False, device: str = "") -> None:
        self.address = address
        self.echoes = echoes
        self.clock = clock
        self.pending: dict[int, float] = {}
        self.seq = 0
        # A raw socket (root only) when the ping socket is not allowed: it needs its own id.
        self.ident = (os.getpid() & 0xFFFF) if raw else None
        kind = socket.SOCK_RAW if raw else socket.SOCK_DGRAM
        self.sock = socket.socket(socket.AF_INET, kind | socket.SOCK_NONBLOCK | socket.SOCK_CLOEXEC,
                                  socket.IPPROTO_ICMP)
        self.bound = False
        if device:
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE,
                                     os.fsencode(device))
                self.bound = True
            except OSError:
                pass  # a kernel before 5.7 wants CAP_NET_RAW: the routing table decides
        asyncio.get_running_loop().add_reader(self.sock.fileno(), self._receive)

    def send(self) -> None:
        self.expire()
        self.seq = (self.seq + 1) & 0xFFFF
        now = self.clock()
        try:
            self.sock.sendto(echo_request(self.seq, self.ident), (self.address, 0))
        except OSError:
            self.echoes.append(Echo(now, None))  # no route, for instance: as good as lost
            return
        self.pending[self.seq] = now

    def _receive(self) -> None:
        while True:
            try:
                data = self.sock.recv(2048)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return  # an ICMP error for an echo: it stays pending and times out
            seq = echo_reply_seq(data, self.ident)
            sent = self.pending.pop(seq, None) if seq is not None else None
            if sent is not None:
                self.echoes.append(Echo(sent, (self.clock() - sent) * 1000.0))

    def expire(self, final: bool = False) -> None:
        now = self.clock()
        for seq, sent in list(self.pending.items()):
            if final or now - sent >= ECHO_TIMEOUT:
                del self.pending[seq]
                if now - sent >= ECHO_TIMEOUT:
                    self.echoes.append(Echo(sent, None))
        self.echoes.sort(key=lambda e: e.sent)

    def close(self) -> None:
        with contextlib.suppress(RuntimeError):
            asyncio.get_running_loop().remove_reader(self.sock.fileno())
        self.sock.close()


def open_pinger(target: Target, clock: Callable[[], float], address: str = "") -> Pinger | None:
    """A Pinger for `address` (else the target's gateway) through the target's interface, or
    None.  Says in the target's link how latency is measured, or why not and what to try."""
    link = target.link
    interface = shown(target.interface, NAME_CHARS)
    link.target = address or target.gateway
    if not link.target:
        link.latency_method = (f"{interface} has no IPv4 gateway of its own to send echoes to: "
                               "NetworkManager names none, and no route in the kernel's main "
                               f"table goes through one on {interface}")
        link.latency_try = TRY_TARGET.format(interface=interface)
        return None
    what = (f"ICMP echo to {shown(address, NAME_CHARS)} (--target)" if address else
            f"ICMP echo to the gateway {shown(target.gateway, NAME_CHARS)}")
    try:
        pinger = Pinger(link.target, link.echoes, clock, device=target.interface)
        how = "unprivileged ping socket"
    except PermissionError:
        try:
            pinger = Pinger(link.target, link.echoes, clock, raw=True, device=target.interface)
        except OSError:
            link.latency_method = (f"unprivileged ICMP echo is not allowed here "
                                   f"(net.ipv4.ping_group_range is '{ping_groups()}', which "
                                   "does not include your groups); root can widen it, e.g. "
                                   "sysctl net.ipv4.ping_group_range='0 2147483647'")
            return None
        how = "raw socket: the ping socket is not allowed, but you may open raw ones"
    except OSError as e:
        link.latency_method = f"cannot open an ICMP socket ({e.strerror or e})"
        return None
    through = (f"through {interface}" if pinger.bound else
               f"not bound to {interface}: the routing table chooses the way")
    link.latency_method = f"{what} {through} every {ECHO_INTERVAL:g} s ({how})"
    return pinger


# ---- counters --------------------------------------------------------------------------------

def read_bytes(name: str, root: str = "/sys/class/net") -> tuple[int, int] | None:
    try:
        with open(f"{root}/{name}/statistics/rx_bytes", encoding="ascii") as f:
            rx = int(f.read())
        with open(f"{root}/{name}/statistics/tx_bytes", encoding="ascii") as f:
            tx = int(f.read())
    except (OSError, ValueError):
        return None
    return rx, tx


# ---- the signal, bgscan, GeoClue -------------------------------------------------------------

def proc_wireless_dbm(name: str, path: str = "/proc/net/wireless") -> int | None:
    """The signal level cfg80211's wireless-extensions view gives (dBm), or None."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            for line in f:
                head, _, rest = line.partition(":")
                if head.strip() != name:
                    continue
                cols = rest.split()
                if len(cols) >= 3:
                    level = int(float(cols[2].rstrip(".")))
                    return level if level < 0 else None
    except (OSError, ValueError):
        pass
    return None




def geoclue_pid(proc: str = "/proc") -> int | None:
    """A running GeoClue daemon's pid (its comm is "geoclue"), or None."""
    try:
        entries = os.listdir(proc)
    except OSError:
        return None
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"{proc}/{entry}/comm", encoding="utf-8", errors="replace") as f:
                if f.read().strip() == "geoclue":
                    return int(entry)
        except OSError:
            continue
    return None


async def read_supplicant(bus: MessageBus, target: Target, guard_status: dict[str, Any]) -> None:
    """The bgscan string and the signal, from wpa_supplicant where its policy lets us read;
    otherwise what the guard or the kernel can tell."""
    link = target.link
    sup = Supplicant(bus)
    denied = ""
    refused = False
    try:
        iface = await sup.interface(target.interface)
        net = await sup.current_network(iface)
        if net is not None:
            link.bgscan = await sup.get_bgscan(net)
            link.bgscan_source = "read from wpa_supplicant"
            saved = str(guard_status.get("suspended_bgscan") or "")
            link.bgscan_words = explain_bgscan(link.bgscan, access_points=target.access_points,
                                               suspended_by_guard=bool(saved))
            if link.bgscan == "" and saved:
                link.bgscan_words += (f"; NetworkManager's '{clipped(saved)}' means "
                                      + explain_bgscan(saved, access_points=target.access_points))
        try:
            dbm = await sup.signal(iface)
        except SupplicantError:
            dbm = None
        if dbm is not None:
            link.signal_dbm, link.signal_source = dbm, "wpa_supplicant"
    except SupplicantError as e:
        denied = str(e)
        refused = e.bus_error == ACCESS_DENIED
    if link.bgscan_source == "":
        suspended = guard_status.get("suspended_bgscan")
        why = ("wpa_supplicant lets only root and group netdev read it" if refused else
               f"wpa_supplicant could not be asked: {clipped(denied or 'no current network', 200)}")
        if suspended:
            link.bgscan = ""
            link.bgscan_source = ("nm-scanguard reports it suspended NetworkManager's "
                                  f"'{clipped(str(suspended))}'")
            link.bgscan_words = (explain_bgscan("", suspended_by_guard=True)
                                 + f"; NetworkManager's '{clipped(str(suspended))}' means "
                                 + explain_bgscan(str(suspended),
                                                  access_points=target.access_points))
        else:
            link.bgscan_source = f"not read ({why})"
    if link.signal_dbm is None:
        dbm = proc_wireless_dbm(target.interface)
        if dbm is not None:
            link.signal_dbm, link.signal_source = dbm, "/proc/net/wireless"
        elif guard_status.get("signal_dbm") is not None:
            link.signal_dbm, link.signal_source = int(guard_status["signal_dbm"]), "nm-scanguard"
        elif target.strength is not None:
            link.signal_source = f"NetworkManager shows {target.strength} % only"


# ---- the guard -------------------------------------------------------------------------------

async def guard_properties(bus: MessageBus) -> tuple[bool, bool, dict[str, Any], str]:
    """(installed, running, properties, detail) of the scanguard service, without starting it."""
    try:
        running = await name_has_owner(bus, BUS_NAME)
        (names,) = await call(bus, "org.freedesktop.DBus", "/org/freedesktop/DBus",
                              "org.freedesktop.DBus", "ListActivatableNames")
    except BusError as e:
        return False, False, {}, f"the bus could not be asked ({shown(e.name)})"
    installed = running or BUS_NAME in names
    if not running:
        return installed, False, {}, ""
    try:
        props = await get_all(bus, BUS_NAME, GUARD_PATH, GUARD_IFACE)
    except BusError as e:
        return True, True, {}, f"its status could not be read ({shown(e.text or e.name)})"
    try:  # the property names nobody; the method names this user's own requests
        (props["RecentScanRequests"],) = unwrap(await call(
            bus, BUS_NAME, GUARD_PATH, GUARD_IFACE, "GetRecentScanRequests"))
    except BusError as e:
        if e.name != UNKNOWN_METHOD:  # UnknownMethod: a daemon older than the method
            return True, True, props, ("its scan requests could not be read "
                                       f"({shown(e.text or e.name)})")
    return True, True, props, ""


def device_of(props: dict[str, Any], interface: str) -> dict[str, Any]:
    for d in props.get("Devices", []):
        d = unwrap(d)
        if d.get("interface") == interface:
            return dict(d)
    return {}


def evidence_from(props: dict[str, Any], interface: str, ssid: bytes,
                  geoclue: int | None) -> Evidence:
    """The guard's records (its own roaming scans on this interface, the NetworkManager scan
    requests its polkit rule saw) as attribution evidence, beside what diagnose saw itself."""
    device = device_of(props, interface)
    own = [float(t) for t in device.get("own_scans", [])]
    requests = []
    for entry in props.get("RecentScanRequests", []):
        try:
            at, user, pid, program, _refused = entry
            requests.append(Request(at=float(at), user=str(user), pid=int(pid), program=str(program)))
        except (TypeError, ValueError):
            continue
    return Evidence(current_ssid=ssid or None, own_scans=own, client_requests=requests,
                    geoclue_pid=geoclue)


# ---- the recording ---------------------------------------------------------------------------

@dataclass
class Open:
    """A scan that has started and not ended yet."""

    scan: Scan
    wall: float


class Recorder:
    def __init__(self, targets: list[Target], clock: Callable[[], float] = time.monotonic) -> None:
        self.targets = {t.ifindex: t for t in targets}
        self.clock = clock
        self.t0 = clock()
        self.wall0 = time.time()  # the wall clock at t0: what the recording's times count from
        self.open: dict[int, Open] = {}
        self.walls: dict[int, float] = {}  # id(scan) -> wall clock at its start
        self.unmatched_ends = 0

    def now(self) -> float:
        return self.clock() - self.t0

    def on_event(self, event: ScanEvent, monotonic: float, realtime: float) -> None:
        target = self.targets.get(event.ifindex or -1)
        if target is None:
            return
        at = monotonic - self.t0
        if event.kind == "started":
            scan = Scan(start=at, ssids=event.ssids, frequencies=event.frequencies)
            target.link.scans.append(scan)
            self.open[target.ifindex] = Open(scan, realtime)
            self.walls[id(scan)] = realtime
            return
        current = self.open.pop(target.ifindex, None)
        if current is None:
            self.unmatched_ends += 1  # it started before the recording did
            return
        current.scan.end = at
        current.scan.outcome = "aborted" if event.kind == "aborted" else "finished"

    def label(self, evidence: dict[int, Evidence]) -> None:
        for index, target in self.targets.items():
            ev = evidence.get(index, Evidence(current_ssid=target.ssid or None))
            for scan in target.link.scans:
                lab = attribution.attribute(scan.ssids, self.walls.get(id(scan), 0.0), ev)
                scan.source, scan.name, scan.basis = lab.source, lab.name, lab.basis
                scan.label_text = lab.text()


async def record(bus: MessageBus, seconds: float, only: str | None,
                 progress: Callable[[str], None] | None = None,
                 stop: asyncio.Event | None = None, address: str = "") -> Recording:
    """Record for `seconds`; echoes go to `address` when given, else to each interface's own
    gateway."""
    targets, notes = await find_targets(bus, only)
    rec = Recording(started_at=time.time(), duration=0.0, notes=[])
    rec.notes.extend(f"Note: {n}." for n in notes)
    if not targets:
        return rec
    recorder = Recorder(targets)
    rec.started_at = recorder.wall0
    try:
        events: ScanEvents | None = await ScanEvents.open(recorder.on_event)
        rec.scan_events_source = "seen in the kernel's nl80211 scan events"
    except Nl80211Error as e:
        events = None
        rec.scan_events_source = f"not seen: {e.strerror or e}"
        rec.scans_seen = False
    installed, running, props, detail = await guard_properties(bus)
    pingers: list[Pinger] = []
    last: dict[str, tuple[int, int] | None] = {}
    for t in targets:
        t.link.interface = t.interface
        t.link.ssid = t.ssid.decode("utf-8", "backslashreplace")
        t.link.gateway = t.gateway
        guard = Guard(installed=installed, running=running, detail=detail)
        device = device_of(props, t.interface)
        if device:
            guard.state = str(device.get("state", ""))
            guard.states_seen.append(guard.state)
            guard.settings_sources = {str(k): str(v) for k, v in
                                      dict(device.get("settings_sources", {})).items()}
        rec.guards[t.interface] = guard
        await read_supplicant(bus, t, device)
        pinger = open_pinger(t, recorder.now, address)
        if pinger is not None:
            pingers.append(pinger)
        last[t.interface] = read_bytes(t.interface)
        rec.links.append(t.link)
    stop = stop or asyncio.Event()
    next_sample = recorder.clock() + SAMPLE_INTERVAL
    try:
        while recorder.now() < seconds and not stop.is_set():
            for p in pingers:
                p.send()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), ECHO_INTERVAL)
            if recorder.clock() >= next_sample:
                at = next_sample - SAMPLE_INTERVAL - recorder.t0
                next_sample += SAMPLE_INTERVAL
                await _sample(bus, targets, rec, last, at, running)
                if progress is not None:
                    scans = sum(len(t.link.scans) for t in targets)
                    progress(f"{recorder.now():.0f}/{seconds:.0f} s, {scans} scan(s) seen; "
                             "Ctrl-C ends early and still reports")
    finally:
        rec.interrupted = stop.is_set()
        rec.duration = min(recorder.now(), seconds) if not rec.interrupted else recorder.now()
        await asyncio.sleep(0)
        for p in pingers:
            p.expire(final=True)
            p.close()
        if events is not None:
            events.close()
    if recorder.unmatched_ends:
        rec.notes.append(f"Note: {recorder.unmatched_ends} scan(s) were already running when "
                         "the recording began; they are not counted.")
    geoclue = await owner_pid(bus, GEOCLUE_NAME) or geoclue_pid()
    evidence = {}
    if running:
        _, _, props, _ = await guard_properties(bus)
    for t in targets:
        evidence[t.ifindex] = evidence_from(props, t.interface, t.ssid, geoclue)
    recorder.label(evidence)
    return rec


async def _sample(bus: MessageBus, targets: list[Target], rec: Recording,
                  last: dict[str, tuple[int, int] | None], at: float, running: bool) -> None:
    props: dict[str, Any] = {}
    if running:
        try:
            props = await get_all(bus, BUS_NAME, GUARD_PATH, GUARD_IFACE)
        except BusError as e:
            for t in targets:
                rec.guards[t.interface].detail = ("its status could not be read "
                                                  f"({shown(e.text or e.name)})")
    for t in targets:
        now = read_bytes(t.interface)
        before = last.get(t.interface)
        if now is not None and before is not None:
            rx, tx = now[0] - before[0], now[1] - before[1]
            if rx >= 0 and tx >= 0:  # counters reset: skip the second
                t.link.seconds.append(Second(at, rx * 8.0 / SAMPLE_INTERVAL, tx * 8.0 / SAMPLE_INTERVAL))
        last[t.interface] = now
        if running:
            state = str(device_of(props, t.interface).get("state", ""))
            seen = rec.guards[t.interface].states_seen
            if state and (not seen or seen[-1] != state):
                seen.append(state)
            if state:
                rec.guards[t.interface].state = state


def run(seconds: float, only: str | None, on_terminal: bool, address: str = "") -> Recording:
    """Record for `seconds` (Ctrl-C ends early), showing progress on a terminal; echoes go to
    `address` when given, else to each interface's own gateway."""

    async def main() -> Recording:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        bus = await connect_system()  # NoSystemBus is a ConnectionError, which run()'s caller reports
        try:
            return await record(bus, seconds, only, _progress if on_terminal else None, stop,
                                address)
        finally:
            bus.disconnect()
            if on_terminal:
                sys.stderr.write("\r\033[K")
                sys.stderr.flush()

    return asyncio.run(main())


def _progress(text: str) -> None:
    sys.stderr.write("\r\033[K" + text)
    sys.stderr.flush()

