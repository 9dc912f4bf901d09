"""`scanguardctl history` (issue 50, finding 7): the daemon's journal lines read back as a table
of guarded spells, scans refused or aborted and who asked, roams and restores.

The journal is a stand-in for python3-systemd's `systemd.journal` (entries as dicts, as its
Reader yields them, filtered by its match and seek); the lines in it are the daemon's own: the
contract (nm_scanguard/log_lines.py) is held to the daemon's logger calls, and a Guard with the
fakes of test_guard logs the lines that history reads here."""

from __future__ import annotations

import ast
import datetime as dt
import grp
import json
import logging
import os
import pwd
import sys
import time
import types
import uuid
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from nm_scanguard import log_lines
from nm_scanguard.cli import history as H
from nm_scanguard.cli import scanguardctl
from nm_scanguard.cli import since as since_module
from nm_scanguard.cli.since import parse_since
from nm_scanguard.text import one_line, quoted
from tests.unit.daemon.guard import test_abort as A
from tests.unit.daemon.guard import test_guard as G

parts, guard = G.parts, G.guard  # the fixtures of test_guard

USER_TEXT = "Café ☕"
DAEMON = Path(log_lines.__file__).parent / "daemon"
PID, NEXT_PID = 812, 9431
THIS_BOOT, LAST_BOOT, ELSEWHERE = (uuid.UUID(int=n) for n in (0xB007, 0xB006, 0x07E4))
PARIS = ZoneInfo("Europe/Paris")


@pytest.fixture(autouse=True)
def paris():
    """Local time is Paris (UTC+1 in winter): the table shows local time, JSON its offset."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "Europe/Paris"
    time.tzset()
    yield
    if before is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = before
    time.tzset()


def at(clock: str, day: str = "2026-11-30") -> float:
    """The moment `clock` on `day` in Paris."""
    return dt.datetime.fromisoformat(f"{day} {clock}").replace(tzinfo=PARIS).timestamp()


def entry(clock: str, message: str, pid: int = PID, unit: str = H.UNIT, day: str = "2026-11-30",
          boot: uuid.UUID = THIS_BOOT) -> dict:
    """A journal entry as journald keeps it (FakeReader converts it as python3-systemd does)."""
    return {"__REALTIME_TIMESTAMP": int(at(clock, day) * 1_000_000), "_PID": pid,
            "MESSAGE": message, "_SYSTEMD_UNIT": unit, "PRIORITY": 6, "_BOOT_ID": boot}


class FakeReader:
    """systemd.journal.Reader over `ENTRIES`: add_match and seek_realtime filter as journald
    does (only exact matches of the fields given)."""

    ENTRIES: list[dict] = []
    last: FakeReader | None = None

    def __init__(self) -> None:
        self.matches: dict = {}
        self.from_usec = 0
        FakeReader.last = self

    def add_match(self, **fields) -> None:
        self.matches.update(fields)

    def seek_realtime(self, usec: int) -> None:
        assert isinstance(usec, int)
        self.from_usec = usec

    def __iter__(self):
        for e in self.ENTRIES:
            if all(e.get(k) == v for k, v in self.matches.items()) and \
                    e["__REALTIME_TIMESTAMP"] >= self.from_usec:
                # python3-systemd's converter: a naive datetime in local time
                yield {**e, "__REALTIME_TIMESTAMP": dt.datetime.fromtimestamp(
                    e["__REALTIME_TIMESTAMP"] / 1_000_000)}


@pytest.fixture
def reader(monkeypatch):
    """The stand-in journal in place of python3-systemd's, its entries set by the test."""
    module = types.ModuleType("systemd.journal")
    module.Reader = FakeReader  # type: ignore[attr-defined]
    package = types.ModuleType("systemd")
    package.journal = module  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "systemd", package)
    monkeypatch.setitem(sys.modules, "systemd.journal", module)
    monkeypatch.setattr(FakeReader, "ENTRIES", [])
    monkeypatch.setattr(H, "current_boot", lambda: THIS_BOOT.hex)
    return FakeReader


@pytest.fixture
def journal(reader, monkeypatch):
    """The stand-in journal, which this user may read (root, or in a journal group)."""
    monkeypatch.setattr(H, "journal_access", lambda: None)
    return reader


def ctl(*argv: str) -> int:
    return scanguardctl.main(["history", *argv])


NOW = at("18:00")


