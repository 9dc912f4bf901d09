"""The scans on one guarded interface: whether one runs, aborting those that still start while
guarding (abort_scans) but never the guard's own roaming scan (roaming.py), refusing other
programs' scan requests (defer_client_scans), who asked for each scan (for `scanguardctl
diagnose`), and the counts the status shows.

A ScanWatch belongs to one Guard, which tells it the state it shows (state_changed), keeps its
`settings` current and runs its calls beside the sampling (`beside`); it touches neither bgscan
nor the journal: AbortScan only cuts a scan short.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

from ... import attribution, log_lines
from ...attribution import Request
from ...config import Settings
from ...peers.supplicant import NoScanRunning, SupplicantError, WpaSupplicant
from ...status import who_scanned
from . import policy as P
from .policy import GUARDED
from .problems import ABORT, DEFERRAL, ProblemSink
from .roaming import FULL, Interface, Roaming

log = logging.getLogger("scanguard")

# When an aborted scan had started, the keys of `scans_aborted`: it was running as the guard
# engaged (bgscan's timer, a client's request NetworkManager accepted just before), or it
# started while guarding (a program that calls wpa_supplicant directly, such as GeoClue; root).
AT_ENGAGE, WHILE_GUARDING = "running_at_engage", "started_while_guarding"


def deferring_in(settings: Settings, state: str) -> bool:
    """Whether other programs' NetworkManager scan requests are to be refused in `state`."""
    return settings.defer_client_scans and state in GUARDED


# Runs a coroutine beside the guard's sampling (Guard.beside).
Beside = Callable[[Coroutine[Any, Any, Any]], None]


