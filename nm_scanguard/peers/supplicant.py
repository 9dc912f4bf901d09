"""wpa_supplicant's D-Bus API: find the current network, read and set its bgscan, poll the signal.

Facts this module relies on (checked by tests/contract against the real binary):
- Network `Properties` Set merges only the keys given.  A dict holding only `bgscan` restarts
  bgscan live; any other key in the same dict would flush the PMKSA cache, so we never send one.
- `bgscan` is quoted by wpa_supplicant on write and read back quoted; we strip the quotes so
  that writing back what we read restores exactly the same setting.
- `bgscan=""` stops bgscan (and its signal monitor); `"none"` is not a module.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from ..dbuslib import Message, MessageBus, Variant
from ..names import WPAS
from .bus import DISCONNECTED, BusError, call, get_all, get_property, name_has_owner, set_property, unwrap

NAME, PATH = WPAS[:2]
IFACE = NAME + ".Interface"
NETWORK = NAME + ".Network"
BSS = NAME + ".BSS"
# At most this many BSS objects are read per look (a dense block of flats can show more).
MAX_BSSES = 64
# What wpa_supplicant answers for an interface it does not manage (GetInterface, RemoveInterface).
INTERFACE_UNKNOWN = NAME + ".InterfaceUnknown"

# The signals the daemon follows (it checks their sender: bus.NameOwners).
SIGNAL_RULES = (
    f"type='signal',sender='{NAME}',interface='{IFACE}',member='ScanDone'",
    f"type='signal',sender='{NAME}',interface='{IFACE}',member='NetworkRemoved'",
    f"type='signal',sender='{NAME}',interface='org.freedesktop.DBus.Properties',"
    f"member='PropertiesChanged',arg0='{IFACE}'",
)


class Bss(NamedTuple):
    """One access point an interface of wpa_supplicant knows (a BSS object), as the last scan
    that saw it found it.  Two BSSes belong to the same network when both their SSID and their
    security (`security`: the key managements they offer, or "open"/"wep") are equal."""

    path: str
    bssid: str  # "02:00:00:00:01:00", lower case
    ssid: bytes
    frequency: int  # MHz
    signal: int  # dBm
    security: str


def security_of(props: Mapping[str, Any]) -> str:
    """The key managements a BSS offers (RSN and WPA), sorted and joined; "open" or "wep"
    when it offers none."""
    kinds: set[str] = set()
    for element in ("RSN", "WPA"):
        value = props.get(element)
        if isinstance(value, dict):
            kinds.update(str(k) for k in value.get("KeyMgmt", ()) or ())
    if kinds:
        return "+".join(sorted(kinds))
    return "wep" if props.get("Privacy") else "open"


def bss_of(path: str, props: Mapping[str, Any]) -> Bss | None:
    """A Bss from a BSS object's properties (GetAll); None when one it needs is missing."""
    try:
        bssid = ":".join(f"{b:02x}" for b in bytes(props["BSSID"]))
        return Bss(path, bssid, bytes(props["SSID"]), int(props["Frequency"]),
                   int(props["Signal"]), security_of(props))
    except (KeyError, TypeError, ValueError):
        return None


class ScanDone(NamedTuple):
    """A scan on the interface object `iface` ended."""

    iface: str


class NetworkRemoved(NamedTuple):
    """The network object `network` of the interface object `iface` is gone."""

    iface: str
    network: str


class Scanning(NamedTuple):
    """The interface object `iface` started (True) or ended (False) a scan."""

    iface: str
    scanning: bool


class CurrentNetwork(NamedTuple):
    """The interface object `iface` now uses the network object `network` (None: none)."""

    iface: str
    network: str | None


Event = ScanDone | NetworkRemoved | Scanning | CurrentNetwork


