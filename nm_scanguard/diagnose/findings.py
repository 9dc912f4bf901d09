"""What a `scanguardctl diagnose` recording shows: spikes, scans, throughput and a verdict.

Pure: a `Recording` (echo times, per-second counters, scans with their labels, what was known
about the link and the guard) goes in; `analyse` gives the figures, `verdict` the sentences a
person can act on, `as_json` the strict JSON document.  The unit tests feed it recorded event
sequences; `diagnose` fills a Recording from the system.

Texts: a field that holds a peer's value as it came (an interface, an SSID, a program's name, a
bgscan string, the guard's state) is escaped where a line shows it; a field that holds a sentence
(a basis, a label, a detail, a note) was built with its peer parts escaped already.

Times are seconds since the recording began (the monotonic clock), so that a clock change
during the run cannot move a scan against the echoes; `started_at` gives the wall clock.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..attribution import BGSCAN, DESCRIPTIONS, DIRECT, GUARD, NETWORKMANAGER, SOURCES, UNKNOWN
from ..text import NAME_CHARS, shown

# A spike is an echo whose round trip took at least SPIKE_FACTOR times the run's median and at
# least SPIKE_MARGIN_MS more than it, or that got no answer within ECHO_TIMEOUT.  Both bounds:
# on an idle 3 ms link 6 ms is no stall anyone notices, and on a 40 ms link busy with an upload
# 70 ms is the ordinary jitter of its queue.  (In the lab, a bgscan scan under an upload took
# pings from a median of 36 ms to 64-76 ms on Debian 12's kernel, which returns to the channel
# between scan channels while there is traffic; Debian 13's lost them.)
SPIKE_FACTOR = 2.0
SPIKE_MARGIN_MS = 30.0
ECHO_TIMEOUT = 1.0  # seconds
# A second counts as "inside a scan" when a scan covers at least half of it, "outside" when
# none touches it; seconds in between count for neither.
INSIDE_SHARE = 0.5
# Below this median throughput outside scans (bit/s) the link was idle: a scan's cost to
# throughput cannot be seen, and the verdict says so instead of giving a ratio.
BUSY_BPS = 1e6
# Scans are named the cause when at least this share of the spikes fell inside them.
CAUSE_SHARE = 0.5


def spike_definition() -> str:
    return (f"a spike is an echo that took at least {SPIKE_FACTOR:g} times the median round "
            f"trip and at least {SPIKE_MARGIN_MS:g} ms more than it, or got no answer within "
            f"{ECHO_TIMEOUT:g} s")


@dataclass(frozen=True)
class Echo:
    sent: float  # seconds since the start
    rtt_ms: float | None  # None: no answer within ECHO_TIMEOUT

    @property
    def end(self) -> float:
        return self.sent + (ECHO_TIMEOUT if self.rtt_ms is None else self.rtt_ms / 1000.0)


@dataclass(frozen=True)
class Second:
    at: float  # start of the second, seconds since the start
    rx_bps: float
    tx_bps: float

    @property
    def bps(self) -> float:
        return self.rx_bps + self.tx_bps


@dataclass
class Scan:
    start: float
    end: float | None = None  # None: still running when the recording ended
    outcome: str = "running"  # "finished", "aborted" or "running"
    ssids: tuple[bytes, ...] | None = None
    frequencies: tuple[int, ...] = ()
    source: str = UNKNOWN
    name: str = ""
    basis: str = ""
    label_text: str = DESCRIPTIONS[UNKNOWN]

    def until(self, horizon: float) -> float:
        return self.end if self.end is not None else horizon

    @property
    def duration(self) -> float | None:
        return None if self.end is None else self.end - self.start


@dataclass
class Link:
    """One interface's recording and what was known about it."""

    interface: str
    ssid: str = ""
    signal_dbm: int | None = None
    signal_source: str = ""  # where the signal came from, in words
    gateway: str = ""  # the interface's own IPv4 gateway, "" when none was found
    target: str = ""  # the address the echoes went to: the gateway, or --target
    latency_method: str = ""  # how latency was measured, or why it was not
    latency_try: str = ""  # when it was not: what to try, e.g. "try `--target ADDR` ..."
    bgscan: str | None = None  # the current network's bgscan string, when known
    bgscan_source: str = ""  # how it was known
    bgscan_words: str = ""  # the string explained
    echoes: list[Echo] = field(default_factory=list)
    seconds: list[Second] = field(default_factory=list)
    scans: list[Scan] = field(default_factory=list)


