"""Suspend and restore with the journal in step: never leave a user's bgscan off, never write
where it is not still our "", and never trust the journal with another interface's network."""

import asyncio
import json
import logging
import os
import time

import pytest

from nm_scanguard.peers.bus import BusError
from nm_scanguard.dbuslib import Message, MessageType, Variant
from nm_scanguard.daemon.bgscan.journal import Journal, JournalEntry
from nm_scanguard.peers.supplicant import NAME, Supplicant, SupplicantError, explain
from nm_scanguard.daemon.bgscan.suspension_table import Kind
from nm_scanguard.peers.supplicant import is_not_running, is_uncertain
from nm_scanguard.daemon.bgscan.suspension_table import Suspended
from nm_scanguard.daemon.bgscan.suspension import (
    ALREADY_OFF, NO_BGSCAN_KEY, NO_NETWORK, NothingToSuspend, Bgscan,
)
from nm_scanguard.peers.supplicant import UncertainOutcome

CAFE = "Café ☕"
IFACE0 = "/fi/w1/wpa_supplicant1/Interfaces/0"
IFACE1 = "/fi/w1/wpa_supplicant1/Interfaces/1"
NET0 = IFACE0 + "/Networks/0"
NM_BGSCAN = "simple:30:-70:86400"
OTHER = "simple:10:-60:3600"

TIMEOUT = "org.freedesktop.DBus.Error.Timeout"
NO_REPLY = "org.freedesktop.DBus.Error.NoReply"
ACCESS_DENIED = "org.freedesktop.DBus.Error.AccessDenied"
INVALID_ARGS = "org.freedesktop.DBus.Error.InvalidArgs"
UNKNOWN_METHOD = "org.freedesktop.DBus.Error.UnknownMethod"  # what a removed network answers
SERVICE_UNKNOWN = "org.freedesktop.DBus.Error.ServiceUnknown"


def fail(name: str, what: str):
    """Raise exactly as nm_scanguard.peers.supplicant.Supplicant does for an error reply."""
    try:
        raise BusError(name, "")
    except BusError as e:
        raise explain(e, what) from None


class FakeSupplicant:
    """wpa_supplicant's objects in dicts; errors as the real Supplicant class raises them."""

    def __init__(self) -> None:
        self.interfaces = {"wlan0": IFACE0}
        self.current: dict[str, str | None] = {IFACE0: NET0}
        self.networks: dict[str, dict[str, str]] = {NET0: {"bgscan": NM_BGSCAN}}
        self.set_errors: list[str] = []  # error names the next Set calls answer, in turn
        self.get_errors: list[str] = []  # error names the next reads of bgscan answer
        self.late = False  # with a set error: the value is applied before the error comes back
        self.interface_error: str | None = None
        self.on_set = None
        self.calls: list[tuple] = []
        self.owned: bool | str = True  # NameHasOwner's answer, or an error name the bus gives
        self.read_back_error: str | None = None  # what the read after the next Set answers

    async def running(self):
        self.calls.append(("running",))
        if isinstance(self.owned, str):
            raise SupplicantError(f"the bus did not say ({self.owned})", self.owned)
        return self.owned

    async def interface(self, ifname):
        self.calls.append(("interface", ifname))
        if self.interface_error:
            fail(self.interface_error, f"GetInterface({ifname})")
        if ifname not in self.interfaces:
            fail(NAME + ".InterfaceUnknown", f"GetInterface({ifname})")
        return self.interfaces[ifname]

    async def current_network(self, iface_path):
        self.calls.append(("current", iface_path))
        current = self.current.get(iface_path)
        return current if current in self.networks else None  # removing it disconnects

    async def get_bgscan(self, net_path):
        self.calls.append(("get", net_path))
        if self.get_errors:
            fail(self.get_errors.pop(0), f"reading the properties of {net_path}")
        if net_path not in self.networks:
            fail(UNKNOWN_METHOD, f"reading the properties of {net_path}")
        return self.networks[net_path].get("bgscan")

    async def set_bgscan(self, net_path, value):
        self.calls.append(("set", net_path, value))
        if self.read_back_error is not None:
            self.get_errors, self.read_back_error = [self.read_back_error], None
        if self.on_set is not None:
            self.on_set(net_path, value)
        if net_path not in self.networks:
            fail(UNKNOWN_METHOD, f"setting bgscan on {net_path}")
        error = self.set_errors.pop(0) if self.set_errors else None
        if error is not None and not self.late:
            fail(error, f"setting bgscan on {net_path}")
        self.networks[net_path]["bgscan"] = value
        if error is not None:
            fail(error, f"setting bgscan on {net_path}")

    def sets(self):
        return [c for c in self.calls if c[0] == "set"]


@pytest.fixture
def sup():
    return FakeSupplicant()


@pytest.fixture
def journal(tmp_path):
    return Journal(str(tmp_path))


@pytest.fixture
def bgscan(sup, journal):
    return Bgscan(sup, journal)


def in_doubt(bgscan: Bgscan, net: str) -> bool:
    s = bgscan.ledger.state(net, found=False)
    return s is not None and s.kind is Kind.IN_DOUBT


def on_disk(journal: Journal) -> dict:
    return Journal(os.path.dirname(journal.path)).load()


# ---- suspend ------------------------------------------------------------------------------

@pytest.mark.parametrize("ifname", ["wlan0", "wlé0"])
async def test_suspend_journals_first_then_sets_empty(sup, journal, bgscan, ifname):
    seen = []
    sup.on_set = lambda net, value: seen.append(on_disk(journal))
    s = await bgscan.suspend(IFACE0, ifname)
    assert s == Suspended(network=NET0, saved=NM_BGSCAN, ifname=ifname)
    assert bgscan.current(ifname) == s
    assert bgscan.ledger.state(NET0).kind is Kind.SUSPENDED
    assert sup.networks[NET0]["bgscan"] == ""
    assert [c[0] for c in sup.calls] == ["current", "get", "set"]
    assert seen == [{NET0: JournalEntry(ifname, NM_BGSCAN)}]  # on disk before the Set went out
    assert on_disk(journal) == {NET0: JournalEntry(ifname, NM_BGSCAN)}


@pytest.mark.parametrize("setup, reason", [
    (lambda sup: sup.current.pop(IFACE0), NO_NETWORK),
    (lambda sup: sup.networks[NET0].pop("bgscan"), NO_BGSCAN_KEY),
    (lambda sup: sup.networks[NET0].update(bgscan=""), ALREADY_OFF),
])
async def test_nothing_to_suspend_says_why_in_the_guards_words(sup, journal, bgscan, setup,
                                                                reason):
    setup(sup)
    with pytest.raises(NothingToSuspend) as e:
        await bgscan.suspend(IFACE0, "wlan0")
    assert str(e.value) == reason
    assert reason in ("not associated in wpa_supplicant",
                      "the network has no bgscan (BSSID-locked profile or AP mode)",
                      "bgscan is already off on this network")
    assert sup.sets() == [] and on_disk(journal) == {}


@pytest.mark.parametrize("value", ["simple:" + CAFE, CAFE, 'simple:30" -o "x', "x" * 300,
                                   "learn:30:-70:3600:/etc/shadow", "simple"])
