"""Generated fault sequences against the real daemon, and the one promise checked after each:
scanguardd never leaves a user's bgscan disabled.

Each example is a fresh world (tests/fault/conftest.py ``World``): a private system bus, the
wpa_supplicant and NetworkManager mocks, scanguardd as a process.  Hypothesis draws a sequence of
steps, from several clients and from the peers:

- holds and releases from several clients, each on its own bus connection; clients that leave
  (disconnect) or vanish right after sending Hold; floods of pipelined holds; ``scanguardctl hold
  -- sleep N`` processes that finish or are killed with SIGKILL, mid-call or later;
- arbitrary Unicode and oversized text in Hold's reason, application id and interface;
- config reloads with random files (bytes, text, INI with real keys and wild values), by SIGHUP
  or by the Reload method as root;
- profile renames and ``scanguard.*`` user data with random values;
- wpa_supplicant and NetworkManager restarts, and re-activations (a fresh network with NM's
  bgscan, as NM adds it);
- slow, late, stuck and failing wpa_supplicant calls (the mock's SetSetDelay, SetHang and
  SetFailNext), and a crash of the daemon itself (SIGKILL, restarted with the same state dir);
- traffic on and off, pauses, and the signal fading below the floor and back (the guard
  releases and asks wpa_supplicant for a scan, under the same faults).

Then ``check_invariant``: the holders gone and the link idle for release_after (plus a margin),
every network's bgscan is NetworkManager's, and the daemon answers on the bus, or it exited
non-zero and a restart restored bgscan from its journal.
"""

from __future__ import annotations

import asyncio
import signal
import time
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from nm_scanguard.peers.bus import CALL_TIMEOUT
from nm_scanguard.config import KEYS
from nm_scanguard.dbuslib import Message, MessageBus, MessageType
from tests.fault.conftest import (EXAMPLES, IFACE, NAME, PATH, SHRINK, STATS, STEP_TIMEOUT, World,
                                  _disconnect, check_invariant, kill, scanguardctl_hold)
from tests.peers import BGSCAN

CAFE = "Café ☕"
LATE_MS = int((CALL_TIMEOUT + 1.0) * 1000)  # beyond the daemon's call timeout: a late reply
NM_BGSCANS = (BGSCAN, "simple:30:-65:300", None)  # None: no bgscan key (BSSID-locked, AP mode)
# What FailNext injects: the mock answers the next calls with it, whichever they are, so only an
# error the real peers give to every call while wpa_supplicant runs and the object exists:
# AccessDenied from dbus-daemon (bus_context_check_security_policy) once a policy reload
# denies the daemon's user, until the reload that fixes it.  The others come from steps that
# make them true (docs/testing.md, "Only faults the real peers can produce"): ServiceUnknown and
# NoReply from WpaRestart, UnknownMethod from a network NetworkManager removed (Reactivate,
# NmRestart), the daemon's own Timeout from SetDelay and Hang.
ACCESS_DENIED = "org.freedesktop.DBus.Error.AccessDenied"
ERRORS = (ACCESS_DENIED,)


# ---- steps ------------------------------------------------------------------------------------
# Each step is a small frozen dataclass, so that Hypothesis prints a failing sequence as code.
# ``kind`` names the fault for the report (None: not a fault, e.g. traffic or a pause).

@dataclass(frozen=True)
class Traffic:
    mbit: float
    kind = None


@dataclass(frozen=True)
class Quiet:
    kind = None


@dataclass(frozen=True)
class Pause:
    seconds: float
    kind = None


@dataclass(frozen=True)
class Hold:
    """Client *client* takes a hold.  *interface*: "*" = every interface, "=" = the Wi-Fi
    interface, "=\\n" = its name with a trailing newline, anything else is sent as it is."""
    client: int
    reason: str
    application_id: str
    interface: str
    kind = "hold"


@dataclass(frozen=True)
class Release:
    client: int
    which: int
    kind = "release"


@dataclass(frozen=True)
class Leave:
    """The client's connection closes: its holds must go with it."""
    client: int
    kind = "holder-left"


