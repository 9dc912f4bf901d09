"""What each network object we touched is in, and what each event makes of it: the rule
(`step`, pure) and the Ledger that holds each path's state by it and writes the crash journal
from those states before any call a state makes.  No bus I/O: Bgscan makes the calls; `read`
and evidence.py turn their answers into events.

The rule: never leave a user's bgscan off.  Hence
- a state that can carry our "" on wpa_supplicant's object has a journal entry (`journaled`),
  written before the Set that puts "" there, so that a crash is followed by a restore;
- a state leaves that set only on evidence (bgscan read back as not our "", a restore answered,
  the object confirmed gone: evidence.py), never because a call went unanswered;
- a Set of "" that went unanswered counts as applied unless a read-back shows it was not
  (SET_ASSUMED): restoring writes only where "" still stands, so an unneeded restore changes
  nothing, while forgetting a "" that was applied leaves bgscan off for good;
- wpa_supplicant reuses network paths (NetworkManager removes and re-adds on re-activation),
  so a state remembers the path's generation (how many NetworkRemoved it had) when its call
  began or our "" was read: a removal after that took the object our "" was on.

States (a path with no state is untouched and has no entry):

  READING       suspend asked; reading bgscan (journaled only if an entry was there already).
  SETTING       entry written; Set "" sent, not yet answered.
  PUTTING_BACK  the path was re-created while SETTING, and the Set landed after that: our ""
                hit the new object; Set of the value read is on its way to it.
  SUSPENDED     our "" stands.
  IN_DOUBT      our "" may or may not stand (a Set unanswered and unreadable; a restart
                during the suspend; a restore cancelled): read before counting on it.
  RESTORING     reading bgscan, then Set of the saved value where our "" still stands.
  LEFT_BEHIND   its suspend was cancelled with the Set on the way, which may still land on
                whatever object the path has by then: a removal does not end it.
  LEFTOVER      journaled by an earlier instance (FOUND), kept by a replay or a take-over that
                failed, or given up by a guard that stopped: nobody's.
"""

from __future__ import annotations

import enum
import logging
from typing import NamedTuple

from ...peers.supplicant import SupplicantError
from ...peers.values import valid_bgscan
from .journal import Journal

log = logging.getLogger("scanguard")


class Kind(enum.Enum):
    READING = "reading"
    SETTING = "setting"
    PUTTING_BACK = "putting back"
    SUSPENDED = "suspended"
    IN_DOUBT = "in doubt"
    RESTORING = "restoring"
    LEFT_BEHIND = "left behind"
    LEFTOVER = "left over"


class State(NamedTuple):
    kind: Kind
    ifname: str
    saved: str | None  # the value restore puts back; None only while READING with no entry
    generation: int  # the path's generation when bgscan was read (or the entry was taken)
    restarted: bool = False  # wpa_supplicant restarted while this state's call was under way
    origin: Kind | None = None  # READING, RESTORING: where a call that fails goes back to
    op: int = 0  # the call sequence (suspend, restore) the state belongs to; answers carry it


def journaled(s: State | None) -> bool:
    """Whether `s` can carry our "": exactly then the journal holds an entry for it."""
    return s is not None and s.saved is not None


# A suspension the guard counts as its own (Ledger.current).
LIVE = frozenset({Kind.SUSPENDED, Kind.IN_DOUBT})
# Under way on behalf of a task: a second suspend, or a replay, keeps off.
BUSY = frozenset({Kind.READING, Kind.SETTING, Kind.PUTTING_BACK, Kind.RESTORING})
# Nobody's: a replay restores these.
UNOWNED = frozenset({Kind.LEFT_BEHIND, Kind.LEFTOVER})


class Ev(enum.Enum):
    """The events (the value read is step()'s argument).  FAILED: refused, or unanswered where
    what was not done can be tried again (a read; a restore not yet sent)."""

    ASK = "suspend asked"
    READ_EMPTY = 'bgscan read as ""'
    READ_VALUE = "bgscan read as a value the journal keeps"
    READ_OTHER = "bgscan read as no key, or a value the journal cannot keep"
    FAILED = "the call failed"
    SET_APPLIED = 'Set answered, or unanswered and read back as our ""'
    SET_ASSUMED = "Set unanswered, and the read-back failed too"
    SET_NOT_APPLIED = 'Set refused, or unanswered and read back without our ""'
    DONE = "Set answered (restore, put-back), or its object confirmed gone"
    UNANSWERED = 'restore unanswered, read back as our ""'
    UNKNOWN = "restore or put-back unanswered, and not read back as ours or gone"
    GONE = "the object confirmed gone (NetworkRemoved, its interface, or wpa_supplicant)"
    RESTARTED = "wpa_supplicant restarted"
    CANCELLED = "the task running the call was cancelled"
    RESTORE = "restore asked (by the guard, or by the journal's replay)"
    ABANDON = "the guard that had it is gone"
    FOUND = "an entry an earlier instance journaled, first looked at"
    DROP = ("the entry is not under its interface's object (stale, or forged), or "
            "wpa_supplicant no longer manages its interface")


