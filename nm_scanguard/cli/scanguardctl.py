"""scanguardctl: look at what the scan guard does, hold it around a command, edit profile settings."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import math
import re
import signal
import sys
import time
from types import ModuleType
from typing import Any

from .. import __version__
from ..attribution import DESCRIPTIONS
from ..config import (
    DEFAULT_CONFIG_PATH,
    KEYS,
    USER_DATA_PREFIX,
    ConfigError,
    ConfigMissing,
    Settings,
    apply_profile,
    load_file,
    named_file_required,
    parse_value,
    settings_table,
)
from ..dbuslib import Message, MessageBus, MessageFlag, MessageType
from ..names import ACCESS_DENIED, ERROR_UNKNOWN_HOLD, IFACE, PATH, UNREACHABLE
from ..names import BUS_NAME as NAME
from ..output import closed_pipe_quiet, finite
from ..peers.bus import (
    BusError,
    NameOwners,
    NoSystemBus,
    add_match,
    call,
    connect_system,
    get_all,
    unwrap,
)
from ..status import FIELDS, aborted_total, device_line, duration, requests, who_scanned
from ..text import NAME_CHARS, clipped, escaped, quoted, shown
from .profiles import ProfileError

HOLD_TIMEOUT = 130.0  # Hold and Reload: polkit may be asking for a password



class Failure(Exception):
    """An error message for the user; scanguardctl prints it and exits with `code` (1)."""

    def __init__(self, text: str, code: int = 1) -> None:
        super().__init__(text)
        self.code = code


# ---- talking to the service ---------------------------------------------------------------------

async def connect() -> MessageBus:
    try:
        return await connect_system()
    except NoSystemBus as e:
        raise Failure(str(e)) from None


def explain(e: BusError) -> Failure:
    if e.name in UNREACHABLE:
        return Failure("the scanguard service is not running and could not be started "
                       f"({e.name}); see `systemctl status scanguard`")
    if e.name == ACCESS_DENIED:
        return Failure(f"permission denied: {shown(e.text or e.name)}")
    return Failure(shown(e.text or e.name))


async def properties(bus: MessageBus) -> dict[str, Any]:
    try:
        return await get_all(bus, NAME, PATH, IFACE)
    except BusError as e:
        raise explain(e) from None


# ---- status ----------------------------------------------------------------------------------

def _ago(since: float) -> str:
    return duration(time.time() - since)


GEOCLUE_HINT = ("scans ran while bgscan was suspended and the polkit rule refused no program's "
                "request to NetworkManager: most likely GeoClue (location services: automatic "
                "time zone, Night Light schedule, weather), or root (e.g. sudo nmcli device wifi "
                "rescan), about whom polkit is never asked; to turn location off or down, see "
                "/usr/share/doc/nm-scanguard/docs/scan-deferral.md, \"GeoClue is never refused\"")


def scan_hint(d: dict[str, Any]) -> str | None:
    """Who asked for the scans bgscan suspension could not stop, where we can tell.  With no
    refused client request seen, the likeliest source is GeoClue, which calls wpa_supplicant
    directly and is never refused (refusing would end its Wi-Fi location for the session)."""
    if not d.get("scans_guarding"):
        return None
    aborted = aborted_total(d)
    cut = f"; abort_scans cut {aborted} of them short" if aborted else ""
    if not d.get("settings", {}).get("defer_client_scans", True):
        return ("defer_client_scans is off for this connection, so desktop shells, widgets and "
                "nmcli may scan through NetworkManager while guarding, and GeoClue directly" + cut)
    if not d.get("scan_requests_deferred"):
        return GEOCLUE_HINT + cut
    return f"scans that still ran while guarding came from {who_scanned(True)}" + cut


def hold_line(h: dict[str, Any]) -> str:
    """One hold in one line; every field is the holder's or the daemon's, so each is escaped."""
    who = shown(h.get("application_id") or h.get("caller", "?"))
    where = shown(h.get("interface"), NAME_CHARS) if h.get("interface") else "every interface"
    reason = f": {shown(h['reason'])}" if h.get("reason") else ""
    return (f"hold {shown(h.get('cookie'))} by {who} (uid {shown(h.get('caller_uid', '?'))}) on "
            f"{where} for {_ago(h.get('since', time.time()))}{reason}")


def status_json(props: dict[str, Any]) -> dict[str, Any]:
    """The stable --json form: every device has every key (signal_dbm null when unknown)."""
    devices = []
    for d in props.get("Devices", []):
        d = dict(d)
        for key in FIELDS:  # a key the daemon left out (signal_dbm when unknown) is null
            d.setdefault(key, None)
        devices.append(d)
    return {"version": props.get("Version", ""), "devices": devices,
            "holds": list(props.get("ActiveHolds", []))}


# json.dumps escapes C0 controls only; DEL, the C1 controls (0x9b is a CSI) and format
# characters such as U+202E would reach the terminal raw.
_NOT_ASCII = re.compile("[^\x00-\x7e]")


def _json_escape(match: re.Match[str]) -> str:
    char = match.group()
    if not escaped(char):
        return char
    code = ord(char)
    if code > 0xFFFF:  # JSON spells it as a UTF-16 surrogate pair
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def json_text(doc: Any) -> str:
    """What --json prints: strict JSON, which JavaScript's JSON.parse and jq accept.  A figure the
    daemon could not compute is null, never NaN or Infinity (allow_nan=False would rather fail).
    Non-ASCII text stays readable ("Café ☕"); every character a terminal would act on or that
    hides is written as a \\uXXXX escape, which any parser reads back as the same string."""
    text = json.dumps(finite(doc), indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False)
    return _NOT_ASCII.sub(_json_escape, text)


async def cmd_status(args: argparse.Namespace) -> int:
    bus = await connect()
    try:
        props = await properties(bus)
    finally:
        bus.disconnect()
    if args.json:
        print(json_text(status_json(props)))
        return 0
    devices, holds = props.get("Devices", []), props.get("ActiveHolds", [])
    if not devices:
        print("no activated Wi-Fi connection: nothing to guard")
    for d in devices:
        print(device_line(d))
        hint = scan_hint(d)
        if hint:
            print(f"  {shown(d.get('interface', '?'), NAME_CHARS)}: {hint}")
    for h in holds:
        print(hold_line(h))
    return 0


# ---- hold ------------------------------------------------------------------------------------

# hold's own failures (no command, no hold under --strict, a usage error) exit with this code, as
# timeout(1) and env(1) do, so that a script can tell them from the command's own status; 126
# and 127 keep their shell meaning (the command cannot run, is not found).
HOLD_FAILED = 125
# Said where the daemon's reply says `use "" for every Wi-Fi interface`, its API's terms.
_API_EVERY_INTERFACE = 'use "" for every Wi-Fi interface'
_CLI_EVERY_INTERFACE = "omit --interface to hold every Wi-Fi interface"


def _warn(text: str) -> None:
    print(f"scanguardctl: warning: {text}", file=sys.stderr, flush=True)


class Holder:
    """The hold around one command, kept while the command runs: taken at the start, taken
    again whenever the service's bus name gets a new owner (a restart, an upgrade, a service
    that was down at the start), released at the end.  A hold that cannot be taken is a
    warning, never a reason to stop the command: only --strict refuses to start it."""

    def __init__(self, args: argparse.Namespace, program: str) -> None:
        self.body = [args.reason, args.app_id, args.interface]
        self.program = program
        self.bus: MessageBus | None = None
        # Only the bus's own NameOwnerChanged counts: any local user may send a forged one.
        self.owners = NameOwners((NAME,))
        # The hold, and the unique name of the instance that gave it: only that instance
        # knows the cookie, and only while it owns the name.
        self.cookie: int | None = None
        self.giver: str | None = None
        self.held_before = False
        self.watching = False  # owner changes are acted on once the first attempt is over
        self._taking: asyncio.Task[None] | None = None

    async def start(self) -> str | None:
        """Connect, watch the service's name and take the hold; None if held, else why not."""
        try:
            self.bus = await connect()
        except Failure as e:
            return str(e)
        self.bus.add_message_handler(self._on_message)
        try:
            await add_match(self.bus, "type='signal',sender='org.freedesktop.DBus',"
                            f"member='NameOwnerChanged',arg0='{NAME}'")
            await self.owners.resolve(self.bus)
        except BusError as e:
            return f"the system bus would not say who runs the scanguard service ({e})"
        asked = self.owners.owner(NAME)
        why = await self._take()
        self.watching = True
        if why is not None and self.owners.owner(NAME) not in (asked, None):
            self._retake()  # a new instance came up while the first one was being asked
        return why

    async def _take(self) -> str | None:
        assert self.bus is not None
        msg = Message(destination=NAME, path=PATH, interface=IFACE, member="Hold",
                      signature="sss", body=self.body,
                      flags=MessageFlag.ALLOW_INTERACTIVE_AUTHORIZATION)
        try:
            reply = await asyncio.wait_for(self.bus.call(msg), HOLD_TIMEOUT)
        except TimeoutError:
            return f"the scanguard service did not answer Hold within {HOLD_TIMEOUT:g} s"
        except Exception as e:  # the bus connection went away
            return f"the system bus connection failed ({e})"
        if reply.message_type == MessageType.ERROR:
            error = BusError(reply.error_name or "", reply.body[0] if reply.body else "")
            return str(explain(error)).replace(_API_EVERY_INTERFACE, _CLI_EVERY_INTERFACE)
        (self.cookie,) = reply.body
        self.giver = reply.sender
        return None

    def _on_message(self, msg: Message) -> None:
        if (msg.message_type != MessageType.SIGNAL or msg.member != "NameOwnerChanged"
                or msg.interface != "org.freedesktop.DBus"):
            return
        change = self.owners.changed(msg)
        if change is None:
            return
        if self.cookie is not None and self.giver != change[1]:
            self.cookie = self.giver = None  # that instance is gone, and its holds with it
            self.held_before = True
        if not self.watching:
            return
        if not change[1]:
            _warn(f"the scanguard service stopped, so {self.program} runs without a hold until "
                  "it is back")
        else:
            self._retake()

    def _retake(self) -> None:
        if self._taking is None or self._taking.done():
            self._taking = asyncio.ensure_future(self._again())

    async def _again(self) -> None:
        """The name has a new owner: take the hold from it (once for a run of changes)."""
        again = self.held_before
        started = f"the scanguard service {'re' if again else ''}started"
        taken = "hold taken again" if again else "hold taken"
        while self.cookie is None and self.owners.owner(NAME):
            owner = self.owners.owner(NAME)
            why = await self._take()
            if why is None:
                print(f"scanguardctl: {started}; {taken}", file=sys.stderr, flush=True)
                return
            if self.owners.owner(NAME) == owner:  # no newer instance to ask
                _warn(f"{started}, but the hold could not be taken{' again' if again else ''}: "
                      f"{why}; {self.program} keeps running without it")
                return

    async def stop(self) -> None:
        """Release the hold, if the instance that gave it still runs, and disconnect."""
        if self._taking is not None:
            self._taking.cancel()
        if self.bus is None:
            return
        try:
            if self.cookie is not None and self.giver == self.owners.owner(NAME):
                try:
                    await call(self.bus, NAME, PATH, IFACE, "Release", "u", [self.cookie])
                except BusError as e:
                    if e.name != ERROR_UNKNOWN_HOLD:
                        _warn(f"could not release hold {self.cookie}: {shown(e.text or e.name)}; "
                              "it ends as scanguardctl leaves the bus, which it does now")
        finally:
            self.bus.disconnect()