@dataclass(frozen=True)
class HoldAndVanish:
    """A new connection sends Hold and disconnects before the reply."""
    reason: str
    interface: str
    kind = "hold-then-vanish"


@dataclass(frozen=True)
class Flood:
    """*connections* new connections each pipeline *per_connection* Holds; they stay or leave."""
    connections: int
    per_connection: int
    stay: bool
    kind = "hold-flood"


@dataclass(frozen=True)
class CtlHold:
    """`scanguardctl hold --reason R -- sleep S`; SIGKILLed after *kill_after* s if not None."""
    reason: str
    sleep: float
    kill_after: float | None
    kind = "scanguardctl-hold"


@dataclass(frozen=True)
class Reload:
    content: bytes
    how: str  # "sighup" or "method"
    kind = "config-reload"


@dataclass(frozen=True)
class Rename:
    name: str
    kind = "profile-rename"


@dataclass(frozen=True)
class UserData:
    data: tuple[tuple[str, str], ...]
    kind = "user-data"


@dataclass(frozen=True)
class WpaRestart:
    bgscan: str | None
    kind = "wpa-restart"


@dataclass(frozen=True)
class NmRestart:
    bgscan: str | None
    kind = "nm-restart"


@dataclass(frozen=True)
class Reactivate:
    bgscan: str | None
    kind = "reactivate"


@dataclass(frozen=True)
class SetDelay:
    ms: int
    kind = "wpa-slow-or-late"


@dataclass(frozen=True)
class Hang:
    on: bool
    kind = "wpa-hang"


@dataclass(frozen=True)
class FailNext:
    error: str
    count: int
    kind = "wpa-errors"


@dataclass(frozen=True)
class Fade:
    """What SignalPoll reports: below the floor (-75) the guard releases and asks for a scan;
    -73 is inside the hysteresis; -50 is strong."""
    dbm: int
    kind = "signal-fade"


@dataclass(frozen=True)
class Crash:
    """SIGKILL the daemon and start a new one with the same state directory."""
    kind = "daemon-crash"


SLOW_PEER = (SetDelay, Hang, FailNext, Crash)


# ---- strategies -------------------------------------------------------------------------------

# Text a user or a program could send: any Unicode but NUL (D-Bus strings cannot carry it: the
# bus would drop the *client*) and lone surrogates (not UTF-8), up to ~1000 characters.
text = st.one_of(
    st.sampled_from(["", CAFE, "video call", "\U0001F4DE" * 300, "x" * 1000, "a\tb", "\u202e"]),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
            max_size=1000),
)
short_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
                     max_size=40)
interface = st.one_of(st.sampled_from(["*", "=", "=\n", "wlan99", CAFE]), short_text)
client = st.integers(0, 2)
nm_bgscan = st.sampled_from(NM_BGSCANS)

value_text = st.one_of(
    st.sampled_from(["yes", "no", "0", "-1", "1e309", "nan", "0.1", "3", "86400", CAFE, ""]),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-10**12, 10**12).map(str),
    short_text.map(lambda s: s.replace("\n", " ").replace("\r", " ")),
)
ini = st.lists(st.tuples(st.one_of(st.sampled_from(sorted(KEYS)), short_text), value_text),
               max_size=8).map(
    lambda rows: ("[scanguard]\n" + "".join(f"{k.replace(chr(10), ' ')} = {v}\n" for k, v in rows))
    .encode("utf-8", "surrogatepass"))
config_content = st.one_of(
    ini,
    st.binary(max_size=2000),
    text.map(lambda s: s.encode()),
    st.sampled_from([b"", b"[scanguard]\n", b"[scanguard]\nenabled = no\n",
                     "[scanguard]\nthreshold_mbit = Café ☕\n".encode()]),
)
user_data = st.lists(st.tuples(
    st.one_of(st.sampled_from(sorted(KEYS)), short_text).map(lambda k: "scanguard." + k),
    st.one_of(value_text, text)), max_size=6).map(tuple)