@dataclass
class GuardSeen:
    """What diagnose saw of nm-scanguard on one interface (not the daemon's guard.Guard)."""

    installed: bool = False
    running: bool = False
    state: str = ""  # the interface's state in the guard's status, e.g. "guarding"
    states_seen: list[str] = field(default_factory=list)
    settings_sources: dict[str, str] = field(default_factory=dict)
    detail: str = ""  # a sentence about the guard (e.g. why its status could not be read)


@dataclass
class Recording:
    started_at: float  # wall clock at the start
    duration: float  # seconds recorded
    interrupted: bool = False
    links: list[Link] = field(default_factory=list)
    guards: dict[str, GuardSeen] = field(default_factory=dict)  # by interface
    scan_events_source: str = ""  # how scans were seen, or why they could not be
    scans_seen: bool = True  # False: the kernel's scan events could not be received
    notes: list[str] = field(default_factory=list)


# ---- analysis --------------------------------------------------------------------------------

@dataclass
class SourceFigures:
    scans: int = 0
    seconds_off: float = 0.0
    spikes: int = 0
    names: list[str] = field(default_factory=list)


@dataclass
class Analysis:
    interface: str
    echoes: int
    answered: int
    median_ms: float | None
    spike_threshold_ms: float | None
    spikes: int
    spikes_in_scans: int
    scans: int
    scan_seconds: float
    inside_bps: float | None  # median throughput of the seconds inside scans
    outside_bps: float | None  # ...and of the seconds outside them
    by_source: dict[str, SourceFigures]
    busy: bool
    counted_seconds: int = 0  # seconds with throughput figures
    latency_why: str = ""  # why no latency was measured (when median_ms is None)
    latency_try: str = ""  # ...and what to try

    @property
    def inside_share(self) -> float | None:
        if self.inside_bps is None or not self.outside_bps:
            return None
        return self.inside_bps / self.outside_bps


def _overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def threshold(median_ms: float) -> float:
    return max(median_ms * SPIKE_FACTOR, median_ms + SPIKE_MARGIN_MS)


def is_spike(echo: Echo, limit_ms: float | None) -> bool:
    if echo.rtt_ms is None:
        return True
    return limit_ms is not None and echo.rtt_ms >= limit_ms


def scan_of(echo: Echo, scans: Sequence[Scan], horizon: float) -> Scan | None:
    """The scan an echo overlapped (sent while it ran, or answered while it ran), if any."""
    for scan in scans:
        if _overlap(echo.sent, max(echo.end, echo.sent + 1e-6), scan.start,
                    scan.until(horizon)) > 0.0:
            return scan
    return None


