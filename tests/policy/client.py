"""A D-Bus client for the policy tests, run as an unprivileged user (setpriv).

Reads one JSON request per line on stdin: {"dest", "path", "iface", "member", "sig", "body"}, or
{"own": NAME}; answers one JSON line: {"body": [...]} or {"error": NAME, "text": TEXT}.
The first line it prints is {"unique_name": ...}.
"""

import asyncio
import json
import sys

from nm_scanguard.bus import unwrap
from nm_scanguard.dbuslib import BusType, Message, MessageBus, MessageType


async def main() -> None:
    bus = await MessageBus(bus_type=BusType.SYSTEM).connect()
    print(json.dumps({"unique_name": bus.unique_name}), flush=True)
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        req = json.loads(line)
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
