"""The model rung on every core: `python3 -m tests.model.parallel [--jobs N] [--sequences N]
[-- PYTEST_ARGS]`.

Hypothesis runs one sequence after another in one process, so the rung alone keeps one core
busy.  This starts N workers (default: the machine's cores, at most 4; `SCANGUARD_MODEL_JOBS`),
each a pytest process with its share of the sequences (`SCANGUARD_MODEL_SEQUENCES`, default
2000, split evenly) and its own seed, SEED + its number; the first also runs the rung's
regression tests.  `--seed SEED` (`SCANGUARD_MODEL_SEED`) repeats a run's sequences exactly: the
peers, faults and clock are simulated, so the same seed on the same tree draws the same
sequences.  Without it SEED is drawn at random and printed first, so that any failure can be
run again.  `make test` passes a fixed seed (the Makefile's MODEL_SEED): what passed here passes
in CI; `make model` and `make model-long` draw a new one each time, to find what that
fixed set of sequences does not reach.
It prints each worker's output when it ends, then the rung's figures over all of them in the
same lines a single process prints (`sequences run: N, steps: M, distinct interleavings: K`),
and exits non-zero if any worker failed.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.model.conftest import merged

REPO = Path(__file__).resolve().parents[2]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--jobs", type=int,
                   default=int(os.environ.get("SCANGUARD_MODEL_JOBS") or min(os.cpu_count() or 1, 4)),
                   help="worker processes (default: the cores, at most 4)")
    p.add_argument("--sequences", type=int,
                   default=int(os.environ.get("SCANGUARD_MODEL_SEQUENCES") or 2000),
                   help="generated sequences in all (default 2000)")
    seed = os.environ.get("SCANGUARD_MODEL_SEED") or None
    p.add_argument("--seed", type=int, default=int(seed) if seed is not None else None,
                   help="the first worker's Hypothesis seed (the others get the next numbers); "
                        "default: drawn at random and printed")
    p.add_argument("--only-machine", action="store_true",
                   help="leave the regression tests out (model-long)")
    p.add_argument("pytest_args", nargs="*", help="more arguments for each pytest, after --")
    args = p.parse_args(argv)
    jobs = max(1, min(args.jobs, args.sequences))
    seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    started = time.monotonic()
    print(f"model rung: {args.sequences} sequences in {jobs} worker process(es), seed {seed} "
          f"({'given' if args.seed is not None else 'drawn'}; repeat with: python3 -m "
          f"tests.model.parallel --jobs {jobs} --sequences {args.sequences} --seed {seed}"
          f"{' --only-machine' if args.only_machine else ''})", flush=True)
    with tempfile.TemporaryDirectory(prefix="scanguard-model-") as tmp:
        workers = []
        for i in range(jobs):
            share = args.sequences // jobs + (1 if i < args.sequences % jobs else 0)
            stats = Path(tmp) / f"worker-{i}.json"
            paths = ["tests/model"] if i == 0 and not args.only_machine \
                else ["tests/model/test_model.py"]
            env = dict(os.environ, SCANGUARD_MODEL_SEQUENCES=str(share),
                       SCANGUARD_MODEL_STATS=str(stats))
            cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-s",
                   f"--hypothesis-seed={seed + i}", *args.pytest_args, *paths]
            workers.append((i, share, stats, subprocess.Popen(
                cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                text=True)))
        failed = 0
        parts = []
        for i, share, stats, proc in workers:
            out, _ = proc.communicate()
            print(f"---- worker {i}: {share} sequences, seed {seed + i}, exit {proc.returncode} ----")
            print(out, end="" if out.endswith("\n") else "\n", flush=True)
            failed += proc.returncode != 0
            if stats.exists():
                parts.append(json.loads(stats.read_text(encoding="utf-8")))
            else:
                failed += 1
                print(f"worker {i} wrote no figures ({stats})")
    total = merged(parts, started)
    print("=" * 30 + f" model rung, {jobs} workers " + "=" * 30)
    for line in total.lines():
        print(line)
    failures = [(i, p["first_failure_at"]) for i, p in enumerate(parts)
                if p["first_failure_at"] is not None]
    for i, n in failures:
        print(f"worker {i}: first failing sequence: number {n}")
    if failed:
        print(f"{failed} worker(s) failed: see their output above")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
