"""The Daemon, its life cycle and wiring: follows NetworkManager and wpa_supplicant on the bus and
keeps one Guard per activated Wi-Fi interface (guard_set.Guards).  It owns the hold table (the bus
API only authenticates for it), the crash journal (through Bgscan), the records of who
asked for scans (who_asked.WhoAsked) and the status line systemd shows (SystemdStatus).  Its
background tasks run under the process's supervisor (service.Supervisor), which owns the life
cycle.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, NamedTuple, Protocol

from ..config import (
    ConfigMissing,
    Settings,
    load_file,
    named_file_required,
)
from ..dbuslib import Message, MessageBus, MessageType
from ..peers.bus import BusError, NameOwners, add_match
from ..peers.netlink import LinkCounters
from ..peers.nm import NAME as NM_NAME
from ..peers.nm import SIGNAL_RULES as NM_SIGNALS
from ..peers.nm import NetworkManager, WifiDevice
from ..peers.supplicant import NAME as WPAS_NAME
from ..peers.supplicant import SIGNAL_RULES as WPAS_SIGNALS
from ..peers.supplicant import NetworkRemoved, Supplicant, events_of
from ..profile_settings import ProfileWarnings, apply_profile
from ..status import DeviceStatus
from .api.holds import Holds
from .bgscan import Bgscan, Journal, kept
from .changes import Changes
from .deferral import ScanDeferral
from .guard.candidates import Candidates
from .guard.guard import Guard
from .guard.who_asked import WhoAsked
from .guard_set import Guards
from .off import say_switched, status_line
from .systemd_status import SystemdStatus

log = logging.getLogger("scanguard")

JOURNAL_RETRY_FIRST = 2.0  # seconds before a journal entry that could not be restored is retried
JOURNAL_RETRY_MAX = 60.0
# A profile whose settings could not be read is read again this often, besides on every signal
# of NetworkManager (a timeout has no signal to end it).
SETTINGS_RETRY = 30.0

MATCH_RULES = (
    f"type='signal',sender='org.freedesktop.DBus',member='NameOwnerChanged',arg0='{NM_NAME}'",
    f"type='signal',sender='org.freedesktop.DBus',member='NameOwnerChanged',arg0='{WPAS_NAME}'",
    *NM_SIGNALS,
    *WPAS_SIGNALS,
)


def settings_for(settings: Settings, dev: WifiDevice, warned: ProfileWarnings) -> Settings:
    """The global settings overlaid with the profile's.  A profile that could not be read is
    not guarded: its settings may say `enabled = no`, and a person who turned the guard off
    for a network must not find it on there; leaving bgscan as NetworkManager set it is what
    happens without scanguard.  The guard shows why (Guard status `error`)."""
    if not settings.enabled:  # the administrator's off switch (off.py): no profile turns it
        return settings  # back on
    if dev.settings_error:
        return settings.with_values(
            {"enabled": False}, f"unreadable profile {dev.connection_id or dev.connection_uuid}")
    return apply_profile(settings, dev.user_data, dev.connection_id or dev.connection_uuid,
                         warned=warned)


def reread(path: str | None) -> Settings:
    """The global file read again as the start read it (ConfigError if it does not load).  A
    file named with --config must still be there: one deleted since the start is refused as it
    would have been then, not read as "built-in defaults"."""
    try:
        return load_file(path, required=path is not None and named_file_required(path))
    except ConfigMissing:
        raise ConfigMissing(f"{path}: no such file, and the service reads only this file (its "
                            "--config): put it back, or restart it without --config") from None


class Tasks(Protocol):
    """What the daemon needs of the task supervisor (service.Supervisor, which the life cycle
    owns): run a coroutine beside the rest with its failure logged, never raised, and shown
    through `report` (error, what it was doing) when it works for an interface; cancel them all."""

    def spawn(self, coro: Coroutine[Any, Any, Any],
              report: Callable[[BaseException, str], None] | None = None) -> asyncio.Task[None]: ...

    async def cancel_all(self) -> None: ...


class Peers(NamedTuple):
    """What the daemon works with on the bus: NetworkManager, wpa_supplicant, and Bgscan, which
    changes wpa_supplicant's bgscan (and the journal) for the guards."""

    bus: MessageBus
    nm: NetworkManager
    supplicant: Supplicant
    bgscan: Bgscan

    @classmethod
    def on(cls, bus: MessageBus, journal: Journal) -> Peers:
        supplicant = Supplicant(bus)
        return cls(bus, NetworkManager(bus), supplicant, Bgscan(supplicant, journal))