async def cmd_hold(args: argparse.Namespace) -> int:
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise Failure("hold needs a command to run: scanguardctl hold -- COMMAND [ARGS...]",
                      HOLD_FAILED)
    program = shown(command[0])
    holder = Holder(args, program)
    try:
        why = await holder.start()
        if why is not None:
            if args.strict:
                raise Failure(f"no hold could be taken, so {program} was not run (--strict): "
                              f"{why}", HOLD_FAILED)
            _warn(f"running {program} without a hold, so Wi-Fi background scans may run during "
                  f"it: {why} (--strict would not run it)")
        return await _run(command)
    finally:
        await holder.stop()


async def _run(command: list[str]) -> int:
    try:
        proc = await asyncio.create_subprocess_exec(*command)
    except FileNotFoundError:
        print(f"scanguardctl: {shown(command[0])}: command not found", file=sys.stderr)
        return 127
    except PermissionError:
        print(f"scanguardctl: {shown(command[0])}: permission denied", file=sys.stderr)
        return 126
    loop = asyncio.get_running_loop()
    # Ctrl-C reaches the command from the terminal; we wait for it to finish.  SIGTERM and
    # SIGHUP sent to us alone are passed on, so the hold never outlives the command.
    loop.add_signal_handler(signal.SIGINT, lambda: None)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, _forward, proc, sig)
    try:
        rc = await proc.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            loop.remove_signal_handler(sig)
    return rc if rc >= 0 else 128 - rc


