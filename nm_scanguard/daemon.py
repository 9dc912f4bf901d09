"""scanguardd: wires NetworkManager, wpa_supplicant, rtnetlink and the policy together."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
import time
from typing import Any, Callable, Coroutine

from . import __version__
from .bus import BusError, add_match, name_has_owner
from .config import DEFAULT_CONFIG_PATH, ConfigError, Settings, apply_profile, load_file
from .dbuslib import SKIPPED, BusType, Message, MessageBus, MessageType
from .guard import Guard
from .netlink import LinkCounters
from .nm import NAME as NM_NAME, NetworkManager, WifiDevice
from .state import DEFAULT_STATE_DIR, Journal
from .supplicant import IFACE as WPAS_IFACE, NAME as WPAS_NAME, PATH as WPAS_PATH, ObjectGone, Supplicant, SupplicantError

log = logging.getLogger("scanguard")

STATUS_EVERY = 5.0  # seconds between STATUS= updates while only the figures change

MATCH_RULES = (
    "type='signal',sender='org.freedesktop.DBus',member='NameOwnerChanged',arg0='%s'" % NM_NAME,
    "type='signal',sender='org.freedesktop.DBus',member='NameOwnerChanged',arg0='%s'" % WPAS_NAME,
    "type='signal',sender='%s',interface='%s',member='DeviceAdded'" % (NM_NAME, NM_NAME),
    "type='signal',sender='%s',interface='%s',member='DeviceRemoved'" % (NM_NAME, NM_NAME),
    "type='signal',sender='%s',interface='%s.Device',member='StateChanged'" % (NM_NAME, NM_NAME),
    "type='signal',sender='%s',interface='%s.Settings.Connection',member='Updated'" % (NM_NAME, NM_NAME),
    "type='signal',sender='%s',interface='%s',member='ScanDone'" % (WPAS_NAME, WPAS_IFACE),
    "type='signal',sender='%s',interface='%s',member='NetworkRemoved'" % (WPAS_NAME, WPAS_IFACE),
    "type='signal',sender='%s',interface='org.freedesktop.DBus.Properties',"
    "member='PropertiesChanged',arg0='%s'" % (WPAS_NAME, WPAS_IFACE),
)


class Daemon:
    def __init__(self, settings: Settings, config_path: str | None, state_dir: str) -> None:
        self.settings = settings
        self.config_path = config_path
        self.counters = LinkCounters()
        self.journal = Journal(state_dir)
        self.guards: dict[str, Guard] = {}
        self.holds: dict[str, int] = {}  # interface ("" = every interface) -> number of holds
        self.bus: MessageBus | None = None
        self.nm: NetworkManager | None = None
        self.supplicant: Supplicant | None = None
        # Listeners for the bus API: (interface, state, reason) and "something changed".
        self.on_state_changed: list[Callable[[str, str, str], None]] = []
        self.on_changed: list[Callable[[], None]] = []
        self._tasks: set[asyncio.Task] = set()
        self._sync_lock = asyncio.Lock()
        self._sync_pending = False
        self._status_sent = ("", 0.0)

    # ---- start / stop ---------------------------------------------------------------------

    async def connect(self, bus: MessageBus | None = None) -> None:
        """Join the bus and subscribe to NM's and wpa_supplicant's signals; changes nothing."""
        self.bus = bus or await MessageBus(bus_type=BusType.SYSTEM).connect()
        self.nm = NetworkManager(self.bus)
        self.supplicant = Supplicant(self.bus)
        self.bus.add_message_handler(self._on_message)
        for rule in MATCH_RULES:
            await add_match(self.bus, rule)

    async def start(self, bus: MessageBus | None = None) -> None:
        """Restore what a previous instance left, then guard.  The caller owns the bus name
        first, so that a second instance never touches the journal of a running one."""
        if self.bus is None:
            await self.connect(bus)
        await self.restore_journal()
        await self.sync()

    async def stop(self) -> None:
        """Restore every bgscan we suspended.  Called on SIGTERM/SIGINT and on any fatal error."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for ifname, guard in list(self.guards.items()):
            try:
                await guard.stop()
            except Exception as e:  # keep restoring the others
                log.error("%s: could not restore bgscan on stop: %s; it stays in %s and the next "
                          "start restores it", ifname, e, self.journal.path)
        self.guards.clear()
        self.counters.close()
        self._notify("STOPPING=1\nSTATUS=stopped, bgscan restored")

    async def restore_journal(self) -> None:
        entries = self.journal.load()
        if not entries:
            return
        if not await name_has_owner(self.bus, WPAS_NAME):
            log.info("wpa_supplicant is not running: the networks a previous instance changed "
                     "are gone with it; nothing to restore")
            for net in entries:
                self.journal.forget(net)
            return
        for net, entry in entries.items():
            try:
                await self.restore(net, entry["bgscan"], entry["ifname"])
                log.info("%s: restored bgscan \"%s\" that a previous instance left suspended",
                         entry["ifname"], entry["bgscan"])
            except SupplicantError as e:
                log.error("%s: cannot restore bgscan left suspended by a previous instance: %s",
                          entry["ifname"], e)

    async def restore(self, net: str, value: str, ifname: str) -> None:
        """Put `value` back on `net` if it is still the "" we set; forget the journal entry."""
        try:
            current = await self.supplicant.get_bgscan(net)
        except ObjectGone:
            log.debug("%s: network %s is gone, nothing to restore", ifname, net)
            self.journal.forget(net)
            return
        if current == "":
            await self.supplicant.set_bgscan(net, value)
        elif current != value:
            log.info("%s: bgscan on %s was changed to \"%s\" meanwhile; leaving it", ifname, net, current)
        self.journal.forget(net)

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
                guard = self.guards.pop(ifname)
                log.info("%s: no longer activated in NetworkManager; stop guarding", ifname)
                await guard.stop()
            for ifname, dev in active.items():
                settings = self.settings_for(dev)
                guard = self.guards.get(ifname)
                if guard is None:
                    guard = self.guards[ifname] = Guard(self, dev, settings)
                    guard.hold_changed(self.held(ifname))
                    log.info("%s: connected to '%s'; guarding (threshold %g Mbit/s or %d packets/s)",
                             ifname, dev.connection_id, settings.threshold_mbit, settings.threshold_pps)
                    await guard.attach()
                else:
                    guard.update(dev, settings)
                await guard.reconcile()
            self.changed(None)

    def settings_for(self, dev: WifiDevice) -> Settings:
        return apply_profile(self.settings, dev.user_data, dev.connection_id or dev.connection_uuid)

    async def reload(self) -> None:
        """Re-read the global file; on error keep the old settings and raise ConfigError."""
        self.settings = load_file(self.config_path)
        log.info("configuration reloaded from %s", self.config_path)
        await self.sync()

    # ---- holds (the bus API keeps who holds what; we only count) ---------------------------

    def held(self, ifname: str) -> bool:
        return self.holds.get(ifname, 0) + self.holds.get("", 0) > 0

    def add_hold(self, interface: str) -> None:
        self.holds[interface] = self.holds.get(interface, 0) + 1
        self._holds_changed()

    def remove_hold(self, interface: str) -> None:
        n = self.holds.get(interface, 0) - 1
        if n > 0:
            self.holds[interface] = n
        else:
            self.holds.pop(interface, None)
        self._holds_changed()

    def _holds_changed(self) -> None:
        for ifname, guard in self.guards.items():
            guard.hold_changed(self.held(ifname))
            self.spawn(guard.kick())

    # ---- signals from the bus -------------------------------------------------------------

    def _on_message(self, msg: Message) -> None:
        if msg.message_type != MessageType.SIGNAL:
            return
        if msg.member == "NameOwnerChanged" and msg.interface == "org.freedesktop.DBus":
            name, old, new = msg.body
            if name == NM_NAME:
                log.info("NetworkManager %s", "appeared" if new else "left the bus")
                if new:
                    self.schedule_sync()
            elif name == WPAS_NAME:
                log.info("wpa_supplicant %s", "appeared" if new else "left the bus; its networks "
                         "are gone, so is anything we suspended")
                for guard in self.guards.values():
                    guard.supplicant_restarted()
                for net in self.journal.load():
                    self.journal.forget(net)
                self.schedule_sync()
        elif msg.interface and msg.interface.startswith(NM_NAME):
            self.schedule_sync()
        elif msg.interface == WPAS_IFACE and msg.member == "ScanDone":
            guard = self._guard_for(msg.path)
            if guard is not None:
                guard.count_scan()
        elif msg.interface == WPAS_IFACE and msg.member == "NetworkRemoved":
            guard = self._guard_for(msg.path)
            if guard is not None:
                self.spawn(guard.network_removed(msg.body[0]))
        elif msg.member == "PropertiesChanged" and msg.path.startswith(WPAS_PATH + "/"):
            if msg.body and msg.body[0] == WPAS_IFACE and "CurrentNetwork" in msg.body[1]:
                guard = self._guard_for(msg.path)
                if guard is not None:
                    net = msg.body[1]["CurrentNetwork"].value
                    self.spawn(guard.network_changed(None if net in ("", "/") else net))

    def _guard_for(self, iface_path: str) -> Guard | None:
        for guard in self.guards.values():
            if guard.iface_path == iface_path:
                return guard
        return None

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task:
        task = asyncio.create_task(self._guarded(coro))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    @staticmethod
    async def _guarded(coro: Coroutine[Any, Any, Any]) -> None:
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except SupplicantError as e:
            log.warning("%s", e)
        except Exception:
            log.exception("unexpected error; carrying on")

    # ---- status ---------------------------------------------------------------------------

    def state_changed(self, guard: Guard, state: str, reason: str) -> None:
        log.info("%s: %s (%s)", guard.ifname, state, reason)
        for cb in self.on_state_changed:
            cb(guard.ifname, state, reason)
        self._send_status(force=True)

    def changed(self, guard: Guard | None) -> None:
        for cb in self.on_changed:
            cb()
        self._send_status(force=guard is None)

    def status(self) -> list[dict[str, Any]]:
        return [g.status() for _, g in sorted(self.guards.items())]

    def status_line(self) -> str:
        if not self.guards:
            return "no Wi-Fi connection to guard"
        return "; ".join(g.status_line() for _, g in sorted(self.guards.items()))

    def _send_status(self, force: bool) -> None:
        text, sent_at = self._status_sent
        now = time.monotonic()
        if not force and now - sent_at < STATUS_EVERY:
            return  # throttled: do not even format the line (this runs on every sample)
        line = self.status_line()
        if line != text:
            self._status_sent = (line, now)
            self._notify("STATUS=" + line)

    @staticmethod
    def _notify(message: str) -> None:
        if not os.environ.get("NOTIFY_SOCKET"):
            return
        try:
            from systemd import daemon as sd
        except ImportError:
            return
        sd.notify(message)


