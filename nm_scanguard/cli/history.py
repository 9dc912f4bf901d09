"""`scanguardctl history`: what the guard did, read back from the systemd journal.

The daemon's own log lines are the record (no other store is kept): the lines that
nm_scanguard/log_lines.py defines, from _SYSTEMD_UNIT=scanguard.service, with the time and pid
journald gave each.  From them: guarded spells (bgscan suspended, then restored, with how long),
client scan requests the polkit rule refused and who asked, scans aborted, roams, and what a
restart restored that a previous instance had left suspended.

Reading another unit's entries needs root or a group that journald lets read the system
journal (systemd-journal, adm); anyone else sees only their own entries and so none of the
unit's, which is told apart from "nothing happened" and said with what to do.
"""

from __future__ import annotations

import argparse
import datetime as dt
import grp
import os
import pwd
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import log_lines
from ..status import duration
from ..text import one_line
from .common import Failure, json_text
from .since import Since

UNIT = "scanguard.service"
# The groups whose members journald lets read the system journal (journald's files and the
# ACLs systemd-tmpfiles sets on /var/log/journal and /run/log/journal on Debian).
JOURNAL_GROUPS = ("systemd-journal", "adm", "wheel")
# The fields of a refused and of an aborted scan's row; "count" is how many there were in that
# guarded spell (None until its end is logged), who and when are None when the first came before
# the span read.
SCAN_FIELDS = {"scan-refused": ("who", "user", "program", "pid", "count"),
               "scan-aborted": ("when", "who", "count")}
COUNTS = {"scans-refused": "scan-refused", "scans-aborted": "scan-aborted"}  # the count's row


@dataclass(frozen=True)
class Entry:
    """One journal entry of the unit: when (seconds since the epoch), which process of which
    boot, what."""

    at: float
    pid: int | None
    message: str
    boot: str = ""


@dataclass
class Event:
    """One row of the history: `kind` is guarded, scan-refused, scan-aborted, roamed or
    restored-after-restart; `at` its time (a spell's start, None if before the span read)."""

    kind: str
    at: float | None
    interface: str
    fields: dict[str, Any] = field(default_factory=dict)
    pid: int | None = None  # the daemon's, for a spell

    @property
    def when(self) -> float:
        """Where the row sorts: its time, or a spell's end when it began before the span."""
        return self.at if self.at is not None else float(self.fields.get("until") or 0.0)


# ---- reading the journal -----------------------------------------------------------------

def journal_entries(since: float) -> Iterator[Mapping[str, Any]]:
    """The unit's journal entries from `since` on, as python3-systemd gives them."""
    try:
        import systemd.journal as journal
    except ImportError:
        raise Failure("reading the journal needs the Python module systemd.journal: install "
                      "python3-systemd (sudo apt install python3-systemd)") from None
    try:
        reader = journal.Reader()
        reader.add_match(_SYSTEMD_UNIT=UNIT)
        reader.seek_realtime(int(since * 1_000_000))
        yield from reader
    except OSError as e:
        raise Failure(f"cannot read the systemd journal ({e.strerror or e})") from None


def entries(raw: Iterable[Mapping[str, Any]], since: float) -> Iterator[Entry]:
    for r in raw:
        t = r.get("__REALTIME_TIMESTAMP")
        if isinstance(t, dt.datetime):
            at = t.timestamp()  # naive: local time, as python3-systemd converts it
        elif isinstance(t, (int, float)):
            at = t / 1_000_000
        else:
            continue
        message = r.get("MESSAGE", "")
        if isinstance(message, bytes):  # not UTF-8: python3-systemd leaves it undecoded
            message = message.decode("utf-8", "replace")
        pid = r.get("_PID")
        try:
            pid = int(pid) if pid is not None else None
        except (TypeError, ValueError):
            pid = None
        boot = _boot_id(r["_BOOT_ID"]) if r.get("_BOOT_ID") else ""
        if at >= since and isinstance(message, str):
            yield Entry(at, pid, message, boot)


# ---- from lines to events -----------------------------------------------------------------

