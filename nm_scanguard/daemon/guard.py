"""One activated Wi-Fi interface: sample counters, ask the policy, suspend or restore bgscan.

A Guard gets what it works with injected (a counter reader, wpa_supplicant for the interface
object and the signal, a Suspender that owns the bgscan string and the journal) and reports
through one listener; it never reaches into the daemon.  So it can be tested with fakes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import traceback
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, Protocol

from .. import attribution
from ..attribution import Request
from ..config import Settings
from ..peers.netlink import NetlinkError
from ..peers.nm import WifiDevice
from ..peers.supplicant import NoScanRunning, ObjectGone, SupplicantError, UncertainOutcome, WpaSupplicant
from ..rates import Counters, RateMeter, Rates
from ..status import DeviceStatus, device_line, who_scanned
from ..text import clipped, cut
from . import policy as P
from .policy import Policy
from .suspension import NothingToSuspend, Suspended, Suspender, interface_of

log = logging.getLogger("scanguard")

# At most one scan of our own per this many seconds (bgscan's short interval as NetworkManager
# sets it): a signal that hovers around the floor must not make the guard a scanner.
ROAM_SCAN_GAP = 30.0

# The kinds of problem a guard shows, each logged once per change and cleared by its own
# success: STEP by a clean sample (the interface, engaging, releasing), SIGNAL by a signal
# poll that got an answer, UNEXPECTED (a bug: its traceback is logged once per distinct error)
# by a sample that ran through, SETTINGS by the profile being readable again (WifiDevice),
# COUNTERS by a counter read the kernel answered.
SETTINGS, STEP, SIGNAL, UNEXPECTED = "settings", "step", "signal", "unexpected"
COUNTERS = "counters"
# ABORT: an AbortScan that failed, cleared by the next one wpa_supplicant answered.
ABORT = "abort"
# DEFERRAL: the scan-deferral file does not say what this guard wants (the daemon's
# ScanDeferral could not write it, and logged that); set and cleared by deferral_status.
DEFERRAL = "deferral"
_KINDS = (SETTINGS, STEP, COUNTERS, SIGNAL, ABORT, DEFERRAL, UNEXPECTED)
# The states in which a scan hurts the transfer: it is aborted (abort_scans) and other
# programs' scan requests are refused (defer_client_scans).  Not WEAK, where scans are what
# roaming needs, nor IDLE.  Also where bgscan is not suspended, because the network has none
# (NO_BGSCAN) or suspending it failed (ERROR): neither needs the crash journal (AbortScan
# changes nothing that lasts, and the deferral file names this process, so a crash cannot
# leave it refusing), and both keep other programs' scans off the transfer.
GUARDED = (P.GUARDING, P.HELD, P.NO_BGSCAN, P.ERROR)
# When an aborted scan had started, the keys of `scans_aborted`: it was running as the guard
# engaged (bgscan's timer, a client's request NetworkManager accepted just before), or it
# started while guarding (a program that calls wpa_supplicant directly, such as GeoClue; root).
AT_ENGAGE, WHILE_GUARDING = "running_at_engage", "started_while_guarding"
# Our own roaming scan is never aborted; if its end is never seen, stop sparing scans after this.
OWN_SCAN_LIMIT = 30.0
OWN_SCANS_KEPT = 4  # roaming scans remembered for diagnose (they are ROAM_SCAN_GAP apart)
MAX_TRACEBACKS = 16  # distinct unexpected errors whose traceback is logged, per logger


def unexpected_line(e: BaseException, what: str) -> str:
    """One line for an error nobody foresaw: its type, text and where it was raised."""
    frame = traceback.extract_tb(e.__traceback__)[-1:]
    where = f" at {os.path.basename(frame[0].filename)}:{frame[0].lineno}" if frame else ""
    return (f"unexpected error {what}: {type(e).__name__}: {clipped(str(e), 120)}{where}; "
            "carrying on (please report it)")


def log_traceback_once(message: str, e: BaseException, seen: set[str]) -> bool:
    """Log `message` with the traceback if this error was not seen before (at most
    MAX_TRACEBACKS of them); whether it did."""
    if message in seen or len(seen) >= MAX_TRACEBACKS:
        return False
    seen.add(message)
    log.error("%s", message, exc_info=e)
    return True


class CounterReader(Protocol):
    def read(self, ifname: str) -> Counters | None: ...


class GuardListener(Protocol):
    def guard_state_changed(self, guard: Guard, state: str, reason: str) -> None: ...

    def guard_changed(self, guard: Guard) -> None: ...

    def run_for(self, guard: Guard, coro: Coroutine[Any, Any, Any]) -> None:
        """Run `coro` beside the guard's sampling (the daemon's supervisor); its failure is
        shown in the guard's status."""


