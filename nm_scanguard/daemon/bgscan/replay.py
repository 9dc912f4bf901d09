"""The crash journal's replay: restore what an earlier instance left suspended (LEFTOVER), and
what a cancelled suspend left behind (LEFT_BEHIND).

An entry is restored only on the interface it names, at a network path under that interface's
object now; the others are stale (wpa_supplicant restarted and numbered its objects anew) or
forged, and dropped.  Every entry is dropped when the bus confirms that nobody owns
wpa_supplicant's name; any other failure keeps it for a later try.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection
from functools import partial

from ... import log_lines
from ...peers.supplicant import SupplicantError
from ...text import shown
from .evidence import interface, interface_of, not_running, supplicant_gone
from .ledger import Ledger, Suspended
from .suspension import Suspender
from .suspension_table import UNOWNED, Ev, State

log = logging.getLogger("scanguard")

# What replaying one entry did (TAKEN: a running guard has the network now).
RESTORED, DROPPED, KEPT, TAKEN = "restored", "dropped", "kept", "taken"


class _NoSupplicant(Exception):
    """No wpa_supplicant owns its name: the networks the journal names are gone with it."""


async def restore_journal(suspender: Suspender,
                          known: Callable[[str], Awaitable[str | None]] | None = None,
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
    ledger, sup = suspender.ledger, suspender.supplicant
    entries = ledger.unowned(skip)
    if not entries:
        return ledger.taking_over()
    lookup: Callable[[str], Awaitable[str | None]] = partial(interface, sup)
    if known is not None:
        lookup = known
    paths: dict[str, str | None | SupplicantError] = {}  # ifname -> its object, or why not
    counts = {RESTORED: 0, DROPPED: 0, KEPT: 0, TAKEN: 0}
    try:
        with ledger.batch():
            try:
                if await supplicant_gone(sup) is not None:
                    raise _NoSupplicant("wpa_supplicant is not running")
                for net, s in entries.items():
                    counts[await _replay_one(suspender, net, s, lookup, paths)] += 1
            except _NoSupplicant as e:
                log.info("%s: the %d network(s) a previous instance changed are gone with "
                         "it; nothing to restore", e, len(entries))
                for net in entries:
                    if (left := ledger.peek(net)) is not None and left.kind in UNOWNED:
                        ledger.go(net, Ev.RESTARTED)
                return 0
    except OSError:
        pass  # the one write at the end of the batch: logged, and retried by the next
    taking_over = ledger.taking_over()
    log.info("crash journal replayed: %d restored, %d dropped, %d kept for a later try%s",
             counts[RESTORED], counts[DROPPED], counts[KEPT],
             f", {taking_over} being taken over by a guard" if taking_over else "")
    return counts[KEPT] + taking_over


async def _replay_one(suspender: Suspender, net: str, s: State,
                      lookup: Callable[[str], Awaitable[str | None]],
                      paths: dict[str, str | None | SupplicantError]) -> str:
    """Restore one entry: RESTORED, DROPPED (gone, stale or forged), KEPT (for a later try)
    or TAKEN (its state changed while this replay waited: a guard has it now).  Raises
    _NoSupplicant when no wpa_supplicant owns its name."""
    ledger, sup = suspender.ledger, suspender.supplicant
    ifname = s.ifname
    if ifname not in paths:
        try:
            paths[ifname] = await lookup(ifname)
        except SupplicantError as e:
            if await not_running(sup, e):
                raise _NoSupplicant(f"wpa_supplicant is not running ({e})") from None
            paths[ifname] = e
    iface_path = paths[ifname]
    now = ledger.peek(net)
    if now is None or now.kind not in UNOWNED:
        return TAKEN  # a guard has it now, or it ended meanwhile
    s = now
    if isinstance(iface_path, SupplicantError):
        _kept(ledger, net, s, iface_path)
        return KEPT
    if iface_path is None:
        log.info("%s: wpa_supplicant does not manage this interface any more; network %s "
                 "left by a previous instance is gone with it", ifname, net)
        ledger.go(net, Ev.RESTARTED)
        return DROPPED
    if interface_of(net) != iface_path:
        log.warning("%s: journal entry %s does not lie under the interface's object %s "
                    "(stale after a wpa_supplicant restart, or forged); dropping it",
                    ifname, net, iface_path)
        ledger.go(net, Ev.RESTARTED)
        return DROPPED
    try:
        await suspender.restore(Suspended(net, s.saved or ""), ifname)
    except SupplicantError as e:
        if await not_running(sup, e):
            raise _NoSupplicant(f"wpa_supplicant left while restoring ({e})") from None
        _kept(ledger, net, s, e)
        return KEPT
    log.info(log_lines.REPLAYED, ifname, shown(s.saved), net)
    return RESTORED


def _kept(ledger: Ledger, net: str, s: State, why: SupplicantError) -> None:
    log.error("%s: cannot restore bgscan \"%s\" on %s left suspended by a previous "
              "instance: %s; it stays in %s for the next start", s.ifname,
              shown(s.saved), net,
              why, ledger.journal.path)


async def restore_left_behind(suspender: Suspender, ifname: str) -> None:
    """A suspend whose task was cancelled with its Set on the way (a guard's sampling loop
    or a hold's kick, when the guard stops) has no live suspension, but its "" may have
    landed (LEFT_BEHIND).  Restore what is left for `ifname` now rather than at the next
    start, which may be far off (a `systemctl restart` is followed at once by the next
    instance, but a stop is not).  wpa_supplicant answers one client's calls in order, so
    the read comes after that Set."""
    entries = suspender.ledger.journal.entries()
    others = [net for net, e in entries.items() if e.ifname != ifname]
    if len(others) < len(entries):
        await restore_journal(suspender, skip=others)

