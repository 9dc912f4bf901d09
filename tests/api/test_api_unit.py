"""The parts of the bus API that need no bus: PropertiesChanged pacing and the Devices wire format."""

from __future__ import annotations

import asyncio
import gc
import threading

import pytest

from nm_scanguard.daemon.api import callers, holders, methods, properties
from nm_scanguard.daemon.api import holds as holds_module
from nm_scanguard.daemon.api.methods import Api
from nm_scanguard.daemon.changes import Changes
from nm_scanguard.daemon.api.export import CallError
from nm_scanguard.attribution import Request
from nm_scanguard.config import Settings
from nm_scanguard.dbuslib import Message, MessageFlag
from nm_scanguard.daemon.api.holds import Holds
from nm_scanguard.names import BUS_NAME
from nm_scanguard.status import FIELDS, MAX_PROBLEMS, DeviceStatus
from tests.conftest import assert_eventually


class FakeBus:
    def __init__(self) -> None:
        self.sent: list[Message] = []

    def send(self, msg: Message) -> None:
        self.sent.append(msg)

    def add_message_handler(self, handler) -> None:
        pass

    def changes(self, prop: str) -> int:
        return sum(1 for m in self.sent if m.member == "PropertiesChanged" and prop in m.body[1])

    def devices_changes(self) -> int:
        return self.changes("Devices")


class FakeDaemon:
    def __init__(self) -> None:
        self.rx = 0.0
        self.state = "idle"
        self.holds = Holds()
        self.state_changed: Changes[[str, str, str]] = Changes()
        self.changed: Changes[[]] = Changes()
        self.who_asked = FakeWhoAsked()
        self.settings = Settings()

    def status(self) -> list[DeviceStatus]:
        return [DeviceStatus(interface="wlan0", state=self.state, rx_bps=self.rx, signal_dbm=None)]



class FakeRequests(list):
    """attribution.ScanRequests without its limits: every request given is read back."""

    def recent(self) -> list:
        return list(self)


class FakeWhoAsked:
    def __init__(self) -> None:
        self.requests = FakeRequests()

    def scan_request_seen(self, request, refused: bool, who: str) -> int:
        self.requests.append((request, refused))
        return 0


def started(monkeypatch, devices_every: float = 60.0, holds_every: float = 60.0,
            requests_every: float = 60.0):
    monkeypatch.setattr(properties, "DEVICES_EVERY", devices_every)
    monkeypatch.setattr(properties, "HOLDS_EVERY", holds_every)
    monkeypatch.setattr(properties, "REQUESTS_EVERY", requests_every)
    bus, daemon = FakeBus(), FakeDaemon()
    a = Api(daemon, bus)
    a.start()
    return bus, daemon, a


async def test_devices_changes_are_paced_while_only_figures_change(monkeypatch):
    bus, daemon, _ = started(monkeypatch, devices_every=0.2)
    loop = asyncio.get_running_loop()
    end = loop.time() + 1.0
    while loop.time() < end:  # a sample every 10 ms, each with new rates
        daemon.rx += 1
        daemon.changed()
        await asyncio.sleep(0.01)
    assert 2 <= bus.devices_changes() <= 7  # about one per 0.2 s, not one per sample (~100)

    # the last figures are not lost: a pending announcement goes out
    await asyncio.sleep(0.25)
    last = [m for m in bus.sent if "Devices" in m.body[1]][-1]
    assert last.body[1]["Devices"].value[0]["rx_bps"].value == daemon.rx


async def test_a_state_change_is_announced_at_once(monkeypatch):
    bus, daemon, a = started(monkeypatch)
    daemon.changed()
    assert bus.devices_changes() == 1
    daemon.rx = 5.0
    daemon.changed()
    assert bus.devices_changes() == 1  # paced
    daemon.state = "held"
    a.announcer.state_changed("wlan0", "held", "held by an application")
    assert [m.member for m in bus.sent][-2:] == ["StateChanged", "PropertiesChanged"]
    assert bus.devices_changes() == 2


async def test_nothing_is_announced_when_nothing_changed(monkeypatch):
    bus, daemon, a = started(monkeypatch, devices_every=0.0)
    daemon.changed()
    daemon.changed()
    daemon.changed()
    assert bus.devices_changes() == 1