class ScanWatch:
    def __init__(self, interface: Interface, supplicant: WpaSupplicant, roaming: Roaming,
                 problems: ProblemSink, changed: Callable[[], None], beside: Beside,
                 settings: Settings) -> None:
        self._interface = interface
        self._supplicant = supplicant
        self._roaming = roaming  # whose scans are never aborted
        self._problems = problems
        self._changed = changed  # a figure of the status changed
        self._beside = beside
        self.ifname = interface.ifname
        self.settings = settings  # the guard's, kept current by it
        self.state = P.IDLE  # the guard's, as state_changed told
        self.stopping = False  # the guard stops: no AbortScan any more
        self.scans_guarding = 0
        self.scans_idle = 0
        # Client scan requests (NetworkManager RequestScan) the polkit rule refused for us,
        # in all and since this interface last started deferring (for the log).
        self.scan_requests_deferred = 0
        self._deferred_now = 0
        # Whether the polkit rule refuses other programs' scan requests now, as the daemon's
        # ScanDeferral has it (deferral_status); until told, what this guard wants.
        self.deferral_in_force: bool | None = None
        # Scans we aborted (abort_scans), by when they had started; and since this interface
        # last started guarding (for the log).
        self.scans_aborted = {AT_ENGAGE: 0, WHILE_GUARDING: 0}
        self._aborted_now = 0
        self.scanning = False  # wpa_supplicant's Scanning property, as last announced
        self._scan_news = 0  # Scanning announcements seen
        self._aborting = False  # an AbortScan is on its way
        # Scans the kernel announced on this interface, by who asked (attribution.SOURCES),
        # and the newest one's label: the daemon's side of `scanguardctl diagnose`.
        self.scans_by_source: dict[str, int] = {}
        self.last_scan = ""
        self._ssid: tuple[str, bytes | None] | None = None  # (iface path, SSID) last read

    # ---- what wpa_supplicant says ---------------------------------------------------------

    def watch(self, iface: str) -> None:
        """Read whether a scan runs already on `iface`, beside the sampling (a peer slow to
        answer must not hold it up)."""
        self._beside(self._read_scanning(iface, self._scan_news))

    async def _read_scanning(self, iface: str, watched: int) -> None:
        """Whether a scan runs already (started before we watched): abort_scans then aborts it
        when the guard engages.  Announcements that arrive meanwhile are newer: they win."""
        try:
            scanning = await self._supplicant.scanning(iface)
        except SupplicantError as e:
            log.info("%s: cannot tell whether a scan is running (%s); the next one announced "
                     "is seen", self.ifname, e)
            return
        if self._scan_news == watched and self._interface.path == iface:
            self.scanning = scanning

    def interface_gone(self) -> None:
        self.scanning = False  # the new object announces its own scans

    def supplicant_restarted(self) -> None:
        self._roaming.supplicant_restarted()
        self.scanning = False

    def scanning_changed(self, scanning: bool) -> None:
        """wpa_supplicant announced its Scanning property.  A scan that starts while guarding
        is aborted at once, unless it is our own roaming scan."""
        self.scanning = scanning
        self._scan_news += 1
        self._roaming.scanning_changed(scanning)
        if scanning and self.state in GUARDED:
            self._abort_soon(WHILE_GUARDING)

    # ---- abort_scans ----------------------------------------------------------------------

    def guarding_began(self) -> None:
        """The guard entered a guarded state: a scan running now is cut short."""
        if self.scanning:
            self._abort_soon(AT_ENGAGE)

    def _abort_soon(self, when: str) -> None:
        if not self.settings.abort_scans or self._aborting or self.stopping or self._roaming.is_ours():
            return
        self._aborting = True
        self._beside(self._abort(when))

    async def _abort(self, when: str) -> None:
        """AbortScan, outside the guard's lock: a wpa_supplicant that hangs on it must not hold
        up a release.  It only cuts a scan short; bgscan and the journal are not involved."""
        try:
            if self.state not in GUARDED or not self.scanning:
                return  # released, or the scan ended, while this waited its turn
            await self._supplicant.abort_scan(await self._interface())
        except NoScanRunning:
            self._problems.clear(ABORT)  # it ended just before: nothing was off the channel
            log.debug("%s: the scan to abort had already ended", self.ifname)
            return
        except SupplicantError as e:
            self._interface.look_up_again_if_gone(e)
            self._problems.fail(f"{self.ifname}: could not abort a scan that takes the radio off "
                                f"the channel while guarding: {e}", ABORT)
            self._changed()
            return
        finally:
            self._aborting = False
        self._problems.clear(ABORT)
        self.scans_aborted[when] += 1
        self._aborted_now += 1
        if self._aborted_now == 1 and when == AT_ENGAGE:
            log.info(log_lines.ABORTED_AT_ENGAGE, self.ifname)
        elif self._aborted_now == 1:
            log.info(log_lines.ABORTED, self.ifname, who_scanned(self.deferring))
        self._changed()

    # ---- counting and labelling -------------------------------------------------------------

    def count_scan(self, engaged: bool) -> None:
        """A scan ended (`engaged`: while bgscan was suspended by us)."""
        if engaged:
            self.scans_guarding += 1
            if self._roaming.is_ours():
                # Not somebody else's.  A targeted or refresh scan runs while guarding by
                # design; a full one means guarding resumed before it ran.
                if self._roaming.own_kind == FULL:
                    log.info("%s: the scan the guard asked for to roam ran after guarding "
                             "resumed", self.ifname)
            elif self.deferring:
                log.info(log_lines.SCAN_RAN_REFUSING, self.ifname, who_scanned(True))
            else:
                log.info(log_lines.SCAN_RAN, self.ifname, who_scanned(False))
        else:
            self.scans_idle += 1
        self._changed()

    async def scan_started(self, ssids: tuple[bytes, ...] | None, at: float,
                           requests: Sequence[Request],
                           geoclue: Callable[[], Awaitable[int | None]]) -> None:
        """The kernel announced a scan on this interface at `at` (wall clock), probing `ssids`:
        label it from the evidence (attribution.py) and count it by who asked.  `geoclue`
        finds GeoClue's pid, asked only for a scan a direct caller's could be."""
        ssid = await self._current_ssid()
        pid = None
        if attribution.signature(ssids, ssid) == "current+wildcard":
            pid = await geoclue()
        label = attribution.attribute(ssids, at, attribution.Evidence(
            current_ssid=ssid, own_scans=list(self._roaming.own_scans), client_requests=requests,
            geoclue_pid=pid))
        self.scans_by_source[label.source] = self.scans_by_source.get(label.source, 0) + 1
        self.last_scan = label.text()
        log.debug("%s: a scan by %s (%s)", self.ifname, self.last_scan, label.basis)
        self._changed()

    async def _current_ssid(self) -> bytes | None:
        """The current access point's SSID, read once per interface object; None when it
        cannot be read (the label then says what it can without it)."""
        try:
            iface = await self._interface()
            if self._ssid is None or self._ssid[0] != iface:
                self._ssid = (iface, await self._supplicant.current_ssid(iface))
            return self._ssid[1]
        except SupplicantError as e:
            log.debug("%s: cannot read the current SSID to label a scan: %s", self.ifname, e)
            return None

    # ---- other programs' scan requests (defer_client_scans) --------------------------------

    @property
    def deferring(self) -> bool:
        """Whether other programs' NetworkManager scan requests should be refused now: the
        link is guarded or held (also when bgscan is not suspended, for want of one or
        because suspending failed: their scans hurt the transfer just the same) and
        defer_client_scans is on.  Not on a weak signal: then scans help, and bgscan is back
        on anyway.  Whether they are refused is `deferral_status`'s to say."""
        return deferring_in(self.settings, self.state)

    def deferral_status(self, in_force: bool, problem: str | None) -> None:
        """What the daemon's scan-deferral file says now (`in_force`: it refuses other
        programs' scan requests) and, if that could not be made what the guards want, why.
        The problem is shown where it contradicts what this guard wants; it was logged once
        by ScanDeferral."""
        self.deferral_in_force = in_force
        self._problems.show(DEFERRAL, problem if in_force != self.deferring else None)

    def count_deferred_request(self, who: str) -> None:
        """The polkit rule refused a client's NetworkManager scan request while we deferred.
        The first of a guarded period is logged; the rest are counted and summed up when the
        period ends, so a widget asking every 5 s does not flood the journal."""
        self.scan_requests_deferred += 1
        self._deferred_now += 1
        if self._deferred_now == 1:
            log.info(log_lines.REFUSED, self.ifname, who)
        self._changed()

    def state_changed(self, state: str, deferring: bool) -> None:
        """The guard shows `state` now (`deferring`: other programs' scan requests refused in
        it): a guarded period that ended sums up what it refused and aborted."""
        if self._deferred_now and not deferring:
            log.info(log_lines.REFUSED_COUNT, self.ifname, self._deferred_now)
            self._deferred_now = 0
        if self._aborted_now and state not in GUARDED:
            log.info(log_lines.ABORTED_COUNT, self.ifname, self._aborted_now)
            self._aborted_now = 0
        self.state = state
