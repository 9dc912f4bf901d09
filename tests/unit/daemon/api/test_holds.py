"""The hold table: caps that no interleaving can exceed, one release path, bounded ActiveHolds."""

from __future__ import annotations

import asyncio
import random
import re
import secrets
import struct

import pytest
from hypothesis import settings, strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, invariant, precondition, rule,
                                 run_state_machine_as_test)

import nm_scanguard.daemon.api.holds as holds_module
from nm_scanguard.daemon.api.holds import (HOLD_FIELDS, MAX_CALLER_BYTES, MAX_IFNAME_BYTES, MAX_PER_CALLER,
                                MAX_PER_UID, MAX_TEXT_BYTES, MAX_TOTAL, MAX_WAITING_PER_CALLER,
                                MAX_WAITING_PER_UID, MAX_WAITING_TOTAL, Hold, HoldError, Holds,
                                check_text)

CAFE = "Café ☕"
TEXTS = ["video call", CAFE]


def count_for(holds: Holds, caller: str) -> int:
    """Holds taken by `caller` (pending reservations not included)."""
    return sum(1 for h in holds.all() if h.caller == caller)


def pending_count(holds: Holds) -> int:
    """Reservations not yet committed or cancelled (Hold calls waiting for polkit or granted)."""
    return len(holds._pending)


def take(holds: Holds, caller: str, uid: int = 1000, reason: str = "video call",
         app: str = "org.example.App", interface: str = "", since: float = 1.0) -> Hold:
    with holds.reserve(caller, uid) as r:
        r.grant()
        return r.commit(reason, app, interface, since)


class Counter:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1


# ---- caps: counted before the await -------------------------------------------------------------

def test_120_synchronous_reservations_from_one_caller_give_the_per_caller_cap():
    holds = Holds()
    got, refused = [], []
    for _ in range(120):
        try:
            got.append(holds.reserve(":1.5", 0, granted=True))
        except HoldError as e:
            refused.append(e)
    assert len(got) == MAX_PER_CALLER
    assert len(refused) == 120 - MAX_PER_CALLER
    assert {e.kind for e in refused} == {"too-many"}
    assert f"already has {MAX_PER_CALLER} holds" in refused[0].text
    assert pending_count(holds) == MAX_PER_CALLER and len(holds) == 0

    got[0].cancel()
    again = holds.reserve(":1.5", 0, granted=True)
    assert again.pending
    with pytest.raises(HoldError):
        holds.reserve(":1.5", 0, granted=True)


async def test_120_concurrent_hold_calls_with_an_await_in_between_give_the_cap():
    """The shape of the Hold handler: reserve, await polkit, grant, commit.  Waiting calls do
    not count against the holds' caps, so the cap must hold when the answers come."""
    holds = Holds(waiting_per_caller=200, waiting_per_uid=200, waiting_total=200)
    polkit = asyncio.Event()

    async def hold_call(i: int) -> Hold:
        with holds.reserve(":1.5", 1000) as r:
            await polkit.wait()  # every call is in flight at once
            r.grant()
            return r.commit(f"call {i} {CAFE}", "org.example.App", "", float(i))

    tasks = [asyncio.create_task(hold_call(i)) for i in range(120)]
    await asyncio.sleep(0)
    assert pending_count(holds) == 120 and len(holds) == 0
    polkit.set()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    taken = [r for r in results if isinstance(r, Hold)]
    refused = [r for r in results if isinstance(r, HoldError)]
    assert len(taken) == len(holds) == MAX_PER_CALLER
    assert len(refused) == 120 - MAX_PER_CALLER
    assert pending_count(holds) == 0


