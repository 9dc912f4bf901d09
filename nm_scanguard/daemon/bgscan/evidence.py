"""What counts as evidence that something of wpa_supplicant's is gone, or that a Set landed.

A journal entry is forgotten only on evidence, never on an inference: an error that names a
removed object is not enough by itself (a misreported failure can carry the same name, and
forgetting a network that is still there would leave its bgscan off), so it counts only once
the interface shows the network is no longer its current one, or the interface object itself
was replaced; and "nobody owns the name" counts only once the bus confirms it.
"""

from __future__ import annotations

import logging

from ...peers.supplicant import (
    INTERFACE_UNKNOWN,
    ObjectGone,
    SupplicantError,
    UncertainOutcome,
    WpaSupplicant,
    is_not_running,
)
from ...peers.supplicant_values import interface_of
from ...text import shown
from .suspension_table import Ev

log = logging.getLogger("scanguard")


async def unless_gone(sup: WpaSupplicant, net: str, err: SupplicantError,
                      ifname: str) -> SupplicantError | None:
    """None if `err` came from `net` now confirmed gone: it answered "unknown object/method"
    (ObjectGone), and the interface no longer has it as its current network, or the interface
    object itself is gone (wpa_supplicant names another object for `ifname`, or none).  Else
    what to raise, so that the entry stays and the call is tried again: `err`, or why it could
    not be confirmed.  A network re-created at the same path counts as there: the retry then
    finds NetworkManager's value on it and leaves it."""
    if not isinstance(err, ObjectGone):
        return err
    try:
        current = await sup.current_network(interface_of(net))
    except SupplicantError as e:
        try:
            if isinstance(e, ObjectGone) and await interface(sup, ifname) != interface_of(net):
                return None  # the interface and its networks went: nothing left to retry
        except SupplicantError:
            pass
        return SupplicantError(f"wpa_supplicant answered {err.bus_error or err} for {net} and "
                               f"could not say whether the network still exists ({e}); "
                               "trying again later", e.bus_error)
    if current == net:
        return SupplicantError(f"wpa_supplicant answered {err.bus_error or err} for {net}, "
                               "which is still the interface's current network; trying "
                               "again later", err.bus_error)
    return None


async def interface(sup: WpaSupplicant, ifname: str) -> str | None:
    """wpa_supplicant's object for `ifname`; None only when it says it does not manage it
    (InterfaceUnknown).  Any other error keeps the entries for a later try."""
    try:
        return await sup.interface(ifname)
    except ObjectGone as e:
        if e.bus_error == INTERFACE_UNKNOWN:
            return None
        raise SupplicantError(f"wpa_supplicant could not say whether it manages {ifname} "
                              f"({e})", e.bus_error) from None


async def supplicant_gone(sup: WpaSupplicant, err: SupplicantError | None = None) -> bool:
    """Whether the bus confirms that nobody owns wpa_supplicant's name (after `err`, if given,
    said so; any other `err` is no evidence).  A bus that will not say is no evidence either."""
    if err is not None and not is_not_running(err):
        return False
    try:
        gone = not await sup.running()
    except SupplicantError as e:
        log.warning("%s; keeping the crash journal's entries for a later try", e)
        gone = False
    if err is not None and not gone:
        log.warning("wpa_supplicant's call answered %s, but the bus says it owns its name; "
                    "keeping the crash journal's entries for a later try", err.bus_error)
    return gone


async def suspend_landed(sup: WpaSupplicant, net: str) -> Ev:
    """After a Set of "" with no answer, read bgscan back (wpa_supplicant handles one client's
    calls in order, so the read comes after the Set): our "" is SET_APPLIED; anything else (a
    value, or no key) SET_NOT_APPLIED, as the object there now does not carry our "" and never
    will (the Set was not applied, or went to an object NetworkManager removed meanwhile: a
    put-back must not follow it); a read that fails too is SET_ASSUMED (suspension_table)."""
    try:
        return Ev.SET_APPLIED if await sup.get_bgscan(net) == "" else Ev.SET_NOT_APPLIED
    except SupplicantError:
        return Ev.SET_ASSUMED


async def restore_landed(sup: WpaSupplicant, net: str, ifname: str, err: UncertainOutcome) -> Ev:
    """After a restoring Set with no answer, read bgscan back: anything but "" is DONE (the Set
    landed, or NetworkManager's new object is there), our "" UNANSWERED (it did not land), and
    a read that fails too UNKNOWN: the suspension is left in doubt, as a release whose Set
    landed but whose reply was lost must not leave the guard counting itself engaged."""
    try:
        value = await sup.get_bgscan(net)
    except SupplicantError as e:
        log.warning("%s: wpa_supplicant did not confirm restoring bgscan on %s (%s), and "
                    "reading it back failed too (%s); keeping it to restore again",
                    ifname, net, err, e)
        return Ev.UNKNOWN
    if value == "":
        return Ev.UNANSWERED
    log.info("%s: wpa_supplicant did not confirm restoring bgscan on %s (%s), but it reads "
             "back as \"%s\": restored", ifname, net, err, shown(value))
    return Ev.DONE