@pytest.mark.parametrize("conf", ["/etc/scanguard/scanguard.conf", "/tmp/Café ☕.conf"])
async def test_while_off_off_says_why_and_a_hold_is_refused(monkeypatch, conf):
    """`enabled = no` in the settings file: the Off property says so (announced when a reload
    changes it), and Hold is refused with Error.Off, so that no holder believes it is held."""
    bus, daemon, a = started(monkeypatch)
    assert properties.property_values(daemon)["Off"].value == ""
    daemon.settings = Settings().with_values({"enabled": False}, conf)
    daemon.changed()
    daemon.changed()  # no change: not announced again
    offs = [m.body[1]["Off"].value for m in bus.sent
            if m.member == "PropertiesChanged" and "Off" in m.body[1]]
    assert offs == [f"enabled = no in {conf}"]
    assert properties.property_values(daemon)["Off"].value == f"enabled = no in {conf}"

    hold = Message(destination=BUS_NAME, path=methods.PATH, interface=methods.IFACE, member="Hold",
                   signature="sss", body=["Café ☕", "", ""], sender=":1.7", serial=1)
    with pytest.raises(CallError) as refused:
        await a._hold(hold)
    assert refused.value.name == methods.ERROR_OFF
    assert refused.value.text == (f"nm-scanguard is off: enabled = no in {conf}, so a hold would "
                                  "keep nothing off; an administrator turns it on with enabled = "
                                  "yes there and `scanguardctl reload`")
    assert daemon.holds.all() == []

    daemon.settings = Settings()
    daemon.changed()
    assert [m.body[1]["Off"].value for m in bus.sent
            if m.member == "PropertiesChanged" and "Off" in m.body[1]] == [f"enabled = no in {conf}", ""]


async def test_active_holds_changes_are_coalesced_under_a_flood(monkeypatch):
    """A client taking and releasing holds in a loop gets about one ActiveHolds change a second,
    and the last one describes the final table."""
    bus, daemon, _ = started(monkeypatch, holds_every=0.2)
    loop = asyncio.get_running_loop()
    end = loop.time() + 1.0
    n = 0
    while loop.time() < end:
        with daemon.holds.reserve(f":1.{n}", 1000) as slot:
            slot.grant()
            hold = slot.commit("Café ☕", "org.example.Test", "", 0.0)
        daemon.holds.release(hold.cookie, hold.caller, False)
        n += 1
        await asyncio.sleep(0.005)
    assert n > 50
    assert 2 <= bus.changes("ActiveHolds") <= 7
    with daemon.holds.reserve(":1.last", 1000) as slot:
        slot.grant()
        final = slot.commit("Café ☕", "org.example.Test", "wlan0", 0.0)
    await asyncio.sleep(0.25)
    last = [m for m in bus.sent if "ActiveHolds" in m.body[1]][-1]
    (entry,) = last.body[1]["ActiveHolds"].value
    # Broadcast to every local user: which interface and since when, not who or why.
    assert {k: v.value for k, v in entry.items()} == {
        "cookie": final.cookie, "interface": "wlan0", "since": final.since}


def as_caller(monkeypatch, uid: int) -> None:
    """The bus says every caller is `uid`."""
    async def call(_bus, _dest, _path, _iface, member: str, _sig: str = "", _body=(), timeout=0):
        assert member == "GetConnectionUnixUser", member
        return [uid]
    monkeypatch.setattr(callers, "call", call)


async def test_a_burst_of_calls_from_one_sender_asks_the_bus_its_uid_once(monkeypatch):
    asked: list[str] = []
    answer = asyncio.Event()

    async def call(_bus, _dest, _path, _iface, member: str, _sig: str = "", body=(), timeout=0):
        assert member == "GetConnectionUnixUser", member
        asked.append(body[0])
        await answer.wait()
        return [1000]

    monkeypatch.setattr(callers, "call", call)
    bus = object()
    burst = [asyncio.create_task(callers.caller_uid(bus, ":1.230")) for _ in range(300)]
    other = asyncio.create_task(callers.caller_uid(bus, ":1.231"))
    await asyncio.sleep(0)
    burst[0].cancel()  # a caller that leaves does not cancel the others' look-up
    answer.set()
    assert await asyncio.gather(*burst[1:], other) == [1000] * 300
    assert sorted(asked) == [":1.230", ":1.231"] and callers._waiting == {}
    assert await callers.caller_uid(bus, ":1.230") == 1000 and len(asked) == 3  # not kept


