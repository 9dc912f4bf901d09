#!/usr/bin/python3
"""The lower test rungs (unit, D-Bus with each library, contract, fault) on Debian 13 "trixie".

Issue 10: the daemon must be tested on Debian 13 as well as Debian 12.  This machine runs Debian
12, so the rungs run in a trixie root tree built from Debian's archive with mmdebstrap, with
trixie's own python3 and libraries (dbus-fast 2.x really is used there, unlike on Debian 12) and
trixie's real wpa_supplicant for the contract tests.

    trixie.py root           build the root unless it is cached; print its path, size, build time
    trixie.py test           the root, then every rung in it, one at a time, with a summary
    trixie.py shell [CMD...] a command (default: sh) inside the root, the repository at /src
    trixie.py bench [ARGS]   tests/bench/bench_daemon.py inside the root (ARGS are its own, e.g.
                             --seconds 60 --against REV): the daemon's RSS, PSS, start-up time

The root is cached outside the checkout, in $TRIXIE_CACHE (default /var/cache/nm-scanguard), as
the directory trixie-<hash>, <hash> covering tests/debian_roots/trixie-root.sh (the builder),
tests/debian_roots/trixie-packages.txt (the list) and the mirror: change either and the next run builds
a new root and deletes the old ones.  A run never writes into the cached root (enter-root.sh puts a
throw-away overlay on it).  Needs root, unshare and overlayfs on the host; mmdebstrap to build.
"""

from __future__ import annotations

import argparse
import datetime
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Iterator, Sequence

from apt_sources import host_debian_mirror  # tests/debian_roots/apt_sources.py, beside this script

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
BUILDER = HERE / "trixie-root.sh"
PACKAGES = HERE / "trixie-packages.txt"
# The lab guest's root (tests/lab with SCANGUARD_LAB_RELEASE=trixie): a bigger tree, kernel
# included, built the same way and kept beside the other as trixie-lab-<hash>.
LAB_PACKAGES = HERE / "trixie-lab-packages.txt"
ENTER = HERE / "enter-root.sh"
DEFAULT_CACHE = "/var/cache/nm-scanguard"
# Only when neither TRIXIE_MIRROR nor the host's own apt sources name a Debian mirror (said on
# stderr): Debian's own redirector.
FALLBACK_MIRROR = "http://deb.debian.org/debian"

# The packages whose versions decide what the rungs prove; printed at the start of a test run.
KEY_PACKAGES = ("python3", "python3-dbus-fast", "python3-dbus-next", "python3-dbusmock",
                "python3-pytest", "python3-pytest-asyncio", "python3-pytest-xdist",
                "python3-hypothesis", "python3-gi", "gir1.2-nm-1.0", "python3-systemd",
                "wpasupplicant", "dbus-daemon", "systemd", "iproute2", "libnm0", "polkitd",
                "network-manager", "duktape", "lintian", "debhelper", "dh-python")
LIBRARIES = ("dbus_fast", "dbus_next")
# The library the daemon uses on Debian 13 (its package depends on python3-dbus-fast (>= 2)
# before python3-dbus-next): the D-Bus and fault rungs run with it alone here, while the host's
# pass runs them with dbus-next (Debian 12's choice) and the contract rung runs both libraries
# here.  Both libraries meet every test that way, and make test stays within its 40 minutes.
DEBIAN_13_LIBRARY = "dbus_fast"
DBUS_TESTS = ("tests/dbus", "tests/api", "tests/access")
UNIT_JOBS = os.environ.get("UNIT_JOBS") or "2"  # as the Makefile's: one per core
DBUS_JOBS = os.environ.get("DBUS_JOBS") or "3"  # pytest-xdist workers, as the Makefile's
# -rs prints every skip's reason.  pytest-asyncio 0.25 (trixie) warns on every run that
# asyncio_default_fixture_loop_scope is unset; "function" is what 0.20 (Debian 12) does, and every
# async fixture here is function-scoped, so setting it changes nothing but the noise.
PYTEST = ("python3", "-m", "pytest", "-p", "no:cacheprovider", "-rs",
          "-o", "asyncio_default_fixture_loop_scope=function")