def analyse(link: Link, duration: float) -> Analysis:
    answered = [e.rtt_ms for e in link.echoes if e.rtt_ms is not None]
    median = statistics.median(answered) if answered else None
    limit = threshold(median) if median is not None else None
    by_source = {s: SourceFigures() for s in SOURCES}
    spikes = in_scans = 0
    for echo in link.echoes:
        if not is_spike(echo, limit):
            continue
        spikes += 1
        scan = scan_of(echo, link.scans, duration)
        if scan is not None:
            in_scans += 1
            by_source[scan.source].spikes += 1
    scan_seconds = 0.0
    for scan in link.scans:
        figures = by_source[scan.source]
        figures.scans += 1
        off = scan.until(duration) - scan.start
        figures.seconds_off += off
        scan_seconds += off
        if scan.name and scan.name not in figures.names:
            figures.names.append(scan.name)
    inside, outside = [], []
    for sec in link.seconds:
        covered = sum(_overlap(sec.at, sec.at + 1.0, s.start, s.until(duration)) for s in link.scans)
        if covered >= INSIDE_SHARE:
            inside.append(sec.bps)
        elif covered == 0.0:
            outside.append(sec.bps)
    outside_bps = statistics.median(outside) if outside else None
    why, tried = link.latency_method, link.latency_try
    if median is None and link.echoes:  # sent, and none answered: the address, not the link
        why = (f"none of the {len(link.echoes)} echoes to "
               f"{shown(link.target or link.gateway or '?', NAME_CHARS)} was answered (it may "
               "not answer pings)")
        tried = TRY_TARGET.format(interface=shown(link.interface, NAME_CHARS))
    return Analysis(
        interface=link.interface, echoes=len(link.echoes), answered=len(answered),
        median_ms=median, spike_threshold_ms=limit, spikes=spikes, spikes_in_scans=in_scans,
        scans=len(link.scans), scan_seconds=scan_seconds,
        inside_bps=statistics.median(inside) if inside else None, outside_bps=outside_bps,
        by_source={k: v for k, v in by_source.items() if v.scans or v.spikes},
        busy=outside_bps is not None and outside_bps >= BUSY_BPS,
        counted_seconds=len(link.seconds), latency_why=why or "no echo was sent",
        latency_try=tried)


# What to try when no echo could be sent or none was answered; diagnose says it too.
TRY_TARGET = ("try `--target ADDR`, an IPv4 address that answers pings through {interface} "
              "(its gateway, or a host on its network)")


# ---- verdict ---------------------------------------------------------------------------------

