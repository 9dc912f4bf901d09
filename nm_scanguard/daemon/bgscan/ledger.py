"""What each network path we touched is in, and the crash journal written from those states:
a state changes only through `go` (one event of suspension_table), and the journal then says
what the new state needs, before any call that state makes.  No bus I/O: the calls are Bgscan's.
"""

from __future__ import annotations

import logging
from typing import NamedTuple

from ...peers.supplicant import SupplicantError
from .journal import Journal
from .suspension_table import BUSY, LIVE, NEED_ENTRY, STARTS, UNOWNED, Ev, Kind, State, journaled, step

log = logging.getLogger("scanguard")


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
