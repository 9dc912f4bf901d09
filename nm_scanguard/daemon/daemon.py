"""The Daemon: follows NetworkManager and wpa_supplicant on the bus and keeps one Guard per
activated Wi-Fi interface.  It owns the hold table (the bus API only authenticates for it),
the crash journal (through the Suspender) and the status line systemd shows.  Its background
tasks run under the process's supervisor (service.Supervisor), which owns the life cycle.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

import systemd.daemon as sd_daemon

from ..attribution import GEOCLUE_NAME, Request
from ..config import ProfileWarnings, Settings, apply_profile, load_file
from ..dbuslib import Message, MessageBus, MessageType
from ..peers.bus import BusError, NameOwners, add_match, owner_pid
from ..peers.netlink import LinkCounters
from ..peers.nl80211 import Nl80211Error, ScanEvent, ScanEvents
from ..peers.nm import NAME as NM_NAME
from ..peers.nm import SIGNAL_RULES as NM_SIGNALS
from ..peers.nm import NetworkManager, WifiDevice
from ..peers.supplicant import NAME as WPAS_NAME
from ..peers.supplicant import SIGNAL_RULES as WPAS_SIGNALS
from ..peers.supplicant import NetworkRemoved, ScanDone, Scanning, Supplicant, events_of
from ..status import DeviceStatus
from ..text import NAME_CHARS, quoted
from .deferral import ScanDeferral
from .guard import Guard
from .holds import Holds
from .journal import Journal
from .policy import threshold_words
from .replay import restore_journal
from .suspension import Suspender
from .throttle import Throttle

log = logging.getLogger("scanguard")

STATUS_EVERY = 5.0  # seconds between STATUS= updates while only the figures change
JOURNAL_RETRY_FIRST = 2.0  # seconds before a journal entry that could not be restored is retried
JOURNAL_RETRY_MAX = 60.0
# A profile whose settings could not be read is read again this often, besides on every signal
# of NetworkManager (a timeout has no signal to end it).
SETTINGS_RETRY = 30.0
# NetworkManager scan requests the polkit rule saw, kept for `scanguardctl diagnose`: the last
# REQUESTS_KEPT, none older than REQUESTS_KEPT_FOR seconds (a widget asks every 10-15 s).
REQUESTS_KEPT = 32
REQUESTS_KEPT_FOR = 600.0
LABEL_AFTER = 1.0  # seconds after a scan starts that it is labelled (see _label_scan)

MATCH_RULES = (
    f"type='signal',sender='org.freedesktop.DBus',member='NameOwnerChanged',arg0='{NM_NAME}'",
    f"type='signal',sender='org.freedesktop.DBus',member='NameOwnerChanged',arg0='{WPAS_NAME}'",
    *NM_SIGNALS,
    *WPAS_SIGNALS,
)


class Tasks(Protocol):
    """What the daemon needs of the task supervisor (service.Supervisor, which the life cycle
    owns): run a coroutine beside the rest with its failure logged, never raised, and shown
    through `report` (error, what it was doing) when it works for an interface; cancel them all."""

    def spawn(self, coro: Coroutine[Any, Any, Any],
              report: Callable[[BaseException, str], None] | None = None) -> asyncio.Task[None]: ...

    async def cancel_all(self) -> None: ...


class Daemon:
    def __init__(self, settings: Settings, config_path: str | None, state_dir: str, *,
                 tasks: Tasks) -> None:
        self.settings = settings
        self.config_path = config_path
        self.counters = LinkCounters()
        self.journal = Journal(state_dir)
        self.holds = Holds()
        self.holds.add_listener(self._holds_changed)
        self.guards: dict[str, Guard] = {}
        self.deferral = ScanDeferral(state_dir)
        self._requests: deque[tuple[Request, bool]] = deque(maxlen=REQUESTS_KEPT)
        self._scan_events: ScanEvents | None = None
        # Listeners for the bus API: (interface, state, reason) and "something changed".
        self.on_state_changed: list[Callable[[str, str, str], None]] = []
        self.on_changed: list[Callable[[], None]] = []
        self._bus: MessageBus | None = None
        self._owners = NameOwners((NM_NAME, WPAS_NAME))
        self._nm: NetworkManager | None = None
        self._supplicant: Supplicant | None = None
        self._suspender: Suspender | None = None
        self._profile_warnings = ProfileWarnings()
        self.tasks = tasks
        self._retry: asyncio.Task[None] | None = None
        self._settings_retry: asyncio.Task[None] | None = None
        self._sync_lock = asyncio.Lock()
        self._sync_pending = False
        self._status_sent = ""
        self._status = Throttle(STATUS_EVERY, self._send_status_line)

    # The peers exist once connect() ran; before that, using them is a programming error.

    @property
    def bus(self) -> MessageBus:
        assert self._bus is not None, "Daemon.connect() first"
        return self._bus

    @property
    def nm(self) -> NetworkManager:
        assert self._nm is not None, "Daemon.connect() first"
        return self._nm

    @property
    def supplicant(self) -> Supplicant:
        assert self._supplicant is not None, "Daemon.connect() first"
        return self._supplicant

    @property
    def suspender(self) -> Suspender:
        assert self._suspender is not None, "Daemon.connect() first"
        return self._suspender

    # ---- start / stop ---------------------------------------------------------------------

    def attach(self, bus: MessageBus) -> None:
        """Make the peers on `bus`: what both a guarding start (connect) and a restore-only
        start (service.restore_left_over) work with.  Sends nothing."""
        self._bus = bus
        self._nm = NetworkManager(bus)
        self._supplicant = Supplicant(bus)
        self._suspender = Suspender(self._supplicant, self.journal)

    async def connect(self, bus: MessageBus) -> None:
        """Join the bus and subscribe to NM's and wpa_supplicant's signals; changes nothing."""
        self.attach(bus)
        bus.add_message_handler(self._on_message)
        for rule in MATCH_RULES:
            await add_match(bus, rule)
        await self._owners.resolve(bus)

    async def start(self) -> None:
        """Guard, and restore what a previous instance left.  The caller owns the bus name
        first, so that a second instance never touches the journal of a running one.  The
        replay runs beside the guards, so that a slow wpa_supplicant cannot keep the daemon
        from following NetworkManager and answering; a guard that finds its network's "" in
        the journal takes the entry over, and the replay leaves that network alone."""
        self.deferral.set(False)  # whatever a previous instance left says nothing about now
        await self._follow_scans()
        await self.sync()
        self._retry_journal()

    def _retry_journal(self) -> None:
        """Replay the journal, with its backed-off retries, unless that runs already."""
        if self._retry is None:
            self._retry = self.spawn(self._replay_journal())

    async def replay(self) -> int:
        """Restore what the journal holds, once; the entries kept for a later try."""
        return await restore_journal(self.suspender)

    async def _replay_journal(self) -> None:
        """Replay the journal; entries that could not be restored (wpa_supplicant refused or did
        not answer) are tried again with a growing pause, until none is left."""
        try:
            delay = JOURNAL_RETRY_FIRST
            while True:
                if not await self.replay():
                    return
                await asyncio.sleep(delay)
                delay = min(delay * 2, JOURNAL_RETRY_MAX)
        finally:
            self._retry = None

    async def stop(self) -> None:
        """Restore every bgscan we suspended.  Called on SIGTERM/SIGINT and on any fatal error."""
        self.deferral.clear()
        if self._scan_events is not None:
            self._scan_events.close()
        await self.tasks.cancel_all()
        restore = self._bus is not None and self._bus.connected
        if not restore and self.journal.entries():
            log.error("the system bus is gone, so bgscan cannot be restored now; %d suspended "
                      "bgscan(s) stay in %s and the next start restores them",
                      len(self.journal.entries()), self.journal.path)
        for ifname, guard in list(self.guards.items()):
            try:
                await guard.stop(restore=restore)
            except Exception as e:  # keep restoring the others
                log.error("%s: could not restore bgscan on stop: %s; it stays in %s and the next "
                          "start restores it", ifname, e, self.journal.path)
        self.guards.clear()
        self._status.cancel()
        self.counters.close()
        self._notify("STOPPING=1\nSTATUS=stopped, bgscan restored")

    # ---- NetworkManager: which interfaces to guard ----------------------------------------

    def schedule_sync(self) -> None:
        if not self._sync_pending:
            self._sync_pending = True
            self.spawn(self.sync())

    async def sync(self) -> None:
        async with self._sync_lock:
            self._sync_pending = False
            try:
                devices = await self.nm.wifi_devices()
            except BusError as e:
                log.warning("NetworkManager is not reachable (%s); guarding continues on the "
                            "interfaces already known and resumes following NM when it is back", e)
                return
            active = {d.ifname: d for d in devices if d.activated and d.ifname}
            for ifname in [i for i in self.guards if i not in active]:
                gone = self.guards.pop(ifname)
                log.info("%s: no longer activated in NetworkManager; stop guarding", ifname)
                try:
                    await gone.stop()
                except Exception as e:  # keep following NetworkManager for the others
                    log.error("%s: could not restore bgscan when it stopped being guarded: %s; "
                              "it stays in %s, restored by the journal's retry", ifname, e,
                              self.journal.path)
                if any(e.ifname == ifname for e in self.journal.entries().values()):
                    # What the stop could not restore (wpa_supplicant refused or did not
                    # answer) is tried again now, not at the next start.
                    self._retry_journal()
            for ifname, dev in active.items():
                settings = self.settings_for(dev)
                guard = self.guards.get(ifname)
                if guard is None:
                    guard = self.guards[ifname] = Guard(
                        dev, settings, counters=self.counters, supplicant=self.supplicant,
                        suspender=self.suspender, listener=self)
                    guard.hold_changed(self.holds.held(ifname))
                    if settings.enabled:
                        log.info("%s: connected to %s; will guard while busy (%s)", ifname,
                                 quoted(dev.connection_id, NAME_CHARS), threshold_words(settings))
                    else:
                        log.info("%s: connected to %s; not guarding (%s)", ifname,
                                 quoted(dev.connection_id, NAME_CHARS),
                                 "its settings cannot be read" if dev.settings_error
                                 else "enabled = no")
                    await guard.attach()
                else:
                    guard.update(dev, settings)
                await guard.reconcile()
            if any(d.settings_error for d in active.values()) and self._settings_retry is None:
                self._settings_retry = self.spawn(self._sync_later(SETTINGS_RETRY))
            self._changed(force=True)

    async def _sync_later(self, delay: float) -> None:
        try:
            await asyncio.sleep(delay)
        finally:
            self._settings_retry = None
        self.schedule_sync()

    def settings_for(self, dev: WifiDevice) -> Settings:
        """The global settings overlaid with the profile's.  A profile that could not be read
        is not guarded: its settings may say `enabled = no`, and a person who turned the guard
        off for a network must not find it on there; leaving bgscan as NetworkManager set it
        is what happens without scanguard.  The guard shows why (Guard status `error`)."""
        if dev.settings_error:
            return self.settings.with_values(
                {"enabled": False},
                f"unreadable profile {dev.connection_id or dev.connection_uuid}")
        return apply_profile(self.settings, dev.user_data, dev.connection_id or dev.connection_uuid,
                             warned=self._profile_warnings)

    async def reload(self) -> None:
        """Re-read the global file; on error keep the old settings and raise ConfigError."""
        self.settings = load_file(self.config_path)
        log.info("configuration reloaded from %s", self.config_path)
        await self.sync()

    async def wifi_interfaces(self) -> list[str]:
        """The Wi-Fi interfaces NetworkManager knows (raises BusError if it does not answer)."""
        return sorted(d.ifname for d in await self.nm.wifi_devices() if d.ifname)

    # ---- holds: the table is ours, the bus API takes and releases them --------------------

    def _holds_changed(self) -> None:
        for ifname, guard in self.guards.items():
            guard.hold_changed(self.holds.held(ifname))
            self.spawn(guard.kick(), guard)

    # ---- signals from the bus -------------------------------------------------------------

    def _on_message(self, msg: Message) -> None:
        """The peers' signals, each trusted only from its real sender (NameOwners): anyone on
        the bus can send a signal that looks like theirs."""
        if msg.message_type != MessageType.SIGNAL:
            return
        if msg.member == "NameOwnerChanged" and msg.interface == "org.freedesktop.DBus":
            change = self._owners.changed(msg)
            if change is not None:
                self._owner_changed(*change)
        elif msg.interface and msg.interface.startswith(NM_NAME):
            if self._owners.sent_by(msg, NM_NAME):
                self.schedule_sync()
        elif self._owners.sent_by(msg, WPAS_NAME):
            self._on_supplicant_signal(msg)

    def _owner_changed(self, name: str, new: str) -> None:
        if name == NM_NAME:
            log.info("NetworkManager %s", "appeared" if new else "left the bus")
            if new:
                self.schedule_sync()
        elif name == WPAS_NAME:
            log.info("wpa_supplicant %s", "appeared" if new else "left the bus; its networks "
                     "are gone, so is anything we suspended")
            for each in self.guards.values():
                each.supplicant_restarted()
            self.suspender.ledger.forget_all()
            self.schedule_sync()

    def _on_supplicant_signal(self, msg: Message) -> None:
        for event in events_of(msg):
            guard = self._guard_for(event.iface)
            if isinstance(event, NetworkRemoved):
                # At once, before any reply queued behind this signal resumes a suspend in
                # flight: that suspend must learn that the object it read bgscan from is gone.
                gone = self.suspender.ledger.network_removed(event.network)
                if gone is not None and guard is not None:
                    self.spawn(guard.network_gone(gone), guard)
            elif guard is None:
                continue
            elif isinstance(event, ScanDone):
                guard.scans.count_scan()
            elif isinstance(event, Scanning):
                guard.scans.scanning_changed(event.scanning)
            else:
                self.spawn(guard.network_changed(event.network), guard)

    def _guard_for(self, iface_path: str) -> Guard | None:
        for guard in self.guards.values():
            if guard.iface_path == iface_path:
                return guard
        return None

    def spawn(self, coro: Coroutine[Any, Any, Any], guard: Guard | None = None) -> asyncio.Task[None]:
        """Run `coro` beside everything else; its failure is logged (and shown in the status
        of `guard`, the interface it works for, if any), never raised."""
        return self.tasks.spawn(coro, guard.unexpected if guard is not None else None)

    # ---- what the guards report (GuardListener) --------------------------------------------

    def guard_state_changed(self, guard: Guard, state: str, reason: str) -> None:
        self._update_deferral()
        for cb in self.on_state_changed:
            cb(guard.ifname, state, reason)
        self._send_status(force=True)

    def guard_changed(self, guard: Guard) -> None:
        self._changed(force=False)

    def run_for(self, guard: Guard, coro: Coroutine[Any, Any, Any]) -> None:
        self.spawn(coro, guard)

    def _changed(self, force: bool) -> None:
        self._update_deferral()
        for cb in self.on_changed:
            cb()
        self._send_status(force=force)

    # ---- other programs' scan requests (the polkit rule) ----------------------------------

    def _update_deferral(self) -> None:
        """Refuse other programs' scan requests while any guard wants that, and tell each
        guard what the file says, so that its status claims no deferral that is not."""
        self.deferral.set(any(g.scans.deferring for g in self.guards.values()))
        for guard in self.guards.values():
            guard.scans.deferral_status(self.deferral.in_force, self.deferral.problem)

    # ---- who asked for each scan (the kernel's scan events) --------------------------------

    async def _follow_scans(self) -> None:
        """Join nl80211's scan events, so that each scan is labelled by who asked.  Without
        them (no cfg80211, a sandbox without netlink) scans are still counted; that is said
        once, and nothing else depends on it."""
        try:
            self._scan_events = await ScanEvents.open(self._scan_event)
        except Nl80211Error as e:
            log.warning("cannot follow the kernel's scan events (%s); scans are counted but "
                        "not labelled by who asked", e.strerror or e)

    def _scan_event(self, event: ScanEvent, _monotonic: float, wall: float) -> None:
        if event.kind != "started" or event.ifindex is None:
            return
        for guard in self.guards.values():
            try:
                index = socket.if_nametoindex(guard.ifname)
            except OSError:
                continue
            if index == event.ifindex:
                self.spawn(self._label_scan(guard, event, wall), guard)
                return

    async def _label_scan(self, guard: Guard, event: ScanEvent, wall: float) -> None:
        # The polkit rule's report of an allowed request comes from a background busctl and
        # may arrive after the scan it asked for has started: label a moment later.
        await asyncio.sleep(LABEL_AFTER)
        # Devices, where the label is published, reads the same for every user: it says that a
        # program asked through NetworkManager, not whose (GetRecentScanRequests names a
        # caller's own).
        await guard.scans.scan_started(event.ssids, wall,
                                 [Request(at=r.at) for r, _ in self.recent_scan_requests()],
                                 self._geoclue_pid)

    async def _geoclue_pid(self) -> int | None:
        return await owner_pid(self.bus, GEOCLUE_NAME)  # this sandbox cannot see /proc

    def scan_request_seen(self, request: Request, refused: bool, who: str) -> int:
        """The polkit rule saw a NetworkManager scan request (refused or allowed): kept a while
        for `scanguardctl diagnose`; a refusal is also counted.  Returns how many interfaces
        counted it."""
        self._requests.append((request, refused))
        return self.scan_request_deferred(who) if refused else 0

    def recent_scan_requests(self) -> list[tuple[Request, bool]]:
        """The requests the rule saw in the last REQUESTS_KEPT_FOR seconds, oldest first."""
        since = time.time() - REQUESTS_KEPT_FOR
        return [(r, refused) for r, refused in self._requests if r.at >= since]

    def scan_request_deferred(self, who: str) -> int:
        """The polkit rule refused a NetworkManager scan request (its helper told the bus API).
        polkit does not say for which device, so each deferring interface counts it.  Returns
        how many interfaces counted it (0: we no longer defer, e.g. it arrived late)."""
        deferring = [g for g in self.guards.values() if g.scans.deferring]
        for guard in deferring:
            guard.scans.count_deferred_request(who)
        return len(deferring)

    # ---- status ---------------------------------------------------------------------------

    def status(self) -> list[DeviceStatus]:
        return [g.status() for _, g in sorted(self.guards.items())]

    def status_line(self) -> str:
        if not self.guards:
            return "no Wi-Fi connection to guard"
        return "; ".join(g.status_line() for _, g in sorted(self.guards.items()))

    def _send_status(self, force: bool) -> None:
        """A state change is sent at once; figures at most every STATUS_EVERY seconds (the line
        is not even formatted in between: this runs on every sample)."""
        if force:
            self._status.flush()
        else:
            self._status.poke()

    def _send_status_line(self) -> None:
        line = self.status_line()
        if line != self._status_sent:
            self._status_sent = line
            self._notify("STATUS=" + line)

    @staticmethod
    def _notify(message: str) -> None:
        if not os.environ.get("NOTIFY_SOCKET"):
            return
        sd_daemon.notify(message)