async def test_a_value_the_journal_cannot_keep_is_not_suspended(sup, journal, bgscan, value):
    # Only NetworkManager's simple:S:T:L is journaled (a learn value names a file root's
    # wpa_supplicant would write on replay); what we could not restore after a crash stays on.
    sup.networks[NET0]["bgscan"] = value
    with pytest.raises(NothingToSuspend) as e:
        await bgscan.suspend(IFACE0, "wlan0")
    assert "journal" in str(e.value) and "simple:SHORT:THRESHOLD:LONG" in str(e.value)
    assert "reconnect" in str(e.value)
    assert sup.networks[NET0]["bgscan"] == value and sup.sets() == [] and on_disk(journal) == {}


@pytest.mark.parametrize("ifname", [CAFE, "wlan0\n", "..", "Café☕Café☕"])
async def test_an_impossible_interface_name_is_refused_before_any_call(sup, bgscan, ifname):
    with pytest.raises(ValueError):
        await bgscan.suspend(IFACE0, ifname)
    assert sup.calls == []


async def test_journal_write_failure_means_no_suspension(tmp_path, sup):
    blocker = tmp_path / "file"
    blocker.write_text("")
    journal = Journal(str(blocker / "state"))
    with pytest.raises(SupplicantError) as e:
        await Bgscan(sup, journal).suspend(IFACE0, "wlan0")
    assert str(e.value) == (f"cannot write {journal.path} (Not a directory), so bgscan is left "
                            "on (a crash could not restore it); check the directory's permissions")
    assert sup.sets() == [] and sup.networks[NET0]["bgscan"] == NM_BGSCAN


@pytest.mark.parametrize("error", [TIMEOUT, NO_REPLY])
async def test_late_reply_keeps_the_entry_and_release_restores(sup, journal, bgscan, error):
    """The finding: wpa_supplicant applied "" but answered after the timeout."""
    sup.set_errors, sup.late = [error], True
    s = await bgscan.suspend(IFACE0, "wlan0")
    assert s == Suspended(NET0, NM_BGSCAN, ifname="wlan0")
    assert sup.networks[NET0]["bgscan"] == ""
    assert on_disk(journal) == {NET0: JournalEntry("wlan0", NM_BGSCAN)}
    await bgscan.restore("wlan0")
    assert sup.networks[NET0]["bgscan"] == NM_BGSCAN
    assert on_disk(journal) == {}


@pytest.mark.parametrize("error", [TIMEOUT, NO_REPLY])
async def test_a_timeout_that_did_not_apply_is_read_back_and_tried_again(sup, journal, bgscan,
                                                                         error):
    """Found by the model rung (2026-11-25): taking it for applied left the guard counting
    itself engaged with bgscan on, for as long as the link stayed busy.  wpa_supplicant answers
    one client in order, so the read after the Set shows it was not applied."""
    sup.set_errors = [error]  # never applied
    with pytest.raises(SupplicantError, match="reading it back shows no"):
        await bgscan.suspend(IFACE0, "wlan0")
    assert sup.networks[NET0]["bgscan"] == NM_BGSCAN and on_disk(journal) == {}
    assert bgscan.current("wlan0") is None
    s = await bgscan.suspend(IFACE0, "wlan0")  # the next sample
    assert s.saved == NM_BGSCAN and sup.networks[NET0]["bgscan"] == ""


@pytest.mark.parametrize("error", [TIMEOUT, NO_REPLY])
async def test_a_timeout_that_cannot_be_read_back_counts_as_applied(sup, journal, bgscan,
                                                                    error):
    sup.set_errors = [error]  # never applied, but the read after it fails too
    original = sup.get_bgscan
    reads = []

    async def get_bgscan(net_path):
        reads.append(net_path)
        if len(reads) == 2:
            fail(error, f"reading the properties of {net_path}")
        return await original(net_path)
    sup.get_bgscan = get_bgscan
    await bgscan.suspend(IFACE0, "wlan0")
    assert on_disk(journal) == {NET0: JournalEntry("wlan0", NM_BGSCAN)}  # kept: cannot tell
    await bgscan.restore("wlan0")
    assert sup.sets() == [("set", NET0, "")]  # restore saw the value intact: wrote nothing
    assert on_disk(journal) == {}


async def test_uncertain_outcome_raised_directly_counts_too(sup, journal, bgscan):
    # The form supplicant.explain() will raise once it tells timeouts apart (see the report).
    async def late_set(net_path, value):
        sup.networks[net_path]["bgscan"] = value
        raise UncertainOutcome("wpa_supplicant did not answer in time")
    sup.set_bgscan = late_set
    await bgscan.suspend(IFACE0, "wlan0")
    assert on_disk(journal) == {NET0: JournalEntry("wlan0", NM_BGSCAN)}
    # The restoring Set is late as well: applied but unconfirmed; reading back shows it landed.
    await bgscan.restore("wlan0")
    assert sup.networks[NET0]["bgscan"] == NM_BGSCAN
    assert on_disk(journal) == {} and bgscan.current("wlan0") is None


@pytest.mark.parametrize("error", [TIMEOUT, NO_REPLY])
@pytest.mark.parametrize("saved", [NM_BGSCAN, "simple:30:-65:300"])
async def test_a_restore_that_landed_unanswered_is_read_back_and_done(sup, journal, bgscan,
                                                                      error, saved):
    """Found by the model rung (2026-11-26): a release whose Set landed but whose reply was
    lost left the suspension live, so a guard wanting bgscan off again counted itself engaged
    and never suspended; bgscan ran while the link was busy.  The read after the Set (one
    client's calls are answered in order) tells."""
    sup.networks[NET0]["bgscan"] = saved
    await suspended(bgscan)
    sup.set_errors, sup.late = [error], True
    await bgscan.restore("wlan0")
    assert sup.networks[NET0]["bgscan"] == saved
    assert on_disk(journal) == {} and bgscan.current("wlan0") is None
    assert not in_doubt(bgscan, NET0)


@pytest.mark.parametrize("landed", [True, False])
async def test_a_restore_unanswered_and_unreadable_is_left_in_doubt_until_read(
        sup, journal, bgscan, landed):
    s = await suspended(bgscan)
    sup.set_errors, sup.late = [TIMEOUT], landed
    sup.read_back_error = TIMEOUT  # the read after this Set fails too
    with pytest.raises(UncertainOutcome):
        await bgscan.restore("wlan0")
    assert in_doubt(bgscan, NET0) and bgscan.current("wlan0") == s._replace(in_doubt=True)
    assert on_disk(journal) == {NET0: JournalEntry("wlan0", NM_BGSCAN)}  # cannot tell: kept
    assert await bgscan.recheck("wlan0") is (not landed)
    assert not in_doubt(bgscan, NET0)
    if landed:  # it was restored: the suspension and its entry end, a new suspend may come
        assert bgscan.current("wlan0") is None and on_disk(journal) == {}
        s2 = await suspended(bgscan)
        assert s2.saved == NM_BGSCAN and sup.networks[NET0]["bgscan"] == ""
    else:  # still our "": still suspended, and restored on release
        assert bgscan.current("wlan0") == s
        await bgscan.restore("wlan0")
    assert sup.networks[NET0]["bgscan"] == ("" if landed else NM_BGSCAN)


