"""Who is calling the system-bus API: the caller's uid as the bus knows it, polkit's answer for
an action, and whether a scan report comes from the user polkitd runs the rule's helper as."""

from __future__ import annotations

import asyncio
import logging
import pwd
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from ... import log_lines
from ...dbuslib import Message, MessageBus, Variant
from ...names import ACCESS_DENIED, ACTION_RELOAD, DBUS, ERROR_NOT_READY, INVALID_ARGS, POLKIT
from ...peers.bus import NO_REPLY, TIMEOUT, BusError, call
from ...text import MAX_TEXT
from .export import CallError

log = logging.getLogger("scanguard.api")

# The user polkitd runs rules' helpers as (polkit.spawn); only it and root may report deferrals.
POLKIT_USER = "polkitd"
MAX_PROGRAM = 64  # /proc/PID/comm is at most 15 bytes; anything much longer is not from it
# How long the daemon waits for polkit's answer; at that time it withdraws the check
# (CancelCheckAuthorization).  polkitd itself waits without a limit for an authentication agent.
POLKIT_TIMEOUT = 25.0
POLKIT_INTERACTIVE_TIMEOUT = 120.0  # a person may be typing a password
CANCEL_TIMEOUT = 5.0
ALLOW_INTERACTIVE_AUTHORIZATION = 0x4  # message header flag
# Polkit checks waiting at once (root is never asked): per client connection, per user, in
# all.  A user may register an authentication agent for their own process that never answers,
# and each waiting check holds one of the replies the bus lets our connection await
# (dbus-daemon's max_replies_per_connection: 128 on Debian's system bus); the calls that
# suspend and restore bgscan keep the other 96 (a guard awaits a few at a time).  The same caps
# as for Hold calls alone (holds.py), now over Hold and Reload together.
MAX_CHECKS_PER_CALLER = 4
MAX_CHECKS_PER_UID = 8
MAX_CHECKS = 32
LIMITS_EXCEEDED = "org.freedesktop.DBus.Error.LimitsExceeded"

T = TypeVar("T")

# The API's passwd look-ups run on one thread of their own: NSS may ask LDAP or SSSD, so not on
# the event loop, and not on asyncio's default pool, which grows to min(32, CPUs + 4) threads
# and keeps them: more than the unit's TasksMax=8 on a laptop with 4 CPUs, after one burst of
# calls from any local user.  One thread is the daemon's second task, whatever the burst.
_NSS = ThreadPoolExecutor(max_workers=1, thread_name_prefix="scanguard-nss")
# Look-ups asked for while the same one waits, by what they ask: one answer for all of them.
_waiting: dict[tuple[Any, ...], asyncio.Future[Any]] = {}


async def shared(key: tuple[Any, ...], ask: Callable[[], Awaitable[T]]) -> T:
    """The answer of `ask()`, asked once for every caller that wants `key` while it waits.
    Shielded: a caller that goes away does not cancel it for the others.  Nothing is kept once
    it is done: the next caller asks again."""
    future = _waiting.get(key)
    if future is None:
        future = asyncio.ensure_future(ask())
        _waiting[key] = future
        future.add_done_callback(lambda _: _waiting.pop(key))
    # A shield whose caller left marks the answer as seen: an error nobody waits for any more
    # is not news.
    return await asyncio.shield(future)


async def off_loop(fn: Callable[..., T], *args: Any) -> T:
    """fn(*args) on the look-up thread; a burst of the same look-up from one user costs one,
    and the queue holds at most one per distinct question."""
    loop = asyncio.get_running_loop()
    return await shared(("nss", fn, *args), lambda: loop.run_in_executor(_NSS, fn, *args))


async def caller_uid(bus: MessageBus, sender: str) -> int:
    """The uid the bus knows `sender` by.  A unique name is one connection's for the bus's life,
    so one answer serves every call of a burst from it: 300 questions at once can keep the bus
    beyond its reply timeout on a loaded machine, and a caller whose uid is not known in time
    is refused.  (The waiting look-up holds `bus`, so its id is not reused meanwhile.)"""
    return await shared(("uid", id(bus), sender), lambda: _ask_uid(bus, sender))


async def _ask_uid(bus: MessageBus, sender: str) -> int:
    try:
        (uid,) = await call(bus, *DBUS, "GetConnectionUnixUser", "s", [sender])
    except BusError as e:
        raise CallError(ACCESS_DENIED, f"cannot tell who is calling ({e})") from None
    return int(uid)


