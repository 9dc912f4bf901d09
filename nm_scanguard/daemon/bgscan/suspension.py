"""Bgscan: the one owner of what scanguard did to wpa_supplicant's bgscan strings.

It makes the calls each network's state needs (suspension_table: the rule and the states) and
feeds each answer back to the Ledger as one event: `read` for a value, evidence.py for what a
failure shows; and it replays the crash journal.  Nothing outside this folder reads the ledger
or the journal.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TypeVar

from ... import log_lines
from ...peers.supplicant import SupplicantError, UncertainOutcome, WpaSupplicant, is_uncertain
from ...peers.values import interface_of, valid_ifname, valid_network_path
from ...text import shown
from .evidence import interface, read_back, supplicant_gone, unless_gone
from .journal import Journal
from .suspension_table import UNOWNED, Ev, Kind, Ledger, Refused, State, Suspended, as_suspended, kept, read

log = logging.getLogger("scanguard")
T = TypeVar("T")
Lookup = Callable[[str], Awaitable[str | None]]  # ifname -> wpa_supplicant's object, or None

NO_NETWORK = "not associated in wpa_supplicant"
NO_BGSCAN_KEY = "the network has no bgscan (BSSID-locked profile or AP mode)"
ALREADY_OFF = "bgscan is already off on this network"


class NothingToSuspend(Exception):
    """There is no bgscan to turn off; its text says why, in words fit for the status."""


class Bgscan:
    """suspend, recheck, restore, replay; current, network_removed, supplicant_restarted and
    abandon are the Ledger's."""

    def __init__(self, supplicant: WpaSupplicant, journal: Journal) -> None:
        self.supplicant = supplicant
        self.ledger = Ledger(journal)
        self._go = self.ledger.go
        self.current = self.ledger.current
        self.network_removed = self.ledger.network_removed
        self.supplicant_restarted = self.ledger.supplicant_restarted
        self.abandon = self.ledger.abandon
        self.kept = partial(kept, journal)

    async def replay(self, known: Lookup | None = None, *, ifname: str | None = None) -> int:
        return await restore_journal(self, known, ifname=ifname)

    async def suspend(self, iface_path: str, ifname: str) -> Suspended:
        """Turn off bgscan of the interface's current network, journal first.  Raises
        NothingToSuspend when there is nothing to turn off, SupplicantError when wpa_supplicant
        or the journal refused (nothing is left changed then)."""
        if not valid_ifname(ifname):
            raise ValueError(f"not a valid interface name: {ifname!r}")
        net = await self.supplicant.current_network(iface_path)
        if net is None:
            raise NothingToSuspend(NO_NETWORK)
        if not valid_network_path(net):
            raise SupplicantError(
                f"wpa_supplicant reported {net!r} as the current network of {iface_path}, which "
                "is not a network object path; not suspending bgscan there")
        s = await self._sequence(net, Ev.ASK, ifname, self._suspend, "is already suspended or "
                                 "being suspended for another interface; not suspending it twice")
        if s.kind is Kind.IN_DOUBT:
            log.warning("%s: bgscan on %s may or may not be off (wpa_supplicant restarted or "
                        "did not answer, or NetworkManager re-created the network, while it was "
                        "being suspended); reading it again at the next sample", ifname, net)
        return as_suspended(net, s)

    async def _read(self, net: str, op: int | None) -> str | None:  # a failed read is FAILED
        try:
            return await self.supplicant.get_bgscan(net)
        except SupplicantError:
            self._go(net, Ev.FAILED, op=op)
            raise

    async def _suspend(self, net: str, ifname: str, op: int) -> State:
        value = await self._read(net, op)
        ev = read(value)
        if ev is Ev.READ_EMPTY:
            return self._adopt(net, ifname, op)
        try:
            setting = self._go(net, ev, op=op, value=value)  # the entry, on disk before the Set
        except SupplicantError:
            self._go(net, Ev.FAILED, op=op)
            raise
        if ev is Ev.READ_OTHER:
            raise NothingToSuspend(NO_BGSCAN_KEY if value is None else (
                f"bgscan {value[:80]!r} is not a setting the journal can keep (only "
                "NetworkManager's form, simple:SHORT:THRESHOLD:LONG, is restored after a crash), "
                "so leaving it on; to have this network guarded, let NetworkManager set its "
                "bgscan (reconnect it)"))
        if setting is None:
            raise _ended(net)
        assert value is not None
        applied = Ev.SET_APPLIED
        try:
            await self.supplicant.set_bgscan(net, "")
        except SupplicantError as e:
            if not is_uncertain(e):
                self._go(net, Ev.SET_NOT_APPLIED, op=op)
                raise
            back = await read_back(self.supplicant, net)
            if back != "" and not isinstance(back, SupplicantError):
                self._go(net, Ev.SET_NOT_APPLIED, op=op)
                raise SupplicantError(f"wpa_supplicant did not turn off bgscan on {net} ({e}; "
                                      "reading it back shows no \"\" there); trying again on "
                                      "the next sample", e.bus_error) from None
            applied = Ev.SET_APPLIED if back == "" else Ev.SET_ASSUMED
            log.warning("%s: wpa_supplicant did not confirm turning off bgscan on %s (%s); "
                        "assuming it did, so that it gets restored", ifname, net, e)
        s = self._go(net, applied, op=op)
        if s is None:
            raise _ended(net)
        if s.kind is Kind.PUTTING_BACK:
            return await self._put_back(net, ifname, value, op)
        return s

    def _adopt(self, net: str, ifname: str, op: int) -> State:
        """bgscan is "" already: ours, if the journal holds it (only we write ""), left by a
        suspend answered late or cancelled, or a failed restore.  Take it over."""
        if self.ledger.owner(net) != op:
            raise _ended(net)
        s = self._go(net, Ev.READ_EMPTY, op=op)
        if s is None:
            raise NothingToSuspend(ALREADY_OFF)
        log.info(log_lines.TAKEN_OVER, ifname, net, shown(s.saved))
        return s

    async def _put_back(self, net: str, ifname: str, value: str, op: int) -> State:
        """The path was re-created between our read and our Set: our "" is on the new object,
        whose own value is lost.  Put back the one we read (NetworkManager's for the same
        profile); if that fails the network stays suspended, for release to undo."""
        log.warning("%s: NetworkManager re-created network %s while bgscan was being suspended; "
                    "putting back \"%s\" (the new object's own value cannot be read once "
                    "overwritten)", ifname, net, shown(value))
        try:
            await self.supplicant.set_bgscan(net, value)
        except SupplicantError as e:
            if await unless_gone(self.supplicant, net, e, ifname) is None:
                self._go(net, Ev.DONE, op=op)  # gone again: nothing of ours is left on it
                raise _ended(net, "re-created") from None
            log.warning("%s: could not put bgscan back on %s (%s); it is restored on release",
                        ifname, net, e)
            s = self._go(net, Ev.UNKNOWN if is_uncertain(e) else Ev.FAILED, op=op)
            if s is not None:
                return s
        else:
            self._go(net, Ev.DONE, op=op)
        raise _ended(net, "re-created")

    async def recheck(self, ifname: str) -> bool:
        """Settle a suspension in doubt: True if bgscan still reads our "", False if not (it
        ends; the caller suspends anew).  Raises SupplicantError if the read fails again."""
        s = self.current(ifname)
        if s is None:
            return False
        op = self.ledger.owner(s.network)
        value = await self._read(s.network, op)
        if self._go(s.network, read(value), op=op):
            return True
        log.info("%s: bgscan on %s reads \"%s\", not our \"\"; it is not suspended", ifname,
                 s.network, shown(value))
        return False

    async def restore(self, ifname: str) -> None:
        """Put back the saved value of the suspension on `ifname`, if any (`current`)."""
        if (s := self.current(ifname)) is not None:
            await self.restore_network(s.network, ifname)

    async def restore_network(self, net: str, ifname: str) -> None:
        """Put the saved value back where our "" still stands, then forget the entry.  If
        wpa_supplicant fails or does not answer, the entry stays and the error is raised."""
        if self.ledger.state(net) is not None:  # else nothing of ours is there any more
            await self._sequence(net, Ev.RESTORE, ifname, self._restore, "is being suspended "
                                 "or restored by another task; trying again later")

    async def _sequence(self, net: str, ev: Ev, ifname: str,
                        run: Callable[[str, str, int], Awaitable[T]], refused: str) -> T:
        """Begin a call sequence on `net` with `ev` and run it (ended unanswered: CANCELLED)."""
        try:
            op = self.ledger.begin(net, ev, ifname if ev is Ev.ASK else "")
        except Refused:
            raise SupplicantError(f"bgscan on {net} {refused}") from None
        try:
            return await run(net, ifname, op)
        except BaseException:
            self.ledger.settle(net, op)
            raise

    async def _restore(self, net: str, ifname: str, op: int) -> None:
        sup, st = self.supplicant, self.ledger.state(net, found=False)
        assert st is not None and st.saved is not None, "RESTORING always has its entry"
        saved = st.saved
        try:
            current = await sup.get_bgscan(net)
        except SupplicantError as e:
            await self._failed(net, e, ifname, op)
            log.debug("%s: network %s is gone, nothing to restore", ifname, net)
            return
        if self._go(net, read(current), op=op) is None:
            if current is None:
                log.info("%s: network %s has no bgscan any more (changed by someone else); "
                         "leaving it", ifname, net)
            elif current != saved:
                log.info("%s: bgscan on %s was changed to \"%s\" meanwhile; leaving it", ifname,
                         net, shown(current))
            return
        generation = self.ledger.generation(net)  # of the object the "" we read is on
        try:
            await sup.set_bgscan(net, saved)
        except UncertainOutcome as e:
            back = await read_back(sup, net)
            if isinstance(back, SupplicantError):
                log.warning("%s: wpa_supplicant did not confirm restoring bgscan on %s (%s), "
                            "and reading it back failed too (%s); keeping it to restore again",
                            ifname, net, e, back)
            if isinstance(back, SupplicantError) or back == "":  # not landed, or not known
                self._go(net, Ev.UNANSWERED if back == "" else Ev.UNKNOWN, op=op)
                raise
            log.info("%s: wpa_supplicant did not confirm restoring bgscan on %s (%s), but it "
                     "reads back as \"%s\": restored", ifname, net, e, shown(back))
        except SupplicantError as e:
            await self._failed(net, e, ifname, op)
            log.debug("%s: network %s went away while restoring", ifname, net)
            return
        if self.ledger.generation(net) != generation:
            # wpa_supplicant's API has no compare-and-set: a network re-created at the same
            # path between our read and our Set got the Set, and its own value is lost.
            log.warning("%s: NetworkManager re-created network %s while bgscan was being "
                        "restored; the new object got \"%s\" (the previous object's value) "
                        "instead of its own; reconnecting gives it NetworkManager's again",
                        ifname, net, shown(saved))
        self._go(net, Ev.DONE, op=op)
        log.debug("%s: bgscan on %s set back to \"%s\"", ifname, net, shown(saved))

    async def _failed(self, net: str, err: SupplicantError, ifname: str, op: int) -> None:
        """A restore's call failed: DONE if the object is confirmed gone, else FAILED, raised."""
        why = await unless_gone(self.supplicant, net, err, ifname)
        self._go(net, Ev.FAILED if why else Ev.DONE, op=op)
        if why:
            raise why