class _History:
    """Reads the parsed lines in order and keeps the events they make.  A daemon process is
    its boot and pid: a spell it left open ends when another process of the same boot logs an
    event (a restart), or with its boot; lines of another boot that the journal interleaves
    (a machine's own journal files read beside another's) do not end it."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.open: dict[tuple[str, str], Event] = {}  # (boot, interface) -> its spell going on
        # (kind, boot, interface) -> the first refused or aborted scan, awaiting its count
        self.counted: dict[tuple[str, str, str], Event] = {}
        self.last_heard: dict[tuple[str, int], float] = {}  # (boot, pid) -> its latest line

    def heard(self, e: Entry) -> None:
        """Any line of the unit: the last time its process was heard of."""
        if e.pid is not None:
            self.last_heard[(e.boot, e.pid)] = e.at

    def add(self, e: Entry, line: dict[str, Any]) -> None:
        kind, where = line["kind"], (e.boot, line.get("interface", ""))
        self._daemon_changed(e, line)
        spell = self.open.get(where)
        if kind == "suspended":
            if spell is not None:
                self._close(spell, e.at, "suspended again")
            self._spell(e, where, line, line["reason"])
        elif kind == "taken-over":
            if spell is not None and spell.fields["network"] == line["network"]:
                spell.pid, spell.fields["across_restart"] = e.pid, True
            else:
                self._spell(e, where, line, None).fields["across_restart"] = True
        elif kind == "restored":
            spell = spell or self._spell(None, where, line, None)
            self._close(spell, e.at, "restored", line["reason"])
        elif kind == "network-removed":
            if spell is not None and spell.fields["network"] == line["network"]:
                self._close(spell, e.at, "network removed")
        elif kind == "scan-ran":
            if spell is not None:
                spell.fields["scans_while_guarding"] += 1
        elif kind in SCAN_FIELDS:  # the first of a guarded spell; the rest are only counted
            self.counted[(kind, *where)] = self._row(
                kind, e.at, where, {k: line.get(k) for k in SCAN_FIELDS[kind]})
        elif kind in COUNTS:  # how many in all, as guarding ends
            first = self.counted.pop((COUNTS[kind], *where), None)
            if first is None:  # its first line came before the span read: a row of its own
                first = self._row(COUNTS[kind], e.at, where,
                                  dict.fromkeys(SCAN_FIELDS[COUNTS[kind]]))
            first.fields["count"] = line["count"]
        elif kind == "roamed":
            self._row(kind, e.at, where, {k: line.get(k) for k in ("from", "to", "mhz", "how")})
        elif kind == "replayed":
            self._row("restored-after-restart", e.at, where,
                      {"bgscan": line["bgscan"], "network": line["network"]})

    def _daemon_changed(self, e: Entry, line: dict[str, Any]) -> None:
        """An event from another daemon process of the same boot: a spell the previous one left
        open ended with it (a spell it left in the crash journal that the new one takes over
        goes on).  Only events count: `scanguardd --check-config` (ExecReload=) logs under the
        unit too."""
        if e.pid is None:
            return
        for (boot, iface), spell in list(self.open.items()):
            if boot != e.boot or spell.pid is None or spell.pid == e.pid:
                continue
            if line["kind"] == "taken-over" and iface == line["interface"]:
                continue
            self._close(spell, self.last_heard.get((boot, spell.pid)), "daemon stopped")

    def end(self, this_boot: str) -> None:
        """The lines are read: a spell still open from another boot ended with that boot."""
        for (boot, _), spell in list(self.open.items()):
            if boot and this_boot and boot != this_boot:
                heard = self.last_heard.get((boot, spell.pid)) if spell.pid is not None else None
                self._close(spell, heard, "system stopped")

    def _row(self, kind: str, at: float | None, where: tuple[str, str],
             fields: dict[str, Any]) -> Event:
        event = Event(kind, at, where[1], fields)
        self.events.append(event)
        return event

    def _spell(self, e: Entry | None, where: tuple[str, str], line: dict[str, Any],
               reason: str | None) -> Event:
        spell = self._row("guarded", e.at if e else None, where, {
            "until": None, "seconds": None, "ended": "ongoing", "network": line.get("network"),
            "bgscan": line["bgscan"], "reason": reason, "restored_because": None,
            "scans_while_guarding": 0, "across_restart": False})
        spell.pid = e.pid if e else None
        self.open[where] = spell
        return spell

    def _close(self, spell: Event, at: float | None, ended: str, why: str | None = None) -> None:
        f = spell.fields
        f["until"], f["ended"], f["restored_because"] = at, ended, why
        if at is not None and spell.at is not None:
            f["seconds"] = round(at - spell.at, 3)
        for where, open_spell in list(self.open.items()):
            if open_spell is spell:
                del self.open[where]


def current_boot() -> str:
    """This boot's id as the journal's _BOOT_ID has it (32 hex digits); "" if unknown."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return _boot_id(f.read())
    except OSError:
        return ""


