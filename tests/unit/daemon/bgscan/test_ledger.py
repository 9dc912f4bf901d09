"""The Ledger: each network's state moves only by the table's events, and the journal on disk
says exactly what those states need, written before the call that needs it."""

import json
import re
from pathlib import Path

import pytest

import nm_scanguard

from nm_scanguard.daemon.bgscan.journal import Journal
from nm_scanguard.daemon.bgscan.suspension_table import Ledger, Suspended
from nm_scanguard.daemon.bgscan.suspension_table import Ev, Kind
from nm_scanguard.peers.supplicant import SupplicantError

NET = "/fi/w1/wpa_supplicant1/Interfaces/0/Networks/0"
SAVED = "simple:30:-70:86400"
IFNAMES = ["wlan0", "wlé0"]


@pytest.fixture
def ledger(tmp_path):
    return Ledger(Journal(str(tmp_path)))


def on_disk(ledger):
    try:
        with open(ledger.journal.path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        return {}


def suspend(ledger, ifname):
    op = ledger.begin(NET, Ev.ASK, ifname)
    ledger.go(NET, Ev.READ_VALUE, op=op, value=SAVED)
    ledger.go(NET, Ev.SET_APPLIED, op=op)
    return op


@pytest.mark.parametrize("ifname", IFNAMES)
def test_the_entry_is_on_disk_once_the_value_is_read_and_goes_with_the_restore(ledger, ifname):
    op = ledger.begin(NET, Ev.ASK, ifname)
    assert ledger.state(NET).kind is Kind.READING and on_disk(ledger) == {}
    ledger.go(NET, Ev.READ_VALUE, op=op, value=SAVED)
    assert ledger.state(NET).kind is Kind.SETTING  # the Set of "" is sent after this
    assert list(on_disk(ledger)) == [NET]
    ledger.go(NET, Ev.SET_APPLIED, op=op)
    assert ledger.current(ifname) == Suspended(NET, SAVED, 0, ifname)
    op = ledger.begin(NET, Ev.RESTORE)
    assert ledger.state(NET).kind is Kind.RESTORING and list(on_disk(ledger)) == [NET]
    ledger.go(NET, Ev.READ_EMPTY, op=op)
    ledger.go(NET, Ev.DONE, op=op)
    assert ledger.state(NET) is None and on_disk(ledger) == {}


def test_an_answer_to_a_call_sequence_that_ended_is_not_applied(ledger):
    first = ledger.begin(NET, Ev.ASK, "wlan0")
    ledger.settle(NET, first)  # its task was cancelled before the read answered
    second = ledger.begin(NET, Ev.ASK, "wlan0")
    assert ledger.go(NET, Ev.READ_VALUE, op=first, value=SAVED) is None
    assert ledger.state(NET).kind is Kind.READING and on_disk(ledger) == {}
    assert ledger.go(NET, Ev.READ_VALUE, op=second, value=SAVED).kind is Kind.SETTING


def test_an_entry_that_cannot_be_written_stops_the_suspend_before_its_set(ledger, monkeypatch):
    op = ledger.begin(NET, Ev.ASK, "wlan0")

    def full(*_args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ledger.journal, "record", full)
    with pytest.raises(SupplicantError, match="bgscan is left on"):
        ledger.go(NET, Ev.READ_VALUE, op=op, value=SAVED)
    assert ledger.state(NET).kind is Kind.READING  # the event has not happened


@pytest.mark.parametrize("ifname", IFNAMES)
def test_an_earlier_instances_entry_is_leftover_and_unowned(tmp_path, ifname):
    Journal(str(tmp_path)).record(NET, ifname, SAVED)
    ledger = Ledger(Journal(str(tmp_path)))
    assert ledger.state(NET, found=False) is None  # not read yet
    assert {n: s.kind for n, s in ledger.unowned().items()} == {NET: Kind.LEFTOVER}
    assert list(ledger.unowned(ifname)) == [NET] and ledger.unowned("wlan9") == {}
    assert ledger.current(ifname) is None  # nobody's live suspension


@pytest.mark.parametrize("ifname", IFNAMES)
def test_a_wpa_supplicant_restart_forgets_what_it_carried_but_not_a_set_on_its_way(
        tmp_path, ifname):
    ledger = Ledger(Journal(str(tmp_path)))
    suspend(ledger, ifname)
    other = NET.replace("/Networks/0", "/Networks/1")
    op = ledger.begin(other, Ev.ASK, ifname)
    ledger.go(other, Ev.READ_VALUE, op=op, value=SAVED)  # its Set is on the way
    ledger.supplicant_restarted()
    assert ledger.state(NET) is None
    assert ledger.state(other) is not None and list(on_disk(ledger)) == [other]


def test_a_stopped_guards_suspension_is_nobodys_and_left_for_the_replay(ledger):
    suspend(ledger, "wlan0")
    ledger.abandon("wlan0")
    assert ledger.state(NET).kind is Kind.LEFTOVER
    assert list(ledger.unowned()) == [NET] and list(on_disk(ledger)) == [NET]


# The bgscan core: the one owner of the states and the journal (nm_scanguard.daemon.suspension).
CORE = {"suspension_table.py", "suspension.py", "evidence.py", "journal.py"}
REACHING_IN = re.compile(r"\w\.ledger\b|\bLedger\(|journal\.(entries|get|record|forget|load|batch)\(")


def test_nothing_outside_the_core_reaches_into_its_ledger_or_journal():
    """The guards and the daemon ask Bgscan (current, kept, replay, ...) instead."""
    for path in Path(nm_scanguard.__file__).parent.rglob("*.py"):
        if path.name not in CORE:
            found = REACHING_IN.search(path.read_text(encoding="utf-8"))
            assert found is None, f"{path}: {found and found.group()}"