class Guard:
    def __init__(self, dev: WifiDevice, settings: Settings, *, counters: CounterReader,
                 supplicant: WpaSupplicant, suspender: Suspender,
                 listener: GuardListener) -> None:
        self.dev = dev
        self.ifname = dev.ifname
        self.policy = Policy(settings)
        self.meter = RateMeter()
        self.rates: Rates | None = None
        self.iface_path: str | None = None  # wpa_supplicant's object for this interface
        self.no_bgscan: str | None = None  # why there is nothing to suspend, if so
        self.scans_guarding = 0
        self.scans_idle = 0
        # Client scan requests (NetworkManager RequestScan) the polkit rule refused for us,
        # in all and since this interface last started deferring (for the log).
        self.scan_requests_deferred = 0
        self._deferred_now = 0
        # Scans we aborted (abort_scans), by when they had started; and since this interface
        # last started guarding (for the log).
        self.scans_aborted = {AT_ENGAGE: 0, WHILE_GUARDING: 0}
        self._aborted_now = 0
        self.scanning = False  # wpa_supplicant's Scanning property, as last announced
        self._scan_news = 0  # Scanning announcements seen
        self._aborting = False  # an AbortScan is on its way
        self._own_scan_at: float | None = None  # our roaming scan asked for, not yet ended
        # When we last asked for a roaming scan (wall clock), for `scanguardctl diagnose`.
        self.own_scans: deque[float] = deque(maxlen=OWN_SCANS_KEPT)
        self._own_scan_started = False  # ...and seen starting
        # Scans the kernel announced on this interface, by who asked (attribution.SOURCES),
        # and the newest one's label: the daemon's side of `scanguardctl diagnose`.
        self.scans_by_source: dict[str, int] = {}
        self.last_scan = ""
        self._ssid: tuple[str, bytes | None] | None = None  # (iface path, SSID) last read
        self.state = P.IDLE
        self.reason = "connected"
        self.since = time.time()
        self._counters = counters
        self._supplicant = supplicant
        self._suspender = suspender
        self._listener = listener
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        # The current problem of each kind, shown in the status, and the last one logged of
        # each kind: log changes, not repeats.
        self._error: dict[str, str] = {}
        self._logged: dict[str, str] = {}
        self._tracebacks: set[str] = set()  # unexpected errors whose traceback was logged
        self._engage_failed = False  # the last try to suspend bgscan raised
        # Whether the polkit rule refuses other programs' scan requests now, as the daemon's
        # ScanDeferral has it (deferral_status); until told, what this guard wants.
        self._deferral_in_force: bool | None = None
        self._lock = asyncio.Lock()  # one change to wpa_supplicant at a time
        self._roam_scan_at: float | None = None  # monotonic time of our last scan request
        self._settings_problem()

    # ---- life cycle -----------------------------------------------------------------------

    @property
    def settings(self) -> Settings:
        return self.policy.settings

    @property
    def suspended(self) -> Suspended | None:
        """Our "" on this interface's network, as the Suspender (its one owner) has it."""
        return self._suspender.suspended_on(self.ifname)

    @property
    def engaged(self) -> bool:
        return self.suspended is not None

    @property
    def deferring(self) -> bool:
        """Whether other programs' NetworkManager scan requests should be refused now: the
        link is guarded or held (also when bgscan is not suspended, for want of one or
        because suspending failed: their scans hurt the transfer just the same) and
        defer_client_scans is on.  Not on a weak signal: then scans help, and bgscan is back
        on anyway.  Whether they are refused is `deferral_status`'s to say."""
        return self._deferring_in(self.state)

    def deferral_status(self, in_force: bool, problem: str | None) -> None:
        """What the daemon's scan-deferral file says now (`in_force`: it refuses other
        programs' scan requests) and, if that could not be made what the guards want, why.
        The problem is shown where it contradicts what this guard wants; it was logged once
        by ScanDeferral."""
        self._deferral_in_force = in_force
        if problem and in_force != self.deferring:
            self._error[DEFERRAL] = problem
        else:
            self._error.pop(DEFERRAL, None)

    async def attach(self) -> None:
        """Find the interface in wpa_supplicant now, so that scans are counted from the start,
        and start sampling."""
        try:
            iface = await self._iface()
        except SupplicantError as e:
            self._fail(f"{self.ifname}: {e}")
        else:
            # Beside the sampling, which a peer slow to answer must not hold up.
            self._listener.run_for(self, self._read_scanning(iface, self._scan_news))
        self._task = asyncio.create_task(self._run(), name=f"guard-{self.ifname}")

    async def _read_scanning(self, iface: str, watched: int) -> None:
        """Whether a scan runs already (started before we watched): abort_scans then aborts it
        when the guard engages.  Announcements that arrive meanwhile are newer: they win."""
        try:
            scanning = await self._supplicant.scanning(iface)
        except SupplicantError as e:
            log.info("%s: cannot tell whether a scan is running (%s); the next one announced "
                     "is seen", self.ifname, e)
            return
        if self._scan_news == watched and self.iface_path == iface:
            self.scanning = scanning

    async def stop(self, restore: bool = True) -> None:
        """Stop sampling and give back whatever we suspended (unless the bus is gone: then
        the journal keeps it for the next start)."""
        self._stopping = True
        # Python 3.11's asyncio.wait_for swallows a cancellation that arrives just as the call
        # it waits for completes (CPython gh-86296, fixed in 3.12): then the sampling loop would
        # run on, and stop() waited a whole call timeout.  So the loop also checks _stopping,
        # and the cancellation is repeated until the task has ended.
        while self._task is not None and not self._task.done():
            self._task.cancel()
            await asyncio.wait({self._task}, timeout=0.5)
        self._task = None
        if restore:
            async with self._lock:
                try:
                    await self._release("the guard stopped")
                    await self._suspender.restore_left_behind(self.ifname)
                finally:
                    # What could not be restored is nobody's now: the journal's replay
                    # restores it (Daemon retries it at once), not a guard that is gone.
                    self._suspender.abandon(self.ifname)

    def update(self, dev: WifiDevice, settings: Settings) -> None:
        if dev.connection_uuid != self.dev.connection_uuid:
            self.no_bgscan = None
        self.dev = dev
        self.policy.update_settings(settings)
        self._settings_problem()

    async def _run(self) -> None:
        while not self._stopping:
            await asyncio.sleep(self.settings.sample_interval)
            try:
                await self.step()
            except asyncio.CancelledError:
                raise
            except Exception as e:  # keep guarding whatever one step did
                self.unexpected(e, "while sampling")

    # ---- one sample -----------------------------------------------------------------------

    async def step(self) -> None:
        try:
            counters = self._counters.read(self.ifname)
        except NetlinkError as e:
            # An expected failure (a timeout, a refusal): no sample this time, as when the
            # interface vanished (Policy.observe_unknown).
            self._fail(f"{self.ifname}: cannot read the interface's traffic counters over "
                       f"rtnetlink ({e.strerror or e}); trying again at every sample", COUNTERS)
            self.meter.reset()
            self.rates = None
            self.policy.observe_unknown(time.monotonic())
            await self.kick()
            self._clear(UNEXPECTED)
            return
        self._clear(COUNTERS)
        if counters is None:
            self._fail(f"{self.ifname}: interface has vanished; waiting for NetworkManager to notice")
            self.meter.reset()
            self.rates = None
            self.policy.observe_unknown(time.monotonic())
        else:
            self.rates = self.meter.update(counters)
            self.policy.observe(counters.time, self.rates)
        if await self.kick() and counters is not None:
            self._clear(STEP)  # a clean step: the next problem is news again
        self._clear(UNEXPECTED)  # this sample ran through

    async def kick(self) -> bool:
        """Read the signal if the policy needs it, then act.  Also used when a hold changes."""
        if self.policy.signal_poll_due(time.monotonic()):
            known = self.iface_path is not None
            rssi = await self._signal()
            if not (known and self.iface_path is None):
                self.policy.observe_signal(time.monotonic(), rssi)
            # else the object polled was gone (NetworkManager re-created the interface): no
            # reading, so the new object is polled at the next sample, not a poll interval
            # later while the old object's reading (a weak one, say) keeps deciding.
        return await self.reconcile()

    async def _signal(self) -> int | None:
        """The signal, or None when unknown.  Not associated or a driver that cannot tell is
        normal; anything else (a refusal, no answer) is shown: without the signal a fading
        link is never released for roaming.  Guarding goes on either way."""
        try:
            rssi = await self._supplicant.signal(await self._iface())
        except SupplicantError as e:
            self._look_up_again_if_gone(e)
            self._fail(f"{self.ifname}: cannot read the signal, so a fading signal does not "
                       f"release bgscan for roaming: {e}", SIGNAL)
            return None
        self._clear(SIGNAL)
        return rssi

    async def reconcile(self) -> bool:
        """Make wpa_supplicant match what the policy wants; safe to call at any time.
        False if wpa_supplicant refused (logged; the next sample tries again)."""
        async with self._lock:
            ok = True
            was = self.state
            try:
                await self._release_if_interface_replaced()
                await self._recheck_if_in_doubt()
                if self.policy.want_engaged and not self.engaged and not self._stopping:
                    # Once stopped, nothing restores what it would suspend (a kick spawned for
                    # a hold can still be on its way when the interface stops being guarded).
                    self._engage_failed = True  # until it returns
                    await self._engage()
                    self._engage_failed = False
                elif not self.policy.want_engaged and self.engaged:
                    await self._release(self.policy.reason)
                    if self.policy.state == P.WEAK:
                        await self._scan_to_roam()
            except SupplicantError as e:
                self._look_up_again_if_gone(e)
                self._fail(f"{self.ifname}: {e}")
                ok = False
            self._publish()
            if was not in GUARDED and self.state in GUARDED and self.scanning:
                self._abort_soon(AT_ENGAGE)
            return ok

    async def _release_if_interface_replaced(self) -> None:
        """Our suspension lies under the interface object wpa_supplicant had when we suspended;
        once that object was found gone (`iface_path` reset), a new one means the suspension
        went with the old: else the guard counts itself engaged while the new object's network
        keeps its bgscan and the link stays busy."""
        if self.suspended is not None and self.iface_path is None \
                and interface_of(self.suspended.network) != await self._iface():
            await self._release("wpa_supplicant re-created the interface")

    async def _recheck_if_in_doubt(self) -> None:
        """A suspension can be in doubt (Suspender.in_doubt): a release whose Set went
        unanswered and whose read-back failed (the Set may have landed), or a suspend that
        spanned a wpa_supplicant restart (its "" most likely went with the old process).
        Before counting ourselves engaged, read bgscan (Suspender.recheck); if it is no longer
        "", the suspension ends here and the caller suspends anew.  (While the policy wants
        bgscan on, the release is simply tried again, and restoring reads first anyway.)"""
        suspended = self.suspended
        if suspended is not None and self.policy.want_engaged \
                and self._suspender.in_doubt(suspended.network):
            await self._suspender.recheck(suspended, self.ifname)

    def hold_changed(self, held: bool) -> None:
        self.policy.set_held(held)

    # ---- engage / release -----------------------------------------------------------------

    def _look_up_again_if_gone(self, e: SupplicantError) -> None:
        """NetworkManager may have removed wpa_supplicant's interface and added it again at a
        new path, with no sample in between that missed the link: an object that is gone
        makes the next call ask GetInterface anew."""
        if isinstance(e, ObjectGone):
            self.iface_path = None
            self.scanning = False  # the new object announces its own scans

    async def _iface(self) -> str:
        if self.iface_path is None:
            self.iface_path = await self._supplicant.interface(self.ifname)
        return self.iface_path

    async def _engage(self) -> None:
        try:
            suspended = await self._suspender.suspend(await self._iface(), self.ifname)
        except NothingToSuspend as e:
            if self.no_bgscan != e.reason:
                log.info("%s: nothing to suspend: %s", self.ifname, e.reason)
            self.no_bgscan = e.reason
            return
        except SupplicantError:
            self.no_bgscan = None  # whatever was found before, this try failed (ERROR)
            raise
        self.no_bgscan = None
        log.info("%s: bgscan suspended on %s (was \"%s\"): %s", self.ifname,
                 suspended.network, suspended.saved, self.policy.reason)

    async def _release(self, why: str) -> None:
        suspended = self.suspended
        if suspended is None:
            return
        await self._suspender.restore(suspended, self.ifname)
        log.info("%s: bgscan restored to \"%s\": %s", self.ifname, suspended.saved, why)

    async def _scan_to_roam(self) -> None:
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
        self.own_scans.append(time.time())  # for diagnose: this interface's scan was ours
        self._own_scan_started = False
        try:
            await self._supplicant.scan(await self._iface())
        except SupplicantError as e:
            if not isinstance(e, UncertainOutcome):  # no answer: it may have started all the same
                self._own_scan_at = None
            self._look_up_again_if_gone(e)
            # A scan already running ("Scan request rejected") serves as well; in any case
            # bgscan, restored, scans within its short interval.  Nothing to retry.
            log.info("%s: asked wpa_supplicant for a scan to roam, it did not start one (%s); "
                     "bgscan's own scans go on", self.ifname, e)
            return
        log.info("%s: asked wpa_supplicant for a scan so that it can roam now, not when "
                 "bgscan's short interval ends", self.ifname)

    async def network_changed(self, net: str | None) -> None:
        """wpa_supplicant's CurrentNetwork changed (NM re-activated, or we lost the AP)."""
        if self.suspended is not None and net != self.suspended.network:
            async with self._lock:
                await self._release("wpa_supplicant switched to another network object")
        self.no_bgscan = None
        await self.reconcile()

    async def network_gone(self, gone: Suspended) -> None:
        """NetworkRemoved took the object our "" was on (Suspender.network_removed ended that
        suspension): NetworkManager re-activating, most often, with a new object at the same
        path and a fresh bgscan.  Engage there if the link is still busy."""
        log.info("%s: network %s was removed (NetworkManager re-activating?)", self.ifname,
                 gone.network)
        await self.reconcile()

    def supplicant_restarted(self) -> None:
        """A new wpa_supplicant has fresh networks from NM: nothing of ours is left to restore
        (the Suspender forgets every suspension)."""
        self.iface_path = self.no_bgscan = self._own_scan_at = None
        self.scanning = False

    # ---- scans that still run: abort them while guarding (abort_scans) --------------------

    def scanning_changed(self, scanning: bool) -> None:
        """wpa_supplicant announced its Scanning property.  A scan that starts while guarding
        is aborted at once, unless it is our own roaming scan."""
        self.scanning = scanning
        self._scan_news += 1
        if self._own_scan_at is not None:
            # The first start after our request is our scan, and its end the next end.  An end
            # seen before that start is an earlier scan's, announced late (a scan aborted just
            # before the release can end as ours begins; taking its end for ours would abort
            # ours on re-engaging).
            if scanning:
                self._own_scan_started = True
            elif self._own_scan_started:
                self._own_scan_at, self._own_scan_started = None, False
        if scanning and self.state in GUARDED:
            self._abort_soon(WHILE_GUARDING)

    def _own_scan(self) -> bool:
        return self._own_scan_at is not None \
            and time.monotonic() - self._own_scan_at < OWN_SCAN_LIMIT

    def _abort_soon(self, when: str) -> None:
        if not self.settings.abort_scans or self._aborting or self._stopping or self._own_scan():
            return
        self._aborting = True
        self._listener.run_for(self, self._abort(when))

    async def _abort(self, when: str) -> None:
        """AbortScan, outside the lock: a wpa_supplicant that hangs on it must not hold up a
        release.  It only cuts a scan short; bgscan and the journal are not involved."""
        try:
            if self.state not in GUARDED or not self.scanning:
                return  # released, or the scan ended, while this waited its turn
            await self._supplicant.abort_scan(await self._iface())
        except NoScanRunning:
            self._clear(ABORT)  # it ended just before: nothing was off the channel any more
            log.debug("%s: the scan to abort had already ended", self.ifname)
            return
        except SupplicantError as e:
            self._look_up_again_if_gone(e)
            self._fail(f"{self.ifname}: could not abort a scan that takes the radio off the "
                       f"channel while guarding: {e}", ABORT)
            self._listener.guard_changed(self)
            return
        finally:
            self._aborting = False
        self._clear(ABORT)
        self.scans_aborted[when] += 1
        self._aborted_now += 1
        if self._aborted_now == 1:
            log.info("%s: aborted a scan %s (abort_scans); further ones are counted in "
                     "scanguardctl status", self.ifname,
                     "that was running when the guard engaged" if when == AT_ENGAGE
                     else f"that started while guarding, asked for by {who_scanned(self.deferring)}")
        self._listener.guard_changed(self)

    def count_scan(self) -> None:
        if self.engaged:
            self.scans_guarding += 1
            if self._own_scan():
                # Not somebody else's: ours, asked for when the signal faded, and guarding
                # resumed before it ran: not root's or GeoClue's.
                log.info("%s: the scan the guard asked for to roam ran after guarding resumed",
                         self.ifname)
            elif self.deferring:
                log.info("%s: a scan ran while guarding, though client scan requests are "
                         "refused; it was asked for by %s", self.ifname, who_scanned(True))
            else:
                log.info("%s: a scan ran while guarding, asked for by %s; bgscan cannot stop "
                         "those; defer_client_scans = yes refuses NetworkManager's clients",
                         self.ifname, who_scanned(False))
        else:
            self.scans_idle += 1
        self._listener.guard_changed(self)

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
            current_ssid=ssid, own_scans=list(self.own_scans), client_requests=requests,
            geoclue_pid=pid))
        self.scans_by_source[label.source] = self.scans_by_source.get(label.source, 0) + 1
        self.last_scan = label.text()
        log.debug("%s: a scan by %s (%s)", self.ifname, self.last_scan, label.basis)
        self._listener.guard_changed(self)

    async def _current_ssid(self) -> bytes | None:
        """The current access point's SSID, read once per interface object; None when it
        cannot be read (the label then says what it can without it)."""
        try:
            iface = await self._iface()
            if self._ssid is None or self._ssid[0] != iface:
                self._ssid = (iface, await self._supplicant.current_ssid(iface))
            return self._ssid[1]
        except SupplicantError as e:
            log.debug("%s: cannot read the current SSID to label a scan: %s", self.ifname, e)
            return None

    def count_deferred_request(self, who: str) -> None:
        """The polkit rule refused a client's NetworkManager scan request while we deferred.
        The first of a guarded period is logged; the rest are counted and summed up when the
        period ends, so a widget asking every 5 s does not flood the journal."""
        self.scan_requests_deferred += 1
        self._deferred_now += 1
        if self._deferred_now == 1:
            log.info("%s: refused a Wi-Fi scan request from %s while guarding (defer_client_scans); "
                     "further ones are counted in scanguardctl status", self.ifname, who)
        self._listener.guard_changed(self)

    # ---- reporting ------------------------------------------------------------------------

    def _fail(self, message: str, kind: str = STEP) -> None:
        self._error[kind] = message
        if message != self._logged.get(kind):
            log.warning("%s", message)
            self._logged[kind] = message

    def _clear(self, kind: str) -> None:
        self._error.pop(kind, None)
        self._logged.pop(kind, None)

    def _settings_problem(self) -> None:
        """Show (or stop showing) that the profile's settings could not be read."""
        if self.dev.settings_error:
            self._fail(self.dev.settings_error, SETTINGS)
        elif SETTINGS in self._error:
            log.info("%s: the settings of profile %s can be read again", self.ifname,
                     clipped(self.dev.connection_id or self.dev.connection_uuid))
            self._clear(SETTINGS)

    def unexpected(self, e: BaseException, what: str) -> None:
        """An error nobody foresaw (a bug): its traceback is logged the first time, then one
        line each time the problem changes; shown in the status until a sample runs through."""
        message = f"{self.ifname}: {unexpected_line(e, what)}"
        if log_traceback_once(message, e, self._tracebacks):
            self._logged[UNEXPECTED] = message
        self._fail(message, UNEXPECTED)

    def _publish(self) -> None:
        state, reason = self.shown_state()
        if state != self.state:
            if self._deferred_now and not self._deferring_in(state):
                log.info("%s: %d Wi-Fi scan request(s) of other programs were refused while "
                         "guarding", self.ifname, self._deferred_now)
                self._deferred_now = 0
            if self._aborted_now and state not in GUARDED:
                log.info("%s: %d scan(s) were aborted while guarding", self.ifname,
                         self._aborted_now)
                self._aborted_now = 0
            self.state, self.since, self.reason = state, time.time(), reason
            log.info("%s: %s (%s)", self.ifname, state, self.reason)
            self._listener.guard_state_changed(self, state, self.reason)
        else:
            # The same state with this sample's figures: sent with the other figures (the
            # bus API and the STATUS= line throttle those), not as a state change.
            self.reason = reason
        self._listener.guard_changed(self)

    def shown_state(self) -> tuple[str, str]:
        """The state and reason the status shows: what the guard does, not only what the
        policy wants.  GUARDING and HELD only while bgscan is surely suspended; else NO_BGSCAN
        when the network has none, ERROR when suspending it failed (the error says why) or
        whether it stands is in doubt."""
        state, reason = self.policy.state, self.policy.reason
        suspended = self.suspended
        if state in (P.GUARDING, P.HELD) and suspended is not None \
                and self._suspender.in_doubt(suspended.network):
            return P.ERROR, (f"{reason}; whether bgscan is still off is not known (wpa_supplicant "
                             "did not answer); reading it again at the next sample")
        if state not in (P.GUARDING, P.HELD) or suspended is not None:
            return state, reason
        if self.no_bgscan:
            return P.NO_BGSCAN, self.no_bgscan
        if self._engage_failed:
            return P.ERROR, f"{reason}; bgscan could not be suspended, see the problem"
        return P.IDLE, "the guard is stopping"

    def _deferring_in(self, state: str) -> bool:
        return self.settings.defer_client_scans and state in GUARDED

    def status(self) -> DeviceStatus:
        r = self.rates
        return DeviceStatus(
            interface=self.ifname,
            state=self.state,
            reason=self.reason,
            since=self.since,
            rx_bps=r.rx_bps if r else 0.0,
            tx_bps=r.tx_bps if r else 0.0,
            pps=r.pps if r else 0.0,
            signal_dbm=self.policy.signal,
            suspended_bgscan=self.suspended.saved if self.suspended else "",
            network=self.suspended.network if self.suspended else "",
            scans_guarding=self.scans_guarding,
            scans_idle=self.scans_idle,
            deferring_scans=self.deferring and self._deferral_in_force is not False,
            scan_requests_deferred=self.scan_requests_deferred,
            scans_aborted=dict(self.scans_aborted),
            own_scans=list(self.own_scans),
            scans_by_source=dict(self.scans_by_source),
            last_scan=self.last_scan,
            connection_id=self.dev.connection_id,
            connection_uuid=self.dev.connection_uuid,
            error="; ".join(cut(self._error[k]) for k in _KINDS if k in self._error),
            settings=self.settings.values(),
            settings_sources={k: self.settings.source(k) for k in self.settings.values()},
        )

    def status_line(self) -> str:
        """For sd_notify STATUS= (systemctl status): the CLI's line without the connection's
        name and the state's age (one formatter, status.device_line)."""
        return device_line(self.status().as_plain(), connection=False, age=False)

