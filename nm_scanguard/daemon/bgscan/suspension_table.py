"""What each network object we touched is in, and what each event makes of it, with no I/O
(Bgscan makes the calls; `read` and evidence.py turn their answers into events).

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
from typing import NamedTuple

from ...peers.supplicant_values import valid_bgscan


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
            return s._replace(kind=Kind.IN_DOUBT if s.restarted else Kind.SUSPENDED,
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