@pytest.fixture(autouse=True)
def evening(monkeypatch):
    """It is 18:00 on 2026-11-30 for --since and the output's "now" (and only for them)."""
    clock = types.SimpleNamespace(time=lambda: NOW)
    monkeypatch.setattr(H, "time", clock)
    monkeypatch.setattr(since_module, "time", clock)


# ---- the contract: the daemon logs exactly the lines history reads -----------------------------

def _logged_formats() -> dict[str, list[str]]:
    """Each format string the daemon's code passes to a logger (log.info(FORMAT, ...),
    log.log(LEVEL, FORMAT, ...)): a literal, or a constant of log_lines by name; by file."""
    found: dict[str, list[str]] = {}
    for path in sorted(DAEMON.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("debug", "info", "warning", "error", "log")):
                continue
            args = node.args[1:] if node.func.attr == "log" else node.args
            if not args:
                continue
            first = args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                found.setdefault(str(path.relative_to(DAEMON)), []).append(first.value)
            elif isinstance(first, ast.Attribute) and isinstance(first.value, ast.Name) \
                    and first.value.id == "log_lines":
                found.setdefault(str(path.relative_to(DAEMON)), []).append(getattr(log_lines, first.attr))
    return found


@pytest.mark.parametrize("line", log_lines.LINES, ids=lambda line: f"{line.kind}:{line.format[4:30]}")
def test_every_line_history_reads_is_one_the_daemon_logs(line):
    formats = [f for fs in _logged_formats().values() for f in fs]
    if line.prefix:
        assert any(f.startswith(line.format) for f in formats), \
            f"no logger call in nm_scanguard/daemon starts with {line.format!r}: history reads it"
    else:
        assert line.format in formats, \
            f"no logger call in nm_scanguard/daemon logs {line.format!r}: history reads it"


def test_the_contract_check_sees_a_line_the_daemon_no_longer_logs():
    gone = log_lines.Line("suspended", "%s: bgscan paused on %s", ("interface", "network"))
    assert gone.format not in [f for fs in _logged_formats().values() for f in fs]


SAMPLES = {"interface": "wlp2s0", "network": "/fi/w1/wpa_supplicant1/Interfaces/0/Networks/3",
           "bgscan": "simple:30:-70:86400", "reason": f"held by an application ({USER_TEXT})",
           "who": log_lines.who(USER_TEXT, 4242, USER_TEXT), "count": 3,
           "from": "02:00:00:00:01:00", "to": "02:00:00:00:02:00", "mhz": 5180, "version": "0.3.0~dev"}


@pytest.mark.parametrize("line", log_lines.LINES, ids=lambda line: f"{line.kind}:{line.format[4:30]}")
def test_each_line_reads_back_with_its_fields(line):
    text = one_line(line.format % tuple(SAMPLES[f] for f in line.fields))  # as journald has it
    if line.prefix:
        text += " by wpa_supplicant's own choice"
    parsed = log_lines.parse(text)
    assert parsed is not None and parsed["kind"] == line.kind, text
    for name in line.fields:
        assert parsed[name] == SAMPLES[name], (name, parsed)
    assert {k: parsed[k] for k in line.constant} == line.constant
    if "who" in line.fields:
        assert (parsed["user"], parsed["program"], parsed["pid"]) == (USER_TEXT, USER_TEXT, 4242)
    if line.prefix:
        assert parsed["how"] == "by wpa_supplicant's own choice"


@pytest.mark.parametrize("user, pid, program", [
    ("alice", 7, "nmcli"), ("", 7, "nmcli"), ("bob", 0, ""), ("it's", 9, "a'b"), ("", 0, ""),
    ("x" * 200, 12, "y" * 50)])
def test_who_asked_reads_back(user, pid, program):
    parsed = log_lines.parse_who(log_lines.who(user, pid, program))
    assert parsed["user"] == (quoted(user)[1:-1] if user else None)
    assert parsed["pid"] == (pid or None)
    assert parsed["program"] == (quoted(program)[1:-1] if program and pid else None)


def test_other_lines_are_not_events():
    for message in ("wlp2s0: guarding (traffic 8 Mbit/s)",
                    "configuration reloaded from /etc/scanguard/scanguard.conf", ""):
        assert log_lines.parse(message) is None


