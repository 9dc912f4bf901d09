"""What counts as evidence that something of wpa_supplicant's is gone, or that a Set landed.

A journal entry is forgotten only on evidence, never on an inference: an error that names a
removed object is not enough by itself (a misreported failure can carry the same name), so it
counts only once the interface shows the network is no longer its current one, or the interface
object itself was replaced; and "nobody owns the name" counts only once the bus confirms it.
"""

from __future__ import annotations

import logging

from ..peers.supplicant import (
    INTERFACE_UNKNOWN,
    NOT_RUNNING,
    ObjectGone,
    SupplicantError,
    UncertainOutcome,
    WpaSupplicant,
)
from ..text import shown
from .suspension_table import Ev

log = logging.getLogger("scanguard")


def interface_of(network: str) -> str:
    """The interface object a wpa_supplicant network object lies under
    (/fi/w1/wpa_supplicant1/Interfaces/0/Networks/3 -> /fi/w1/wpa_supplicant1/Interfaces/0)."""
    return network.rsplit("/Networks/", 1)[0]


def is_uncertain(err: SupplicantError) -> bool:
    """True if `err` leaves open whether wpa_supplicant applied the call (timeout, no reply)."""
    return isinstance(err, UncertainOutcome)


def is_not_running(err: SupplicantError) -> bool:
    """True if `err` says no wpa_supplicant owns its bus name."""
    return err.bus_error in NOT_RUNNING


async def confirm_gone(sup: WpaSupplicant, net: str, err: ObjectGone, ifname: str) -> None:
    """An "unknown object/method" error is taken for a removed network only if the
    interface no longer has it as its current network, or the interface object itself is
    gone (wpa_supplicant names another object for `ifname`, or none); otherwise raise
    SupplicantError, so that the entry stays and the restore is tried again.  (The error
    names are all a removed object gets, but a misreported failure can carry them too,
    and forgetting a network that is still there would leave its bgscan off.)  A
    re-created network at the same path also counts as there: the retry then finds
    NetworkManager's value on it and leaves it."""
    try:
        current = await sup.current_network(interface_of(net))
    except SupplicantError as e:
        if isinstance(e, ObjectGone) and await interface_replaced(sup, net, ifname):
            return  # the interface and its networks went: nothing left to retry
        raise SupplicantError(f"wpa_supplicant answered {err.bus_error or err} for {net} and "
                              f"could not say whether the network still exists ({e}); "
                              "trying again later", e.bus_error) from None
    if current == net:
        raise SupplicantError(f"wpa_supplicant answered {err.bus_error or err} for {net}, "
                              "which is still the interface's current network; trying "
                              "again later", err.bus_error)


async def interface_replaced(sup: WpaSupplicant, net: str, ifname: str) -> bool:
    """True if wpa_supplicant's object for `ifname` is no longer the one `net` lies under
    (NetworkManager removed the interface and added it again), or it has none."""
    try:
        return await interface(sup, ifname) != interface_of(net)
    except SupplicantError:
        return False


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


async def supplicant_gone(sup: WpaSupplicant) -> SupplicantError | None:
    """None while wpa_supplicant owns its name or the bus will not say (no evidence);
    otherwise the reason to drop what its networks carried."""
    try:
        if await sup.running():
            return None
    except SupplicantError as e:
        log.warning("%s; keeping the crash journal's entries for a later try", e)
        return None
    return SupplicantError("the bus says nobody owns fi.w1.wpa_supplicant1")


async def not_running(sup: WpaSupplicant, err: SupplicantError) -> bool:
    """`err` said nobody owns wpa_supplicant's name, and the bus confirms it."""
    if not is_not_running(err):
        return False
    if await supplicant_gone(sup) is None:
        log.warning("wpa_supplicant's call answered %s, but the bus says it owns its name; "
                    "keeping the crash journal's entries for a later try", err.bus_error)
        return False
    return True


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
