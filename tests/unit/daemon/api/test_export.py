"""Refused calls are logged so that no caller can flood the journal (export.RefusalLog)."""

from __future__ import annotations

import asyncio
import logging
from typing import Callable

import pytest

from nm_scanguard.daemon.api import methods
from nm_scanguard.dbuslib import Message
from nm_scanguard.daemon.api.export import CallError, ExportedObject, RefusalLog, load_interface
from nm_scanguard.names import ACCESS_DENIED, BUS_NAME, ERROR_FAILED, IFACE, PATH

CAFE = "Café ☕"


class Timers:
    """A fake clock and call_later: time moves and timers fire only when the test says."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.pending: list[Timer] = []

    def clock(self) -> float:
        return self.now

    def later(self, delay: float, callback: Callable[[], None]) -> Timer:
        timer = Timer(self.now + delay, callback)
        self.pending.append(timer)
        return timer

    def advance(self, seconds: float) -> None:
        self.now += seconds
        for timer in [t for t in self.pending if t.at <= self.now and not t.cancelled]:
            self.pending.remove(timer)
            timer.callback()


class Timer:
    def __init__(self, at: float, callback: Callable[[], None]) -> None:
        self.at, self.callback, self.cancelled = at, callback, False

    def cancel(self) -> None:
        self.cancelled = True


@pytest.fixture
def refusals(caplog):
    caplog.set_level(logging.INFO, logger="scanguard.api")
    timers = Timers()
    return RefusalLog(every=60.0, senders=4, clock=timers.clock, later=timers.later), timers


def lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "scanguard.api"]


def test_a_flood_from_one_sender_logs_its_first_refusal_and_then_one_summary(refusals, caplog):
    log, timers = refusals
    for n in range(10_000):
        log.refused("Hold", ":1.9", f"not authorised {n} {CAFE}")
        timers.advance(0.001)
    assert lines(caplog) == [f"Hold from :1.9 refused: not authorised 0 {CAFE}"]
    timers.advance(60.0)
    assert len(lines(caplog)) == 2
    assert lines(caplog)[1] == ("9999 more refused call(s) in the last 60 s were not logged one "
                                "by one (9999 from :1.9)")
    log.refused("Hold", ":1.9", CAFE)  # a new window: its first is logged again
    assert lines(caplog)[2] == f"Hold from :1.9 refused: {CAFE}"


def test_each_sender_gets_its_first_refusal_logged(refusals, caplog):
    log, timers = refusals
    for sender in (":1.1", ":1.2", ":1.1", ":1.3", ":1.2", ":1.1"):
        log.refused("Reload", sender, CAFE)
    assert lines(caplog) == [f"Reload from {s} refused: {CAFE}" for s in (":1.1", ":1.2", ":1.3")]
    timers.advance(60.0)
    assert lines(caplog)[-1].endswith("(2 from :1.1, 1 from :1.2)")


def test_many_senders_are_bounded_in_lines_and_in_memory(refusals, caplog):
    """A client that reconnects for every call gets a new unique name each time."""
    log, timers = refusals
    for n in range(5_000):
        log.refused("Hold", f":1.{n}", CAFE)
    assert len(lines(caplog)) == 4  # the table's cap
    assert len(log._unlogged) == 4
    timers.advance(60.0)
    assert lines(caplog)[-1] == ("4996 more refused call(s) in the last 60 s were not logged one "
                                 "by one (4996 from senders past the first 4)")
    assert len(log._unlogged) == 0


def test_the_summary_names_the_busiest_senders(refusals, caplog):
    log, timers = refusals
    for sender, n in ((":1.1", 3), (":1.2", 9), (":1.3", 5), (":1.4", 2)):
        for _ in range(n + 1):
            log.refused("Hold", sender, CAFE)
    log.refused("Hold", ":1.5", CAFE)  # past the cap
    timers.advance(60.0)
    assert lines(caplog)[-1] == ("20 more refused call(s) in the last 60 s were not logged one by "
                                 "one (9 from :1.2, 5 from :1.3, 3 from :1.1, 2 from other "
                                 "senders, 1 from senders past the first 4)")


def test_nothing_unlogged_means_no_summary(refusals, caplog):
    log, timers = refusals
    log.refused("Hold", ":1.1", CAFE)
    log.refused("Hold", ":1.2", CAFE)
    timers.advance(120.0)
    assert len(lines(caplog)) == 2 and timers.pending == []
    log.flush()
    assert len(lines(caplog)) == 2


def test_a_late_timer_does_not_merge_two_windows(refusals, caplog):
    """When the loop is busy the next refusal may come before the window's timer fires: it
    closes the old window itself, and the old timer is cancelled."""
    log, timers = refusals
    log.refused("Hold", ":1.1", CAFE)
    log.refused("Hold", ":1.1", CAFE)
    timers.now += 61.0  # time passes, the timer has not fired
    log.refused("Hold", ":1.1", "second window")
    assert lines(caplog)[-2:] == [
        "1 more refused call(s) in the last 60 s were not logged one by one (1 from :1.1)",
        "Hold from :1.1 refused: second window"]
    assert all(t.cancelled for t in timers.pending)
    timers.advance(1.0)
    assert len(lines(caplog)) == 3


def test_flush_sums_up_at_once():
    timers = Timers()
    log = RefusalLog(every=60.0, senders=4, clock=timers.clock, later=timers.later)
    log.refused("Hold", ":1.1", CAFE)
    log.refused("Hold", ":1.1", CAFE)
    log.flush()
    assert log._window_end is None and not log._unlogged and timers.pending[0].cancelled


@pytest.mark.parametrize("every, senders", [(0.0, 4), (60.0, 0)])
def test_bad_limits_are_refused(every, senders):
    with pytest.raises(ValueError):
        RefusalLog(every=every, senders=senders)


# ---- through the exported object ----------------------------------------------------------

class SinkBus:
    def __init__(self) -> None:
        self.sent: list = []

    def send(self, msg) -> None:
        self.sent.append(msg)

    def add_message_handler(self, handler) -> None:
        pass

    def remove_message_handler(self, handler) -> None:
        pass


async def test_a_flood_of_refused_calls_does_not_flood_the_log(caplog):
    """Any user can make calls that are refused; one log line each let a user push the daemon
    past journald's rate limit, which then dropped the daemon's real errors too."""
    async def refuse(msg: Message) -> Message:
        raise CallError(ACCESS_DENIED, f"not authorised {CAFE}")

    iface = load_interface(methods.xml_path(), IFACE)
    bus = SinkBus()
    obj = ExportedObject(bus, PATH, iface, {m.name: refuse for m in iface.methods}, dict)
    caplog.set_level(logging.INFO, logger="scanguard.api")
    for n in range(2_000):
        obj._on_message(Message(destination=BUS_NAME, path=PATH, interface=IFACE, member="Reload",
                                sender=f":1.{n % 3}", serial=n + 1))
    for _ in range(5):
        await asyncio.sleep(0)
    assert len(bus.sent) == 2_000  # every caller still gets its error
    assert all(m.error_name == ACCESS_DENIED for m in bus.sent)
    assert len(lines(caplog)) == 3, lines(caplog)[:5]  # one per sender
    obj.close()  # what was not logged is summed up, not lost
    assert lines(caplog)[-1].startswith("1997 more refused call(s)")


async def test_a_call_that_fails_unexpectedly_logs_one_traceback_not_one_per_call(caplog):
    """A burst a handler cannot serve (e.g. no thread can be started under the unit's task
    limit): every caller gets Failed, the journal gets the traceback once."""
    async def fail(msg: Message) -> Message:
        raise RuntimeError(f"can't start new thread {CAFE}")

    iface = load_interface(methods.xml_path(), IFACE)
    bus = SinkBus()
    obj = ExportedObject(bus, PATH, iface, {m.name: fail for m in iface.methods}, dict)
    caplog.set_level(logging.INFO, logger="scanguard")
    for n in range(100):
        obj._on_message(Message(destination=BUS_NAME, path=PATH, interface=IFACE,
                                member="GetRecentScanRequests", sender=":1.7", serial=n + 1))
    for _ in range(5):
        await asyncio.sleep(0)
    assert len(bus.sent) == 100
    assert all(m.error_name == ERROR_FAILED for m in bus.sent)
    logged = [r for r in caplog.records if r.name.startswith("scanguard")]
    assert len(logged) == 1 and logged[0].exc_info is not None, [r.getMessage() for r in logged]
    assert f"can't start new thread {CAFE}" in logged[0].getMessage()
    obj.close()


def test_the_daemon_serves_the_xml_at_the_top_of_its_package():
    """The package's own copy (package data beside nm_scanguard/__init__.py), wherever the
    module that reads it sits; the one installed for other programs only without it."""
    import os

    import nm_scanguard
    from nm_scanguard.names import XML_NAME

    assert methods.xml_path() == os.path.join(os.path.dirname(os.path.abspath(nm_scanguard.__file__)),
                                              XML_NAME)
