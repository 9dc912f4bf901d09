"""The package VM as a process of its own, started early in `make test` and awaited by the lab.

The package VM (package_vm.py) is the lab rung's longest path: it runs at SCHED_IDLE on the CPU
time the checks' VM leaves, and ended minutes after them.  `make test` starts it as this
process before its clean-install and Debian 13 steps, whose waits for the archive and the
buses leave CPU time too: there it builds the packages, boots and brings up the lab, then
waits.  Its checks begin only when the lab rung has begun (the file `go`, written by
`ExternalPackageVmJob`, which conftest.py chooses when SCANGUARD_PACKAGE_VM_DIR names the
folder): their timeouts were set for the CPU time the checks' VM leaves, not for what a
pytest-xdist run leaves.  The lab rung's tests then wait for the result.  Run alone,
test_package_vm.py and `make lab` start their own, as before.

    python3 -m tests.lab.package_vm_job start DIR --parent PID

starts it detached and returns: DIR holds `pid`, `log` (its progress lines), then `result.json`
or `error.txt`.  It stops its VM and exits when PID (the `make` that started it) is gone, so a
gate that fails before the lab rung leaves no VM behind; QEMU itself dies with this process
(PR_SET_PDEATHSIG, vm.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

from .vm import REPO

# How long the lab waits for a job that is still running when its checks are done; the job's
# own guest commands have their timeouts (package_vm.py), this only bounds a hung host process.
WAIT_LIMIT_S = 3600


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is gone for our purpose (its parent has not reaped it yet).
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][:1] != "Z"
    except (OSError, IndexError):
        return False


def start(folder: Path, parent: int) -> int:
    """Start the job detached (its own session), its output in folder/log; returns its pid."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    with open(folder / "log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.lab.package_vm_job", "run", str(folder),
             "--parent", str(parent)],
            cwd=REPO, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
    (folder / "pid").write_text(str(proc.pid))
    return proc.pid


def run(folder: Path, parent: int) -> int:
    """The job itself: build (or reuse the package rung's .deb), then the package VM."""
    from .package_vm import PackageVmJob, say

    (folder / "started").write_text(repr(time.time()))

    def watch_parent() -> None:
        while _alive(parent):
            time.sleep(2)
        say(f"the make that started this job (pid {parent}) is gone: stopping the package VM")
        os.kill(os.getpid(), signal.SIGTERM)

    def on_term(signum, frame):  # unwinds run_vm_check's `finally`, which stops the VM
        raise SystemExit(128 + signum)

    def wait_for_go() -> None:
        t = time.monotonic()
        say("VM ready: its checks wait for the lab rung")
        while not (folder / "go").exists():
            time.sleep(1)
        say(f"the lab rung has begun: checks start (waited {time.monotonic() - t:.0f} s)")

    signal.signal(signal.SIGTERM, on_term)
    # From here on every way out says why in error.txt, a SIGTERM from the watch included
    # (it may come before the work begins, when make ends at once).
    try:
        threading.Thread(target=watch_parent, name="watch-parent", daemon=True).start()
        job = PackageVmJob(folder / "work", before_checks=wait_for_go)
        (folder / "work").mkdir()
        job.run()  # in this thread: QEMU's PR_SET_PDEATHSIG follows the thread that started it
        text = json.dumps(job.outcome(), ensure_ascii=False, allow_nan=False, default=str)
    except BaseException as e:
        (folder / "error.txt").write_text(
            "".join(traceback.format_exception(type(e), e, e.__traceback__)))
        say(f"no result: {type(e).__name__}: {e} (error.txt)")
        return 1
    tmp = folder / "result.json.tmp"
    tmp.write_text(text)
    tmp.rename(folder / "result.json")
    say("result written")
    return 0


class ExternalPackageVmJob:
    """The lab's handle on a job that `start` launched: `result()` waits for it, like
    package_vm.PackageVmJob.result()."""

    def __init__(self, folder: Path):
        """Lets the job's checks begin (see the module's docstring)."""
        self.folder = folder
        self.pid = int((folder / "pid").read_text())
        (folder / "go").touch()

    def result(self) -> dict:
        from .package_vm import say

        t = time.monotonic()
        if _alive(self.pid):
            say(f"waiting for the package VM, started before the clean-install rung "
                f"(pid {self.pid}, log {self.folder / 'log'})")
        while _alive(self.pid) and time.monotonic() - t < WAIT_LIMIT_S:
            time.sleep(2)
        waited = time.monotonic() - t
        log = (self.folder / "log").read_text(errors="replace")
        sys.stderr.write(log if log.endswith("\n") or not log else log + "\n")
        try:
            started = float((self.folder / "started").read_text())
            since = f"{time.time() - started:.0f} s after it started"
        except (OSError, ValueError):
            since = "(start time unknown)"
        say(f"package VM done {since} (waited {waited:.0f} s for it at the end)")
        if (self.folder / "result.json").exists():
            return json.loads((self.folder / "result.json").read_text())
        if (self.folder / "error.txt").exists():
            raise RuntimeError("the package VM job failed: "
                               + (self.folder / "error.txt").read_text())
        if _alive(self.pid):
            os.kill(self.pid, signal.SIGTERM)
            raise RuntimeError(f"the package VM job (pid {self.pid}) had no result after "
                               f"{WAIT_LIMIT_S} s more: stopped; its log is above")
        raise RuntimeError(f"the package VM job (pid {self.pid}) ended without a result; "
                           f"its log is above ({self.folder / 'log'})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m tests.lab.package_vm_job",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("command", choices=("start", "run"))
    ap.add_argument("folder", type=Path)
    ap.add_argument("--parent", type=int, required=True,
                    help="stop when this process (the make that started the job) is gone")
    args = ap.parse_args(argv)
    folder = args.folder.resolve()
    if args.command == "start":
        pid = start(folder, args.parent)
        print(f"==> package VM: build and boot started beside the steps that follow, at idle "
              f"priority (pid {pid}; log {folder / 'log'}); its checks begin with the lab rung",
              flush=True)
        return 0
    return run(folder, args.parent)


if __name__ == "__main__":
    sys.exit(main())
