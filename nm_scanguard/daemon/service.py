"""scanguardd's process life cycle: arguments, logging, the bus and its name, signals, exit codes.

Everything that ends the process ends here, in `main`, with an exit code: a stop signal (0), a
bad configuration or a bus we cannot join (1), losing the bus connection or our bus name (1, so
that systemd's Restart=on-failure starts a new instance, whose journal replay restores bgscan).
Nothing deeper raises SystemExit.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine
from typing import Any, TextIO

from .. import __version__
from ..config import (
    DEFAULT_CONFIG_PATH,
    ConfigError,
    Settings,
    load_file,
    named_file_required,
    settings_table,
)
from ..dbuslib import SKIPPED, Message, MessageBus, MessageType
from ..names import BUS_NAME, DBUS
from ..output import run_main
from ..peers.bus import BusError, NoSystemBus, call, close_bus, connect_system
from ..peers.supplicant import SupplicantError
from ..text import one_line, shown
from .api.methods import Api
from .bgscan import DEFAULT_STATE_DIR, kept
from .daemon import Daemon
from .guard.problems import log_traceback_once, unexpected_line

log = logging.getLogger("scanguard")

# RequestName flags and replies (D-Bus specification).
DO_NOT_QUEUE = 0x4
PRIMARY_OWNER, ALREADY_OWNER = 1, 4


class Supervisor:
    """The daemon's background tasks (a sync, a hold's kick, a signal's handling, the journal's
    retry loop, a reload): each runs beside the rest, its failure is logged and never raised,
    and `cancel_all` ends them all when the process stops."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()
        self._tracebacks: set[str] = set()  # unexpected errors (no interface's) already logged
        self._unexpected: str | None = None  # the last of them logged

    def spawn(self, coro: Coroutine[Any, Any, Any],
              report: Callable[[BaseException, str], None] | None = None) -> asyncio.Task[None]:
        """Run `coro`; an unexpected failure goes to `report` (a guard's, which shows it in
        that interface's status) or, without one, to the log."""
        task = asyncio.create_task(self._supervised(coro, report))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def cancel_all(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _supervised(self, coro: Coroutine[Any, Any, Any],
                          report: Callable[[BaseException, str], None] | None) -> None:
        what = f"in {getattr(coro, '__name__', 'a task')}"
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except SupplicantError as e:
            log.warning("%s", e)
        except Exception as e:
            if report is not None:
                report(e, what)
                return
            # No interface to show it on: the traceback once per distinct error, then a line
            # each time it changes (a failure that repeats must not fill the journal).
            message = unexpected_line(e, what)
            if not log_traceback_once(message, e, self._tracebacks) and message != self._unexpected:
                log.warning("%s", message)
            self._unexpected = message
        else:
            if report is None:
                self._unexpected = None


class _OneLineFormatter(logging.Formatter):
    """Each message is one line (text.one_line): journald makes every line of stderr an entry
    of its own under scanguardd's name, so a peer's value with a newline in it would forge one.
    A traceback appended to the message stays as Python prints it."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = one_line(record.message)
        return super().formatMessage(record)


class _JournalFormatter(_OneLineFormatter):
    """Under systemd, prefix the syslog priority so journald files warnings as warnings."""

    PRIORITY = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3,
                logging.CRITICAL: 2}

    def format(self, record: logging.LogRecord) -> str:
        return f"<{self.PRIORITY.get(record.levelno, 6)}>{super().format(record)}"


def setup_logging(verbose: bool, stream: TextIO | None = None) -> None:
    handler = logging.StreamHandler(stream or sys.stderr)
    if os.environ.get("JOURNAL_STREAM"):
        handler.setFormatter(_JournalFormatter("%(message)s"))
    else:
        handler.setFormatter(_OneLineFormatter("scanguardd: %(levelname)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose else logging.INFO)


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter at the width it would choose, found without shutil: argparse makes
    one for every argument added, and its default imports shutil (with zlib, bz2 and lzma) on
    every start of the daemon, for a width only --help uses."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, width=_columns() - 2)  # argparse keeps 2 columns free


def _columns() -> int:
    """The terminal's width as shutil.get_terminal_size() gives it: $COLUMNS, else the width of
    standard output's terminal, else 80."""
    with contextlib.suppress(ValueError):
        if int(os.environ.get("COLUMNS", "")) > 0:
            return int(os.environ["COLUMNS"])
    try:
        columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
    except (AttributeError, ValueError, OSError):
        columns = 0
    return columns if columns > 0 else 80


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="scanguardd",
        formatter_class=_HelpFormatter,
        description="Suspend wpa_supplicant background scans (bgscan) while a Wi-Fi link is busy, "
                    "and restore them exactly when it goes idle. When the signal fades while "
                    "guarding, scan only the channels of the network's other known access "
                    "points so that the station can roam (roam_scans = targeted), or give "
                    "bgscan back (roam_scans = full, or when that finds nothing better).",
        epilog="Normally started by systemd as scanguard.service. See scanguard.conf(5) for the "
               "settings and scanguardctl(1) to look at what it is doing.",
    )
    p.man_short_description = (  # type: ignore[attr-defined]  # read by man/build.py
        "suspend Wi-Fi background scans while the link is busy")
    p.add_argument("-c", "--config", metavar="FILE", default=DEFAULT_CONFIG_PATH,
                   help="global settings file (default: %(default)s, which may be absent: "
                        "then the built-in defaults apply; a file given here must exist)")
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
    return run_main("scanguardd", lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.verbose)
    try:
        settings = load_file(args.config, required=named_file_required(args.config))
    except ConfigError as e:
        print(f"scanguardd: {e}", file=sys.stderr)
        if not args.check_config:
            # A daemon that cannot guard must still not leave a user's bgscan off: a bad file
            # written while the previous instance ran is read only by the next start, often one
            # after a crash, whose journal would otherwise never be replayed.
            asyncio.run(_restore_only(args.state_dir))
        return 1
    if args.check_config:
        # The table `scanguardctl config show` prints, so that both say a value the same way.
        present = os.path.exists(args.config)
        print(f"{shown(args.config)}: {'OK' if present else 'not present, built-in defaults apply'}"
              "; the effective settings:")
        for line in settings_table(settings):
            print(line)
        return 0
    for why in SKIPPED:
        log.warning("D-Bus library: %s", why)
    try:
        return asyncio.run(serve(args.config, args.state_dir, settings))
    except KeyboardInterrupt:
        return 0