def _ended(net: str, how: str = "removed, or wpa_supplicant restarted,") -> SupplicantError:
    return SupplicantError(f"network {net} was {how} while bgscan was being suspended; trying "
                           "again on the next sample")


# What replaying one entry did (TAKEN: a running guard has the network now).
RESTORED, DROPPED, KEPT, TAKEN = "restored", "dropped", "kept", "taken"


class _NoSupplicant(Exception):
    """No wpa_supplicant owns its name: the networks the journal names are gone with it."""


async def restore_journal(bg: Bgscan, known: Lookup | None, *, ifname: str | None) -> int:
    """Restore what nobody owns (UNOWNED), with one journal write; only `ifname`'s if given (what
    a stopping guard's cancelled suspend left behind).  An entry is restored only on the
    interface it names, at a path under that interface's object now (`known(ifname)`, default
    Supplicant.interface: None if it does not manage it); the others are stale or forged, and
    DROP.  All go when the bus confirms nobody owns wpa_supplicant's name; any other failure
    keeps an entry.  Returns the entries kept for a later try, those a guard is taking over
    included (they fall back here if the take-over fails)."""
    ledger, sup = bg.ledger, bg.supplicant
    entries = ledger.unowned(ifname)
    if not entries:
        return ledger.taking_over()
    lookup = known or partial(interface, sup)
    paths: dict[str, str | None | SupplicantError] = {}  # ifname -> its object, or why not
    counts = {RESTORED: 0, DROPPED: 0, KEPT: 0, TAKEN: 0}
    with ledger.journal.batch():
        try:
            if await supplicant_gone(sup):
                raise _NoSupplicant("wpa_supplicant is not running")
            for net, s in entries.items():
                counts[await _replay_one(bg, net, s, lookup, paths)] += 1
        except _NoSupplicant as e:
            log.info("%s: the %d network(s) a previous instance changed are gone with it; "
                     "nothing to restore", e, len(entries))
            for net in entries:
                if (left := ledger.state(net, found=False)) is not None and left.kind in UNOWNED:
                    ledger.go(net, Ev.RESTARTED)
            return 0
    taking_over = ledger.taking_over()
    log.info("crash journal replayed: %d restored, %d dropped, %d kept for a later try%s",
             counts[RESTORED], counts[DROPPED], counts[KEPT],
             f", {taking_over} being taken over by a guard" if taking_over else "")
    return counts[KEPT] + taking_over