# The events that start a call sequence (the state takes the sequence's token, State.op).
STARTS = frozenset({Ev.ASK, Ev.RESTORE})
# The events after which a call needs the state's entry on disk: if it cannot be written, the
# event has not happened (Ledger.go).  After any other, a failed write is only logged.
NEED_ENTRY = frozenset({Ev.ASK, Ev.READ_VALUE})


def read(value: str | None) -> Ev:
    """A value of bgscan read as an event: "" is only ever ours; a value the journal can keep is
    NetworkManager's; no key or any other value is neither suspended nor taken for ours."""
    if value == "":
        return Ev.READ_EMPTY
    return Ev.READ_VALUE if valid_bgscan(value) else Ev.READ_OTHER


class Refused(Exception):
    """The event does not apply to the state (a second suspend of a busy network)."""


def back(s: State, generation: int) -> State | None:
    """The state a failed call was made from, unless a removal since the read took our ""."""
    if s.kind is Kind.READING:  # an entry it took over stays what it was
        return s._replace(kind=s.origin, origin=None) if s.origin is not None else None
    origin = s.origin if s.kind is Kind.RESTORING else s.kind
    if origin is not Kind.LEFT_BEHIND and generation != s.generation:
        return None
    assert origin is not None, "RESTORING always knows where it came from"
    return s._replace(kind=origin, origin=None)


def doubted(s: State | None) -> State | None:
    """A suspension a restore may have ended without telling: read before counting on it."""
    return s._replace(kind=Kind.IN_DOUBT) if s is not None and s.kind is Kind.SUSPENDED else s