def _forward(proc: asyncio.subprocess.Process, sig: int) -> None:
    if proc.returncode is None:
        proc.send_signal(sig)


# ---- reload ----------------------------------------------------------------------------------

async def cmd_reload(args: argparse.Namespace) -> int:
    bus = await connect()
    try:
        msg = Message(destination=NAME, path=PATH, interface=IFACE, member="Reload",
                      flags=MessageFlag.ALLOW_INTERACTIVE_AUTHORIZATION)
        try:
            reply = await asyncio.wait_for(bus.call(msg), HOLD_TIMEOUT)
        except TimeoutError:
            raise Failure(f"the scanguard service did not answer Reload within "
                          f"{HOLD_TIMEOUT:g} s; see `journalctl -u scanguard`") from None
        if reply.message_type == MessageType.ERROR:
            # A bad file: the daemon's reply names the file, the key and the form expected.
            raise explain(BusError(reply.error_name or "", reply.body[0] if reply.body else ""))
    finally:
        bus.disconnect()
    print("the scanguard service re-read its settings file")
    return 0


# ---- config ----------------------------------------------------------------------------------

def _profiles() -> ModuleType:
    """profiles.py, imported only by the config verbs: libnm through GObject introspection
    costs ~100 ms and memory that status, hold and monitor do not need."""
    from . import profiles

    return profiles


