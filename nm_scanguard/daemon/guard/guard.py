"""One activated Wi-Fi interface: sample counters, ask the policy, suspend or restore bgscan.

A Guard gets what it works with injected (a counter reader, wpa_supplicant for the interface
object and the signal, Bgscan that owns the bgscan string and the journal, a way to run
a coroutine beside its sampling) and reports through its Changes (state_changed, changed); it
never reaches into the daemon.  So it can be tested with fakes.  Its jobs beside suspending
and restoring are its own classes: the sampling loop and the counters (sampling.py), the
signal floor and roaming (roaming.py, targeted.py), its scans (scans.py).  They read and act;
the guard alone feeds its policy (step, kick, hold_changed, update) and carries out what it
decides.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from ... import log_lines
from ...config import Settings
from ...peers.nm import WifiDevice
from ...peers.supplicant import SupplicantError, WpaSupplicant
from ...peers.values import interface_of
from ...status import DeviceStatus
from ...text import clipped, shown
from ..bgscan import Bgscan, NothingToSuspend, Suspended
from ..changes import Changes
from . import policy as P
from .candidates import Candidates
from .policy import GUARDED, Policy
from .problems import SETTINGS, STEP, UNEXPECTED, Problems
from .report import device_status, status_line
from .roaming import Interface, Roaming
from .sampling import CounterReader, Sampler
from .scans import ScanWatch, deferring_in
from .targeted import Targeted

log = logging.getLogger("scanguard")

# Runs a coroutine beside the guard's sampling (the daemon's supervisor, Daemon.spawn); its
# failure is shown in the status of the guard given.
Spawn = Callable[[Coroutine[Any, Any, Any], "Guard"], object]


class Guard:
    def __init__(self, dev: WifiDevice, settings: Settings, *, counters: CounterReader,
                 supplicant: WpaSupplicant, bgscan: Bgscan, spawn: Spawn,
                 candidates: Candidates | None = None) -> None:
        self.dev = dev
        self.ifname = dev.ifname
        self.policy = Policy(settings)
        self.interface = Interface(self.ifname, supplicant)  # wpa_supplicant's object for it
        self.no_bgscan: str | None = None  # why there is nothing to suspend, if so
        self.state, self.reason, self.since = P.IDLE, "connected", time.time()
        self._bgscan = bgscan
        self._spawn = spawn
        # A listener's failure rises into what changed the guard (its step: shown in its status).
        self.state_changed: Changes[[str, str, str]] = Changes(raises=True)  # (ifname, state, why)
        self.changed: Changes[[]] = Changes(raises=True)  # a figure of the status changed
        self._stopping = False
        self.problems = Problems()  # shown in the status, each logged once per change
        self.sampler, self.roaming, self.targeted, self.scans = helpers(
            self, counters, supplicant, candidates)
        self._engage_failed = False  # the last try to suspend bgscan raised
        self._left: str | None = None  # a network wpa_supplicant left with our "" on it
        self._lock = asyncio.Lock()  # one change to wpa_supplicant at a time
        show_settings_problem(self.problems, dev)

    # ---- life cycle -----------------------------------------------------------------------

    @property
    def settings(self) -> Settings:
        return self.policy.settings

    @property
    def suspended(self) -> Suspended | None:
        """Our "" on this interface's network, as Bgscan (its one owner) has it."""
        return self._bgscan.current(self.ifname)

    @property
    def engaged(self) -> bool:
        return self.suspended is not None

    def beside(self, coro: Coroutine[Any, Any, Any]) -> None:
        """Run `coro` beside the sampling, which a peer slow to answer must not hold up."""
        self._spawn(coro, self)

    async def attach(self) -> None:
        """Look the interface up now, so that scans count from the start; start sampling."""
        try:
            iface = await self.iface()
        except SupplicantError as e:
            self.problems.fail(f"{self.ifname}: {e}")
        else:
            self.scans.watch(iface)
            self.beside(self.targeted.learn())  # the access points seen at connect time
        self.sampler.start(self.step, self.unexpected)

    async def stop(self, restore: bool = True) -> None:
        """Stop sampling and give back what we suspended (what cannot be: the journal's)."""
        self._stopping = self.scans.stopping = self.roaming.stopping = True
        await self.sampler.stop()
        if restore:
            async with self._lock:
                try:
                    await self._release("the guard stopped")
                    # What a suspend cancelled with its Set on the way left behind, now rather
                    # than at a next start that may be far off.
                    await self._bgscan.replay(ifname=self.ifname)
                finally:
                    # What could not be restored is nobody's now: the journal's replay
                    # restores it (Daemon retries it at once), not a guard that is gone.
                    self._bgscan.abandon(self.ifname)

    def update(self, dev: WifiDevice, settings: Settings) -> None:
        if dev.connection_uuid != self.dev.connection_uuid:
            self.no_bgscan = None
        self.dev = dev
        self.policy.update_settings(settings)
        self.targeted.station.connection = dev.connection_uuid
        self.sampler.settings = self.scans.settings = self.targeted.station.settings = self.settings
        show_settings_problem(self.problems, dev)

    # ---- one sample -----------------------------------------------------------------------

    async def step(self) -> None:
        """One sample: read the counters and hand them to the policy, then the rest (kick)."""
        sample = self.sampler.read()
        if sample is None:
            self.policy.observe_unknown(time.monotonic())
        else:
            self.policy.observe(sample.time, sample.rates)
        if await self.kick() and sample is not None:
            self.problems.clear(STEP)  # a clean step: the next problem is news again
        self.problems.clear(UNEXPECTED)  # this sample ran through

    async def kick(self) -> bool:
        """The rest of a sample, also run when a hold changes: the signal to the policy if it
        wants a reading, the targeted path's decision on a weak signal, then reconcile."""
        policy = self.policy
        if policy.signal_poll_due(time.monotonic()) and (signal := await self.roaming.poll()):
            policy.observe_signal(time.monotonic(), signal.rssi)
        if policy.targeted and policy.state not in (P.WEAK, P.ROAMING):
            policy.set_targeted(False, policy.reason)  # its fade is over
        targeting = await self.targeted.fade(
            policy.state, policy.signal, s.saved if (s := self.suspended) else None, self.settings)
        while targeting is not None:  # the policy has it before its scan starts
            policy.set_targeted(targeting.on, targeting.why)
            targeting = await self.targeted.scan(targeting) if targeting.on else None
        return await self.reconcile()

    async def reconcile(self) -> bool:
        """Make wpa_supplicant match what the policy wants; safe to call at any time.
        False if wpa_supplicant refused (logged; the next sample tries again)."""
        async with self._lock:
            ok = True
            was = self.scans.state
            try:
                await self._release_if_interface_replaced()
                await self._release_if_network_left()
                await self._recheck_if_in_doubt()
                if self.policy.want_engaged and not self.engaged and not self._stopping:
                    # Once stopped, nothing restores what it would suspend (a kick spawned for
                    # a hold can still be on its way when the interface stops being guarded).
                    self._engage_failed = True  # until it returns
                    await self._engage()
                    self._engage_failed = False
                elif not self.policy.want_engaged and self.engaged:
                    await self._release(self.policy.reason)
                    if self.policy.state == P.WEAK:  # given back for roaming: scan now
                        await self.roaming.ask_for_scan()
            except SupplicantError as e:
                self.interface.look_up_again_if_gone(e)
                self.problems.fail(f"{self.ifname}: {e}")
                ok = False
            self._publish()
            if was not in GUARDED and self.scans.state in GUARDED:
                self.scans.guarding_began()
            return ok

    async def _release_if_interface_replaced(self) -> None:
        """Our "" went with an interface object found gone (its path reset) once a new one
        stands: else the guard counts itself engaged while the new one's bgscan runs."""
        if self.suspended is not None and self.interface.path is None \
                and interface_of(self.suspended.network) != await self.iface():
            await self._release("wpa_supplicant re-created the interface")

    async def _release_if_network_left(self) -> None:
        """Our "" on a network object wpa_supplicant left (network_changed) is given back,
        however busy the link: until then the state is ERROR (shown_state)."""
        if (suspended := self.suspended) is not None and suspended.network == self._left:
            await self._release("wpa_supplicant switched to another network object")
        if (suspended := self.suspended) is None or suspended.network != self._left:
            self._left = None

    async def _recheck_if_in_doubt(self) -> None:
        """A suspension in doubt (Suspended.in_doubt: a Set unanswered and not read back, or a
        suspend across a wpa_supplicant restart) is read again (Bgscan.recheck) before we count
        ourselves engaged: no longer "" ends it, and the caller suspends anew."""
        suspended = self.suspended
        if suspended is not None and self.policy.want_engaged and suspended.in_doubt:
            await self._bgscan.recheck(self.ifname)

    def hold_changed(self, held: bool) -> None:
        self.policy.set_held(held)

    # ---- engage / release -----------------------------------------------------------------

    async def iface(self) -> str:
        return await self.interface()

    async def _engage(self) -> None:
        try:
            suspended = await self._bgscan.suspend(await self.iface(), self.ifname)
        except NothingToSuspend as e:
            if self.no_bgscan != str(e):
                log.info("%s: nothing to suspend: %s", self.ifname, e)
            self.no_bgscan = str(e)
            return
        except SupplicantError:
            self.no_bgscan = None  # whatever was found before, this try failed (ERROR)
            raise
        self.no_bgscan = None
        log.info(log_lines.SUSPENDED, self.ifname, suspended.network, shown(suspended.saved),
                 self.policy.reason)

    async def _release(self, why: str) -> None:
        suspended = self.suspended
        if suspended is None:
            return
        await self._bgscan.restore(self.ifname)
        log.info(log_lines.RESTORED, self.ifname, shown(suspended.saved), why)

    async def network_changed(self, net: str | None) -> None:
        """CurrentNetwork changed (NM re-activated, or we lost the AP): reconcile gives back
        our "" on the network left (once a suspend under way landed) and guards the new."""
        async with self._lock:
            suspended = self.suspended
            self._left = suspended.network if suspended and net != suspended.network else None
        self.no_bgscan = None
        await self.reconcile()

    async def network_gone(self, gone: Suspended) -> None:
        """NetworkRemoved took the object our "" was on (Bgscan.network_removed ended that
        suspension): NetworkManager re-activating, most often, with a new object at the same
        path and a fresh bgscan.  Engage there if the link is still busy."""
        log.info(log_lines.NETWORK_REMOVED, self.ifname, gone.network)
        await self.reconcile()

    def scan_done(self) -> None:
        """A scan of this interface ended: count it, and learn what it found (not stopping)."""
        self.scans.count_scan(self.engaged)
        self.targeted.scan_done()
        if not self._stopping:
            self.beside(self.targeted.learn())

    def supplicant_restarted(self) -> None:
        """A new wpa_supplicant has fresh networks from NM: nothing of ours is left to restore
        (Bgscan forgets every suspension)."""
        self.interface.path = self.no_bgscan = self._left = None
        self.scans.supplicant_restarted()
        self.targeted.supplicant_restarted()

    # ---- reporting ------------------------------------------------------------------------

    def unexpected(self, e: BaseException, what: str) -> None:
        """An error nobody foresaw (a bug), shown until a sample runs through (Problems)."""
        self.problems.unexpected(e, what, self.ifname)

    def _publish(self) -> None:
        suspended = self.suspended
        state, reason = shown_state(self.policy, suspended, self.no_bgscan, self._engage_failed,
                                    suspended is not None and suspended.network == self._left)
        # Scans follow what the policy wants: a release that failed (ERROR) keeps bgscan off,
        # but an idle link's scans, or the ones roaming needs, run as they would without it.
        watched = state if self.policy.want_engaged else self.policy.state
        if watched != self.scans.state:
            self.scans.state_changed(watched, deferring_in(self.settings, watched))
        if state != self.state:
            self.state, self.since, self.reason = state, time.time(), reason
            log.info("%s: %s (%s)", self.ifname, state, self.reason)
            self.state_changed(self.ifname, state, self.reason)
        else:
            # The same state with this sample's figures: sent with the other figures (the
            # bus API and the STATUS= line throttle those), not as a state change.
            self.reason = reason
        self.changed()

    def status(self) -> DeviceStatus:
        return device_status(self)

    def status_line(self) -> str:
        return status_line(self.status())