# A skipped test is a failed step (a package missing from the root would otherwise go unseen),
# except for these reasons (pytest's skip reason, as printed by -rs), each with why it is fine.
EXPECTED_SKIPS = {
    "node is not installed":
        "node is a second, optional JavaScript engine for the polkit rule; polkitd's own engine, "
        "duktape (duk), runs it in the root",
}
# Passed from the host's environment into the root when set (tests/fault/conftest.py).
PASSED_VARIABLES = ("SCANGUARD_FAULT_EXAMPLES", "SCANGUARD_FAULT_SHRINK", "SCANGUARD_MODEL_SEQUENCES",
                    "SCANGUARD_MODEL_STEPS", "SCANGUARD_MODEL_SEED")
# Prints the library a run really uses; exits 3 if it is not the one asked for, because then the
# suite would silently test the other library twice.
SHOW_LIBRARY = """
import os, sys
import nm_scanguard.dbuslib as d
asked = os.environ["SCANGUARD_DBUS_LIB"]
print("    D-Bus library in use:", d.LIBRARY, "skipped:", d.SKIPPED, flush=True)
if d.LIBRARY != asked:
    sys.exit(f"asked for {asked} but nm_scanguard.dbuslib chose {d.LIBRARY}: {d.SKIPPED}. "
             "On Debian 13 both libraries must work; fix the library or the check in dbuslib.py")
"""


class Failure(Exception):
    """Something the run needs is missing or broken; the message says what to do."""


def log(message: str) -> None:
    print(message, flush=True)


def clock() -> str:
    return datetime.datetime.now().strftime("%H:%M:%S")


# --- the cached root --------------------------------------------------------------------------

@dataclass(frozen=True)
class Root:
    """Where the root for the current recipe lives, and its record (build time, size)."""

    cache: Path
    mirror: str
    kind: str = "trixie"          # "trixie" (the lower rungs) or "trixie-lab" (the lab guest)

    @property
    def packages(self) -> Path:
        return LAB_PACKAGES if self.kind == "trixie-lab" else PACKAGES

    @property
    def digest(self) -> str:
        h = hashlib.sha256()
        for part in (BUILDER.read_bytes(), self.packages.read_bytes(), self.mirror.encode()):
            h.update(len(part).to_bytes(8, "little") + part)
        return h.hexdigest()[:12]

    @property
    def path(self) -> Path:
        return self.cache / f"{self.kind}-{self.digest}"

    @property
    def record(self) -> Path:
        return self.cache / f"{self.kind}-{self.digest}.json"

    def ready(self) -> bool:
        return self.record.exists() and (self.path / "usr/bin/python3").exists()


def mirror_of_host() -> str:
    """The Debian mirror this host's apt uses; the fallback, said on stderr, if none is found."""
    mirror, files = host_debian_mirror()
    if mirror:
        return mirror
    print(f"trixie.py: no Debian mirror found in this host's apt sources "
          f"({', '.join(map(str, files)) or 'no sources files'}); using {FALLBACK_MIRROR}. "
          "Set TRIXIE_MIRROR to use another", file=sys.stderr, flush=True)
    return FALLBACK_MIRROR


def disk_usage(path: Path) -> str:
    out = subprocess.run(["du", "-sh", "--one-file-system", str(path)], capture_output=True,
                         text=True, check=False)
    return out.stdout.split()[0] if out.returncode == 0 and out.stdout else "?"


@contextmanager
def locked(cache: Path) -> Iterator[None]:
    """Hold the cache's lock: two runs (a CI run and a person) must not build into one place."""
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".trixie.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"==> waiting for another build in {cache} to finish (lock {lock.name})")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def build(root: Root) -> None:
    """Build the root with trixie-root.sh into a temporary name, then move it into place, so
    that a build cut short never looks like a cached root."""
    if shutil.which("mmdebstrap") is None:
        raise Failure("mmdebstrap is not installed: run `apt-get install -y mmdebstrap` "
                      "(or `make trixie-root`, which installs it)")
    partial = root.cache / f"{root.path.name}.partial"
    if partial.exists():
        log(f"    removing the remains of an interrupted build: {partial}")
        shutil.rmtree(partial)
    log(f"==> [{clock()}] building the {root.kind} root from {root.mirror} into {root.path}")
    start = time.monotonic()
    env = dict(os.environ, TRIXIE_MIRROR=root.mirror, PATH="/usr/sbin:/usr/bin:/sbin:/bin")
    result = subprocess.run([str(BUILDER), str(root.packages), str(partial)], env=env,
                            check=False)
    if result.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        raise Failure(f"building the trixie root failed (mmdebstrap exit {result.returncode}, "
                      f"output above); is {root.mirror} reachable and does it carry trixie? "
                      "Set TRIXIE_MIRROR to another Debian mirror if not")
    seconds = time.monotonic() - start
    partial.rename(root.path)
    size = disk_usage(root.path)
    root.record.write_text(json.dumps({
        "built": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "seconds": round(seconds, 1), "size": size, "mirror": root.mirror,
        "packages": package_list(root.packages)}, indent=1) + "\n")
    log(f"<== {root.kind} root built in {seconds:.0f} s, {size}: {root.path}")
    for old in sorted(root.cache.glob(f"{root.kind}-*")):
        if old.name.startswith(root.path.name) or not re.fullmatch(
                rf"{root.kind}-[0-9a-f]{{12}}(\.json|\.partial)?", old.name):
            continue
        log(f"    removing the root of an older recipe: {old}")
        if old.is_dir():
            shutil.rmtree(old)
        else:
            old.unlink()


