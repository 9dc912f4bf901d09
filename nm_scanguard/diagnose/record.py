"""`scanguardctl diagnose`: record latency, throughput and every scan, then say what they show.

Runs as an ordinary user and changes nothing: it reads NetworkManager's and the guard's public
properties, sends ICMP echoes to the Wi-Fi interface's own gateway (or `--target`) from an
unprivileged ping socket bound to that interface (what `net.ipv4.ping_group_range` allows;
systemd opens it to every group), so that they cross the Wi-Fi also when a VPN owns the
default route, reads the interface's byte counters over rtnetlink once a second (as the
daemon does), and listens to the kernel's nl80211 scan events, which any user may receive and
which show every scan whoever asked for it.  wpa_supplicant is asked
for the bgscan string and the signal where its D-Bus policy lets the user (root and group
`netdev` on Debian); otherwise the report says what it used instead.

What was seen goes into a `findings.Recording`; who asked for each scan is decided at the end,
with all the evidence (`attribution`), and `findings` makes the figures and the verdict.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
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
    name_has_owner,
    owner_pid,
    unwrap,
)
from ..peers.netlink import LinkCounters
from ..peers.nl80211 import Nl80211Error, ScanEvent, ScanEvents
from ..peers.supplicant import Supplicant, SupplicantError
from ..text import clipped, shown
from .document import explain_bgscan
from .findings import GuardSeen, Recording, Scan, Second
from .ping import ECHO_INTERVAL, Pinger, open_pinger
from .targets import Target, find_targets

SAMPLE_INTERVAL = 1.0  # counters, the guard's state


# ---- counters --------------------------------------------------------------------------------

def read_bytes(counters: LinkCounters, name: str) -> tuple[int, int] | None:
    """The interface's received and sent bytes, read over rtnetlink as the daemon reads them
    (peers/netlink.py); None when they cannot be read (no such interface, a refusal)."""
    try:
        now = counters.read(name)
    except (OSError, ValueError):
        return None
    return None if now is None else (now.rx_bytes, now.tx_bytes)


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
    counters = LinkCounters()
    for t in targets:
        t.link.interface = t.interface
        t.link.ssid = t.ssid.decode("utf-8", "backslashreplace")
        t.link.gateway = t.gateway
        guard = GuardSeen(installed=installed, running=running, detail=detail)
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
        last[t.interface] = read_bytes(counters, t.interface)
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
                await _sample(bus, targets, rec, counters, last, at, running)
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
        counters.close()
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


async def _sample(bus: MessageBus, targets: list[Target], rec: Recording, counters: LinkCounters,
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
        now = read_bytes(counters, t.interface)
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

