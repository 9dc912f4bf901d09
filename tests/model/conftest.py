"""The model rung: what the generated sequences did, printed when the session ends.

Environment:
- ``SCANGUARD_MODEL_SEQUENCES``: generated sequences (default 2000; ``make model-long
  SEQUENCES=N`` sets it).
- ``SCANGUARD_MODEL_STEPS``: the most steps in one sequence (default 40).
- ``SCANGUARD_MODEL_STATS``: write the figures to this file as JSON (tests/model/parallel.py
  runs one pytest per core and adds them up).
- ``SCANGUARD_MODEL_SHRINK=0``: report a failing sequence unshrunk (the mutation check does,
  to count quickly); shrinking is on by default, and cheap here.
"""

from __future__ import annotations

import hashlib
import os
import time
from dataclasses import dataclass, field
from typing import Any

SEQUENCES = int(os.environ.get("SCANGUARD_MODEL_SEQUENCES", "2000"))
STEPS = int(os.environ.get("SCANGUARD_MODEL_STEPS", "40"))
SHRINK = os.environ.get("SCANGUARD_MODEL_SHRINK", "1") != "0"


@dataclass
class Stats:
    sequences: int = 0
    steps: int = 0
    virtual_seconds: float = 0.0
    started: float = field(default_factory=time.monotonic)
    interleavings: set[bytes] = field(default_factory=set)
    kinds: dict[str, int] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)  # wpa_supplicant calls by outcome
    crashes: int = 0
    journal_crashes: int = 0  # of those, in the journal's write, between write and rename
    stops: int = 0
    lost_buses: int = 0
    first_failure_at: int | None = None  # the sequence number of the first failure

    def sequence_done(self, events: list[str], calls: dict[str, int], virtual: float) -> None:
        self.interleavings.add(hashlib.blake2b("\n".join(events).encode(), digest_size=16).digest())
        for kind, n in calls.items():
            self.calls[kind] = self.calls.get(kind, 0) + n
        self.virtual_seconds += virtual

    def lines(self) -> list[str]:
        wall = time.monotonic() - self.started
        rate = f"{self.sequences / wall:.0f} sequences/s, {self.steps / wall:.0f} steps/s" \
            if wall > 0 else ""
        out = [f"sequences run: {self.sequences}, steps: {self.steps}, distinct interleavings: "
               f"{len(self.interleavings)}",
               f"wall time {wall:.1f} s ({rate}); virtual time simulated: "
               f"{self.virtual_seconds / 3600:.1f} h",
               f"daemon SIGKILLs: {self.crashes} ({self.journal_crashes} between the journal's "
               f"write and rename), clean stops: {self.stops}, lost buses: {self.lost_buses}",
               "wpa_supplicant calls by outcome: " + ", ".join(
                   f"{k} {v}" for k, v in sorted(self.calls.items())),
               "steps by kind: " + ", ".join(f"{k} {v}" for k, v in sorted(self.kinds.items()))]
        if self.first_failure_at is not None:
            out.append(f"first failing sequence: number {self.first_failure_at}")
        return out


STATS = Stats()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if STATS.sequences:
        terminalreporter.write_sep("=", "model rung (tests/model)")
        for line in STATS.lines():
            terminalreporter.write_line(line)


def _to_json(stats: Stats) -> dict[str, Any]:
    return {"sequences": stats.sequences, "steps": stats.steps,
            "virtual_seconds": stats.virtual_seconds,
            "interleavings": sorted(x.hex() for x in stats.interleavings),
            "kinds": stats.kinds, "calls": stats.calls, "crashes": stats.crashes,
            "journal_crashes": stats.journal_crashes, "stops": stats.stops,
            "lost_buses": stats.lost_buses, "first_failure_at": stats.first_failure_at}


def merged(parts: list[dict[str, Any]], started: float) -> Stats:
    """One Stats of several workers' (tests/model/parallel.py); the wall time from `started`."""
    total = Stats(started=started)
    for p in parts:
        total.sequences += p["sequences"]
        total.steps += p["steps"]
        total.virtual_seconds += p["virtual_seconds"]
        total.interleavings.update(bytes.fromhex(x) for x in p["interleavings"])
        for mine, theirs in ((total.kinds, p["kinds"]), (total.calls, p["calls"])):
            for k, v in theirs.items():
                mine[k] = mine.get(k, 0) + v
        total.crashes += p["crashes"]
        total.journal_crashes += p["journal_crashes"]
        total.stops += p["stops"]
        total.lost_buses += p["lost_buses"]
    return total


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    """A worker of tests/model/parallel.py hands its figures to the parent in a file."""
    path = os.environ.get("SCANGUARD_MODEL_STATS")
    if path:
        import json
        with open(path, "w", encoding="utf-8") as f:
            json.dump(_to_json(STATS), f, allow_nan=False)