@pytest.mark.parametrize("case", ["unanswered, read back", "unanswered, unreadable",
                                  "landed on the new process"])
async def test_a_suspend_across_a_wpa_supplicant_restart_is_journaled_and_read_again(
        sup, journal, bgscan, case):
    """Found by the model rung (2026-11-26): a Set answered late, wpa_supplicant restarted
    meanwhile, the read-back failed, and the suspend became a live suspension of the old
    process's network; the guard counted itself engaged and never suspended the new one."""
    at_the_set = []

    def restart_during_the_set(net, value):
        bgscan.supplicant_restarted()  # what the daemon does when wpa_supplicant leaves the bus
        at_the_set.append(on_disk(journal))  # as the Set reaches the new process, if it does
        sup.on_set = None
        if case == "unanswered, unreadable":
            sup.get_errors = [TIMEOUT]
    sup.on_set = restart_during_the_set
    if case != "landed on the new process":
        sup.set_errors = [TIMEOUT]  # went to the old process: never answered, not applied here
    # supplicant_restarted keeps the entry of the suspend under way (found by the model rung: the Set
    # reached the new process after the entry was dropped, an unjournaled "").
    kept = [{NET0: JournalEntry("wlan0", NM_BGSCAN)}]
    if case == "unanswered, read back":  # the read after it settles it: nothing of ours here
        with pytest.raises(SupplicantError, match="reading it back shows no"):
            await bgscan.suspend(IFACE0, "wlan0")
        assert at_the_set == kept
        assert bgscan.current("wlan0") is None and on_disk(journal) == {}
        return
    s = await bgscan.suspend(IFACE0, "wlan0")
    assert at_the_set == kept
    assert bgscan.current("wlan0") == s._replace(in_doubt=True) and in_doubt(bgscan, NET0)
    assert on_disk(journal) == {NET0: JournalEntry("wlan0", NM_BGSCAN)}  # "" may be there
    landed = case == "landed on the new process"
    assert await bgscan.recheck("wlan0") is landed
    assert not in_doubt(bgscan, NET0)
    if landed:
        await bgscan.restore("wlan0")
    else:
        assert bgscan.current("wlan0") is None
    assert on_disk(journal) == {} and sup.networks[NET0]["bgscan"] == NM_BGSCAN


async def test_a_suspend_across_a_restart_keeps_its_entry_and_is_restored(
        sup, journal, bgscan, monkeypatch):
    def restart_during_the_set(net, value):
        bgscan.supplicant_restarted()
        sup.on_set = None

        def full(*_args):
            raise OSError(28, "No space left on device")
        monkeypatch.setattr(journal, "record", full)
    sup.on_set = restart_during_the_set  # and the Set reaches the new process
    # The restart kept the entry of the suspend under way, so nothing needs writing.
    s = await bgscan.suspend(IFACE0, "wlan0")
    assert bgscan.current("wlan0") == s._replace(in_doubt=True) and in_doubt(bgscan, NET0), \
        "live, so that a release restores it"
    assert on_disk(journal) == {NET0: JournalEntry("wlan0", NM_BGSCAN)}
    await bgscan.restore("wlan0")
    assert sup.networks[NET0]["bgscan"] == NM_BGSCAN and bgscan.current("wlan0") is None


async def test_after_a_lost_suspension_the_next_one_takes_it_over(sup, journal, bgscan):
    """A suspend cancelled in flight (or by a crash) leaves "" and the entry: the next suspend
    must not report "already off" and leave it so, but adopt it so that release restores."""
    journal.record(NET0, "wlan0", NM_BGSCAN)
    sup.networks[NET0]["bgscan"] = ""
    s = await bgscan.suspend(IFACE0, "wlan0")
    assert s == Suspended(NET0, NM_BGSCAN, ifname="wlan0")
    assert sup.sets() == []
    await bgscan.restore("wlan0")
    assert sup.networks[NET0]["bgscan"] == NM_BGSCAN and on_disk(journal) == {}


@pytest.mark.parametrize("ifname", ["wlan0", "wlé0"])
async def test_a_take_over_whose_network_was_re_created_during_the_read_is_read_again(
        sup, journal, bgscan, ifname, caplog):
    """wpa_supplicant answered the read with the old object's "", then NetworkManager removed
    and re-added the network at the same path; the NetworkRemoved was handled before the
    answer.  The new object has NetworkManager's bgscan: the suspension is in doubt, not sure,
    and the recheck ends it, so that the guard suspends the new object anew."""
    journal.record(NET0, ifname, NM_BGSCAN)
    sup.networks[NET0]["bgscan"] = ""
    get = sup.get_bgscan

    async def read_then_re_created(net):
        value = await get(net)
        sup.get_bgscan = get
        bgscan.network_removed(NET0)
        sup.networks[NET0] = {"bgscan": NM_BGSCAN}
        return value

    sup.get_bgscan = read_then_re_created
    with caplog.at_level(logging.WARNING, logger="scanguard"):
        s = await bgscan.suspend(IFACE0, ifname)
    assert s.in_doubt and bgscan.current(ifname) == s and on_disk(journal) != {}
    assert "NetworkManager re-created the network" in caplog.text
    assert await bgscan.recheck(ifname) is False
    assert bgscan.current(ifname) is None and on_disk(journal) == {}
    s = await bgscan.suspend(IFACE0, ifname)
    assert s == Suspended(NET0, NM_BGSCAN, generation=1, ifname=ifname) and not s.in_doubt
    assert sup.networks[NET0]["bgscan"] == ""


@pytest.mark.parametrize("error", [ACCESS_DENIED, INVALID_ARGS, UNKNOWN_METHOD, SERVICE_UNKNOWN])
async def test_definite_refusal_forgets_and_raises(sup, journal, bgscan, error):
    sup.set_errors = [error]
    with pytest.raises(SupplicantError):
        await bgscan.suspend(IFACE0, "wlan0")
    assert sup.networks[NET0]["bgscan"] == NM_BGSCAN
    assert on_disk(journal) == {} and journal.entries() == {}


# ---- restore ------------------------------------------------------------------------------

async def suspended(bgscan, ifname: str = "wlan0") -> Suspended:
    return await bgscan.suspend(IFACE0, ifname)


async def test_restore_puts_back_exactly_the_saved_value(sup, journal, bgscan):
    sup.networks[NET0]["bgscan"] = "simple:30:-65:300"
    await suspended(bgscan)
    await bgscan.restore("wlan0")
    assert sup.networks[NET0]["bgscan"] == "simple:30:-65:300"
    assert on_disk(journal) == {}


@pytest.mark.parametrize("changed", [OTHER, None])
async def test_restore_leaves_a_value_someone_else_changed(sup, journal, bgscan, caplog,
                                                           changed):
    await suspended(bgscan)
    if changed is None:
        del sup.networks[NET0]["bgscan"]
    else:
        sup.networks[NET0]["bgscan"] = changed
    caplog.set_level(logging.INFO)
    await bgscan.restore("wlan0")
    assert sup.networks[NET0].get("bgscan") == changed
    assert sup.sets() == [("set", NET0, "")]
    assert on_disk(journal) == {}
    assert "leaving it" in caplog.text