class Daemon:
    def __init__(self, settings: Settings, config_path: str | None, state_dir: str, *,
                 tasks: Tasks) -> None:
        self.settings = settings
        self.config_path = config_path
        self.counters = LinkCounters()
        self.journal = Journal(state_dir)
        self.holds = Holds()
        self.holds.changed.connect(self._holds_changed)
        self.guards = Guards(self.journal, self.spawn)
        # What each profile's network is known to have, kept across reconnections (roaming.py).
        self.candidates = Candidates()
        self.deferral = ScanDeferral(state_dir)
        self.who_asked = WhoAsked(self.guards, self.spawn)
        # What the bus API hears: a guard's new state, and "a figure changed".
        self.state_changed: Changes[[str, str, str]] = Changes(raises=True)  # (interface, state, reason)
        self.changed: Changes[[]] = Changes(raises=True)
        self._peers: Peers | None = None
        self._owners = NameOwners((NM_NAME, WPAS_NAME))
        self._profile_warnings = ProfileWarnings()
        self.tasks = tasks
        self._retry: asyncio.Task[None] | None = None
        self._replay_again = False  # an entry was left to the replay after its pass began
        self._settings_retry: asyncio.Task[None] | None = None
        self._sync_lock = asyncio.Lock()
        self._sync_pending = False
        self._running = False  # from take_state_dir to stop: the state dir is ours, guards made
        self.systemd = SystemdStatus(lambda: status_line(self.settings, self.guards.status_line))

    @property
    def peers(self) -> Peers:
        """The peers exist once attach() ran; before that, using them is a programming error."""
        assert self._peers is not None, "Daemon.attach() first"
        return self._peers

    # ---- start / stop ---------------------------------------------------------------------

    def attach(self, bus: MessageBus) -> None:
        """Make the peers on `bus`: what both a guarding start (connect) and a restore-only
        start (service.restore_left_over) work with.  Sends nothing."""
        self._peers = Peers.on(bus, self.journal)

    async def connect(self, bus: MessageBus) -> None:
        """Join the bus and subscribe to NM's and wpa_supplicant's signals; changes nothing."""
        self.attach(bus)
        bus.add_message_handler(self._on_message)
        # All on the bus at once: the bus answers them in order, and the start waits for one
        # round trip instead of one per rule.
        await asyncio.gather(*(add_match(bus, rule) for rule in MATCH_RULES))
        await self._owners.resolve(bus)

    async def start(self) -> None:
        """Guard, and restore what a previous instance left.  The caller owns the bus name
        first, so that a second instance never touches the journal of a running one.  The
        replay runs beside the guards, so that a slow wpa_supplicant cannot keep the daemon
        from following NetworkManager and answering; a guard that finds its network's "" in
        the journal takes the entry over, and the replay leaves that network alone."""
        self.take_state_dir()
        say_switched(None, self.settings)
        await self.who_asked.follow_scans(self.peers.bus)
        await self.sync()
        self._retry_journal()

    def take_state_dir(self) -> None:
        """From now on the state directory is ours (we own the bus name) and syncs make guards."""
        self._running = True
        self.deferral.set(False)  # whatever a previous instance left says nothing about now

    def _retry_journal(self) -> None:
        """Replay the journal, with its backed-off retries.  If that runs already, its pass
        under way may have read the entries before this one was left to it: it makes one more
        pass before it ends."""
        if self._retry is None:
            self._retry = self.spawn(self._replay_journal())
        else:
            self._replay_again = True

    async def replay(self) -> int:
        """Restore what the journal holds, once; the entries kept for a later try."""
        return await self.peers.bgscan.replay()

    async def _replay_journal(self) -> None:
        """Replay the journal; entries that could not be restored (wpa_supplicant refused or did
        not answer) are tried again with a growing pause, until none is left."""
        try:
            delay = JOURNAL_RETRY_FIRST
            while True:
                self._replay_again = False
                if not await self.replay():
                    if self._replay_again:
                        continue
                    return
                await asyncio.sleep(delay)
                delay = min(delay * 2, JOURNAL_RETRY_MAX)
        finally:
            self._retry = None

    async def stop(self) -> None:
        """Restore every bgscan we suspended.  Called on SIGTERM/SIGINT and on any fatal error.
        Before start (the bus name is another's) the state directory is not ours to touch."""
        started, self._running = self._running, False  # no sync makes a guard from here on
        if started:
            self.deferral.clear()
        self.who_asked.close()
        await self.tasks.cancel_all()
        restore = self._peers is not None and self._peers.bus.connected
        if started and not restore and (left := kept(self.journal)):
            log.error("the system bus is gone, so bgscan cannot be restored now; %d suspended "
                      "bgscan(s) stay in %s and the next start restores them",
                      left, self.journal.path)
        await self.guards.stop_all(restore)
        if started and restore and self.peers.bgscan.kept():
            # What no guard holds (a stop wpa_supplicant refused, the retry cancelled above) is
            # this instance's too: a clean stop restores it now, not the next start.
            await self.replay()
        self.counters.close()
        self.systemd.stopped()

    # ---- NetworkManager: which interfaces to guard ----------------------------------------

    def schedule_sync(self) -> None:
        if not self._sync_pending:
            self._sync_pending = True
            self.spawn(self.sync())

    async def sync(self) -> None:
        async with self._sync_lock:
            self._sync_pending = False
            if not self._running:  # before start, or stopping: a guard made now is never stopped
                return
            try:
                devices = await self.peers.nm.wifi_devices()
            except BusError as e:
                log.warning("NetworkManager is not reachable (%s); guarding continues on the "
                            "interfaces already known and resumes following NM when it is back", e)
                return
            active = {d.ifname: d for d in devices if d.activated and d.ifname}
            for ifname in [i for i in self.guards if i not in active]:
                await self.guards.stop(ifname)
                if not self._running:  # stopped while this sync waited: stop_all has the rest
                    return
                if self.peers.bgscan.kept(ifname):  # refused or unanswered: tried again now
                    self._retry_journal()
            for ifname, dev in active.items():
                if not self._running:
                    return
                settings = self.settings_for(dev)
                guard = self.guards.get(ifname)
                if guard is None:
                    guard = Guard(dev, settings, counters=self.counters,
                                  supplicant=self.peers.supplicant,
                                  bgscan=self.peers.bgscan, spawn=self.spawn,
                                  candidates=self.candidates)
                    guard.state_changed.connect(self._guard_state_changed)
                    guard.changed.connect(self._guard_changed)
                    await self.guards.start(guard, self.holds.held(ifname))
                else:
                    guard.update(dev, settings)
                await guard.reconcile()
            if any(d.settings_error for d in active.values()) and self._settings_retry is None:
                self._settings_retry = self.spawn(self._sync_later(SETTINGS_RETRY))
            self._announce(force=True)

    async def _sync_later(self, delay: float) -> None:
        try:
            await asyncio.sleep(delay)
        finally:
            self._settings_retry = None
        self.schedule_sync()

    def settings_for(self, dev: WifiDevice) -> Settings:
        return settings_for(self.settings, dev, self._profile_warnings)

    async def reload(self) -> None:
        """Re-read the global file (reread); on error keep the old settings and raise ConfigError."""
        before, self.settings = self.settings, reread(self.config_path)
        log.info("configuration reloaded from %s", self.config_path)
        say_switched(before, self.settings)
        await self.sync()

    async def wifi_interfaces(self) -> list[str]:
        """The Wi-Fi interfaces NetworkManager knows (raises BusError if it does not answer)."""
        return sorted(d.ifname for d in await self.peers.nm.wifi_devices() if d.ifname)

    # ---- holds: the table is ours, the bus API takes and releases them --------------------

    def _holds_changed(self) -> None:
        self.guards.holds_changed(self.holds)

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
            for event in events_of(msg):
                if isinstance(event, NetworkRemoved):
                    # At once, before any reply queued behind this signal resumes a suspend in
                    # flight: that suspend must learn that the object it read bgscan from is gone.
                    gone = self.peers.bgscan.network_removed(event.network)
                    if gone is not None:
                        self.guards.network_gone(event.iface, gone)
                else:
                    self.guards.supplicant_event(event)

    def _owner_changed(self, name: str, new: str) -> None:
        if name == NM_NAME:
            log.info("NetworkManager %s", "appeared" if new else "left the bus")
            if new:
                self.schedule_sync()
        elif name == WPAS_NAME:
            log.info("wpa_supplicant %s", "appeared" if new else "left the bus; its networks "
                     "are gone, so is anything we suspended")
            self.guards.supplicant_restarted()
            self.peers.bgscan.supplicant_restarted()
            self.schedule_sync()

    def spawn(self, coro: Coroutine[Any, Any, Any], guard: Guard | None = None) -> asyncio.Task[None]:
        """Run `coro` beside everything else; its failure is logged (and shown in the status
        of `guard`, the interface it works for, if any), never raised."""
        return self.tasks.spawn(coro, guard.unexpected if guard is not None else None)

    # ---- what the guards report, passed on ------------------------------------------------

    def _guard_state_changed(self, ifname: str, state: str, reason: str) -> None:
        self.guards.update_deferral(self.deferral)
        self.state_changed(ifname, state, reason)
        self.systemd.changed(force=True)

    def _guard_changed(self) -> None:
        self._announce(force=False)

    def _announce(self, force: bool) -> None:
        """A figure changed (`force`: after a sync, which may have started or stopped guards)."""
        self.guards.update_deferral(self.deferral)
        self.changed()
        self.systemd.changed(force=force)

    def status(self) -> list[DeviceStatus]:
        """Each interface's Devices entry, for the bus API."""
        return self.guards.status()