async def test_a_uid_the_bus_cannot_tell_refuses_every_call_that_waited_for_it(monkeypatch):
    from nm_scanguard.peers.bus import BusError

    async def call(*_args, **_kw):
        await asyncio.sleep(0)
        raise BusError("org.freedesktop.DBus.Error.Timeout", "no answer within 10 s")

    monkeypatch.setattr(callers, "call", call)
    results = await asyncio.gather(*(callers.caller_uid(object(), ":1.7") for _ in range(3)),
                                   return_exceptions=True)
    assert all(isinstance(r, CallError) and "cannot tell who is calling" in str(r)
               for r in results), results


async def test_a_burst_of_one_passwd_look_up_asks_the_thread_once_and_keeps_nothing():
    started, release, asked = threading.Event(), threading.Event(), []

    def look_up(uid: int) -> str:
        asked.append(uid)
        started.set()
        release.wait(5)
        return "Café ☕"

    burst = [asyncio.create_task(callers.off_loop(look_up, 1000)) for _ in range(50)]
    await asyncio.sleep(0)
    burst[0].cancel()  # a caller that leaves does not cancel the others' look-up
    await asyncio.to_thread(started.wait, 5)
    release.set()
    assert await asyncio.gather(*burst[1:]) == ["Café ☕"] * 49
    assert asked == [1000] and callers._waiting == {}


async def test_a_failed_look_up_nobody_waits_for_any_more_is_not_reported_as_unretrieved():
    unretrieved: list[dict] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: unretrieved.append(context))

    def look_up(uid: int) -> str:
        raise KeyError(uid)

    try:
        task = asyncio.create_task(callers.off_loop(look_up, 1001))
        await asyncio.sleep(0)
        task.cancel()  # its only caller leaves before the answer
        while callers._waiting:
            await asyncio.sleep(0.01)
        gc.collect()
        await asyncio.sleep(0)
    finally:
        loop.set_exception_handler(None)
    assert unretrieved == []


def scan_seen(program: str, sender: str = ":1.9", user: str = "Café ☕", uptime: float = 0.0,
              refused: bool = False) -> Message:
    return Message(destination=BUS_NAME, path=methods.PATH, interface=methods.IFACE,
                   member="ScanRequestSeen", signature="susbd", sender=sender, serial=7,
                   body=[user, 4242, program, refused, uptime])


async def test_recent_scan_requests_changes_are_coalesced_under_a_burst_of_reports(monkeypatch):
    """Every report used to send the whole property at once: a program asking NetworkManager
    for scans in a loop made the daemon broadcast as fast as it asked."""
    bus, daemon, a = started(monkeypatch, requests_every=0.3)
    as_caller(monkeypatch, 0)
    loop = asyncio.get_running_loop()
    start = loop.time()
    for n in range(50):
        reply = await a._scan_request_seen(scan_seen(f"burst {n} ☕", refused=n == 49))
        assert reply.message_type.name == "METHOD_RETURN"
    assert loop.time() - start < 0.3, "the burst took longer than one interval; the count below is void"
    assert bus.changes("RecentScanRequests") == 1  # the first at once
    await assert_eventually(lambda: bus.changes("RecentScanRequests") == 2, timeout=2,
                            message="the coalesced change goes out at the end of the interval")
    last = [m for m in bus.sent if "RecentScanRequests" in m.body[1]][-1]
    entries = last.body[1]["RecentScanRequests"].value
    assert len(entries) == 50 and [e[4] for e in entries] == [False] * 49 + [True]  # the last state
    await asyncio.sleep(0.4)
    assert bus.changes("RecentScanRequests") == 2  # nothing more without new reports