async def test_the_daemons_own_lines_make_a_spell_with_who_asked(guard, parts, caplog):
    """A Guard engages on traffic, a client's scan request is refused (twice), a scan that starts
    while guarding is aborted, the link goes quiet and bgscan is restored: history reads what it
    logged."""
    with caplog.at_level(logging.INFO, logger="scanguard"):
        await A.engage(guard, parts)
        guard.scans.count_deferred_request(log_lines.who(USER_TEXT, 4242, USER_TEXT))
        guard.scans.count_deferred_request(log_lines.who("bob", 77, "gnome-shell"))
        A.scan_starts(guard, parts)
        assert await parts["listener"].run() == 1  # the abort
        guard.scans.scanning_changed(False)
        guard.scans.count_scan(guard.engaged)  # its ScanDone
        await G.run(guard, parts["counters"], 0, 4)
        assert not guard.engaged
    entries = [H.Entry(r.created, PID, one_line(r.getMessage())) for r in caplog.records]
    events, seen = H.history(entries)
    assert seen == len(caplog.records)
    assert [e.kind for e in events] == ["guarded", "scan-refused", "scan-aborted"], events
    spell, refused, aborted = events
    assert spell.interface == "wlan0" and spell.fields["ended"] == "restored"
    assert spell.fields["bgscan"] == G.NM_BGSCAN and spell.fields["seconds"] >= 0
    assert spell.fields["reason"].startswith("traffic ")
    assert spell.fields["restored_because"].startswith("quiet for ")
    assert spell.fields["scans_while_guarding"] == 1
    assert (refused.fields["user"], refused.fields["program"], refused.fields["pid"]) == \
        (USER_TEXT, USER_TEXT, 4242)
    assert refused.fields["count"] == 2
    assert aborted.fields["when"] == log_lines.WHILE_GUARDING and aborted.fields["count"] == 1
    assert "GeoClue" in aborted.fields["who"]  # the daemon's words for who asks while refusing


# ---- the table and JSON -------------------------------------------------------------------------

NET = "/fi/w1/wpa_supplicant1/Interfaces/0/Networks/0"
WHO = log_lines.who(USER_TEXT, 4242, "nmcli")
DAY = [
    entry("08:59:58", "started (nm-scanguard 0.3.0)"),
    entry("09:12:03", log_lines.SUSPENDED % ("wlan0", NET, "simple:30:-70:86400",
                                             "traffic 12.0 Mbit/s, 900 packets/s")),
    entry("09:12:40", log_lines.REFUSED % ("wlan0", WHO)),
    entry("09:13:00", log_lines.ABORTED % ("wlan0", "root (e.g. sudo nmcli device wifi rescan)")),
    entry("09:13:01", log_lines.SCAN_RAN_REFUSING % ("wlan0", "root")),
    entry("09:14:00", log_lines.MOVED % ("wlan0", "02:00:00:00:01:00", "02:00:00:00:02:00", 5180)
          + " by wpa_supplicant's own choice"),
    entry("09:16:15", log_lines.RESTORED % ("wlan0", "simple:30:-70:86400", "quiet for 15 s")),
    entry("09:16:15", log_lines.REFUSED_COUNT % ("wlan0", 3)),
    entry("09:16:15", log_lines.ABORTED_COUNT % ("wlan0", 1)),
    # a user's own entry, not the unit's: never shown
    entry("10:00:00", log_lines.SUSPENDED % ("wlan9", NET, "x", "forged"), unit="user@1000.service"),
    # a hold, then the daemon is killed; the next one restores what it left
    entry("11:00:00", log_lines.SUSPENDED % ("wlan0", NET, "simple:30:-70:86400",
                                             f"held by an application ('{USER_TEXT}')")),
    entry("11:05:00", "wlan0: held (held by an application)"),
    entry("11:07:30", log_lines.REPLAYED % ("wlan0", "simple:30:-70:86400", NET), pid=NEXT_PID),
]