def _global(path: str) -> Settings:
    """The global settings for the config verbs.  A file named with --config must exist
    (Failure); a bad file is only a warning, since the verbs still work with the defaults."""
    try:
        return load_file(path, required=named_file_required(path))
    except ConfigMissing as e:
        raise Failure(str(e)) from None
    except ConfigError as e:
        print(f"scanguardctl: warning: {e}; the service will not start until it is fixed. "
              "Showing built-in defaults instead", file=sys.stderr)
        return Settings()


def cmd_config_show(args: argparse.Namespace) -> int:
    settings = _global(args.config)
    if args.connection:
        p = _profiles()
        conn = p.find(p.client(), args.connection)
        data = p.user_data(conn)
        settings = apply_profile(settings, data, conn.get_id())
        print(f"connection '{shown(conn.get_id(), NAME_CHARS)}' ({shown(conn.get_uuid())})")
        ignored = [k for k in data if k.startswith(USER_DATA_PREFIX)
                   and k[len(USER_DATA_PREFIX):] not in KEYS]
        for k in ignored:
            print(f"  (ignored: unknown user data key {clipped(k, NAME_CHARS)})")
    for line in settings_table(settings):
        print(line)
    return 0


def _key(text: str) -> str:
    key = text[len(USER_DATA_PREFIX):] if text.startswith(USER_DATA_PREFIX) else text
    if key not in KEYS:
        raise Failure(f"unknown key {quoted(text, NAME_CHARS)} (known keys: {', '.join(KEYS)})")
    return key


def cmd_config_set(args: argparse.Namespace) -> int:
    base = _global(args.config)  # a mistyped --config is said before NetworkManager is asked
    p = _profiles()
    conn = p.find(p.client(), args.connection)
    where = f"profile '{shown(conn.get_id(), NAME_CHARS)}'"
    values: dict[str, str] = {}
    for item in args.assignments:
        key, sep, text = item.partition("=")
        if not sep:
            raise Failure(f"{quoted(item)} is not KEY=VALUE (e.g. threshold_mbit=5)")
        key = _key(key.strip())
        parse_value(key, text, where)  # raises ConfigError with the expected form
        values[key] = text.strip()
    # Check the result as a whole (release thresholds above engage thresholds, ...).
    merged = {**p.scanguard_data(conn), **values}
    parsed = {}
    for k, v in merged.items():
        if k in KEYS:
            with contextlib.suppress(ConfigError):  # an old bad value: the daemon ignores it
                parsed[k] = parse_value(k, v, where)
    base.with_values(parsed, where).check(where)
    p.update(conn, values, [])
    print(f"{shown(conn.get_id(), NAME_CHARS)}: "
          + ", ".join(f"{USER_DATA_PREFIX}{k}={v}" for k, v in values.items()))
    return 0