def test_unknown_signal_is_left_out_and_types_follow_the_declaration():
    wire = DeviceStatus(interface="wlan0", state="idle", signal_dbm=None, scans_idle=3,
                        since=1700000000.5, settings={"enabled": True, "threshold_pps": 60,
                                                      "roam_scans": "full"},
                        settings_sources={"enabled": "default"}).as_dbus()
    assert "signal_dbm" not in wire
    assert (wire["scans_idle"].signature, wire["since"].signature) == ("u", "d")
    assert wire["settings"].value["enabled"].signature == "b"
    assert wire["settings"].value["threshold_pps"].signature == "x"
    word = wire["settings"].value["roam_scans"]
    assert (word.signature, word.value) == ("s", "full")
    assert wire["settings_sources"].signature == "a{ss}"
    assert DeviceStatus(interface="w", state="idle", signal_dbm=-61.6).as_dbus()["signal_dbm"].value == -62
    assert {k: v.signature for k, v in DeviceStatus(interface="w", state="idle", signal_dbm=-50)
            .as_dbus().items()} == FIELDS


def test_user_texts_are_cut_so_no_entry_grows_without_bound():
    long_name = "Café ☕ " * 200
    wire = DeviceStatus(interface="wlan0", state="idle", connection_id=long_name,
                        reason=long_name, error=long_name).as_dbus()
    for key in ("connection_id", "reason"):
        assert len(wire[key].value) == 256 and wire[key].value.endswith("…")
    # error holds each of an interface's problems (one per kind, up to MAX_PROBLEMS), each cut
    # to 256 by the guard and joined by "; ".
    assert wire["error"].value == long_name
    endless = DeviceStatus(interface="wlan0", state="idle", error=long_name * 2).as_dbus()
    assert len(endless["error"].value) == MAX_PROBLEMS * 258 and endless["error"].value.endswith("…")
    short = DeviceStatus(interface="wlan0", state="idle", connection_id="Café ☕ lab").as_dbus()
    assert short["connection_id"].value == "Café ☕ lab"


def test_the_xml_documents_exactly_the_device_status_fields():
    """The XML's Devices comment is the documentation; DeviceStatus is the code: one list."""
    import re

    text = open(methods.xml_path(), encoding="utf-8").read()
    comment = text[text.index("Devices: one dictionary"):text.index('<property name="Devices"')]
    documented = dict(re.findall(r"^ {8}([a-z_]+) +([a-z{}()]+) {2,}", comment, re.M))
    assert documented == FIELDS


class MatchBus:
    """AddMatch and RemoveMatch as the API sends them (through bus.add_match and bus.call),
    each answered when the test says so."""

    def __init__(self, monkeypatch) -> None:
        self.calls: list[tuple[str, str]] = []
        self.answers: list[asyncio.Future[None]] = []
        monkeypatch.setattr(holders, "add_match", self._add_match)
        monkeypatch.setattr(holders, "call", self._call)

    async def _add_match(self, _bus, rule: str) -> None:
        self.calls.append(("AddMatch", rule))
        answer = asyncio.get_running_loop().create_future()
        self.answers.append(answer)
        await answer

    async def _call(self, _bus, _dest, _path, _iface, member: str, _sig: str, body: list) -> list:
        self.calls.append((member, body[0]))
        return []


class SpawningDaemon(FakeDaemon):
    def __init__(self) -> None:
        super().__init__()
        self.spawned: list[asyncio.Task] = []

    def spawn(self, coro, guard=None) -> asyncio.Task:
        task = asyncio.ensure_future(coro)
        self.spawned.append(task)
        return task


async def turns(n: int = 10) -> None:
    """Let the tasks started so far run as far as they can."""
    for _ in range(n):
        await asyncio.sleep(0)


def watching(monkeypatch):
    matches = MatchBus(monkeypatch)
    daemon = SpawningDaemon()
    a = Api(daemon, FakeBus())
    a.start()
    return matches, daemon, a


async def test_concurrent_holds_of_one_caller_share_one_add_match_and_all_wait_for_it(monkeypatch):
    matches, _, a = watching(monkeypatch)
    first = asyncio.ensure_future(a.holders.watch(":1.7"))
    second = asyncio.ensure_future(a.holders.watch(":1.7"))
    await turns()
    assert [m for m, _ in matches.calls] == ["AddMatch"]
    assert not first.done() and not second.done(), "no Hold may commit before the match is in place"
    matches.answers[0].set_result(None)
    await asyncio.gather(first, second)
    assert "arg0=':1.7'" in matches.calls[0][1]