def test_the_table_shows_local_times_durations_and_who_asked(journal, capsys):
    journal.ENTRIES = DAY
    assert ctl() == 0
    assert journal.last.matches == {"_SYSTEMD_UNIT": "scanguard.service"}
    assert journal.last.from_usec == int(at("00:00") * 1e6)  # today, local midnight
    out = capsys.readouterr().out
    assert out == (
        "Since 2026-11-30 00:00:00 (journal of scanguard.service):\n"
        "TIME      INTERFACE  EVENT              DETAILS\n"
        '09:12:03  wlan0      guarded 4m12s      until 09:16:15, bgscan was "simple:30:-70:86400"; '
        "suspended: traffic 12.0 Mbit/s, 900 packets/s; restored: quiet for 15 s; 1 scan(s) while "
        "guarding\n"
        f"09:12:40  wlan0      scan refused       request from user '{USER_TEXT}' ('nmcli', pid "
        "4242); 3 refused while guarding\n"
        "09:13:00  wlan0      scan aborted       started while guarding, asked for by root (e.g. "
        "sudo nmcli device wifi rescan); 1 aborted while guarding\n"
        "09:14:00  wlan0      roamed             from 02:00:00:00:01:00 to 02:00:00:00:02:00 "
        "(5180 MHz) by wpa_supplicant's own choice\n"
        '11:00:00  wlan0      guarded 5m00s      until the daemon stopped, last heard at 11:05:00, '
        f"bgscan was \"simple:30:-70:86400\"; suspended: held by an application ('{USER_TEXT}')\n"
        '11:07:30  wlan0      restored at start  bgscan "simple:30:-70:86400" that a previous '
        f"instance left suspended on {NET}\n"
        "2 guarded spell(s) (9m12s in all), 3 scan request(s) refused, 1 scan(s) aborted, 1 "
        "roam(s), 1 restore(s) after a restart.\n")


def test_json_is_strict_and_gives_the_same_events_with_their_offsets(journal, capsys):
    journal.ENTRIES = DAY
    assert ctl("--json") == 0
    out = capsys.readouterr().out

    def refuse(name: str) -> None:
        raise ValueError(name)
    doc = json.loads(out, parse_constant=refuse)
    assert doc["unit"] == "scanguard.service"
    assert doc["since"] == "2026-11-30T00:00:00+01:00" and doc["until"] == "2026-11-30T18:00:00+01:00"
    kinds = [e["event"] for e in doc["events"]]
    assert kinds == ["guarded", "scan-refused", "scan-aborted", "roamed", "guarded",
                     "restored-after-restart"]
    spell = doc["events"][0]
    assert spell == {"event": "guarded", "time": "2026-11-30T09:12:03+01:00", "interface": "wlan0",
                     "until": "2026-11-30T09:16:15+01:00", "seconds": 252.0, "ended": "restored",
                     "network": NET, "bgscan": "simple:30:-70:86400",
                     "reason": "traffic 12.0 Mbit/s, 900 packets/s",
                     "restored_because": "quiet for 15 s", "scans_while_guarding": 1,
                     "across_restart": False}
    assert doc["events"][1] == {"event": "scan-refused", "time": "2026-11-30T09:12:40+01:00",
                                "interface": "wlan0", "who": WHO, "user": USER_TEXT,
                                "program": "nmcli", "pid": 4242, "count": 3}
    assert doc["events"][2]["who"].startswith("root") and doc["events"][2]["count"] == 1
    assert doc["events"][3]["mhz"] == 5180 and doc["events"][3]["how"] == "by wpa_supplicant's own choice"
    assert doc["events"][4]["ended"] == "daemon stopped"
    assert USER_TEXT in out  # readable, not \u-escaped


def test_nothing_since_is_said_plainly(journal, capsys):
    journal.ENTRIES = [entry("09:00:00", "started (nm-scanguard 0.3.0)")]
    assert ctl() == 0
    assert capsys.readouterr().out == \
        "No guarded spells, refused or aborted scans since 2026-11-30 00:00:00.\n"
    journal.ENTRIES = DAY
    assert ctl("--since", "-1h") == 0  # since 17:00: the day's events are earlier
    assert capsys.readouterr().out == \
        "No guarded spells, refused or aborted scans since 2026-11-30 17:00:00.\n"
    assert ctl("--since", "-1h", "--json") == 0
    assert json.loads(capsys.readouterr().out)["events"] == []


