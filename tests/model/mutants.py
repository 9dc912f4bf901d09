"""Do the model rungs have teeth?  Break the daemon on purpose and see which rung notices.

`make model-mutants` (or `python3 -m tests.model.mutants [--depth K] [--from BOUND] [NAME ...]`)
copies nm_scanguard/ and tests/ (model, unit) into a temporary directory, makes one named edit
to the copy -- never to the tree -- and runs there the systematic mode (tests/model/explore.py,
within make model-exhaustive's bound unless --from says otherwise: depth 1 from each of its
situations, then depth 2 from those it takes that deep, until a sequence fails) and the plain
tests that `make test` also runs (the daemon-logic unit tests and the model rung's regression
tests: PLAIN).  It prints one line per variant: the depth at which the systematic mode caught
it (and seconds), or NOT caught, and whether the plain tests fail on it; then
`mutants caught: X of Y` (X: caught by the systematic mode alone), then how many the plain
tests add.  The goal is every variant caught by the systematic mode alone; one that only the
plain tests catch is a gap in the bound to close.  The run fails if a variant is caught by
neither.  `--sampled N` also runs the sampled rung (N sequences) on each.

A variant is *equivalent* when no sequence a faithful world can produce tells it from the code
(the code guards against an order the real peers never give; the reason is given with it and
in docs/testing.md).  Such a variant is not counted in Y and not run against the systematic
mode; the plain tests, which drive the table directly, must still catch it, else the run fails.

Each edit names the text it replaces; if that text is no longer in the code (the code moved on),
the variant says so and the run fails: update the edit, do not drop it.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.model.explore import describe, parse_plan

REPO = Path(__file__).resolve().parents[2]
# Unit tests of the daemon's logic that run from a copy (the others read the tree's docs).
PLAIN = ("tests/unit/daemon/bgscan/test_suspension.py", "tests/unit/daemon/bgscan/test_ledger.py",
         "tests/unit/daemon/bgscan/test_suspension_table.py", "tests/unit/daemon/bgscan/test_journal.py",
         "tests/unit/daemon/guard/test_guard.py", "tests/unit/daemon/test_failures_show.py",
         "tests/unit/daemon/api/test_holds.py", "tests/unit/daemon/guard/test_policy.py",
         "tests/unit/daemon/guard/test_abort.py", "tests/unit/daemon/guard/test_roaming.py",
         "tests/unit/daemon/guard/test_sampling.py", "tests/model/test_model_regressions.py")


@dataclass(frozen=True)
class Mutant:
    name: str
    what: str  # the defect, as a reviewer would name it
    file: str
    old: str
    new: str
    # Why no sequence a faithful world can produce tells this variant from the code (the code
    # guards against an order the real peers never give): not counted in Y, not run against
    # the systematic mode, and the plain tests, which drive the table directly, must catch it.
    equivalent: str = ""


MUTANTS = (
    # The suspension table (nm_scanguard/daemon/bgscan/suspension_table.py), by state, and its driver.
    Mutant("ask-forgets-leftover", "READING: a suspend asked on a leftover entry drops it before "
           "reading (its \"\" is then found and called someone else's)",
           "nm_scanguard/daemon/bgscan/suspension_table.py",
           "                           origin=k, op=op)",
           "                           origin=k, op=op, saved=None)"),
    Mutant("no-journal-before-set", "SETTING: no journal entry while the Set of \"\" is on its way",
           "nm_scanguard/daemon/bgscan/suspension_table.py",
           "    return s is not None and s.saved is not None\n",
           "    return s is not None and s.saved is not None and s.kind is not Kind.SETTING\n"),
    Mutant("trust-timed-out-set", "SETTING: an unanswered Set taken for not applied, unread",
           "nm_scanguard/daemon/bgscan/suspension.py",
           "            if not is_uncertain(e):\n                self._go(net, Ev.SET_NOT_APPLIED, op=op)",
           "            if True:\n                self._go(net, Ev.SET_NOT_APPLIED, op=op)"),
    Mutant("removal-forgets-pending", "SETTING: a NetworkRemoved ends a suspend under way",
           "nm_scanguard/daemon/bgscan/suspension_table.py",
           "        case Ev.GONE, Kind.SUSPENDED | Kind.IN_DOUBT | Kind.LEFTOVER:",
           "        case Ev.GONE, Kind.SUSPENDED | Kind.IN_DOUBT | Kind.LEFTOVER | Kind.SETTING:"),
    Mutant("restart-drops-setting", "SETTING: a wpa_supplicant restart drops the entry of a Set "
           "still on its way (it may reach the new process)",
           "nm_scanguard/daemon/bgscan/suspension_table.py",
           "        case Ev.RESTARTED, Kind.READING | Kind.SETTING | Kind.PUTTING_BACK:",
           "        case Ev.RESTARTED, Kind.READING | Kind.PUTTING_BACK:"),
    Mutant("generation-unchecked", "PUTTING_BACK: a removal while the put-back was on its way is "
           "not noticed (the failed put-back counts as suspended on the removed object)",
           "nm_scanguard/daemon/bgscan/suspension_table.py",
           "        case Ev.FAILED, Kind.PUTTING_BACK if generation == s.generation:",
           "        case Ev.FAILED, Kind.PUTTING_BACK:"),
    Mutant("restart-keeps-suspension", "SUSPENDED: a wpa_supplicant restart leaves the guard "
           "thinking it suspended",
           "nm_scanguard/daemon/bgscan/suspension_table.py",
           "        case Ev.RESTARTED, _:\n            return None",
           "        case Ev.RESTARTED, _:\n            return s"),
    Mutant("suspend-across-restart-kept", "IN_DOUBT: a suspend that spans a wpa_supplicant "
           "restart counts as a sure suspension of the new process's network",
           "nm_scanguard/daemon/bgscan/suspension_table.py",
           "        case Ev.SET_APPLIED, Kind.SETTING:\n"
           "            return s._replace(kind=Kind.IN_DOUBT if s.restarted else Kind.SUSPENDED,",
           "        case Ev.SET_APPLIED, Kind.SETTING:\n"
           "            return s._replace(kind=Kind.SUSPENDED,"),
    Mutant("unknown-restore-trusted", "IN_DOUBT: a restore unanswered and unreadable leaves the "
           "suspension sure (the guard stays engaged on a bgscan that may be back on)",
           "nm_scanguard/daemon/bgscan/suspension_table.py",
           "        case Ev.UNKNOWN, Kind.RESTORING:\n            return doubted(back(s, generation))",
           "        case Ev.UNKNOWN, Kind.RESTORING:\n            return back(s, generation)"),
    Mutant("recheck-failure-forgets", "IN_DOUBT: a recheck whose read fails drops the entry",
           "nm_scanguard/daemon/bgscan/suspension_table.py",
           "        case Ev.FAILED, Kind.IN_DOUBT:\n            return s",
           "        case Ev.FAILED, Kind.IN_DOUBT:\n            return None"),
    Mutant("restore-over-others", "RESTORING: restore over a value that is no longer ours",
           "nm_scanguard/daemon/bgscan/suspension.py",
           "        if self._go(net, read(current), op=op) is None:",
           "        if self._go(net, read(\"\" if current is not None else current), op=op) is None:"),
    Mutant("restore-trusts-no-answer", "RESTORING: an unanswered restoring Set is taken for "
           "landed, unread",
           "nm_scanguard/daemon/bgscan/suspension.py",
           "            back = await read_back(sup, net)\n",
           "            back = \"restored\"\n"),
    Mutant("restore-cancel-forgets", "RESTORING: a restore cancelled on its way drops the entry",
           "nm_scanguard/daemon/bgscan/suspension_table.py",
           "        case Ev.CANCELLED, Kind.RESTORING:\n            return doubted(back(s, generation))",
           "        case Ev.CANCELLED, Kind.RESTORING:\n            return None"),
    Mutant("cancelled-suspend-unsettled", "LEFT_BEHIND: a removal after a cancelled suspend drops "
           "the entry its Set may still need",
           "nm_scanguard/daemon/bgscan/suspension_table.py",
           "        case Ev.GONE, Kind.SUSPENDED | Kind.IN_DOUBT | Kind.LEFTOVER:",
           "        case Ev.GONE, Kind.SUSPENDED | Kind.IN_DOUBT | Kind.LEFTOVER | Kind.LEFT_BEHIND:"),
    Mutant("cancel-forgets-set", "LEFT_BEHIND: a suspend cancelled with its Set on the way "
           "drops the entry",
           "nm_scanguard/daemon/bgscan/suspension_table.py",
           "            return s._replace(kind=Kind.LEFT_BEHIND, restarted=False)",
           "            return None"),
    Mutant("failed-adopt-forgets-leftover", "LEFTOVER: a suspend of a leftover network that "
           "cannot read it drops the entry",
           "nm_scanguard/daemon/bgscan/suspension_table.py",
           "        return s._replace(kind=s.origin, origin=None) if s.origin is not None else None",
           "        return None"),
    Mutant("take-over-forgets-left-behind", "READING: a failed take-over of a Set left behind "
           "leaves an entry a removal drops",
           "nm_scanguard/daemon/bgscan/suspension_table.py",
           "        return s._replace(kind=s.origin, origin=None) if s.origin is not None else None",
           "        return s._replace(kind=Kind.LEFTOVER, origin=None) if s.origin is not None "
           "else None",
           equivalent="a take-over asks only after a CurrentNetwork read answered, sent on "
           "the daemon's one connection after the Set left behind, and wpa_supplicant handles "
           "a connection's calls in order: that Set has landed (or died with the process) "
           "before the take-over begins, and from there LEFT_BEHIND and LEFTOVER end alike"),
    Mutant("assumed-set-trusted", "IN_DOUBT: a Set unanswered and unreadable counts as a sure "
           "suspension",
           "nm_scanguard/daemon/bgscan/suspension_table.py",
           "        case Ev.SET_ASSUMED, Kind.SETTING:\n            return s._replace(kind=Kind.IN_DOUBT,",
           "        case Ev.SET_ASSUMED, Kind.SETTING:\n            return s._replace(kind=Kind.SUSPENDED,"),
    Mutant("stale-answer-applied", "an answer to a call sequence that ended is applied to the "
           "state that followed",
           "nm_scanguard/daemon/bgscan/suspension_table.py",
           "        if op is not None and (before is None or before.op != op):\n            return None",
           "        if False:\n            return None",
           equivalent="a call ends once for the daemon (a late answer is dropped by the bus), "
           "and the next sequence on its path begins after that: one guard's sequences take "
           "turns, and a path passes to the other interface only through a wpa_supplicant "
           "restart, whose NoReply to every pending call comes as the old process exits"),
    Mutant("stopped-guard-keeps-suspension", "SUSPENDED: what a stopped guard could not restore "
           "stays its, and no replay restores it",
           "nm_scanguard/daemon/guard/guard.py",
           "                    self._bgscan.abandon(self.ifname)\n",
           "                    pass\n"),
    # The rest of the daemon.
    Mutant("holder-left-keeps-holds", "forget a hold's release path (holder leaves the bus)",
           "nm_scanguard/daemon/api/holders.py",
           "                for hold in self.holds.caller_left(name):",
           "                for hold in []:"),
    Mutant("no-restore-on-stop", "skip the restore on stop",
           "nm_scanguard/daemon/daemon.py",
           "        restore = self._peers is not None and self._peers.bus.connected",
           "        restore = False"),
    Mutant("no-journal-replay", "a new start does not replay the crash journal",
           "nm_scanguard/daemon/daemon.py",
           "        await self.sync()\n        self._retry_journal()\n",
           "        await self.sync()\n"),
    Mutant("replay-gives-up", "a journal entry that could not be restored is never retried",
           "nm_scanguard/daemon/daemon.py",
           "                if not await self.replay():\n                    if self._replay_again:",
           "                await self.replay()\n                if True:\n"
           "                    if self._replay_again:"),
    Mutant("retry-misses-late-entry", "an entry left to the journal's retry while its pass runs "
           "waits for the next start",
           "nm_scanguard/daemon/daemon.py",
           "            self._replay_again = True\n",
           "            pass\n"),
    Mutant("stop-leaves-leftover", "a clean stop restores only what the guards hold, not what "
           "was left to the journal's retry",
           "nm_scanguard/daemon/daemon.py",
           "            await self.replay()\n        self.counters.close()",
           "            pass\n        self.counters.close()"),
    Mutant("stale-interface-path", "keep calling an interface path that is gone",
           "nm_scanguard/daemon/guard/roaming.py",
           "        if isinstance(e, ObjectGone):\n            self.path = None",
           "        if False:\n            self.path = None"),
    # Not a variant: a guard's stop that skips restoring what a cancelled suspend left behind
    # (Bgscan.replay(ifname=...)). Its abandon leaves that entry to the journal's retry, which the
    # daemon runs after a guard's stop and again at its own stop, so no sequence can tell it
    # from the code (docs/testing.md).
    Mutant("replaced-interface-kept", "a suspension under an interface object NetworkManager "
           "re-created is never let go",
           "nm_scanguard/daemon/guard/guard.py",
           "                await self._release_if_interface_replaced()\n",
           ""),
    Mutant("abort-own-roaming-scan", "abort the guard's own roaming scan when guarding resumes",
           "nm_scanguard/daemon/guard/scans.py",
           "self._aborting or self.stopping or self._roaming.is_ours():",
           "self._aborting or self.stopping:"),
    Mutant("pending-hold-unwatched", "a Hold still being authorised does not keep its caller "
           "watched (a release of another hold stops watching)",
           "nm_scanguard/daemon/api/holds.py",
           " | {r.caller for r in self._pending}",
           ""),
)

# The systematic mode's bound: make model-exhaustive's (tests/model/explore.py, EXHAUSTIVE).
SITUATIONS = "exhaustive"
FIRST = re.compile(r"first failing sequence: number (\d+)")


def apply(root: Path, m: Mutant) -> None:
    path = root / m.file
    text = path.read_text(encoding="utf-8")
    count = text.count(m.old)
    if count != 1:
        raise SystemExit(f"{m.name}: the text it replaces is in {m.file} {count} times, not once; "
                         "the code moved on: update the edit in tests/model/mutants.py")
    path.write_text(text.replace(m.old, m.new), encoding="utf-8")


def _copy(root: Path) -> None:
    shutil.copytree(REPO / "nm_scanguard", root / "nm_scanguard",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (root / "tests").mkdir()
    shutil.copy(REPO / "tests" / "__init__.py", root / "tests" / "__init__.py")
    # the wpa_supplicant rules the model's simulated supplicant shares with the D-Bus mock
    shutil.copy(REPO / "tests" / "wpa_supplicant_rules.py", root / "tests" / "wpa_supplicant_rules.py")
    shutil.copy(REPO / "setup.cfg", root / "setup.cfg")  # pytest's settings (asyncio)
    for rung in ("model", "unit"):
        shutil.copytree(REPO / "tests" / rung, root / "tests" / rung,
                        ignore=shutil.ignore_patterns("__pycache__"))


def _plain(root: Path, env: dict[str, str], python: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([python, "-m", "pytest", "-p", "no:cacheprovider", "-x", "-q", *PLAIN],
                          cwd=root, env=env, capture_output=True, text=True)


def baseline(python: str) -> None:
    """The plain tests pass on an unbroken copy, every one of them run (else a failure on a
    variant would say nothing)."""
    with tempfile.TemporaryDirectory(prefix="scanguard-mutant-baseline-") as tmp:
        _copy(Path(tmp))
        out = _plain(Path(tmp), dict(os.environ, PYTHONDONTWRITEBYTECODE="1"), python)
    if out.returncode != 0 or "skipped" in out.stdout or " passed" not in out.stdout:
        raise SystemExit("the plain tests do not pass, all run, on an unbroken copy:\n"
                         f"{(out.stdout + out.stderr)[-3000:]}")


def _systematic(root: Path, env: dict[str, str], python: str, plan: dict[str, int],
                jobs: int) -> tuple[int | None, float, str]:
    """The shallowest depth at which a sequence fails within `plan` (situation -> K), the
    seconds it took, why: depth 1 from every situation of the plan, then depth 2 from those
    the plan takes that deep, and so on."""
    start = time.monotonic()
    for d in range(1, max(plan.values()) + 1):
        spec = ",".join(f"{s}:{d}" for s, k in plan.items() if k >= d)
        out = subprocess.run([python, "-m", "tests.model.explore", "--jobs", str(jobs),
                              "--stop-at-first", "--close", "--from", spec],
                             cwd=root, env=env,
                             capture_output=True, text=True)
        if out.returncode != 0:
            text = out.stdout + out.stderr
            lines = text.splitlines()
            at = next((i for i, ln in enumerate(lines) if ln.startswith("FAILED:")), None)
            if at is None:  # the edited copy does not run at all: the edit is wrong, not caught
                raise SystemExit(f"the systematic mode did not run on this variant:\n{text[-2000:]}")
            why = " ".join(x.strip() for x in lines[at:at + 2])
            return d, time.monotonic() - start, why[:200]
    return None, time.monotonic() - start, ""


def _sampled(root: Path, env: dict[str, str], python: str, sequences: int) -> int | None:
    out = subprocess.run([python, "-m", "pytest", "-p", "no:cacheprovider", "-x", "-q",
                          "tests/model/test_model.py"], cwd=root,
                         env=dict(env, SCANGUARD_MODEL_SEQUENCES=str(sequences)),
                         capture_output=True, text=True)
    first = FIRST.search(out.stdout + out.stderr)
    return int(first.group(1)) if first and out.returncode != 0 else None


@dataclass
class Result:
    depth: int | None
    seconds: float
    why: str
    plain_fails: bool
    sampled: int | None


def run(m: Mutant, plan: dict[str, int], jobs: int, sampled: int, python: str) -> Result:
    with tempfile.TemporaryDirectory(prefix=f"scanguard-mutant-{m.name}-") as tmp:
        root = Path(tmp)
        _copy(root)
        apply(root, m)
        env = dict(os.environ, SCANGUARD_MODEL_SHRINK="0", PYTHONDONTWRITEBYTECODE="1")
        found, took, why = (None, 0.0, "") if m.equivalent else \
            _systematic(root, env, python, plan, jobs)
        plain = _plain(root, env, python)
        caught_sampled = _sampled(root, env, python, sampled) if sampled else None
    return Result(found, took, why, plain.returncode != 0, caught_sampled)


def main() -> int:
    p = argparse.ArgumentParser(prog=f"python3 -m {__spec__.name}" if __spec__ else None,
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--depth", type=int, default=None,
                   help="at most this many events from any situation (default: as --from says)")
    p.add_argument("--jobs", type=int, default=min(os.cpu_count() or 1, 4),
                   help="worker processes of the systematic mode (default: the cores, at most 4)")
    p.add_argument("--from", dest="situations", default=SITUATIONS, metavar="SITUATIONS",
                   help="the systematic mode's bound, as tests.model.explore's --from takes it "
                        "(default %(default)s: make model-exhaustive's)")
    p.add_argument("--sampled", type=int, default=0, metavar="N",
                   help="also run N sampled sequences on each variant (default: none)")
    p.add_argument("names", nargs="*", help="only these variants (default: all)")
    args = p.parse_args()
    if args.depth is not None and args.depth < 1:
        p.error("--depth must be at least 1")
    try:
        plan = parse_plan(args.situations, 2)
    except ValueError as e:
        p.error(f"--from: {e}")
    if args.depth is not None:
        plan = {s: min(k, args.depth) for s, k in plan.items()}
    chosen = [m for m in MUTANTS if not args.names or m.name in args.names]
    unknown = set(args.names) - {m.name for m in MUTANTS}
    if unknown:
        p.error(f"no such variant: {', '.join(sorted(unknown))} "
                f"(variants: {', '.join(m.name for m in MUTANTS)})")
    baseline(sys.executable)
    counted = [m for m in chosen if not m.equivalent]
    caught = alone = 0
    equivalent_held: list[str] = []
    w = max(len(m.name) for m in chosen)
    print(f"systematic mode's bound: {describe(plan)}", flush=True)
    print(f"{'variant':<{w}} {'systematic':>12} {'seconds':>8} {'plain':>5}"
          f"{'  sampled' if args.sampled else ''}  defect / first violation", flush=True)
    for m in chosen:
        r = run(m, plan, args.jobs, args.sampled, sys.executable)
        if m.equivalent:
            if r.plain_fails:
                equivalent_held.append(m.name)
            where = "equivalent"
        else:
            caught += r.depth is not None or r.plain_fails
            alone += r.depth is not None
            where = f"depth {r.depth}" if r.depth is not None else "NOT caught"
        sampled = "" if not args.sampled else (
            f"  {r.sampled:>7}" if r.sampled is not None else "  missed ")
        print(f"{m.name:<{w}} {where:>12} {r.seconds:8.1f} {'fail' if r.plain_fails else 'PASS':>5}"
              f"{sampled}  {m.what}{': ' + r.why if r.why else ''}"
              f"{' (equivalent: ' + m.equivalent + ')' if m.equivalent else ''}", flush=True)
    equivalents = [m.name for m in chosen if m.equivalent]
    print(f"mutants caught: {alone} of {len(counted)} by the systematic mode alone "
          f"({describe(plan)}); {caught} of {len(counted)} with the plain tests "
          f"({', '.join(PLAIN)})")
    if equivalents:
        print(f"equivalent, not counted: {len(equivalents)} ({', '.join(equivalents)}: no "
              f"sequence a faithful world can produce tells them from the code); the plain "
              f"tests catch {len(equivalent_held)} of them")
    return 0 if caught == len(counted) and len(equivalent_held) == len(equivalents) else 1


if __name__ == "__main__":
    sys.exit(main())
