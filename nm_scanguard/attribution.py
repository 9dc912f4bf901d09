"""Who asked for a scan, from evidence: the one place that turns what was seen into a label.

The kernel announces every scan (nl80211 `TRIGGER_SCAN`) with the SSIDs it probes, and each
requester on a NetworkManager desktop builds that list its own way (wpa_supplicant 2.10
`bgscan_simple.c`, `dbus/dbus_new_handlers.c` `wpas_dbus_handler_scan`, `scan.c`; seen in the
lab on Debian 12 and 13, `../shared/FACTS.md`):

- wpa_supplicant's bgscan probes the current network's SSID and nothing else;
- an active D-Bus `Scan` with no SSID list probes the wildcard SSID only: what NetworkManager
  sends for `RequestScan` (nmcli, a Wi-Fi menu, a widget), plus the SSIDs of hidden profiles,
  and what nm-scanguard sends for its own roaming scan;
- a passive D-Bus `Scan` without channels, GeoClue's call, becomes wpa_supplicant's own scan
  (`wpa_supplicant_req_scan`), which probes the current network's SSID and the wildcard.

A signature says which path a scan took; a name needs more: the guard's record of its own scan,
the polkit rule's record of who asked NetworkManager, or GeoClue running.  Each label carries
the sentence that established it, and a scan that matches no signature stays "unknown".  The
polkit rule's records are kept here too (ScanRequests), for the labels and for `scanguardctl
diagnose`.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Sequence
from typing import NamedTuple

from .text import NAME_CHARS, shown

BGSCAN = "bgscan"
NETWORKMANAGER = "networkmanager"
DIRECT = "direct"
GUARD = "guard"
UNKNOWN = "unknown"

# In the order a verdict lists them.
SOURCES = (BGSCAN, NETWORKMANAGER, DIRECT, GUARD, UNKNOWN)
DESCRIPTIONS = {
    BGSCAN: "wpa_supplicant's bgscan (the periodic scan NetworkManager configures)",
    NETWORKMANAGER: "a program through NetworkManager (nmcli, a Wi-Fi menu or widget)",
    DIRECT: "a program that called wpa_supplicant directly (on a desktop: GeoClue)",
    GUARD: "nm-scanguard's own roaming scan",
    UNKNOWN: "unknown",
}

GEOCLUE_NAME = "org.freedesktop.GeoClue2"  # its bus name: owned while it runs

# A request recorded by someone else (the guard's own Scan call, a polkit check) names the scan
# the kernel started within this many seconds after it.  NetworkManager starts a requested scan
# at once (tens of milliseconds in the lab) unless its 8 s limit defers it, and then the
# request has no scan of its own to name.
REQUEST_WINDOW = 2.0
# NetworkManager scan requests the polkit rule saw, kept for `scanguardctl diagnose`: the last
# REQUESTS_KEPT, none older than REQUESTS_KEPT_FOR seconds (a widget asks every 10-15 s).
REQUESTS_KEPT = 32
REQUESTS_KEPT_FOR = 600.0


class Request(NamedTuple):
    """A scan request someone recorded: `at` on the wall clock (seconds since the epoch)."""

    at: float
    program: str = ""
    pid: int = 0
    user: str = ""


class ScanRequests:
    """The NetworkManager scan requests the polkit rule saw, each with whether it refused it:
    the last REQUESTS_KEPT, read back without those older than REQUESTS_KEPT_FOR seconds."""

    def __init__(self) -> None:
        self._kept: deque[tuple[Request, bool]] = deque(maxlen=REQUESTS_KEPT)

    def add(self, request: Request, refused: bool) -> None:
        self._kept.append((request, refused))

    def recent(self) -> list[tuple[Request, bool]]:
        """The requests the rule saw in the last REQUESTS_KEPT_FOR seconds, oldest first."""
        since = time.time() - REQUESTS_KEPT_FOR
        return [(r, refused) for r, refused in self._kept if r.at >= since]


class Evidence(NamedTuple):
    """What is known besides the scan itself, for one interface."""

    current_ssid: bytes | None = None  # the network the interface is connected to
    own_scans: Sequence[float] = ()  # wall-clock times the guard asked for its roaming scan
    client_requests: Sequence[Request] = ()  # NetworkManager scan requests the polkit rule saw
    geoclue_pid: int | None = None  # a running geoclue process


class Label(NamedTuple):
    source: str  # one of SOURCES
    name: str = ""  # the program, when the evidence names it: a peer's text, shown escaped
    basis: str = ""  # how the label was established, in words, its peer parts escaped
    signature: str = ""  # what the probed SSIDs say, as a short key

    def text(self) -> str:
        what = DESCRIPTIONS[self.source]
        if self.name and self.source in (NETWORKMANAGER, DIRECT):
            name = shown(self.name)
            what = {NETWORKMANAGER: f"{name} through NetworkManager",
                    DIRECT: f"{name}, calling wpa_supplicant directly"}[self.source]
        return what


def _request_before(requests: Sequence[Request], at: float) -> list[Request]:
    return [r for r in requests if 0.0 <= at - r.at <= REQUEST_WINDOW]


def signature(ssids: Sequence[bytes] | None, current: bytes | None) -> str:
    """Which requester's list of probed SSIDs this is: "passive" (none probed), "current"
    (the current SSID alone: bgscan), "wildcard" (the wildcard, maybe with other networks'
    SSIDs but not the current one: an active D-Bus Scan), "current+wildcard" (wpa_supplicant's
    own scan, as a passive D-Bus Scan makes it), or "other"."""
    if ssids is None or len(ssids) == 0:
        return "passive"
    probed = set(ssids)
    if current is not None and current != b"":
        if probed == {current}:
            return "current"
        if probed == {current, b""}:
            return "current+wildcard"
        if b"" in probed and current not in probed:
            return "wildcard"
        return "other"
    return "wildcard" if b"" in probed else "other"


def attribute(ssids: Sequence[bytes] | None, started_at: float, evidence: Evidence) -> Label:
    """The label for one scan the kernel announced at `started_at` (wall clock) with these
    probed SSIDs (None: a passive scan, no SSID probed)."""
    sig = signature(ssids, evidence.current_ssid)
    if sig == "current":
        return Label(BGSCAN, basis="it probed only the current network's SSID, which is how "
                     "wpa_supplicant's bgscan scans; NetworkManager's and other programs' scans "
                     "also probe the wildcard SSID", signature=sig)
    if sig == "wildcard":
        if any(0.0 <= started_at - at <= REQUEST_WINDOW for at in evidence.own_scans):
            return Label(GUARD, name="nm-scanguard", signature=sig,
                         basis="nm-scanguard recorded asking wpa_supplicant for a roaming scan "
                               "just before it started")
        seen = _request_before(evidence.client_requests, started_at)
        if seen:
            names = sorted({r.program or f"pid {r.pid}" for r in seen if r.program or r.pid})
            users = sorted({r.user for r in seen if r.user})
            who = ", ".join(names) or "a program"
            seen_who = ", ".join(shown(n, NAME_CHARS) for n in names) or "a program"
            seen_users = ", ".join(shown(u, NAME_CHARS) for u in users)
            return Label(NETWORKMANAGER, name=who, signature=sig,
                         basis=f"nm-scanguard's polkit rule saw {seen_who}"
                               f"{' (user ' + seen_users + ')' if users else ''} ask "
                               "NetworkManager for a scan just before it started, and it probed "
                               "only the wildcard SSID, as NetworkManager's scans do")
        return Label(NETWORKMANAGER, signature=sig,
                     basis="it probed the wildcard SSID and not the current network's, which is "
                           "how NetworkManager scans when a program calls RequestScan; which "
                           "program asked, only nm-scanguard's polkit rule can tell, and it saw "
                           "no request (root's never reach polkit; or the rule is not installed)")
    if sig == "current+wildcard":
        if evidence.geoclue_pid:
            return Label(DIRECT, name="GeoClue", signature=sig,
                         basis="it probed the current network's SSID and the wildcard, which is "
                               "how wpa_supplicant scans when a program calls its Scan directly "
                               f"with no SSIDs; GeoClue, the desktop program that does, is running "
                               f"(pid {evidence.geoclue_pid})")
        return Label(DIRECT, signature=sig,
                     basis="it probed the current network's SSID and the wildcard, which is how "
                           "wpa_supplicant scans when a program calls its Scan directly (or "
                           "wpa_supplicant decides to scan itself); GeoClue is not running, so "
                           "no program can be named")
    if sig == "passive":
        return Label(UNKNOWN, signature=sig,
                     basis="a passive scan probes no SSID, so nothing shows who asked")
    return Label(UNKNOWN, signature=sig,
                 basis="its probed SSIDs match none of the known requesters")
