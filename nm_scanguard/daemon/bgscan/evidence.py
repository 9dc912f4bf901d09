"""What counts as evidence that something of wpa_supplicant's is gone, or that a Set landed.
An error naming a removed object is none by itself (a misreported failure can carry the same
name): it counts once the interface no longer has the network as its current one, or the
interface object was replaced; "nobody owns the name" counts once the bus confirms it.
"""

from __future__ import annotations

import logging

from ...peers.supplicant import (
    INTERFACE_UNKNOWN,
    ObjectGone,
    SupplicantError,
    WpaSupplicant,
    is_not_running,
)
from ...peers.values import interface_of

log = logging.getLogger("scanguard")


async def unless_gone(sup: WpaSupplicant, net: str, err: SupplicantError,
                      ifname: str) -> SupplicantError | None:
    """None if `err` came from `net` now confirmed gone; else what to raise so that the entry
    stays for a retry.  A network re-created at the same path counts as there: the retry finds
    NetworkManager's value on it and leaves it."""
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
    """wpa_supplicant's object for `ifname`; None only on InterfaceUnknown."""
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


async def read_back(sup: WpaSupplicant, net: str) -> str | None | SupplicantError:
    """bgscan read again after a Set with no answer, or the read's error: wpa_supplicant handles
    one client's calls in order, so this read shows what the Set left."""
    try:
        return await sup.get_bgscan(net)
    except SupplicantError as e:
        return e
