"""The radio of the model rung's wpa_supplicant (tests/model/peers.py): the access points in range
of each interface, and what wpa_supplicant 2.10 makes of them — its BSS objects, the checks of
`Scan`'s options, and its own rule for roaming within a network.

Where the real binary could be asked (driver "none"), these follow what it answered
(tests/contract/wpa_roaming_scenarios.py, which this model passes); what driver "none" cannot
show (a BSS object's contents, a Roam that succeeds, which APs a scan finds) follows
wpa_supplicant 2.10's sources and the D-Bus mock (tests/mocks/wpa_supplicant_bss.py):
- a BSS object is `<iface>/BSSs/N` (N counts up per interface), made when a scan first sees the
  AP; it goes once unseen for BSSExpireAge (180 s) or missed by BSSExpireCount (2) scans in a
  row that covered its channel, never while it is the current one (wpa_bss_flush_by_age,
  wpa_bss_update_end);
- a scan sees every AP on the channels it visits; a scan of a few channels takes that share of
  a full scan's time; an aborted scan has seen the channels it visited so far;
- after a scan with roaming allowed (AllowRoam, true by default), wpa_supplicant moves to an AP
  of the current network stronger by its margin (wpa_supplicant_need_to_roam_within_ess: 1 to
  5 dB, smaller the weaker the link), unless its throughput estimate keeps it (`Ap.chosen`).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from nm_scanguard.dbuslib import Variant

NETWORK_SSID = "Café ☕".encode()  # every network NetworkManager adds in the model
NETWORK_SECURITY = "wpa2-psk"
# 2.4 GHz channels 1-13 and thirteen 5 GHz ones: a full scan visits these 26 (as in the lab).
ALL_CHANNELS = (tuple(range(2412, 2473, 5))
                + (5180, 5200, 5220, 5240, 5260, 5280, 5300, 5320, 5500, 5520, 5540, 5560, 5580))
EXPIRE_AGE = 180.0  # BSSExpireAge (contract: no_bss_without_a_radio)
EXPIRE_COUNT = 2  # BSSExpireCount
ROAM_SECONDS = 0.3  # from the decision to move to the association with the new AP

_NONE = {"KeyMgmt": [], "Pairwise": [], "Group": ""}
# What the RSN and WPA elements hold, and Privacy, per kind of network (as the D-Bus mock).
SECURITY = {
    "open": ({**_NONE, "MgmtGroup": ""}, _NONE, False),
    "wpa2-psk": ({"KeyMgmt": ["wpa-psk"], "Pairwise": ["ccmp"], "Group": "ccmp",
                  "MgmtGroup": ""}, _NONE, True),
    "sae": ({"KeyMgmt": ["sae"], "Pairwise": ["ccmp"], "Group": "ccmp",
             "MgmtGroup": "aes128cmac"}, _NONE, True),
}
# hwaddr_aton(): six two-digit hex numbers joined by ":"; whatever follows is ignored.
HWADDR = re.compile(r"[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}")


@dataclass(eq=False)
class Ap:
    """An access point in range of an interface: the world's, not wpa_supplicant's list."""

    bssid: str  # lower case
    frequency: int  # MHz
    signal: int  # dBm, as the station hears it now
    ssid: bytes = NETWORK_SSID
    security: str = NETWORK_SECURITY
    # wpa_supplicant's own selection moves to it when it is stronger by its margin; False: its
    # throughput estimate keeps the station where it is (a narrower channel, say), and only a
    # Roam moves it.
    chosen: bool = True

    def network(self) -> tuple[bytes, str]:
        return self.ssid, self.security


@dataclass(eq=False)
class Bss:
    """A BSS object: an AP a scan saw, as that scan found it."""

    number: int
    path: str
    ap: Ap
    signal: int
    seen: float  # virtual time
    missed: int = 0  # scans in a row that covered its channel without seeing it


class BadArguments(Exception):
    """wpa_supplicant's InvalidArgs, whose second string names the fault (None: none)."""

    def __init__(self, detail: str | None) -> None:
        super().__init__(detail)
        self.detail = detail


class ScanRequest(NamedTuple):
    kind: str  # active, passive
    channels: tuple[int, ...]  # MHz; () every channel
    allow_roam: bool


def _signature(value: object) -> str:
    return value.signature if isinstance(value, Variant) else ""


def _value(value: object) -> object:
    return value.value if isinstance(value, Variant) else value


