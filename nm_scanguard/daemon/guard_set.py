"""The daemon's guards, one per Wi-Fi interface NetworkManager reports activated, by name: each
started and stopped here, and what the daemon tells all of them (a hold, the scan-deferral
file, a wpa_supplicant restart) or the one a wpa_supplicant signal is about.
"""

from __future__ import annotations

import logging

from ..peers.supplicant import CurrentNetwork, ScanDone, Scanning
from ..status import DeviceStatus
from ..text import NAME_CHARS, quoted
from .api.holds import Holds
from .bgscan import Journal, Suspended
from .deferral import ScanDeferral
from .guard.guard import Guard, Spawn
from .guard.policy import threshold_words
from .guard.roaming import Ours

log = logging.getLogger("scanguard")


class Guards(dict[str, Guard]):
    def __init__(self, journal: Journal, spawn: Spawn) -> None:
        super().__init__()
        self._journal = journal  # named in the log when a stop could not restore
        self._spawn = spawn
        # A stopped guard's scan of our own still running, by interface, for the guard that
        # follows (a re-activation): until a wpa_supplicant restart ends it.
        self._running_scans: dict[str, Ours] = {}

    # ---- start / stop ---------------------------------------------------------------------

    async def start(self, guard: Guard, held: bool) -> None:
        """Guard a newly activated interface from now on."""
        self[guard.ifname] = guard
        guard.roaming.carry_on(self._running_scans.pop(guard.ifname, None))
        guard.hold_changed(held)
        dev = guard.dev
        if guard.settings.enabled:
            log.info("%s: connected to %s; will guard while busy (%s)", guard.ifname,
                     quoted(dev.connection_id, NAME_CHARS), threshold_words(guard.settings))
        else:
            log.info("%s: connected to %s; not guarding (%s)", guard.ifname,
                     quoted(dev.connection_id, NAME_CHARS),
                     "its settings cannot be read" if dev.settings_error else "enabled = no")
        await guard.attach()

    async def stop(self, ifname: str) -> None:
        """The interface is no longer activated: stop guarding it and restore its bgscan."""
        gone = self.pop(ifname)
        if (running := gone.roaming.running()) is not None:
            self._running_scans[ifname] = running
        log.info("%s: no longer activated in NetworkManager; stop guarding", ifname)
        try:
            await gone.stop()
        except Exception as e:  # keep following NetworkManager for the others
            log.error("%s: could not restore bgscan when it stopped being guarded: %s; "
                      "it stays in %s, restored by the journal's retry", ifname, e,
                      self._journal.path)

    async def stop_all(self, restore: bool) -> None:
        """The daemon stops: every guard stops, restoring bgscan unless `restore` is false."""
        for ifname, guard in list(self.items()):
            try:
                await guard.stop(restore=restore)
            except Exception as e:  # keep restoring the others
                log.error("%s: could not restore bgscan on stop: %s; it stays in %s and the next "
                          "start restores it", ifname, e, self._journal.path)
        self.clear()

    # ---- what the daemon tells them -------------------------------------------------------

    def holds_changed(self, holds: Holds) -> None:
        for ifname, guard in self.items():
            guard.hold_changed(holds.held(ifname))
            self._spawn(guard.kick(), guard)

    def update_deferral(self, deferral: ScanDeferral) -> None:
        """Refuse other programs' scan requests while any guard wants that, and tell each
        guard what the file says, so that its status claims no deferral that is not."""
        deferral.set(any(g.scans.deferring for g in self.values()))
        for guard in self.values():
            guard.scans.deferral_status(deferral.in_force, deferral.problem)

    def supplicant_restarted(self) -> None:
        self._running_scans.clear()
        for guard in self.values():
            guard.supplicant_restarted()

    def network_gone(self, iface_path: str, gone: Suspended) -> None:
        """NetworkRemoved ended suspension `gone` (Bgscan.network_removed): its guard re-engages
        on the object that follows, if the link is still busy."""
        guard = self._for_interface(iface_path)
        if guard is not None:
            self._spawn(guard.network_gone(gone), guard)

    def supplicant_event(self, event: ScanDone | Scanning | CurrentNetwork) -> None:
        """One of wpa_supplicant's other signals, decoded (supplicant.events_of)."""
        guard = self._for_interface(event.iface)
        if guard is None:
            return
        if isinstance(event, ScanDone):
            guard.scan_done()
        elif isinstance(event, Scanning):
            guard.scans.scanning_changed(event.scanning)
        else:
            self._spawn(guard.network_changed(event.network), guard)

    def _for_interface(self, iface_path: str) -> Guard | None:
        for guard in self.values():
            if guard.interface.path == iface_path:
                return guard
        return None

    # ---- status ---------------------------------------------------------------------------

    def status(self) -> list[DeviceStatus]:
        return [g.status() for _, g in sorted(self.items())]

    def status_line(self) -> str:
        if not self:
            return "no Wi-Fi connection to guard"
        return "; ".join(g.status_line() for _, g in sorted(self.items()))