def shown_state(policy: Policy, suspended: Suspended | None, no_bgscan: str | None,
                engage_failed: bool, left: bool = False) -> tuple[str, str]:
    """The state and reason to show.  GUARDING, HELD and ROAMING only while bgscan is surely
    suspended (`suspended`, not in doubt, and not `left` on a network wpa_supplicant no longer
    uses); else NO_BGSCAN when the network has none (`no_bgscan` says why), ERROR when
    suspending it failed (the problem says why) or whether it stands is in doubt.  Any other
    state only once bgscan is given back: ERROR while its release failed."""
    state, reason = policy.state, policy.reason
    if suspended is not None and left:
        return P.ERROR, (f"{reason}; bgscan could not be restored on the network "
                         "wpa_supplicant left, see the problem; trying again at the next "
                         "sample")
    if state not in P.ENGAGED and suspended is not None:
        return P.ERROR, (f"{reason}; bgscan could not be restored and stays off, see the "
                         "problem; trying again at the next sample")
    if state in P.ENGAGED and suspended is not None and suspended.in_doubt:
        return P.ERROR, (f"{reason}; whether bgscan is still off is not known (wpa_supplicant "
                         "did not answer); reading it again at the next sample")
    if state not in P.ENGAGED or suspended is not None:
        return state, reason
    if no_bgscan:
        return P.NO_BGSCAN, no_bgscan
    if engage_failed:
        return P.ERROR, f"{reason}; bgscan could not be suspended, see the problem"
    return P.IDLE, "the guard is stopping"


