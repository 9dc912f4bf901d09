"""The suspension table read as the rule: every (state, event) pair, checked for what the rule
says of it (nm_scanguard.daemon.bgscan.suspension_table's docstring)."""

import itertools

import pytest

from nm_scanguard.daemon.bgscan.suspension_table import (
    BUSY, LIVE, UNOWNED, Ev, Kind, Refused, State, journaled, read, step,
)

SAVED = "simple:30:-70:86400"
# What shows that no "" of ours stands any more: a read, a refusal, a restore answered, the
# object or the process gone.  No other event may drop an entry.
# (DROP: an entry not under its interface's object now names an object that is gone.)
EVIDENCE = {Ev.READ_EMPTY, Ev.READ_VALUE, Ev.READ_OTHER, Ev.SET_NOT_APPLIED, Ev.DONE, Ev.GONE,
            Ev.RESTARTED, Ev.DROP}
IFNAMES = ["wlan0", "wlé0"]


def states(ifname: str, generation: int = 2):
    """Every state the table can hold, in every variant of its data."""
    origins = {Kind.RESTORING: tuple(LIVE | UNOWNED), Kind.READING: tuple(UNOWNED)}
    for kind in Kind:
        for saved, restarted, origin in itertools.product(
                (SAVED, None), (False, True), origins.get(kind, (None,))):
            if saved is None and (kind is not Kind.READING or origin is not None):
                continue  # only READING can be without an entry: then it took none over
            yield State(kind, ifname, saved, generation, restarted, origin)
        if kind is Kind.READING:
            yield State(kind, ifname, None, generation)


def apply(s, ev, generation, ifname="wlan0"):
    try:
        return step(s, ev, generation=generation, ifname=ifname, value=SAVED)
    except Refused:
        return Refused


@pytest.mark.parametrize("ifname", IFNAMES)
def test_an_entry_is_dropped_only_on_evidence(ifname):
    """With no removal since the state's read, only an event that shows our "" gone may take a
    journaled state to one without an entry."""
    for s, ev in itertools.product(states(ifname), Ev):
        after = apply(s, ev, s.generation, ifname)
        if journaled(s) and after is not Refused and not journaled(after):
            assert ev in EVIDENCE, (s, ev, after)


@pytest.mark.parametrize("ifname", IFNAMES)
def test_a_removal_since_the_read_is_evidence_except_for_a_set_left_behind(ifname):
    """A Set left behind may land on the object that replaced the removed one."""
    for s, ev in itertools.product(states(ifname), Ev):
        after = apply(s, ev, s.generation + 1, ifname)
        left_behind = s.kind is Kind.LEFT_BEHIND or s.origin is Kind.LEFT_BEHIND
        if left_behind and (ev not in EVIDENCE or ev is Ev.GONE):
            assert after is Refused or journaled(after), (s, ev, after)


@pytest.mark.parametrize("ifname", IFNAMES)
def test_every_pair_is_a_transition_or_refused(ifname):
    """No pair falls through to an error other than Refused, and a state keeps its network's
    interface and saved value unless the event is about them."""
    for s, ev in itertools.product(states(ifname), Ev):
        for generation in (s.generation, s.generation + 1):
            after = apply(s, ev, generation, ifname)
            if after not in (None, Refused) and ev is not Ev.READ_VALUE:
                assert after.saved == s.saved and after.ifname == ifname


def test_a_second_suspend_of_a_network_in_use_is_refused():
    for s in states("wlan0"):
        after = apply(s, Ev.ASK, s.generation)
        assert (after is Refused) == (s.kind not in UNOWNED), s
    assert step(None, Ev.ASK, generation=0, ifname="wlé0") == State(Kind.READING, "wlé0", None, 0)


def test_the_journal_is_written_before_the_set_and_kept_while_it_may_land():
    reading = State(Kind.READING, "wlan0", None, 0)
    assert not journaled(reading)
    setting = step(reading, Ev.READ_VALUE, generation=0, value=SAVED)
    assert setting.kind is Kind.SETTING and journaled(setting)
    for ev in (Ev.CANCELLED, Ev.RESTARTED, Ev.GONE):
        assert journaled(step(setting, ev, generation=1)), ev
    left = step(setting, Ev.CANCELLED, generation=0)
    assert left.kind is Kind.LEFT_BEHIND and step(left, Ev.GONE, generation=5) == left


def test_a_restart_during_the_set_leaves_the_suspension_in_doubt():
    setting = State(Kind.SETTING, "wlan0", SAVED, 0, restarted=False)
    after = step(step(setting, Ev.RESTARTED, generation=0), Ev.SET_APPLIED, generation=0)
    assert after.kind is Kind.IN_DOUBT and not after.restarted
    assert step(setting, Ev.SET_APPLIED, generation=0).kind is Kind.SUSPENDED


def test_a_set_that_hit_a_recreated_object_is_put_back():
    setting = State(Kind.SETTING, "wlan0", SAVED, 0)
    putting = step(setting, Ev.SET_APPLIED, generation=1)
    assert putting.kind is Kind.PUTTING_BACK and putting.generation == 1
    assert step(putting, Ev.DONE, generation=1) is None
    assert step(putting, Ev.FAILED, generation=1).kind is Kind.SUSPENDED  # released later
    assert step(putting, Ev.FAILED, generation=2) is None  # removed again, and our "" with it


