"""Our polkit rule in the real polkitd (Debian 12: 122), asked with pkcheck by an unprivileged user.

See tests/access/realpolkit.py for how polkitd is run apart from the machine's own (private bus,
private mount namespace).  A test-only rule after ours says yes to wifi.scan, standing in for an
active local session; so "denied" below can only come from our rule.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Iterator

import pytest

from tests.conftest import assert_eventually
from tests.access.realpolkit import SCAN, UNRELATED, RealPolkit, StandIn, available, flood

@pytest.fixture(autouse=True)
def _real_polkitd_available() -> None:
    """Fail loudly, not skip: make test installs polkitd and network-manager."""
    if available() is not None:
        pytest.fail(str(available()))

AUTHORIZED, NOT_AUTHORIZED = 0, 1


@pytest.fixture(scope="module")
def polkitd() -> Iterator[RealPolkit]:
    p = RealPolkit()
    try:
        yield p
    finally:
        p.stop()


@pytest.fixture(autouse=True)
def allowed_at_start(polkitd: RealPolkit) -> None:
    polkitd.allow()


def test_polkitd_runs_our_rule_as_user_polkitd(polkitd):
    """polkitd dropped to its own user, so the helper reads the state file as polkitd does on a
    real system (a file polkitd cannot read would mean: no deferral)."""
    with open(f"/proc/{polkitd.process.pid}/status") as f:
        uids = next(line for line in f if line.startswith("Uid:")).split()[1:]
    import pwd
    assert set(uids) == {str(pwd.getpwnam("polkitd").pw_uid)}


def test_scans_are_allowed_while_nothing_is_guarded(polkitd):
    assert polkitd.pkcheck(SCAN) == AUTHORIZED


def test_scans_are_refused_while_the_daemon_defers(polkitd):
    polkitd.defer()
    r = polkitd.pkcheck_run(SCAN)
    assert r.returncode == NOT_AUTHORIZED, (r.stdout, r.stderr, polkitd.output())
    assert "Not authorized" in r.stderr  # NO, not "Authentication is needed" (AUTH_*)
    polkitd.allow()
    assert polkitd.pkcheck(SCAN) == AUTHORIZED


def test_root_is_never_refused(polkitd):
    polkitd.defer()
    assert polkitd.pkcheck(SCAN, user="root") == AUTHORIZED


def test_a_crashed_daemon_leaves_no_deferral_behind(polkitd):
    """The file still says defer, but the process it names is gone (or the pid is reused)."""
    polkitd.defer(pid=4194303)
    assert polkitd.pkcheck(SCAN) == AUTHORIZED
    polkitd.defer(pid=1)  # alive, but not the process that wrote the file (start time differs)
    assert polkitd.pkcheck(SCAN) == AUTHORIZED


def test_a_state_file_polkitd_cannot_read_means_allowed(polkitd):
    polkitd.defer()
    os.chmod(polkitd.state, 0o600)  # root's; polkitd's helper cannot read it
    assert polkitd.pkcheck(SCAN) == AUTHORIZED


def test_an_unrelated_action_is_unaffected(polkitd):
    idle = polkitd.pkcheck(UNRELATED)
    polkitd.defer()
    assert polkitd.pkcheck(UNRELATED) == idle


def test_without_our_rule_the_stand_in_allows_even_with_defer_written():
    """The control: the refusal above is our rule's, not the set-up's."""
    p = RealPolkit(with_rule=False)
    try:
        p.defer()
        assert p.pkcheck(SCAN) == AUTHORIZED
    finally:
        p.stop()


async def test_a_refusal_reaches_the_daemon_through_busctl(polkitd):
    """The helper's background busctl, run by polkitd as user polkitd, delivers
    ScanRequestSeen(user, pid, program, refused, uptime) to whoever owns our name (here: a
    stand-in), and waits for the reply: the daemon asks the bus for the caller's uid after the
    call arrived.  An allowed request is reported while the daemon watches, not otherwise."""
    from nm_scanguard.dbuslib import Message, MessageBus, MessageType
    from nm_scanguard.names import BUS_NAME, IFACE

    got: list[tuple[list, object]] = []
    tasks: list[asyncio.Future] = []
    bus = await MessageBus(bus_address=polkitd.bus.address).connect()

    async def answer(msg: Message) -> None:
        # what the daemon does first: ask the bus who is calling; the caller must still be there
        reply = await bus.call(Message(destination="org.freedesktop.DBus", path="/org/freedesktop/DBus",
                                       interface="org.freedesktop.DBus", member="GetConnectionUnixUser",
                                       signature="s", body=[msg.sender]))
        got.append((list(msg.body), reply.body[0] if reply.message_type == MessageType.METHOD_RETURN
                    else reply.error_name))
        bus.send(Message.new_method_return(msg))

    def on_call(msg: Message) -> bool | None:
        if msg.message_type == MessageType.METHOD_CALL and msg.member == "ScanRequestSeen" \
                and msg.interface == IFACE:
            tasks.append(asyncio.ensure_future(answer(msg)))
            return True
        return None

    bus.add_message_handler(on_call)
    try:
        await bus.request_name(BUS_NAME)
        polkitd.defer()
        r = await asyncio.to_thread(polkitd.pkcheck_run, SCAN)
        assert r.returncode == NOT_AUTHORIZED
        await assert_eventually(lambda: got, timeout=10, message="ScanRequestSeen received")
        (user, pid, program, refused, uptime), caller_uid = got[0]
        assert (user, program, refused) == ("nobody", "pkcheck", True) and pid > 1
        now = float(Path("/proc/uptime").read_text().split()[0])
        assert 0 <= now - uptime < 10  # when polkit asked, on the boot-time clock (10 ms steps)
        import pwd
        assert caller_uid == pwd.getpwnam("polkitd").pw_uid  # still on the bus when asked
        polkitd.watch()  # the daemon runs and does not guard: allowed, and reported
        assert await asyncio.to_thread(polkitd.pkcheck, SCAN) == AUTHORIZED
        await assert_eventually(lambda: len(got) == 2, timeout=10, message="allowed one reported")
        (user, _pid, program, refused, _up), _uid = got[1]
        assert (user, program, refused) == ("nobody", "pkcheck", False)
        polkitd.allow()  # no daemon: allowed, and nobody to tell
        assert await asyncio.to_thread(polkitd.pkcheck, SCAN) == AUTHORIZED
        await asyncio.sleep(0.5)
        assert len(got) == 2
    finally:
        bus.disconnect()


@pytest.mark.parametrize("mode", ["watch", "defer"])
async def test_a_flood_of_scan_requests_runs_the_helper_a_few_times_a_second(polkitd, mode):
    """Issue 47, item 4: a user asking for scans in a loop must not make polkitd fork a helper
    per check (it handles one check at a time, for every program on the system).  The rule
    reuses an answer for 250 ms: over 3 s of 8 clients asking as fast as polkitd answers,
    the helper runs (and reports) at most 13 times, and every check gets the right answer."""
    from tests.access.realpolkit import REUSE_S

    stand_in = await StandIn().start(polkitd.bus.address)
    try:
        polkitd.defer(mode=mode)
        seen = await flood(polkitd, 3.0)
        await asyncio.sleep(0.5)  # the last report's reply
        reports = len(stand_in.reports)
    finally:
        stand_in.stop()
    print(f"flood ({mode}): {seen}, reports {reports}")
    assert seen["checks"] > 3 * (seen["seconds"] / REUSE_S), seen  # a flood, not a trickle
    assert seen["authorized"] == (seen["checks"] if mode == "watch" else 0), \
        (seen, polkitd.output()[-3000:])
    assert 1 <= reports <= seen["seconds"] / REUSE_S + 1, (reports, seen)


async def test_a_daemon_that_never_answers_has_one_report_in_flight(polkitd):
    """Each report's busctl waits up to 25 s for the daemon's reply; a daemon whose loop is
    stuck must not collect one waiting busctl per check: the helper starts a report only once
    the last one has ended.  Every check is still refused (a helper polkit.spawn gave up on
    after its 10 s would have meant "allowed", and polkitd's log says so)."""
    stand_in = await StandIn(hang=True).start(polkitd.bus.address)
    try:
        polkitd.defer()
        seen = await flood(polkitd, 3.0)
        reports = len(stand_in.reports)
    finally:
        stand_in.stop()
    print(f"flood, daemon hung: {seen}, reports {reports}")
    assert seen["checks"] > 20 and seen["authorized"] == 0, (seen, polkitd.output()[-3000:])
    assert reports == 1 and seen["most reporters"] == 1, (reports, seen)
