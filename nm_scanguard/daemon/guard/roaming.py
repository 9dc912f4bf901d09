"""The signal floor and the guard's own scans on one guarded interface: the signal now
(SignalPoll, read by the guard while the policy wants a reading), the scan of every channel the
guard asks for when it gives bgscan back for roaming (WEAK), the scans the targeted path asks
for (targeted.py), and whether a scan is one of ours: never aborted.

With bgscan "" wpa_supplicant's signal monitor is off too, and nothing would roam: below
signal_floor_dbm the guard must make the station roam.  By setting `roam_scans`, either
targeted.py keeps bgscan suspended and scans a few channels (ROAMING), or the guard gives
bgscan back (WEAK) and asks for one scan of every channel (ask_for_scan), as bgscan would make.

A Roaming belongs to one Guard, which hands the signal it reads to the policy and decides on
the release and the scans; it touches neither bgscan nor the journal: a scan of our own changes
nothing that lasts.

The interface object all of it is asked on (Interface) is wpa_supplicant's object for the guarded
interface, looked up when first needed (GetInterface) and kept: NetworkManager may remove the
interface and add it again at a new path, with no sample in between that missed the link, so a
call answered "no such object" (ObjectGone) forgets the path and the next call looks it up
anew.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from typing import NamedTuple

from ...peers.supplicant import ObjectGone, SupplicantError, UncertainOutcome, WpaSupplicant
from .problems import SIGNAL, ProblemSink

log = logging.getLogger("scanguard")

# At most one scan of our own per this many seconds (bgscan's short interval as NetworkManager
# sets it): a signal that hovers around the floor must not make the guard a scanner.
ROAM_SCAN_GAP = 30.0
# Our own roaming scan is never aborted; if its end is never seen, stop sparing scans after this.
OWN_SCAN_LIMIT = 30.0
OWN_SCANS_KEPT = 8  # scans of ours remembered for diagnose and the status

FULL, TARGETED, REFRESH, WALK = "full", "targeted", "refresh", "walk"


class Interface:
    """wpa_supplicant's object for one guarded interface, as the guard and its helpers call it."""

    def __init__(self, ifname: str, supplicant: WpaSupplicant) -> None:
        self.ifname = ifname
        self._supplicant = supplicant
        self.path: str | None = None  # None: not looked up yet, or found gone
        # Told when the object was found gone: what was announced on it is void.
        self.on_gone: Callable[[], None] = lambda: None

    async def __call__(self) -> str:
        """The object's path, looked up if it is not known."""
        if self.path is None:
            self.path = await self._supplicant.interface(self.ifname)
        return self.path

    def look_up_again_if_gone(self, e: SupplicantError) -> None:
        """After a failed call: an object that is gone makes the next call look it up anew."""
        if isinstance(e, ObjectGone):
            self.path = None
            self.on_gone()

class Signal(NamedTuple):
    """A SignalPoll's answer: dBm, or None when it is unknown (Policy.observe_signal)."""

    rssi: int | None


class OwnScan(NamedTuple):
    """A scan the guard asked for, for the status, `monitor` and `diagnose`."""

    at: float  # wall clock
    kind: str  # FULL, TARGETED, REFRESH or WALK
    channels: tuple[int, ...]  # MHz; () for every channel


class Ours(NamedTuple):
    """What the guard knows of its own scan: when it asked (monotonic; None when no scan of
    ours runs), whether it saw the scan start, and its kind."""

    at: float | None
    started: bool
    kind: str