def _n(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


ADVICE_GUARD_OFF = {
    "not-installed": "install nm-scanguard, which suspends bgscan while the link is busy: as "
                     "root, in a checkout of https://github.com/nm-scanguard/nm-scanguard, make "
                     "deb, then apt install ../nm-scanguard_*_all.deb",
    "not-running": "start the guard: systemctl enable --now scanguard.service",
}


def advice(source: str, figures: SourceFigures, guard: GuardSeen) -> str:
    """What a person can do about one source's scans."""
    if source == BGSCAN:
        if not guard.installed:
            return ADVICE_GUARD_OFF["not-installed"]
        if not guard.running:
            return ADVICE_GUARD_OFF["not-running"]
        if guarded(guard):
            return ("nm-scanguard guarded during the run and bgscan still scanned (before it "
                    "engaged, or after it let go); see `scanguardctl status` for an error")
        return ("nm-scanguard suspends bgscan only while the link is busy; for a call that "
                "moves little data, hold it: scanguardctl hold --reason call -- COMMAND, or "
                "lower threshold_pps or threshold_mbit (scanguard.conf(5))")
    if source == NETWORKMANAGER:
        who = f" ({_names(figures.names)})" if figures.names else ""
        return (f"a program asked NetworkManager to scan{who}: close the Wi-Fi menu, or lengthen "
                "or remove the widget's scan timer; while the link is busy, nm-scanguard's "
                "defer_client_scans = yes (the default) refuses these requests")
    if source == DIRECT:
        return ("GeoClue scans for location services (automatic time zone, Night Light, "
                "weather); nm-scanguard's abort_scans = yes cuts them short while guarding, or "
                "turn its Wi-Fi source off with [wifi] enable=false in /etc/geoclue/geoclue.conf "
                "(/usr/share/doc/nm-scanguard/docs/scan-deferral.md, \"GeoClue is never refused\")")
    if source == GUARD:
        return ("the signal fell below nm-scanguard's floor and it scanned so that the station "
                "could roam: this scan is wanted")
    return "nothing in the evidence says who asked for these scans"


def _names(names: Sequence[str]) -> str:
    return ", ".join(shown(n) for n in names)


def guarded(guard: GuardSeen) -> bool:
    """Whether the guard guarded (or held) the interface at some time during the run."""
    return any(state in ("guarding", "held") for state in [*guard.states_seen, guard.state])


GUARDED_DURING_RUN = "nm-scanguard was guarding this interface during the run: bgscan was suspended."

def _no_scan_seen(a: Analysis, interface: str, unmeasured: str, scans_unseen: str) -> list[str]:
    """The verdict when no scan was seen: the scan events were not (`scans_unseen` says why),
    or none ran."""
    measured = a.median_ms is not None
    if scans_unseen:
        return [f"Cannot tell whether Wi-Fi scans ran on {interface}: the kernel's scan events "
                f"were not seen ({scans_unseen}).",
                f"Its {_n(a.spikes, 'latency spike')} in {a.echoes} "
                f"{'echo' if a.echoes == 1 else 'echoes'} can be neither tied to scans nor "
                "cleared of them." if measured
                else f"Cannot tell whether {interface} stalled either: {unmeasured}."]
    if not measured:
        return [f"No Wi-Fi scan ran on {interface}; cannot tell whether it stalled for another "
                f"reason: {unmeasured}."]
    if a.spikes:
        return [f"No Wi-Fi scan ran on {interface}: its {_n(a.spikes, 'latency spike')} have "
                "another cause (the network beyond the access point, interference, power "
                "saving), not scans."]
    return [f"No Wi-Fi scan ran on {interface}, and latency stayed steady."]


def verdict(a: Analysis, guard: GuardSeen, scans_unseen: str = "") -> list[str]:
    """Sentences a person can act on, most important first.  Each says only what was measured:
    without latency no stall is tied to a scan or cleared of one, and without the kernel's scan
    events no scan is counted.  `scans_unseen`: why the scan events were not seen, if so."""
    lines: list[str] = []
    interface = shown(a.interface, NAME_CHARS)
    measured = a.median_ms is not None
    unmeasured = (f"no latency measured because {a.latency_why}"
                  + (f"; {a.latency_try}" if a.latency_try else ""))
    if scans_unseen or a.scans == 0:
        lines += _no_scan_seen(a, interface, unmeasured, scans_unseen)
        if guarded(guard):
            lines.append(GUARDED_DURING_RUN)
        return lines
    share = a.spikes_in_scans / a.spikes if a.spikes else 0.0
    if not measured:
        lines.append(f"Cannot tell whether the {_n(a.scans, 'scan')} on {interface} stalled it: "
                     f"{unmeasured}.")
    elif a.spikes and share >= CAUSE_SHARE:
        lines.append(f"Scans cause the stalls on {interface}: {a.spikes_in_scans} of "
                     f"{_n(a.spikes, 'latency spike')} fell inside the {_n(a.scans, 'scan')}.")
    elif a.spikes_in_scans:
        lines.append(f"Scans cause some stalls on {interface}: {a.spikes_in_scans} of "
                     f"{_n(a.spikes, 'latency spike')} fell inside the {_n(a.scans, 'scan')}; "
                     "the others have another cause.")
    else:
        lines.append(f"{_n(a.scans, 'scan')} ran on {interface}, but no latency spike fell "
                     "inside one" + (f"; the {_n(a.spikes, 'spike')} have another cause."
                                     if a.spikes else "."))
    share_bps = a.inside_share
    if not a.counted_seconds:
        lines.append(f"What scans cost in throughput cannot be told: the byte counters of "
                     f"{interface} could not be read.")
    elif a.outside_bps is None:
        lines.append("What scans cost in throughput cannot be told: no second of the run was "
                     "free of scans to compare with.")
    elif share_bps is not None and a.busy:
        lines.append(f"Throughput inside scans was {share_bps * 100:.0f} % of the throughput "
                     "outside them (median seconds).")
    elif not a.busy:
        lines.append("The link was nearly idle, so what scans cost in throughput cannot be seen; "
                     "run diagnose again during a transfer or call.")
    for source, figures in a.by_source.items():
        if not figures.scans:
            continue
        who = DESCRIPTIONS[source]
        if figures.names and source in (NETWORKMANAGER, DIRECT):
            who += f" — {_names(figures.names)}"
        spikes = f", {_n(figures.spikes, 'spike')}" if measured else ""
        lines.append(f"{_n(figures.scans, 'scan')} by {who} "
                     f"({figures.seconds_off:.1f} s off the channel{spikes}"
                     f"): {advice(source, figures, guard)}.")
    return lines