def _boot_id(value: object) -> str:
    return str(value).strip().replace("-", "").lower()


def history(lines: Iterable[Entry], this_boot: str = "") -> tuple[list[Event], int]:
    """The events the lines make, by time, and how many lines of the unit there were."""
    h = _History()
    seen = 0
    for e in lines:
        seen += 1
        h.heard(e)
        line = log_lines.parse(e.message)
        if line is not None:
            h.add(e, line)
    h.end(this_boot)
    return sorted(h.events, key=lambda ev: ev.when), seen


# ---- who may read the unit's entries ---------------------------------------------------------

def journal_access() -> str | None:
    """None if this process may read the system journal; else what the user needs to do."""
    if os.geteuid() == 0:
        return None
    mine = set(os.getgroups()) | {os.getegid()}
    try:
        me = pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        me = str(os.getuid())
    member_elsewhere = []
    for name in JOURNAL_GROUPS:
        try:
            group = grp.getgrnam(name)
        except KeyError:
            continue
        if group.gr_gid in mine:
            return None
        if me in group.gr_mem:
            member_elsewhere.append(name)
    if member_elsewhere:
        return (f"you are in the {member_elsewhere[0]} group, but this session started before "
                f"you were added: log in again (or run `newgrp {member_elsewhere[0]}` in this "
                f"terminal), then run scanguardctl history again")
    return (f"the journal shows you only your own entries, so {UNIT}'s are hidden from you: "
            f"add yourself to the systemd-journal group (sudo adduser {me} systemd-journal), "
            "then log in again; or run it as root (sudo scanguardctl history)")


# ---- output -------------------------------------------------------------------------------

def _iso(at: float | None) -> str | None:
    return None if at is None else dt.datetime.fromtimestamp(at).astimezone().isoformat(
        timespec="seconds")


def as_json(events: list[Event], since: Since, now: float) -> dict[str, Any]:
    out = []
    for ev in events:
        doc: dict[str, Any] = {"event": ev.kind, "time": _iso(ev.at), "interface": ev.interface}
        for key, value in ev.fields.items():
            doc[key] = _iso(value) if key == "until" else value
        out.append(doc)
    return {"unit": UNIT, "since": _iso(since.at), "until": _iso(now), "events": out}


class _Clock:
    """Times as a person reads them: the time of day when everything is today, else the date
    too."""

    def __init__(self, times: Iterable[float], now: float) -> None:
        today = dt.datetime.fromtimestamp(now).date()
        self.dated = any(dt.datetime.fromtimestamp(t).date() != today for t in times)

    def __call__(self, at: float) -> str:
        return dt.datetime.fromtimestamp(at).strftime(
            "%Y-%m-%d %H:%M:%S" if self.dated else "%H:%M:%S")


def _counted(n: int | None, what: str, first: str) -> str:
    """`first` (the first scan's words, "" when it came before the span read) and how many."""
    if n is None:
        return first
    return f"{first}; {n} {what} while guarding" if first else f"{n} {what} while guarding"


