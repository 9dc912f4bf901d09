"""Who holds bgscan off, in one table: the only owner of hold records and of their caps.

A hold is taken in steps because authorising it (polkit) needs an await, and whatever is
checked before an await and acted on after it can be raced: 120 concurrent Hold calls from one
client once all passed a "fewer than 64?" check made before polkit answered.  So a Hold call
first *reserves*, synchronously, with no await between the check of the caps and the count.

While polkit is asked, a reservation counts only against small caps of its own, for calls
waiting for an answer (4 per client, 8 per user, 32 in all), not against the holds' caps: an
authentication agent may never answer, and polkit then keeps the call waiting for two minutes;
if waiting calls took hold slots, two local accounts could fill all 64 and refuse everyone's
Hold.  Its answer moves the reservation onto the holds' caps (``grant``, checked again then, as
synchronously) or gives it back (``cancel``); a granted reservation becomes a hold with
``commit``.  Root is never asked, so its reservations start granted.  There is no window in
which a cap can be exceeded, however many calls are in flight.

The caps also bound the ActiveHolds property (``aa{sv}``), which is sent whole in every
PropertiesChanged: six clients with 64 holds of 256-character texts once made it ≈256 KB, more
than a socket buffer, and the daemon froze writing it.  With the default caps (64 holds in all;
reason and application id at most 256 bytes of UTF-8; a caller's unique name at most 255 bytes,
the D-Bus limit; an interface name at most 15 bytes, the kernel's) the marshalled property is at
most 64,711 bytes (``size_bound()``, which adds every padding byte D-Bus alignment could insert),
under 64 KiB, whatever clients send.

Modelled on power-profiles-daemon: one table keyed by a random non-zero u32 cookie; the
per-interface view is derived from it; ``release`` and ``caller_left`` end holds through one
removal path; every change is announced once (``changed``).  Pure Python: no D-Bus, no I/O; the bus
API maps ``HoldError.kind`` to D-Bus error names.
"""

from __future__ import annotations

import logging
import unicodedata
from collections.abc import Callable
from types import TracebackType
from typing import Literal, NamedTuple

from ...text import KEEP_FORMAT
from ..changes import Changes

log = logging.getLogger("scanguard.holds")

MAX_PER_CALLER = 16
MAX_PER_UID = 32
MAX_TOTAL = 64
# Hold calls waiting for polkit's answer, counted apart from the holds.
MAX_WAITING_PER_CALLER = 4
MAX_WAITING_PER_UID = 8
MAX_WAITING_TOTAL = 32
MAX_TEXT_BYTES = 256      # reason, application_id
MAX_CALLER_BYTES = 255    # D-Bus specification: a bus name is at most 255 bytes
MAX_IFNAME_BYTES = 15     # IFNAMSIZ - 1

# The D-Bus type of each key of an ActiveHolds dictionary (documented in the introspection XML);
# the bus API builds its Variants from this, and size_bound() measures with it.
HOLD_FIELDS: dict[str, str] = {
    "cookie": "u", "reason": "s", "application_id": "s", "interface": "s", "caller": "s",
    "caller_uid": "u", "since": "d",
}

Kind = Literal["too-many", "unknown", "not-holder", "bad-text", "caller-left"]


class HoldError(Exception):
    """A refused hold operation: ``kind`` for the program, ``text`` for the person.

    Kinds: "too-many" (a cap is reached), "unknown" (no hold has that cookie), "not-holder"
    (someone else's hold), "bad-text" (a text too long or with control or format characters),
    "caller-left" (the client left the bus while its hold was being authorised; nobody is
    left to read the reply).
    """

    def __init__(self, kind: Kind, text: str) -> None:
        super().__init__(text)
        self.kind: Kind = kind
        self.text = text


class Hold(NamedTuple):
    """One hold, as ActiveHolds shows it.  Frozen: a record handed out cannot drift from the table."""

    cookie: int
    reason: str
    application_id: str
    interface: str      # "" = every Wi-Fi interface, also those that connect later
    caller: str         # unique bus name of the client
    caller_uid: int
    since: float        # wall clock, seconds since the Unix epoch


