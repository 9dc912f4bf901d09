"""scanguardctl hold and reload: keep bgscan off around a command; reload the settings."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time

from ..dbuslib import Message, MessageBus, MessageFlag, MessageType
from ..names import BUS_NAME as NAME
from ..names import ERROR_UNKNOWN_HOLD, IFACE, PATH
from ..peers.bus import (
    BusError,
    NameOwners,
    add_match,
    call,
)
from ..text import shown
from .common import HOLD_TIMEOUT, Failure, connect, explain

# ---- hold ------------------------------------------------------------------------------------

# hold's own failures (no command, no hold under --strict, a usage error) exit with this code, as
# timeout(1) and env(1) do, so that a script can tell them from the command's own status; 126
# and 127 keep their shell meaning (the command cannot run, is not found).
HOLD_FAILED = 125
# Said where the daemon's reply says `use "" for every Wi-Fi interface`, its API's terms.
_API_EVERY_INTERFACE = 'use "" for every Wi-Fi interface'
_CLI_EVERY_INTERFACE = "omit --interface to hold every Wi-Fi interface"
# A command that exits sooner than this many seconds after it started most likely ended before
# what the hold was for: a program that hands its work to an instance already running
# (`firefox URL` with Firefox open, `code FILE`) returns at once, and the hold with it.
QUICK_EXIT = 5.0
# The signals that end a hold without a command: Ctrl-C, kill, the terminal closing.
END_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _warn(text: str) -> None:
    print(f"scanguardctl: warning: {text}", file=sys.stderr, flush=True)


class Holder:
    """The hold around one command (or, with `program` None, until a signal ends it), kept
    while the command runs: taken at the start, taken again whenever the service's bus name
    gets a new owner (a restart, an upgrade, a service that was down at the start), released
    at the end.  A hold that cannot be taken is a warning, never a reason to stop the command:
    only --strict refuses to start it."""

    def __init__(self, args: argparse.Namespace, program: str | None) -> None:
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
            _warn(f"the scanguard service stopped, so {self._unheld()} until it is back")
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
                      f"{why}; " + (f"{self.program} keeps running without it" if self.program
                                    else "nothing is held until it starts again"))
                return

    def _unheld(self) -> str:
        return f"{self.program} runs without a hold" if self.program else "nothing is held"

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
    program = shown(command[0]) if command else None
    holder = Holder(args, program)
    try:
        why = await holder.start()
        if program is None:
            if why is not None:  # with no command to run, a hold is all there is to do
                raise Failure(f"no hold could be taken: {why}", HOLD_FAILED)
            return await _hold_until_ended(args)
        if why is not None:
            if args.strict:
                raise Failure(f"no hold could be taken, so {program} was not run (--strict): "
                              f"{why}", HOLD_FAILED)
            _warn(f"running {program} without a hold, so Wi-Fi background scans may run during "
                  f"it: {why} (--strict would not run it)")
        began = time.monotonic()
        rc = await _run(command)
        took = time.monotonic() - began
        if why is None and took < QUICK_EXIT and rc not in (126, 127):
            _warn(f"the hold ended after {took:.1f} s, when {program} exited: a command that "
                  "hands its work to an instance already running (such as `firefox URL` "
                  "while Firefox is open) returns at once; to hold for as long as you need, "
                  "run `scanguardctl hold --reason REASON` without a command and press Ctrl-C "
                  "when done")
        return rc
    finally:
        await holder.stop()


async def _hold_until_ended(args: argparse.Namespace) -> int:
    """Hold until Ctrl-C, SIGTERM or SIGHUP: each ends it normally (exit 0, the hold
    released), since ending it is the only way a hold without a command is meant to end."""
    loop = asyncio.get_running_loop()
    ended = asyncio.Event()
    for sig in END_SIGNALS:
        loop.add_signal_handler(sig, ended.set)
    try:
        where = (f"interface {shown(args.interface)}" if args.interface
                 else "every Wi-Fi interface")
        why = f" ({shown(args.reason)})" if args.reason else ""
        print(f"holding{why}: Wi-Fi background scans stay suspended on {where} until you press "
              f"Ctrl-C or send SIGTERM (kill {os.getpid()})", flush=True)
        await ended.wait()
    finally:
        for sig in END_SIGNALS:
            loop.remove_signal_handler(sig)
    return 0


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