# ---- command line -----------------------------------------------------------------------------

class _JournalFormatter(logging.Formatter):
    """Under systemd, prefix the syslog priority so journald files warnings as warnings."""

    PRIORITY = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3,
                logging.CRITICAL: 2}

    def format(self, record: logging.LogRecord) -> str:
        return f"<{self.PRIORITY.get(record.levelno, 6)}>{super().format(record)}"


def setup_logging(verbose: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if os.environ.get("JOURNAL_STREAM"):
        handler.setFormatter(_JournalFormatter("%(message)s"))
    else:
        handler.setFormatter(logging.Formatter("scanguardd: %(levelname)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="scanguardd",
        description="Suspend wpa_supplicant background scans (bgscan) while a Wi-Fi link is busy, "
                    "and restore them exactly when it goes idle or the signal fades.",
        epilog="Normally started by systemd as scanguard.service. See scanguard.conf(5) for the "
               "settings and scanguardctl(1) to look at what it is doing.",
    )
    p.man_short_description = "suspend Wi-Fi background scans while the link is busy"  # argparse-manpage
    p.add_argument("-c", "--config", metavar="FILE", default=DEFAULT_CONFIG_PATH,
                   help="global settings file (default: %(default)s; a missing file means "
                        "built-in defaults)")
    p.add_argument("--state-dir", metavar="DIR",
                   default=os.environ.get("SCANGUARD_STATE_DIR", DEFAULT_STATE_DIR),
                   help="where the journal of suspended bgscans is kept, so that a restart after "
                        "a crash restores them (default: %(default)s)")
    p.add_argument("--check-config", action="store_true",
                   help="validate the settings file, print the effective settings and exit")
    p.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.verbose)
    try:
        settings = load_file(args.config)
    except ConfigError as e:
        print(f"scanguardd: {e}", file=sys.stderr)
        return 1
    if args.check_config:
        present = os.path.exists(args.config)
        print(f"{args.config}: OK" if present else f"{args.config}: not present, built-in defaults apply")
        for key, value in settings.values().items():
            print(f"  {key} = {value}    ({settings.source(key)})")
        return 0
    for why in SKIPPED:
        log.warning("D-Bus library: %s", why)
    try:
        return asyncio.run(_serve(args, settings))
    except KeyboardInterrupt:
        return 0


async def _serve(args: argparse.Namespace, settings: Settings) -> int:
    daemon = Daemon(settings, args.config, args.state_dir)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, lambda: daemon.spawn(_reload(daemon)))
    try:
        bus = await MessageBus(bus_type=BusType.SYSTEM).connect()
    except Exception as e:
        log.error("cannot connect to the system bus (%s); is dbus running?", e)
        return 1
    try:
        await daemon.connect(bus)
        api = _load_api()
        if api is not None:
            await api(daemon, bus)  # owns the name, or exits if another instance does
        await daemon.start()
        log.info("started (nm-scanguard %s)", __version__)
        await stop.wait()
        log.info("stopping: restoring bgscan")
        return 0
    finally:
        await daemon.stop()
        bus.disconnect()


def _load_api():
    """The system-bus API (api.py) if present: the daemon works without it."""
    try:
        from .api import export
    except ImportError:
        return None
    return export


async def _reload(daemon: Daemon) -> None:
    try:
        await daemon.reload()
    except ConfigError as e:
        log.error("%s; keeping the previous settings", e)