def test_a_spell_that_began_earlier_or_goes_on_and_days_are_dated(journal, capsys):
    journal.ENTRIES = [
        entry("23:50:00", log_lines.SUSPENDED % ("wlan0", NET, "simple:30:-70:86400", "traffic"),
              day="2026-11-28"),
        entry("00:10:00", log_lines.RESTORED % ("wlan0", "simple:30:-70:86400", "quiet for 15 s"),
              day="2026-11-29"),
        entry("00:20:00", log_lines.REFUSED_COUNT % ("wlan0", 4), day="2026-11-29"),
        entry("17:00:00", log_lines.TAKEN_OVER % ("wlan0", NET, "simple:30:-70:86400"), pid=NEXT_PID),
    ]
    assert ctl("--since", "yesterday") == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "Since 2026-11-29 00:00:00 (journal of scanguard.service):"
    assert out[2].split() == ["-", "wlan0", "guarded", "began", "before", "2026-11-29",
                              "00:00:00;", "until", "2026-11-29", "00:10:00,", "bgscan", "was",
                              '"simple:30:-70:86400";', "restored:", "quiet", "for", "15", "s"]
    assert out[3].startswith("2026-11-29 00:20:00  wlan0") and out[3].endswith(
        "scan refused    4 refused while guarding")
    assert out[4].startswith("2026-11-30 17:00:00  wlan0      guarding 1h00m") and \
        "no restore logged yet" in out[4] and "taken over across a restart" in out[4]


def test_a_spell_taken_over_by_the_next_daemon_goes_on(journal, capsys):
    journal.ENTRIES = [
        entry("09:00:00", log_lines.SUSPENDED % ("wlan0", NET, "simple:30:-70:86400", "traffic")),
        entry("09:30:00", log_lines.TAKEN_OVER % ("wlan0", NET, "simple:30:-70:86400"), pid=NEXT_PID),
        entry("10:00:00", log_lines.RESTORED % ("wlan0", "simple:30:-70:86400", "quiet"),
              pid=NEXT_PID),
    ]
    events, _ = H.history(H.entries(FakeReader(), 0))
    (spell,) = events
    assert spell.fields["ended"] == "restored" and spell.fields["seconds"] == 3600
    assert spell.fields["across_restart"]


def test_a_spell_ends_with_its_boot_and_not_with_another_machines_lines(journal, capsys):
    """The last boot's spell never restored ended with that boot; a spell of this boot goes on
    through lines of another daemon that the journal interleaves from another boot (a machine
    whose journal files are read beside its own, as the lab's guest reads the host's)."""
    journal.ENTRIES = [
        entry("07:00:00", log_lines.SUSPENDED % ("wlan0", NET, "simple:30:-70:86400", "traffic"),
              pid=77, boot=LAST_BOOT),
        entry("07:10:00", "wlan0: guarding (traffic 9 Mbit/s)", pid=77, boot=LAST_BOOT),
        entry("09:00:00", log_lines.SUSPENDED % ("wlan1", NET, "simple:30:-70:86400", "traffic")),
        entry("09:01:00", log_lines.SUSPENDED % ("wlan1", NET, "x", "elsewhere"), pid=5, boot=ELSEWHERE),
        entry("09:02:00", log_lines.RESTORED % ("wlan1", "x", "quiet"), pid=5, boot=ELSEWHERE),
        entry("09:05:00", log_lines.RESTORED % ("wlan1", "simple:30:-70:86400", "quiet for 15 s")),
    ]
    assert ctl("--json") == 0
    spells = [e for e in json.loads(capsys.readouterr().out)["events"] if e["event"] == "guarded"]
    assert [(s["time"][11:19], s["interface"], s["ended"], s["until"][11:19], s["seconds"])
            for s in spells] == [("07:00:00", "wlan0", "system stopped", "07:10:00", 600.0),
                                 ("09:00:00", "wlan1", "restored", "09:05:00", 300.0),
                                 ("09:01:00", "wlan1", "restored", "09:02:00", 60.0)]
    assert ctl() == 0
    assert "until the system went down, last heard at 07:10:00" in capsys.readouterr().out


# ---- who may read it, and bad input ---------------------------------------------------------------

def outsider(monkeypatch, member_of: tuple[str, ...] = ()) -> None:
    """This process: user alice (uid 1000), groups alice and users only; `member_of` lists the
    journal groups /etc/group names her in (added, but not in this session)."""
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setattr(os, "getuid", lambda: 1000)
    monkeypatch.setattr(os, "getegid", lambda: 1000)
    monkeypatch.setattr(os, "getgroups", lambda: [1000, 100])
    monkeypatch.setattr(pwd, "getpwuid", lambda uid: types.SimpleNamespace(pw_name="alice"))
    groups = {"systemd-journal": 101, "adm": 4}

    def getgrnam(name: str):
        if name not in groups:
            raise KeyError(name)
        return grp.struct_group((name, "x", groups[name], ["alice"] if name in member_of else []))
    monkeypatch.setattr(grp, "getgrnam", getgrnam)