async def _restore_only(state_dir: str) -> None:
    try:
        bus = await connect_system()
    except NoSystemBus as e:
        log.error("cannot connect to the system bus (%s) to restore what a previous instance "
                  "left suspended; reconnecting the Wi-Fi restores NetworkManager's bgscan", e.reason)
        return
    try:
        await restore_left_over(bus, state_dir)
    except (BusError, EOFError, ConnectionError) as e:
        log.error("could not restore what a previous instance left suspended (%s); it stays in "
                  "the journal for the next start", e)
    finally:
        await close_bus(bus)


async def restore_left_over(bus: MessageBus, state_dir: str) -> int:
    """Restore what a previous instance left suspended, and guard nothing: what a daemon does
    that cannot start (bad settings).  The same Daemon as a guarding start, attached to the
    bus and replaying its journal once, never connected to NetworkManager's signals.  Returns
    the entries kept for a later try."""
    daemon = Daemon(Settings(), None, state_dir, tasks=Supervisor())
    journal = daemon.journal
    if not kept(journal):
        return 0
    problem = await own_name(bus, BUS_NAME)
    if problem:  # a running instance owns the journal
        log.error("%s; not touching %s", problem, journal.path)
        return 0
    daemon.attach(bus)
    left = await daemon.replay()
    log.error("not guarding until the settings are fixed (scanguardd --check-config); what a "
              "previous instance left suspended was restored%s",
              f", except {left} entr{'y' if left == 1 else 'ies'} kept in {journal.path}"
              if left else "")
    return left


async def own_name(bus: MessageBus, name: str) -> str | None:
    """Ask for `name`; None when we own it, else what went wrong, worded for the admin."""
    try:
        (result,) = await call(bus, *DBUS, "RequestName", "su", [name, DO_NOT_QUEUE])
    except BusError as e:
        if e.name == "org.freedesktop.DBus.Error.AccessDenied":
            return (f"the system bus does not let this user own {name} ({e.text}). Run it as user "
                    "'scanguard' (systemctl start scanguard) or install "
                    f"/usr/share/dbus-1/system.d/{name}.conf")
        return f"cannot own {name} on the system bus: {e}"
    if result not in (PRIMARY_OWNER, ALREADY_OWNER):
        return (f"{name} is already owned by another process: another scanguardd is running "
                "(systemctl status scanguard). Stop it first")
    return None


async def serve(config_path: str | None, state_dir: str, settings: Settings) -> int:
    """Run until a stop signal (0) or until the bus or our name is lost (1)."""
    try:
        bus = await connect_system()
    except NoSystemBus as e:
        log.error("%s", e)
        return 1
    daemon = Daemon(settings, config_path, state_dir, tasks=Supervisor())
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    lost: list[str] = []  # why we must exit non-zero; the first reason wins

    def fatal(why: str) -> None:
        if not lost:
            lost.append(why)
        stop.set()

    def on_message(msg: Message) -> None:
        if (msg.message_type == MessageType.SIGNAL and msg.member == "NameLost"
                and msg.sender == DBUS[0] and msg.body and msg.body[0] == BUS_NAME):
            fatal(f"lost the bus name {BUS_NAME}")

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGHUP, lambda: daemon.spawn(_reload(daemon)))
    watch = asyncio.ensure_future(_watch_bus(bus, fatal))
    bus.add_message_handler(on_message)
    try:
        await daemon.connect(bus)
        api = Api(daemon, bus)
        api.start()
        problem = await own_name(bus, BUS_NAME)
        if problem:
            log.error("%s", problem)
            return 1
        await daemon.start()  # replays the journal: only after we own the name
        log.info("started (nm-scanguard %s)", __version__)
        await stop.wait()
        if lost:
            log.error("%s; exiting with status 1 so that systemd restarts the service (the "
                      "restarted daemon restores bgscan from %s)", lost[0], daemon.journal.path)
            return 1
        log.info("stopping: restoring bgscan")
        return 0
    except (BusError, EOFError, ConnectionError) as e:
        if not bus.connected:
            log.error("lost the system bus during start-up (%s); exiting with status 1", e)
            return 1
        raise
    finally:
        watch.cancel()
        await daemon.stop()
        await close_bus(bus)


async def _watch_bus(bus: MessageBus, fatal: Callable[[str], None]) -> None:
    try:
        await bus.wait_for_disconnect()
        why = "the system bus closed our connection"
    except asyncio.CancelledError:
        raise
    except Exception as e:
        why = f"lost the system bus connection ({e!r})"
    fatal(why)


async def _reload(daemon: Daemon) -> None:
    try:
        await daemon.reload()
    except ConfigError as e:
        log.error("%s; keeping the previous settings", e)