async def test_restore_writes_nothing_when_the_value_is_already_back(sup, journal, bgscan):
    await suspended(bgscan)
    sup.networks[NET0]["bgscan"] = NM_BGSCAN  # e.g. an earlier restore whose reply came late
    await bgscan.restore("wlan0")
    assert sup.sets() == [("set", NET0, "")]
    assert on_disk(journal) == {}


async def test_restore_of_a_gone_network_forgets_it(sup, journal, bgscan):
    await suspended(bgscan)
    del sup.networks[NET0]
    await bgscan.restore("wlan0")
    assert on_disk(journal) == {}


async def test_an_unknown_method_error_on_a_network_still_current_keeps_the_entry(
        sup, journal, bgscan):
    """UnknownMethod is what a removed network answers, but a transient failure can carry it
    too (fault-injection suite, journal replay): while the interface still has the network as
    its current one, the entry stays and a retry restores bgscan."""
    await suspended(bgscan)
    sup.get_errors = [UNKNOWN_METHOD]
    with pytest.raises(SupplicantError, match="still the interface's current network"):
        await bgscan.restore("wlan0")
    assert on_disk(journal) == {NET0: JournalEntry("wlan0", NM_BGSCAN)}
    sup.set_errors = [UNKNOWN_METHOD]
    with pytest.raises(SupplicantError, match="still the interface's current network"):
        await bgscan.restore("wlan0")
    assert on_disk(journal) == {NET0: JournalEntry("wlan0", NM_BGSCAN)}
    await bgscan.restore("wlan0")
    assert sup.networks[NET0]["bgscan"] == NM_BGSCAN and on_disk(journal) == {}


@pytest.mark.parametrize("error", [ACCESS_DENIED, TIMEOUT, NO_REPLY, SERVICE_UNKNOWN])
async def test_restore_failure_keeps_the_entry_and_a_retry_succeeds(sup, journal, bgscan,
                                                                    error):
    await suspended(bgscan)
    sup.set_errors = [error]
    with pytest.raises(SupplicantError):
        await bgscan.restore("wlan0")
    assert on_disk(journal) == {NET0: JournalEntry("wlan0", NM_BGSCAN)}
    await bgscan.restore("wlan0")
    assert sup.networks[NET0]["bgscan"] == NM_BGSCAN and on_disk(journal) == {}


async def test_a_wpa_supplicant_restart_forgets_what_it_carried(sup, journal, bgscan, writes):
    await suspended(bgscan)
    journal.record(IFACE1 + "/Networks/4", "wlé0", OTHER)
    before = writes["n"]
    bgscan.supplicant_restarted()
    assert writes["n"] - before == 1
    assert on_disk(journal) == {}
    # The suspension went with the old process: a guard asking must not count itself engaged,
    # or it never suspends the new process's network.
    assert bgscan.current("wlan0") is None


async def test_a_removed_network_ends_its_suspension_and_entry(sup, journal, bgscan):
    s = await suspended(bgscan)
    assert bgscan.network_removed(s.network) == s
    assert on_disk(journal) == {} and bgscan.current("wlan0") is None
    assert bgscan.ledger.generation(s.network) == s.generation + 1


async def test_a_removal_drops_a_stale_entry_but_not_that_of_a_suspend_under_way(
        sup, journal, bgscan):
    """No live suspension: an entry for the path is stale (our "" went with the object) unless a
    suspend is under way there, which sorts the removal out itself when its Set returns."""
    stale = IFACE0 + "/Networks/1"
    journal.record(stale, "wlan0", NM_BGSCAN)
    assert bgscan.network_removed(stale) is None and journal.get(stale) is None
    seen = []

    def removed_mid_set(net, value):
        if value == "":
            assert bgscan.network_removed(net) is None
            seen.append(journal.get(net))
    sup.on_set = removed_mid_set
    with pytest.raises(SupplicantError, match="re-created"):
        await bgscan.suspend(IFACE0, "wlan0")
    assert seen == [JournalEntry("wlan0", NM_BGSCAN)]  # kept while the Set was on its way
    assert journal.entries() == {} and bgscan.ledger.state(NET0) is None


async def test_one_network_is_never_suspended_twice(sup, journal, bgscan):
    await bgscan.suspend(IFACE0, "wlan0")
    with pytest.raises(SupplicantError, match="not suspending it twice"):
        await bgscan.suspend(IFACE0, "wlan1")
    assert len(sup.sets()) == 1


# ---- the real Supplicant class: which replies are uncertain ----------------------------------

class ScriptedBus:
    """Answers the calls Supplicant makes; Set is applied, then answered with `set_error`."""

    def __init__(self, set_error: str | None) -> None:
        self.bgscan = NM_BGSCAN
        self.set_error = set_error

    async def call(self, msg: Message) -> Message:
        if msg.member == "Get" and msg.body[1] == "CurrentNetwork":
            return Message(message_type=MessageType.METHOD_RETURN, reply_serial=1,
                           signature="v", body=[Variant("o", NET0)])
        if msg.member == "Get" and msg.body[1] == "Properties":
            props = {"bgscan": Variant("s", f'"{self.bgscan}"')}  # wpa_supplicant quotes it
            return Message(message_type=MessageType.METHOD_RETURN, reply_serial=1,
                           signature="v", body=[Variant("a{sv}", props)])
        if msg.member == "Set":
            self.bgscan = msg.body[2].value["bgscan"].value
            if self.set_error:
                return Message(message_type=MessageType.ERROR, error_name=self.set_error,
                               reply_serial=1, signature="s", body=["no answer in time"])
            return Message(message_type=MessageType.METHOD_RETURN, reply_serial=1)
        raise AssertionError(f"unexpected call {msg.member}")


@pytest.mark.parametrize("error, uncertain, not_running", [
    (TIMEOUT, True, False), (NO_REPLY, True, False), (ACCESS_DENIED, False, False),
    (SERVICE_UNKNOWN, False, True), ("org.freedesktop.DBus.Error.NameHasNoOwner", False, True),
    (UNKNOWN_METHOD, False, False),
])
async def test_errors_of_the_real_supplicant_are_classified(error, uncertain, not_running):
    with pytest.raises(SupplicantError) as e:
        await Supplicant(ScriptedBus(error)).set_bgscan(NET0, "")
    assert is_uncertain(e.value) is uncertain
    assert is_not_running(e.value) is not_running


async def test_late_reply_through_the_real_supplicant_is_restored(journal):
    bus = ScriptedBus(NO_REPLY)
    bgscan = Bgscan(Supplicant(bus), journal)
    await bgscan.suspend(IFACE0, "wlan0")
    assert bus.bgscan == "" and on_disk(journal) == {NET0: JournalEntry("wlan0", NM_BGSCAN)}
    bus.set_error = None
    await bgscan.restore("wlan0")
    assert bus.bgscan == NM_BGSCAN and on_disk(journal) == {}


# ---- replaying the journal of a previous instance ---------------------------------------------

