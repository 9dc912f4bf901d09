"""Do the model rungs have teeth?  Break the daemon on purpose and see which rung notices.

`make fault-mutants` (or `python3 -m tests.model.mutants [--depth K] [NAME ...]`) copies
nm_scanguard/ and tests/ (model, unit) into a temporary directory, makes one named edit to the
copy -- never to the tree -- and runs there the systematic mode (tests/model/explore.py: every
sequence of at most K events from each of its starting situations, first at depth 1, then deeper
up to K, until a sequence fails) and the plain tests that `make test` also runs (the
daemon-logic unit tests and the model rung's regression tests: PLAIN). It prints one line per
variant: the depth at which the systematic mode caught it (and seconds), or NOT caught, and
whether the plain tests fail on it; then `mutants caught: X of Y` (X: caught by the systematic
mode alone), then how many the plain tests add. The goal is every variant caught by the
systematic mode alone; one that only the plain tests catch is a gap in the bound to close. The
run fails if a variant is caught by neither. `--sampled N` also runs the sampled rung (N
sequences) on each, as before the systematic mode existed.

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

REPO = Path(__file__).resolve().parents[2]
# Unit tests of the daemon's logic that run from a copy (the others read the tree's docs).
PLAIN = ("tests/unit/daemon/test_suspension.py", "tests/unit/daemon/test_ledger.py", "tests/unit/daemon/test_suspension_table.py",
         "tests/unit/daemon/test_guard.py", "tests/unit/daemon/test_failures_show.py", "tests/unit/daemon/test_journal.py",
         "tests/unit/daemon/test_holds.py", "tests/unit/daemon/test_policy.py",
         "tests/unit/daemon/test_abort.py", "tests/unit/daemon/test_roaming.py",
         "tests/unit/daemon/test_sampling.py", "tests/model/test_regressions.py")


@dataclass(frozen=True)
class Mutant:
    name: str
    what: str  # the defect, as a reviewer would name it
    file: str
    old: str
    new: str


MUTANTS = (
    # The suspension table (nm_scanguard/daemon/suspension_table.py), by state, and its driver.
    Mutant("ask-forgets-leftover", "READING: a suspend asked on a leftover entry drops it before "
           "reading (its \"\" is then found and called someone else's)",
           "nm_scanguard/daemon/suspension_table.py",
           "                           origin=k, op=op)",
           "                           origin=k, op=op, saved=None)"),
    Mutant("no-journal-before-set", "SETTING: no journal entry while the Set of \"\" is on its way",
           "nm_scanguard/daemon/suspension_table.py",
           "    return s is not None and s.saved is not None\n",
           "    return s is not None and s.saved is not None and s.kind is not Kind.SETTING\n"),
    Mutant("trust-timed-out-set", "SETTING: an unanswered Set taken for not applied, unread",
           "nm_scanguard/daemon/suspension.py",
           "            if not is_uncertain(e):\n                self._go(net, Ev.SET_NOT_APPLIED, op=op)",
           "            if True:\n                self._go(net, Ev.SET_NOT_APPLIED, op=op)"),
    Mutant("removal-forgets-pending", "SETTING: a NetworkRemoved ends a suspend under way",
           "nm_scanguard/daemon/suspension_table.py",
           "        case Ev.GONE, Kind.SUSPENDED | Kind.IN_DOUBT | Kind.LEFTOVER:",
           "        case Ev.GONE, Kind.SUSPENDED | Kind.IN_DOUBT | Kind.LEFTOVER | Kind.SETTING:"),
    Mutant("restart-drops-setting", "SETTING: a wpa_supplicant restart drops the entry of a Set "
           "still on its way (it may reach the new process)",
           "nm_scanguard/daemon/suspension_table.py",
           "        case Ev.RESTARTED, Kind.READING | Kind.SETTING | Kind.PUTTING_BACK:",
           "        case Ev.RESTARTED, Kind.READING | Kind.PUTTING_BACK:"),
    Mutant("generation-unchecked", "PUTTING_BACK: a removal while the put-back was on its way is "
           "not noticed (the failed put-back counts as suspended on the removed object)",
           "nm_scanguard/daemon/suspension_table.py",
           "        case Ev.FAILED, Kind.PUTTING_BACK if generation == s.generation:",
           "        case Ev.FAILED, Kind.PUTTING_BACK:"),
    Mutant("restart-keeps-suspension", "SUSPENDED: a wpa_supplicant restart leaves the guard "
           "thinking it suspended",
           "nm_scanguard/daemon/suspension_table.py",
           "        case Ev.RESTARTED, _:\n            return None",
           "        case Ev.RESTARTED, _:\n            return s"),
    Mutant("suspend-across-restart-kept", "IN_DOUBT: a suspend that spans a wpa_supplicant "
           "restart counts as a sure suspension of the new process's network",
           "nm_scanguard/daemon/suspension_table.py",
           "        case Ev.SET_APPLIED, Kind.SETTING:\n"
           "            return s._replace(kind=Kind.IN_DOUBT if s.restarted else Kind.SUSPENDED,",
           "        case Ev.SET_APPLIED, Kind.SETTING:\n"
           "            return s._replace(kind=Kind.SUSPENDED,"),
    Mutant("unknown-restore-trusted", "IN_DOUBT: a restore unanswered and unreadable leaves the "
           "suspension sure (the guard stays engaged on a bgscan that may be back on)",
           "nm_scanguard/daemon/suspension_table.py",
           "        case Ev.UNKNOWN, Kind.RESTORING:\n            return doubted(back(s, generation))",
           "        case Ev.UNKNOWN, Kind.RESTORING:\n            return back(s, generation)"),
    Mutant("recheck-failure-forgets", "IN_DOUBT: a recheck whose read fails drops the entry",
           "nm_scanguard/daemon/suspension_table.py",
           "        case Ev.FAILED, Kind.IN_DOUBT:\n            return s",
           "        case Ev.FAILED, Kind.IN_DOUBT:\n            return None"),
    Mutant("restore-over-others", "RESTORING: restore over a value that is no longer ours",
           "nm_scanguard/daemon/suspension.py",
           "        if self._go(net, Ev.READ_EMPTY if current == \"\" else Ev.READ_VALUE, op=op) is None:",
           "        if self._go(net, Ev.READ_EMPTY if current is not None else Ev.READ_VALUE, op=op) "
           "is None:"),
    Mutant("restore-trusts-no-answer", "RESTORING: an unanswered restoring Set is taken for "
           "landed, unread",
           "nm_scanguard/daemon/suspension.py",
           "            landed = await restore_landed(self.supplicant, net, ifname, e)\n",
           "            landed = True\n"),
    Mutant("restore-cancel-forgets", "RESTORING: a restore cancelled on its way drops the entry",
           "nm_scanguard/daemon/suspension_table.py",
           "        case Ev.CANCELLED, Kind.RESTORING:\n            return doubted(back(s, generation))",
           "        case Ev.CANCELLED, Kind.RESTORING:\n            return None"),
    Mutant("cancelled-suspend-unsettled", "LEFT_BEHIND: a removal after a cancelled suspend drops "
           "the entry its Set may still need",
           "nm_scanguard/daemon/suspension_table.py",
           "        case Ev.GONE, Kind.SUSPENDED | Kind.IN_DOUBT | Kind.LEFTOVER:",
           "        case Ev.GONE, Kind.SUSPENDED | Kind.IN_DOUBT | Kind.LEFTOVER | Kind.LEFT_BEHIND:"),
    Mutant("cancel-forgets-set", "LEFT_BEHIND: a suspend cancelled with its Set on the way "
           "drops the entry",
           "nm_scanguard/daemon/suspension_table.py",
           "            return s._replace(kind=Kind.LEFT_BEHIND, restarted=False)",
           "            return None"),
    Mutant("failed-adopt-forgets-leftover", "LEFTOVER: a suspend of a leftover network that "
           "cannot read it drops the entry",
           "nm_scanguard/daemon/suspension_table.py",
           "        return s._replace(kind=s.origin, origin=None) if s.origin is not None else None",
           "        return None"),
    Mutant("take-over-forgets-left-behind", "READING: a failed take-over of a Set left behind "
           "leaves an entry a removal drops",
           "nm_scanguard/daemon/suspension_table.py",
           "        return s._replace(kind=s.origin, origin=None) if s.origin is not None else None",
           "        return s._replace(kind=Kind.LEFTOVER, origin=None) if s.origin is not None "
           "else None"),
    Mutant("assumed-set-trusted", "IN_DOUBT: a Set unanswered and unreadable counts as a sure "
           "suspension",
           "nm_scanguard/daemon/suspension_table.py",
           "        case Ev.SET_ASSUMED, Kind.SETTING:\n            return s._replace(kind=Kind.IN_DOUBT,",
           "        case Ev.SET_ASSUMED, Kind.SETTING:\n            return s._replace(kind=Kind.SUSPENDED,"),
    Mutant("stale-answer-applied", "an answer to a call sequence that ended is applied to the "
           "state that followed",
           "nm_scanguard/daemon/ledger.py",
           "        if op is not None and (before is None or before.op != op):\n            return None",
           "        if False:\n            return None"),
    Mutant("stopped-guard-keeps-suspension", "SUSPENDED: what a stopped guard could not restore "
           "stays its, and no replay restores it",
           "nm_scanguard/daemon/guard.py",
           "                    self._suspender.ledger.abandon(self.ifname)\n",
           "                    pass\n"),
    # The rest of the daemon.
    Mutant("holder-left-keeps-holds", "forget a hold's release path (holder leaves the bus)",
           "nm_scanguard/daemon/api_holders.py",
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
           "nm_scanguard/daemon/guard.py",
           "        if isinstance(e, ObjectGone):\n            self.iface_path = None",
           "        if False:\n            self.iface_path = None"),
    # Not a variant: a guard's stop that skips restoring what a cancelled suspend left behind
    # (restore_left_behind). Its abandon leaves that entry to the journal's retry, which the
    # daemon runs after a guard's stop and again at its own stop, so no sequence can tell it
    # from the code (docs/testing.md).
    Mutant("replaced-interface-kept", "a suspension under an interface object NetworkManager "
           "re-created is never let go",
           "nm_scanguard/daemon/guard.py",
           "                await self._release_if_interface_replaced()\n",
           ""),
    Mutant("abort-own-roaming-scan", "abort the guard's own roaming scan when guarding resumes",
           "nm_scanguard/daemon/scans.py",
           "self._aborting or owner.stopping or self._roaming.is_ours():",
           "self._aborting or owner.stopping:"),
    Mutant("pending-hold-unwatched", "a Hold still being authorised does not keep its caller "
           "watched (a release of another hold stops watching)",
           "nm_scanguard/daemon/holds.py",
           " | {r.caller for r in self._pending}",
           ""),
)

# The systematic mode starts from every situation it knows (tests/model/explore.py).
SITUATIONS = "all"
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


def _systematic(root: Path, env: dict[str, str], python: str, depth: int,
                jobs: int, situations: str) -> tuple[int | None, float, str]:
    """The shallowest depth (1..depth) at which a sequence fails, the seconds it took, why."""
    start = time.monotonic()
    for d in range(1, depth + 1):
        out = subprocess.run([python, "-m", "tests.model.explore", "--depth", str(d), "--jobs",
                              str(jobs), "--stop-at-first", "--close", "--from", situations],
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


def run(m: Mutant, depth: int, jobs: int, sampled: int, python: str,
        situations: str) -> Result:
    with tempfile.TemporaryDirectory(prefix=f"scanguard-mutant-{m.name}-") as tmp:
        root = Path(tmp)
        _copy(root)
        apply(root, m)
        env = dict(os.environ, SCANGUARD_MODEL_SHRINK="0", PYTHONDONTWRITEBYTECODE="1")
        found, took, why = _systematic(root, env, python, depth, jobs, situations)
        plain = _plain(root, env, python)
        caught_sampled = _sampled(root, env, python, sampled) if sampled else None
    return Result(found, took, why, plain.returncode != 0, caught_sampled)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--depth", type=int, default=2,
                   help="the systematic mode's bound: events per sequence (default %(default)s)")
    p.add_argument("--jobs", type=int, default=min(os.cpu_count() or 1, 4),
                   help="worker processes of the systematic mode (default: the cores, at most 4)")
    p.add_argument("--from", dest="situations", default=SITUATIONS,
                   help="the situations the systematic mode starts from (default %(default)s)")
    p.add_argument("--sampled", type=int, default=0, metavar="N",
                   help="also run N sampled sequences on each variant (default: none)")
    p.add_argument("names", nargs="*", help="only these variants (default: all)")
    args = p.parse_args()
    chosen = [m for m in MUTANTS if not args.names or m.name in args.names]
    unknown = set(args.names) - {m.name for m in MUTANTS}
    if unknown:
        p.error(f"no such variant: {', '.join(sorted(unknown))} "
                f"(variants: {', '.join(m.name for m in MUTANTS)})")
    baseline(sys.executable)
    caught = alone = 0
    w = max(len(m.name) for m in chosen)
    print(f"{'variant':<{w}} {'systematic':>12} {'seconds':>8} {'plain':>5}"
          f"{'  sampled' if args.sampled else ''}  defect / first violation", flush=True)
    for m in chosen:
        r = run(m, args.depth, args.jobs, args.sampled, sys.executable, args.situations)
        caught += r.depth is not None or r.plain_fails
        alone += r.depth is not None
        where = f"depth {r.depth}" if r.depth is not None else "NOT caught"
        sampled = "" if not args.sampled else (
            f"  {r.sampled:>7}" if r.sampled is not None else "  missed ")
        print(f"{m.name:<{w}} {where:>12} {r.seconds:8.1f} {'fail' if r.plain_fails else 'PASS':>5}"
              f"{sampled}  {m.what}{': ' + r.why if r.why else ''}", flush=True)
    print(f"mutants caught: {alone} of {len(chosen)} by the systematic mode alone (depth "
          f"≤ {args.depth} from {args.situations}); {caught} of {len(chosen)} with the plain "
          f"tests ({', '.join(PLAIN)})")
    return 0 if caught == len(chosen) else 1


if __name__ == "__main__":
    sys.exit(main())