step = st.one_of(
    st.builds(Traffic, st.sampled_from([0.2, 8.0, 20.0])),
    st.builds(Quiet),
    st.builds(Pause, st.floats(0.1, 2.0)),
    st.builds(Hold, client, text, text, interface),
    st.builds(Release, client, st.integers(0, 63)),
    st.builds(Leave, client),
    st.builds(HoldAndVanish, text, interface),
    st.builds(Flood, st.integers(1, 3), st.integers(10, 80), st.booleans()),
    st.builds(CtlHold, text.map(lambda s: s[:200]), st.sampled_from([0.2, 1.0, 30.0]),
              st.one_of(st.none(), st.floats(0.0, 1.5))),
    st.builds(Reload, config_content, st.sampled_from(["sighup", "method"])),
    st.builds(Rename, text),
    st.builds(UserData, user_data),
    st.builds(WpaRestart, nm_bgscan),
    st.builds(NmRestart, nm_bgscan),
    st.builds(Reactivate, nm_bgscan),
    st.builds(SetDelay, st.sampled_from([0, 150, 1500, LATE_MS])),
    st.builds(Hang, st.booleans()),
    st.builds(FailNext, st.sampled_from(ERRORS), st.integers(1, 6)),
    st.builds(Fade, st.sampled_from([-50, -73, -80])),
    st.builds(Crash),
)
# Half the sequences begin with the guard engaged by traffic: most faults matter while bgscan
# is suspended.
ENGAGED = [Traffic(8.0), Pause(0.8)]
sequences = st.tuples(st.booleans(), st.lists(step, min_size=2, max_size=10)).map(
    lambda t: (ENGAGED if t[0] else []) + t[1])


# ---- running a sequence -----------------------------------------------------------------------

