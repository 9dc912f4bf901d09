"""Who is calling the system-bus API: the caller's uid as the bus knows it, polkit's answer for
an action, and whether a scan report comes from the user polkitd runs the rule's helper as."""

from __future__ import annotations

import asyncio
import logging
import pwd
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from ..dbuslib import Message, MessageBus, Variant
from ..names import ACCESS_DENIED, ACTION_RELOAD, DBUS, ERROR_NOT_READY, INVALID_ARGS, POLKIT
from ..peers.bus import BusError, call
from ..text import MAX_TEXT, quoted
from .export import CallError

log = logging.getLogger("scanguard.api")

# The user polkitd runs rules' helpers as (polkit.spawn); only it and root may report deferrals.
POLKIT_USER = "polkitd"
MAX_PROGRAM = 64  # /proc/PID/comm is at most 15 bytes; anything much longer is not from it
POLKIT_TIMEOUT = 25.0
POLKIT_INTERACTIVE_TIMEOUT = 120.0  # a person may be typing a password
ALLOW_INTERACTIVE_AUTHORIZATION = 0x4  # message header flag

T = TypeVar("T")

# The API's passwd look-ups run on one thread of their own: NSS may ask LDAP or SSSD, so not on
# the event loop, and not on asyncio's default pool, which grows to min(32, CPUs + 4) threads
# and keeps them: more than the unit's TasksMax=8 on a laptop with 4 CPUs, after one burst of
# calls from any local user.  One thread is the daemon's second task, whatever the burst.
_NSS = ThreadPoolExecutor(max_workers=1, thread_name_prefix="scanguard-nss")
# Look-ups asked for while the same one waits share its answer: a burst from one user costs one
# look-up, and the queue holds at most one per distinct question.
_in_flight: dict[tuple[Any, ...], asyncio.Future[Any]] = {}


async def off_loop(fn: Callable[..., T], *args: Any) -> T:
    """fn(*args) on the look-up thread."""
    key = (fn, *args)
    future = _in_flight.get(key)
    if future is None:
        future = asyncio.get_running_loop().run_in_executor(_NSS, fn, *args)
        _in_flight[key] = future
        future.add_done_callback(lambda _: _in_flight.pop(key, None))
    # shield: a caller that goes away must not cancel the look-up the others wait for
    return await asyncio.shield(future)


async def caller_uid(bus: MessageBus, sender: str) -> int:
    try:
        (uid,) = await call(bus, *DBUS, "GetConnectionUnixUser", "s", [sender])
    except BusError as e:
        raise CallError(ACCESS_DENIED, f"cannot tell who is calling ({e})") from None
    return int(uid)


async def authorize(bus: MessageBus, msg: Message, uid: int, action: str, what: str) -> None:
    """Return if polkit allows `action` for the caller (root always may), else refuse."""
    if uid == 0:
        return
    interactive = bool(int(msg.flags) & ALLOW_INTERACTIVE_AUTHORIZATION)
    subject = ["system-bus-name", {"name": Variant("s", msg.sender)}]
    try:
        ((authorized, challenge, _details),) = await call(
            bus, *POLKIT, "CheckAuthorization", "(sa{sv})sa{ss}us",
            [subject, action, {}, 1 if interactive else 0, ""],
            timeout=POLKIT_INTERACTIVE_TIMEOUT if interactive else POLKIT_TIMEOUT)
    except BusError as e:
        log.warning("polkit could not be asked about %s (%s); refusing non-root callers", action, e)
        raise CallError(ERROR_NOT_READY, f"{what} needs polkit authorisation ({action}), but "
                        f"polkit did not answer ({e.name}); is polkitd installed and running? "
                        "root may always do this") from None
    if not authorized:
        if challenge:
            raise CallError(ACCESS_DENIED, f"{what} needs authentication (polkit action "
                            f"{action}); allow interactive authorisation or run as root")
        who = ("administrators may (polkit asks them for their password)"
               if action == ACTION_RELOAD else
               "active local sessions may, others need an administrator")
        raise CallError(ACCESS_DENIED, f"not authorised to {what} (polkit action {action} "
                        f"said no); {who}")


async def reporter(bus: MessageBus, msg: Message, method: str, user: str, pid: int,
                   program: str) -> str:
    """Check that polkitd's helper (or root) reports, and that the texts are sane; the
    words naming who asked, for the log."""
    uid = await caller_uid(bus, msg.sender)
    if uid != 0 and uid != await off_loop(polkit_uid):
        raise CallError(ACCESS_DENIED, f"only polkitd's helper (user polkitd) or root may call "
                        f"{method}; it reports a Wi-Fi scan request the nm-scanguard "
                        "polkit rule saw")
    if len(user) > MAX_TEXT or len(program) > MAX_PROGRAM:
        raise CallError(INVALID_ARGS, f"user ({len(user)} characters) or program "
                        f"({len(program)}) is too long: at most {MAX_TEXT} and {MAX_PROGRAM}")
    who = f"user {quoted(user)}" if user else "a user"
    return who + (f" ({quoted(program) + ', ' if program else ''}pid {pid})" if pid else "")


_polkit_uid: int | None = None


def user_name(uid: int) -> str:
    """The name of user `uid` as polkit gives it (the first passwd entry), or "" if none."""
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return ""


def polkit_uid() -> int | None:
    """polkitd's uid (None when the system has no such user).  Kept once found: a system
    user's uid does not change while it exists.  Not found is asked again next time, so that
    installing polkitd after the daemon started needs no restart."""
    global _polkit_uid
    if _polkit_uid is None:
        try:
            _polkit_uid = pwd.getpwnam(POLKIT_USER).pw_uid
        except KeyError:
            return None
    return _polkit_uid