def left_behind(journal: Journal, entries: dict[str, tuple[str, str]]) -> None:
    """What a crashed instance left: a journal on disk, networks at "" in wpa_supplicant."""
    with open(journal.path, "w") as f:
        json.dump({n: {"ifname": i, "bgscan": b} for n, (i, b) in entries.items()}, f)


async def test_replay_restores_under_the_interface_and_drops_the_rest(sup, journal, bgscan,
                                                                      writes, caplog):
    ours, theirs, stray = IFACE0 + "/Networks/7", IFACE1 + "/Networks/7", IFACE0 + "/Networks/8"
    sup.interfaces["wlé0"] = IFACE1
    sup.networks = {ours: {"bgscan": ""}, theirs: {"bgscan": ""}, stray: {"bgscan": ""}}
    left_behind(journal, {
        ours: ("wlan0", NM_BGSCAN),
        theirs: ("wlan0", OTHER),  # claims wlan0 but lies under wlé0's object: forged or stale
        stray: ("wlé0", OTHER),  # claims wlé0 but lies under wlan0's
        IFACE0 + "/Networks/9": ("gone0", OTHER),  # wpa_supplicant does not know the interface
    })
    await bgscan.replay()
    assert sup.networks == {ours: {"bgscan": NM_BGSCAN}, theirs: {"bgscan": ""},
                            stray: {"bgscan": ""}}
    assert sup.sets() == [("set", ours, NM_BGSCAN)]
    assert writes["n"] == 1
    assert on_disk(journal) == {}
    assert caplog.text.count("does not lie under the interface's object") == 2


async def test_replay_with_non_ascii_interface_name(sup, journal, bgscan):
    sup.interfaces = {"wlé0": IFACE1}
    mine = IFACE1 + "/Networks/0"
    sup.networks = {mine: {"bgscan": ""}}
    left_behind(journal, {mine: ("wlé0", NM_BGSCAN)})
    await bgscan.replay()
    assert sup.networks[mine]["bgscan"] == NM_BGSCAN and on_disk(journal) == {}


async def test_replay_uses_the_callers_lookup(sup, journal, bgscan):
    sup.networks = {NET0: {"bgscan": ""}}
    left_behind(journal, {NET0: ("wlan0", NM_BGSCAN)})
    asked = []

    async def known(ifname):
        asked.append(ifname)
        return IFACE0

    await bgscan.replay(known)
    assert asked == ["wlan0"] and ("interface", "wlan0") not in sup.calls
    assert sup.networks[NET0]["bgscan"] == NM_BGSCAN


async def test_replay_keeps_what_it_could_not_restore(sup, journal, bgscan, writes):
    other = IFACE0 + "/Networks/1"
    sup.networks = {NET0: {"bgscan": ""}, other: {"bgscan": ""}}
    left_behind(journal, {NET0: ("wlan0", NM_BGSCAN), other: ("wlan0", OTHER)})
    sup.set_errors = [ACCESS_DENIED]  # the first restore (NET0, first in the file) is refused
    await bgscan.replay()
    assert writes["n"] == 1
    assert on_disk(journal) == {NET0: JournalEntry("wlan0", NM_BGSCAN)}
    assert sup.networks == {NET0: {"bgscan": ""}, other: {"bgscan": OTHER}}


@pytest.mark.parametrize("how", ["owner", "interface", "restore"])
async def test_wpa_supplicant_not_running_drops_everything_in_one_write(sup, journal, bgscan,
                                                                        writes, how):
    nets = [IFACE0 + f"/Networks/{n}" for n in range(5)]
    sup.networks = {n: {"bgscan": ""} for n in nets}
    left_behind(journal, {n: ("wlan0", NM_BGSCAN) for n in nets})
    if how == "owner":
        sup.owned = False
        await bgscan.replay()
        assert sup.calls == [("running",)]
    else:
        # The call says nobody owns the name (wpa_supplicant left just after the replay's
        # first look); the bus, asked next, confirms it.
        if how == "interface":
            sup.interface_error = SERVICE_UNKNOWN
            real = sup.interface

            async def interface_then_gone(ifname):
                sup.owned = False
                return await real(ifname)
            sup.interface = interface_then_gone
        else:
            sup.set_errors = [SERVICE_UNKNOWN]
            sup.on_set = lambda net, value: setattr(sup, "owned", False)
        await bgscan.replay()
    assert writes["n"] == 1
    assert on_disk(journal) == {}


@pytest.mark.parametrize("owner", [True, "org.freedesktop.DBus.Error.NoReply"])
@pytest.mark.parametrize("where", ["interface", "restore"])
async def test_not_running_from_a_call_drops_nothing_unless_the_bus_confirms(
        sup, journal, bgscan, where, owner, caplog):
    """A call answered ServiceUnknown while the bus says the name is owned (or will not say)
    is no evidence that the networks are gone: the entries stay for a later try."""
    sup.networks = {NET0: {"bgscan": ""}}
    left_behind(journal, {NET0: ("wlan0", NM_BGSCAN)})
    if where == "interface":
        sup.interface_error = SERVICE_UNKNOWN
    else:
        sup.set_errors = [SERVICE_UNKNOWN]
    sup.owned = owner
    kept = await bgscan.replay()
    assert kept == 1
    assert on_disk(journal) == {NET0: JournalEntry("wlan0", NM_BGSCAN)}
    assert sup.networks[NET0]["bgscan"] == ""
    # The next try, with wpa_supplicant answering, restores it.
    sup.interface_error, sup.set_errors, sup.owned = None, [], True
    assert await bgscan.replay() == 0
    assert on_disk(journal) == {} and sup.networks[NET0]["bgscan"] == NM_BGSCAN


async def test_other_lookup_failures_keep_the_entries(sup, journal, bgscan):
    sup.networks = {NET0: {"bgscan": ""}}
    left_behind(journal, {NET0: ("wlan0", NM_BGSCAN)})
    sup.interface_error = ACCESS_DENIED
    await bgscan.replay()
    assert on_disk(journal) == {NET0: JournalEntry("wlan0", NM_BGSCAN)}


async def test_replay_of_a_damaged_journal_is_not_fatal(sup, journal, bgscan, caplog):
    with open(journal.path, "w") as f:
        f.write('{"/n/0": {"ifname": "wlan0", "bgscan": "$(id)"}, ')
    await bgscan.replay()
    assert sup.calls == [] and "cannot use the journal" in caplog.text


async def test_replay_of_2000_entries_writes_once(tmp_path, sup, writes):
    n = 2000
    journal = Journal(str(tmp_path), max_bytes=1 << 20)  # 2000 entries exceed MAX_BYTES
    nets = [IFACE0 + f"/Networks/{i}" for i in range(n)]
    sup.networks = {net: {"bgscan": ""} for net in nets}
    left_behind(journal, {net: ("wlan0", NM_BGSCAN) for net in nets})
    start = time.perf_counter()
    await Bgscan(sup, journal).replay()
    took = time.perf_counter() - start
    print(f"\nreplay of {n} entries: {took * 1000:.1f} ms, {writes['n']} write(s)")
    assert writes["n"] == 1
    assert all(sup.networks[net]["bgscan"] == NM_BGSCAN for net in nets)
    assert sup.calls.count(("interface", "wlan0")) == 1
    assert Journal(str(tmp_path), max_bytes=1 << 20).load() == {}