async def test_a_failed_add_match_is_not_remembered_as_a_watch(monkeypatch):
    matches, _, a = watching(monkeypatch)
    first = asyncio.ensure_future(a.holders.watch(":1.7"))
    await turns()
    matches.answers[0].set_exception(holders.BusError("org.freedesktop.DBus.Error.LimitsExceeded",
                                                  "Café ☕: too many matches"))
    try:
        await first
    except holders.BusError:
        pass
    else:
        raise AssertionError("the Hold that asked must see the failure")
    second = asyncio.ensure_future(a.holders.watch(":1.7"))
    await turns()
    assert [m for m, _ in matches.calls] == ["AddMatch", "AddMatch"], "the next Hold asks again"
    matches.answers[1].set_result(None)
    await second


async def test_remove_match_waits_for_its_add_match_and_a_pending_hold_keeps_the_watch(monkeypatch):
    matches, daemon, a = watching(monkeypatch)
    slot = daemon.holds.reserve(":1.7", 1000)  # a Hold still being authorised
    watch = asyncio.ensure_future(a.holders.watch(":1.7"))
    await turns()
    a.holders.unwatch(":1.7")
    assert ":1.7" in a.holders._watched and not daemon.spawned, "a caller taking a hold stays watched"
    slot.cancel()
    a.holders.unwatch(":1.7")
    (remove,) = daemon.spawned
    await turns()
    assert [m for m, _ in matches.calls] == ["AddMatch"], "RemoveMatch before AddMatch's answer"
    matches.answers[0].set_result(None)
    await asyncio.gather(watch, remove)
    assert [m for m, _ in matches.calls] == ["AddMatch", "RemoveMatch"]
    assert matches.calls[0][1] == matches.calls[1][1]


# ---- when a scan request was made ---------------------------------------------------------

class Clocks:
    """time.time and the boot-time clock, moved by the test."""

    def __init__(self, monkeypatch, wall: float = 1_800_000_000.0, boot: float = 5000.0) -> None:
        self.wall, self.boot = wall, boot
        monkeypatch.setattr(methods.time, "time", lambda: self.wall)
        monkeypatch.setattr(methods.time, "clock_gettime",
                            lambda clock: self.boot if clock == methods.time.CLOCK_BOOTTIME else 0.0)

    def advance(self, seconds: float) -> None:
        self.wall += seconds
        self.boot += seconds


def test_wall_clock_of_an_unknown_moment_is_the_time_of_each_report(monkeypatch):
    """A report without a boot-time stamp is filed when it arrives, not when the first did:
    otherwise it ages out of RecentScanRequests early and misses attribution's window."""
    clocks = Clocks(monkeypatch)
    first = methods.wall_clock(0.0)
    clocks.advance(300.0)
    assert methods.wall_clock(0.0) == first + 300.0


def test_wall_clock_turns_the_boot_time_clock_into_the_wall_clock(monkeypatch):
    clocks = Clocks(monkeypatch)
    assert methods.wall_clock(clocks.boot - 2.0) == clocks.wall - 2.0
    assert methods.wall_clock(clocks.boot + 60.0) == clocks.wall  # not from the future
    clocks.advance(10.0)
    assert methods.wall_clock(clocks.boot - 2.0) == clocks.wall - 2.0


def test_wall_clock_keeps_nothing_per_report():
    """Each report gives a new uptime, and any local user can make the rule report: memory
    must not grow with the number of reports."""
    import gc
    import tracemalloc

    methods.wall_clock(1.0)  # warm up whatever is allocated once
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(20_000):
            methods.wall_clock(1.0 + n / 1000.0)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 64 * 1024, f"{grown} bytes kept after 20,000 reports"


def test_polkit_uid_is_looked_up_until_found_then_kept(monkeypatch):
    asked: list[str] = []
    users = {}

    def getpwnam(name: str):
        asked.append(name)
        if name not in users:
            raise KeyError(name)
        return users[name]

    monkeypatch.setattr(callers.pwd, "getpwnam", getpwnam)
    monkeypatch.setattr(callers, "_polkit_uid", None)
    assert callers.polkit_uid() is None
    assert callers.polkit_uid() is None
    assert asked == ["polkitd", "polkitd"]  # not there yet: asked again
    users["polkitd"] = type("pw", (), {"pw_uid": 997})()
    assert callers.polkit_uid() == 997
    assert callers.polkit_uid() == 997
    assert asked == ["polkitd"] * 3


# ---- Hold: authorised before it takes a slot ------------------------------------------------