def check_text(what: str, text: str, limit: int = MAX_TEXT_BYTES) -> None:
    """Refuse text that would bloat ActiveHolds or garble a terminal that prints it.

    Measured in UTF-8 bytes, because that is what D-Bus sends and what the size bound counts:
    "☕" is one character but three bytes.  Control characters (C0, DEL and C1) and format
    characters (bidi overrides and isolates such as U+202E, zero-width spaces, language tags) are
    refused, so that no client can choose an escape sequence or reorder or hide part of a line
    that shows its text, also where a program prints ActiveHolds without escaping it.  ZWNJ and
    ZWJ are format characters that scripts and emoji sequences need, and are accepted.
    """
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise HoldError("bad-text", f"{what} is not valid Unicode text (it contains a lone "
                        "surrogate); send it as UTF-8") from None
    if size > limit:
        raise HoldError("bad-text", f"{what} is {size} bytes in UTF-8; at most {limit}"
                        f"{' (non-ASCII characters take 2-4 bytes each)' if size > len(text) else ''}")
    for i, c in enumerate(text):
        if unicodedata.category(c) in ("Cc", "Cf") and c not in KEEP_FORMAT:
            raise HoldError("bad-text", f"{what} contains the control or format character "
                            f"U+{ord(c):04X} at position {i}; use plain text")


class Reservation:
    """A Hold call's place, from before polkit is asked until it becomes a hold or is given back.

    Use it as a context manager so that an exception or a refusal anywhere in between gives it
    back: ``with holds.reserve(sender, uid) as r: ...; r.grant(); ...; hold = r.commit(...)``.
    A HoldError from ``grant`` or ``commit`` gives it back by itself.
    """

    def __init__(self, holds: Holds, caller: str, uid: int, granted: bool) -> None:
        self._holds = holds
        self.caller = caller
        self.uid = uid
        self._state: Literal["waiting", "granted", "committed", "cancelled", "abandoned"] = (
            "granted" if granted else "waiting")

    @property
    def pending(self) -> bool:
        """True until committed, cancelled or abandoned (its caller left the bus)."""
        return self._state in ("waiting", "granted")

    @property
    def waiting(self) -> bool:
        """True while polkit's answer is awaited: counted against the caps of waiting calls."""
        return self._state == "waiting"

    def grant(self) -> None:
        """polkit said yes: count against the holds' caps from now on, if they have room."""
        self._check_live("grant")
        if self._state == "granted":
            return
        try:
            self._holds._check_room(self.caller, self.uid)
        except HoldError:
            self.cancel()
            raise
        self._state = "granted"

    def commit(self, reason: str, application_id: str, interface: str, since: float) -> Hold:
        """Turn the reservation into a hold with a fresh cookie; the change is announced."""
        self._check_live("commit")
        if self._state != "granted":
            raise RuntimeError("Reservation.commit() before grant(): the holds' caps were not checked")
        try:
            check_text("reason", reason)
            check_text("application_id", application_id)
            check_text("interface", interface, MAX_IFNAME_BYTES)
        except HoldError:
            self.cancel()
            raise
        self._state = "committed"
        return self._holds._commit(self, reason, application_id, interface, since)

    def cancel(self) -> None:
        """Give the place back; harmless after commit or a second time.  The Hold call calls
        it on its way out, also when its caller has left."""
        self._holds._left_waiting.discard(self)
        if self.pending:
            self._state = "cancelled"
            self._holds._pending.discard(self)

    def _abandon(self) -> None:
        if self.pending:
            if self.waiting:
                self._holds._left_waiting.add(self)
            self._state = "abandoned"
            self._holds._pending.discard(self)

    def _check_live(self, what: str) -> None:
        if self._state == "abandoned":
            raise HoldError("caller-left", f"client {self.caller} left the bus before its hold "
                            "was taken; nothing is held")
        if self._state in ("committed", "cancelled"):
            raise RuntimeError(f"Reservation.{what}() on a reservation already {self._state}")

    def __enter__(self) -> Reservation:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.cancel()

    def __repr__(self) -> str:
        return f"<Reservation {self._state} caller={self.caller} uid={self.uid}>"