async def test_network_recreated_between_read_and_set_gets_the_value_back(sup, journal, bgscan):
    """Found by the fault suite on Debian 13: NetworkManager re-activated (remove, then add at
    the same path with its own bgscan) while a suspend was between its read and its Set, so
    the "" landed on the new object and release wrote the old object's value.  The daemon
    feeds NetworkRemoved to the Bgscan before the Set's reply is handled."""
    def recreate(net, value):
        if value == "":
            bgscan.network_removed(net)
            sup.networks[net] = {"bgscan": OTHER}  # NM's new object, then our "" lands on it
    sup.on_set = recreate
    with pytest.raises(SupplicantError, match="re-created"):
        await bgscan.suspend(IFACE0, "wlan0")
    assert sup.networks[NET0]["bgscan"] == NM_BGSCAN  # the value read, put back at once
    assert journal.entries() == {}
    sup.on_set = None
    s = await bgscan.suspend(IFACE0, "wlan0")  # the next sample: a clean suspend
    assert s.saved == NM_BGSCAN and sup.networks[NET0]["bgscan"] == ""


async def test_network_recreated_and_put_back_fails_is_restored_on_release(sup, journal, bgscan):
    def recreate(net, value):
        if value == "":
            bgscan.network_removed(net)
        else:
            fail(ACCESS_DENIED, f"setting bgscan on {net}")  # the put-back is refused
    sup.on_set = recreate
    s = await bgscan.suspend(IFACE0, "wlan0")
    assert s.saved == NM_BGSCAN and journal.get(NET0) is not None
    assert sup.networks[NET0]["bgscan"] == ""
    sup.on_set = None
    await bgscan.restore("wlan0")
    assert sup.networks[NET0]["bgscan"] == NM_BGSCAN and journal.entries() == {}


async def test_network_recreated_between_read_and_set_of_a_restore_is_logged(
        sup, journal, bgscan, caplog):
    """Found by the fault suite: NetworkManager re-created the network (same path) between a
    restore's read and its Set.  wpa_supplicant has no compare-and-set, so the Set lands on the
    new object; bgscan is on (the promise holds) but with the previous object's value, and the
    daemon says so rather than pretending all is well."""
    s = await bgscan.suspend(IFACE0, "wlan0")

    def recreate(net, value):
        if value == s.saved:
            bgscan.network_removed(net)
            sup.networks[net] = {"bgscan": OTHER}  # NetworkManager's new object
    sup.on_set = recreate
    await bgscan.restore("wlan0")
    assert sup.networks[NET0]["bgscan"] == NM_BGSCAN and journal.entries() == {}
    assert "re-created network" in caplog.text and "while bgscan was being restored" in caplog.text


async def test_a_replay_leaves_a_network_a_guard_took_over_while_it_waited(sup, journal, bgscan):
    """Found by the model rung (2026-11-25): a replay read the journal, then waited (another
    entry's read timed out); meanwhile the guard suspended the same network, recording the value
    it then read (another program had changed it).  The replay went on with the entry it had
    read before and wrote that older value over the guard's "", and forgot the guard's entry."""
    journal.record(NET0, "wlan0", NM_BGSCAN)
    sup.networks[NET0]["bgscan"] = OTHER  # another program's value, over the old instance's ""

    async def known(ifname):
        taken.append(await bgscan.suspend(IFACE0, "wlan0"))  # the guard, meanwhile
        return IFACE0
    taken: list = []
    assert await bgscan.replay(known) == 0
    assert sup.networks[NET0]["bgscan"] == "" and bgscan.current("wlan0") == taken[0]
    assert journal.get(NET0) == JournalEntry("wlan0", OTHER)
    await bgscan.restore("wlan0")
    assert sup.networks[NET0]["bgscan"] == OTHER and journal.entries() == {}


def reactivate_during_the_set(sup, bgscan, new_object: dict, error: str,
                              read_back: str | None = None) -> None:
    """The next Set of "" goes unanswered (`error`), and NetworkManager re-creates the network
    at the same path meanwhile: the new object reads as `new_object` ({"bgscan": ""}: the Set
    was handled after the re-creation and hit it); the read after it fails with `read_back`
    if given."""
    original = sup.set_bgscan

    async def set_bgscan(net, value):
        if value != "":
            return await original(net, value)
        sup.calls.append(("set", net, value))
        bgscan.network_removed(net)  # the daemon sees NetworkRemoved before the timeout
        sup.networks[net] = dict(new_object)
        sup.get_errors = [read_back] if read_back else []
        fail(error, f"setting bgscan on {net}")
    sup.set_bgscan = set_bgscan


@pytest.mark.parametrize("error", [TIMEOUT, NO_REPLY])
async def test_an_unanswered_set_read_back_as_no_key_on_a_recreated_network_is_not_put_back(
        sup, journal, bgscan, error):
    """Found by the model rung (2026-11-26): our "" landed, its reply was lost, and
    NetworkManager re-activated with a BSSID-locked profile (no bgscan key) at the same path
    before the timeout.  The read-back answered "no key", which was taken for a failed read;
    the Set then counted as applied and the removal sent it to the put-back, which wrote the
    old object's value on a new object the read had just shown without "" (or any bgscan).
    A read that answers is evidence: no key is not our "", so nothing is written and nothing
    is kept."""
    reactivate_during_the_set(sup, bgscan, {}, error)
    with pytest.raises(SupplicantError, match="reading it back shows no"):
        await bgscan.suspend(IFACE0, "wlan0")
    assert sup.sets() == [("set", NET0, "")]  # no put-back
    assert sup.networks[NET0] == {} and on_disk(journal) == {}
    assert bgscan.current("wlan0") is None
    with pytest.raises(NothingToSuspend) as e:  # the next sample: nothing to turn off there
        await bgscan.suspend(IFACE0, "wlan0")
    assert str(e.value) == NO_BGSCAN_KEY and sup.sets() == [("set", NET0, "")]


@pytest.mark.parametrize("new_object", [{}, {"bgscan": OTHER}])
async def test_an_unanswered_set_unreadable_across_a_removal_is_in_doubt_not_put_back(
        sup, journal, bgscan, new_object):
    """The Set of "" and the read after it both went unanswered, and NetworkManager re-created
    the network at the same path meanwhile: our "" may be on the new object or may have gone
    with the old one.  A put-back would write the old object's value where no read showed our
    "" (over NetworkManager's value for the new object, or where it set no key at all); the
    suspension is left in doubt instead, journaled, and read before it counts."""
    reactivate_during_the_set(sup, bgscan, new_object, TIMEOUT, read_back=TIMEOUT)
    await bgscan.suspend(IFACE0, "wlan0")
    assert sup.sets() == [("set", NET0, "")]  # no put-back
    assert in_doubt(bgscan, NET0) and on_disk(journal) == {NET0: JournalEntry("wlan0", NM_BGSCAN)}
    assert await bgscan.recheck("wlan0") is False  # the new object's own value: not ours
    assert sup.networks[NET0] == new_object and on_disk(journal) == {}
    assert bgscan.current("wlan0") is None and sup.sets() == [("set", NET0, "")]


