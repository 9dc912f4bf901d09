"""The radio of the model rung's wpa_supplicant (tests/model/peers.py): the access points in range
of each interface, and what wpa_supplicant 2.10 makes of them — its BSS objects, the checks of
`Scan`'s options, and its own rule for roaming within a network.  What a BSS object holds and
the checks of `Scan`'s options are the D-Bus mock's too: tests/wpa_supplicant_rules.py.

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
from collections.abc import Iterable
from dataclasses import dataclass, field

from nm_scanguard.dbuslib import Variant
from tests import wpa_supplicant_rules as rules

NETWORK_SSID = "Café ☕".encode()  # every network NetworkManager adds in the model
NETWORK_SECURITY = "wpa2-psk"
# 2.4 GHz channels 1-13 and thirteen 5 GHz ones: a full scan visits these 26 (as in the lab).
ALL_CHANNELS = (tuple(range(2412, 2473, 5))
                + (5180, 5200, 5220, 5240, 5260, 5280, 5300, 5320, 5500, 5520, 5540, 5560, 5580))
EXPIRE_AGE = float(rules.EXPIRE_AGE)  # BSSExpireAge (contract: no_bss_without_a_radio)
EXPIRE_COUNT = rules.EXPIRE_COUNT
ROAM_SECONDS = 0.3  # from the decision to move to the association with the new AP


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


def roam_margin(level: int) -> int:
    """How much stronger an AP of the network must be for wpa_supplicant to move to it by
    itself, by the current AP's level (wpa_supplicant_need_to_roam_within_ess, its level part)."""
    for below, margin in ((-85, 1), (-80, 2), (-75, 3), (-70, 4)):
        if level < below:
            return margin
    return 5


def variant(signature: str, value: object) -> Variant:
    """A value the rules give as (signature, plain value), as a Variant."""
    if signature == "a{sv}":
        assert isinstance(value, dict)
        return Variant(signature, {k: variant(*v) for k, v in value.items()})
    return Variant(signature, value)


def bss_properties(bss: Bss, now: float) -> dict[str, Variant]:
    """GetAll on a BSS object (fi.w1.wpa_supplicant1.BSS)."""
    ap = bss.ap
    return {name: variant(*value) for name, value in rules.bss_properties(
        ap.ssid, ap.bssid, ap.frequency, bss.signal, ap.security, int(now - bss.seen)).items()}


def scan_request(args: object) -> rules.ScanRequest:
    """Scan's options (rules.scan_request), from the a{sv} a client sent."""
    if not isinstance(args, dict):
        return rules.scan_request(None)
    return rules.scan_request({key: (value.signature, value.value) if isinstance(value, Variant)
                               else ("", value) for key, value in args.items()})


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
