"""The daemon's log lines that `scanguardctl history` reads back from the journal: the contract.

The daemon logs to standard error, one line per message (daemon/service.py), and journald files
each line with its time, the daemon's pid and _SYSTEMD_UNIT=scanguard.service.  The lines in
`LINES` are the ones `history` parses; every other line is for people and may change freely.
The daemon logs these with the format strings defined here (or, for `MOVED`, a format that
starts with it), and tests/unit/cli/test_history.py holds each one to a logger call in the
daemon's code: neither side can change a line alone.  docs/how-it-works.md lists them.

Each format is read back as written: "%s" is any text (the daemon escapes a user's text with
text.quoted or text.shown, so no value holds a newline), "%d" a whole number.  Every line but
STARTED begins with the interface's name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from .text import quoted

# A daemon process began: what an earlier one left open ended with that one.
STARTED = "started (nm-scanguard %s)"
SUSPENDED = '%s: bgscan suspended on %s (was "%s"): %s'
RESTORED = '%s: bgscan restored to "%s": %s'
TAKEN_OVER = ('%s: bgscan on %s is still off from an earlier suspension (was "%s"); taking it '
              'over')
REPLAYED = '%s: restored bgscan "%s" that a previous instance left suspended on %s'
NETWORK_REMOVED = "%s: network %s was removed (NetworkManager re-activating?)"
REFUSED = ("%s: refused a Wi-Fi scan request from %s while guarding (defer_client_scans); "
           "further ones are counted in scanguardctl status")
REFUSED_COUNT = "%s: %d Wi-Fi scan request(s) of other programs were refused while guarding"
ABORTED_AT_ENGAGE = ("%s: aborted a scan that was running when the guard engaged "
                     "(abort_scans); further ones are counted in scanguardctl status")
ABORTED = ("%s: aborted a scan that started while guarding, asked for by %s (abort_scans); "
           "further ones are counted in scanguardctl status")
ABORTED_COUNT = "%s: %d scan(s) were aborted while guarding"
SCAN_RAN_REFUSING = ("%s: a scan ran while guarding, though client scan requests are refused; "
                     "it was asked for by %s")
SCAN_RAN = ("%s: a scan ran while guarding, asked for by %s; bgscan cannot stop those; "
            "defer_client_scans = yes refuses NetworkManager's clients")
# How the line goes on (on whose decision, after what) is kept as "how", unparsed.
MOVED = "%s: the station moved from %s to %s (%d MHz)"

# When an aborted scan had started, in history's words.
AT_ENGAGE, WHILE_GUARDING = "running when the guard engaged", "started while guarding"


@dataclass(frozen=True)
class Line:
    """One line of the contract: its kind (what history makes of it), its format, the names
    of the format's fields in order, values every such line has, and whether the format is only
    the start of the line (the rest is kept as "how")."""

    kind: str
    format: str
    fields: tuple[str, ...]
    constant: dict[str, str] = field(default_factory=dict)
    prefix: bool = False

    def pattern(self) -> re.Pattern[str]:
        out, names = [], iter(self.fields)
        for piece in re.split(r"(%[-.0-9]*[sdf])", self.format):
            if not piece.startswith("%"):
                out.append(re.escape(piece))
            elif piece.endswith("d"):
                out.append(rf"(?P<{next(names)}>-?[0-9]+)")
            else:
                out.append(rf"(?P<{next(names)}>.*?)")
        rest = r"(?: (?P<how>.*))?" if self.prefix else ""
        return re.compile("".join(out) + rest + r"\Z", re.S)


LINES = (
    Line("started", STARTED, ("version",)),
    Line("suspended", SUSPENDED, ("interface", "network", "bgscan", "reason")),
    Line("restored", RESTORED, ("interface", "bgscan", "reason")),
    Line("taken-over", TAKEN_OVER, ("interface", "network", "bgscan")),
    Line("replayed", REPLAYED, ("interface", "bgscan", "network")),
    Line("network-removed", NETWORK_REMOVED, ("interface", "network")),
    Line("scan-refused", REFUSED, ("interface", "who")),
    Line("scans-refused", REFUSED_COUNT, ("interface", "count")),
    Line("scan-aborted", ABORTED_AT_ENGAGE, ("interface",), {"when": AT_ENGAGE}),
    Line("scan-aborted", ABORTED, ("interface", "who"), {"when": WHILE_GUARDING}),
    Line("scans-aborted", ABORTED_COUNT, ("interface", "count")),
    Line("scan-ran", SCAN_RAN_REFUSING, ("interface", "who")),
    Line("scan-ran", SCAN_RAN, ("interface", "who")),
    Line("roamed", MOVED, ("interface", "from", "to", "mhz"), prefix=True),
)
_PATTERNS = [(line, line.pattern()) for line in LINES]


def parse(message: str) -> dict[str, Any] | None:
    """The kind and fields of one of the daemon's messages, or None if it is not in LINES.
    Numbers are int; "who" comes with its parts (parse_who)."""
    for line, pattern in _PATTERNS:
        m = pattern.match(message)
        if m is None:
            continue
        found: dict[str, Any] = {"kind": line.kind, **line.constant}
        for name, value in m.groupdict().items():
            if value is not None:
                found[name] = int(value) if name in ("count", "mhz") else value
        if "who" in found:
            found.update(parse_who(found["who"]))
        return found
    return None


# ---- who asked: the polkit rule's report, in the daemon's words ------------------------------

_WHO = re.compile(r"(?:user '(?P<user>.*)'|a user)(?: \((?:'(?P<program>.*)', )?pid "
                  r"(?P<pid>[0-9]+)\))?\Z", re.S)


def who(user: str, pid: int, program: str) -> str:
    """The words naming who asked for a scan the polkit rule saw: user 'alice' ('nmcli', pid
    4242).  `program` is /proc/PID/comm, the name a process gives itself."""
    text = f"user {quoted(user)}" if user else "a user"
    return text + (f" ({quoted(program) + ', ' if program else ''}pid {pid})" if pid else "")


def parse_who(text: str) -> dict[str, Any]:
    """The user, program and pid in words `who` wrote (as quoted shows them: escaped, maybe
    cut); {} for other words, such as the daemon's guess at who asked for a scan it saw."""
    m = _WHO.match(text)
    if m is None:
        return {}
    return {"user": m["user"], "program": m["program"],
            "pid": int(m["pid"]) if m["pid"] else None}