def events_of(msg: Message) -> list[Event]:
    """What one of wpa_supplicant's signals (from wpa_supplicant: the caller checked the sender)
    says, in the order it says it; [] for one we do not follow."""
    if msg.interface == IFACE and msg.member == "ScanDone":
        return [ScanDone(msg.path)]
    if msg.interface == IFACE and msg.member == "NetworkRemoved":
        return [NetworkRemoved(msg.path, msg.body[0])]
    if msg.member != "PropertiesChanged" or not msg.path.startswith(PATH + "/") \
            or not msg.body or msg.body[0] != IFACE:
        return []
    changed = msg.body[1]
    out: list[Event] = []
    if "Scanning" in changed:
        out.append(Scanning(msg.path, bool(changed["Scanning"].value)))
    if "CurrentNetwork" in changed:
        net = changed["CurrentNetwork"].value
        out.append(CurrentNetwork(msg.path, None if net in ("", "/") else net))
    return out


# No wpa_supplicant owns the name: the call never reached one, so its networks are gone.
NOT_RUNNING = (
    "org.freedesktop.DBus.Error.ServiceUnknown",
    "org.freedesktop.DBus.Error.NameHasNoOwner",
)
# SignalPoll's answer when the driver cannot read the signal, e.g. not associated
# (dbus_new_handlers.c wpas_dbus_handler_signal_poll: "Failed to read signal"; contract test).
SIGNAL_UNKNOWN = "org.freedesktop.DBus.Error.Failed"
# No answer in time: it may or may not have carried the call out.
_UNCERTAIN = (
    "org.freedesktop.DBus.Error.NoReply",
    "org.freedesktop.DBus.Error.Timeout",
)


class SupplicantError(Exception):
    """Something went wrong talking to wpa_supplicant, worded with what to do about it.
    `bus_error` is the D-Bus error name behind it, if any."""

    def __init__(self, text: str, bus_error: str | None = None) -> None:
        super().__init__(text)
        self.bus_error = bus_error


class UncertainOutcome(SupplicantError):
    """The call timed out or got no reply: wpa_supplicant may or may not have carried it out."""


def is_uncertain(err: SupplicantError) -> bool:
    """True if `err` leaves open whether wpa_supplicant applied the call (timeout, no reply)."""
    return isinstance(err, UncertainOutcome)


def is_not_running(err: SupplicantError) -> bool:
    """True if `err` says no wpa_supplicant owns its bus name."""
    return err.bus_error in NOT_RUNNING


class ObjectGone(SupplicantError):
    """The interface or network object no longer exists (NM removed it, or a restart)."""


class NoScanRunning(SupplicantError):
    """AbortScan found no scan to abort: it had ended (or not started) by the time the call
    arrived.  A race with the scan's end, not a failure."""


# AbortScan's answer when no scan of the interface is running (dbus_new_handlers.c
# wpas_dbus_handler_abort_scan; contract test).
SCAN_ERROR = IFACE + ".ScanError"

_GONE = ("UnknownObject", "UnknownMethod", "UnknownInterface")


def explain(err: BusError, what: str) -> SupplicantError:
    name = err.name
    if name == "org.freedesktop.DBus.Error.AccessDenied":
        # The fix first: the bus's own text is long (the whole rule), and a status cuts it.
        return SupplicantError(
            f"wpa_supplicant refused {what}: the service user must be root or in group 'netdev' "
            "(Debian's D-Bus policy for fi.w1.wpa_supplicant1 allows it); it said: "
            f"{err.text or name}", name)
    if name == DISCONNECTED:  # the call may have reached wpa_supplicant before the bus went
        return UncertainOutcome(f"the system bus connection closed during {what}, which "
                                "wpa_supplicant may or may not have carried out", name)
    if name in _UNCERTAIN:
        return UncertainOutcome(f"wpa_supplicant did not answer {what} in time ({name}); "
                                "is wpa_supplicant.service running?", name)
    if name in NOT_RUNNING:
        return SupplicantError(f"wpa_supplicant is not reachable for {what} ({name}); "
                               "is wpa_supplicant.service running?", name)
    if name == INTERFACE_UNKNOWN:
        return ObjectGone(f"wpa_supplicant does not manage this interface ({what})", name)
    if name.endswith(_GONE):
        return ObjectGone(f"{what}: the object is gone ({name})", name)
    return SupplicantError(f"wpa_supplicant failed {what}: {err}", name)


def unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


