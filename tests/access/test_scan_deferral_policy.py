"""ScanRequestDeferred and ScanRequestSeen on a default-deny bus with the shipped policy file:
only polkitd's helper (user polkitd) and root may report a scan request; nobody gets
AccessDenied from the daemon and changes nothing.  Also: the daemon publishes "defer" in the
state file while a hold defers and "watch" otherwise, scanguardctl shows the counts for a
non-ASCII profile, and the requests seen are kept in RecentScanRequests, each user seeing who
asked only for their own (GetRecentScanRequests)."""

from __future__ import annotations

import asyncio
import json
import pwd
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from nm_scanguard.daemon.deferral import DEFER_FILE
from tests.api.harness import api_call, error_of, props, scanguardctl
from tests.conftest import assert_eventually, stop_process
from tests.peers import REPO, env_for

ACCESS_DENIED = "org.freedesktop.DBus.Error.AccessDenied"
CAFE = "Café ☕"

@pytest.fixture(autouse=True)
def _polkitd_user() -> None:
    """Fail loudly, not skip: make test installs polkitd, which creates the user."""
    if not any(p.pw_name == "polkitd" for p in pwd.getpwall()):
        pytest.fail("no user polkitd on this machine: apt install polkitd")


class Client:
    """tests/access/client.py as `user` (see tests/access/conftest.py's Nobody)."""

    def __init__(self, address: str, user: str) -> None:
        env = env_for(address)
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        self.process = subprocess.Popen(
            ["setpriv", f"--reuid={user}", "--regid=nogroup", "--clear-groups", sys.executable,
             str(Path(__file__).parent / "client.py")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=REPO, text=True)
        if not self.process.stdout.readline():
            raise RuntimeError(f"the client running as {user} did not connect to the bus")

    def deferred(self, user: str, pid: int, program: str) -> dict[str, Any]:
        return self.send("ScanRequestDeferred", "sus", [user, pid, program])

    def seen(self, user: str, pid: int, program: str, refused: bool, uptime: float) -> dict[str, Any]:
        return self.send("ScanRequestSeen", "susbd", [user, pid, program, refused, uptime])

    def send(self, member: str, sig: str, body: list[Any],
             iface: str = "io.github.nm_scanguard.ScanGuard1") -> dict[str, Any]:
        req = {"dest": "io.github.nm_scanguard.ScanGuard1", "path": "/io/github/nm_scanguard/ScanGuard1",
               "iface": iface, "member": member, "sig": sig, "body": body}
        self.process.stdin.write(json.dumps(req) + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def close(self) -> None:
        stop_process(self.process)


@pytest.fixture
def clients(strict_bus) -> Iterator[Any]:
    made: list[Client] = []

    def make(user: str) -> Client:
        made.append(Client(strict_bus.address, user))
        return made[-1]

    try:
        yield make
    finally:
        for c in made:
            c.close()


async def counted(scenario) -> int:
    return (await scenario.device())["scan_requests_deferred"]


async def test_only_polkitd_and_root_may_report_a_deferred_scan(strict_scenario, clients):
    s = strict_scenario
    s.nm.rename_profile(s.conn, CAFE)
    await assert_eventually(lambda: _named(s, CAFE), message="profile renamed")
    state_file = Path(s.daemon.state_dir) / DEFER_FILE
    await assert_eventually(lambda: _watching(state_file), message="watching while idle")

    nobody, polkitd = clients("nobody"), clients("polkitd")
    refused = nobody.deferred(CAFE, 4242, "waybar")
    assert refused["error"] == ACCESS_DENIED
    assert "polkitd" in refused["text"] and "Rejected send message" not in refused["text"]

    reply = await api_call(s.bus, "Hold", "sss", ["test", "org.example.Test", ""])  # as root
    assert error_of(reply) is None
    await assert_eventually(lambda: _deferring(s), message="deferring while held")
    text = state_file.read_text()
    assert text.startswith(f"defer {s.daemon.process.pid} ") and oct(state_file.stat().st_mode)[-3:] == "644"

    assert polkitd.deferred(CAFE, 4242, "waybar") == {"body": []}
    await assert_eventually(lambda: _count(s, 1), message="counted once")
    assert nobody.deferred(CAFE, 1, "x")["error"] == ACCESS_DENIED
    assert (await api_call(s.bus, "ScanRequestDeferred", "sus", ["root", 1, "nmcli"])).message_type.name \
        == "METHOD_RETURN"
    await assert_eventually(lambda: _count(s, 2), message="root's report counted")
    assert await counted(s) == 2  # nobody's did not count

    status = await asyncio.to_thread(scanguardctl, s.address, "status", user="nobody")
    assert status.returncode == 0, status.stderr
    assert f"('{CAFE}'): held" in status.stdout
    assert "client scans refused (2 requests so far)" in status.stdout
    log = Path(s.daemon.log_path).read_text(encoding="utf-8")
    assert f"refused a Wi-Fi scan request from user '{CAFE}' ('waybar', pid 4242)" in log

    (cookie,) = reply.body
    assert error_of(await api_call(s.bus, "Release", "u", [cookie])) is None
    await assert_eventually(lambda: _watching(state_file), message="back to watching when idle")
    assert not (await s.device())["deferring_scans"]
    # a report arriving after the guard went idle is accepted but not counted
    assert polkitd.deferred(CAFE, 4242, "waybar") == {"body": []}
    assert await counted(s) == 2
    js = json.loads((await asyncio.to_thread(scanguardctl, s.address, "status", "--json")).stdout)
    assert js["devices"][0]["scan_requests_deferred"] == 2 and js["devices"][0]["connection_id"] == CAFE


async def test_the_requests_the_rule_saw_are_kept_for_diagnose(strict_scenario, clients):
    s = strict_scenario
    nobody, polkitd = clients("nobody"), clients("polkitd")
    up = float(Path("/proc/uptime").read_text().split()[0])
    refused = nobody.seen(CAFE, 4242, "waybar", False, up)
    assert refused["error"] == ACCESS_DENIED and "ScanRequestSeen" in refused["text"]
    assert polkitd.seen(CAFE, 4242, "nmcli", False, up - 2.0) == {"body": []}
    bad = polkitd.seen(CAFE, 1, "x", False, float("nan"))
    assert bad["error"] == "org.freedesktop.DBus.Error.InvalidArgs" and "uptime" in bad["text"]
    (entry,) = (await props(s.bus))["RecentScanRequests"]
    at, user, pid, program, was_refused = entry
    assert (user, pid, program, was_refused) == ("", 0, "", False)  # the property names nobody
    assert abs(time.time() - 2.0 - at) < 1.0  # the boot-time clock turned into the wall clock
    (entry,) = (await api_call(s.bus, "GetRecentScanRequests")).body[0]  # as root
    assert tuple(entry) == (at, CAFE, 4242, "nmcli", False)
    assert await counted(s) == 0  # allowed requests are not refusals


@pytest.mark.parametrize("program", ["nmcli", CAFE])
async def test_a_user_sees_who_asked_only_for_their_own_scan_requests(strict_scenario, clients,
                                                                      program):
    """Every local user reads RecentScanRequests; it must not show them other users' processes
    (hidepid).  GetRecentScanRequests names the caller's own, and root's call names all."""
    s = strict_scenario
    nobody, polkitd = clients("nobody"), clients("polkitd")
    up = float(Path("/proc/uptime").read_text().split()[0])
    assert polkitd.seen("nobody", 4242, program, False, up) == {"body": []}
    assert polkitd.seen(CAFE, 777, "waybar", True, up) == {"body": []}  # another user's

    mine = nobody.send("GetRecentScanRequests", "", [])
    assert [e[1:] for e in mine["body"][0]] == [["nobody", 4242, program, False],
                                                ["", 0, "", True]]
    public = nobody.send("GetAll", "s", ["io.github.nm_scanguard.ScanGuard1"],
                         iface="org.freedesktop.DBus.Properties")
    assert [e[1:] for e in public["body"][0]["RecentScanRequests"]] == [["", 0, "", False],
                                                                        ["", 0, "", True]]
    every = (await api_call(s.bus, "GetRecentScanRequests")).body[0]  # as root
    assert [list(e)[1:] for e in every] == [["nobody", 4242, program, False],
                                            [CAFE, 777, "waybar", True]]


async def test_stopping_the_daemon_removes_the_state_file(strict_scenario):
    s = strict_scenario
    state_file = Path(s.daemon.state_dir) / DEFER_FILE
    reply = await api_call(s.bus, "Hold", "sss", ["test", "org.example.Test", ""])
    assert error_of(reply) is None
    await assert_eventually(lambda: state_file.exists(), message="deferring while held")
    s.daemon.process.terminate()
    await asyncio.to_thread(s.daemon.process.wait, 20)
    assert not state_file.exists()


async def _watching(state_file: Path) -> bool:
    return state_file.exists() and state_file.read_text().startswith("watch ")


async def _named(s, name: str) -> bool:
    d = await s.device()
    return d is not None and d["connection_id"] == name


async def _deferring(s) -> bool:
    d = await s.device()
    return bool(d and d["deferring_scans"])


async def _count(s, n: int) -> bool:
    return await counted(s) == n