def package_list(packages: Path = PACKAGES) -> list[str]:
    """The packages named in a package list (comments and blank lines dropped)."""
    names = (line.split("#", 1)[0].strip() for line in packages.read_text().splitlines())
    return [n for n in names if n]


def ensure_root(root: Root, rebuild: bool = False) -> Path:
    """The root's path, built first if the cache has none for the current recipe."""
    with locked(root.cache):
        if rebuild and root.path.exists():
            log(f"    --rebuild: removing {root.path}")
            root.record.unlink(missing_ok=True)
            shutil.rmtree(root.path)
        if root.ready():
            info = json.loads(root.record.read_text())
            log(f"==> [{clock()}] cached {root.kind} root {root.path}: {disk_usage(root.path)}, "
                f"built {info['built']} in {info['seconds']:.0f} s from {info['mirror']}")
        else:
            if root.path.exists():  # a directory without a record: not ours to trust
                log(f"    {root.path} has no build record; building it again")
                shutil.rmtree(root.path)
            build(root)
    return root.path


# --- running inside the root -------------------------------------------------------------------

def check_host() -> None:
    if os.geteuid() != 0:
        raise Failure("the trixie rungs need root (chroot, mounts, network namespaces): run as root")
    if shutil.which("unshare") is None:
        raise Failure("unshare is missing: apt-get install util-linux")
    if "overlay" not in Path("/proc/filesystems").read_text():
        raise Failure("the kernel has no overlayfs (modprobe overlay): the cached root is mounted "
                      "under a throw-away overlay so that no run changes it")
    for stale in Path("/tmp").glob("scanguard-root.*"):  # left by a run that was killed
        try:
            stale.rmdir()
        except OSError:
            pass


def inside(root: Path, command: Sequence[str]) -> list[str]:
    """The host command that runs *command* inside *root*, cwd the repository (/src)."""
    return ["unshare", "--mount", "--pid", "--fork", "--kill-child", "--propagation", "private",
            str(ENTER), str(root), str(REPO), *command]


@dataclass
class Step:
    name: str
    seconds: float = 0.0
    returncode: int = 0
    counts: str = ""
    notes: list[str] = field(default_factory=list)
    unexpected_skips: list[str] = field(default_factory=list)
    expected_skips: set[str] = field(default_factory=set)

    @property
    def passed(self) -> bool:
        return self.returncode == 0 and not self.unexpected_skips


# pytest's last line, -q or not: "12 passed, 1 skipped in 3.21s", "== 1 failed, 3 passed in 2s =="
_PYTEST_SUMMARY = re.compile(r"^=*\s*((?:\d+ [a-z]+(?:, )?)+) in [\d.]+s")
# -rs: "SKIPPED [2] tests/unit/test_x.py:24: node is not installed"
_PYTEST_SKIP = re.compile(r"^SKIPPED \[\d+\] (\S+): (.*)$")


def _pump(stream: IO[str], step: Step) -> None:
    for line in stream:
        sys.stdout.write(line)
        sys.stdout.flush()
        text = line.strip()
        match = _PYTEST_SUMMARY.match(text)
        if match:
            step.counts = (step.counts + "; " if step.counts else "") + match.group(1).rstrip(", ")
        skip = _PYTEST_SKIP.match(text)
        if skip and skip.group(2) in EXPECTED_SKIPS:
            step.expected_skips.add(skip.group(2))
        elif skip:
            step.unexpected_skips.append(f"{skip.group(1)}: {skip.group(2)}")


