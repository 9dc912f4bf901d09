"""The access points a guarded network is known to have, kept after wpa_supplicant forgets them.

While the guard keeps bgscan "" nothing scans, and wpa_supplicant drops a BSS it has not seen
for 180 s (BSSExpireAge; contract test): after a long guard its list holds only the AP the
station is with.  What a targeted roaming scan needs is where the network's other APs were:
their channels.  So every BSS list the daemon reads (after any scan, whoever asked for it) is
remembered here, per NetworkManager profile, for the APs of the profile's network: the same
SSID and the same security (Bss.security) as the AP the station is with.

Pure and bounded: at most PER_PROFILE APs per profile (the least recently seen go first) and
PROFILES profiles (the least recently used go first), in memory only.  Not persisted across
restarts: a restart is rare, the first scan after it (any program's) teaches them again, and
until then the guard falls back to a scan of every channel, as with none known.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import NamedTuple

from ...peers.supplicant import Bss

PER_PROFILE = 16
PROFILES = 32
# A channel scan of more channels than this leaves the AP for longer than the 0.3 s
# budget (≈ 30–50 ms a channel on an active scan); Android's partial scans stop at 6 too.
MAX_CHANNELS = 6


class Candidate(NamedTuple):
    bssid: str
    frequency: int  # MHz
    signal: int  # dBm, when last seen
    seen: float  # monotonic seconds, when last seen


class Network(NamedTuple):
    """What makes a BSS one of the network's: its SSID and its security."""

    ssid: bytes
    security: str


class Candidates:
    def __init__(self) -> None:
        self._known: OrderedDict[str, tuple[Network, dict[str, Candidate]]] = OrderedDict()

    def learn(self, profile: str, current: Bss, seen: Iterable[Bss], now: float) -> int:
        """Remember the APs among `seen` that belong to the network of `current` (the AP the
        station is with, which is one of them).  Returns how many the profile has now."""
        network = Network(current.ssid, current.security)
        entry = self._known.get(profile)
        if entry is None or entry[0] != network:
            entry = (network, {})  # the profile now means another network: start afresh
        aps = entry[1]
        for bss in [current, *seen]:
            if Network(bss.ssid, bss.security) == network:
                aps[bss.bssid] = Candidate(bss.bssid, bss.frequency, bss.signal, now)
        for bssid in sorted(aps, key=lambda b: aps[b].seen)[:max(0, len(aps) - PER_PROFILE)]:
            del aps[bssid]
        self._known[profile] = entry
        self._known.move_to_end(profile)
        while len(self._known) > PROFILES:
            self._known.popitem(last=False)
        return len(aps)

    def others(self, profile: str, current_bssid: str | None) -> list[Candidate]:
        """The network's APs other than the one the station is with, strongest first."""
        entry = self._known.get(profile)
        if entry is None:
            return []
        return sorted((c for c in entry[1].values() if c.bssid != current_bssid),
                      key=lambda c: (-c.signal, c.bssid))

    def channels(self, profile: str, current_bssid: str | None,
                 current_frequency: int | None) -> list[int]:
        """The channels a roaming scan visits: the other APs' (strongest first, at most
        MAX_CHANNELS in all), and the current one's, where wpa_supplicant compares them."""
        out: list[int] = [current_frequency] if current_frequency else []
        for c in self.others(profile, current_bssid):
            if len(out) >= MAX_CHANNELS:
                break
            if c.frequency not in out:
                out.append(c.frequency)
        return out

    def known(self, profile: str) -> list[Candidate]:
        """Every AP of the profile's network known, for the status."""
        entry = self._known.get(profile)
        return [] if entry is None else sorted(entry[1].values(), key=lambda c: c.bssid)