def scan_request(args: object) -> ScanRequest:
    """Scan's options, checked in the order given as wpas_dbus_handler_scan does."""
    if not isinstance(args, dict):
        raise BadArguments(None)
    kind, key, ssids, channels, allow_roam = None, None, [], (), True
    for key, value in args.items():
        signature, plain = _signature(value), _value(value)
        if key == "Type":
            if signature != "s":
                raise BadArguments("Wrong Type value type. String required")
            kind = plain
        elif key in ("SSIDs", "IEs"):
            if signature != "aay":
                raise BadArguments(f"Wrong {key} value type. Array of arrays of bytes required")
            if key == "SSIDs" and any(len(s) > 32 for s in plain):
                raise BadArguments("Invalid SSID: too long")
            ssids.extend(plain)
        elif key == "Channels":
            if not signature.startswith("a(") or not plain:
                raise BadArguments("Wrong Channels value type. Array of structs required")
            if not signature.startswith("a(uu"):
                raise BadArguments("Wrong Channel struct. Two UINT32s required")
            # Channel 0 is accepted and means no channel: a scan of every one.
            channels = tuple(int(c[0]) for c in plain if int(c[0]))
        elif key == "AllowRoam":
            if signature != "b":
                raise BadArguments("Wrong Type value type. Boolean required")  # sic, 2.10
            allow_roam = bool(plain)
        else:
            raise BadArguments(str(key))
    if kind is None:
        raise BadArguments(None if key is None else str(key))
    if kind == "passive" and ssids:
        raise BadArguments("You can specify only Channels in passive scan")
    if kind not in ("active", "passive"):
        raise BadArguments("Wrong scan type")
    return ScanRequest(str(kind), channels, allow_roam)


def roam_margin(level: int) -> int:
    """How much stronger an AP of the network must be for wpa_supplicant to move to it by
    itself, by the current AP's level (wpa_supplicant_need_to_roam_within_ess, its level part)."""
    for below, margin in ((-85, 1), (-80, 2), (-75, 3), (-70, 4)):
        if level < below:
            return margin
    return 5


def bss_properties(bss: Bss, now: float) -> dict[str, Variant]:
    """GetAll on a BSS object (fi.w1.wpa_supplicant1.BSS)."""
    ap = bss.ap
    rsn, wpa, privacy = SECURITY[ap.security]

    def element(values: dict[str, object]) -> Variant:
        return Variant("a{sv}", {k: Variant("as" if isinstance(v, list) else "s", v)
                                 for k, v in values.items()})
    return {
        "BSSID": Variant("ay", bytes(int(p, 16) for p in ap.bssid.split(":"))),
        "SSID": Variant("ay", ap.ssid), "WPA": element(wpa), "RSN": element(rsn),
        "WPS": Variant("a{sv}", {}), "IEs": Variant("ay", b""),
        "Privacy": Variant("b", privacy), "Mode": Variant("s", "infrastructure"),
        "Frequency": Variant("q", ap.frequency), "Rates": Variant("au", []),
        "Signal": Variant("n", bss.signal), "Age": Variant("u", int(now - bss.seen)),
    }


@dataclass(eq=False)
class BssList:
    """The BSS objects of one interface, as wpa_supplicant keeps them (its wpa_bss_* rules)."""

    iface_path: str
    by_bssid: dict[str, Bss] = field(default_factory=dict)
    expire_age: float = EXPIRE_AGE
    expire_count: int = EXPIRE_COUNT
    _numbers: itertools.count = field(default_factory=itertools.count)

    def paths(self) -> list[str]:
        return [b.path for b in sorted(self.by_bssid.values(), key=lambda b: b.number)]

    def at(self, path: str) -> Bss | None:
        return next((b for b in self.by_bssid.values() if b.path == path), None)

    def find(self, bssid: str, ssid: bytes) -> Bss | None:
        """wpa_bss_get(): the BSS of this address (any case) with this SSID."""
        bss = self.by_bssid.get(bssid.lower())
        return bss if bss is not None and bss.ap.ssid == ssid else None

    def results(self, aps: Iterable[Ap], visited: Iterable[int], current: Ap | None,
                now: float) -> tuple[list[Bss], list[Bss]]:
        """A scan that visited `visited` (MHz) ended: what it saw is (re)recorded; what it
        missed counts a miss; the expired go.  Returns (added, removed)."""
        channels = set(visited)
        added: list[Bss] = []
        seen = set()
        for ap in aps:
            if ap.frequency not in channels:
                continue
            seen.add(ap.bssid)
            bss = self.by_bssid.get(ap.bssid)
            if bss is None or bss.ap is not ap:
                number = next(self._numbers)
                bss = Bss(number, f"{self.iface_path}/BSSs/{number}", ap, ap.signal, now)
                self.by_bssid[ap.bssid] = bss
                added.append(bss)
            bss.signal, bss.seen, bss.missed = ap.signal, now, 0
        for bss in self.by_bssid.values():
            if bss.ap.bssid not in seen and bss.ap.frequency in channels:
                bss.missed += 1
        return added, self.expire(now, current, by_count=True)

    def expire(self, now: float, current: Ap | None, by_count: bool = False) -> list[Bss]:
        """The BSSes unseen for expire_age (or missed by expire_count scans) go, but never
        the current one."""
        gone = [b for b in self.by_bssid.values() if b.ap is not current and (
            now - b.seen > self.expire_age or (by_count and b.missed >= self.expire_count))]
        for bss in gone:
            del self.by_bssid[bss.ap.bssid]
        return gone