def step(s: State | None, ev: Ev, *, generation: int, ifname: str = "",
         value: str | None = None, op: int = 0) -> State | None:
    """The state after `ev`; `generation` is the path's now; `op` the token of the sequence an
    event in STARTS begins.  Raises Refused where the event does not apply."""
    if s is None:  # untouched, or ended meanwhile (removed, or wpa_supplicant restarted)
        if ev is Ev.FOUND:
            return State(Kind.LEFTOVER, ifname, value, generation)
        return State(Kind.READING, ifname, None, generation, op=op) if ev is Ev.ASK else None
    k = s.kind
    match ev, k:
        case Ev.ASK, Kind.LEFTOVER | Kind.LEFT_BEHIND:
            return s._replace(kind=Kind.READING, ifname=ifname, generation=generation,
                           origin=k, op=op)
        case Ev.ASK, _:
            raise Refused(k)
        case Ev.READ_VALUE, Kind.READING:  # (not "": a Set left behind has landed, undone)
            return s._replace(kind=Kind.SETTING, saved=value, origin=None)
        case Ev.READ_EMPTY, Kind.READING if s.saved is not None:
            # Only we write "": the entry's, taken over, on whatever object the path has now.
            # Unless the path was re-created since the read began: a NetworkRemoved handled
            # before its answer may have come after it, and the "" read was the old object's.
            doubt = s.restarted or generation != s.generation
            return s._replace(kind=Kind.IN_DOUBT if doubt else Kind.SUSPENDED,
                           restarted=False, generation=generation, origin=None)
        case Ev.READ_EMPTY | Ev.READ_OTHER | Ev.FAILED, Kind.READING:
            return back(s, generation)
        case Ev.SET_APPLIED, Kind.SETTING if generation != s.generation:
            return s._replace(kind=Kind.PUTTING_BACK, generation=generation)
        case Ev.SET_APPLIED, Kind.SETTING:
            return s._replace(kind=Kind.IN_DOUBT if s.restarted else Kind.SUSPENDED,
                           restarted=False)
        # Unconfirmed, and across a removal it may have hit the old object or the new one: no
        # put-back, which would write where no read showed our ""; read before it counts.
        case Ev.SET_ASSUMED, Kind.SETTING:
            return s._replace(kind=Kind.IN_DOUBT, restarted=False, generation=generation)
        case Ev.SET_NOT_APPLIED, Kind.SETTING:
            return None
        case Ev.DONE, Kind.PUTTING_BACK | Kind.RESTORING:
            return None
        case Ev.FAILED, Kind.PUTTING_BACK if generation == s.generation:
            return s._replace(kind=Kind.IN_DOUBT if s.restarted else Kind.SUSPENDED,
                           restarted=False)
        case Ev.UNKNOWN, Kind.PUTTING_BACK if generation == s.generation:
            return s._replace(kind=Kind.IN_DOUBT, restarted=False)
        case Ev.FAILED | Ev.UNKNOWN, Kind.PUTTING_BACK:
            return None  # removed again: our "" went with the object it was on
        case Ev.READ_EMPTY, Kind.RESTORING:
            # Ours, on whatever object the path has now (a Set left behind lands before this
            # read, and may have hit a re-created object): restore it there.
            return s._replace(generation=generation,
                           origin=Kind.LEFTOVER if s.origin is Kind.LEFT_BEHIND else s.origin)
        case Ev.READ_VALUE | Ev.READ_OTHER, Kind.RESTORING:
            return None  # not our "" any more
        case Ev.FAILED | Ev.UNANSWERED, Kind.RESTORING:
            return back(s, generation)
        case Ev.UNKNOWN, Kind.RESTORING:
            return doubted(back(s, generation))
        case Ev.READ_EMPTY, Kind.IN_DOUBT:  # the recheck before counting on it
            return s._replace(kind=Kind.SUSPENDED)
        case Ev.READ_VALUE | Ev.READ_OTHER, Kind.IN_DOUBT:
            return None
        case Ev.FAILED, Kind.IN_DOUBT:
            return s
        case Ev.GONE, Kind.SUSPENDED | Kind.IN_DOUBT | Kind.LEFTOVER:
            return None
        case Ev.GONE, _:
            return s  # a call under way compares generations; a left-behind Set may still land
        case Ev.RESTARTED, Kind.READING | Kind.SETTING | Kind.PUTTING_BACK:
            return s._replace(restarted=True)  # its Set may still reach the new process
        case Ev.RESTARTED, Kind.RESTORING if s.origin in UNOWNED:
            return s
        case Ev.RESTARTED, _:
            return None
        case Ev.CANCELLED, Kind.READING | Kind.SETTING | Kind.PUTTING_BACK if s.saved is not None:
            return s._replace(kind=Kind.LEFT_BEHIND, restarted=False)
        case Ev.CANCELLED, Kind.READING:
            return None
        case Ev.CANCELLED, Kind.RESTORING:
            return doubted(back(s, generation))
        case Ev.RESTORE, Kind.SUSPENDED | Kind.IN_DOUBT | Kind.LEFTOVER | Kind.LEFT_BEHIND:
            return s._replace(kind=Kind.RESTORING, origin=k, generation=generation, op=op)
        case Ev.DROP, Kind.LEFTOVER | Kind.LEFT_BEHIND:
            return None
        case Ev.ABANDON, Kind.SUSPENDED | Kind.IN_DOUBT:
            return s._replace(kind=Kind.LEFTOVER)
        case Ev.ABANDON, _:
            return s
    raise Refused(f"{ev.name} in {k.name}")


class Suspended(NamedTuple):
    """A live suspension as the guards see it (SUSPENDED, or IN_DOUBT: read again before it
    counts, Bgscan.recheck); `saved` is what a restore puts back."""

    network: str
    saved: str
    generation: int = 0
    ifname: str = ""
    in_doubt: bool = False


JOURNAL_UNWRITABLE = ("cannot write {path} ({why}), so bgscan is left on (a crash could not "
                      "restore it); check the directory's permissions")