def cmd_config_unset(args: argparse.Namespace) -> int:
    p = _profiles()
    conn = p.find(p.client(), args.connection)
    present = p.scanguard_data(conn)
    keys = []
    for text in args.keys:
        key = text[len(USER_DATA_PREFIX):] if text.startswith(USER_DATA_PREFIX) else text
        if key not in present:
            print(f"scanguardctl: {shown(conn.get_id(), NAME_CHARS)}: {USER_DATA_PREFIX}{key} is not set",
                  file=sys.stderr)
        else:
            keys.append(key)
    if keys:
        p.update(conn, {}, keys)
        print(f"{shown(conn.get_id(), NAME_CHARS)}: removed "
              + ", ".join(USER_DATA_PREFIX + k for k in keys))
    return 0


# ---- monitor ---------------------------------------------------------------------------------

def _stamp() -> str:
    return time.strftime("%H:%M:%S")


async def cmd_monitor(args: argparse.Namespace) -> int:
    bus = await connect()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    last: dict[str, dict[str, Any]] = {}
    holds: set[int] = set()

    def show_devices(devices: list[dict[str, Any]]) -> None:
        for d in devices:
            name = d.get("interface", "?")
            shown_name = shown(name, NAME_CHARS)
            before = last.get(name, {})
            extra = d.get("scans_guarding", 0) - before.get("scans_guarding", d.get("scans_guarding", 0))
            refused = (d.get("scan_requests_deferred", 0)
                       - before.get("scan_requests_deferred", d.get("scan_requests_deferred", 0)))
            if refused > 0:
                print(f"{_stamp()} {shown_name}: {requests(refused)} for a scan refused (deferred "
                      "while guarding: desktop shell, widget or nmcli)", flush=True)
            cut = aborted_total(d) - aborted_total(before or d)
            if cut > 0:
                print(f"{_stamp()} {shown_name}: aborted {cut} scan(s) that took the radio off the "
                      "channel while guarding (abort_scans)", flush=True)
            labelled = _new_scans(d, before)
            for text in labelled:
                print(f"{_stamp()} {shown_name}: {text}", flush=True)
            if extra > 0 and not labelled:
                who = who_scanned(bool(d.get("deferring_scans") or before.get("deferring_scans")))
                print(f"{_stamp()} {shown_name}: {extra} scan(s) while guarding, requested by {who}",
                      flush=True)
            last[name] = d
            print(f"{_stamp()} {device_line(d)}", flush=True)
        for name in [n for n in last if n not in {d.get('interface') for d in devices}]:
            del last[name]
            print(f"{_stamp()} {shown(name, NAME_CHARS)}: no longer guarded (disconnected)",
                  flush=True)

    def show_holds(active: list[dict[str, Any]]) -> None:
        now = {h["cookie"]: h for h in active}
        for cookie in now.keys() - holds:
            print(f"{_stamp()} {hold_line(now[cookie])}", flush=True)
        for cookie in holds - now.keys():
            print(f"{_stamp()} hold {shown(cookie)} released", flush=True)
        holds.clear()
        holds.update(now)

    # Any local user can send a signal to this connection: only the bus's NameOwnerChanged and
    # the signals of the connection that owns the service's name are shown.
    owners = NameOwners((NAME,))

    closed: list[BrokenPipeError] = []

    def on_message(msg: Message) -> None:
        # The library would log an exception from a handler and go on: a reader that has gone
        # (monitor | head) ends the monitor instead.
        try:
            show(msg)
        except BrokenPipeError as e:
            closed.append(e)
            stop.set()

    def show(msg: Message) -> None:
        if msg.message_type != MessageType.SIGNAL:
            return
        if msg.member == "NameOwnerChanged" and msg.interface == "org.freedesktop.DBus":
            change = owners.changed(msg)
            if change is not None:
                print(f"{_stamp()} scanguard service {'started' if change[1] else 'stopped'}",
                      flush=True)
        elif msg.path != PATH or not owners.sent_by(msg, NAME):
            return
        elif msg.member == "StateChanged":
            ifname, state, reason = msg.body
            print(f"{_stamp()} {shown(ifname, NAME_CHARS)}: -> {shown(state, NAME_CHARS)} "
                  f"({shown(reason)})", flush=True)
        elif msg.member == "PropertiesChanged" and msg.body[0] == IFACE:
            changed = unwrap(msg.body[1])
            if "Devices" in changed:
                show_devices(changed["Devices"])
            if "ActiveHolds" in changed:
                show_holds(changed["ActiveHolds"])

    bus.add_message_handler(on_message)
    try:
        for rule in (f"type='signal',sender='{NAME}',path='{PATH}'",
                     "type='signal',sender='org.freedesktop.DBus',member='NameOwnerChanged',"
                     f"arg0='{NAME}'"):
            await add_match(bus, rule)
        await owners.resolve(bus)
        props = await properties(bus)
        print(f"{_stamp()} monitoring nm-scanguard {shown(props.get('Version', ''))}; Ctrl-C to stop",
              flush=True)
        show_devices(props.get("Devices", []))
        show_holds(props.get("ActiveHolds", []))
        await stop.wait()
    finally:
        bus.disconnect()
    if closed:
        raise closed[0]
    return 0


