"""One simulated machine for the model rung: the bus, the peers, the counters, the state
directory, and scanguardd's real code (Daemon, Api, Guard, Bgscan, Holds, Journal, Policy)
started the way service.serve() starts it, on a virtual clock.

What the world can do to the daemon is what a machine can: traffic, holds from clients that
leave, NetworkManager re-activations, restarts and crashes, wpa_supplicant faults, stalls and
restarts, signal fades, a second access point of the network (or one of another network)
coming into range, profile and configuration changes, a SIGTERM, a SIGKILL, a lost bus, and a
crash between the journal's write and its rename.  `violations()` is the invariant after any
step; `settle_and_check()` is the one at the end of a sequence.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Coroutine

import nm_scanguard.files as files_module
import nm_scanguard.daemon.bgscan.journal as journal_module
from nm_scanguard.daemon.api.methods import Api
from nm_scanguard.peers.bus import CALL_TIMEOUT, BusError, close_bus
from nm_scanguard.config import ConfigError, load_file
from nm_scanguard.profile_settings import ProfileWarnings, apply_profile
from nm_scanguard.daemon.daemon import JOURNAL_RETRY_MAX, Daemon
from nm_scanguard.daemon.service import Supervisor
from nm_scanguard.dbuslib import Message, MessageType
from nm_scanguard.names import BUS_NAME, IFACE, PATH
from nm_scanguard.daemon.service import own_name, restore_left_over
from tests.model.bus import Conn, SimBus, SimulatedCrash
from tests.model.clock import VirtualTimeLoop, use_virtual_time
from tests.model.peers import NM_BGSCAN, Link, NetworkManager, Polkit, Supplicant
from tests.model.radio import Ap
from tests.model.roam_checks import RoamChecks

IFNAMES = ("wlan0", "wlan1")
PROFILES = ("Café ☕", "Café ☕ 5 GHz")
# Each interface's first access point (BSSID, MHz) and where a second one comes into range.
FIRST_AP = {"wlan0": ("02:00:00:00:00:01", 2412), "wlan1": ("02:00:00:00:01:01", 5180)}
SECOND_AP = {"wlan0": ("02:00:00:00:00:02", 5500), "wlan1": ("02:00:00:00:01:02", 2437)}
OTHER_AP = {"wlan0": ("02:00:00:00:00:03", 2462), "wlan1": ("02:00:00:00:01:03", 5240)}
FADED, STRONG = -85, -45  # dBm: below every floor the settings draw, and well above it
SCANGUARD_UID = 997
USER_UID = 1000
QUIET_LOGGERS = ("scanguard", "nm_scanguard")
RESTART_SEC = 0.1  # systemd's default RestartSec=, for Restart=on-failure
# How long settling may take: a release, the journal's slowest retry, a few call timeouts.
# A guard engages on a busy link after a baseline sample and engage_after (3 by default)
# busy samples of 1 s; with the activation noticed and a margin, within:
ENGAGE_WITHIN = 8.0
SETTLE = 30.0 + JOURNAL_RETRY_MAX + 4 * CALL_TIMEOUT


@dataclass
class Instance:
    """One scanguardd process."""

    label: str
    conn: Conn
    daemon: Daemon
    task: asyncio.Task[Any] | None = None
    alive: bool = True
    started: float = 0.0  # virtual time


@dataclass
class Client:
    conn: Conn
    cookies: list[int] = field(default_factory=list)


class _JournalOs:
    """`os` as nm_scanguard.files sees it, with a trap in the rename of the journal's write."""

    def __init__(self, world: World) -> None:
        self._world = world
        self.armed = False
        self._kept: set[str] = set()

    def replace(self, src: str, dst: str) -> None:
        if self.armed and os.path.basename(dst) == journal_module.FILE_NAME:
            self.armed = False
            self._kept.add(src)  # the written temporary file stays, as after a real crash
            self._world.crash("journal write")
            raise SimulatedCrash()
        os.replace(src, dst)

    def unlink(self, path: str) -> None:
        if path not in self._kept:
            os.unlink(path)

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)