class PolkitBus:
    """The bus calls the Hold handler makes (GetConnectionUnixUser, AddMatch, NameHasOwner,
    CheckAuthorization, RemoveMatch), answered from the test's tables; the checks of users in
    `silent` are never answered, as with an authentication agent that does not reply."""

    def __init__(self, monkeypatch, uids: dict[str, int], silent: set[int]) -> None:
        self.uids, self.silent = uids, silent
        self.waiting: list[tuple[str, asyncio.Future]] = []
        self.gone: set[str] = set()
        self.removed: list[str] = []
        monkeypatch.setattr(callers, "call", self._call)  # GetConnectionUnixUser, CheckAuthorization
        monkeypatch.setattr(holders, "call", self._call)  # RemoveMatch
        monkeypatch.setattr(holders, "add_match", self._add_match)
        monkeypatch.setattr(holders, "name_has_owner", self._has_owner)

    async def _call(self, _bus, _dest, _path, _iface, member: str, _sig: str = "", body=(),
                    timeout: float = 0) -> list:
        if member == "GetConnectionUnixUser":
            return [self.uids[body[0]]]
        if member == "CheckAuthorization":
            sender = body[0][1]["name"].value
            if self.uids[sender] in self.silent:
                answer = asyncio.get_running_loop().create_future()
                self.waiting.append((sender, answer))
                return await answer
            return [[True, False, {}]]
        if member == "RemoveMatch":
            self.removed.append(body[0])
            return []
        raise AssertionError(f"unexpected call {member}")

    async def _add_match(self, _bus, rule: str) -> None:
        return None

    async def _has_owner(self, _bus, name: str) -> bool:
        return name not in self.gone

    def answer_all(self, yes: bool) -> None:
        for _, answer in self.waiting:
            if not answer.done():
                answer.set_result([[yes, False, {}]])


def hold_call(sender: str, serial: int, reason: str = "Café ☕") -> Message:
    return Message(destination=BUS_NAME, path=methods.PATH, interface=methods.IFACE, member="Hold",
                   signature="sss", body=[reason, "org.example.Café", ""], sender=sender,
                   serial=serial)


async def test_holds_waiting_on_an_agent_that_never_answers_do_not_block_other_users(monkeypatch):
    """Two local accounts start as many Hold calls as they can, on many connections, and their
    authentication agents never answer: a third user still gets a hold, at once."""
    silent = {1001, 1002}
    uids = {f":1.{uid}.{c}": uid for uid in silent for c in range(8)} | {":1.3": 1003}
    polkit = PolkitBus(monkeypatch, uids, silent)
    daemon = SpawningDaemon()
    a = Api(daemon, FakeBus())
    calls = [asyncio.ensure_future(a._hold(hold_call(sender, n)))
             for n, sender in enumerate(s for s in uids if uids[s] in silent for _ in range(8))]
    await turns(20)
    refused = [c.exception() for c in calls if c.done()]
    assert len(polkit.waiting) == 2 * holds_module.MAX_WAITING_PER_UID
    assert len(refused) == len(calls) - len(polkit.waiting)
    assert {e.name for e in refused} == {methods.ERROR_TOO_MANY_HOLDS}
    assert any(f"(at most {holds_module.MAX_WAITING_PER_UID} at once)" in e.text for e in refused)

    reply = await asyncio.wait_for(a._hold(hold_call(":1.3", 999)), 5)
    assert reply.message_type.name == "METHOD_RETURN", reply.body
    (hold,) = daemon.holds.all()
    assert (hold.caller, hold.caller_uid, hold.reason) == (":1.3", 1003, "Café ☕")

    polkit.answer_all(False)  # the agents answer at last: no
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert {e.name for e in results} == {methods.ERROR_TOO_MANY_HOLDS, methods.ACCESS_DENIED}
    assert daemon.holds.callers() == {":1.3"} and len(daemon.holds) == 1


def owner_gone(name: str) -> Message:
    return Message(message_type=holders.MessageType.SIGNAL, path="/org/freedesktop/DBus",
                   interface="org.freedesktop.DBus", member="NameOwnerChanged", signature="sss",
                   body=[name, name, ""], sender="org.freedesktop.DBus", serial=1)


