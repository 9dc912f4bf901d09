"""A D-Bus client for the access tests (tests/access), run as an unprivileged user (setpriv).

Reads one JSON request per line on stdin: {"dest", "path", "iface", "member", "sig", "body"}, or
{"own": NAME}; answers one JSON line: {"body": [...]} or {"error": NAME, "text": TEXT}.
{"signal": true, ...} sends a signal instead (to "dest", which may be a unique name), answered
{"sent": true} once the bus has it; a "props" field {name: [signature, value]} is appended to
the body as an a{sv}, then an empty "as" (PropertiesChanged); "big_av": N sends an "av" of N
variants instead of the body.  {"burst": N, ...} makes the call
N times at once (with message "flags", e.g. 4: interactive authorisation), answered, once all
are or after "wait" seconds, {"ok": replies, "errors": [error names], "waiting": unanswered}.
The first line it prints is {"unique_name": ...}.
"""

import asyncio
import inspect
import json
import sys

from nm_scanguard.peers.bus import unwrap
from nm_scanguard.dbuslib import BusType, Message, MessageBus, MessageFlag, MessageType, Variant


async def send_signal(bus: MessageBus, req: dict) -> None:
    body = list(req.get("body", []))
    if "big_av" in req:  # an array of that many variants: 4 bytes each on the wire
        body = [[Variant("y", 1)] * req["big_av"]]
    if "props" in req:
        body += [{k: Variant(sig, v) for k, (sig, v) in req["props"].items()}, []]
    sent = bus.send(Message(message_type=MessageType.SIGNAL, destination=req["dest"],
                            path=req["path"], interface=req["iface"], member=req["member"],
                            signature=req.get("sig", ""), body=body))
    if inspect.isawaitable(sent):
        await sent
    # The bus handles one connection's messages in order: once it answers this, it has routed
    # the signal.
    await bus.call(Message(destination="org.freedesktop.DBus", path="/org/freedesktop/DBus",
                           interface="org.freedesktop.DBus.Peer", member="Ping"))


unanswered: set = set()


async def main() -> None:
    bus = await MessageBus(bus_type=BusType.SYSTEM).connect()
    print(json.dumps({"unique_name": bus.unique_name}), flush=True)
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        req = json.loads(line)
        if req.get("signal"):
            await send_signal(bus, req)
            print(json.dumps({"sent": True}), flush=True)
            continue
        if req.get("burst"):
            msgs = [Message(destination=req["dest"], path=req["path"], interface=req["iface"],
                            member=req["member"], signature=req.get("sig", ""),
                            body=req.get("body", []), flags=MessageFlag(req.get("flags", 0)))
                    for _ in range(req["burst"])]
            calls = [asyncio.ensure_future(bus.call(m)) for m in msgs]
            done, waiting = await asyncio.wait(calls, timeout=req.get("wait"))
            unanswered.update(waiting)  # kept referenced: their answers may come later
            replies = [c.result() for c in done]
            errors = [r.error_name for r in replies if r.message_type == MessageType.ERROR]
            print(json.dumps({"ok": len(replies) - len(errors), "errors": errors,
                              "waiting": len(waiting)}), flush=True)
            continue
        if "own" in req:
            req = {"dest": "org.freedesktop.DBus", "path": "/org/freedesktop/DBus",
                   "iface": "org.freedesktop.DBus", "member": "RequestName", "sig": "su",
                   "body": [req["own"], 4]}
        reply = await bus.call(Message(destination=req["dest"], path=req["path"],
                                       interface=req["iface"], member=req["member"],
                                       signature=req.get("sig", ""), body=req.get("body", [])))
        if reply.message_type == MessageType.ERROR:
            out = {"error": reply.error_name, "text": reply.body[0] if reply.body else ""}
        else:
            out = {"body": unwrap(reply.body)}
        print(json.dumps(out), flush=True)
    bus.disconnect()


asyncio.run(main())
