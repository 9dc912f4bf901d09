"""The model rung's checks of roaming by targeted scans (nm_scanguard/daemon/guard/targeted.py), part of
World.violations() (tests/model/world.py) and so checked after every step:

- **No scan of every channel that the targeted path did not give up to.**  With `roam_scans =
  targeted`, while the link is busy (or held) and another access point of the network is
  known (to the daemon: its candidates, other than the one the station is with), the daemon
  asks for a scan of every channel (roaming.py's ask_for_scan, after a release for a weak
  signal) only once the targeted path has fallen back: it logged that it gave up ("targeted
  roaming gave up": the scan refused, the station not moved in time), or that no other access
  point was known when the fade began.  Each such fallback of one process on one interface
  allows one such scan.  (A scan with `Channels` is the targeted path's own, or a refresh.)
- **A state never claims what the daemon is not doing**: a guard shows "roaming" only while its
  network's bgscan is our "".  Judged only where the daemon can know: nothing on the bus, no
  call of the daemon unanswered, no fault or race armed, wpa_supplicant answering, and the
  network object and the daemon older than GRACE (a restart's new network is guarded at the
  next sample); another program's write (`overridden`) or the race the API cannot close
  (`raced`) are left out, as in the other checks.

The daemon's own scans are never aborted by it whatever their kind: peers.py flags an AbortScan
of the scan that the same daemon started (`scan_own`, set by any Scan it answered cleanly,
with or without Channels).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from nm_scanguard.daemon.guard import policy as P
from nm_scanguard.dbuslib import Message
from tests.model.bus import OWNER

if TYPE_CHECKING:
    from tests.model.world import World

# What the daemon logs when the targeted path hands a weak signal to the full scan.
FALLBACKS = ("targeted roaming gave up", "no other access point of this network is known")
GRACE = 2.0  # seconds: two samples at the default sample interval


class RoamChecks(logging.Handler):
    """Listens to the daemon's log for its fallbacks, and to wpa_supplicant for its scans."""

    def __init__(self, world: World) -> None:
        super().__init__(logging.INFO)
        self._world = world
        self._fallbacks: dict[tuple[str, str], int] = {}  # (process, ifname) -> unused ones
        self.problems: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if any(f in str(record.msg) for f in FALLBACKS) and record.args:
            key = (OWNER.get(), str(record.args[0]))  # type: ignore[index]
            self._fallbacks[key] = self._fallbacks.get(key, 0) + 1

    def scan_asked(self, msg: Message) -> None:
        """wpa_supplicant takes in a Scan call: if the daemon's, of every channel, it must
        follow a fallback."""
        w = self._world
        inst = w.instance
        args = msg.body[0] if msg.body else None
        if inst is None or not inst.alive or msg.sender != inst.conn.unique \
                or not isinstance(args, dict) or "Channels" in args:
            return
        iface = next((i for i in w.wpa.ifaces.values() if i.path == msg.path), None)
        if iface is None:
            return
        key = (inst.label, iface.ifname)
        if self._fallbacks.get(key):
            self._fallbacks[key] -= 1
            return
        guard = inst.daemon.guards.get(iface.ifname)
        if guard is None or guard.settings.roam_scans != "targeted" \
                or not (guard.policy.busy or guard.policy.held):
            return
        others = inst.daemon.candidates.others(guard.dev.connection_uuid,
                                               iface.bss.bssid if iface.bss else None)
        if others:
            self.problems.append(
                f"{inst.label} asked for a scan of every channel on {iface.ifname} (state "
                f"{guard.state}) with {others[0].bssid} ({others[0].frequency} MHz) known, "
                "although the targeted path had not given up")

    def claims(self) -> list[str]:
        """A guard shows "roaming" only while its network's bgscan is our "" (see above)."""
        w = self._world
        inst = w.instance
        now = w.loop.time()
        if inst is None or not inst.alive or now - inst.started < GRACE \
                or not (w.peers_healthy() and w.nm.alive) or w.bus.in_flight() \
                or inst.conn.waiting():
            return []
        out = []
        for ifname, guard in inst.daemon.guards.items():
            iface = w.wpa.ifaces.get(ifname)
            net = iface.current if iface is not None else None
            if guard.state != P.ROAMING or net is None or net.raced or net.overridden \
                    or now - net.born < GRACE:
                continue
            if not (net.bgscan == "" and net.ours):
                out.append(f"{ifname} shows \"roaming\" ({guard.reason}) but bgscan on "
                           f"{net.path} (object {net.oid}) is {net.bgscan!r}, not our \"\"")
        return out
