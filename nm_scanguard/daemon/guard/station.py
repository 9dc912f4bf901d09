"""Where the station is, for targeted roaming (targeted.py): the access point it is with, the
network's other access points the guard knows (candidates.py), its moves between them and why,
and the Roams the guard asks for.

- What every scan found, whoever asked, is learned (`learn`, after each scan's end and when the
  guard starts) while roam_scans is `targeted`; with `full` nothing reads the candidates.
- A move is a change of the AP the station is with, whoever made it: wpa_supplicant's own
  choice on a scan's results, or the guard's Roam.  Each is logged once with the scan it
  followed, and the last one is in the status (`last_move`).
- A read of the APs that failed (the BSS list, or the one the station is with: problem
  CANDIDATES) is shown until the next read succeeds or wpa_supplicant restarts.  A Roam
  wpa_supplicant refused is problem ROAM; the targeted path says how long it stands.

A Station belongs to one Guard, which keeps its `connection` and `settings` current; it touches
neither bgscan nor the journal.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ...config import Settings
from ...peers.supplicant import Bss, SupplicantError, WpaSupplicant
from .candidates import Candidate, Candidates
from .problems import CANDIDATES, ROAM, ProblemSink
from .roaming import TARGETED, Interface

log = logging.getLogger("scanguard")


class Station:
    def __init__(self, interface: Interface, supplicant: WpaSupplicant, problems: ProblemSink,
                 changed: Callable[[], None], settings: Settings, connection: str,
                 candidates: Candidates | None = None) -> None:
        self._interface = interface
        self._supplicant = supplicant
        self._problems = problems
        self._changed = changed  # a figure of the status changed
        self.settings = settings  # the guard's, kept current by it
        self.connection = connection  # the UUID of the guarded profile, kept current by the guard
        self.candidates = candidates if candidates is not None else Candidates()
        self.ifname = interface.ifname
        self.current: Bss | None = None  # the AP the station is with, as last read
        self.roams = 0  # Roams asked for, for the status
        self.moves = 0  # changes of the current AP seen
        self.moved_at: float | None = None  # monotonic, the last move or Roam asked for
        self.last_move = ""  # the last move and why, for the status
        # Why the guard last looked (the scan a move would follow) and the AP it last asked
        # wpa_supplicant to move to.
        self.why_looked = ""
        self._roam_to = ""

    def ssid(self) -> bytes | None:
        return self.current.ssid if self.current is not None else None

    def where(self) -> str:
        return self.current.bssid if self.current is not None else "the current access point"

    def others(self) -> list[Candidate]:
        """The network's other known APs, strongest first."""
        current = self.current.bssid if self.current is not None else None
        return self.candidates.others(self.connection, current)

    async def channels(self) -> list[int]:
        """A targeted or walk scan's channels: the current AP's and the other candidates'."""
        await self.read_current()
        current = self.current
        return self.candidates.channels(self.connection,
                                        current.bssid if current else None,
                                        current.frequency if current else None)

    def moved_since(self, before: Bss | None) -> bool:
        """Whether the station is no longer with `before` (it moved, or is moving)."""
        return self.current is None or before is None or self.current.bssid != before.bssid

    async def ask_roam(self, before: Bss, signal: float, best: Candidate, when: str) -> None:
        """Ask wpa_supplicant to move from `before` to `best`; a refusal is problem ROAM."""
        try:
            await self._supplicant.roam(await self._interface(), best.bssid)
        except SupplicantError as e:
            self._interface.look_up_again_if_gone(e)
            self._problems.fail(f"{self.ifname}: cannot move to the stronger access point "
                                f"{best.bssid} ({best.signal} dBm): {e}", ROAM)
            return
        self.roams += 1
        self.moved_at = time.monotonic()
        self._roam_to = best.bssid
        self._problems.clear(ROAM)
        log.info("%s: asked wpa_supplicant to roam from %s (%s dBm) to %s (%d dBm, %d MHz) "
                 "%s", self.ifname, before.bssid, dbm(signal), best.bssid, best.signal,
                 best.frequency, when)

    # ---- what the scans found -------------------------------------------------------------

    async def read_current(self) -> None:
        """The AP the station is with now (CurrentBSS), into `current`."""
        try:
            iface = await self._interface()
            path = await self._supplicant.current_bss(iface)
            if path is None:
                self.current = None
            elif self.current is None or self.current.path != path:
                bss = await self._supplicant.bss(path)
                if bss is None:
                    self.current = None
                else:
                    self._now_with(bss)
        except SupplicantError as e:
            self._interface.look_up_again_if_gone(e)
            self._problems.fail(f"{self.ifname}: cannot read which access point the "
                                f"station is with: {e}", CANDIDATES)
            return
        self._problems.clear(CANDIDATES)

    async def learn(self) -> None:
        """Read wpa_supplicant's BSS list and remember the network's access points (run
        beside the sampling after every scan, and when the guard starts)."""
        if self.settings.roam_scans != TARGETED:
            return
        try:
            iface = await self._interface()
            path = await self._supplicant.current_bss(iface)
            seen = await self._supplicant.bsses(iface)
        except SupplicantError as e:
            self._interface.look_up_again_if_gone(e)
            self._problems.fail(f"{self.ifname}: cannot read the access points wpa_supplicant "
                                f"found: {e}; the known ones are kept", CANDIDATES)
            return
        self._problems.clear(CANDIDATES)
        current = next((b for b in seen if b.path == path), None)
        if current is None or not self.connection:
            return
        self._now_with(current)
        known = len(self.others())
        now_known = self.candidates.learn(self.connection, current, seen,
                                          time.monotonic())
        if now_known - 1 != known:
            log.info("%s: %d other access point(s) of this network known: %s", self.ifname,
                     now_known - 1, ", ".join(f"{c.bssid} ({c.frequency} MHz, {c.signal} dBm)"
                                              for c in self.others()) or "none")
        self._changed()

    def _now_with(self, bss: Bss) -> None:
        """The station is with `bss`: a different AP than before is a move."""
        if self.current is not None and self.current.bssid != bss.bssid:
            self.moves += 1
            self.moved_at = time.monotonic()
            by = ("on the guard's Roam" if bss.bssid == self._roam_to
                  else "by wpa_supplicant's own choice")
            why = f", after {self.why_looked}" if self.why_looked else ""
            self.last_move = (f"{time.strftime('%H:%M:%S')} from {self.current.bssid} to "
                              f"{bss.bssid} ({bss.frequency} MHz) {by}{why}")
            self.why_looked = self._roam_to = ""
            log.info("%s: the station moved from %s to %s (%d MHz) %s%s", self.ifname,
                     self.current.bssid, bss.bssid, bss.frequency, by, why)
        self.current = bss

    def candidates_status(self) -> list[dict[str, Any]]:
        """The network's known access points, for the status."""
        return [{"bssid": c.bssid, "frequency": c.frequency, "signal": c.signal,
                 "current": self.current is not None and c.bssid == self.current.bssid}
                for c in self.candidates.known(self.connection)]

    def supplicant_restarted(self) -> None:
        self.current = None
        self._problems.clear(CANDIDATES)  # said of the old process's list


def dbm(value: float | None) -> str:
    return "?" if value is None else f"{value:.0f}"
