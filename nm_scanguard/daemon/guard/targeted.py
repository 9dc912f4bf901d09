"""Roaming by targeted scans (setting `roam_scans = targeted`, the default): below the signal
floor while the link is busy, keep bgscan suspended (the policy's ROAMING) and scan only the
channels of the network's other known access points (candidates.py) and the current one,
roaming allowed, instead of giving bgscan back for a scan of every channel that leaves the
channel for seconds.

- wpa_supplicant roams by itself on those results when its own rule finds an AP better; if it
  has not moved one sample after the scan ended and an AP is better by ROAM_MARGIN_DB, the guard
  asks it to (Roam).
- If the station has not left the fade within TARGETED_LIMIT, or no other AP of the network is
  known, or the scan is refused, the guard falls back to the release and the full scan
  (roaming.py), as with `roam_scans = full`.
- While the signal is between the floor and bgscan's own threshold (where bgscan would scan
  every channel each short interval), one candidate channel is scanned every REFRESH_GAP, so
  that the candidates and wpa_supplicant's list stay fresh; above it, none.
- A walk away from the AP, before the floor: between bgscan's threshold and the floor, each
  time the signal has fallen WALK_DROP_DB below where the guard last looked (bgscan's threshold
  on entering that band), at most one per WALK_GAP, the guard makes the targeted scan's kind of
  scan (WALK).  wpa_supplicant moves by itself on its results when its own rule finds an AP
  better; if it has not, one sample after the scan, the guard asks for a Roam to an AP better
  by WALK_MARGIN_DB.  No move of ours within MOVE_GAP of the last move, whoever made it: two
  APs of about the same signal do not make the station flap.
- Where the station is, what the scans found, its moves and the Roams asked: station.py.
- A Roam wpa_supplicant refused (problem ROAM) is shown until a Roam succeeds, the fade ends,
  or (asked before the floor) the walk is over: after that it says nothing about what the
  guard is doing.

A Targeted belongs to one Guard, which tells it each sample what the policy says of the link
(Link) and sets the policy's `targeted` flag as it decides (Targeting); it touches neither bgscan
nor the journal: that flag is what keeps bgscan off, and it ends with the fade or the fallback.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from ...config import Settings
from ...peers.supplicant import Bss, WpaSupplicant
from . import policy as P
from .candidates import Candidates
from .problems import ROAM, ProblemSink
from .roaming import REFRESH, TARGETED, WALK, Interface, Roaming, mhz
from .station import Station
from .station import dbm as _dbm

log = logging.getLogger("scanguard")

# The targeted path's time to move the station, from the fade: a scan of a few channels
# (≈ 50 ms each), one sample for wpa_supplicant's own move, a Roam (≈ 0.3 s) and a sample to
# see it.  Longer would leave a station that cannot move on the fading AP for longer than
# today's full scan takes to roam it (lab: 7.6 s).
TARGETED_LIMIT = 6.0
# Ask for a Roam only to an AP this much stronger than the current one.  wpa_supplicant 2.10
# roams by itself on a difference of 1 to 5 dB, smaller the weaker the link
# (wpa_supplicant_need_to_roam_within_ess); when it has not moved, only a difference that
# no single reading's jitter (±3–4 dB between beacons) explains justifies overruling it.
ROAM_MARGIN_DB = 8
# One single-channel refresh scan per this many seconds while the signal is marginal, where
# bgscan would scan every channel each 30 s.  In the lab a one-channel scan lasts 0.08 s
# (Debian 13's 6.12) to 0.31 s (Debian 12's 6.1) and takes the station off its channel for
# about 0.07 s: 0.2 % of the time.  Each AP's entry in wpa_supplicant's list is refreshed
# within REFRESH_GAP × channels: inside its 180 s expiry for up to four candidate channels,
# and a Roam to an AP it forgot is refused and falls back (TARGETED_LIMIT).
REFRESH_GAP = 40.0
# A walk: one scan of the candidates' channels per this many dB the signal has fallen since the
# guard last looked, between bgscan's threshold and the floor (the first look: this far below
# the threshold, but no later than WALK_BEFORE_FLOOR_DB above the floor).  In the lab's walk
# (1 dB/s, AP2 rising as AP1 falls; bgscan's threshold -70 dBm, floor -80) the link carried
# its full rate down to -80 dBm and lost two thirds of it at -81 and -82, where the floor's
# scan roamed it; a look at -76 (AP2 5 dB stronger) moved the station while its link still
# held.  Smaller steps would scan more often than a marginal link is worth (each such scan
# takes the station off its channel for about 0.07 s); a steady link with the ±3-4 dB jitter
# of single readings does not fall 6 dB below the reading it was last looked at.
WALK_DROP_DB = 6
# With the default floor (-75 dBm) and NetworkManager's thresholds (-70 or -65), a first look
# 6 dB below the threshold would come at or after the floor: it comes 2 dB above the floor at
# the latest, so that a walk is looked at once before the link is poor.
WALK_BEFORE_FLOOR_DB = 2
# At most one walk scan per this many seconds, whatever the readings: a jittery link that
# hovers around a step pays at most this rate.
WALK_GAP = 5.0
# Before the floor, ask for a Roam only to an AP this much stronger: wpa_supplicant's own rule
# roams within the network on 3-5 dB in this band (wpa_supplicant_need_to_roam_within_ess,
# 2.10); an AP that it declined but that is 5 dB stronger is more than one reading's jitter,
# and the current link still holds, so the margin can be smaller than at the floor.
WALK_MARGIN_DB = 5
# No move asked by the guard within this many seconds of the last move of the station (its
# own or one we asked for): the hysteresis in time that keeps two APs of about the same signal
# from taking turns.
MOVE_GAP = 30.0
# A scan's end decides a move after a walk scan only this soon after it was asked for: the
# candidates' signals are the scan's, not readings from minutes before.
WALK_RESULTS_FRESH = 10.0
# Where bgscan's threshold cannot be read off its string ("simple:30:-65:300" → -65):
# NetworkManager's own (nm-supplicant-config.c).
BGSCAN_THRESHOLD = -65


class Link(NamedTuple):
    """What the guard told the targeted path of its link this sample (fade)."""

    state: str  # the policy's
    signal: float | None  # the policy's last reading
    bgscan: str | None  # the value our "" replaced, while bgscan is suspended by us
    settings: Settings


class Targeting(NamedTuple):
    """What the policy's `targeted` flag is to become (Policy.set_targeted), and why; taking a
    fade on, when (monotonic: which fade Targeted.scan is for) and the signal that made it."""

    on: bool
    why: str
    at: float | None = None
    signal: float | None = None


class Targeted:
    def __init__(self, interface: Interface, supplicant: WpaSupplicant, roaming: Roaming,
                 problems: ProblemSink, changed: Callable[[], None], settings: Settings,
                 connection: str, candidates: Candidates | None = None) -> None:
        self._roaming = roaming  # asks for the scans, knows which are ours
        # Where the station is (its `settings` and `connection` kept current by the guard).
        self.station = Station(interface, supplicant, problems, changed, settings, connection,
                               candidates)
        self._problems = problems
        self.ifname = interface.ifname
        # This fade: when the targeted path took it on (monotonic), whether its scan ended,
        # the Roam asked for ("" none was worth it, "wpa_supplicant": it moved by itself), and
        # whether the path gave up (until the signal is back above the floor).
        self._targeted_at: float | None = None
        self._targeted_scanned = False
        self._roam_asked: str | None = None
        self._spent = False
        self._refresh_at: float | None = None
        self._refresh_next = 0  # which candidate channel the next refresh scans
        # The walk: the signal the guard last looked at (None outside the band between bgscan's
        # threshold and the floor), whether it looked since the signal entered the band, when it
        # last made a walk scan and whether that scan ended (a move to decide at the next
        # sample), and the station's moves already counted (after one, steps count from the new
        # AP's signal).
        self._looked_at_dbm: float | None = None
        self._looked_in_band = False
        self._walk_at: float | None = None
        self._walk_scanned = False
        self._moves_seen = 0

    # What the guard and the status read of the station.
    @property
    def candidates(self) -> Candidates:
        return self.station.candidates

    @property
    def current(self) -> Bss | None:
        return self.station.current

    @property
    def roams(self) -> int:
        return self.station.roams

    @property
    def last_move(self) -> str:
        return self.station.last_move

    async def learn(self) -> None:
        await self.station.learn()

    def candidates_status(self) -> list[dict[str, Any]]:
        return self.station.candidates_status()

    def supplicant_restarted(self) -> None:
        self.station.supplicant_restarted()

    async def fade(self, state: str, signal: float | None, bgscan: str | None,
                   settings: Settings) -> Targeting | None:
        """Decide, each sample, how a weak signal is handled, and move the targeted path on:
        what the policy's `targeted` flag is to become, if it changes (the guard sets it).
        The guard tells the policy's state and signal, and the value our "" replaced while
        bgscan is suspended by us."""
        station, link = self.station, Link(state, signal, bgscan, settings)
        if link.state not in (P.WEAK, P.ROAMING):
            if self._targeted_at is not None or self._spent or self._looked_at_dbm is None:
                self._problems.clear(ROAM)  # the fade ended, or no walk is under way
            if self._targeted_at is not None and link.state in P.ENGAGED:
                log.info("%s: the signal is back above the floor (%s dBm): guarding goes on "
                         "on %s", self.ifname, _dbm(link.signal), station.where())
            self._targeted_at, self._spent = None, False
            if not await self._walk(link):
                await self._refresh(link)
            return None
        now = time.monotonic()
        self._walk_scanned = False  # the fade's own scan decides from here
        settings = link.settings
        if self._targeted_at is None:
            # Whether bgscan is suspended yet does not matter (a suspend may be under way in
            # another reconcile): ROAMING wants it suspended, and the reconcile that follows
            # this sample's keeps or makes it so.
            if self._spent or settings.roam_scans != TARGETED:
                return None
            if not station.others():
                log.info("%s: the signal fell below the floor and no other access point of "
                         "this network is known: releasing bgscan for a scan of every channel",
                         self.ifname)
                self._spent = True
                return None
            self._targeted_at, self._targeted_scanned, self._roam_asked = now, False, None
            station.why_looked = (f"a targeted scan: the signal fell to {_dbm(link.signal)} "
                                  "dBm, below the floor")
            # Taken on with nothing awaited since the policy saw the fade: a reconcile that runs
            # in between (the daemon's sync, a hold's kick) would find it WEAK, release bgscan
            # and ask for a scan of every channel.  Scanned (Targeted.scan) once the policy has
            # it: ROAMING keeps bgscan off.
            return Targeting(True, f"signal {_dbm(link.signal)} dBm below the floor of "
                                   f"{settings.signal_floor_dbm:.0f} dBm: scanning the "
                                   "channels of this network's access points to roam, bgscan "
                                   "kept off", now, link.signal)
        if settings.roam_scans != TARGETED:
            return self._give_up("roam_scans was set to full", link.signal)
        if now - self._targeted_at >= TARGETED_LIMIT:
            return self._give_up(f"the station did not leave the fade within "
                                 f"{TARGETED_LIMIT:g} s", link.signal)
        if self._targeted_scanned and self._roam_asked is None:
            await self._roam_if_better(link.signal)
        return None

    async def scan(self, take: Targeting) -> Targeting | None:
        """The targeted scan of a fade taken on (fade): the current access point's channel and
        the other candidates', read now; a give-up if it did not start."""
        if self._roaming.stopping:
            return None  # nothing more is scanned, nor given up, for a guard that stops
        channels = await self.station.channels()
        if self._targeted_at != take.at:
            return None  # that fade ended (a sample in between found the signal back) or gave up
        if not await self._roaming.own_scan(TARGETED, channels, self.station.ssid()):
            return self._give_up("wpa_supplicant did not start the targeted scan", take.signal)
        return None

    def _give_up(self, why: str, signal: float | None) -> Targeting:
        log.info("%s: targeted roaming gave up: %s; releasing bgscan for a scan of every "
                 "channel", self.ifname, why)
        self._spent = True
        self._targeted_at = None
        return Targeting(False, f"signal {_dbm(signal)} dBm below the floor: {why}; "
                                "bgscan left on so it can roam")

    async def _roam_if_better(self, signal: float | None) -> None:
        """One sample after our targeted scan ended: if wpa_supplicant has not moved by itself
        and an AP of the network is better by ROAM_MARGIN_DB, ask it to move there."""
        station = self.station
        before = station.current
        await station.read_current()
        if before is None or station.current is None or station.moved_since(before):
            self._roam_asked = "wpa_supplicant"  # it moved (or is moving) by itself
            return
        signal = signal if signal is not None else station.current.signal
        best = next(iter(station.others()), None)
        if best is None or best.signal < signal + ROAM_MARGIN_DB:
            self._roam_asked = ""  # nothing clearly better: wpa_supplicant's choice stands
            return
        self._roam_asked = best.bssid
        await station.ask_roam(before, signal, best, "below the floor")

    async def _walk(self, link: Link) -> bool:
        """Between bgscan's threshold and the floor, while bgscan is suspended by us: a walk
        scan per WALK_DROP_DB the signal fell, and the move after it (see the module's
        docstring).  Whether it scanned or decided a move this sample."""
        station, signal, bgscan = self.station, link.signal, link.bgscan
        if link.settings.roam_scans != TARGETED or bgscan is None or signal is None \
                or link.state not in (P.GUARDING, P.HELD):
            self._looked_at_dbm = None
            return False
        now = time.monotonic()
        if self._walk_scanned:
            self._walk_scanned = False
            await self._move_if_better(signal)
            return True
        threshold = bgscan_threshold(bgscan)
        moved = station.moves != self._moves_seen
        self._moves_seen = station.moves
        if signal >= threshold:
            self._looked_at_dbm = None
            return False
        if self._looked_at_dbm is None or moved:
            # Entering the band the steps count from the threshold; after a move, from the
            # new AP's signal.
            self._looked_at_dbm = float(signal if moved else threshold)
            self._looked_in_band = False
        look_at = self._looked_at_dbm - WALK_DROP_DB
        if not self._looked_in_band:
            look_at = max(look_at, link.settings.signal_floor_dbm + WALK_BEFORE_FLOOR_DB)
        if signal > look_at or self._roaming.is_ours() \
                or (self._walk_at is not None and now - self._walk_at < WALK_GAP) \
                or not station.others():
            return False
        channels = await station.channels()
        fell = self._looked_at_dbm - signal
        # The walk scan covers every candidate channel: it serves as the refresh too.
        self._looked_at_dbm, self._walk_at, self._refresh_at = signal, now, now
        self._looked_in_band = True
        station.why_looked = f"a walk scan: the signal fell {fell:.0f} dB to {_dbm(signal)} dBm"
        log.info("%s: the signal fell %.0f dB to %s dBm while guarding: scanning %s for a "
                 "better access point of this network", self.ifname, fell, _dbm(signal),
                 mhz(channels))
        await self._roaming.own_scan(WALK, channels, station.ssid())
        return True

    async def _move_if_better(self, signal: float) -> None:
        """After a walk scan: if wpa_supplicant has not moved by itself, an AP of the network
        is better by WALK_MARGIN_DB, and the station has not moved within MOVE_GAP, ask it
        to."""
        station = self.station
        before = station.current
        await station.read_current()
        if before is None or station.current is None or station.moved_since(before):
            return  # it moved (or is moving) by itself
        best = next(iter(station.others()), None)
        now = time.monotonic()
        if best is None or best.signal < signal + WALK_MARGIN_DB:
            log.info("%s: no access point of this network is %d dB stronger than %s (%s dBm): "
                     "staying", self.ifname, WALK_MARGIN_DB, station.where(), _dbm(signal))
        elif station.moved_at is not None and now - station.moved_at < MOVE_GAP:
            log.info("%s: %s (%d dBm) is %d dB stronger, but the station moved %.0f s ago: "
                     "staying", self.ifname, best.bssid, best.signal, best.signal - signal,
                     now - station.moved_at)
        else:
            await station.ask_roam(before, signal, best, "before the floor")

    async def _refresh(self, link: Link) -> None:
        """Between the floor and bgscan's threshold, while bgscan is suspended by us: one
        candidate channel every REFRESH_GAP (see the module's docstring)."""
        station, signal, bgscan = self.station, link.signal, link.bgscan
        if link.settings.roam_scans != TARGETED or bgscan is None or signal is None \
                or link.state not in (P.GUARDING, P.HELD) \
                or signal >= bgscan_threshold(bgscan) or self._roaming.is_ours():
            return
        now = time.monotonic()
        if self._refresh_at is not None and now - self._refresh_at < REFRESH_GAP:
            return
        current = station.current
        channels = sorted({c.frequency for c in station.others()}
                          - {current.frequency if current else 0})
        if not channels:
            return
        self._refresh_at = now
        channel = channels[self._refresh_next % len(channels)]
        self._refresh_next += 1
        await self._roaming.own_scan(REFRESH, [channel], station.ssid())

    def scan_done(self) -> None:
        """A scan of this interface ended: our targeted or walk scan's end lets the next sample
        decide on a move (the guard has the station learn what it found)."""
        if self._targeted_at is not None and self._roaming.own_kind == TARGETED:
            self._targeted_scanned = True
        elif self._walk_at is not None and self._roaming.own_kind == WALK \
                and time.monotonic() - self._walk_at < WALK_RESULTS_FRESH:
            self._walk_scanned = True


def bgscan_threshold(bgscan: str) -> int:
    """The signal below which bgscan scans at its short interval: the second field of
    "simple:30:-65:300" and "learn:30:-65:300:file"; BGSCAN_THRESHOLD otherwise."""
    parts = bgscan.split(":")
    try:
        return int(parts[2]) if len(parts) > 2 else BGSCAN_THRESHOLD
    except ValueError:
        return BGSCAN_THRESHOLD

