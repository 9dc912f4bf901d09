"""The model rung on every core: `python3 -m tests.model.parallel [--jobs N] [--sequences N]
[-- PYTEST_ARGS]`.

Hypothesis runs one sequence after another in one process, so the rung alone keeps one core
busy.  This starts N workers (default: the machine's cores, at most 4; `SCANGUARD_MODEL_JOBS`),
each a pytest process with its share of the sequences (`SCANGUARD_MODEL_SEQUENCES`, default
2000, split evenly) and its own random seed; the first also runs the rung's regression tests.
It prints each worker's output when it ends, then the rung's figures over all of them in the
same lines a single process prints (`sequences run: N, steps: M, distinct interleavings: K`),
and exits non-zero if any worker failed.
"""

from __future__ import annotations

import argparse
import json
import os
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
    p.add_argument("--only-machine", action="store_true",
                   help="leave the regression tests out (fault-long)")
    p.add_argument("pytest_args", nargs="*", help="more arguments for each pytest, after --")
    args = p.parse_args(argv)
    jobs = max(1, min(args.jobs, args.sequences))
    started = time.monotonic()
    print(f"model rung: {args.sequences} sequences in {jobs} worker process(es)", flush=True)
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
                   *args.pytest_args, *paths]
            workers.append((i, share, stats, subprocess.Popen(
                cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                text=True)))
        failed = 0
        parts = []
        for i, share, stats, proc in workers:
            out, _ = proc.communicate()
            print(f"---- worker {i}: {share} sequences, exit {proc.returncode} ----")
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
