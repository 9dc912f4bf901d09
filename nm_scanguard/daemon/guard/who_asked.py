"""Who asked for each scan, the daemon's side of it (attribution.py says how a scan is labelled):
the NetworkManager scan requests the polkit rule reports, kept (attribution.ScanRequests) and,
when refused, counted on the interfaces that defer; and the kernel's scan events (nl80211),
each handed to its interface's guard to be labelled.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Mapping

from ...attribution import GEOCLUE_NAME, Request, ScanRequests
from ...dbuslib import MessageBus
from ...peers.bus import owner_pid
from ...peers.nl80211 import Nl80211Error, ScanEvent, ScanEvents
from .guard import Guard, Spawn

log = logging.getLogger("scanguard")

LABEL_AFTER = 1.0  # seconds after a scan starts that it is labelled (see _label_scan)


class WhoAsked:
    def __init__(self, guards: Mapping[str, Guard], spawn: Spawn) -> None:
        self.requests = ScanRequests()
        self._guards = guards  # the daemon's, by interface name
        self._spawn = spawn
        self._bus: MessageBus | None = None
        self._scan_events: ScanEvents | None = None

    # ---- other programs' scan requests (the polkit rule) ----------------------------------

    def scan_request_seen(self, request: Request, refused: bool, who: str) -> int:
        """The polkit rule saw a NetworkManager scan request (refused or allowed): kept a while
        for `scanguardctl diagnose`; a refusal is also counted.  Returns how many interfaces
        counted it."""
        self.requests.add(request, refused)
        return self.scan_request_deferred(who) if refused else 0

    def scan_request_deferred(self, who: str) -> int:
        """The polkit rule refused a NetworkManager scan request (its helper told the bus API).
        polkit does not say for which device, so each deferring interface counts it.  Returns
        how many interfaces counted it (0: we no longer defer, e.g. it arrived late)."""
        deferring = [g for g in self._guards.values() if g.scans.deferring]
        for guard in deferring:
            guard.scans.count_deferred_request(who)
        return len(deferring)

    # ---- who asked for each scan (the kernel's scan events) --------------------------------

    async def follow_scans(self, bus: MessageBus) -> None:
        """Join nl80211's scan events, so that each scan is labelled by who asked.  Without
        them (no cfg80211, a sandbox without netlink) scans are still counted; that is said
        once, and nothing else depends on it."""
        self._bus = bus
        try:
            self._scan_events = await ScanEvents.open(self._scan_event)
        except Nl80211Error as e:
            log.warning("cannot follow the kernel's scan events (%s); scans are counted but "
                        "not labelled by who asked", e.strerror or e)

    def close(self) -> None:
        if self._scan_events is not None:
            self._scan_events.close()

    def _scan_event(self, event: ScanEvent, _monotonic: float, wall: float) -> None:
        if event.kind != "started" or event.ifindex is None:
            return
        for guard in self._guards.values():
            try:
                index = socket.if_nametoindex(guard.ifname)
            except OSError:
                continue
            if index == event.ifindex:
                self._spawn(self._label_scan(guard, event, wall), guard)
                return

    async def _label_scan(self, guard: Guard, event: ScanEvent, wall: float) -> None:
        # The polkit rule's report of an allowed request comes from a background busctl and
        # may arrive after the scan it asked for has started: label a moment later.
        await asyncio.sleep(LABEL_AFTER)
        # Devices, where the label is published, reads the same for every user: it says that a
        # program asked through NetworkManager, not whose (GetRecentScanRequests names a
        # caller's own).
        await guard.scans.scan_started(event.ssids, wall,
                                       [Request(at=r.at) for r, _ in self.requests.recent()],
                                       self._geoclue_pid)

    async def _geoclue_pid(self) -> int | None:
        assert self._bus is not None, "scan events come only after follow_scans()"
        return await owner_pid(self._bus, GEOCLUE_NAME)  # this sandbox cannot see /proc