class PolkitChecks:
    """The polkit checks waiting for an answer, by caller and by user, against the caps."""

    def __init__(self, per_caller: int = MAX_CHECKS_PER_CALLER, per_uid: int = MAX_CHECKS_PER_UID,
                 total: int = MAX_CHECKS) -> None:
        self.per_caller, self.per_uid, self.total = per_caller, per_uid, total
        self._callers: dict[str, int] = {}
        self._uids: dict[int, int] = {}
        self._next = 0
        self.withdrawn = 0  # checks withdrawn at our timeout (CancelCheckAuthorization answered)

    def enter(self, caller: str, uid: int, what: str) -> str:
        """Count one check in, or refuse if a cap is reached; its cancellation id.  No await
        between the check and the count: concurrent calls cannot race past a cap."""
        if self._callers.get(caller, 0) >= self.per_caller:
            why = f"this connection already waits for {self.per_caller} answers"
        elif self._uids.get(uid, 0) >= self.per_uid:
            why = f"user {uid} already waits for {self.per_uid} answers"
        elif len(self) >= self.total:
            why = f"{self.total} answers are awaited, the most the daemon waits for at once"
        else:
            self._callers[caller] = self._callers.get(caller, 0) + 1
            self._uids[uid] = self._uids.get(uid, 0) + 1
            self._next += 1
            return f"nm-scanguard-{self._next}"
        raise CallError(LIMITS_EXCEEDED, f"cannot {what} now: {why} from polkit (an "
                        "authentication agent that has not answered); try again once it has")

    def leave(self, caller: str, uid: int) -> None:
        self._callers[caller] -= 1
        if not self._callers[caller]:
            del self._callers[caller]
        self._uids[uid] -= 1
        if not self._uids[uid]:
            del self._uids[uid]

    def __len__(self) -> int:
        return sum(self._callers.values())


async def authorize(bus: MessageBus, msg: Message, uid: int, action: str, what: str,
                    checks: PolkitChecks) -> None:
    """Return if polkit allows `action` for the caller (root always may), else refuse.  At most
    `checks`' caps wait at once; a check polkit has not answered by our timeout is withdrawn
    (CancelCheckAuthorization), so that the reply the bus keeps pending for it ends too."""
    if uid == 0:
        return
    interactive = bool(int(msg.flags) & ALLOW_INTERACTIVE_AUTHORIZATION)
    subject = ["system-bus-name", {"name": Variant("s", msg.sender)}]
    cancellation_id = checks.enter(msg.sender, uid, what)
    try:
        ((authorized, challenge, _details),) = await call(
            bus, *POLKIT, "CheckAuthorization", "(sa{sv})sa{ss}us",
            [subject, action, {}, 1 if interactive else 0, cancellation_id],
            timeout=POLKIT_INTERACTIVE_TIMEOUT if interactive else POLKIT_TIMEOUT)
    except asyncio.CancelledError:
        _withdraw(bus, cancellation_id, checks)  # the daemon is stopping
        raise
    except BusError as e:
        if e.name in (TIMEOUT, NO_REPLY):
            _withdraw(bus, cancellation_id, checks)
        log.warning("polkit could not be asked about %s (%s); refusing non-root callers", action, e)
        raise CallError(ERROR_NOT_READY, f"{what} needs polkit authorisation ({action}), but "
                        f"polkit did not answer ({e.name}); is polkitd installed and running? "
                        "root may always do this") from None
    finally:
        checks.leave(msg.sender, uid)
    if not authorized:
        if challenge:
            raise CallError(ACCESS_DENIED, f"{what} needs authentication (polkit action "
                            f"{action}); allow interactive authorisation or run as root")
        who = ("administrators may (polkit asks them for their password)"
               if action == ACTION_RELOAD else
               "active local sessions may, others need an administrator")
        raise CallError(ACCESS_DENIED, f"not authorised to {what} (polkit action {action} "
                        f"said no); {who}")


def _withdraw(bus: MessageBus, cancellation_id: str, checks: PolkitChecks) -> None:
    """Ask polkitd to drop a check we stopped waiting for: it answers the check with an error,
    which ends the reply the bus kept pending for it."""
    async def cancel() -> None:
        try:
            await call(bus, *POLKIT, "CancelCheckAuthorization", "s", [cancellation_id],
                       timeout=CANCEL_TIMEOUT)
        except BusError as e:
            log.debug("polkit did not withdraw check %s: %s", cancellation_id, e)
        else:
            checks.withdrawn += 1

    task = asyncio.ensure_future(cancel())
    _withdrawing.add(task)
    task.add_done_callback(_withdrawing.discard)


_withdrawing: set[asyncio.Future[None]] = set()  # kept referenced until done


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
    return log_lines.who(user, pid, program)


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