class Runner:
    """Carries out steps in a World, keeping what the report needs."""

    def __init__(self, world: World) -> None:
        self.w = world
        self.last: dict[str, float] = {}  # fault kind -> when it last happened
        self.max_holds = 0

    async def run(self, steps: list[Any]) -> None:
        for s in steps:
            await getattr(self, "do_" + type(s).__name__)(s)
            STATS.steps += 1
            if s.kind is not None:
                self.last[s.kind] = time.monotonic()
            self.w.sample_rss()

    # ---- helpers ------------------------------------------------------------------------

    def interface(self, spec: str) -> str:
        if spec == "*":
            return ""
        if spec in ("=", "=\n"):
            return self.w.link.ifname + spec[1:]
        return spec

    async def connection(self, n: int) -> MessageBus | None:
        bus = self.w.clients.get(n)
        if bus is None or not bus.connected:
            try:
                bus = await asyncio.wait_for(MessageBus(bus_address=self.w.address).connect(),
                                             STEP_TIMEOUT)
            except Exception:
                return None
            self.w.clients[n] = bus
            self.w.cookies[n] = []
        return bus

    async def count_holds(self) -> None:
        holds = await self.w.get_property("ActiveHolds", timeout=2.0)
        if holds is not None:
            self.max_holds = max(self.max_holds, len(holds))
            STATS.max_holds = max(STATS.max_holds, len(holds))

    def hold_message(self, reason: str, app_id: str, interface: str) -> Message:
        return Message(destination=NAME, path=PATH, interface=IFACE, member="Hold",
                       signature="sss", body=[reason, app_id, interface])

    # ---- steps --------------------------------------------------------------------------

    async def do_Traffic(self, s: Traffic) -> None:
        self.w.link.send(mbit=s.mbit)

    async def do_Quiet(self, s: Quiet) -> None:
        self.w.link.stop()

    async def do_Pause(self, s: Pause) -> None:
        await asyncio.sleep(s.seconds)

    async def do_Hold(self, s: Hold) -> None:
        bus = await self.connection(s.client)
        if bus is None:
            return
        reply = await self.w.api(bus, "Hold", "sss",
                                 [s.reason, s.application_id, self.interface(s.interface)])
        if reply is not None and reply.message_type == MessageType.METHOD_RETURN:
            self.w.cookies[s.client].append(reply.body[0])
        await self.count_holds()

    async def do_Release(self, s: Release) -> None:
        cookies = self.w.cookies.get(s.client) or []
        bus = self.w.clients.get(s.client)
        if not cookies or bus is None:
            return
        cookie = cookies.pop(s.which % len(cookies))
        await self.w.api(bus, "Release", "u", [cookie])

    async def do_Leave(self, s: Leave) -> None:
        bus = self.w.clients.pop(s.client, None)
        self.w.cookies.pop(s.client, None)
        if bus is not None:
            _disconnect(bus)

    async def do_HoldAndVanish(self, s: HoldAndVanish) -> None:
        try:
            bus = await asyncio.wait_for(MessageBus(bus_address=self.w.address).connect(),
                                         STEP_TIMEOUT)
            await asyncio.wait_for(bus.send(self.hold_message(s.reason, "vanisher",
                                                              self.interface(s.interface))),
                                   STEP_TIMEOUT)
        except Exception:
            return
        _disconnect(bus)

    async def do_Flood(self, s: Flood) -> None:
        buses = []
        for _ in range(s.connections):
            try:
                buses.append(await asyncio.wait_for(
                    MessageBus(bus_address=self.w.address).connect(), STEP_TIMEOUT))
            except Exception:
                break
        calls = [asyncio.wait_for(b.call(self.hold_message(f"flood {i}", "flood", "")), STEP_TIMEOUT)
                 for b in buses for i in range(s.per_connection)]
        await asyncio.gather(*calls, return_exceptions=True)
        await self.count_holds()
        if s.stay:
            self.w.extra.extend(buses)
        else:
            for b in buses:
                _disconnect(b)

    async def do_CtlHold(self, s: CtlHold) -> None:
        proc = scanguardctl_hold(self.w.address, s.reason, s.sleep)
        self.w.ctl.append(proc)
        if s.kill_after is not None:
            await asyncio.sleep(s.kill_after)
            kill(proc)

    async def do_Reload(self, s: Reload) -> None:
        assert self.w.daemon is not None and self.w.client is not None
        self.w.daemon.config.write_bytes(s.content)
        if self.w.daemon.returncode() is not None:
            return
        if s.how == "sighup":
            self.w.daemon.process.send_signal(signal.SIGHUP)
        else:
            await self.w.api(self.w.client, "Reload")

    async def do_Rename(self, s: Rename) -> None:
        assert self.w.nm is not None and self.w.peers is not None
        self.w.nm.rename_profile(self.w.peers.conn, s.name)

    async def do_UserData(self, s: UserData) -> None:
        assert self.w.nm is not None and self.w.peers is not None
        self.w.nm.set_user_data(self.w.peers.conn, dict(s.data))

    async def do_WpaRestart(self, s: WpaRestart) -> None:
        assert self.w.peers is not None
        await self.settle_wpa()
        self.w.expected.clear()  # the old networks died with the old process
        net = await self.w.peers.restart_wpa(s.bgscan or "")
        self.w.expected[net] = s.bgscan

    async def do_NmRestart(self, s: NmRestart) -> None:
        assert self.w.peers is not None
        await self.settle_wpa()
        old = dict(self.w.expected)
        net = await self.w.peers.restart_nm(s.bgscan or "")
        self.w.recreated(net, old.get(net, BGSCAN), s.bgscan)

    async def do_Reactivate(self, s: Reactivate) -> None:
        assert self.w.peers is not None
        await self.settle_wpa()
        old = dict(self.w.expected)
        net = await self.w.peers.reactivate(s.bgscan or "")
        self.w.recreated(net, old.get(net, BGSCAN), s.bgscan)

    async def do_SetDelay(self, s: SetDelay) -> None:
        assert self.w.peers is not None
        await self.w.peers.wpa_mock("SetSetDelay", "u", [s.ms])
        self.delay_ms = max(getattr(self, "delay_ms", 0), s.ms)

    async def settle_wpa(self) -> None:
        """Before NetworkManager removes or adds networks: a real wpa_supplicant handles its
        calls in order and answers each before the next (a stuck one handles nothing), so
        NetworkManager's calls can neither overtake a Set of ours nor be answered before a
        reply of ours.  The mock's hang and delay let them do both, an order the real one never
        produces; so faults are cleared (hung calls are carried out now, in order) and the
        replies still being delayed are waited for."""
        assert self.w.peers is not None
        await self.w.peers.clear_wpa_faults()
        pending = getattr(self, "delay_ms", 0)
        if pending:
            await asyncio.sleep(pending / 1000 + 0.3)
            self.delay_ms = 0

    async def do_Hang(self, s: Hang) -> None:
        assert self.w.peers is not None
        await self.w.peers.wpa_mock("SetHang", "b", [s.on])

    async def do_FailNext(self, s: FailNext) -> None:
        assert self.w.peers is not None
        await self.w.peers.wpa_mock("SetFailNext", "su", [s.error, s.count])

    async def do_Fade(self, s: Fade) -> None:
        assert self.w.peers is not None
        await self.w.peers.wpa_mock("SetSignal", "oi", [self.w.peers.iface, s.dbm])

    async def do_Crash(self, s: Crash) -> None:
        assert self.w.daemon is not None
        d = self.w.daemon
        if d.process is not None and d.process.poll() is None:
            d.process.kill()
            d.process.wait()
        await self.w.start_daemon()