def test_a_user_outside_the_journal_groups_is_told_what_it_takes(reader, monkeypatch, capsys):
    reader.ENTRIES = [entry("09:00:00", "a line of alice's own session", unit="user@1000.service")]
    outsider(monkeypatch)
    assert ctl() == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "scanguardctl: the journal shows you only your own entries, so scanguard.service's are "
        "hidden from you: add yourself to the systemd-journal group (sudo adduser alice "
        "systemd-journal), then log in again; or run it as root (sudo scanguardctl history)\n")

    outsider(monkeypatch, member_of=("systemd-journal",))
    assert ctl() == 1
    assert "you are in the systemd-journal group, but this session started before you were " \
           "added: log in again" in capsys.readouterr().err


def test_journal_access(monkeypatch):
    outsider(monkeypatch)
    assert "sudo adduser alice systemd-journal" in H.journal_access()
    monkeypatch.setattr(os, "getgroups", lambda: [1000, 4])  # adm
    assert H.journal_access() is None
    monkeypatch.setattr(os, "getgroups", lambda: [1000])
    monkeypatch.setattr(os, "getegid", lambda: 101)  # systemd-journal as the process's own group
    assert H.journal_access() is None
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(os, "getegid", lambda: 1000)
    assert H.journal_access() is None


def test_what_the_unit_logged_is_shown_to_whoever_can_see_it(journal, monkeypatch, capsys):
    """No group, yet the unit's lines are there (a journal readable some other way): shown."""
    journal.ENTRIES = DAY[:3]
    monkeypatch.setattr(H, "journal_access", lambda: "not asked")
    assert ctl() == 0
    assert "scan refused" in capsys.readouterr().out


@pytest.mark.parametrize("bad", ["Café ☕", "", "-", "1h", "-1 parsec", "@", "@nan", "25:00",
                                 "2026-13-01", "yesterday 18:00", "@1e300"])
def test_a_bad_since_is_a_usage_error_naming_it(journal, bad, capsys):
    with pytest.raises(SystemExit) as e:
        ctl("--since", bad)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --since: {quoted(bad)} is not a time: give e.g. today, yesterday, -1h" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("words, expected", [
    ("now", NOW), ("today", at("00:00")), ("Today", at("00:00")),
    ("yesterday", at("00:00", "2026-11-29")), ("-1h", at("17:00")), ("-90min", at("16:30")),
    ("-1h 30min", at("16:30")), ("-2d", at("18:00", "2026-11-28")), ("-30", NOW - 30),
    ("2 hours ago", at("16:00")), ("1 week ago", at("18:00", "2026-11-23")),
    ("14:00", at("14:00")), ("9:30", at("09:30")), ("2026-11-29", at("00:00", "2026-11-29")),
    ("2026-11-29 14:05", at("14:05", "2026-11-29")),
    ("2026-11-29T14:05:07", at("14:05:07", "2026-11-29")),
    ("2026-11-29T13:05:07+00:00", at("14:05:07", "2026-11-29")), ("@1764500000", 1764500000.0)])
def test_since_takes_what_journalctl_takes_most_often(words, expected):
    assert parse_since(words, NOW) == pytest.approx(expected)


def test_since_minus_one_hour_as_its_own_word(journal, capsys):
    args = scanguardctl.build_parser().parse_args(["history", "--since", "-1h", "--json"])
    assert args.since.at == at("17:00") and args.json


def test_without_python3_systemd_it_says_what_to_install(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "systemd", None)
    monkeypatch.setitem(sys.modules, "systemd.journal", None)
    assert ctl() == 1
    assert capsys.readouterr().err == (
        "scanguardctl: reading the journal needs the Python module systemd.journal: install "
        "python3-systemd (sudo apt install python3-systemd)\n")


def test_a_journal_that_cannot_be_opened_is_one_line(journal, monkeypatch, capsys):
    def fails(self) -> None:
        raise OSError(24, "Too many open files")
    monkeypatch.setattr(FakeReader, "__init__", fails)
    assert ctl() == 1
    assert capsys.readouterr().err == \
        "scanguardctl: cannot read the systemd journal (Too many open files)\n"