async def test_an_unanswered_set_unreadable_across_a_removal_that_hit_the_new_object_is_ours(
        sup, journal, bgscan):
    """The same, with the Set handled after the re-creation: our "" is on the new object; the
    read before it counts finds it, and release restores the saved value there."""
    reactivate_during_the_set(sup, bgscan, {"bgscan": ""}, NO_REPLY, read_back=NO_REPLY)
    await bgscan.suspend(IFACE0, "wlan0")
    assert in_doubt(bgscan, NET0) and sup.sets() == [("set", NET0, "")]
    assert await bgscan.recheck("wlan0") is True and not in_doubt(bgscan, NET0)
    await bgscan.restore("wlan0")
    assert sup.networks[NET0]["bgscan"] == NM_BGSCAN and on_disk(journal) == {}


async def test_a_second_removal_during_a_refused_put_back_ends_the_suspension(
        sup, journal, bgscan):
    """Two re-creations in one suspend: the first between our read and our Set (the "" lands on
    the new object), the second while the put-back is on its way, and the put-back is refused.
    Our "" went with the second object: nothing may stay live or journaled for it, or the guard
    would count itself engaged on a network that carries NetworkManager's bgscan.  (The model
    rung draws this only now and then: 2 of 4 mutation runs of 2000 sequences.)"""
    def recreate_twice(net, value):
        bgscan.network_removed(net)
        sup.networks[net] = {"bgscan": OTHER}
        if value != "":
            fail(ACCESS_DENIED, f"setting bgscan on {net}")  # the put-back is refused
    sup.on_set = recreate_twice
    with pytest.raises(SupplicantError, match="re-created"):
        await bgscan.suspend(IFACE0, "wlan0")
    assert bgscan.current("wlan0") is None and journal.entries() == {}


async def test_a_network_under_a_replaced_interface_object_is_gone(sup, journal, bgscan):
    """Found by the model rung (2026-11-25): the interface object was removed and added again
    (a new path) while our "" was on one of its networks; reading the old network and the old
    interface both answer UnknownObject.  That wpa_supplicant now names another object for the
    interface confirms the network is gone; without it the entry was kept and retried for ever."""
    await suspended(bgscan)
    original = sup.current_network

    async def current_network(iface_path):
        if iface_path not in sup.interfaces.values():
            fail("org.freedesktop.DBus.Error.UnknownObject", f"reading CurrentNetwork of {iface_path}")
        return await original(iface_path)
    sup.current_network = current_network
    sup.interfaces["wlan0"] = "/fi/w1/wpa_supplicant1/Interfaces/7"
    sup.networks.pop(NET0)
    await bgscan.restore("wlan0")
    assert journal.entries() == {} and bgscan.current("wlan0") is None


async def test_an_unknown_object_on_the_same_interface_object_is_not_taken_for_gone(
        sup, journal, bgscan):
    await suspended(bgscan)
    original = sup.current_network

    async def current_network(iface_path):
        fail("org.freedesktop.DBus.Error.UnknownObject", f"reading CurrentNetwork of {iface_path}")
        return await original(iface_path)
    sup.current_network = current_network
    sup.get_errors = ["org.freedesktop.DBus.Error.UnknownObject"]
    with pytest.raises(SupplicantError, match="could not say"):
        await bgscan.restore("wlan0")
    assert journal.get(NET0) is not None  # kept: the interface object is still the one it was


@pytest.mark.parametrize("ifname", ["wlan0", "wlé0"])
async def test_a_removal_after_a_cancelled_suspend_keeps_the_entry_for_the_restore(
        sup, journal, ifname):
    """Found by the model rung (2026-11-25): the guard stopped (`systemctl restart`) while the
    suspend's Set was on its way; NetworkManager had re-activated, so NetworkRemoved came after
    the cancel and the Set landed on the new object at the same path.  The removal must not drop
    the entry: restoring what is left behind then finds our "" and puts the value back."""
    sup.interfaces = {ifname: IFACE0}
    bgscan = Bgscan(sup, journal)
    landed = asyncio.Event()
    release = asyncio.Event()

    async def set_then_hang(net_path, value):
        sup.networks[net_path] = {"bgscan": value}  # applied on the re-created object
        landed.set()
        await release.wait()
    sup.set_bgscan = set_then_hang
    task = asyncio.create_task(bgscan.suspend(IFACE0, ifname))
    await asyncio.wait([task, asyncio.create_task(landed.wait())],
                       return_when=asyncio.FIRST_COMPLETED)
    assert landed.is_set(), task.result()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert bgscan.network_removed(NET0) is None
    assert on_disk(journal) == {NET0: JournalEntry(ifname, NM_BGSCAN)}
    del sup.set_bgscan  # the fake's own Set again
    await bgscan.replay(ifname=ifname)
    assert sup.networks[NET0]["bgscan"] == NM_BGSCAN and journal.entries() == {}
    assert bgscan.network_removed(NET0) is None  # nothing left that a removal keeps


async def test_a_replay_leaves_alone_a_network_a_guard_took_over_during_its_lookup(
        sup, journal, bgscan):
    """The lookup of the interface awaits wpa_supplicant; a guard that takes the network over
    meanwhile owns its entry, whatever the lookup then says (here: an answer from before a
    restart, 'not managed'): dropping it would leave the guard's "" unjournaled."""
    sup.networks = {NET0: {"bgscan": ""}}
    left_behind(journal, {NET0: ("wlan0", NM_BGSCAN)})

    async def known(ifname):
        taken = await bgscan.suspend(IFACE0, "wlan0")  # the guard adopts our ""
        assert taken.saved == NM_BGSCAN
        return None

    assert await bgscan.replay(known) == 0
    assert on_disk(journal) == {NET0: JournalEntry("wlan0", NM_BGSCAN)}
    assert bgscan.current("wlan0") is not None and sup.networks[NET0]["bgscan"] == ""


@pytest.mark.parametrize("ifname", ["wlan0", "wlé0"])
async def test_a_set_left_behind_that_hit_a_recreated_object_is_restored_there(
        sup, journal, bgscan, ifname, monkeypatch):
    """A suspend cancelled with its Set of "" queued; NetworkManager re-creates the network
    before wpa_supplicant handles that Set, whose "" lands on the new object; the removal is
    seen only while the restore of what was left behind reads.  The "" read is ours whatever
    the generation (only we write ""): restored, not forgotten."""
    sup.interfaces = {ifname: IFACE0}
    stuck = asyncio.get_running_loop().create_future()

    async def queued_set(net, value):
        sup.calls.append(("set", net, value))
        await stuck
    monkeypatch.setattr(sup, "set_bgscan", queued_set)
    task = asyncio.create_task(bgscan.suspend(IFACE0, ifname))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert on_disk(journal) == {NET0: JournalEntry(ifname, NM_BGSCAN)}
    monkeypatch.undo()
    sup.networks[NET0]["bgscan"] = ""  # the new object, with our queued ""
    read = sup.get_bgscan

    async def removal_seen_during_the_read(net):
        bgscan.network_removed(NET0)
        return await read(net)
    monkeypatch.setattr(sup, "get_bgscan", removal_seen_during_the_read)
    await bgscan.replay(ifname=ifname)
    assert sup.networks[NET0]["bgscan"] == NM_BGSCAN and on_disk(journal) == {}