def show_settings_problem(problems: Problems, dev: WifiDevice) -> None:
    """Show (or stop showing) that the profile's settings could not be read."""
    if dev.settings_error:
        problems.fail(dev.settings_error, SETTINGS)
    elif SETTINGS in problems:
        log.info("%s: the settings of profile %s can be read again", dev.ifname,
                 clipped(dev.connection_id or dev.connection_uuid))
        problems.clear(SETTINGS)


def helpers(guard: Guard, counters: CounterReader, supplicant: WpaSupplicant,
            candidates: Candidates | None) -> tuple[Sampler, Roaming, Targeted, ScanWatch]:
    """The guard's readers and actors, each given the values and the peers it works with, the
    guard's problems, and where to say that a figure of the status changed."""
    problems, iface, settings = guard.problems, guard.interface, guard.settings
    roaming = Roaming(iface, supplicant, problems, guard.changed)
    targeted = Targeted(iface, supplicant, roaming, problems, guard.changed, settings,
                        guard.dev.connection_uuid, candidates)
    scans = ScanWatch(iface, supplicant, roaming, problems, guard.changed, guard.beside, settings)
    iface.on_gone = scans.interface_gone  # what it announced on the object is void
    return Sampler(guard.ifname, counters, problems, settings), roaming, targeted, scans