async def run_sequence(link: Any, workdir: Any, steps: list[Any]) -> None:
    STATS.sequences += 1
    async with World(link, workdir) as world:
        runner = Runner(world)
        await runner.run(steps)
        slow = any(isinstance(s, SLOW_PEER) for s in steps)
        restored_at = await check_invariant(world, slow_peer=slow)
        for kind, at in runner.last.items():
            STATS.kinds_seen[kind] = STATS.kinds_seen.get(kind, 0) + 1
            STATS.fault_restored(kind, restored_at - at)
        STATS.max_rss_kib = max(STATS.max_rss_kib, world.max_rss)


PHASES = tuple(p for p in Phase if SHRINK or p != Phase.shrink)


@settings(max_examples=EXAMPLES, deadline=None,
          phases=PHASES, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                 HealthCheck.data_too_large])
@given(steps=sequences)
@example(steps=[Traffic(8.0), Pause(0.8), CtlHold(CAFE, 30.0, 0.5), Hold(0, CAFE, CAFE, "="),
                Rename(CAFE), Quiet()])
@example(steps=[Traffic(8.0), Pause(0.8), WpaRestart(BGSCAN), Pause(0.6), Crash(), Quiet()])
@example(steps=[Traffic(8.0), Pause(0.8), Hang(True), Fade(-80), Pause(1.0), Hang(False),
                Fade(-50), Pause(1.0), Fade(-80), Quiet()])
# make test at 3b26b9c drew this with FailNext(UnknownError, 5), FailNext(InterfaceUnknown, 1)
# and FailNext(ServiceUnknown, 6) where the two AccessDenied and the WpaRestart stand: the
# restarted daemon's GetInterface got the ServiceUnknown and dropped its journal while the
# network still carried "".  None of those answers comes from a running wpa_supplicant; this is
# what the real peers do instead: a policy that denies for a while, wpa_supplicant gone and back.
@example(steps=[Traffic(8.0), Pause(0.8), FailNext(ACCESS_DENIED, 5), FailNext(ACCESS_DENIED, 1),
                Traffic(8.0), Traffic(0.2), Hold(2, "\u202e", "\u202e", CAFE),
                Hold(2, "\U0001F4DE" * 300, "a\tb", "="), WpaRestart(BGSCAN), Flood(3, 71, True),
                Crash(), Hang(True)])
def test_generated_sequences_never_leave_bgscan_off(link, workdirs, steps):
    asyncio.run(run_sequence(link, workdirs(), steps))