def run_step(step: Step, root: Path, commands: Sequence[Sequence[str]], timeout: float,
             run_deadline: float) -> Step:
    """Run *commands* inside *root* one after the other (stop at the first failure); print the
    step's time.  Past *timeout* seconds, or at *run_deadline* (monotonic), the step is killed
    and fails: a hung test must not hang CI for its 90 minutes."""
    log(f"==> [{clock()}] {step.name}")
    start = time.monotonic()
    deadline = min(start + timeout, run_deadline)
    timeout = deadline - start
    for command in commands:
        process = subprocess.Popen(inside(root, command), stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, errors="replace",
                                   start_new_session=True)
        assert process.stdout is not None
        reader = threading.Thread(target=_pump, args=(process.stdout, step), daemon=True)
        reader.start()
        try:
            step.returncode = process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            step.returncode = 124
            step.notes.append(f"killed after {timeout:.0f} s (TRIXIE_STEP_TIMEOUT or "
                              "TRIXIE_TOTAL_TIMEOUT reached)")
        reader.join(10)
        if step.returncode != 0:
            break
    step.seconds = time.monotonic() - start
    for reason in sorted(step.expected_skips):
        step.notes.append(f"expected skips ({reason}): {EXPECTED_SKIPS[reason]}")
    if step.unexpected_skips:
        step.notes.append("tests were skipped, so something they need is missing from the root "
                          "(add it to tests/debian_roots/trixie-packages.txt) or the test cannot run "
                          "on Debian 13: " + "; ".join(step.unexpected_skips))
    outcome = ("passed" if step.passed else
               f"FAILED (exit {step.returncode}{', unexpected skips' if step.unexpected_skips else ''})")
    extra = "".join(f"; {n}" for n in step.notes)
    log(f"<== {step.name}: {step.seconds:.0f} s, {outcome}{extra}")
    return step


def pytest(library: str | None, *args: str) -> list[str]:
    env = ["env", *(f"{v}={os.environ[v]}" for v in PASSED_VARIABLES if v in os.environ)]
    if library:
        env.append(f"SCANGUARD_DBUS_LIB={library}")
    return [*env, *PYTEST, *args]


def show_library(library: str) -> list[str]:
    return ["env", f"SCANGUARD_DBUS_LIB={library}", "python3", "-c", SHOW_LIBRARY]


def plan(step_timeout: float) -> list[tuple[str, list[list[str]], float]]:
    """The steps, in order: (name, commands, time limit); each name starts with its rung's number
    and name in docs/testing.md."""
    steps: list[tuple[str, list[list[str]], float]] = [
        ("versions inside the root",
         [["sh", "-c", "cat /etc/debian_version; uname -r; "
                       "dpkg-query -W -f='${Package} ${Version}\\n' " + " ".join(KEY_PACKAGES)]],
         60),
        ("rung 2 unit tests", [pytest(None, "-q", "-n", UNIT_JOBS, "tests/unit")], step_timeout),
    ]
    for lib in (DEBIAN_13_LIBRARY,):
        steps.append((f"rung 3 D-Bus tests {' '.join(DBUS_TESTS)} with {lib}",
                      [show_library(lib), pytest(lib, "-q", "-n", DBUS_JOBS, *DBUS_TESTS)],
                      step_timeout))
    for lib in LIBRARIES:
        steps.append((f"rung 6 contract tests against trixie's wpa_supplicant with {lib}",
                      [show_library(lib), pytest(lib, "-q", "tests/contract")], step_timeout))
    steps.append(("rung 7 package: build with trixie's debhelper; trixie's lintian; systemd 257's "
                  "systemd-analyze security",
                  [pytest(None, "-v", "tests/package")], step_timeout))
    if (REPO / "tests" / "fault").is_dir():
        for lib in (DEBIAN_13_LIBRARY,):
            examples = os.environ.get("SCANGUARD_FAULT_EXAMPLES") or "25 (the default)"
            steps.append((f"rung 4 fault injection with {lib}, {examples} sequences per test",
                          [show_library(lib), pytest(lib, "-q", "-s", "tests/fault")],
                          step_timeout))
    else:
        log("    tests/fault is not in this checkout: no fault-injection step")
    if (REPO / "tests" / "model").is_dir():
        sequences = os.environ.get("SCANGUARD_MODEL_SEQUENCES") or "2000 (the default)"
        # One worker process per core (tests/model/parallel.py), with the root's pytest options.
        env = pytest(None)[:-len(PYTEST)]
        steps.append((f"rung 5 model: {sequences} generated sequences against simulated peers",
                      [[*env, "python3", "-m", "tests.model.parallel", "--", *PYTEST[5:]]],
                      step_timeout))
    return steps