def _row(ev: Event, clock: _Clock, since: Since, now: float) -> tuple[str, str]:
    """(EVENT, DETAILS) of one row, every text from the journal escaped (one_line)."""
    f = {k: one_line(v) if isinstance(v, str) else v for k, v in ev.fields.items()}
    if ev.kind == "guarded":
        if f["ended"] == "ongoing":
            what = "guarding" + (f" {duration(now - ev.at)}" if ev.at is not None else "")
            until = "no restore logged yet"
        else:
            what = "guarded" + (f" {duration(f['seconds'])}" if f["seconds"] is not None else "")
            until = {"restored": "until", "network removed": "until the network went away at",
                     "daemon stopped": "until the daemon stopped, last heard at",
                     "system stopped": "until the system went down, last heard at",
                     "suspended again": "until suspended again at"}[f["ended"]]
            until += f" {clock(f['until'])}" if f["until"] is not None else " (unknown)"
        parts = [f"began before {clock(since.at)}"] if ev.at is None else []
        parts.append(f'{until}, bgscan was "{f["bgscan"]}"')
        if f["reason"]:
            parts.append(f"suspended: {f['reason']}")
        if f["restored_because"]:
            parts.append(f"restored: {f['restored_because']}")
        if f["across_restart"]:
            parts.append("taken over across a restart of the service")
        if f["scans_while_guarding"]:
            parts.append(f"{f['scans_while_guarding']} scan(s) while guarding")
        return what, "; ".join(parts)
    if ev.kind == "scan-refused":
        first = f"request from {f['who']}" if f["who"] is not None else ""
        return "scan refused", _counted(f["count"], "refused", first)
    if ev.kind == "scan-aborted":
        first = f["when"] or ""
        if f["when"] is not None and f["who"]:
            first += f", asked for by {f['who']}"
        return "scan aborted", _counted(f["count"], "aborted", first)
    if ev.kind == "roamed":
        how = f" {f['how']}" if f.get("how") else ""
        return "roamed", f"from {f['from']} to {f['to']} ({f['mhz']} MHz){how}"
    return ("restored at start", f'bgscan "{f["bgscan"]}" that a previous instance left '
                                 f"suspended on {f['network']}")


def _summary(events: list[Event]) -> str:
    spells = [e for e in events if e.kind == "guarded"]
    total = sum(e.fields["seconds"] or 0.0 for e in spells)
    refused = sum(e.fields["count"] or 1 for e in events if e.kind == "scan-refused")
    aborted = sum(e.fields["count"] or 1 for e in events if e.kind == "scan-aborted")
    parts = [f"{len(spells)} guarded spell(s)" + (f" ({duration(total)} in all)" if total else ""),
             f"{refused} scan request(s) refused", f"{aborted} scan(s) aborted"]
    roams = sum(e.kind == "roamed" for e in events)
    restores = sum(e.kind == "restored-after-restart" for e in events)
    if roams:
        parts.append(f"{roams} roam(s)")
    if restores:
        parts.append(f"{restores} restore(s) after a restart")
    return ", ".join(parts) + "."


def as_text(events: list[Event], since: Since, now: float) -> str:
    when = f"{dt.datetime.fromtimestamp(since.at):%Y-%m-%d %H:%M:%S}"
    if not events:
        return f"No guarded spells, refused or aborted scans since {when}.\n"
    times = [since.at] + [t for e in events for t in (e.at, e.fields.get("until")) if t is not None]
    clock = _Clock(times, now)
    rows = [("TIME", "INTERFACE", "EVENT", "DETAILS")]
    for ev in events:
        t = clock(ev.at) if ev.at is not None else "-"
        rows.append((t, one_line(ev.interface), *_row(ev, clock, since, now)))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines = [f"Since {when} (journal of {UNIT}):"]
    lines += ["  ".join(r[i].ljust(widths[i]) for i in range(3)) + "  " + r[3] for r in rows]
    lines.append(_summary(events))
    return "\n".join(lines) + "\n"


# ---- the verb ---------------------------------------------------------------------------------

def cmd_history(args: argparse.Namespace) -> int:
    since: Since = args.since
    events, seen = history(entries(journal_entries(since.at), since.at), current_boot())
    if not seen and (need := journal_access()) is not None:
        raise Failure(need)
    now = time.time()
    print(json_text(as_json(events, since, now)) if args.json else as_text(events, since, now),
          end="\n" if args.json else "", flush=True)
    return 0