@pytest.mark.parametrize("origin", [Kind.SUSPENDED, Kind.IN_DOUBT, Kind.LEFTOVER, Kind.LEFT_BEHIND])
def test_a_restore_ends_only_when_it_shows_no_our_empty_value_stands(origin):
    before = State(origin, "wlan0", SAVED, 3)
    restoring = step(before, Ev.RESTORE, generation=3)
    assert restoring.kind is Kind.RESTORING and restoring.kind in BUSY
    read = step(restoring, Ev.READ_EMPTY, generation=3)
    assert read.kind is Kind.RESTORING
    assert step(read, Ev.DONE, generation=3) is None
    assert step(restoring, Ev.READ_VALUE, generation=3) is None  # someone else's value
    for ev in (Ev.FAILED, Ev.UNANSWERED, Ev.UNKNOWN, Ev.CANCELLED):
        assert journaled(step(read, ev, generation=3)), ev
    unknown = step(read, Ev.UNKNOWN, generation=3)
    assert unknown.kind is (Kind.IN_DOUBT if origin in LIVE else Kind.LEFTOVER)


def test_a_suspension_in_doubt_is_read_before_it_counts():
    doubt = State(Kind.IN_DOUBT, "wlan0", SAVED, 0)
    assert step(doubt, Ev.READ_EMPTY, generation=0).kind is Kind.SUSPENDED
    assert step(doubt, Ev.READ_VALUE, generation=0) is None
    assert step(doubt, Ev.FAILED, generation=0) == doubt


def test_a_take_over_of_a_set_left_behind_that_fails_keeps_it_left_behind():
    """Its Set may still land on the object that replaces a removed one: a failed read by a
    guard taking it over must not turn it into an entry a removal drops."""
    left = State(Kind.LEFT_BEHIND, "wlan0", SAVED, 0)
    reading = step(left, Ev.ASK, generation=1, ifname="wlé0", op=7)
    assert reading.kind is Kind.READING and reading.origin is Kind.LEFT_BEHIND and reading.op == 7
    back = step(reading, Ev.FAILED, generation=1)
    assert back.kind is Kind.LEFT_BEHIND
    assert step(back, Ev.GONE, generation=2) == back
    leftover = step(step(State(Kind.LEFTOVER, "wlan0", SAVED, 0), Ev.ASK, generation=0),
                    Ev.READ_OTHER, generation=0)
    assert leftover.kind is Kind.LEFTOVER


@pytest.mark.parametrize("origin", [Kind.LEFTOVER, Kind.LEFT_BEHIND])
@pytest.mark.parametrize("ifname", IFNAMES)
def test_a_take_over_that_read_its_empty_value_across_a_removal_is_in_doubt(origin, ifname):
    """A removal handled while the read was under way (its signal is handled on arrival, the
    answer when the task runs) may have come after the answer: the "" may be the old
    object's, and the new one's bgscan NetworkManager's.  Read again before counting on it."""
    reading = step(State(origin, "wlan0", SAVED, 0), Ev.ASK, generation=3, ifname=ifname, op=5)
    assert step(reading, Ev.READ_EMPTY, generation=3).kind is Kind.SUSPENDED
    doubt = step(reading, Ev.READ_EMPTY, generation=4)
    assert doubt == State(Kind.IN_DOUBT, ifname, SAVED, 4, op=5), "kept, and read again"
    assert step(doubt, Ev.READ_VALUE, generation=4, value=SAVED) is None
    assert step(doubt, Ev.READ_EMPTY, generation=4).kind is Kind.SUSPENDED


def test_an_unanswered_set_that_cannot_be_read_back_is_in_doubt():
    setting = State(Kind.SETTING, "wlan0", SAVED, 0)
    assert step(setting, Ev.SET_ASSUMED, generation=0).kind is Kind.IN_DOUBT
    # Across a removal it may have hit either object: read before it counts, no put-back.
    assert step(setting, Ev.SET_ASSUMED, generation=1) == setting._replace(
        kind=Kind.IN_DOUBT, generation=1)
    putting = State(Kind.PUTTING_BACK, "wlan0", SAVED, 1)
    assert step(putting, Ev.UNKNOWN, generation=1).kind is Kind.IN_DOUBT
    assert step(putting, Ev.UNKNOWN, generation=2) is None


def test_a_guard_that_is_gone_leaves_its_suspension_to_the_replay():
    for kind in LIVE:
        s = State(kind, "wlan0", SAVED, 0)
        assert step(s, Ev.ABANDON, generation=0).kind is Kind.LEFTOVER
    for s in states("wlan0"):
        if s.kind not in LIVE:
            assert step(s, Ev.ABANDON, generation=0) == s


def test_a_value_read_is_one_event_whoever_reads_it():
    assert read("") is Ev.READ_EMPTY and read(SAVED) is Ev.READ_VALUE
    for other in (None, "learn:30:-70:86400:/tmp/db", "simple:30"):
        assert read(other) is Ev.READ_OTHER
    # Only READING tells a value the journal can keep from any other; elsewhere both say that
    # our "" is not there any more.
    for s in states("wlan0"):
        if s.kind is not Kind.READING:
            assert apply(s, Ev.READ_VALUE, s.generation) == apply(s, Ev.READ_OTHER, s.generation)


def test_an_earlier_instances_entry_enters_the_table_as_leftover():
    assert step(None, Ev.FOUND, generation=4, ifname="wlé0", value=SAVED) == State(
        Kind.LEFTOVER, "wlé0", SAVED, 4)
    for s in states("wlan0"):
        assert apply(s, Ev.FOUND, s.generation) is Refused
        assert (apply(s, Ev.DROP, s.generation) is None) == (s.kind in UNOWNED)
