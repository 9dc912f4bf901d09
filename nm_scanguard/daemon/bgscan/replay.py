"""The crash journal's replay: restore what nobody owns, an earlier instance's entries (LEFTOVER)
and what a cancelled suspend left behind (LEFT_BEHIND), with one journal write.

An entry is restored only on the interface it names, at a network path under that interface's
object now; the others are stale (wpa_supplicant restarted and numbered its objects anew) or
forged, and dropped (DROP).  Every entry is dropped when the bus confirms that nobody owns
wpa_supplicant's name (a call answered as if nobody owned it counts only once the bus confirms
it); any other failure keeps it for a later try.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import partial

from ... import log_lines
from ...peers.supplicant import SupplicantError, WpaSupplicant
from ...peers.supplicant_values import interface_of
from ...text import shown
from .evidence import interface, supplicant_gone
from .ledger import Ledger
from .suspension_table import UNOWNED, Ev, State

log = logging.getLogger("scanguard")

# What replaying one entry did (TAKEN: a running guard has the network now).
RESTORED, DROPPED, KEPT, TAKEN = "restored", "dropped", "kept", "taken"
Lookup = Callable[[str], Awaitable[str | None]]
Restore = Callable[[str, str], Awaitable[None]]  # (network, ifname): Bgscan.restore_network


class _NoSupplicant(Exception):
    """No wpa_supplicant owns its name: the networks the journal names are gone with it."""


async def restore_journal(ledger: Ledger, sup: WpaSupplicant, restore: Restore,
                          known: Lookup | None = None, *, ifname: str | None = None) -> int:
    """Replay the entries nobody owns (only `ifname`'s if given: what a stopping guard's
    cancelled suspend left behind, restored now rather than at a next start that may be far
    off).  `known(ifname)` gives wpa_supplicant's object path for an interface, or None if it
    does not manage it (default: Supplicant.interface).  Returns the entries kept for a later
    try, counting also those a guard is taking over (they fall back to the replay if the
    take-over fails, so the retry must go on until it has ended)."""
    entries = ledger.unowned(ifname)
    if not entries:
        return ledger.taking_over()
    lookup = known or partial(interface, sup)
    paths: dict[str, str | None | SupplicantError] = {}  # ifname -> its object, or why not
    counts = {RESTORED: 0, DROPPED: 0, KEPT: 0, TAKEN: 0}
    with ledger.batch():  # one write, at the end
        try:
            if await supplicant_gone(sup):
                raise _NoSupplicant("wpa_supplicant is not running")
            for net, s in entries.items():
                counts[await _replay_one(ledger, sup, restore, net, s, lookup, paths)] += 1
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


async def _replay_one(ledger: Ledger, sup: WpaSupplicant, restore: Restore, net: str, s: State,
                      lookup: Lookup, paths: dict[str, str | None | SupplicantError]) -> str:
    """Restore one entry: RESTORED, DROPPED (gone, stale or forged), KEPT (for a later try)
    or TAKEN (its state changed while this replay waited: a guard has it now).  Raises
    _NoSupplicant when no wpa_supplicant owns its name."""
    ifname = s.ifname
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
            await restore(net, ifname)
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