async def test_a_recheck_whose_read_fails_keeps_the_entry_and_the_doubt(sup, journal, bgscan):
    s = await suspended(bgscan)
    sup.set_errors, sup.late = [TIMEOUT], False
    sup.read_back_error = TIMEOUT  # the read-back after the unanswered restore fails too
    with pytest.raises(UncertainOutcome):
        await bgscan.restore("wlan0")
    assert in_doubt(bgscan, NET0)
    sup.get_errors = [TIMEOUT]
    with pytest.raises(SupplicantError):
        await bgscan.recheck("wlan0")
    assert in_doubt(bgscan, NET0) and bgscan.current("wlan0") == s._replace(in_doubt=True)
    assert on_disk(journal) == {NET0: JournalEntry("wlan0", NM_BGSCAN)}
    assert sup.networks[NET0]["bgscan"] == ""
    await bgscan.restore("wlan0")
    assert sup.networks[NET0]["bgscan"] == NM_BGSCAN and on_disk(journal) == {}


@pytest.mark.parametrize("ifname", ["wlan0", "wlé0"])
async def test_a_restore_cancelled_on_its_way_keeps_the_entry_in_doubt(
        sup, journal, bgscan, ifname, monkeypatch):
    """The restoring Set may or may not land after the cancel: the entry stays, and the
    suspension is read before it counts again."""
    sup.interfaces = {ifname: IFACE0}
    s = await suspended(bgscan, ifname)
    stuck = asyncio.get_running_loop().create_future()

    async def queued_set(net, value):
        await stuck
    monkeypatch.setattr(sup, "set_bgscan", queued_set)
    task = asyncio.create_task(bgscan.restore(ifname))
    for _ in range(3):
        await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert on_disk(journal) == {NET0: JournalEntry(ifname, NM_BGSCAN)}
    assert in_doubt(bgscan, NET0) and bgscan.current(ifname) == s._replace(in_doubt=True)


async def test_a_suspend_that_cannot_read_a_leftover_network_keeps_its_entry(
        sup, journal, bgscan):
    journal.record(NET0, "wlan0", NM_BGSCAN)
    sup.networks[NET0]["bgscan"] = ""  # an earlier instance's ""
    sup.get_errors = [TIMEOUT]
    with pytest.raises(SupplicantError):
        await bgscan.suspend(IFACE0, "wlan0")
    assert on_disk(journal) == {NET0: JournalEntry("wlan0", NM_BGSCAN)}
    assert await bgscan.replay() == 0
    assert sup.networks[NET0]["bgscan"] == NM_BGSCAN and on_disk(journal) == {}


async def test_an_answer_to_a_call_sequence_that_ended_is_not_applied_to_the_next(
        sup, journal, bgscan, monkeypatch):
    """wpa_supplicant restarts while a release waits for its read; the new process's network
    at the same path is suspended for another interface; then the old read is answered.  It
    must not be taken for the new suspension's (its \"\" would be restored, or Refused raised)."""
    await suspended(bgscan)
    read = sup.get_bgscan
    answer = asyncio.get_running_loop().create_future()

    async def first_read_waits(net):
        monkeypatch.setattr(sup, "get_bgscan", read)
        await answer
        return ""
    monkeypatch.setattr(sup, "get_bgscan", first_read_waits)
    release = asyncio.create_task(bgscan.restore("wlan0"))
    for _ in range(3):
        await asyncio.sleep(0)
    bgscan.supplicant_restarted()
    sup.networks[NET0]["bgscan"] = NM_BGSCAN  # the new process's network
    other = await bgscan.suspend(IFACE0, "wlé0")
    answer.set_result(None)
    await release
    assert bgscan.current("wlé0") == other and sup.networks[NET0]["bgscan"] == ""
    assert on_disk(journal) == {NET0: JournalEntry("wlé0", NM_BGSCAN)}
    assert [c for c in sup.sets() if c[2] != ""] == []  # the old release wrote nothing


async def test_a_replay_restores_a_leftover_whose_take_over_failed_meanwhile(
        sup, journal, bgscan):
    journal.record(NET0, "wlan0", NM_BGSCAN)
    sup.networks[NET0]["bgscan"] = ""

    async def known(ifname):
        sup.get_errors = [TIMEOUT]
        with pytest.raises(SupplicantError):
            await bgscan.suspend(IFACE0, "wlan0")  # a guard's take-over, failing
        return IFACE0
    assert await bgscan.replay(known) == 0
    assert sup.networks[NET0]["bgscan"] == NM_BGSCAN and on_disk(journal) == {}


async def test_the_replay_is_tried_again_while_a_guard_is_taking_an_entry_over(
        sup, journal, bgscan):
    """The journal's retry goes on while it has entries left; one a guard is taking over
    comes back to it if the take-over fails, so it counts among them until the take-over
    ends (else the retry stops, the take-over fails, and nothing restores that bgscan)."""
    journal.record(NET0, "wlan0", NM_BGSCAN)
    sup.networks[NET0]["bgscan"] = ""
    gate = asyncio.Event()
    read = sup.get_bgscan

    async def held_read(net_path):
        await gate.wait()
        return await read(net_path)
    sup.get_bgscan = held_read
    take_over = asyncio.ensure_future(bgscan.suspend(IFACE0, "wlan0"))
    for _ in range(20):
        await asyncio.sleep(0)
    assert bgscan.ledger.state(NET0).kind is Kind.READING
    assert await bgscan.replay() == 1  # not restored, and not forgotten either
    sup.get_errors = [TIMEOUT]
    gate.set()
    with pytest.raises(SupplicantError):
        await take_over
    assert bgscan.ledger.state(NET0).kind is Kind.LEFTOVER
    assert await bgscan.replay() == 0
    assert sup.networks[NET0]["bgscan"] == NM_BGSCAN and on_disk(journal) == {}


@pytest.mark.parametrize("ifname", ["wlan0", "wlé0"])
async def test_what_a_stopped_guard_could_not_restore_goes_to_the_replay(
        sup, journal, bgscan, ifname):
    sup.interfaces = {ifname: IFACE0}
    await suspended(bgscan, ifname)
    sup.set_errors = [ACCESS_DENIED]
    with pytest.raises(SupplicantError):
        await bgscan.restore(ifname)
    bgscan.abandon(ifname)
    assert bgscan.current(ifname) is None and bgscan.ledger.state(NET0).kind is Kind.LEFTOVER
    assert await bgscan.replay() == 0
    assert sup.networks[NET0]["bgscan"] == NM_BGSCAN and on_disk(journal) == {}


async def test_an_unanswered_suspend_that_cannot_be_read_back_is_in_doubt(
        sup, journal, bgscan):
    sup.set_errors, sup.late = [TIMEOUT], True
    sup.read_back_error = TIMEOUT  # the read-back fails too
    await bgscan.suspend(IFACE0, "wlan0")
    assert in_doubt(bgscan, NET0) and on_disk(journal) == {NET0: JournalEntry("wlan0", NM_BGSCAN)}
    assert await bgscan.recheck("wlan0") is True and not in_doubt(bgscan, NET0)