class WpaSupplicant(Protocol):
    """What the daemon asks of wpa_supplicant: Supplicant below over the bus, or a stand-in in
    the tests.  Errors are SupplicantError, ObjectGone, UncertainOutcome and NoScanRunning, as
    Supplicant raises them."""

    async def running(self) -> bool: ...

    async def interface(self, ifname: str, /) -> str: ...

    async def current_network(self, iface_path: str, /) -> str | None: ...

    async def get_bgscan(self, net_path: str, /) -> str | None: ...

    async def set_bgscan(self, net_path: str, value: str, /) -> None: ...

    async def signal(self, iface_path: str, /) -> int | None: ...

    async def scan(self, iface_path: str, /, channels: Sequence[int] = (),
                   ssid: bytes | None = None) -> None: ...

    async def roam(self, iface_path: str, bssid: str, /) -> None: ...

    async def bsses(self, iface_path: str, /) -> list[Bss]: ...

    async def current_bss(self, iface_path: str, /) -> str | None: ...

    async def bss(self, path: str, /) -> Bss | None: ...

    async def scanning(self, iface_path: str, /) -> bool: ...

    async def abort_scan(self, iface_path: str, /) -> None: ...

    async def current_ssid(self, iface_path: str, /) -> bytes | None: ...


class Supplicant:
    """wpa_supplicant over the system bus (fi.w1.wpa_supplicant1)."""

    def __init__(self, bus: MessageBus) -> None:
        self.bus = bus

    async def interface(self, ifname: str) -> str:
        try:
            (path,) = await call(self.bus, *WPAS, "GetInterface", "s", [ifname])
        except BusError as e:
            raise explain(e, f"GetInterface({ifname})") from None
        return str(path)

    async def running(self) -> bool:
        """Whether a wpa_supplicant owns its name now, as the bus itself says (NameHasOwner):
        the evidence that its networks are gone, which a call's ServiceUnknown only suggests."""
        try:
            return await name_has_owner(self.bus, NAME)
        except BusError as e:
            raise SupplicantError(f"the bus did not say whether wpa_supplicant is running ({e})",
                                  e.name) from None

    async def current_network(self, iface_path: str) -> str | None:
        try:
            path = await get_property(self.bus, NAME, iface_path, IFACE, "CurrentNetwork")
        except BusError as e:
            raise explain(e, f"reading CurrentNetwork of {iface_path}") from None
        return None if path in ("", "/") else path

    async def get_bgscan(self, net_path: str) -> str | None:
        """The network's bgscan without quotes; None when the network has no bgscan at all."""
        try:
            props = await get_property(self.bus, NAME, net_path, NETWORK, "Properties")
        except BusError as e:
            raise explain(e, f"reading the properties of {net_path}") from None
        value = props.get("bgscan")
        return None if value is None else unquote(value)

    async def set_bgscan(self, net_path: str, value: str) -> None:
        # Only this one key, ever: see the module docstring.
        props = Variant("a{sv}", {"bgscan": Variant("s", value)})
        try:
            await set_property(self.bus, NAME, net_path, NETWORK, "Properties", props)
        except BusError as e:
            raise explain(e, f"setting bgscan on {net_path}") from None

    async def scan(self, iface_path: str, channels: Sequence[int] = (),
                   ssid: bytes | None = None) -> None:
        """Ask for one active scan: of every channel, or only of `channels` (MHz), probing
        for `ssid` if given.  Its results go through wpa_supplicant's own network selection,
        as a bgscan scan's do (AllowRoam, its default): a better AP of the network is roamed
        to.  An empty Channels list is refused by 2.10 (contract test): none is sent."""
        args: dict[str, Variant] = {"Type": Variant("s", "active")}
        if channels:
            args["Channels"] = Variant("a(uu)", [[int(f), 20] for f in channels])
        if ssid is not None:
            args["SSIDs"] = Variant("aay", [bytes(ssid)])
        where = f"of {len(channels)} channel(s) " if channels else ""
        try:
            await call(self.bus, NAME, iface_path, IFACE, "Scan", "a{sv}", [args])
        except BusError as e:
            raise explain(e, f"asking {iface_path} for a scan {where}".rstrip()) from None

    async def roam(self, iface_path: str, bssid: str) -> None:
        """Ask wpa_supplicant to move to the access point `bssid` of the current network
        (Roam).  It answers at once and moves afterwards: CurrentBSS tells when it has.  It
        refuses a BSS it does not know now ("Target BSS not found"; contract test)."""
        try:
            await call(self.bus, NAME, iface_path, IFACE, "Roam", "s", [bssid])
        except BusError as e:
            raise explain(e, f"Roam to {bssid}") from None  # the guard names the interface

    async def current_bss(self, iface_path: str) -> str | None:
        """The path of the BSS the interface is with, or None."""
        try:
            path = await get_property(self.bus, NAME, iface_path, IFACE, "CurrentBSS")
        except BusError as e:
            raise explain(e, f"reading CurrentBSS of {iface_path}") from None
        return None if path in ("", "/") else str(path)

    async def bsses(self, iface_path: str) -> list[Bss]:
        """The access points the interface knows now (its BSSs, each read with GetAll, at most
        MAX_BSSES).  One gone between the list and its read (expired) is left out."""
        try:
            paths = await get_property(self.bus, NAME, iface_path, IFACE, "BSSs")
        except BusError as e:
            raise explain(e, f"reading the BSS list of {iface_path}") from None
        read = await asyncio.gather(*(self.bss(str(p)) for p in list(paths)[:MAX_BSSES]))
        return [b for b in read if b is not None]

    async def bss(self, path: str) -> Bss | None:
        """The BSS at `path` (GetAll), or None if it is gone (expired)."""
        try:
            props = await get_all(self.bus, NAME, path, BSS)
        except BusError as e:
            if e.name.endswith(_GONE):
                return None
            raise explain(e, f"reading the BSS {path}") from None
        return bss_of(path, props)

    async def scanning(self, iface_path: str) -> bool:
        """Whether the interface is scanning now (its `Scanning` property)."""
        try:
            value = await get_property(self.bus, NAME, iface_path, IFACE, "Scanning")
        except BusError as e:
            raise explain(e, f"reading Scanning of {iface_path}") from None
        return bool(value)

    async def abort_scan(self, iface_path: str) -> None:
        """Cancel the scan running on the interface, whoever asked for it (AbortScan: the
        driver's abort, which takes the radio back to the operating channel).  Raises
        NoScanRunning when there was none (it ended just before), SupplicantError otherwise."""
        try:
            await call(self.bus, NAME, iface_path, IFACE, "AbortScan")
        except BusError as e:
            if e.name == SCAN_ERROR:
                raise NoScanRunning(f"no scan to abort on {iface_path}: {e.text}", e.name) from None
            raise explain(e, f"aborting the scan on {iface_path}") from None

    async def current_ssid(self, iface_path: str) -> bytes | None:
        """The SSID of the access point the interface is with (its CurrentBSS), as the bytes
        the air carries; None when it is with none."""
        try:
            bss = await get_property(self.bus, NAME, iface_path, IFACE, "CurrentBSS")
            if bss in ("", "/"):
                return None
            return bytes(await get_property(self.bus, NAME, bss, BSS, "SSID"))
        except BusError as e:
            raise explain(e, f"reading the SSID of {iface_path}'s access point") from None

    async def signal(self, iface_path: str) -> int | None:
        """RSSI in dBm, or None when wpa_supplicant cannot tell: not associated, or the driver
        cannot read it (it answers SIGNAL_UNKNOWN).  Any other error, a refusal included,
        raises SupplicantError: the caller must show it, not take it for "no signal"."""
        try:
            (info,) = await call(self.bus, NAME, iface_path, IFACE, "SignalPoll")
        except BusError as e:
            if e.name == SIGNAL_UNKNOWN:
                return None
            raise explain(e, "SignalPoll") from None  # the guard names the interface
        # Declared a{sv}, but 2.10 sends a variant holding the a{sv}: unwrap both ways.
        info = unwrap(info)
        rssi = info.get("rssi") if isinstance(info, dict) else None
        return None if rssi is None else int(rssi)
