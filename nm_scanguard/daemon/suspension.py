"""Suspend and restore one network's bgscan: the calls to wpa_supplicant, and the crash
journal written from the state each network is in.

The rule, and the states and transitions that keep it, are in nm_scanguard.daemon.suspension_table;
here each call's answer becomes one event there.  In short: never leave a user's bgscan off.
- the journal entry is on disk before "" is sent, and is dropped only once we know the saved
  value is back (or the network object is gone, taking our "" with it);
- when wpa_supplicant does not answer in time, we cannot tell whether it applied "": we read it
  back, and if that read cannot show it was not applied, we assume it was and keep the entry,
  because restoring only writes where the value is still "" (so a restore that turns out
  unneeded changes nothing), while forgetting a "" that was applied leaves bgscan off for good;
- entries left by a previous instance are restored only on the interface they name, at network
  paths under that interface, in one journal write.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Collection, Iterator
from dataclasses import dataclass

from ..ifname import valid_ifname
from ..peers.supplicant import (
    INTERFACE_UNKNOWN,
    NOT_RUNNING,
    ObjectGone,
    SupplicantError,
    UncertainOutcome,
    WpaSupplicant,
)
from .journal import Journal, valid_bgscan, valid_network_path
from .suspension_table import (
    BUSY,
    LIVE,
    STARTS,
    UNOWNED,
    Ev,
    Kind,
    Refused,
    State,
    journaled,
    step,
)

log = logging.getLogger("scanguard")


def interface_of(network: str) -> str:
    """The interface object a wpa_supplicant network object lies under
    (/fi/w1/wpa_supplicant1/Interfaces/0/Networks/3 -> /fi/w1/wpa_supplicant1/Interfaces/0)."""
    return network.rsplit("/Networks/", 1)[0]


NO_NETWORK = "not associated in wpa_supplicant"
NO_BGSCAN_KEY = "the network has no bgscan (BSSID-locked profile or AP mode)"
ALREADY_OFF = "bgscan is already off on this network"


class NothingToSuspend(Exception):
    """There is no bgscan to turn off; `reason` says why, in words fit for the status."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Suspended:
    """We set `network`'s bgscan to ""; `saved` is what restore() puts back.  `generation` is
    the path's generation when we read its bgscan (Suspender.generation): a removal that took
    the path to a higher one took our object away; one at or below it came before, however late
    it is handled (wpa_supplicant reuses paths, NetworkManager removes and adds on
    re-activation)."""

    network: str
    saved: str
    generation: int = 0
    ifname: str = ""


def is_uncertain(err: SupplicantError) -> bool:
    """True if `err` leaves open whether wpa_supplicant applied the call (timeout, no reply)."""
    return isinstance(err, UncertainOutcome)


def is_not_running(err: SupplicantError) -> bool:
    """True if `err` says no wpa_supplicant owns its bus name."""
    return err.bus_error in NOT_RUNNING


# What replaying one entry did (TAKEN: a running guard has the network now).
RESTORED, DROPPED, KEPT, TAKEN = "restored", "dropped", "kept", "taken"


class _NoSupplicant(Exception):
    """No wpa_supplicant owns its name: the networks the journal names are gone with it."""


JOURNAL_UNWRITABLE = ("cannot write {path} ({why}), so bgscan is left on (a crash could not "
                      "restore it); check the directory's permissions")