class Holds:
    """Every hold and every pending reservation, with caps that hold however calls interleave."""

    def __init__(self, *, per_caller: int = MAX_PER_CALLER, per_uid: int = MAX_PER_UID,
                 total: int = MAX_TOTAL, waiting_per_caller: int = MAX_WAITING_PER_CALLER,
                 waiting_per_uid: int = MAX_WAITING_PER_UID,
                 waiting_total: int = MAX_WAITING_TOTAL) -> None:
        for name, cap in (("per_caller", per_caller), ("per_uid", per_uid), ("total", total),
                          ("waiting_per_caller", waiting_per_caller),
                          ("waiting_per_uid", waiting_per_uid), ("waiting_total", waiting_total)):
            if cap < 1:
                raise ValueError(f"{name} cap is {cap}; it must be at least 1")
        self.per_caller = per_caller
        self.per_uid = per_uid
        self.total = total
        self.waiting_per_caller = waiting_per_caller
        self.waiting_per_uid = waiting_per_uid
        self.waiting_total = waiting_total
        self._holds: dict[int, Hold] = {}
        self._pending: set[Reservation] = set()  # waiting for polkit or granted, not committed
        # Calls still waiting for polkit whose caller has left: nothing can come of them, but
        # each still waits for an answer, so they count against the caps of waiting calls until
        # they end; otherwise leaving and reconnecting would pile up unanswered calls.
        self._left_waiting: set[Reservation] = set()
        # Called once after every change of the holds (not of reservations).
        self.changed: Changes[[]] = Changes(logger=log)

    # ---- taking ---------------------------------------------------------------------------

    def reserve(self, caller: str, uid: int, *, granted: bool = False) -> Reservation:
        """A place for `caller` (of user `uid`) now, before any await; raises HoldError
        ("too-many").  It waits for polkit's answer unless `granted` (root, never asked).
        The holds' caps are checked now too, so that nobody is asked for a password for a hold
        that could not be taken; ``grant`` checks them again."""
        if not caller or len(caller.encode("utf-8", "surrogatepass")) > MAX_CALLER_BYTES:
            raise ValueError(f"caller {caller!r} is not a D-Bus unique name (1 to "
                             f"{MAX_CALLER_BYTES} bytes)")
        if not 0 <= uid <= 0xFFFFFFFF:
            raise ValueError(f"uid {uid} is not a Unix user id (0 to 2**32-1)")
        self._check_room(caller, uid)
        if not granted:
            self._check_waiting(caller, uid)
        reservation = Reservation(self, caller, uid, granted)
        self._pending.add(reservation)
        return reservation

    def _check_room(self, caller: str, uid: int) -> None:
        """The holds' caps, counting holds and granted reservations."""
        mine = self._count(lambda c, _u: c == caller)
        if mine >= self.per_caller:
            raise HoldError("too-many", f"this client already has {mine} holds (at most "
                            f"{self.per_caller}); release some (Release) before taking more")
        theirs = self._count(lambda _c, u: u == uid)
        if theirs >= self.per_uid:
            raise HoldError("too-many", f"user {uid} already has {theirs} holds (at most "
                            f"{self.per_uid}); release some (Release) before taking more")
        if self._count(lambda _c, _u: True) >= self.total:
            raise HoldError("too-many", f"every one of the {self.total} holds the service allows "
                            "is taken; try again when other clients have released theirs")

    def _check_waiting(self, caller: str, uid: int) -> None:
        """The caps of calls waiting for polkit's answer."""
        waiting = [r for r in self._pending if r.waiting] + list(self._left_waiting)
        mine = sum(1 for r in waiting if r.caller == caller)
        if mine >= self.waiting_per_caller:
            raise HoldError("too-many", f"this client already has {mine} Hold calls waiting for "
                            f"polkit's answer (at most {self.waiting_per_caller} at once); "
                            "wait for their answers before asking again")
        theirs = sum(1 for r in waiting if r.uid == uid)
        if theirs >= self.waiting_per_uid:
            raise HoldError("too-many", f"user {uid} already has {theirs} Hold calls waiting for "
                            f"polkit's answer (at most {self.waiting_per_uid} at once); an authentication "
                            "agent that does not answer keeps them waiting up to 2 minutes")
        if len(waiting) >= self.waiting_total:
            raise HoldError("too-many", f"{len(waiting)} Hold calls are waiting for polkit's answer, "
                            f"the most the service lets wait at once ({self.waiting_total}); "
                            "try again shortly")

    def _count(self, match: Callable[[str, int], bool]) -> int:
        return (sum(1 for h in self._holds.values() if match(h.caller, h.caller_uid))
                + sum(1 for r in self._pending if not r.waiting and match(r.caller, r.uid)))

    def _commit(self, reservation: Reservation, reason: str, application_id: str,
                interface: str, since: float) -> Hold:
        import secrets  # here, not at the top: scanguardd's start does without (entry.py)

        self._pending.discard(reservation)
        cookie = 0
        while cookie == 0 or cookie in self._holds:
            cookie = secrets.randbits(32)
        hold = Hold(cookie, reason, application_id, interface, reservation.caller,
                    reservation.uid, since)
        self._holds[cookie] = hold
        self.changed()
        return hold

    # ---- ending ---------------------------------------------------------------------------

    def release(self, cookie: int, caller: str, caller_is_root: bool) -> Hold:
        """End one hold; only its holder or root may.  Returns the hold that ended."""
        hold = self._holds.get(cookie)
        if hold is None:
            raise HoldError("unknown", f"there is no hold with cookie {cookie} (already released, "
                            "or its holder left the bus)")
        if hold.caller != caller and not caller_is_root:
            raise HoldError("not-holder", f"hold {cookie} belongs to another client "
                            f"({hold.caller}); only it or root may release it")
        self._remove([hold])
        return hold

    def caller_left(self, caller: str) -> list[Hold]:
        """End every hold of a client that left the bus, and void its pending reservations
        (those still waiting for polkit too: they can never be committed)."""
        for reservation in [r for r in self._pending if r.caller == caller]:
            reservation._abandon()
        gone = sorted((h for h in self._holds.values() if h.caller == caller), key=_order)
        self._remove(gone)
        return gone

    def _remove(self, gone: list[Hold]) -> None:
        """The one way a hold ends."""
        for hold in gone:
            del self._holds[hold.cookie]
        if gone:
            self.changed()

    # ---- views ----------------------------------------------------------------------------

    def held(self, ifname: str) -> bool:
        """Whether a hold keeps bgscan off on `ifname` (a hold on "" covers every interface)."""
        return any(h.interface in ("", ifname) for h in self._holds.values())

    def get(self, cookie: int) -> Hold | None:
        """The hold with this cookie, e.g. to learn its holder before asking whether a caller is root."""
        return self._holds.get(cookie)

    def all(self) -> list[Hold]:
        """Every hold, oldest first (ties by cookie), so that ActiveHolds has a stable order."""
        return sorted(self._holds.values(), key=_order)

    def callers(self) -> set[str]:
        """Clients holding at least one hold or taking one (a reservation waiting for polkit or
        granted, not yet committed or given back): whose leaving the bus must be watched."""
        return {h.caller for h in self._holds.values()} | {r.caller for r in self._pending}

    def __len__(self) -> int:
        return len(self._holds)

    def size_bound(self) -> int:
        """The most bytes ActiveHolds (``aa{sv}``) can marshal to with these caps.

        Every value at its largest and every alignment padding at its worst, so it holds
        wherever in a message the array starts.  Default caps: 64,711 bytes.
        """
        largest = {"reason": MAX_TEXT_BYTES, "application_id": MAX_TEXT_BYTES,
                   "interface": MAX_IFNAME_BYTES, "caller": MAX_CALLER_BYTES}
        one = 3 + 4  # padding to 4, array length (the padding to the first entry is in `entry`)
        for key, sig in HOLD_FIELDS.items():
            entry = 7 + 4 + len(key.encode()) + 1 + 1 + len(sig) + 1  # pad to 8, key, signature
            if sig == "s":
                entry += 3 + 4 + largest[key] + 1
            elif sig == "u":
                entry += 3 + 4
            elif sig == "d":
                entry += 7 + 8
            else:  # pragma: no cover - HOLD_FIELDS uses only the types above
                raise AssertionError(f"size_bound() does not know D-Bus type {sig}")
            one += entry
        return 3 + 4 + self.total * one


def _order(hold: Hold) -> tuple[float, int]:
    return (hold.since, hold.cookie)