def test_per_uid_cap_counts_across_callers_and_granted_reservations():
    holds = Holds()
    for _ in range(MAX_PER_CALLER):
        take(holds, ":1.1", uid=1000)
    granted = []
    for _ in range(MAX_PER_UID - MAX_PER_CALLER):
        r = holds.reserve(":1.2", 1000)
        r.grant()  # counted, though not committed
        granted.append(r)
    with pytest.raises(HoldError) as e:
        holds.reserve(":1.3", 1000)
    assert e.value.kind == "too-many"
    assert f"user 1000 already has {MAX_PER_UID} holds" in e.value.text
    assert pending_count(holds) == len(granted)

    other = holds.reserve(":1.3", 1001)  # another user is not affected
    other.grant()
    granted[0].cancel()
    third = holds.reserve(":1.4", 1000)  # the cancelled slot is free again
    third.grant()
    assert third.uid == 1000


def test_a_grant_finding_the_holds_full_gives_the_place_back():
    holds = Holds(per_uid=2)
    waiting = holds.reserve(":1.1", 1000)  # asked polkit while there was room
    take(holds, ":1.2", uid=1000)
    take(holds, ":1.3", uid=1000)
    with pytest.raises(HoldError) as e:
        waiting.grant()
    assert e.value.kind == "too-many" and "user 1000 already has 2 holds (at most 2)" in e.value.text
    assert not waiting.pending and pending_count(holds) == 0