class Suspender:
    """The one owner of what is suspended: the state of each network path we touched
    (suspension_table.State), the journal written from those states (the only writer), and
    the generation of each path.  It makes the calls a state needs and feeds each answer back
    as one event (`_go`).  A Guard asks it (`suspended_on`)."""

    def __init__(self, supplicant: WpaSupplicant, journal: Journal) -> None:
        self.supplicant = supplicant
        self.journal = journal
        self._states: dict[str, State] = {}  # network path -> what it is in
        # How many NetworkRemoved signals each path has had: wpa_supplicant reuses ids, so
        # NetworkManager's remove-then-add brings back the same path with a fresh bgscan.
        self._generations: dict[str, int] = {}
        self._ops = 0  # the last call sequence's token (State.op)

    # ---- the table ------------------------------------------------------------------------

    def state(self, network: str) -> State | None:
        """`network`'s state; an entry on disk that no state accounts for is an earlier
        instance's (LEFTOVER)."""
        s = self._states.get(network)
        if s is None and (entry := self.journal.get(network)) is not None:
            s = self._states[network] = State(Kind.LEFTOVER, entry.ifname, entry.bgscan,
                                              self.generation(network))
        return s

    def _go(self, net: str, ev: Ev, *, op: int | None = None, ifname: str = "",
            value: str | None = None) -> State | None:
        """Apply one event to `net`'s state, then make the journal say what the new state
        needs (before any call that state makes).  `op` names the call the event answers: if
        the state is no longer that call's (it ended meanwhile: removed, wpa_supplicant
        restarted, and maybe another task's since), the answer is not applied and None is
        returned.  If an entry an event needs cannot be written, the event has not happened
        when it leads to a call (ASK, READ_VALUE: the state stays and SupplicantError says
        why), and is logged otherwise (the state the bus or a cancel left is the truth)."""
        before = self.state(net)
        if op is not None and (before is None or before.op != op):
            return None
        after = step(before, ev, generation=self.generation(net), ifname=ifname, value=value,
                     op=self._ops if ev in STARTS else 0)
        self._set(net, after)
        try:
            self._write(net, after)
        except SupplicantError as e:
            if ev in (Ev.ASK, Ev.READ_VALUE):
                self._set(net, before)
                raise
            log.error("%s", e)
        return after

    def _begin(self, net: str, ev: Ev, ifname: str = "") -> int:
        """Start a call sequence on `net` (ASK, RELEASE, REPLAY): the token its answers carry."""
        self._ops += 1
        self._go(net, ev, ifname=ifname)
        return self._ops

    def _owner(self, net: str) -> int | None:
        """The token of the call sequence `net`'s state belongs to (None: no state)."""
        s = self._states.get(net)
        return None if s is None else s.op

    def abandon(self, ifname: str) -> None:
        """The guard of `ifname` is gone: what it could not restore is nobody's now
        (LEFTOVER), for the journal's replay to restore."""
        for net, s in list(self._states.items()):
            if s.ifname == ifname and s.kind in LIVE:
                self._go(net, Ev.ABANDON)

    def _set(self, net: str, s: State | None) -> None:
        if s is None:
            self._states.pop(net, None)
        else:
            self._states[net] = s

    def _write(self, net: str, s: State | None) -> None:
        """The one place the journal changes: an entry exactly for the states that can carry
        our "" (suspension_table.journaled)."""
        entry = self.journal.get(net)
        if journaled(s):
            assert s is not None and s.saved is not None
            if entry is None or (entry.ifname, entry.bgscan) != (s.ifname, s.saved):
                try:
                    self.journal.record(net, s.ifname, s.saved)
                except OSError as e:
                    raise SupplicantError(JOURNAL_UNWRITABLE.format(
                        path=self.journal.path, why=e.strerror or e)) from None
        elif entry is not None:
            try:
                self.journal.forget(net)
            except OSError as e:
                # Harmless: a stale entry only makes the next start look and find nothing to do.
                log.warning("cannot remove %s from %s (%s); the next start will check it again",
                            net, self.journal.path, e)

    def _settle(self, net: str, op: int) -> None:
        """The task working on `net` ended without an answer (cancelled, or a defect): the
        state its call left is the table's CANCELLED."""
        s = self._states.get(net)
        if s is not None and s.kind in BUSY:
            self._go(net, Ev.CANCELLED, op=op)

    def generation(self, network: str) -> int:
        """How many objects at this path wpa_supplicant has removed so far."""
        return self._generations.get(network, 0)

    def network_removed(self, network: str) -> Suspended | None:
        """Call at once when NetworkRemoved arrives (before other queued replies are handled):
        the path moves to a new generation, and our "" on the object, if any, is gone with it.
        Returns the suspension that ended so (its guard re-engages on a new object), if any."""
        self._generations[network] = self.generation(network) + 1
        before = self.state(network)
        if before is None:
            return None
        self._go(network, Ev.GONE)
        return _suspended(network, before) if before.kind in LIVE else None

    def forget_all(self) -> None:
        """wpa_supplicant restarted: its networks, and every "" we set, are gone (a suspend
        under way keeps its entry: its Set may still reach the new process)."""
        nets = set(self._states) | set(self.journal.entries())
        with contextlib.suppress(OSError), self._batch():
            for net in nets:
                self._go(net, Ev.RESTARTED)
        dropped = len(nets) - len(self._states)
        if dropped:
            log.info("wpa_supplicant's networks are gone; forgot %d suspended bgscan(s)", dropped)

    @contextlib.contextmanager
    def _batch(self) -> Iterator[None]:
        """Several forgets, one journal write; a write that fails is logged and retried by the
        next one."""
        try:
            with self.journal.batch():
                yield
        except OSError as e:
            log.warning("cannot update %s (%s); the next start will check its entries again",
                        self.journal.path, e)
            raise

    def suspended_on(self, ifname: str) -> Suspended | None:
        """The live suspension on `ifname`'s network, if any (also while it is restored)."""
        for net, s in self._states.items():
            if s.ifname == ifname and (s.kind in LIVE or s.origin in LIVE):
                return _suspended(net, s)
        return None

    def in_doubt(self, network: str) -> bool:
        """Whether the live suspension on `network` may no longer carry our "" (a restore went
        unanswered and could not be read back, or wpa_supplicant restarted during the suspend)."""
        s = self._states.get(network)
        return s is not None and s.kind is Kind.IN_DOUBT

    # ---- suspend --------------------------------------------------------------------------

    async def suspend(self, iface_path: str, ifname: str) -> Suspended:
        """Turn off bgscan of the interface's current network, journal first.

        Raises NothingToSuspend when there is nothing to turn off, SupplicantError when
        wpa_supplicant or the journal refused (nothing is left changed then).  A reply that
        came too late counts as done: the entry stays and the returned Suspended restores it."""
        if not valid_ifname(ifname):
            raise ValueError(f"not a valid interface name: {ifname!r}")
        net = await self.supplicant.current_network(iface_path)
        if net is None:
            raise NothingToSuspend(NO_NETWORK)
        if not valid_network_path(net):
            raise SupplicantError(
                f"wpa_supplicant reported {net!r} as the current network of {iface_path}, which "
                "is not a network object path; not suspending bgscan there")
        try:
            op = self._begin(net, Ev.ASK, ifname)
        except Refused:
            raise SupplicantError(f"bgscan on {net} is already suspended or being suspended "
                                  "for another interface; not suspending it twice") from None
        try:
            s = await self._suspend(net, ifname, op)
        except BaseException:
            self._settle(net, op)
            raise
        if s.kind is Kind.IN_DOUBT:
            log.warning("%s: bgscan on %s may or may not be off (wpa_supplicant restarted, or "
                        "did not answer, while it was being suspended); reading it again at the "
                        "next sample", ifname, net)
        return _suspended(net, s)

    async def _suspend(self, net: str, ifname: str, op: int) -> State:
        sup = self.supplicant
        try:
            value = await sup.get_bgscan(net)
        except SupplicantError:
            self._go(net, Ev.FAILED, op=op)
            raise
        if value == "":
            return self._adopt(net, ifname, op)
        if value is None or not valid_bgscan(value):
            self._go(net, Ev.READ_OTHER, op=op)
            raise NothingToSuspend(NO_BGSCAN_KEY if value is None else (
                f"bgscan {value[:80]!r} is not a setting the journal can keep (only "
                "NetworkManager's form, simple:SHORT:THRESHOLD:LONG, is restored after a crash), "
                "so leaving it on; to have this network guarded, let NetworkManager set its "
                "bgscan (reconnect it)"))
        try:
            # The entry, on disk before the Set.
            setting = self._go(net, Ev.READ_VALUE, op=op, value=value)
        except SupplicantError:
            self._go(net, Ev.FAILED, op=op)
            raise
        if setting is None:
            raise _ended(net)
        applied = Ev.SET_APPLIED
        try:
            await sup.set_bgscan(net, "")
        except SupplicantError as e:
            if not is_uncertain(e):
                self._go(net, Ev.SET_NOT_APPLIED, op=op)
                raise
            shown = await self._read_back(net)
            if shown is not None and shown != "":
                self._go(net, Ev.SET_NOT_APPLIED, op=op)
                raise SupplicantError(f"wpa_supplicant did not turn off bgscan on {net} ({e}; "
                                      "reading it back shows no \"\" there); trying again on "
                                      "the next sample", e.bus_error) from None
            if shown is None:
                applied = Ev.SET_ASSUMED
            log.warning("%s: wpa_supplicant did not confirm turning off bgscan on %s (%s); "
                        "assuming it did, so that it gets restored", ifname, net, e)
        s = self._go(net, applied, op=op)
        if s is None:
            raise _ended(net)
        if s.kind is Kind.PUTTING_BACK:
            return await self._put_back(net, ifname, value, op)
        return s

    def _adopt(self, net: str, ifname: str, op: int) -> State:
        """bgscan is "" already.  Only we ever set "" (NetworkManager writes a module or no key),
        so if the journal holds this network, it is ours: an earlier suspend whose reply came
        late or was cancelled, or a restore that failed.  Take it over so that it is restored."""
        if self._owner(net) != op:
            raise _ended(net)
        s = self._go(net, Ev.READ_EMPTY, op=op)
        if s is None:
            raise NothingToSuspend(ALREADY_OFF)
        log.info("%s: bgscan on %s is still off from an earlier suspension (was \"%s\"); "
                 "taking it over", ifname, net, s.saved)
        return s

    async def _read_back(self, net: str) -> str | None:
        """After a Set of "" with no answer: bgscan read back, None if that read fails too.
        wpa_supplicant handles one client's calls in order, so that read comes after the Set:
        a value other than "" means the object there now does not carry our "" (the Set was
        not applied, or went to an object NetworkManager removed meanwhile), and never will;
        a failed read leaves the suspension in doubt, journaled, read again before it counts.
        Taking an unanswered Set for applied without reading would leave the guard counting
        itself engaged, bgscan on, for as long as the link stays busy; and a put-back after a
        re-activation must not follow a Set that hit the old object, or it overwrites the new
        object's own value."""
        try:
            return await self.supplicant.get_bgscan(net)
        except SupplicantError:
            return None

    async def _put_back(self, net: str, ifname: str, value: str, op: int) -> State:
        """NetworkManager removed the network and added a new one at the same path between our
        read and our Set (wpa_supplicant sends the signal before it handles our Set, so it is
        seen by now): the "" landed on the new object, whose own bgscan cannot be read back.
        Put back the value we read, NetworkManager's for the same profile a moment ago, so the
        next sample suspends the new object properly.  If that fails, the entry stays and the
        network counts as suspended, so that release restores it."""
        log.warning("%s: NetworkManager re-created network %s while bgscan was being suspended; "
                    "putting back \"%s\" (the new object's own value cannot be read once "
                    "overwritten)", ifname, net, value)
        try:
            await self.supplicant.set_bgscan(net, value)
        except SupplicantError as e:
            if isinstance(e, ObjectGone):
                try:
                    await self._confirm_gone(net, e, ifname)
                except SupplicantError:
                    pass
                else:
                    self._go(net, Ev.DONE, op=op)  # gone again: nothing of ours is left on it
                    raise _recreated(net) from None
            log.warning("%s: could not put bgscan back on %s (%s); it is restored on release",
                        ifname, net, e)
            s = self._go(net, Ev.UNKNOWN if is_uncertain(e) else Ev.FAILED, op=op)
            if s is not None:
                return s
        else:
            self._go(net, Ev.DONE, op=op)
        raise _recreated(net)

    async def recheck(self, s: Suspended, ifname: str) -> bool:
        """Settle a suspension left in doubt: True if bgscan still reads "" (still ours, and
        still suspended), False if it reads anything else (the restore landed after all: the
        suspension and its entry end, so the caller suspends anew).  Raises SupplicantError if
        the read fails again."""
        op = self._owner(s.network)
        try:
            value = await self.supplicant.get_bgscan(s.network)
        except SupplicantError:
            self._go(s.network, Ev.FAILED, op=op)
            raise
        if self._go(s.network, Ev.READ_EMPTY if value == "" else Ev.READ_VALUE, op=op):
            return True
        log.info("%s: bgscan on %s reads \"%s\", not our \"\"; it is not suspended", ifname,
                 s.network, value)
        return False

    # ---- restore --------------------------------------------------------------------------

    async def restore(self, s: Suspended, ifname: str) -> None:
        """Put the saved value back where it is still our "", then forget the entry.

        A network that is gone, or whose bgscan someone else changed, is left alone and
        forgotten.  If wpa_supplicant fails or does not answer, the entry stays and the error
        is raised: the caller tries again, and on stop the next start does."""
        st = self.state(s.network)
        if st is None:
            return  # nothing of ours there any more
        try:
            op = self._begin(s.network, Ev.REPLAY if st.kind in UNOWNED else Ev.RELEASE)
        except Refused:
            raise SupplicantError(f"bgscan on {s.network} is being suspended or restored by "
                                  "another task; trying again later") from None
        try:
            await self._restore(s.network, ifname, st.saved or s.saved, op)
        except BaseException:
            self._settle(s.network, op)
            raise

    async def _restore(self, net: str, ifname: str, saved: str, op: int) -> None:
        sup = self.supplicant
        try:
            current = await sup.get_bgscan(net)
        except SupplicantError as e:
            await self._failed(net, e, ifname, op)
            log.debug("%s: network %s is gone, nothing to restore", ifname, net)
            return
        if self._go(net, Ev.READ_EMPTY if current == "" else Ev.READ_VALUE, op=op) is None:
            if current is None:
                log.info("%s: network %s has no bgscan any more (changed by someone else); "
                         "leaving it", ifname, net)
            elif current != saved:
                log.info("%s: bgscan on %s was changed to \"%s\" meanwhile; leaving it", ifname,
                         net, current)
            return
        generation = self.generation(net)  # of the object the "" we read is on
        try:
            await sup.set_bgscan(net, saved)
        except UncertainOutcome as e:
            landed = await self._restore_landed(net, ifname, e)
            if landed is not True:
                self._go(net, Ev.UNANSWERED if landed is False else Ev.UNKNOWN, op=op)
                raise
        except SupplicantError as e:
            await self._failed(net, e, ifname, op)
            log.debug("%s: network %s went away while restoring", ifname, net)
            return
        if self.generation(net) != generation:
            # wpa_supplicant's API has no compare-and-set: NetworkManager removed the network
            # and added a new one at the same path between our read and our Set, so the Set
            # landed on the new object and its own value is lost.
            log.warning("%s: NetworkManager re-created network %s while bgscan was being "
                        "restored; the new object got \"%s\" (the previous object's value) "
                        "instead of its own; reconnecting gives it NetworkManager's again",
                        ifname, net, saved)
        self._go(net, Ev.DONE, op=op)
        log.debug("%s: bgscan on %s set back to \"%s\"", ifname, net, saved)

    async def _failed(self, net: str, err: SupplicantError, ifname: str, op: int) -> None:
        """A restore's call failed: DONE if the object is confirmed gone, else FAILED and
        raised."""
        if isinstance(err, ObjectGone):
            try:
                await self._confirm_gone(net, err, ifname)
            except SupplicantError:
                self._go(net, Ev.FAILED, op=op)
                raise
            self._go(net, Ev.DONE, op=op)
            return
        self._go(net, Ev.FAILED, op=op)
        raise err

    async def _restore_landed(self, net: str, ifname: str, err: UncertainOutcome) -> bool | None:
        """After a restoring Set with no answer: True if reading bgscan back shows something
        other than "" at the path, i.e. the Set landed (or NetworkManager's new object is
        there); False if it shows our "" (the Set did not land); None if the read failed too,
        and the suspension is left in doubt (IN_DOUBT): a release whose Set landed but whose
        reply was lost must not leave the guard counting itself engaged, or it never suspends
        again while bgscan runs on a busy link."""
        try:
            value = await self.supplicant.get_bgscan(net)
        except SupplicantError as e:
            log.warning("%s: wpa_supplicant did not confirm restoring bgscan on %s (%s), and "
                        "reading it back failed too (%s); keeping it to restore again",
                        ifname, net, err, e)
            return None
        if value == "":
            return False
        log.info("%s: wpa_supplicant did not confirm restoring bgscan on %s (%s), but it reads "
                 "back as \"%s\": restored", ifname, net, err, value)
        return True

    async def _confirm_gone(self, net: str, err: ObjectGone, ifname: str) -> None:
        """An "unknown object/method" error is taken for a removed network only if the
        interface no longer has it as its current network, or the interface object itself is
        gone (wpa_supplicant names another object for `ifname`, or none); otherwise raise
        SupplicantError, so that the entry stays and the restore is tried again.  (The error
        names are all a removed object gets, but a misreported failure can carry them too,
        and forgetting a network that is still there would leave its bgscan off.)  A
        re-created network at the same path also counts as there: the retry then finds
        NetworkManager's value on it and leaves it."""
        try:
            current = await self.supplicant.current_network(interface_of(net))
        except ObjectGone as e:
            if await self._interface_replaced(net, ifname):
                return  # the interface and its networks went: nothing left to retry
            raise SupplicantError(f"wpa_supplicant answered {err.bus_error or err} for {net} and "
                                  f"could not say whether the network still exists ({e}); "
                                  "trying again later", e.bus_error) from None
        except SupplicantError as e:
            raise SupplicantError(f"wpa_supplicant answered {err.bus_error or err} for {net} and "
                                  f"could not say whether the network still exists ({e}); "
                                  "trying again later", e.bus_error) from None
        if current == net:
            raise SupplicantError(f"wpa_supplicant answered {err.bus_error or err} for {net}, "
                                  "which is still the interface's current network; trying "
                                  "again later", err.bus_error)

    async def _interface_replaced(self, net: str, ifname: str) -> bool:
        """True if wpa_supplicant's object for `ifname` is no longer the one `net` lies under
        (NetworkManager removed the interface and added it again), or it has none."""
        try:
            return await self._interface(ifname) != interface_of(net)
        except SupplicantError:
            return False

    async def _interface(self, ifname: str) -> str | None:
        """wpa_supplicant's object for `ifname`; None only when it says it does not manage it
        (InterfaceUnknown).  Any other error keeps the entries for a later try."""
        try:
            return await self.supplicant.interface(ifname)
        except ObjectGone as e:
            if e.bus_error == INTERFACE_UNKNOWN:
                return None
            raise SupplicantError(f"wpa_supplicant could not say whether it manages {ifname} "
                                  f"({e})", e.bus_error) from None

    # ---- the crash journal's replay -------------------------------------------------------

    async def restore_journal(self, known: Callable[[str], Awaitable[str | None]] | None = None,
                              *, skip: Collection[str] = ()) -> int:
        """Restore what a previous instance left suspended (LEFTOVER), and what a cancelled
        suspend left behind (LEFT_BEHIND), with one journal write.

        `known(ifname)` gives wpa_supplicant's object path for an interface, or None if it does
        not manage it (default: Supplicant.interface).  An entry is restored only at a network
        path under that interface; others are forged or stale (wpa_supplicant restarted and
        numbered its objects anew) and dropped.  When the bus says nobody owns wpa_supplicant's
        name, every entry is dropped: its networks are gone with it.  A call answered as if
        nobody owned it counts only once the bus confirms that.  Other failures keep the entry
        for a later try; the number of those is returned, counting also the entries a guard is
        taking over (they fall back to the replay if the take-over fails, so the retry must go
        on until it has ended).  Networks in `skip`, and those a guard or a suspend has, are
        left alone."""
        for net in self.journal.entries():  # an earlier instance's too, read at first use
            self.state(net)
        entries = {net: s for net, s in self._states.items()
                   if s.kind in UNOWNED and net not in skip}
        if not entries:
            return self._taking_over()
        lookup = known if known is not None else self._interface
        paths: dict[str, str | None | SupplicantError] = {}  # ifname -> its object, or why not
        counts = {RESTORED: 0, DROPPED: 0, KEPT: 0, TAKEN: 0}
        try:
            with self._batch():
                try:
                    if await self._confirmed_gone() is not None:
                        raise _NoSupplicant("wpa_supplicant is not running")
                    for net, s in entries.items():
                        counts[await self._replay_one(net, s, lookup, paths)] += 1
                except _NoSupplicant as e:
                    log.info("%s: the %d network(s) a previous instance changed are gone with "
                             "it; nothing to restore", e, len(entries))
                    for net in entries:
                        if (left := self._states.get(net)) is not None and left.kind in UNOWNED:
                            self._go(net, Ev.RESTARTED)
                    return 0
        except OSError:
            pass  # the one write at the end of the batch: logged, and retried by the next
        taking_over = self._taking_over()
        log.info("crash journal replayed: %d restored, %d dropped, %d kept for a later try%s",
                 counts[RESTORED], counts[DROPPED], counts[KEPT],
                 f", {taking_over} being taken over by a guard" if taking_over else "")
        return counts[KEPT] + taking_over

    def _taking_over(self) -> int:
        """Entries a guard is taking over: a suspend under way on a network that was LEFTOVER or
        LEFT_BEHIND, which returns to that state if the suspend fails."""
        return sum(1 for s in self._states.values() if s.kind not in UNOWNED and s.origin in UNOWNED)

    async def _confirmed_gone(self) -> SupplicantError | None:
        """None while wpa_supplicant owns its name or the bus will not say (no evidence);
        otherwise the reason to drop what its networks carried."""
        try:
            if await self.supplicant.running():
                return None
        except SupplicantError as e:
            log.warning("%s; keeping the crash journal's entries for a later try", e)
            return None
        return SupplicantError("the bus says nobody owns fi.w1.wpa_supplicant1")

    async def _not_running(self, err: SupplicantError) -> bool:
        """`err` said nobody owns wpa_supplicant's name, and the bus confirms it."""
        if not is_not_running(err):
            return False
        if await self._confirmed_gone() is None:
            log.warning("wpa_supplicant's call answered %s, but the bus says it owns its name; "
                        "keeping the crash journal's entries for a later try", err.bus_error)
            return False
        return True

    async def _replay_one(self, net: str, s: State,
                          lookup: Callable[[str], Awaitable[str | None]],
                          paths: dict[str, str | None | SupplicantError]) -> str:
        """Restore one entry: RESTORED, DROPPED (gone, stale or forged), KEPT (for a later try)
        or TAKEN (its state changed while this replay waited: a guard has it now).  Raises
        _NoSupplicant when no wpa_supplicant owns its name."""
        ifname = s.ifname
        if ifname not in paths:
            try:
                paths[ifname] = await lookup(ifname)
            except SupplicantError as e:
                if await self._not_running(e):
                    raise _NoSupplicant(f"wpa_supplicant is not running ({e})") from None
                paths[ifname] = e
        iface_path = paths[ifname]
        now = self._states.get(net)
        if now is None or now.kind not in UNOWNED:
            return TAKEN  # a guard has it now, or it ended meanwhile
        s = now
        if isinstance(iface_path, SupplicantError):
            self._kept(net, s, iface_path)
            return KEPT
        if iface_path is None:
            log.info("%s: wpa_supplicant does not manage this interface any more; network %s "
                     "left by a previous instance is gone with it", ifname, net)
            self._go(net, Ev.RESTARTED)
            return DROPPED
        if interface_of(net) != iface_path:
            log.warning("%s: journal entry %s does not lie under the interface's object %s "
                        "(stale after a wpa_supplicant restart, or forged); dropping it",
                        ifname, net, iface_path)
            self._go(net, Ev.RESTARTED)
            return DROPPED
        try:
            await self.restore(Suspended(net, s.saved or ""), ifname)
        except SupplicantError as e:
            if await self._not_running(e):
                raise _NoSupplicant(f"wpa_supplicant left while restoring ({e})") from None
            self._kept(net, s, e)
            return KEPT
        log.info("%s: restored bgscan \"%s\" that a previous instance left suspended on %s",
                 ifname, s.saved, net)
        return RESTORED

    def _kept(self, net: str, s: State, why: SupplicantError) -> None:
        log.error("%s: cannot restore bgscan \"%s\" on %s left suspended by a previous "
                  "instance: %s; it stays in %s for the next start", s.ifname, s.saved, net,
                  why, self.journal.path)

    async def restore_left_behind(self, ifname: str) -> None:
        """A suspend whose task was cancelled with its Set on the way (a guard's sampling loop
        or a hold's kick, when the guard stops) has no live suspension, but its "" may have
        landed (LEFT_BEHIND).  Restore what is left for `ifname` now rather than at the next
        start, which may be far off (a `systemctl restart` is followed at once by the next
        instance, but a stop is not).  wpa_supplicant answers one client's calls in order, so
        the read comes after that Set."""
        entries = self.journal.entries()
        others = [net for net, e in entries.items() if e.ifname != ifname]
        if len(others) < len(entries):
            await self.restore_journal(skip=others)


def _ended(net: str) -> SupplicantError:
    return SupplicantError(f"network {net} was removed, or wpa_supplicant restarted, while "
                           "bgscan was being suspended; trying again on the next sample")


def _recreated(net: str) -> SupplicantError:
    return SupplicantError(f"network {net} was re-created while bgscan was being suspended; "
                           "trying again on the next sample")


def _suspended(net: str, s: State) -> Suspended:
    return Suspended(network=net, saved=s.saved or "", generation=s.generation, ifname=s.ifname)