# ---- diagnose ---------------------------------------------------------------------------------

def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{quoted(text)} is not a number of seconds") from None
    if not math.isfinite(value) or not 1 <= value <= 86400:
        raise argparse.ArgumentTypeError(f"{quoted(text)}: give between 1 and 86400 seconds")
    return value


def _plot_file(text: str) -> str:
    from ..diagnose import plot  # imports matplotlib only when --plot is given
    return plot.argument(text)


def _target_address(text: str) -> str:
    from ..diagnose.ping import address_argument
    return address_argument(text)


def cmd_diagnose(args: argparse.Namespace) -> int:
    from ..diagnose import findings
    from ..diagnose import record as diagnose
    plot = None
    if args.plot:
        from ..diagnose import plot as plotting
        try:
            plot = plotting.require()  # before recording: a missing matplotlib is said at once
            plotting.file_format(args.plot, plot)
            plotting.check_writable(args.plot)
        except plotting.PlotError as e:
            raise Failure(str(e)) from None
    on_terminal = sys.stderr.isatty() and not args.json
    if on_terminal:
        print(f"Recording for {args.seconds:g} s: latency to {args.target or 'the gateway'}, "
              "throughput and every "
              "Wi-Fi scan. Use the link as you normally do; Ctrl-C ends early.", file=sys.stderr)
    try:
        rec = diagnose.run(args.seconds, args.interface or None, on_terminal, args.target)
    except (LookupError, ConnectionError) as e:
        raise Failure(str(e)) from None
    except BusError as e:
        raise Failure(f"NetworkManager could not be asked ({shown(e.text or e.name)}); is it "
                      "running?") from None
    # The findings first: a plot that cannot be drawn must not cost the recording.
    if args.json:
        print(json_text(findings.as_json(rec)), flush=True)
    else:
        print(findings.report(rec), end="", flush=True)
    if plot is not None:
        try:
            plotting.draw(rec, args.plot, plot)
        except plotting.PlotError as e:
            raise Failure(str(e)) from None
        if not args.json:
            print(f"Plot: {args.plot}")
    return 0


def _new_scans(now: dict[str, Any], before: dict[str, Any]) -> list[str]:
    """One line per source whose count of scans grew since the last Devices entry: the
    newest scan's label when it was the only one, else the source and how many."""
    if not before:
        return []
    was, counts = before.get("scans_by_source") or {}, now.get("scans_by_source") or {}
    grown = {k: int(v) - int(was.get(k, 0)) for k, v in counts.items() if int(v) > int(was.get(k, 0))}
    if len(grown) == 1 and sum(grown.values()) == 1 and now.get("last_scan"):
        return [f"a scan by {shown(now['last_scan'])}"]
    return [f"{n} scan(s) by {shown(DESCRIPTIONS.get(k, k))}" for k, n in sorted(grown.items())]