async def test_a_caller_that_leaves_while_polkit_is_asked_gets_no_hold_and_is_unwatched(monkeypatch):
    polkit = PolkitBus(monkeypatch, {":1.30": 1001}, {1001})
    daemon = SpawningDaemon()
    a = Api(daemon, FakeBus())
    call = asyncio.ensure_future(a._hold(hold_call(":1.30", 1)))
    await turns()
    assert len(polkit.waiting) == 1
    assert ":1.30" in a.holders._watched, "a Hold waiting for polkit keeps its caller watched"
    polkit.gone.add(":1.30")
    a.holders.on_signal(owner_gone(":1.30"))
    assert daemon.holds.callers() == set()
    polkit.answer_all(True)  # polkit says yes after the caller left
    try:
        await call
    except methods.CallError as e:
        assert e.name == methods.ERROR_FAILED and "left the bus" in e.text
    else:
        raise AssertionError("a Hold whose caller left must not be taken")
    assert len(daemon.holds) == 0
    await asyncio.gather(*daemon.spawned)
    assert polkit.removed and "arg0=':1.30'" in polkit.removed[0] and ":1.30" not in a.holders._watched


# ---- who may see who asked for a scan -----------------------------------------------------

def requests_api(monkeypatch, users: dict[int, str]) -> tuple[Api, FakeDaemon]:
    def getpwuid(uid: int):
        if uid not in users:
            raise KeyError(uid)
        return type("pw", (), {"pw_name": users[uid]})()
    monkeypatch.setattr(callers.pwd, "getpwuid", getpwuid)
    daemon = FakeDaemon()
    a = Api(daemon, FakeBus())
    return a, daemon


def get_requests(a: Api, monkeypatch, uid: int) -> list:
    as_caller(monkeypatch, uid)
    msg = Message(destination=BUS_NAME, path=methods.PATH, interface=methods.IFACE,
                  member="GetRecentScanRequests", sender=":1.40", serial=3)
    reply = asyncio.run(a._get_recent_scan_requests(msg))
    assert reply.signature == "a(dsusb)"
    (entries,) = reply.body
    return [tuple(e) for e in entries]


@pytest.mark.parametrize("name, program", [("alice", "nmcli"), ("Café ☕", "Café ☕")])
def test_the_property_names_nobody_and_the_method_names_the_callers_own(monkeypatch, name, program):
    """A property reads the same for every local user: it must not show one user's processes
    to another (hidepid).  Each user gets their own requests named; root gets all."""
    a, daemon = requests_api(monkeypatch, {1000: name, 1001: "bob"})
    daemon.who_asked.requests.extend([
        (Request(at=10.0, program=program, pid=4242, user=name), False),
        (Request(at=11.0, program="waybar", pid=777, user="bob"), True)])

    public = [tuple(e) for e in properties.property_values(daemon)["RecentScanRequests"].value]
    assert public == [(10.0, "", 0, "", False), (11.0, "", 0, "", True)]
    assert get_requests(a, monkeypatch, 1000) == [(10.0, name, 4242, program, False),
                                                  (11.0, "", 0, "", True)]
    assert get_requests(a, monkeypatch, 1001) == [(10.0, "", 0, "", False),
                                                  (11.0, "bob", 777, "waybar", True)]
    assert get_requests(a, monkeypatch, 0) == [(10.0, name, 4242, program, False),
                                               (11.0, "bob", 777, "waybar", True)]
    assert get_requests(a, monkeypatch, 5555) == public  # a uid with no name owns nothing


def test_the_callers_name_is_looked_up_off_the_event_loop(monkeypatch):
    """getpwuid can wait on the network (NSS: LDAP, SSSD); the loop must not."""
    import threading
    a, daemon = requests_api(monkeypatch, {})
    threads = []

    def getpwuid(uid):
        threads.append(threading.current_thread())
        return type("pw", (), {"pw_name": "Café ☕"})()
    monkeypatch.setattr(callers.pwd, "getpwuid", getpwuid)
    get_requests(a, monkeypatch, 1000)
    assert threads and threading.main_thread() not in threads


# ---- polkit checks: capped over Hold and Reload, withdrawn at the daemon's timeout ------------

