"""What one local user without privileges can send, and what it costs the daemon (issue 47):
each test makes the attack from user nobody on a default-deny bus with the shipped policy, against
the real daemon process, and checks that the guard goes on for everyone."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from tests.api.harness import BGSCAN, api_call, error_of
from tests.conftest import assert_eventually

API = {"dest": "io.github.nm_scanguard.ScanGuard1", "path": "/io/github/nm_scanguard/ScanGuard1",
       "iface": "io.github.nm_scanguard.ScanGuard1"}


def threads(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^Threads:\s+(\d+)$", status, re.M)[1])


async def guard_still_works(s) -> None:
    """A hold taken as root suspends bgscan and its release restores it."""
    reply = await api_call(s.bus, "Hold", "sss", ["Café ☕", "Café ☕", ""])
    assert error_of(reply) is None, reply.body
    await assert_eventually(lambda: s.bgscan() == '""', message="bgscan suspended")
    reply = await api_call(s.bus, "Release", "u", [int(reply.body[0])])
    assert error_of(reply) is None, reply.body
    await assert_eventually(lambda: s.bgscan() == f'"{BGSCAN}"', message="bgscan restored")
    assert s.daemon.process.poll() is None


async def test_a_burst_of_calls_that_look_up_users_adds_one_thread_at_most(strict_scenario, nobody):
    """GetRecentScanRequests looks the caller's name up in passwd off the event loop.  The unit
    allows 8 tasks (TasksMax); asyncio's default pool would grow to min(32, CPUs + 4) threads
    in one burst and keep them (6 on this 2-core machine, 12 on an 8-CPU laptop)."""
    s = strict_scenario
    pid = s.daemon.process.pid
    before = threads(pid)
    client = nobody()
    for _ in range(3):
        out = await asyncio.to_thread(client.request, **API, member="GetRecentScanRequests",
                                      sig="", body=[], burst=100)
        assert out == {"ok": 100, "errors": []}, out
    assert threads(pid) <= before + 1, (before, threads(pid))
    await guard_still_works(s)
