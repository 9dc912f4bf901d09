"""What one local user without privileges can send, and what it costs the daemon (issue 47):
each test makes the attack from user nobody on a default-deny bus with the shipped policy, against
the real daemon process, and checks that the guard goes on for everyone."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

import pytest

from nm_scanguard.daemon.api.callers import LIMITS_EXCEEDED, MAX_CHECKS_PER_CALLER, MAX_CHECKS_PER_UID
from nm_scanguard.names import BUS_NAME, DBUS
from nm_scanguard.peers.bus import call
from tests.api.harness import BGSCAN, api_call, error_of
from tests.conftest import PrivateBus, assert_eventually, stop_process
from tests.peers import REPO, Link, env_for

from .conftest import scenario_on

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
        assert out == {"ok": 100, "errors": [], "waiting": 0}, out
    assert threads(pid) <= before + 1, (before, threads(pid))
    await guard_still_works(s)


class SilentPolkit:
    """tests/mocks/polkit_silent.py: interactive checks wait until withdrawn."""

    def __init__(self, address: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(REPO / "tests" / "mocks" / "polkit_silent.py"), address],
            stdout=subprocess.PIPE, env=env_for(address), cwd=REPO, text=True)
        if self.process.stdout.readline().strip() != "ready":
            raise RuntimeError("the silent polkit mock did not start")

    async def waiting(self, bus) -> tuple[list[str], int]:
        ids, withdrawn = await call(bus, "org.freedesktop.PolicyKit1",
                                    "/org/freedesktop/PolicyKit1/Authority",
                                    "org.freedesktop.DBus.Mock", "Waiting")
        return list(ids), int(withdrawn)

    def close(self) -> None:
        stop_process(self.process)


@pytest.fixture
def silent_polkit(strict_bus: PrivateBus) -> Iterator[SilentPolkit]:
    polkit = SilentPolkit(strict_bus.address)
    try:
        yield polkit
    finally:
        polkit.close()


@pytest.fixture
async def silent_scenario(strict_bus: PrivateBus, silent_polkit: SilentPolkit, link: Link,
                          tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    async with scenario_on(strict_bus, link, tmp_path, request) as s:
        yield s


INTERACTIVE = 4  # the message flag ALLOW_INTERACTIVE_AUTHORIZATION


async def test_a_flood_of_interactive_reloads_leaves_the_daemon_its_own_calls(silent_scenario,
                                                                               silent_polkit,
                                                                               nobody):
    """140 interactive Reload calls from nobody, polkit never answering (an agent nobody
    answers): the daemon waits for a capped number, refuses the rest at once, and a hold and
    its release still suspend and restore bgscan (before the caps, the waiting checks took
    the replies the bus lets the daemon await, and its own calls failed with LimitsExceeded)."""
    s = silent_scenario
    outs = []
    for client in (nobody(), nobody(), nobody()):
        outs.append(await asyncio.to_thread(client.request, **API, member="Reload", sig="",
                                            body=[], flags=INTERACTIVE, burst=140, wait=2.0))
    waiting = sum(o["waiting"] for o in outs)
    assert waiting == MAX_CHECKS_PER_UID, outs  # per connection 4, per user 8
    assert all(o["waiting"] <= MAX_CHECKS_PER_CALLER for o in outs), outs
    assert {e for o in outs for e in o["errors"]} == {LIMITS_EXCEEDED}, outs
    ids, _ = await silent_polkit.waiting(s.bus)
    assert len(ids) == waiting and all(i.startswith("nm-scanguard-") for i in ids), ids
    await guard_still_works(s)


def peak_rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"^VmHWM:\s+(\d+) kB$", status, re.M)[1]) / 1024


@pytest.mark.parametrize("megabytes", [3, 8])
async def test_a_large_message_is_dropped_before_the_daemon_reads_it(strict_scenario, nobody,
                                                                    megabytes):
    """A signal to the daemon's unique name from nobody, an array of variants (about 30 times
    its size as Python objects): the daemon stays the same process under 100 MiB at its peak,
    says so in one line naming the sender, and a hold and its release still work.  Before the
    Gate, 3 MB took it to 115 MiB and 7 MB past the unit's MemoryMax of 192 MiB."""
    s = strict_scenario
    pid = s.daemon.process.pid
    (owner,) = await call(s.bus, *DBUS, "GetNameOwner", "s", [BUS_NAME])
    client = nobody()
    for _ in range(2):
        out = await asyncio.to_thread(client.request, signal=True, dest=owner, path="/",
                                      iface="org.example.Flood", member="Big", sig="av",
                                      big_av=megabytes * 250_000)
        assert out == {"sent": True}, out
    await guard_still_works(s)
    assert s.daemon.process.pid == pid and peak_rss_mib(pid) < 100, peak_rss_mib(pid)
    log = s.daemon.log()
    dropped = [line for line in log.splitlines() if "dropped D-Bus message" in line]
    assert len(dropped) == 1 and f"from {client.unique_name}" in dropped[0], dropped