class Roaming:
    def __init__(self, interface: Interface, supplicant: WpaSupplicant, problems: ProblemSink,
                 changed: Callable[[], None]) -> None:
        self._interface = interface
        self._supplicant = supplicant
        self._problems = problems
        self._changed = changed  # a figure of the status changed
        self.ifname = interface.ifname
        self._own_scan_at: float | None = None  # our scan asked for, not yet ended
        self._own_scan_started = False  # ...and seen starting
        self.own_kind = FULL  # ...and what kind
        self._roam_scan_at: float | None = None  # monotonic time of our last full scan request
        self._asking = 0  # our Scan requests on their way
        self._restarts = 0  # wpa_supplicant restarts seen
        # The scans we asked for, for `scanguardctl diagnose` and the status.
        self.own: deque[OwnScan] = deque(maxlen=OWN_SCANS_KEPT)
        # The guard stops: a scan asked for now would be nobody's, and the guard that follows on
        # the interface would take it for another program's and abort it.
        self.stopping = False

    @property
    def own_scans(self) -> list[float]:
        """When we asked for scans (wall clock): what `diagnose` labels as ours."""
        return [s.at for s in self.own]

    # ---- the signal -------------------------------------------------------------------------

    async def poll(self) -> Signal | None:
        """The signal now, to hand to the policy; None for no reading at all: the object polled
        was gone (NetworkManager re-created the interface), and the new object is polled at
        the next sample, not a poll interval later while the old object's reading (a weak one,
        say) keeps deciding."""
        known = self._interface.path is not None
        rssi = await self.signal_now()
        return None if known and self._interface.path is None else Signal(rssi)

    async def signal_now(self) -> int | None:
        """The signal, or None when unknown.  Not associated or a driver that cannot tell is
        normal; anything else (a refusal, no answer) is shown: without the signal a fading
        link is never released for roaming.  Guarding goes on either way."""
        try:
            rssi = await self._supplicant.signal(await self._interface())
        except SupplicantError as e:
            self._interface.look_up_again_if_gone(e)
            self._problems.fail(f"{self.ifname}: cannot read the signal, so a fading signal does "
                                f"not release bgscan for roaming: {e}", SIGNAL)
            return None
        self._problems.clear(SIGNAL)
        return rssi

    # ---- our own scan to roam ---------------------------------------------------------------

    async def ask_for_scan(self) -> None:
        """After a release for a weak signal, ask for the scan bgscan would have made.  While
        bgscan was "" its signal monitor was off, so the fall below its threshold that makes
        bgscan scan at once went unseen; restarted below the threshold, bgscan waits its whole
        short interval (NetworkManager: 30 s) before its first scan, and the station stays on
        the fading AP that long (lab: roamed 40 s after the fade without this scan, 10 s
        with it)."""
        now = time.monotonic()
        if self.stopping:
            return
        if self._roam_scan_at is not None and now - self._roam_scan_at < ROAM_SCAN_GAP:
            log.info("%s: no scan of our own for roaming: the last was %.0f s ago; bgscan's "
                     "own scans go on", self.ifname, now - self._roam_scan_at)
            return
        self._roam_scan_at = now
        outcome = await self._request(FULL, [], None)
        if isinstance(outcome, SupplicantError):
            # A scan already running ("Scan request rejected") serves as well; in any case
            # bgscan, restored, scans within its short interval.  Nothing to retry.
            log.info("%s: asked wpa_supplicant for a scan to roam, it did not start one (%s); "
                     "bgscan's own scans go on", self.ifname, outcome)
        elif outcome:
            log.info("%s: asked wpa_supplicant for a scan so that it can roam now, not when "
                     "bgscan's short interval ends", self.ifname)

    async def own_scan(self, kind: str, channels: list[int], ssid: bytes | None) -> bool:
        """Ask for a scan of `channels` probing for `ssid`, roaming allowed (targeted.py);
        whether it was (or may have been) started."""
        if self.stopping:
            return False
        outcome = await self._request(kind, channels, ssid)
        if isinstance(outcome, UncertainOutcome):
            return True  # no answer: it may have started all the same
        if isinstance(outcome, SupplicantError):
            log.info("%s: asked wpa_supplicant for a %s scan of %s, it did not start one (%s)",
                     self.ifname, kind, mhz(channels), outcome)
            return False
        if outcome:
            log.log(logging.INFO if kind in (TARGETED, WALK) else logging.DEBUG,
                    "%s: asked wpa_supplicant for a %s scan of %s", self.ifname, kind,
                    mhz(channels))
            self._changed()
        return outcome

    async def _request(self, kind: str, channels: list[int],
                       ssid: bytes | None) -> bool | SupplicantError:
        """Record a scan of ours of `kind` and ask wpa_supplicant for it: True when asked,
        False when the guard stopped while the interface was looked up (nothing asked), or the
        error.  What was recorded before comes back unless the scan may have started (asked,
        or no answer): a refusal leaves a scan of ours still running ours (wpa_supplicant
        rejects a Scan while one runs), never aborted.

        A restart seen while the request is on its way ended whatever `before` names; the
        request itself may reach the new process (the bus hands a call to whoever owns the name
        when it arrives), so the record stands until its answer says no."""
        before, restarts = self._ours(), self._restarts
        self._become(Ours(time.monotonic(), False, kind))
        # For diagnose, from before the scan can start (its start may be announced before the
        # answer): a scan that starts within attribution's window after it is labelled ours.
        entry = OwnScan(time.time(), kind, tuple(channels))
        pushed_out = self.own[0] if len(self.own) == self.own.maxlen else None
        self.own.append(entry)
        self._asking += 1
        try:
            iface = await self._interface()
            if not self.stopping:
                await self._supplicant.scan(iface, channels, ssid)
                return True
        except SupplicantError as e:
            self._interface.look_up_again_if_gone(e)
            if not isinstance(e, UncertainOutcome):
                self._unrecord(before, restarts, entry, pushed_out)
            return e
        finally:
            self._asking -= 1
        self._unrecord(before, restarts, entry, pushed_out)
        return False

    def _unrecord(self, before: Ours, restarts: int, entry: OwnScan,
                  pushed_out: OwnScan | None) -> None:
        """A request that started no scan: the running scan of ours is the one `before` names,
        unless a restart since the request (`restarts` then) ended it, and `entry` is no scan
        of ours (somebody else's that starts next must not be labelled ours); the oldest it
        pushed out of `own` comes back."""
        if self._restarts != restarts:
            self._own_scan_at, self._own_scan_started = None, False
        else:
            self._become(before)
        if entry in self.own:
            self.own.remove(entry)
            if pushed_out is not None and len(self.own) < OWN_SCANS_KEPT:
                self.own.appendleft(pushed_out)

    def _ours(self) -> Ours:
        return Ours(self._own_scan_at, self._own_scan_started, self.own_kind)

    def _become(self, ours: Ours) -> None:
        self._own_scan_at, self._own_scan_started, self.own_kind = ours

    def running(self) -> Ours | None:
        """Our scan that runs or is on its way, for the guard that follows this one on the
        interface (Guards.stop, carry_on); None if none."""
        return self._ours() if self.is_ours() else None

    def carry_on(self, running: Ours | None) -> None:
        """The scan of ours a guard before this one left running on the interface is ours too:
        the daemon asked for it, and aborting it would cut short the roam it is for."""
        if running is not None and self._own_scan_at is None:
            self._become(running)

    def is_ours(self) -> bool:
        """Whether the scan running or announced now is our roaming scan (asked for, not yet
        seen ending, and not older than OWN_SCAN_LIMIT)."""
        return self._own_scan_at is not None \
            and time.monotonic() - self._own_scan_at < OWN_SCAN_LIMIT

    def scanning_changed(self, scanning: bool) -> None:
        """wpa_supplicant announced its Scanning property: follow our scan's start and end."""
        if self._own_scan_at is not None:
            # The first start after our request is our scan, and its end the next end.  An end
            # seen before that start is an earlier scan's, announced late (a scan aborted just
            # before the release can end as ours begins; taking its end for ours would abort
            # ours on re-engaging).
            if scanning:
                self._own_scan_started = True
            elif self._own_scan_started:
                self._own_scan_at, self._own_scan_started = None, False

    def supplicant_restarted(self) -> None:
        """A scan asked of the old process ended with it; one asked for now is decided by its
        answer (_request)."""
        self._restarts += 1
        if not self._asking:
            self._own_scan_at = None


def mhz(channels: list[int]) -> str:
    return ", ".join(f"{c} MHz" for c in channels) or "every channel"