def test(root: Path, step_timeout: float, total_timeout: float, only: Sequence[str]) -> int:
    """Every rung in the root, one at a time (2 cores are shared); all of them run even after a
    failure, so that one run shows every difference; exit 1 if any failed.  Past *total_timeout*
    seconds the remaining steps fail without running."""
    started = time.monotonic()
    run_deadline = started + total_timeout
    results = []
    for name, commands, timeout in plan(step_timeout):
        if only and not any(word in name for word in only):
            continue
        if time.monotonic() >= run_deadline:
            step = Step(name, returncode=124)
            step.notes.append(f"not run: the whole run's limit of {total_timeout:.0f} s "
                              "(TRIXIE_TOTAL_TIMEOUT) was used up")
            log(f"<== {name}: FAILED, {step.notes[-1]}")
            results.append(step)
            continue
        results.append(run_step(Step(name), root, commands, timeout, run_deadline))
    total = time.monotonic() - started
    log(f"\n==> [{clock()}] trixie rungs, summary ({total:.0f} s in all)")
    for step in results:
        state = "ok    " if step.passed else "FAILED"
        log(f"    {state} {step.seconds:5.0f} s  {step.name}" + (f": {step.counts}" if step.counts else ""))
        for note in step.notes:
            log(f"                     {note}")
    failed = [s.name for s in results if not s.passed]
    if not results:
        raise Failure(f"no step matches --only {' '.join(only)}")
    if failed:
        log(f"<== {len(failed)} of {len(results)} trixie steps FAILED: " + "; ".join(failed))
        return 1
    log(f"<== all {len(results)} trixie steps passed")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: see the module's docstring."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=Path,
                        default=Path(os.environ.get("TRIXIE_CACHE") or DEFAULT_CACHE),
                        help="where roots are kept (env TRIXIE_CACHE; default %(default)s)")
    parser.add_argument("--mirror", default=os.environ.get("TRIXIE_MIRROR"),
                        help="Debian mirror (env TRIXIE_MIRROR; default: the one this host's "
                             "apt sources use, see tests/debian_roots/apt_sources.py)")
    parser.add_argument("--rebuild", action="store_true", help="build the root even if cached")
    sub = parser.add_subparsers(dest="verb", required=True)
    sub.add_parser("root", help="build the root unless cached; print where it is")
    sub.add_parser("lab-root", help="the same for the lab guest's root (tests/lab with "
                                    "SCANGUARD_LAB_RELEASE=trixie); its path is the last line")
    t = sub.add_parser("test", help="run the rungs inside the root")
    t.add_argument("--step-timeout", type=float,
                   default=float(os.environ.get("TRIXIE_STEP_TIMEOUT") or 420),
                   help="kill a step after this many seconds (env TRIXIE_STEP_TIMEOUT; "
                        "default %(default)s)")
    t.add_argument("--total-timeout", type=float,
                   default=float(os.environ.get("TRIXIE_TOTAL_TIMEOUT") or 1200),
                   help="stop the whole run after this many seconds (env TRIXIE_TOTAL_TIMEOUT; "
                        "default %(default)s)")
    t.add_argument("--only", nargs="*", default=[],
                   help="run only the steps whose name contains one of these words")
    s = sub.add_parser("shell", help="run a command inside the root (default: sh)")
    s.add_argument("command", nargs=argparse.REMAINDER)
    sub.add_parser("bench", help="the daemon's resource bench inside the root; the arguments "
                                 "that follow are the bench's (see tests/bench/bench_daemon.py)")
    args, bench_args = parser.parse_known_args(argv)
    if bench_args and args.verb != "bench":
        parser.error(f"unrecognized arguments: {' '.join(bench_args)}")

    try:
        check_host()
        kind = "trixie-lab" if args.verb == "lab-root" else "trixie"
        root = Root(args.cache.resolve(), args.mirror or mirror_of_host(), kind)
        path = ensure_root(root, args.rebuild)
        if args.verb in ("root", "lab-root"):
            print(path, flush=True)
            return 0
        if args.verb == "shell":
            return subprocess.run(inside(path, args.command or ["sh"]), check=False).returncode
        if args.verb == "bench":
            command = ["python3", "-m", "tests.bench.bench_daemon", *bench_args]
            return subprocess.run(inside(path, command), check=False).returncode
        return test(path, args.step_timeout, args.total_timeout, args.only)
    except Failure as e:
        print(f"trixie.py: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
