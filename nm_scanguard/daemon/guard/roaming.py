"""The signal floor and the guard's own scans on one guarded interface: the signal now
(SignalPoll, while the policy wants a reading), whether the guard should give bgscan back for
roaming (WEAK), the scan of every channel it asks for with that release, the scans the targeted
path asks for (targeted.py), and whether a scan is one of ours: never aborted.

With bgscan "" wpa_supplicant's signal monitor is off too, and nothing would roam: below
signal_floor_dbm the guard must make the station roam.  By setting `roam_scans`, either
targeted.py keeps bgscan suspended and scans a few channels (ROAMING), or the guard gives
bgscan back (WEAK) and asks for one scan of every channel (ask_for_scan), as bgscan would make.

A Roaming belongs to one Guard (its `RoamingOwner`) and touches neither bgscan nor the journal: a scan
of our own changes nothing that lasts.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Coroutine
from typing import Any, NamedTuple, Protocol

from ...config import Settings
from ...peers.nm import WifiDevice
from ...peers.supplicant import SupplicantError, UncertainOutcome, WpaSupplicant
from ..bgscan import Suspended
from . import policy as P
from .policy import Policy
from .problems import SIGNAL, Problems

log = logging.getLogger("scanguard")

# At most one scan of our own per this many seconds (bgscan's short interval as NetworkManager
# sets it): a signal that hovers around the floor must not make the guard a scanner.
ROAM_SCAN_GAP = 30.0
# Our own roaming scan is never aborted; if its end is never seen, stop sparing scans after this.
OWN_SCAN_LIMIT = 30.0
OWN_SCANS_KEPT = 8  # scans of ours remembered for diagnose and the status

FULL, TARGETED, REFRESH, WALK = "full", "targeted", "refresh", "walk"


class RoamingOwner(Protocol):
    """What a Roaming asks of its Guard."""

    ifname: str
    iface_path: str | None
    dev: WifiDevice
    policy: Policy
    problems: Problems

    @property
    def settings(self) -> Settings: ...

    @property
    def suspended(self) -> Suspended | None: ...

    async def iface(self) -> str: ...

    @property
    def stopping(self) -> bool: ...

    def look_up_again_if_gone(self, e: SupplicantError) -> None: ...

    def beside(self, coro: Coroutine[Any, Any, Any]) -> None: ...

    def changed(self) -> None: ...


class OwnScan(NamedTuple):
    """A scan the guard asked for, for the status, `monitor` and `diagnose`."""

    at: float  # wall clock
    kind: str  # FULL, TARGETED, REFRESH or WALK
    channels: tuple[int, ...]  # MHz; () for every channel


class Roaming:
    def __init__(self, owner: RoamingOwner, supplicant: WpaSupplicant) -> None:
        self._owner = owner
        self._supplicant = supplicant
        self.ifname = owner.ifname
        self._own_scan_at: float | None = None  # our scan asked for, not yet ended
        self._own_scan_started = False  # ...and seen starting
        self.own_kind = FULL  # ...and what kind
        self._roam_scan_at: float | None = None  # monotonic time of our last full scan request
        # The scans we asked for, for `scanguardctl diagnose` and the status.
        self.own: deque[OwnScan] = deque(maxlen=OWN_SCANS_KEPT)

    @property
    def own_scans(self) -> list[float]:
        """When we asked for scans (wall clock): what `diagnose` labels as ours."""
        return [s.at for s in self.own]

    # ---- the signal -------------------------------------------------------------------------

    async def poll(self) -> None:
        """Read the signal if the policy needs it, and hand it to the policy."""
        owner = self._owner
        if owner.policy.signal_poll_due(time.monotonic()):
            known = owner.iface_path is not None
            rssi = await self.signal_now()
            if not (known and owner.iface_path is None):
                owner.policy.observe_signal(time.monotonic(), rssi)
            # else the object polled was gone (NetworkManager re-created the interface): no
            # reading, so the new object is polled at the next sample, not a poll interval
            # later while the old object's reading (a weak one, say) keeps deciding.

    async def signal_now(self) -> int | None:
        """The signal, or None when unknown.  Not associated or a driver that cannot tell is
        normal; anything else (a refusal, no answer) is shown: without the signal a fading
        link is never released for roaming.  Guarding goes on either way."""
        owner = self._owner
        try:
            rssi = await self._supplicant.signal(await owner.iface())
        except SupplicantError as e:
            owner.look_up_again_if_gone(e)
            owner.problems.fail(f"{self.ifname}: cannot read the signal, so a fading signal does "
                                f"not release bgscan for roaming: {e}", SIGNAL)
            return None
        owner.problems.clear(SIGNAL)
        return rssi

    def release_for_roaming(self) -> bool:
        """Whether the guard should give bgscan back for roaming now: the signal is below the
        floor, and not yet back above it by the hysteresis (the policy's WEAK)."""
        return self._owner.policy.state == P.WEAK

    # ---- our own scan to roam ---------------------------------------------------------------

    async def ask_for_scan(self) -> None:
        """After a release for a weak signal, ask for the scan bgscan would have made.  While
        bgscan was "" its signal monitor was off, so the fall below its threshold that makes
        bgscan scan at once went unseen; restarted below the threshold, bgscan waits its whole
        short interval (NetworkManager: 30 s) before its first scan, and the station stays on
        the fading AP that long (lab: roamed 40 s after the fade without this scan, 10 s
        with it)."""
        now = time.monotonic()
        if self._roam_scan_at is not None and now - self._roam_scan_at < ROAM_SCAN_GAP:
            log.info("%s: no scan of our own for roaming: the last was %.0f s ago; bgscan's "
                     "own scans go on", self.ifname, now - self._roam_scan_at)
            return
        self._roam_scan_at = self._own_scan_at = now
        self.own.append(OwnScan(time.time(), FULL, ()))  # for diagnose: ours
        self._own_scan_started, self.own_kind = False, FULL
        try:
            await self._supplicant.scan(await self._owner.iface())
        except SupplicantError as e:
            if not isinstance(e, UncertainOutcome):  # no answer: it may have started all the same
                self._own_scan_at = None
            self._owner.look_up_again_if_gone(e)
            # A scan already running ("Scan request rejected") serves as well; in any case
            # bgscan, restored, scans within its short interval.  Nothing to retry.
            log.info("%s: asked wpa_supplicant for a scan to roam, it did not start one (%s); "
                     "bgscan's own scans go on", self.ifname, e)
            return
        log.info("%s: asked wpa_supplicant for a scan so that it can roam now, not when "
                 "bgscan's short interval ends", self.ifname)

    async def own_scan(self, kind: str, channels: list[int], ssid: bytes | None) -> bool:
        """Ask for a scan of `channels` probing for `ssid`, roaming allowed (targeted.py);
        whether it was (or may have been) started."""
        owner = self._owner
        self._own_scan_at, self._own_scan_started, self.own_kind = time.monotonic(), False, kind
        self.own.append(OwnScan(time.time(), kind, tuple(channels)))
        try:
            await self._supplicant.scan(await owner.iface(), channels, ssid)
        except SupplicantError as e:
            owner.look_up_again_if_gone(e)
            if isinstance(e, UncertainOutcome):
                return True  # no answer: it may have started all the same
            self._own_scan_at = None
            log.info("%s: asked wpa_supplicant for a %s scan of %s, it did not start one (%s)",
                     self.ifname, kind, mhz(channels), e)
            return False
        log.log(logging.INFO if kind in (TARGETED, WALK) else logging.DEBUG,
                "%s: asked wpa_supplicant for a %s scan of %s", self.ifname, kind, mhz(channels))
        owner.changed()
        return True

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
        self._own_scan_at = None  # a scan asked of the old process ended with it


def mhz(channels: list[int]) -> str:
    return ", ".join(f"{c} MHz" for c in channels) or "every channel"