class Ledger:
    """Each touched path's State and generation, and the journal (its only writer)."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self._states: dict[str, State] = {}  # network path -> what it is in
        self._on: dict[str, dict[str, None]] = {}  # ifname -> its paths with a state, in order
        # How many NetworkRemoved signals each path has had: wpa_supplicant reuses ids, so
        # NetworkManager's remove-then-add brings back the same path with a fresh bgscan.
        self._generations: dict[str, int] = {}
        self._ops = 0  # the last call sequence's token (State.op)

    def state(self, network: str, *, found: bool = True) -> State | None:
        """`network`'s state; an earlier instance's entry enters as FOUND (unless `found`)."""
        s = self._states.get(network)
        if s is None and found and (entry := self.journal.get(network)) is not None:
            s = step(None, Ev.FOUND, generation=self.generation(network), ifname=entry.ifname,
                     value=entry.bgscan)
            self._set(network, s)
        return s

    def go(self, net: str, ev: Ev, *, op: int | None = None, ifname: str = "",
           value: str | None = None) -> State | None:
        """Apply one event, then write the journal the new state needs; None for an answer to a
        call sequence (`op`) that has ended.  An entry that cannot be written undoes an event
        in NEED_ENTRY (SupplicantError says why), and is logged after any other."""
        before = self.state(net)
        if op is not None and (before is None or before.op != op):
            return None
        after = step(before, ev, generation=self.generation(net), ifname=ifname, value=value,
                     op=self._ops if ev in STARTS else 0)
        self._set(net, after)
        try:
            self._write(net, after)
        except SupplicantError as e:
            if ev in NEED_ENTRY:
                self._set(net, before)
                raise
            log.error("%s", e)
        return after

    def begin(self, net: str, ev: Ev, ifname: str = "") -> int:
        """Start a call sequence on `net` (ASK, RESTORE): the token its answers carry."""
        self._ops += 1
        self.go(net, ev, ifname=ifname)
        return self._ops

    def owner(self, net: str) -> int | None:  # the token of its call sequence (None: no state)
        s = self._states.get(net)
        return None if s is None else s.op

    def settle(self, net: str, op: int) -> None:
        """The task working on `net` ended without an answer (cancelled, or a defect)."""
        s = self._states.get(net)
        if s is not None and s.kind in BUSY:
            self.go(net, Ev.CANCELLED, op=op)

    def _set(self, net: str, s: State | None) -> None:
        old = self._states.pop(net, None) if s is None else self._states.get(net)
        if old is not None and (s is None or s.ifname != old.ifname):
            del self._on[old.ifname][net]
            if not self._on[old.ifname]:
                del self._on[old.ifname]
        if s is not None:
            self._states[net] = s
            self._on.setdefault(s.ifname, {})[net] = None

    def _write(self, net: str, s: State | None) -> None:
        """The one place the journal changes: an entry exactly for the states that can carry
        our "" (suspension_table.journaled)."""
        entry = self.journal.get(net)
        if journaled(s):
            assert s is not None and s.saved is not None
            if entry != (s.ifname, s.saved):
                try:
                    self.journal.record(net, s.ifname, s.saved)
                except OSError as e:
                    raise SupplicantError(JOURNAL_UNWRITABLE.format(
                        path=self.journal.path, why=e.strerror or e)) from None
        elif entry is not None:
            self.journal.forget(net)

    def generation(self, network: str) -> int:
        """How many objects at this path wpa_supplicant has removed so far."""
        return self._generations.get(network, 0)

    def network_removed(self, network: str) -> Suspended | None:
        """Call at once when NetworkRemoved arrives, before other queued replies: the path's
        generation moves on, and our "" went with the object.  Returns the live suspension that
        ended so (its guard re-engages on the new object), if any."""
        self._generations[network] = self.generation(network) + 1
        before = self.state(network)
        if before is None:
            return None
        self.go(network, Ev.GONE)
        return as_suspended(network, before) if before.kind in LIVE else None

    def supplicant_restarted(self) -> None:
        """wpa_supplicant restarted: every "" we set is gone, but a Set on its way may still
        reach the new process."""
        nets = set(self._states) | set(self.journal.entries())
        with self.journal.batch():
            for net in nets:
                self.go(net, Ev.RESTARTED)
        dropped = len(nets) - len(self._states)
        if dropped:
            log.info("wpa_supplicant's networks are gone; forgot %d suspended bgscan(s)", dropped)

    def abandon(self, ifname: str) -> None:
        """The guard of `ifname` is gone: what it could not restore is LEFTOVER, replay's."""
        for net in list(self._on.get(ifname, ())):
            if self._states[net].kind in LIVE:
                self.go(net, Ev.ABANDON)

    def current(self, ifname: str) -> Suspended | None:
        """The live suspension on `ifname`'s network, if any (also while it is restored)."""
        for net in self._on.get(ifname, ()):
            s = self._states[net]
            if s.kind in LIVE or s.origin in LIVE:
                return as_suspended(net, s)
        return None

    def unowned(self, ifname: str | None = None) -> dict[str, State]:
        """The UNOWNED states, an earlier instance's entries included (only `ifname`'s)."""
        for net in self.journal.entries():  # an earlier instance's too, read at first use
            self.state(net)
        return {net: s for net, s in self._states.items()
                if s.kind in UNOWNED and ifname in (None, s.ifname)}

    def taking_over(self) -> int:
        """Entries a guard is taking over (they fall back to UNOWNED if the suspend fails)."""
        return sum(1 for s in self._states.values() if s.kind not in UNOWNED and s.origin in UNOWNED)

def kept(journal: Journal, ifname: str | None = None) -> int:  # the restores still owed
    return sum(1 for e in journal.entries().values() if ifname in (None, e.ifname))


def as_suspended(net: str, s: State) -> Suspended:
    return Suspended(net, s.saved or "", s.generation, s.ifname, s.kind is Kind.IN_DOUBT)