async def _replay_one(bg: Bgscan, net: str, s: State, lookup: Lookup,
                      paths: dict[str, str | None | SupplicantError]) -> str:
    """Restore one entry: RESTORED, DROPPED (gone, stale or forged), KEPT (for a later try)
    or TAKEN (its state changed while this replay waited: a guard has it now).  Raises
    _NoSupplicant when no wpa_supplicant owns its name."""
    ledger, sup, ifname = bg.ledger, bg.supplicant, s.ifname
    if ifname not in paths:
        try:
            paths[ifname] = await lookup(ifname)
        except SupplicantError as e:
            if await supplicant_gone(sup, e):
                raise _NoSupplicant(f"wpa_supplicant is not running ({e})") from None
            paths[ifname] = e
    iface_path = paths[ifname]
    now = ledger.state(net, found=False)
    if now is None or now.kind not in UNOWNED:
        return TAKEN  # a guard has it now, or it ended meanwhile
    why: SupplicantError | None = None
    if isinstance(iface_path, SupplicantError):
        why = iface_path
    elif iface_path is None or interface_of(net) != iface_path:
        if iface_path is None:
            log.info("%s: wpa_supplicant does not manage this interface any more; network %s "
                     "left by a previous instance is gone with it", ifname, net)
        else:
            log.warning("%s: journal entry %s does not lie under the interface's object %s "
                        "(stale after a wpa_supplicant restart, or forged); dropping it",
                        ifname, net, iface_path)
        ledger.go(net, Ev.DROP)
        return DROPPED
    else:
        try:
            await bg.restore_network(net, ifname)
        except SupplicantError as e:
            if await supplicant_gone(sup, e):
                raise _NoSupplicant(f"wpa_supplicant left while restoring ({e})") from None
            why = e
    if why is not None:
        log.error("%s: cannot restore bgscan \"%s\" on %s left suspended by a previous "
                  "instance: %s; it stays in %s for the next start", now.ifname, shown(now.saved),
                  net, why, ledger.journal.path)
        return KEPT
    log.info(log_lines.REPLAYED, ifname, shown(now.saved), net)
    return RESTORED