def test_total_cap_counts_holds_and_granted_reservations_of_every_caller():
    holds = Holds()
    callers = [f":1.{i}" for i in range(MAX_TOTAL // MAX_PER_CALLER)]
    for n, caller in enumerate(callers):
        for _ in range(MAX_PER_CALLER):
            if n % 2:
                holds.reserve(caller, n, granted=True)  # granted ones fill the service too
            else:
                take(holds, caller, uid=n)
    with pytest.raises(HoldError) as e:
        holds.reserve(":1.99", 99)
    assert e.value.kind == "too-many"
    assert f"every one of the {MAX_TOTAL} holds" in e.value.text
    first = next(h for h in holds.all() if h.caller == callers[0])
    holds.release(first.cookie, callers[0], caller_is_root=False)
    assert holds.reserve(":1.99", 99).pending


def test_caps_are_constructor_arguments():
    holds = Holds(per_caller=2, per_uid=3, total=4, waiting_per_caller=1, waiting_per_uid=2,
                  waiting_total=3)
    take(holds, ":1.1", uid=7)
    take(holds, ":1.1", uid=7)
    with pytest.raises(HoldError, match="already has 2 holds"):
        holds.reserve(":1.1", 7)
    take(holds, ":1.2", uid=7)
    with pytest.raises(HoldError, match="user 7 already has 3 holds"):
        take(holds, ":1.2", uid=7)
    take(holds, ":1.2", uid=8)
    with pytest.raises(HoldError, match="every one of the 4 holds"):
        holds.reserve(":1.3", 9)
    holds = Holds(waiting_per_caller=1, waiting_per_uid=2, waiting_total=3)
    holds.reserve(":1.1", 7)
    with pytest.raises(HoldError, match=r"already has 1 Hold calls waiting .*\(at most 1 at once\)"):
        holds.reserve(":1.1", 7)
    holds.reserve(":1.2", 7)
    with pytest.raises(HoldError, match=r"user 7 already has 2 Hold calls waiting .*\(at most 2 at once\)"):
        holds.reserve(":1.3", 7)
    holds.reserve(":1.3", 8)
    with pytest.raises(HoldError, match=r"3 Hold calls are waiting .* at once \(3\)"):
        holds.reserve(":1.4", 9)


@pytest.mark.parametrize("cap", ["per_caller", "per_uid", "total", "waiting_per_caller",
                                 "waiting_per_uid", "waiting_total"])
def test_a_cap_below_one_is_refused(cap):
    with pytest.raises(ValueError, match=cap):
        Holds(**{cap: 0})


# ---- calls waiting for polkit -----------------------------------------------------------------

def test_calls_waiting_for_polkit_take_no_hold_slots():
    """An authentication agent that never answers keeps a Hold call waiting two minutes.  Two
    local accounts with as many waiting calls as they can start must not keep a third user
    from holding: waiting calls have caps of their own."""
    holds = Holds()
    waiting, refused = [], []
    for uid in (1001, 1002):
        for conn in range(8):  # several connections each
            for _ in range(8):
                try:
                    waiting.append(holds.reserve(f":1.{uid}{conn}", uid))
                except HoldError as e:
                    refused.append(e)
    assert len(waiting) == 2 * MAX_WAITING_PER_UID
    assert {e.kind for e in refused} == {"too-many"}
    assert any(f"user 1001 already has {MAX_WAITING_PER_UID} Hold calls waiting for polkit's "
               "answer" in e.text for e in refused)
    assert any(f"already has {MAX_WAITING_PER_CALLER} Hold calls waiting" in e.text
               for e in refused)
    hold = take(holds, ":1.3", uid=1003, reason=CAFE)  # a third user still holds
    assert holds.get(hold.cookie) == hold
    for n in range(MAX_TOTAL - 1):  # and every other hold slot is still there to take
        take(holds, f":2.{n // MAX_PER_CALLER}", uid=3000 + n // MAX_PER_UID)
    assert len(holds) == MAX_TOTAL


def test_the_waiting_total_bounds_calls_from_many_users():
    holds = Holds()
    users = MAX_WAITING_TOTAL // MAX_WAITING_PER_UID
    for uid in range(2000, 2000 + users):
        for n in range(MAX_WAITING_PER_UID):
            holds.reserve(f":1.{uid}.{n}", uid)
    with pytest.raises(HoldError) as e:
        holds.reserve(":1.9", 9999)
    assert e.value.kind == "too-many"
    assert f"{MAX_WAITING_TOTAL} Hold calls are waiting for polkit's answer" in e.value.text
    root = holds.reserve(":1.0", 0, granted=True)  # root is never asked: it does not wait
    root.commit(CAFE, CAFE, "", 1.0)
    assert len(holds) == 1


def test_a_call_waiting_for_polkit_counts_there_until_it_ends_even_if_its_caller_left():
    """Leaving and reconnecting must not pile up calls that still wait for polkit."""
    holds = Holds(waiting_per_uid=2)
    first = holds.reserve(":1.1", 1000)
    holds.reserve(":1.1", 1000)
    holds.caller_left(":1.1")
    assert holds.callers() == set() and pending_count(holds) == 0
    with pytest.raises(HoldError, match="user 1000 already has 2 Hold calls waiting"):
        holds.reserve(":1.2", 1000)
    with pytest.raises(HoldError) as e:
        first.grant()  # polkit says yes: too late
    assert e.value.kind == "caller-left"
    first.cancel()  # the call ends
    assert holds.reserve(":1.2", 1000).waiting


# ---- reservations ---------------------------------------------------------------------------

def test_context_manager_cancels_unless_committed():
    holds = Holds()
    with pytest.raises(KeyError):
        with holds.reserve(":1.1", 1000):
            raise KeyError("polkit said no")
    assert pending_count(holds) == 0
    with holds.reserve(":1.1", 1000):
        pass
    assert pending_count(holds) == 0
    hold = take(holds, ":1.1")
    assert holds.get(hold.cookie) == hold  # leaving the block after commit keeps the hold


def test_reservation_misuse_is_a_programming_error():
    holds = Holds()
    r = holds.reserve(":1.1", 5)
    assert r.waiting
    with pytest.raises(RuntimeError, match="grant"):
        r.commit("", "", "", 1.0)
    r.grant()
    r.grant()  # a second time does nothing
    assert not r.waiting and r.pending
    r.commit("", "", "", 1.0)
    with pytest.raises(RuntimeError, match="committed"):
        r.commit("", "", "", 1.0)
    with pytest.raises(RuntimeError, match="committed"):
        r.grant()
    r.cancel()
    assert len(holds) == 1
    with pytest.raises(ValueError, match="uid"):
        holds.reserve(":1.2", -1)
    with pytest.raises(ValueError, match="uid"):
        holds.reserve(":1.2", 2**32)


@pytest.mark.parametrize("caller", ["", ":" + "1" * MAX_CALLER_BYTES])
def test_caller_must_be_a_bus_name(caller):
    with pytest.raises(ValueError, match="unique name"):
        Holds().reserve(caller, 1000)


def test_a_caller_leaving_voids_its_pending_reservations():
    holds = Holds()
    r = holds.reserve(":1.1", 1000)
    r.grant()
    waiting = holds.reserve(":1.1", 1000)
    other = holds.reserve(":1.2", 1000)
    holds.caller_left(":1.1")
    assert pending_count(holds) == 1  # its slots are free at once
    with pytest.raises(HoldError) as e:
        r.commit(CAFE, CAFE, "", 1.0)
    assert e.value.kind == "caller-left"
    with pytest.raises(HoldError) as e:
        waiting.grant()
    assert e.value.kind == "caller-left"
    assert len(holds) == 0 and other.pending


# ---- release ------------------------------------------------------------------------------

@pytest.mark.parametrize("reason", TEXTS)
def test_holder_may_release(reason):
    changes = Counter()
    holds = Holds()
    holds.changed.connect(changes)
    hold = take(holds, ":1.1", reason=reason, app=reason)
    assert changes.calls == 1
    assert holds.release(hold.cookie, ":1.1", caller_is_root=False) == hold
    assert hold.reason == reason and hold.application_id == reason
    assert len(holds) == 0 and changes.calls == 2


def test_root_may_release_someone_elses_hold():
    holds = Holds()
    hold = take(holds, ":1.1")
    assert holds.release(hold.cookie, ":1.9", caller_is_root=True) == hold
    assert holds.get(hold.cookie) is None


def test_another_client_may_not_release():
    changes = Counter()
    holds = Holds()
    holds.changed.connect(changes)
    hold = take(holds, ":1.1")
    with pytest.raises(HoldError) as e:
        holds.release(hold.cookie, ":1.2", caller_is_root=False)
    assert e.value.kind == "not-holder"
    assert ":1.1" in e.value.text and "only it or root" in e.value.text
    assert holds.get(hold.cookie) == hold and changes.calls == 1


def test_unknown_cookie_and_double_release():
    holds = Holds()
    hold = take(holds, ":1.1")
    holds.release(hold.cookie, ":1.1", caller_is_root=False)
    for caller_is_root in (False, True):
        with pytest.raises(HoldError) as e:
            holds.release(hold.cookie, ":1.1", caller_is_root)
        assert e.value.kind == "unknown"
        assert str(hold.cookie) in e.value.text


def test_caller_left_removes_all_its_holds_and_notifies_once():
    changes = Counter()
    holds = Holds()
    holds.changed.connect(changes)
    mine = [take(holds, ":1.1", since=float(t), interface="wlan0") for t in (3, 1, 2)]
    theirs = take(holds, ":1.2")
    changes.calls = 0
    gone = holds.caller_left(":1.1")
    assert gone == sorted(mine, key=lambda h: h.since)
    assert changes.calls == 1
    assert holds.all() == [theirs] and holds.callers() == {":1.2"}
    assert count_for(holds, ":1.1") == 0
    assert holds.caller_left(":1.1") == [] and changes.calls == 1


# ---- listeners ----------------------------------------------------------------------------

def test_listeners_hear_changes_not_reservations():
    first, second = Counter(), Counter()
    holds = Holds()
    holds.changed.connect(first)
    holds.changed.connect(second)
    r = holds.reserve(":1.1", 1)
    r.grant()
    holds.reserve(":1.1", 1).cancel()
    assert first.calls == second.calls == 0
    hold = r.commit(CAFE, CAFE, "wlan0", 1.0)
    assert first.calls == second.calls == 1
    holds.release(hold.cookie, ":1.1", caller_is_root=False)
    assert first.calls == second.calls == 2


def test_a_failing_listener_does_not_silence_the_others(caplog):
    def broken() -> None:
        raise RuntimeError("listener bug")

    after = Counter()
    holds = Holds()
    holds.changed.connect(broken)
    holds.changed.connect(after)
    hold = take(holds, ":1.1")
    assert after.calls == 1 and holds.get(hold.cookie) == hold
    logged = [r.name for r in caplog.records if r.exc_info and "listener bug" in str(r.exc_info[1])]
    assert logged == ["scanguard.holds"], "logged once, by the holds"


def test_listener_sees_the_table_already_changed():
    seen: list[bool] = []
    holds = Holds()
    holds.changed.connect(lambda: seen.append(holds.held("wlan0")))
    hold = take(holds, ":1.1", interface="wlan0")
    holds.release(hold.cookie, ":1.1", caller_is_root=False)
    assert seen == [True, False]


# ---- views --------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["wlan0", CAFE])
def test_held_per_interface_and_everywhere(name):
    holds = Holds()
    assert not holds.held(name)
    one = take(holds, ":1.1", interface=name)
    assert holds.held(name) and not holds.held("wlan1")
    every = take(holds, ":1.2", interface="")
    assert holds.held(name) and holds.held("wlan1")
    holds.release(one.cookie, ":1.1", caller_is_root=False)
    assert holds.held(name) and holds.held("wlan1")
    holds.release(every.cookie, ":1.2", caller_is_root=False)
    assert not holds.held(name) and not holds.held("wlan1")


def test_all_is_ordered_by_since_then_cookie(monkeypatch):
    cookies = iter([30, 10, 20])
    monkeypatch.setattr(secrets, "randbits", lambda bits: next(cookies))
    holds = Holds()
    late = take(holds, ":1.1", since=5.0)
    a = take(holds, ":1.2", since=1.0)
    b = take(holds, ":1.3", since=1.0)
    assert [h.cookie for h in holds.all()] == sorted([a.cookie, b.cookie]) + [late.cookie]


def test_counts_and_callers():
    holds = Holds()
    take(holds, ":1.1")
    take(holds, ":1.1")
    holds.reserve(":1.1", 1000)
    take(holds, ":1.2")
    assert count_for(holds, ":1.1") == 2 and count_for(holds, ":1.3") == 0
    assert holds.callers() == {":1.1", ":1.2"}
    assert len(holds) == 3 and pending_count(holds) == 1


def test_a_caller_taking_a_hold_is_among_the_callers_until_its_slot_ends():
    """The API stops watching a caller's leaving when it is no longer among callers(); a Hold
    still being authorised must keep that watch (found by the model rung, 2026-11-26: two Holds
    of one client, the first released while the second was pending, the second committed
    unwatched and outlived its holder, bgscan stayed off)."""
    holds = Holds()
    first = take(holds, ":1.1")
    second = holds.reserve(":1.1", 1000)  # waiting for polkit
    holds.release(first.cookie, ":1.1", caller_is_root=False)
    assert holds.callers() == {":1.1"}
    second.grant()
    assert holds.callers() == {":1.1"}
    second.cancel()
    assert holds.callers() == set()
    holds.reserve(":1.2", 1000)
    assert holds.callers() == {":1.2"}
    holds.caller_left(":1.2")
    assert holds.callers() == set()


def test_hold_records_are_frozen():
    hold = take(Holds(), ":1.1")
    with pytest.raises(AttributeError):
        hold.interface = "wlan9"  # type: ignore[misc]


# ---- cookies ------------------------------------------------------------------------------

def test_cookies_are_unique_nonzero_u32():
    holds = Holds()
    for i in range(MAX_TOTAL):
        take(holds, f":1.{i}", uid=i)
    cookies = [h.cookie for h in holds.all()]
    assert len(set(cookies)) == MAX_TOTAL
    assert all(0 < c < 2**32 for c in cookies)


def test_cookie_zero_and_collisions_are_drawn_again(monkeypatch):
    drawn = iter([7, 0, 7, 9])
    monkeypatch.setattr(secrets, "randbits", lambda bits: next(drawn))
    holds = Holds()
    assert take(holds, ":1.1").cookie == 7
    assert take(holds, ":1.1").cookie == 9


# ---- texts --------------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["", "video call", CAFE, "a" * MAX_TEXT_BYTES,
                                  "é" * (MAX_TEXT_BYTES // 2), "☕" * (MAX_TEXT_BYTES // 3)])
def test_text_within_the_byte_cap_passes(text):
    check_text("reason", text)
    hold = take(Holds(), ":1.1", reason=text, app=text)
    assert hold.reason == text and hold.application_id == text


@pytest.mark.parametrize("text", ["a" * (MAX_TEXT_BYTES + 1), "é" * (MAX_TEXT_BYTES // 2 + 1),
                                  "☕" * 100, CAFE * 40])
def test_text_over_the_byte_cap_fails_and_says_bytes(text):
    size = len(text.encode("utf-8"))
    with pytest.raises(HoldError) as e:
        check_text("reason", text)
    assert e.value.kind == "bad-text"
    assert f"reason is {size} bytes in UTF-8; at most {MAX_TEXT_BYTES}" in e.value.text


@pytest.mark.parametrize("bad", ["\x00", "\t", "\n", "\x1b[31m", "\x7f", "\x9b"])
@pytest.mark.parametrize("base", TEXTS)
def test_control_characters_fail(base, bad):
    text = base + bad
    with pytest.raises(HoldError) as e:
        check_text("application_id", text)
    assert e.value.kind == "bad-text"
    assert f"U+{ord(bad[0]):04X} at position {len(base)}" in e.value.text


# Format characters (Cf) reorder or hide what a terminal shows: bidi overrides, embeddings,
# isolates and marks, zero-width space, BOM, Arabic letter mark, a language tag.
@pytest.mark.parametrize("bad", ["\u202e", "\u202a", "\u2066", "\u2069", "\u200e", "\u200f",
                                 "\u200b", "\ufeff", "\u061c", "\U000e0041"])
@pytest.mark.parametrize("base", TEXTS)
def test_format_characters_fail_and_the_error_names_field_and_code_point(base, bad):
    with pytest.raises(HoldError) as e:
        check_text("reason", base + bad + "txt.exe")
    assert e.value.kind == "bad-text"
    assert e.value.text == (f"reason contains the control or format character U+{ord(bad):04X} "
                            f"at position {len(base)}; use plain text")
    with pytest.raises(HoldError):
        take(Holds(), ":1.1", reason=CAFE, app=base + bad)


@pytest.mark.parametrize("text", [CAFE, "\U0001F4DE call", "\U0001F468\u200d\U0001F469\u200d\U0001F467",
                                  "\u2615\ufe0f", "\U0001F44D\U0001F3FD", "می\u200cخواهم"])
def test_emoji_sequences_and_scripts_that_need_zwj_or_zwnj_pass(text):
    check_text("reason", text)
    assert take(Holds(), ":1.1", reason=text, app=text).reason == text


def test_lone_surrogate_fails():
    with pytest.raises(HoldError, match="not valid Unicode"):
        check_text("reason", CAFE + "\ud800")


@pytest.mark.parametrize("field", ["reason", "application_id", "interface"])
def test_commit_checks_texts_and_frees_the_slot(field):
    holds = Holds()
    r = holds.reserve(":1.1", 1000)
    r.grant()
    args = {"reason": CAFE, "application_id": CAFE, "interface": "wlan0"}
    args[field] = "☕" * 100
    with pytest.raises(HoldError) as e:
        r.commit(args["reason"], args["application_id"], args["interface"], 1.0)
    assert e.value.kind == "bad-text" and e.value.text.startswith(field)
    assert pending_count(holds) == 0 and len(holds) == 0


def test_interface_is_capped_at_the_kernel_name_length():
    holds = Holds()
    take(holds, ":1.1", interface="w" * MAX_IFNAME_BYTES)
    with pytest.raises(HoldError, match=f"at most {MAX_IFNAME_BYTES}"):
        take(holds, ":1.1", interface="w" * (MAX_IFNAME_BYTES + 1))


# ---- the size of ActiveHolds ----------------------------------------------------------------

def _marshal_size(holds: list[Hold], start: int) -> int:
    """Bytes of an aa{sv} of these holds marshalled at offset `start`, by the D-Bus spec's rules."""
    pos = start

    def align(n: int) -> None:
        nonlocal pos
        pos += -pos % n

    def string(s: str) -> None:
        nonlocal pos
        align(4)
        pos += 4 + len(s.encode("utf-8")) + 1

    align(4)
    pos += 4  # the outer length; its elements are arrays, 4-aligned
    for hold in holds:
        align(4)
        pos += 4
        align(8)  # dictionary entries are 8-aligned
        for key, sig in HOLD_FIELDS.items():
            align(8)
            string(key)
            pos += 1 + len(sig) + 1
            value = getattr(hold, key)
            if sig == "s":
                string(value)
            elif sig == "u":
                align(4)
                pos += len(struct.pack("<I", value))
            else:
                align(8)
                pos += len(struct.pack("<d", value))
    return pos - start


def _worst_case_holds() -> tuple[Holds, list[Hold]]:
    holds = Holds()
    text = "☕" * (MAX_TEXT_BYTES // 3) + "a" * (MAX_TEXT_BYTES % 3)
    uids = iter(range(MAX_TOTAL))
    for i in range(MAX_TOTAL):
        caller = f":{i}." + "9" * (MAX_CALLER_BYTES - 2 - len(str(i)))
        assert len(caller.encode()) == MAX_CALLER_BYTES
        take(holds, caller, uid=next(uids), reason=text, app=text,
             interface="w" * MAX_IFNAME_BYTES, since=1.7e9 + i)
    return holds, holds.all()


def test_64_worst_case_holds_marshal_within_the_bound_and_under_64_kib():
    holds, every = _worst_case_holds()
    assert len(every) == MAX_TOTAL
    sizes = [_marshal_size(every, start) for start in range(8)]
    bound = holds.size_bound()
    assert max(sizes) <= bound < 64 * 1024
    # The brief's estimate: per hold two texts, the caller, and fixed overhead.
    texts = 2 * MAX_TEXT_BYTES + MAX_CALLER_BYTES + MAX_IFNAME_BYTES
    overhead = (bound - 8) / MAX_TOTAL - texts
    assert 0 < overhead < texts  # keys, signatures, lengths, numbers and padding


def test_the_docstring_states_the_bound():
    bound = Holds().size_bound()
    figures = {int(m.replace(",", "")) for m in re.findall(r"(\d[\d,]*) bytes",
                                                            holds_module.__doc__ or "")}
    assert f"{bound:,}" in (holds_module.__doc__ or "") and bound in figures
    assert f"{bound:,}" in (Holds.size_bound.__doc__ or "")


def test_the_size_estimate_agrees_with_a_real_marshaller():
    dbus_next = pytest.importorskip("dbus_next")
    from dbus_next._private.marshaller import Marshaller

    _holds, every = _worst_case_holds()
    body = [{k: dbus_next.Variant(t, getattr(h, k)) for k, t in HOLD_FIELDS.items()} for h in every]
    for start in range(8):
        marshalled = Marshaller("y" * start + "aa{sv}", [0] * start + [body]).marshall()
        assert len(marshalled) - start == _marshal_size(every, start)


# ---- no interleaving breaks the caps ------------------------------------------------------------

CALLERS = [":1.1", ":1.2", ":1.3", ":1.4", ":1.5", ":1.6"]
_COOKIES = random.Random(0)


class HoldsMachine(RuleBasedStateMachine):
    """Random interleavings of every operation; the caps and the bookkeeping must always hold."""

    def __init__(self) -> None:
        super().__init__()
        _COOKIES.seed(0)  # the same cookies, so the same holds sort alike, in every run
        self.changes = Counter()
        self.expected_changes = 0
        self.holds = Holds(per_caller=3, per_uid=4, total=6, waiting_per_caller=2,
                           waiting_per_uid=3, waiting_total=4)
        self.holds.changed.connect(self.changes)
        self.calls: list[holds_module.Reservation] = []  # Hold calls not ended yet
        self.left_waiting: list[holds_module.Reservation] = []  # their caller left meanwhile

    def _end(self, r: holds_module.Reservation) -> None:
        """The Hold call ends (its `with` block)."""
        self.calls.remove(r)
        r.cancel()

    @rule(caller=st.sampled_from(CALLERS), uid=st.integers(0, 2), granted=st.booleans())
    def reserve(self, caller: str, uid: int, granted: bool) -> None:
        try:
            self.calls.append(self.holds.reserve(caller, uid, granted=granted))
        except HoldError as e:
            assert e.kind == "too-many"

    @precondition(lambda self: bool(self.calls))
    @rule(i=st.integers(0, 100))
    def grant(self, i: int) -> None:
        r = self.calls[i % len(self.calls)]
        try:
            r.grant()
        except HoldError as e:
            assert e.kind in ("too-many", "caller-left") and not r.pending
            self._end(r)

    @precondition(lambda self: bool(self.calls))
    @rule(i=st.integers(0, 100), reason=st.sampled_from(TEXTS + ["☕" * 100]))
    def commit(self, i: int, reason: str) -> None:
        r = self.calls[i % len(self.calls)]
        if r.waiting:
            self._end(r)  # polkit said no
            return
        try:
            r.commit(reason, reason, "", 1.0)
            self.expected_changes += 1
        except HoldError as e:
            assert (e.kind == "bad-text" and reason not in TEXTS) or e.kind == "caller-left"
        self._end(r)

    @precondition(lambda self: bool(self.calls))
    @rule(i=st.integers(0, 100))
    def cancel(self, i: int) -> None:
        self._end(self.calls[i % len(self.calls)])

    @precondition(lambda self: len(self.holds) > 0)
    @rule(i=st.integers(0, 100), caller=st.sampled_from(CALLERS), root=st.booleans())
    def release(self, i: int, caller: str, root: bool) -> None:
        hold = self.holds.all()[i % len(self.holds)]
        try:
            self.holds.release(hold.cookie, caller, root)
            assert caller == hold.caller or root
            self.expected_changes += 1
        except HoldError as e:
            assert e.kind == "not-holder" and caller != hold.caller and not root

    @rule(caller=st.sampled_from(CALLERS))
    def caller_left(self, caller: str) -> None:
        self.left_waiting += [r for r in self.calls if r.caller == caller and r.waiting]
        if self.holds.caller_left(caller):
            self.expected_changes += 1
        assert caller not in self.holds.callers()

    @invariant()
    def caps_hold(self) -> None:
        h = self.holds
        live = [r for r in self.calls if r.pending]
        granted = [r for r in live if not r.waiting]
        waiting = [r for r in live if r.waiting] + [r for r in self.left_waiting if r in self.calls]
        assert pending_count(h) == len(live)
        assert len(h) + len(granted) <= h.total
        assert len(waiting) <= h.waiting_total
        for caller in CALLERS:
            assert count_for(h, caller) + sum(r.caller == caller for r in granted) <= h.per_caller
            assert sum(r.caller == caller for r in waiting) <= h.waiting_per_caller
        for uid in range(3):
            n = sum(x.caller_uid == uid for x in h.all()) + sum(r.uid == uid for r in granted)
            assert n <= h.per_uid
            assert sum(r.uid == uid for r in waiting) <= h.waiting_per_uid
        assert h.callers() == {x.caller for x in h.all()} | {r.caller for r in live}
        assert self.changes.calls == self.expected_changes
        assert len({x.cookie for x in h.all()}) == len(h)


def test_no_interleaving_breaks_the_caps(monkeypatch):
    # Run by hand: pytest-asyncio fails to collect a state machine's TestCase class.  No example
    # database: a unit test must not leave a .hypothesis directory in the tree.
    # Cookies from a seeded generator: holds committed at the same time sort by cookie, so with
    # random cookies `release` picked another hold on a replay and Hypothesis 6.130 (Debian 13)
    # stopped with FlakyStrategyDefinition (once, in the trixie package build's unit tests).
    monkeypatch.setattr(secrets, "randbits", _COOKIES.getrandbits)
    run_state_machine_as_test(HoldsMachine, settings=settings(
        max_examples=150, stateful_step_count=40, deadline=None, database=None))
