"""The fault-injection rung: shared figures and the end-of-run report.

The suite runs the real daemon (tests/peers.py ``DaemonProcess``) on a private system bus with
the mocked NetworkManager and wpa_supplicant, through generated sequences of faults, and checks
one invariant after each: the user's bgscan is back.  This file keeps what the sequences saw
(``STATS``) and prints it when the session ends, so that a run says how much it exercised and
how long recovery took, not only that it passed.

Environment:
- ``SCANGUARD_FAULT_EXAMPLES``: generated sequences per Hypothesis test (default 25, sized so
  that the suite stays within 3 minutes per D-Bus library on 2 cores).
- ``SCANGUARD_FAULT_SHRINK=1``: let Hypothesis shrink a failing sequence (minutes per failure:
  every attempt starts a bus, two mocks and the daemon).  Off by default; the failing sequence is
  reported unshrunk.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pytest

from nm_scanguard.peers.bus import CALL_TIMEOUT, unwrap
from nm_scanguard.dbuslib import Message, MessageBus, MessageType
from tests.conftest import MockSupplicant, PrivateBus, assert_eventually, start_private_bus
from tests.peers import BGSCAN, REPO, DaemonProcess, Link, NetworkManagerMock, Peers, env_for

EXAMPLES = int(os.environ.get("SCANGUARD_FAULT_EXAMPLES", "25"))
SHRINK = os.environ.get("SCANGUARD_FAULT_SHRINK", "") == "1"

# What every daemon in this suite runs with: small figures keep a sequence short.  threshold_pps
# is off so that only the traffic a step sends counts as busy.
BASE_CONF = """[scanguard]
sample_interval = 0.2
engage_after = 2
release_after = 1
threshold_pps = 0
signal_poll_interval = 0.5
"""
RELEASE_AFTER = 1.0


@dataclass
class Stats:
    """What the generated sequences did, for the report at the end of the session."""

    sequences: int = 0
    steps: int = 0
    max_holds: int = 0
    max_rss_kib: int = 0
    daemon_exits: int = 0
    exit_reasons: list[str] = field(default_factory=list)  # status and last log line, per exit
    # fault kind -> the longest time (s) from its last occurrence to bgscan restored
    restored_after: dict[str, float] = field(default_factory=dict)
    kinds_seen: dict[str, int] = field(default_factory=dict)

    def fault_restored(self, kind: str, seconds: float) -> None:
        self.restored_after[kind] = max(self.restored_after.get(kind, 0.0), seconds)

    def lines(self) -> list[str]:
        out = [f"sequences run: {self.sequences}, steps: {self.steps}",
               f"largest number of simultaneous holds seen in ActiveHolds: {self.max_holds}",
               f"daemon peak RSS (VmHWM): {self.max_rss_kib / 1024:.1f} MiB"
               if self.max_rss_kib else "daemon peak RSS (VmHWM): not read",
               f"daemon exits (then restarted to restore from its journal): {self.daemon_exits}",
               *(f"  exit: {r}" for r in self.exit_reasons[:5]),
               "fault kind -> max seconds from its last occurrence to bgscan restored "
               "(occurrences):"]
        for kind in sorted(self.kinds_seen):
            t = self.restored_after.get(kind)
            shown = f"{t:6.2f} s" if t is not None else "   not restored"
            out.append(f"  {kind:<22} {shown}   ({self.kinds_seen[kind]})")
        return out


STATS = Stats()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if STATS.sequences == 0:
        return
    terminalreporter.section("fault injection: what the generated sequences did")
    for line in STATS.lines():
        terminalreporter.write_line(line)


@pytest.fixture
def workdirs(tmp_path: Path) -> Iterator[Any]:
    """A fresh directory per generated example (Hypothesis runs many in one test call)."""
    counter = iter(range(1_000_000))

    def new() -> Path:
        d = tmp_path / f"example-{next(counter)}"
        d.mkdir()
        return d

    yield new


# ---- one example's world: bus, mocks, daemon, clients ------------------------------------------

# The public names of our bus API (nm_scanguard/io.github.nm_scanguard.ScanGuard1.xml), spelled
# out: the suite tests the daemon from outside, as any client would.
NAME = "io.github.nm_scanguard.ScanGuard1"
PATH = "/io/github/nm_scanguard/ScanGuard1"
IFACE = NAME
PROPS = "org.freedesktop.DBus.Properties"
STEP_TIMEOUT = 5.0  # a call of ours to the daemon during a sequence; a frozen daemon costs this
LOG_TAIL = 80  # lines of each log in a failure message


def tail(text: str, lines: int = LOG_TAIL) -> str:
    return "\n".join(text.splitlines()[-lines:])


class World:
    """What one generated sequence runs in: a private system bus, the wpa_supplicant and
    NetworkManager mocks, the shared veth ``link`` as the Wi-Fi interface (connected to 'Home',
    NM's bgscan on its network), scanguardd as a process, and the clients a sequence opens.

    ``expected`` maps every wpa_supplicant network NetworkManager created to the bgscan it gave
    it (None: no bgscan key), which is what the invariant compares against.
    """

    def __init__(self, link: Link, workdir: Path) -> None:
        self.link, self.workdir = link, workdir
        self.bus: PrivateBus | None = None
        self.wpa: MockSupplicant | None = None
        self.nm: NetworkManagerMock | None = None
        self.client: MessageBus | None = None  # our own root connection (mock control, checks)
        self.peers: Peers | None = None
        self.daemon: DaemonProcess | None = None
        self.daemons: list[DaemonProcess] = []
        self.expected: dict[str, str | None] = {}
        # values NetworkManager gave earlier objects at the same path (see restored())
        self.earlier: dict[str, set[str | None]] = {}
        self.clients: dict[int, MessageBus] = {}  # hold clients by number
        self.cookies: dict[int, list[int]] = {}
        self.extra: list[MessageBus] = []  # flood connections kept open
        self.ctl: list[subprocess.Popen] = []  # scanguardctl hold processes
        self.max_rss = 0

    @property
    def address(self) -> str:
        assert self.bus is not None
        return self.bus.address

    def recreated(self, net: str, before: str | None, now: str | None) -> None:
        """NetworkManager removed the network at `net` and added a new one with `now`."""
        if before != now:
            self.earlier.setdefault(net, set()).add(before)
        self.expected[net] = now

    def acceptable(self, net: str) -> set[str | None]:
        """The quoted bgscan values `net` may end with (see restored())."""
        values = {_quoted(self.expected.get(net, BGSCAN))}
        if self.daemon is not None and any(
                f"re-created network {net} while bgscan was being {what}" in self.logs()
                for what in ("restored", "suspended; putting back")):
            values |= {_quoted(v) for v in self.earlier.get(net, set())}
        return values

    async def __aenter__(self) -> "World":
        try:
            self.bus = start_private_bus()
            self.wpa = MockSupplicant(self.address, self.workdir / "wpa_supplicant-mock.log")
            self.nm = NetworkManagerMock(self.address, self.workdir / "nm-mock.log")
            self.client = await MessageBus(bus_address=self.address).connect()
            self.peers = Peers(self.client, self.link.ifname, self.wpa, self.nm)
            await self.peers.setup()
            self.expected[self.peers.net] = BGSCAN
            await self.start_daemon()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def start_daemon(self) -> DaemonProcess:
        """scanguardd with BASE_CONF and this world's state directory (a restart keeps it)."""
        assert self.client is not None
        self.daemon = DaemonProcess(self.address, self.workdir, BASE_CONF).start()
        self.daemons.append(self.daemon)
        await self.daemon.wait_ready(self.client)
        await assert_eventually(self.follows_interface, timeout=10,
                                message=f"scanguardd follows {self.link.ifname}")
        return self.daemon

    async def follows_interface(self) -> bool:
        devices = await self.get_property("Devices", timeout=2)
        return devices is not None and any(d.get("interface") == self.link.ifname for d in devices)

    async def close(self) -> None:
        self.link.stop()
        for p in self.ctl:
            kill(p)
        for b in [*self.clients.values(), *self.extra]:
            _disconnect(b)
        self.clients.clear()
        self.extra.clear()
        for d in self.daemons:
            d.stop()
        if self.client is not None:
            _disconnect(self.client)
        for mock in (self.wpa, self.nm):
            if mock is not None:
                mock.close()
        if self.bus is not None:
            self.bus.stop()

    # ---- talking to the daemon ----------------------------------------------------------

    async def api(self, bus: MessageBus, member: str, signature: str = "", body: list | None = None,
                  interface: str = IFACE, timeout: float = STEP_TIMEOUT) -> Message | None:
        """Call our service; the reply (error or not), or None if none came in *timeout* s or
        the connection is gone."""
        try:
            return await asyncio.wait_for(bus.call(Message(
                destination=NAME, path=PATH, interface=interface, member=member,
                signature=signature, body=body or [])), timeout)
        except (asyncio.TimeoutError, Exception):
            return None

    async def get_property(self, name: str, timeout: float = STEP_TIMEOUT) -> Any:
        assert self.client is not None
        reply = await self.api(self.client, "Get", "ss", [IFACE, name], interface=PROPS,
                               timeout=timeout)
        if reply is None or reply.message_type != MessageType.METHOD_RETURN:
            return None
        return unwrap(reply.body[0])

    async def owns_name(self) -> bool:
        assert self.client is not None
        try:
            reply = await asyncio.wait_for(self.client.call(Message(
                destination="org.freedesktop.DBus", path="/org/freedesktop/DBus",
                interface="org.freedesktop.DBus", member="NameHasOwner", signature="s",
                body=[NAME])), STEP_TIMEOUT)
        except asyncio.TimeoutError:
            return False
        return bool(reply.body and reply.body[0])

    def sample_rss(self) -> None:
        if self.daemon is not None:
            rss = self.daemon.max_rss_kib()
            if rss:
                self.max_rss = max(self.max_rss, rss)

    def logs(self) -> str:
        parts = []
        if self.daemons:  # every instance appends to the same file in the work directory
            statuses = ", ".join(f"{d.returncode()}" for d in self.daemons)
            parts.append(f"--- scanguardd log ({len(self.daemons)} instance(s), exit status "
                         f"of each: {statuses}; None = running) ---\n{tail(self.daemons[-1].log())}")
        if self.wpa is not None:
            # Without the reads (ours poll every 50 ms): the Sets, faults and signals remain.
            lines = [line for line in self.wpa.log().splitlines()
                     if " Get " not in line and " GetAll " not in line and "PropertiesSets" not in line]
            parts.append("--- wpa_supplicant mock log (reads left out) ---\n"
                         + "\n".join(lines[-LOG_TAIL:]))
        if self.nm is not None:
            parts.append(f"--- NetworkManager mock log ---\n{tail(self.nm.log(), 20)}")
        return "\n".join(parts)


def kill(process: subprocess.Popen) -> None:
    """SIGKILL (a holder that crashes) and reap."""
    if process.poll() is None:
        process.send_signal(signal.SIGKILL)
    process.wait()
    for stream in (process.stdout, process.stderr):
        if stream:
            stream.close()


def _disconnect(bus: MessageBus) -> None:
    try:
        bus.disconnect()
    except Exception:  # already dropped by the bus: nothing left to close
        pass


def scanguardctl_hold(address: str, reason: str, seconds: float) -> subprocess.Popen:
    """`scanguardctl hold --reason REASON -- sleep SECONDS` as a process of its own."""
    return subprocess.Popen(
        [sys.executable, "-m", "nm_scanguard.cli.scanguardctl", "hold", "--reason", reason, "--",
         "sleep", f"{seconds:g}"],
        env=env_for(address), cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


# ---- the invariant --------------------------------------------------------------------------

def settle_timeout(slow_peer: bool) -> float:
    """How long bgscan may take to come back once the holders are gone and the link is idle:
    release_after, a margin for sampling and the bus, and one call timeout more if
    wpa_supplicant was slow or stuck (a call of the daemon may still be waiting on it)."""
    return RELEASE_AFTER + 4.0 + (CALL_TIMEOUT + 2.0 if slow_peer else 0.0)


async def restored(world: World) -> bool:
    """True when every network wpa_supplicant has carries the bgscan NetworkManager gave it.

    One documented exception: wpa_supplicant's API has no compare-and-set, so when
    NetworkManager re-creates a network (same path) between the daemon's read and its Set of a
    restore, the Set lands on the new object; and when it does so between the read and the Set
    of a suspend, the "" lands there, and the daemon puts back the value it read, the previous
    object's (suspension.py, _put_back; the new object's own value is lost once overwritten).
    The daemon logs either; only then may the new object carry the value NetworkManager gave
    the previous object there.  (The put-back case was missing here until the Debian 13 fault
    pass of 2026-11-26 drew it: two re-activations with different bgscan values while
    guarding.)"""
    assert world.peers is not None
    try:
        nets = await asyncio.wait_for(world.peers.networks(), STEP_TIMEOUT)
    except Exception:
        return False
    return all(nets.get(net) in world.acceptable(net) for net in nets)


def _quoted(value: str | None) -> str | None:
    return None if value is None else f'"{value}"'


async def describe(world: World) -> str:
    assert world.peers is not None
    try:
        nets = await asyncio.wait_for(world.peers.networks(), STEP_TIMEOUT)
    except Exception as e:
        return f"(could not read wpa_supplicant's networks: {e})"
    rows = [f"  {net}: bgscan {value!r}, NetworkManager set "
            f"{_quoted(world.expected.get(net, BGSCAN))!r}" for net, value in sorted(nets.items())]
    return "\n".join(rows) or "  (no networks)"


async def wind_down(world: World) -> None:
    """Every holder gone, the link idle, wpa_supplicant prompt again, and the settings back to
    BASE_CONF with no profile overrides: what the invariant is stated for."""
    assert world.peers is not None and world.nm is not None
    world.link.stop()
    for p in world.ctl:
        kill(p)
    for b in [*world.clients.values(), *world.extra]:
        _disconnect(b)
    world.clients.clear()
    world.cookies.clear()
    world.extra.clear()
    await world.peers.clear_wpa_faults()
    world.nm.set_user_data(world.peers.conn, {})
    if world.daemon is not None:
        world.daemon.config.write_text(BASE_CONF)
        if world.daemon.returncode() is None:
            assert world.client is not None
            # A reload also cancels whatever a generated file set (release_after = 86400...).
            await world.api(world.client, "Reload", timeout=CALL_TIMEOUT + 5)


async def check_invariant(world: World, slow_peer: bool) -> float:
    """The product's promise, after a sequence: once the holders are gone and the link is idle,
    every wpa_supplicant network has NetworkManager's bgscan again; scanguardd still owns its
    name and answers, or it has exited non-zero and a restart restores bgscan from its journal.

    Returns the time (monotonic) at which bgscan was seen restored.
    """
    assert world.daemon is not None and world.wpa is not None
    await wind_down(world)
    timeout = settle_timeout(slow_peer)
    daemon = world.daemon

    async def restored_or_exited() -> bool:
        return daemon.returncode() is not None or await restored(world)

    try:
        await assert_eventually(restored_or_exited, timeout=timeout, interval=0.05)
    except AssertionError:
        raise AssertionError(
            f"bgscan not restored {timeout:g} s after the holders left and the link went idle, "
            f"and scanguardd is still running (owns {NAME}: {await world.owns_name()}):\n"
            f"{await describe(world)}\n{world.logs()}") from None
    world.sample_rss()
    status = daemon.returncode()
    if status is not None:
        STATS.daemon_exits += 1
        last = (daemon.log().strip().splitlines() or ["(empty log)"])[-1]
        STATS.exit_reasons.append(f"status {status}: {last[:160]}")
        assert status != 0, f"scanguardd exited with status 0 without being asked to:\n{world.logs()}"
        await world.start_daemon()
        try:
            await assert_eventually(lambda: restored(world), timeout=timeout, interval=0.05)
        except AssertionError:
            raise AssertionError(
                f"scanguardd exited (status {status}); a new instance with the same state "
                f"directory did not restore bgscan within {timeout:g} s:\n{await describe(world)}\n"
                f"{world.logs()}") from None
    at = time.monotonic()
    version = await world.get_property("Version")
    assert version and await world.owns_name(), (
        f"bgscan is back but scanguardd does not answer on the bus (owns {NAME}: "
        f"{await world.owns_name()}, Version: {version!r}):\n{world.logs()}")
    assert world.daemon.returncode() is None, f"scanguardd exited meanwhile:\n{world.logs()}"
    await check_only_bgscan_was_sent(world)
    world.sample_rss()
    return at


async def check_only_bgscan_was_sent(world: World) -> None:
    """Every Set the daemon sent to a network held only bgscan (anything else flushes the
    PMKSA cache), with "" or the value NetworkManager had set: nothing else, ever."""
    assert world.peers is not None
    for net in (await world.peers.networks()):
        for row in await world.peers.sets(net):
            allowed = {"", world.expected.get(net, BGSCAN)} | world.earlier.get(net, set())
            assert set(row) == {"bgscan"} and row["bgscan"] in allowed, (
                f"scanguardd sent {row!r} to {net}; only bgscan \"\" or NetworkManager's "
                f"{world.expected.get(net, BGSCAN)!r} may be sent:\n{world.logs()}")