class TimingPolkitBus(PolkitBus):
    """PolkitBus whose silent checks end at the caller's timeout, as peers.bus.call ends them,
    and which records CancelCheckAuthorization."""

    def __init__(self, monkeypatch, uids, silent) -> None:
        super().__init__(monkeypatch, uids, silent)
        self.ids: list[str] = []
        self.cancelled: list[str] = []

    async def _call(self, _bus, _dest, _path, _iface, member: str, _sig: str = "", body=(),
                    timeout: float = 0) -> list:
        if member == "CheckAuthorization":
            self.ids.append(body[-1])
            if self.uids[body[0][1]["name"].value] in self.silent:
                try:
                    await asyncio.wait_for(asyncio.get_running_loop().create_future(), timeout)
                except TimeoutError:
                    raise callers.BusError(callers.TIMEOUT, "no answer") from None
        if member == "CancelCheckAuthorization":
            self.cancelled.append(body[0])
            return []
        return await super()._call(_bus, _dest, _path, _iface, member, _sig, body, timeout)


class ReloadingDaemon(SpawningDaemon):
    def __init__(self) -> None:
        super().__init__()
        self.reloads = 0

    async def reload(self) -> None:
        self.reloads += 1


def reload_call(sender: str, serial: int, interactive: bool = True) -> Message:
    return Message(destination=BUS_NAME, path=methods.PATH, interface=methods.IFACE, member="Reload",
                   sender=sender, serial=serial,
                   flags=MessageFlag(4 if interactive else 0))


async def test_reloads_waiting_on_an_agent_are_capped_and_withdrawn_at_the_timeout(monkeypatch):
    monkeypatch.setattr(callers, "POLKIT_INTERACTIVE_TIMEOUT", 0.2)
    uids = {f":1.{c}": 1001 for c in range(4)} | {":1.9": 1002}
    polkit = TimingPolkitBus(monkeypatch, uids, silent={1001})
    daemon = ReloadingDaemon()
    a = Api(daemon, FakeBus())
    calls = [asyncio.ensure_future(a._reload(reload_call(f":1.{n % 4}", n))) for n in range(40)]
    await turns(20)
    refused = [c.exception() for c in calls if c.done()]
    assert len(a.checks) == callers.MAX_CHECKS_PER_UID == len(polkit.ids)
    assert len(refused) == 40 - callers.MAX_CHECKS_PER_UID
    assert {e.name for e in refused} == {callers.LIMITS_EXCEEDED}
    assert any(f"user 1001 already waits for {callers.MAX_CHECKS_PER_UID}" in e.text
               for e in refused)
    # another user is still asked at once (and here polkit says yes)
    reply = await asyncio.wait_for(a._reload(reload_call(":1.9", 99)), 5)
    assert reply.message_type.name == "METHOD_RETURN" and daemon.reloads == 1
    # at the daemon's timeout every waiting check is withdrawn, by the id it was asked with
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert {e.name for e in results} == {callers.LIMITS_EXCEEDED, methods.ERROR_NOT_READY}
    await turns(20)
    waited = polkit.ids[:callers.MAX_CHECKS_PER_UID]
    assert sorted(polkit.cancelled) == sorted(waited) and len(set(waited)) == len(waited)
    assert len(a.checks) == 0 and a.checks.withdrawn == len(waited)


@pytest.mark.parametrize("closed", [EOFError(), ConnectionResetError("reset by peer")])
async def test_a_withdrawal_the_closing_connection_ends_is_no_unretrieved_error(closed):
    """The bus ends every call still waiting on a connection that closes with the error that
    closed it (dbus-next's EOFError at end of stream, or the socket's): peers.bus.call makes
    that a BusError (Disconnected), so a withdrawal under way ends as a refused one does, and
    no task is left failed for asyncio to report."""
    loop = asyncio.get_running_loop()
    unhandled: list[dict] = []
    loop.set_exception_handler(lambda _loop, context: unhandled.append(context))
    asked: list[str] = []

    class ClosingBus:
        async def call(self, msg: Message) -> Message:
            asked.append(msg.member)
            raise closed

    checks = callers.PolkitChecks()
    callers._withdraw(ClosingBus(), "scanguard-7", checks)  # type: ignore[arg-type]
    await turns(5)
    gc.collect()  # a failed task's error is reported when the task is collected
    await turns(5)
    assert asked == ["CancelCheckAuthorization"]
    assert not callers._withdrawing and checks.withdrawn == 0, "ended, nothing withdrawn"
    assert unhandled == [], unhandled