# ---- command line ----------------------------------------------------------------------------

class _Parser(argparse.ArgumentParser):
    """argparse's parser, with two changes: a usage error exits with `usage_status` (argparse's
    2 unless set: hold's is HOLD_FAILED), and an unrecognised argument is reported by the
    verb's own parser, with that verb's usage and status."""

    usage_status = 2

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.set_defaults(verb_parser=self)  # a verb's parser sets it after the main one

    def error(self, message: str) -> Any:
        self.print_usage(sys.stderr)
        self.exit(self.usage_status, f"{self.prog}: error: {message}\n")

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            getattr(parsed, "verb_parser", self).error(f"unrecognized arguments: {' '.join(extra)}")
        return parsed


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="scanguardctl",
        description="Look at and control nm-scanguard, which suspends wpa_supplicant background "
                    "scans while a Wi-Fi link is busy.",
        epilog="Per-connection settings are NetworkManager profile user data (scanguard.KEY), "
               "which nmcli cannot write: use `scanguardctl config set`. See scanguardd(8) and "
               "scanguard.conf(5).",
    )
    p.man_short_description = (  # type: ignore[attr-defined]  # read by man/build.py
        "look at and control the Wi-Fi scan guard")
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = p.add_subparsers(dest="verb", metavar="COMMAND", required=True)

    s = sub.add_parser("status", help="show each Wi-Fi interface's state and the active holds",
                       description="One line per guarded Wi-Fi interface, then the holds. "
                                   "Needs no privileges.")
    s.add_argument("--json", action="store_true",
                   help="print {version, devices, holds} as JSON, for scripts")
    s.set_defaults(func=cmd_status, run_async=True)

    h = sub.add_parser("hold", help="keep bgscan suspended while a command runs",
                       description="Take a hold (bgscan stays suspended whatever the traffic, "
                                   "unless the signal is weak), run COMMAND, release the hold "
                                   "when it exits and exit with its status. COMMAND runs even "
                                   "if no hold can be taken (the scanguard service is not "
                                   "running, polkit says no, ...): a warning says why, unless "
                                   "--strict. When the service restarts, the hold is taken "
                                   "again. The hold ends when COMMAND exits or scanguardctl is "
                                   "killed.",
                       epilog=f"Exit status: COMMAND's own; {HOLD_FAILED} when hold itself "
                              "fails (no COMMAND, a usage error, no hold under --strict); 126 "
                              "when COMMAND cannot be run, 127 when it is not found; 128+N "
                              "when it was killed by signal N.")
    h.usage_status = HOLD_FAILED
    h.add_argument("--reason", default="", help="why, shown in status (e.g. \"video call\")")
    h.add_argument("--app-id", default="scanguardctl", help="application id shown in status")
    h.add_argument("--interface", default="", metavar="IFACE",
                   help="hold only this Wi-Fi interface (default: all)")
    h.add_argument("--strict", action="store_true",
                   help=f"do not run COMMAND unless the hold is taken (exit {HOLD_FAILED})")
    h.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARGS...]",
                   help="the command to run while holding")
    h.set_defaults(func=cmd_hold, run_async=True)

    r = sub.add_parser("reload", help="make the service re-read its settings file",
                       description="Ask the running service to re-read its settings file (as "
                                   "`systemctl reload scanguard` does). A file with an error is "
                                   "refused: the reason is printed, the exit status is 1 and "
                                   "the previous settings stay in force. Needs root or the "
                                   "polkit action io.github.nm_scanguard.reload "
                                   "(administrators).")
    r.set_defaults(func=cmd_reload, run_async=True)

    c = sub.add_parser("config", help="show or change settings, globally or per connection",
                       description="Settings come from built-in defaults, "
                                   f"{DEFAULT_CONFIG_PATH}, and NetworkManager profile user data "
                                   "(scanguard.KEY), in that order.")
    config_help = (f"global settings file (default: {DEFAULT_CONFIG_PATH}, which may be absent; "
                   "a file given here must exist)")
    c.add_argument("--config", default=DEFAULT_CONFIG_PATH, metavar="FILE", help=config_help)
    csub = c.add_subparsers(dest="config_verb", metavar="ACTION", required=True)

    def config_option(verb: argparse.ArgumentParser) -> None:
        """--config after the action too (`config show --config F`); given nowhere, the
        default of `config`'s own option stays (SUPPRESS adds nothing to the namespace)."""
        verb.add_argument("--config", default=argparse.SUPPRESS, metavar="FILE", help=config_help)

    cs = csub.add_parser("show", help="effective settings and where each one came from")
    config_option(cs)
    cs.add_argument("connection", nargs="?", metavar="CONNECTION",
                    help="a NetworkManager profile name or UUID")
    cs.set_defaults(func=cmd_config_show, run_async=False)
    cset = csub.add_parser("set", help="store settings in a NetworkManager profile",
                           description="Validate, then write scanguard.KEY user data into the "
                                       "profile through libnm. The daemon picks the change up "
                                       "at once.")
    config_option(cset)
    cset.add_argument("connection", metavar="CONNECTION", help="profile name or UUID")
    cset.add_argument("assignments", nargs="+", metavar="KEY=VALUE",
                      help=f"keys: {', '.join(KEYS)}")
    cset.set_defaults(func=cmd_config_set, run_async=False)
    cu = csub.add_parser("unset", help="remove settings from a NetworkManager profile")
    config_option(cu)
    cu.add_argument("connection", metavar="CONNECTION", help="profile name or UUID")
    cu.add_argument("keys", nargs="+", metavar="KEY")
    cu.set_defaults(func=cmd_config_unset, run_async=False)

    d = sub.add_parser("diagnose", help="find out whether Wi-Fi stalls are scans, and who asked "
                                        "for them",
                       description="Record, for N seconds (--seconds), the latency to the Wi-Fi "
                                   "interface's own gateway or to --target (several ICMP echoes "
                                   "a second, sent through that interface), the throughput per "
                                   "second and every "
                                   "Wi-Fi scan the kernel announces, with who asked for it "
                                   "(bgscan, a program through NetworkManager, a program that "
                                   "calls wpa_supplicant directly such as GeoClue, the guard's "
                                   "own roaming scan, or unknown) and how that was established; "
                                   "then say whether the latency spikes fell inside scans and "
                                   "what to do about each source; what could not be measured "
                                   "is said to be unknown, with what to try. Needs no "
                                   "privileges and "
                                   "changes nothing; works whether or not the guard is "
                                   "installed or guarding.")
    d.add_argument("--seconds", type=_positive_seconds, default=120.0, metavar="N",
                   help="how long to record (default: %(default)g; bgscan's short interval is "
                        "30 s, its long one 300 s)")
    d.add_argument("--interface", default="", metavar="IFACE",
                   help="only this Wi-Fi interface (default: every connected one)")
    d.add_argument("--json", action="store_true",
                   help="print the recording and the findings as JSON, for scripts")
    d.add_argument("--target", default="", metavar="ADDR", type=_target_address,
                   help="send the echoes to this IPv4 address instead of the interface's own "
                        "gateway (for a gateway that does not answer pings, or none found); "
                        "either way they leave through the Wi-Fi interface, also when a VPN "
                        "owns the default route")
    d.add_argument("--plot", default="", metavar="FILE.png", type=_plot_file,
                   help="also draw latency and throughput over time with scans shaded by "
                        "source, in the format of the file's suffix (png, svg, pdf, ...; png "
                        "without one); an existing file is overwritten, a symbolic link or a "
                        "file with other hard links is refused (needs python3-matplotlib)")
    d.set_defaults(func=cmd_diagnose, run_async=False)

    m = sub.add_parser("monitor", help="follow state changes, rates, scans and holds live",
                       description="Print changes as they happen until interrupted (Ctrl-C).")
    m.set_defaults(func=cmd_monitor, run_async=True)
    return p


def main(argv: list[str] | None = None) -> int:
    return closed_pipe_quiet(lambda: _main(argv))


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(format="scanguardctl: %(levelname)s: %(message)s", level=logging.WARNING)
    try:
        if args.run_async:
            return int(asyncio.run(args.func(args)))
        return int(args.func(args))
    except Failure as e:
        print(f"scanguardctl: {e}", file=sys.stderr)
        return e.code
    except (ConfigError, ProfileError) as e:
        print(f"scanguardctl: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
