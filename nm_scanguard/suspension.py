"""Suspend and restore one network's bgscan, with the crash journal kept in step.

The one rule everything here serves: never leave a user's bgscan off.  So
- the journal entry is on disk before "" is sent, and is dropped only once we know the saved
  value is back (or the network object is gone, taking our "" with it);
- when wpa_supplicant does not answer in time, we cannot tell whether it applied "": we assume it
  did and keep the entry, because restoring only writes where the value is still "" (so a
  restore that turns out unneeded changes nothing), while forgetting a "" that was applied
  leaves bgscan off for good;
- entries left by a previous instance are restored only on the interface they name, at network
  paths under that interface, in one journal write.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Protocol

from .ifname import valid_ifname
from .journal import Journal, JournalEntry, valid_bgscan, valid_network_path
from .supplicant import INTERFACE_UNKNOWN, NOT_RUNNING, ObjectGone, SupplicantError, UncertainOutcome

log = logging.getLogger("scanguard")


def interface_of(network: str) -> str:
    """The interface object a wpa_supplicant network object lies under
    (/fi/w1/wpa_supplicant1/Interfaces/0/Networks/3 -> /fi/w1/wpa_supplicant1/Interfaces/0)."""
    return network.rsplit("/Networks/", 1)[0]


NO_NETWORK = "not associated in wpa_supplicant"
NO_BGSCAN_KEY = "the network has no bgscan (BSSID-locked profile or AP mode)"
ALREADY_OFF = "bgscan is already off on this network"


class SupplicantLike(Protocol):
    """What we need of nm_scanguard.supplicant.Supplicant; errors are SupplicantError or
    ObjectGone as it raises them."""

    async def running(self) -> bool: ...

    async def interface(self, ifname: str, /) -> str: ...

    async def current_network(self, iface_path: str, /) -> str | None: ...

    async def get_bgscan(self, net_path: str, /) -> str | None: ...

    async def set_bgscan(self, net_path: str, value: str, /) -> None: ...


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


class Suspender:
    """The one owner of what is suspended: the live suspensions (one per network path), the
    journal (the only writer), the generation of each network path, and what NetworkRemoved
    and a wpa_supplicant restart do to them.  A Guard asks it (`suspended_on`)."""

    def __init__(self, supplicant: SupplicantLike, journal: Journal) -> None:
        self.supplicant = supplicant
        self.journal = journal
        self._live: dict[str, Suspended] = {}  # network path -> our "" there
        self._pending: set[str] = set()  # networks a suspend is under way on
        # Networks whose suspend was cancelled once its entry was written: its Set may still
        # land, on whatever object the path has by then, so a removal does not end the entry.
        self._unsettled: set[str] = set()
        # The generation of each network path: how many NetworkRemoved signals it has had.
        # wpa_supplicant reuses ids, so NM's remove-then-add (re-activation) brings back the
        # same path with a fresh bgscan: a generation that moved between our read and our Set
        # means the Set hit the new object.
        self._generations: dict[str, int] = {}
        # Live suspensions that may no longer carry our "": a restore went unanswered and could
        # not be read back, or wpa_supplicant restarted while the suspend was under way.
        self._doubtful: dict[str, str] = {}  # network -> what made it doubtful, in words
        self._restarts = 0  # how many times forget_all ran (wpa_supplicant restarted)

    def network_removed(self, network: str) -> Suspended | None:
        """Call at once when NetworkRemoved arrives (before other queued replies are handled):
        the path moves to a new generation, and our "" on the object, if any, is gone with it.
        Returns the suspension that ended so (its guard re-engages on a new object), if any.
        A suspend under way on the path sorts the removal out itself when it ends (it compares
        generations), so its journal entry stays until then."""
        self._generations[network] = self.generation(network) + 1
        gone = self._live.pop(network, None)
        self._doubtful.pop(network, None)
        if gone is not None or network not in self._pending | self._unsettled:
            self._forget(network, gone.ifname if gone else "")
        return gone

    def suspended_on(self, ifname: str) -> Suspended | None:
        """The live suspension on `ifname`'s network, if any."""
        for live in self._live.values():
            if live.ifname == ifname:
                return live
        return None

    def generation(self, network: str) -> int:
        """How many objects at this path wpa_supplicant has removed so far."""
        return self._generations.get(network, 0)

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
        if net in self._live or net in self._pending:
            raise SupplicantError(f"bgscan on {net} is already suspended or being suspended "
                                  "for another interface; not suspending it twice")
        restarts = self._restarts
        self._pending.add(net)
        try:
            s = await self._suspend(net, ifname)
        except asyncio.CancelledError:
            if self.journal.get(net) is not None:
                # The Set may still land, on whatever object the path has by then (a
                # NetworkRemoved handled after the cancel, then NetworkManager's new object):
                # the entry stays until a restore settles it.
                self._unsettled.add(net)
            raise
        finally:
            self._pending.discard(net)
        if self._restarts != restarts:
            return self._across_a_restart(s)
        if self.generation(net) != s.generation:
            # Removed while a put-back was on its way: our "" went with that object.
            self._forget(net, ifname)
            raise SupplicantError(f"network {net} was re-created while bgscan was being "
                                  "suspended; trying again on the next sample")
        self._live[net] = s
        return s

    def _across_a_restart(self, s: Suspended) -> Suspended:
        """wpa_supplicant restarted while this suspend was under way (forget_all ran, and kept
        its entry).  Our "" most likely went with the old process, and the new one's network
        at this path has NetworkManager's value; but a Set routed to the new process would
        have landed there.  Keep it journaled and live, but in doubt: the guard reads it
        before counting itself engaged, and a release reads before it writes.  Counted plainly
        live, it would stand for the old process's network, and the guard would never suspend
        the new one."""
        log.warning("%s: wpa_supplicant restarted while bgscan on %s was being suspended; "
                    "reading it again at the next sample", s.ifname, s.network)
        self._live[s.network] = s
        self._doubtful[s.network] = "the new wpa_supplicant has NetworkManager's value there"
        # Live before the write: if the journal cannot be written (raised, and shown), a
        # release still restores.
        self._record(s.network, s.ifname, s.saved)
        return s

    async def _suspend(self, net: str, ifname: str) -> Suspended:
        sup = self.supplicant
        generation = self.generation(net)
        value = await sup.get_bgscan(net)
        if value is None:
            raise NothingToSuspend(NO_BGSCAN_KEY)
        if value == "":
            return self._adopt(net, ifname, generation)
        if not valid_bgscan(value):
            raise NothingToSuspend(
                f"bgscan {value[:80]!r} is not a setting the journal can keep (only "
                "NetworkManager's form, simple:SHORT:THRESHOLD:LONG, is restored after a crash), "
                "so leaving it on; to have this network guarded, let NetworkManager set its "
                "bgscan (reconnect it)")
        self._record(net, ifname, value)
        try:
            await sup.set_bgscan(net, "")
        except SupplicantError as e:
            if not is_uncertain(e):
                self._forget(net, ifname)
                raise
            if await self._not_applied(net):
                self._forget(net, ifname)
                raise SupplicantError(f"wpa_supplicant did not turn off bgscan on {net} ({e}; "
                                      "reading it back shows no \"\" there); trying again on "
                                      "the next sample", e.bus_error) from None
            log.warning("%s: wpa_supplicant did not confirm turning off bgscan on %s (%s); "
                        "assuming it did, so that it gets restored", ifname, net, e)
        after = self.generation(net)
        if after != generation and await self._put_back(net, ifname, value):
            raise SupplicantError(f"network {net} was re-created while bgscan was being "
                                  "suspended; trying again on the next sample")
        # Our "" is on the object of generation `after` (the new one, if putting back failed):
        # the removals before it must not make the guard forget it.
        return Suspended(network=net, saved=value, generation=after, ifname=ifname)

    async def _not_applied(self, net: str) -> bool:
        """After a Set of "" with no answer: True only if reading bgscan back shows no "" at
        the path.  wpa_supplicant handles one client's calls in order, so that read comes
        after the Set: the object there now does not carry our "" (the Set was not applied, or
        went to an object NetworkManager removed meanwhile), and never will.  A read that fails
        too counts as applied.  Taking an unanswered Set for applied without reading would
        leave the guard counting itself engaged, bgscan on, for as long as the link stays
        busy; and a put-back after a re-activation must not follow a Set that hit the old
        object, or it overwrites the new object's own value."""
        try:
            value = await self.supplicant.get_bgscan(net)
        except SupplicantError:
            return False
        return value != ""

    async def _restore_landed(self, s: Suspended, ifname: str, err: UncertainOutcome) -> bool:
        """After a restoring Set with no answer: True if reading bgscan back shows something
        other than "" at the path, i.e. the Set landed (or NetworkManager's new object is
        there); the caller then forgets the entry as after a confirmed restore.  False keeps
        it: the read shows our "" (the Set did not land), or it failed too, and then the
        suspension is left in doubt (`in_doubt`), so that a guard wanting bgscan off again
        reads it before counting itself engaged: a release whose Set landed but whose reply
        was lost must not leave the guard counting itself engaged, or it never suspends again
        while bgscan runs on a busy link."""
        try:
            value = await self.supplicant.get_bgscan(s.network)
        except SupplicantError as e:
            self._doubtful[s.network] = "the restore that went unanswered landed"
            log.warning("%s: wpa_supplicant did not confirm restoring bgscan on %s (%s), and "
                        "reading it back failed too (%s); keeping it to restore again",
                        ifname, s.network, err, e)
            return False
        if value == "":
            return False
        log.info("%s: wpa_supplicant did not confirm restoring bgscan on %s (%s), but it reads "
                 "back as \"%s\": restored", ifname, s.network, err, value)
        return True

    def in_doubt(self, network: str) -> bool:
        """Whether the live suspension on `network` may no longer carry our "" (a restore went
        unanswered and could not be read back, or wpa_supplicant restarted during the suspend)."""
        return network in self._doubtful

    async def recheck(self, s: Suspended, ifname: str) -> bool:
        """Settle a suspension left in doubt: True if bgscan still reads "" (still ours, and
        still suspended), False if it reads anything else (the restore landed after all: the
        suspension and its entry end, so the caller suspends anew).  Raises SupplicantError if
        the read fails again."""
        value = await self.supplicant.get_bgscan(s.network)
        why = self._doubtful.pop(s.network, "")
        if value == "":
            return True
        log.info("%s: bgscan on %s reads \"%s\", not our \"\"%s; it is not suspended",
                 ifname, s.network, value, f" ({why})" if why else "")
        self._forget(s.network, ifname)
        return False

    async def _put_back(self, net: str, ifname: str, value: str) -> bool:
        """NetworkManager removed the network and added a new one at the same path between our
        read and our Set (wpa_supplicant sends the signal before it handles our Set, so it is
        seen by now): the "" landed on the new object, whose own bgscan cannot be read back.
        Put back the value we read, NetworkManager's for the same profile a moment ago, so the
        next sample suspends the new object properly.  False if that failed: then the entry
        stays and the caller treats the network as suspended, so that release restores it."""
        log.warning("%s: NetworkManager re-created network %s while bgscan was being suspended; "
                    "putting back \"%s\" (the new object's own value cannot be read once "
                    "overwritten)", ifname, net, value)
        try:
            await self.supplicant.set_bgscan(net, value)
        except ObjectGone:
            pass  # gone again: nothing of ours is left on it
        except SupplicantError as e:
            log.warning("%s: could not put bgscan back on %s (%s); it is restored on release",
                        ifname, net, e)
            return False
        self._forget(net, ifname)
        return True

    def _adopt(self, net: str, ifname: str, generation: int) -> Suspended:
        """bgscan is "" already.  Only we ever set "" (NetworkManager writes a module or no key),
        so if the journal holds this network, it is ours: an earlier suspend whose reply came
        late or was cancelled, or a restore that failed.  Take it over so that it is restored."""
        entry = self.journal.get(net)
        if entry is None:
            raise NothingToSuspend(ALREADY_OFF)
        if entry.ifname != ifname:
            self._record(net, ifname, entry.bgscan)
        log.info("%s: bgscan on %s is still off from an earlier suspension (was \"%s\"); "
                 "taking it over", ifname, net, entry.bgscan)
        return Suspended(network=net, saved=entry.bgscan, generation=generation, ifname=ifname)

    def _record(self, net: str, ifname: str, value: str) -> None:
        try:
            self.journal.record(net, ifname, value)
        except OSError as e:
            raise SupplicantError(
                f"cannot write {self.journal.path} ({e.strerror or e}), so bgscan is left on "
                "(a crash could not restore it); check the directory's permissions"
            ) from None

    def _forget(self, net: str, ifname: str) -> None:
        self._live.pop(net, None)
        self._unsettled.discard(net)
        self._doubtful.pop(net, None)
        try:
            self.journal.forget(net)
        except OSError as e:
            # Harmless: a stale entry only makes the next start look and find nothing to do.
            log.warning("%scannot remove %s from %s (%s); the next start will check it again",
                        f"{ifname}: " if ifname else "", net, self.journal.path, e)

    async def restore(self, s: Suspended, ifname: str) -> None:
        """Put the saved value back where it is still our "", then forget the entry.

        A network that is gone, or whose bgscan someone else changed, is left alone and
        forgotten.  If wpa_supplicant fails or does not answer, the entry stays and the error
        is raised: the caller tries again, and on stop the next start does."""
        sup = self.supplicant
        generation = self.generation(s.network)
        try:
            current = await sup.get_bgscan(s.network)
        except ObjectGone as e:
            await self._confirm_gone(s.network, e, ifname)
            log.debug("%s: network %s is gone, nothing to restore", ifname, s.network)
            self._forget(s.network, ifname)
            return
        if current == "" and self.generation(s.network) != generation:
            # Removed after our read (and maybe added again): our "" went with the old object.
            log.debug("%s: network %s was re-created while restoring; nothing of ours on it",
                      ifname, s.network)
        elif current == "":
            try:
                await sup.set_bgscan(s.network, s.saved)
            except ObjectGone as e:
                await self._confirm_gone(s.network, e, ifname)
                log.debug("%s: network %s went away while restoring", ifname, s.network)
                self._forget(s.network, ifname)
                return
            except UncertainOutcome as e:
                if not await self._restore_landed(s, ifname, e):
                    raise
            if self.generation(s.network) != generation:
                # wpa_supplicant's API has no compare-and-set: NetworkManager removed the
                # network and added a new one at the same path between our read and our Set,
                # so the Set landed on the new object and its own value is lost.
                log.warning("%s: NetworkManager re-created network %s while bgscan was being "
                            "restored; the new object got \"%s\" (the previous object's value) "
                            "instead of its own; reconnecting gives it NetworkManager's again",
                            ifname, s.network, s.saved)
            log.debug("%s: bgscan on %s set back to \"%s\"", ifname, s.network, s.saved)
        elif current is None:
            log.info("%s: network %s has no bgscan any more (changed by someone else); leaving "
                     "it", ifname, s.network)
        elif current != s.saved:
            log.info("%s: bgscan on %s was changed to \"%s\" meanwhile; leaving it", ifname,
                     s.network, current)
        self._forget(s.network, ifname)

    async def _confirm_gone(self, net: str, err: ObjectGone, ifname: str) -> None:
        """An "unknown object/method" error is taken for a removed network only if the
        interface no longer has it as its current network, or the interface object itself is
        gone (wpa_supplicant names another object for `ifname`, or none); otherwise raise
        SupplicantError, so that the entry stays and the restore is tried again.  (The error
        names are all a removed object gets, but an injected or misreported failure can carry
        them too, and forgetting a network that is still there would leave its bgscan off.)
        A re-created network at the same path also counts as there: the
        retry then finds NetworkManager's value on it and leaves it."""
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

    def forget_all(self) -> None:
        """wpa_supplicant restarted: its networks, and every "" we set, are gone.  Except the
        entry of a suspend under way: its Set may still reach the new process (sent once the
        new one owned the name, and after NetworkManager gave it the network), so that entry
        stays until the suspend ends and sorts it out (_across_a_restart); dropped now, a Set
        landing on the new process's network would leave an unjournaled ""."""
        self._restarts += 1
        self._live.clear()
        self._unsettled.clear()
        self._doubtful.clear()
        nets = [net for net in self.journal.entries() if net not in self._pending]
        if not nets:
            return
        log.info("wpa_supplicant's networks are gone; forgetting %d suspended bgscan(s)",
                 len(nets))
        try:
            self.journal.forget_many(nets)
        except OSError as e:
            log.warning("cannot update %s (%s); the next start will check its entries again",
                        self.journal.path, e)

    async def restore_journal(self, known: Callable[[str], Awaitable[str | None]] | None = None,
                              *, skip: Collection[str] = ()) -> int:
        """Restore what a previous instance left suspended, with one journal write.

        `known(ifname)` gives wpa_supplicant's object path for an interface, or None if it does
        not manage it (default: Supplicant.interface).  An entry is restored only at a network
        path under that interface; others are forged or stale (wpa_supplicant restarted and
        numbered its objects anew) and dropped.  When the bus says nobody owns wpa_supplicant's
        name, every entry is dropped: its networks are gone with it.  A call answered as if
        nobody owned it counts only once the bus confirms that.  Other failures keep the entry
        for a later try; the number of those is returned.  Entries of networks in `skip`, and
        those of live suspensions and of suspends under way (a running guard's), are left
        alone."""
        mine = self._live.keys() | self._pending
        entries = {net: e for net, e in self.journal.load().items()
                   if net not in skip and net not in mine}
        if not entries:
            return 0
        lookup = known if known is not None else self._interface
        paths: dict[str, str | None | SupplicantError] = {}  # ifname -> its object, or why not
        counts = {RESTORED: 0, DROPPED: 0, KEPT: 0, TAKEN: 0}
        try:
            with self.journal.batch():
                try:
                    if await self._confirmed_gone() is not None:
                        raise _NoSupplicant("wpa_supplicant is not running")
                    for net, entry in entries.items():
                        counts[await self._replay_one(net, entry, lookup, paths)] += 1
                except _NoSupplicant as e:
                    log.info("%s: the %d network(s) a previous instance changed are gone with "
                             "it; nothing to restore", e, len(entries))
                    self.journal.forget_many(entries)
                    return 0
        except OSError as e:  # the one write at the end of the batch
            log.warning("cannot update %s (%s); the next start will check its entries again",
                        self.journal.path, e)
        log.info("crash journal replayed: %d restored, %d dropped, %d kept for a later try",
                 counts[RESTORED], counts[DROPPED], counts[KEPT])
        return counts[KEPT]

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

    async def _replay_one(self, net: str, entry: JournalEntry,
                          lookup: Callable[[str], Awaitable[str | None]],
                          paths: dict[str, str | None | SupplicantError]) -> str:
        """Restore one entry of the journal: RESTORED, DROPPED (gone, stale or forged), KEPT
        (for a later try) or TAKEN (a guard has it now).  Raises _NoSupplicant when no
        wpa_supplicant owns its name."""
        ifname = entry.ifname
        if ifname not in paths:
            try:
                paths[ifname] = await lookup(ifname)
            except SupplicantError as e:
                if await self._not_running(e):
                    raise _NoSupplicant(f"wpa_supplicant is not running ({e})") from None
                paths[ifname] = e
        iface_path = paths[ifname]
        if net in self._live or net in self._pending or self.journal.get(net) != entry:
            # A guard took the network over while this replay waited (its own entry replaced
            # ours): restoring the value read before would undo its suspension, and dropping
            # the entry would leave its "" unjournaled.
            return TAKEN
        if isinstance(iface_path, SupplicantError):
            self._kept(net, entry, iface_path)
            return KEPT
        if iface_path is None:
            log.info("%s: wpa_supplicant does not manage this interface any more; network %s "
                     "left by a previous instance is gone with it", ifname, net)
            self.journal.forget(net)
            return DROPPED
        if interface_of(net) != iface_path:
            log.warning("%s: journal entry %s does not lie under the interface's object %s "
                        "(stale after a wpa_supplicant restart, or forged); dropping it",
                        ifname, net, iface_path)
            self.journal.forget(net)
            return DROPPED
        self._pending.add(net)  # a guard's suspend waits for the next sample meanwhile
        try:
            await self.restore(Suspended(net, entry.bgscan), ifname)
        except SupplicantError as e:
            if await self._not_running(e):
                raise _NoSupplicant(f"wpa_supplicant left while restoring ({e})") from None
            self._kept(net, entry, e)
            return KEPT
        finally:
            self._pending.discard(net)
        log.info("%s: restored bgscan \"%s\" that a previous instance left suspended on %s",
                 ifname, entry.bgscan, net)
        return RESTORED

    def _kept(self, net: str, entry: JournalEntry, why: SupplicantError) -> None:
        log.error("%s: cannot restore bgscan \"%s\" on %s left suspended by a previous "
                  "instance: %s; it stays in %s for the next start", entry.ifname, entry.bgscan,
                  net, why, self.journal.path)

    async def restore_left_behind(self, ifname: str) -> None:
        """A suspend whose task was cancelled with its Set on the way (a guard's sampling loop
        or a hold's kick, when the guard stops) has no live suspension, but its "" may have
        landed: the journal, written before the Set, names it.  Restore what the journal names
        for `ifname` now rather than at the next start, which may be far off (a `systemctl
        restart` is followed at once by the next instance, but a stop is not).  wpa_supplicant
        answers one client's calls in order, so the read comes after that Set."""
        entries = self.journal.entries()
        others = [net for net, e in entries.items() if e.ifname != ifname]
        if len(others) < len(entries):
            await self.restore_journal(skip=others)

    async def _interface(self, ifname: str) -> str | None:
        """wpa_supplicant's object for `ifname`; None only when it says it does not manage it
        (InterfaceUnknown).  Any other error keeps the entries for a later try: the fault suite
        had an UnknownMethod from GetInterface drop an entry whose bgscan was still off."""
        try:
            return await self.supplicant.interface(ifname)
        except ObjectGone as e:
            if e.bus_error == INTERFACE_UNKNOWN:
                return None
            raise SupplicantError(f"wpa_supplicant could not say whether it manages {ifname} "
                                  f"({e})", e.bus_error) from None