class World:
    def __init__(self, tmp: Path) -> None:
        self.loop = VirtualTimeLoop()
        self.bus = SimBus(self.loop)
        self.events: list[str] = []
        self.wpa = Supplicant(self.bus, self.events.append)
        self.nm = NetworkManager(self.bus, self.wpa, self.events.append)
        self.polkit = Polkit(self.bus)
        self.link = Link(self.loop)
        self.tmp = tmp
        self.state_dir = str(tmp / "state")
        self.config_path = str(tmp / "scanguard.conf")
        self.dead_dir = str(tmp / "dead")  # a file: a killed process's journal writes fail
        Path(self.dead_dir).write_text("")
        self.instance: Instance | None = None
        # A start with a bad file: the process that restores what is left and exits 1.
        self.restoring: asyncio.Task[Any] | None = None
        self.restoring_by: tuple[str, Conn] | None = None  # that process's label and connection
        self.generation = 0
        self.clients: dict[int, Client] = {}
        self.crashes = self.stops = self.lost_buses = self.journal_crashes = 0
        self.problems: list[str] = []
        self._journal_os = _JournalOs(self)
        self._restarting = asyncio.Lock()
        # The pending return of a restarted peer (restart_supplicant, restart_nm): one at a time.
        self._wpa_back: asyncio.TimerHandle | None = None
        self._nm_back: asyncio.TimerHandle | None = None
        self.wpa.after_call = self._after_wpa_call
        self.roam = RoamChecks(self)
        self.wpa.on_scan = self.roam.scan_asked
        self._time = use_virtual_time(self.loop)

    # ---- set-up and tear-down ---------------------------------------------------------

    def __enter__(self) -> World:
        # The daemon's log at INFO costs more than the simulation; problems are in the invariant.
        self._levels = {name: logging.getLogger(name).level for name in QUIET_LOGGERS}
        for name in QUIET_LOGGERS:
            logging.getLogger(name).setLevel(logging.CRITICAL)
        # ...but the roaming checks hear the daemon's fallbacks (and nothing else does).
        daemon_log = logging.getLogger("scanguard")
        daemon_log.setLevel(logging.INFO)
        daemon_log.addHandler(self.roam)
        self._propagate, daemon_log.propagate = daemon_log.propagate, False
        self._time.__enter__()
        files_module.os = self._journal_os  # type: ignore[attr-defined]
        self.loop.set_exception_handler(self._loop_exception)
        for service in (self.wpa, self.nm, self.polkit):
            service.start()
        for ifname, profile in zip(IFNAMES, PROFILES):
            self.wpa.radio[ifname] = [Ap(FIRST_AP[ifname][0], FIRST_AP[ifname][1], -50)]
            self.nm.add_device(ifname, profile)
            self.wpa.add_interface(ifname)
            self.nm.activate(ifname, NM_BGSCAN)
        self.start_daemon()
        self.run(self.advance(2.0))
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            pending = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        finally:
            for name, level in self._levels.items():
                logging.getLogger(name).setLevel(level)
            logging.getLogger("scanguard").removeHandler(self.roam)
            logging.getLogger("scanguard").propagate = self._propagate
            files_module.os = os  # type: ignore[attr-defined]
            self._time.__exit__(None, None, None)
            self.loop.close()

    def _loop_exception(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, (SimulatedCrash, asyncio.CancelledError)):
            return
        self.problems.append(f"unhandled in the event loop: {context.get('message')} {exc!r}")

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self.loop.run_until_complete(coro)

    async def advance(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    # ---- scanguardd ---------------------------------------------------------------------

    def start_daemon(self) -> None:
        self.generation += 1
        label = f"scanguardd-{self.generation}"
        conn = self.bus.connect(SCANGUARD_UID, label)
        try:
            settings = load_file(self.config_path)
        except ConfigError:
            # service.main: restore what a previous instance left, then exit 1.
            self.events.append("bad-config-start")
            self.restoring = self.bus.run_as(label, self._restore_only(conn))
            self.restoring_by = (label, conn)
            return
        daemon = Daemon(settings, self.config_path, self.state_dir, tasks=Supervisor())
        daemon.counters = self.link  # type: ignore[assignment]
        inst = self.instance = Instance(label, conn, daemon, started=self.loop.time())
        inst.task = self.bus.run_as(label, self._serve(inst))
        inst.task.add_done_callback(self._served)

    def _served(self, task: asyncio.Task[Any]) -> None:
        if not task.cancelled() and task.exception() is not None \
                and not isinstance(task.exception(), (SimulatedCrash, EOFError)):
            self.problems.append(f"scanguardd's start failed: {task.exception()!r}")

    async def _restore_only(self, conn: Conn) -> None:
        try:
            await restore_left_over(conn, self.state_dir)  # type: ignore[arg-type]
        finally:
            await close_bus(conn)  # type: ignore[arg-type]

    async def _serve(self, inst: Instance) -> None:
        """service.serve() up to `await stop.wait()`, on the simulated connection.  As there, a
        start whose connection was lost meanwhile ends (exit 1: systemd starts a new one)."""
        try:
            await inst.daemon.connect(inst.conn)  # type: ignore[arg-type]
            Api(inst.daemon, inst.conn).start()  # type: ignore[arg-type]
            problem = await own_name(inst.conn, BUS_NAME)  # type: ignore[arg-type]
            if problem:
                if inst.conn.connected:
                    self.problems.append(f"{inst.label} could not own its name: {problem}")
                return
            await inst.daemon.start()
        except BusError:
            if inst.conn.connected:
                raise

    async def restart_daemon(self) -> None:
        """`systemctl restart`: stop, then start.  systemd runs one job per unit at a time, so a
        restart asked for while another runs waits for it."""
        async with self._restarting:
            await self.stop_daemon()
            self.start_daemon()

    def restart_daemon_now(self) -> None:
        """`systemctl restart` that begins while wpa_supplicant handles one of the daemon's calls
        (a race step): the stop starts before that call's reply is on its way."""
        self.loop.call_soon(lambda: self.loop.create_task(self.restart_daemon()),
                            context=contextvars.Context())

    async def stop_daemon(self) -> None:
        """SIGTERM: service.serve()'s `finally`: daemon.stop(), then close the bus."""
        self._stop_restoring()
        inst = self.instance
        if inst is None or not inst.alive:
            return
        self.stops += 1
        self.events.append("stop")
        if inst.task is not None and not inst.task.done():
            inst.task.cancel()
            await asyncio.gather(inst.task, return_exceptions=True)
        healthy = self.peers_healthy()
        await self._in(inst, self._stop(inst))
        if inst.alive:
            inst.alive = False
            self.instance = None
            if healthy and self.peers_healthy():
                # Nothing kept wpa_supplicant from answering: the stop itself must have restored.
                for net in self.wpa.live_nets():
                    if net.ours and net.bgscan == "" and net.ours_by == inst.conn.unique:
                        self.problems.append(
                            f"{inst.label} stopped cleanly with wpa_supplicant answering, and "
                            f"left its \"\" on {net.path} ({net.ifname}, object {net.oid})")

    def _stop_restoring(self) -> None:
        """SIGTERM to a process that only restores (a start with a bad settings file):
        service.main installs no handler on that path, so it ends at once, as if killed, and
        what it had not restored stays in the journal for the next start.  (So `systemctl
        restart` while such a process waits on wpa_supplicant does not leave it running beside
        the new instance, which would find the name taken.)"""
        if self.restoring is None or self.restoring.done() or self.restoring_by is None:
            return
        label, conn = self.restoring_by
        self.events.append("stop:restoring")
        self.bus.drop(conn, killed=True)
        for task in self.bus.tasks_of(label):
            task.cancel()
        self.restoring = self.restoring_by = None

    def peers_healthy(self) -> bool:
        return self.wpa.alive and not self.wpa.stalled and not self.wpa.faults \
            and not self.wpa.races

    async def _in(self, inst: Instance, coro: Coroutine[Any, Any, Any]) -> None:
        """Run `coro` as part of `inst`; if `inst` is killed meanwhile, that is its end."""
        try:
            await self.bus.run_as(inst.label, coro)
        except (SimulatedCrash, asyncio.CancelledError):
            if inst.alive:
                raise

    async def _stop(self, inst: Instance) -> None:
        await inst.daemon.stop()
        await close_bus(inst.conn)  # type: ignore[arg-type]

    def crash(self, why: str = "SIGKILL") -> None:
        """SIGKILL: the process does nothing more, on the bus or on disk."""
        inst = self.instance
        if inst is None or not inst.alive:
            return
        self.crashes += 1
        if why == "journal write":
            self.journal_crashes += 1
        self.events.append(f"crash:{why}")
        inst.alive = False
        inst.daemon.journal.path = os.path.join(self.dead_dir, "suspended.json")
        self.bus.drop(inst.conn, killed=True)
        for task in self.bus.tasks_of(inst.label):
            task.cancel()
        self.instance = None
        self._restart_later()

    def _restart_later(self) -> None:
        """Restart=on-failure: a new instance after RestartSec=, unless one was started
        meanwhile (`systemctl restart` during the wait starts just one, even one that only
        restores and exits for a bad file: a second process beside it would find the name
        taken)."""
        generation = self.generation

        def start() -> None:
            if self.instance is None and self.generation == generation:
                self.start_daemon()
        self.loop.call_later(RESTART_SEC, start)

    async def lose_bus(self) -> None:
        """The bus drops our connection: serve() sees it, stops without restoring (nothing can
        reach wpa_supplicant) and exits 1; systemd starts a new instance."""
        inst = self.instance
        if inst is None or not inst.alive:
            return
        self.lost_buses += 1
        self.events.append("lost-bus")
        self.bus.drop(inst.conn)
        if inst.task is not None and not inst.task.done():
            inst.task.cancel()
            await asyncio.gather(inst.task, return_exceptions=True)
        await self._in(inst, inst.daemon.stop())
        if inst.alive:
            inst.alive = False
            self.instance = None
            self._restart_later()

    def arm_journal_crash(self) -> None:
        self._journal_os.armed = True

    def reload(self, text: str) -> None:
        from nm_scanguard.daemon.service import _reload
        Path(self.config_path).write_text(text, encoding="utf-8")
        inst = self.instance
        if inst is not None and inst.alive:
            self.events.append("reload")

            async def sighup() -> None:  # the signal handler runs in the daemon's loop
                inst.daemon.spawn(_reload(inst.daemon))
            self.run(self._in(inst, sighup()))

    # ---- peers ----------------------------------------------------------------------------

    def restart_supplicant(self, gap: float) -> None:
        """wpa_supplicant stops and is back after `gap`.  A restart asked for while it is still
        down (settle's "bring it back now") replaces the pending return: one process comes
        back, not two (found 2026-11-25, a fault of the model: settle restarted it 5 ms before
        a raced restart's return, which then started it a second time; the second start took a
        new unique name while the well-known name stayed with the first, so the bus dropped
        every reply and the daemon's calls timed out while the model judged it healthy)."""
        self.events.append("wpa-restart")
        self.wpa.stop()
        self.nm.supplicant_gone()
        if self._wpa_back is not None:
            self._wpa_back.cancel()

        def back() -> None:
            self._wpa_back = None
            self.wpa.start()
            if self.nm.alive:  # else NetworkManager does it when it is back (restart_nm)
                self.nm.supplicant_back()
        self._wpa_back = self.loop.call_later(gap, back)

    def restart_nm(self, gap: float) -> None:
        self.events.append("nm-restart")
        self._nm_away(gap)

    def _nm_away(self, gap: float) -> None:
        """NetworkManager's process ends; systemd starts it again after `gap`."""
        self.nm.stop()
        if self._nm_back is not None:
            self._nm_back.cancel()

        def back() -> None:
            self._nm_back = None
            self.nm.start()
            if self.wpa.alive and not self.wpa.ifaces:  # wpa_supplicant restarted meanwhile
                self.nm.supplicant_back()
        self._nm_back = self.loop.call_later(gap, back)

    def crash_nm(self, gap: float) -> None:
        """NetworkManager dies (SIGKILL, a crash; systemd starts it again after `gap`).  It
        leaves wpa_supplicant as it was: it removes only the network it added itself, at a
        shutdown it gets to run (nm-supplicant-interface.c, _remove_network), and nothing
        calls RemoveAllNetworks; the new process gets the interface by CreateInterface, then
        GetInterface on "exists", and reuses it (nm-supplicant-manager.c).  It cannot assume a
        Wi-Fi device (nm-device-wifi.c), so each device shows disconnected (30) until it is
        activated again, while the old network, with whatever bgscan it carries, stays
        selected.  The states are set now, with no signal (a dead process sends none), so
        that settle's start of NetworkManager also finds them so."""
        self.events.append("nm-crash")
        for dev in self.nm.devices.values():
            dev.state, dev.active = 30, "/"
        self._nm_away(gap)

    # ---- the radio ------------------------------------------------------------------------

    def second_ap(self, ifname: str, same: bool = True) -> None:
        """A second access point comes into range of `ifname`, on another channel: of the same
        network (same SSID and security), or with the same SSID but open (another network,
        never a roaming candidate).  wpa_supplicant sees it at its next scan of that channel."""
        bssid, frequency = SECOND_AP[ifname] if same else OTHER_AP[ifname]
        if any(ap.bssid == bssid for ap in self.wpa.radio.get(ifname, [])):
            return
        self.wpa.add_ap(ifname, Ap(bssid, frequency, -60,
                                   security="wpa2-psk" if same else "open"))

    def fade(self, ifname: str, itself: bool = True) -> None:
        """The station's access point fades below the floor while the network's others are
        strong; `itself`: wpa_supplicant's own selection would move to them (else only a
        Roam does: its throughput estimate keeps the station where it is)."""
        aps = self.wpa.radio.get(ifname, [])
        iface = self.wpa.ifaces.get(ifname)
        current = iface.bss if iface is not None and iface.bss is not None else \
            next(iter(aps), None)
        for ap in aps:
            if ap is current:
                ap.signal = FADED
            elif current is not None and ap.network() == current.network():
                ap.signal, ap.chosen = STRONG, itself

    def strong_signal(self) -> None:
        """Every access point in range strong, and the signal with it."""
        for aps in self.wpa.radio.values():
            for ap in aps:
                ap.signal = -20
        for iface in self.wpa.ifaces.values():
            iface.rssi = -20

    # ---- holds ----------------------------------------------------------------------------

    def client(self, n: int) -> Client:
        c = self.clients.get(n)
        if c is None or not c.conn.alive:
            c = self.clients[n] = Client(self.bus.connect(USER_UID, f"client-{n}"))
        return c

    def hold(self, n: int, reason: str, interface: str) -> None:
        c = self.client(n)
        msg = Message(destination=BUS_NAME, path=PATH, interface=IFACE, member="Hold",
                      signature="sss", body=[reason, "org.example.Café", interface])

        async def call() -> None:
            reply = await c.conn.call(msg)
            if reply.message_type == MessageType.METHOD_RETURN:
                c.cookies.append(reply.body[0])
        self.bus.run_as(c.conn.owner, self._quiet(call()))

    def release(self, n: int, which: int) -> None:
        c = self.clients.get(n)
        if c is None or not c.cookies or not c.conn.alive:
            return
        cookie = c.cookies.pop(which % len(c.cookies))
        msg = Message(destination=BUS_NAME, path=PATH, interface=IFACE, member="Release",
                      signature="u", body=[cookie])
        self.bus.run_as(c.conn.owner, self._quiet(c.conn.call(msg)))

    def leave(self, n: int) -> None:
        c = self.clients.pop(n, None)
        if c is not None:
            self.bus.drop(c.conn, killed=True)

    @staticmethod
    async def _quiet(coro: Coroutine[Any, Any, Any]) -> None:
        try:
            await coro
        except (EOFError, asyncio.CancelledError):
            pass

    # ---- the invariant --------------------------------------------------------------------

    def journal_on_disk(self) -> dict[str, Any]:
        try:
            with open(os.path.join(self.state_dir, journal_module.FILE_NAME), encoding="utf-8") as f:
                data = json.load(f)
        except FileNotFoundError:
            return {}
        return data if isinstance(data, dict) else {}

    def violations(self) -> list[str]:
        """What must hold after every step."""
        return list(self.problems) + list(self.wpa.violations) + self.unjournaled() \
            + self.roam.problems + self.roam.claims()

    def unjournaled(self) -> list[str]:
        """Every object that carries our "" is named by the journal on disk."""
        out = []
        ours = [n for n in self.wpa.live_nets() if n.bgscan == "" and n.ours]
        if ours:
            journal = self.journal_on_disk()
            for net in ours:
                entry = journal.get(net.path)
                if not isinstance(entry, dict) or entry.get("ifname") != net.ifname:
                    out.append(f"bgscan of {net.path} ({net.ifname}, object {net.oid}) is our "
                               f"\"\" but the journal on disk does not name it: {journal}")
        return out

    def _after_wpa_call(self) -> None:
        """The journal check after each call wpa_supplicant handles: a moment without the entry
        is a moment in which a crash would leave that bgscan off for good."""
        for problem in self.unjournaled():
            problem = f"after a wpa_supplicant call: {problem}"
            if problem not in self.problems:
                self.problems.append(problem)

    def should_guard(self, ifname: str) -> bool | None:
        """Whether scanguardd should suspend bgscan on `ifname` when its link is busy, from the
        settings file and the profile as the daemon reads them (None: no daemon can run)."""
        try:
            settings = load_file(self.config_path)
        except ConfigError:
            return None
        if not settings.enabled:
            return False  # the administrator's off switch: no profile turns it back on
        profile = self.nm.devices[ifname].profile
        if not profile.readable:
            return False  # a profile the daemon cannot read is not guarded
        return apply_profile(settings, profile.user_data, profile.id,
                             warned=ProfileWarnings()).enabled

    async def busy_check(self) -> list[str]:
        """Both links busy for 10 s at a strong signal: with the peers answering all along, every
        network that should be guarded carries our "", and no other one does."""
        self.strong_signal()
        for ifname in IFNAMES:
            self.link.set_rate(ifname, 50.0)
        def healthy() -> bool:
            return self.peers_healthy() and self.nm.alive and self.instance is not None

        ok = healthy()
        await self.advance(10.0)
        # A daemon started, or a network activated (after a gap drawn before), late in those
        # 10 s has had no time to engage yet: wait until each has been busy for ENGAGE_WITHIN.
        for _ in range(4):
            if not (ok and healthy()):
                return []
            # A reply lost or late just before is waited for a whole call timeout first, and
            # then for the journal's retry, which backs off to JOURNAL_RETRY_MAX while calls
            # keep failing (six lost calls in a row put the retry that restores a disabled
            # interface 16 s after a check that waited only a call timeout).
            fresh = max([self.instance.started,  # type: ignore[union-attr]
                         self.wpa.last_fault_at + CALL_TIMEOUT + JOURNAL_RETRY_MAX] + [
                iface.current.born for iface in self.wpa.ifaces.values()
                if iface.current is not None])
            wait = fresh + ENGAGE_WITHIN - self.loop.time()
            if wait <= 0:
                break
            await self.advance(wait)
        else:
            return []
        out = []
        for ifname in IFNAMES:
            dev, iface = self.nm.devices[ifname], self.wpa.ifaces.get(ifname)
            net = iface.current if iface is not None else None
            if dev.state != 100 or net is None or net.expected is None or net.overridden:
                continue  # (overridden: another program's value stands while the guard is on)
            want = self.should_guard(ifname)
            if want is None:
                continue
            if want and not (net.bgscan == "" and net.ours):
                out.append(f"{ifname} busy for 10 s and guarded by its settings, but bgscan on "
                           f"{net.path} (object {net.oid}) is {net.bgscan!r}, not suspended")
            if not want and net.bgscan == "":
                out.append(f"{ifname} busy for 10 s and not guarded by its settings, but bgscan "
                           f"on {net.path} (object {net.oid}) is suspended")
        return out

    def end_state(self) -> list[str]:
        """Every network's bgscan is what NetworkManager (or another program) set."""
        out = []
        for net in self.wpa.live_nets():
            if net.bgscan != net.expected and not net.raced:
                out.append(f"{net.path} ({net.ifname}, object {net.oid}): bgscan is "
                           f"{net.bgscan!r}, NetworkManager set {net.expected!r}")
        return out

    async def settle(self) -> None:
        """Faults end, holders leave, the link goes quiet, a daemon runs; then wait."""
        self.wpa.faults.clear()
        self.wpa.races.clear()
        self._journal_os.armed = False
        self.wpa.recover()
        if not self.nm.alive:
            if self._nm_back is not None:  # back now, not a second time when its gap ends
                self._nm_back.cancel()
                self._nm_back = None
            self.nm.start()
        if not self.wpa.alive:
            self.restart_supplicant(0.0)  # stopped, or not back yet: bring it back now
        elif not self.wpa.ifaces:
            self.nm.supplicant_back()
        for n in list(self.clients):
            self.leave(n)
        for ifname in IFNAMES:
            self.link.set_rate(ifname, 0.0)
        await self.advance(1.0)
        while self.restoring is not None and not self.restoring.done():
            await self.advance(1.0)  # systemd starts the unit once that process has exited
        if self.instance is None:
            self.start_daemon()
        # Until every bgscan is back and the journal is empty, SETTLE at the most.
        waited = 0.0
        while waited < SETTLE and (self.end_state() or self.journal_on_disk()):
            await self.advance(5.0)
            waited += 5.0

    def config_ok(self) -> bool:
        try:
            load_file(self.config_path)
        except ConfigError:
            return False
        return True

    def settle_and_check(self) -> list[str]:
        self.run(self.settle())
        problems = self.violations() + self.end_state()
        if self.instance is None and self.config_ok():
            problems.append("no scanguardd runs after settling (its start failed)")
        if problems:
            return ["after settling: " + p for p in problems]
        # A clean stop while guarding, with healthy peers, restores at once, without waiting
        # for a next start (stop_daemon checks it).
        if self.instance is not None:
            for ifname in IFNAMES:
                self.link.set_rate(ifname, 50.0)
            self.run(self.advance(6.0))
            self.run(self.stop_daemon())
        problems = self.violations()
        return ["after a clean stop while guarding: " + p for p in problems]
