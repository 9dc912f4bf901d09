"""polkitd as a user's authentication agent that never answers makes it: a check that allows
user interaction (flag 1) waits until CancelCheckAuthorization names its cancellation id, then
gets polkitd's Cancelled error; any other check is answered "not authorised".  For the tests of
what a flood of interactive calls costs the daemon (tests/access/test_local_user_limits.py).

    python3 tests/mocks/polkit_silent.py BUS_ADDRESS

prints "ready" once it owns org.freedesktop.PolicyKit1.  Waiting() on org.freedesktop.DBus.Mock
returns the cancellation ids of the checks waiting and how many were withdrawn.
"""

from __future__ import annotations

import asyncio
import inspect
import sys

from nm_scanguard.dbuslib import Message, MessageBus, MessageType

NAME = "org.freedesktop.PolicyKit1"
PATH = "/org/freedesktop/PolicyKit1/Authority"
AUTHORITY = "org.freedesktop.PolicyKit1.Authority"
ALLOW_USER_INTERACTION = 1


async def main(address: str) -> None:
    bus = await MessageBus(bus_address=address).connect()
    waiting: dict[str, Message] = {}
    withdrawn = 0
    pending_sends: set[object] = set()

    def send(msg: Message) -> None:
        sent = bus.send(msg)
        if inspect.isawaitable(sent):  # dbus-fast
            task = asyncio.ensure_future(sent)
            pending_sends.add(task)
            task.add_done_callback(pending_sends.discard)

    def handler(msg: Message):
        nonlocal withdrawn
        if msg.message_type != MessageType.METHOD_CALL or msg.path != PATH:
            return None
        if msg.interface == AUTHORITY and msg.member == "CheckAuthorization":
            _subject, _action, _details, flags, cancellation_id = msg.body
            if flags & ALLOW_USER_INTERACTION:
                waiting[cancellation_id or f"(none) {msg.sender} {msg.serial}"] = msg
                return True  # no answer, as an agent nobody answers
            return Message.new_method_return(msg, "(bba{ss})", [[False, False, {}]])
        if msg.interface == AUTHORITY and msg.member == "CancelCheckAuthorization":
            (cancellation_id,) = msg.body
            check = waiting.pop(cancellation_id, None)
            if check is None or check.sender != msg.sender:
                return Message.new_error(msg, "org.freedesktop.PolicyKit1.Error.Failed",
                                         f"No such cancellation_id '{cancellation_id}'")
            send(Message.new_error(check, "org.freedesktop.PolicyKit1.Error.Cancelled",
                                   "The authorization check was cancelled"))
            withdrawn += 1
            return Message.new_method_return(msg)
        if msg.interface == "org.freedesktop.DBus.Mock" and msg.member == "Waiting":
            return Message.new_method_return(msg, "asu", [sorted(waiting), withdrawn])
        return None

    bus.add_message_handler(handler)
    await bus.request_name(NAME)
    print("ready", flush=True)
    await bus.wait_for_disconnect()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
