"""The package VM (test_package_vm.py): build the .deb, boot the lab with systemd as PID 1,
run tests/package/vm-check.sh on it, and parse its PASS/FAIL lines by section.

In `make test` it runs in a thread beside the lab's checks (`PackageVmJob`, started by
conftest.py once the checks' VM is up): the build and its QEMU run at SCHED_IDLE, on the CPU
time the checks' VM leaves (it waits for bgscan's 30 s timers most of the time), so the lab
rung costs the checks' time, not the sum of both (issue 9: the lab under 20 minutes).  The
checks' VM keeps the CPU whenever it wants it: a SCHED_IDLE thread yields at once.  Run alone
(`pytest tests/lab/test_package_vm.py`), the same work runs in the foreground.
"""

from __future__ import annotations

import re
import shutil
import sys
import threading
import time
from pathlib import Path

from tests.package.test_package import build_deb

from .systemd_lab import SystemdLab
from .vm import REPO, idle_priority

VM_CHECK = REPO / "tests" / "package" / "vm-check.sh"
IFACE = "wlan1"


def say(msg: str) -> None:
    print(f"[package-vm] {msg}", file=sys.stderr, flush=True)


def parse(out: str) -> dict[str, list[tuple[str, str]]]:
    """vm-check.sh's output -> {section: [(PASS|FAIL, check), ...]}"""
    sections: dict[str, list[tuple[str, str]]] = {}
    current = ""
    for line in out.splitlines():
        if line.startswith("== "):
            current = re.sub(r" \(t=\d+s\)$", "", line[3:])
            sections.setdefault(current, [])
        elif m := re.match(r"^(PASS|FAIL)  (.*)$", line):
            sections.setdefault(current, []).append((m.group(1), m.group(2)))
    return sections


def run_vm_check(deb: Path, build_seconds: float, background: bool = False) -> dict:
    """Boot, install the .deb, run vm-check.sh once; its output and results by section.

    Raises AssertionError if the product leaks in from the host or apt would need a network."""
    t0 = time.monotonic()
    say(f"built {deb.name} in {build_seconds:.1f} s")
    lab = SystemdLab.start(log=say, background=background)
    try:
        t_boot = time.monotonic() - t0
        guest_deb = f"/lab/pkg/{deb.name}"
        (lab.vm.share / "pkg").mkdir(exist_ok=True)
        shutil.copy2(deb, lab.vm.share / "pkg" / deb.name)
        # The product must come from the .deb only, and apt must need nothing from a network.
        rc, _, err = lab.run("cd / && /usr/bin/python3 -c 'import nm_scanguard'")
        assert rc != 0 and "No module named 'nm_scanguard'" in err, err
        sim = lab.check(f"apt-get -s install {guest_deb}", 120)
        assert re.search(r"^0 upgraded, 1 newly installed, 0 to remove", sim, re.M), sim
        # man-db's trigger re-indexes every manual page over 9p (≈2.5 min under TCG): the
        # documented switch for machines that do not need `man -k` turns it off.
        lab.check("rm -f /var/lib/man-db/auto-update")
        t = time.monotonic()
        # ≈230 s alone; beside the checks' VM it gets what CPU they leave.
        rc, out, err = lab.run(f"bash {VM_CHECK} {guest_deb} {IFACE}", 1200 if background else 420)
        seconds = time.monotonic() - t
        (lab.vm.rundir / "vm-check.txt").write_text(out + "\n--- stderr ---\n" + err)
        lab.save_diagnostics("package-vm")
    finally:
        lab.stop()
    say(f"vm-check.sh: exit {rc} in {seconds:.0f} s; boot + lab {t_boot:.0f} s; "
        f"total {time.monotonic() - t0:.0f} s{' (at idle priority, beside the checks)' if background else ''}; "
        f"output {lab.vm.rundir / 'vm-check.txt'}")
    return {"rc": rc, "out": out, "err": err, "sections": parse(out), "seconds": time.monotonic() - t0}


class PackageVmJob(threading.Thread):
    """Build the .deb and run the package VM in the background; `result()` waits for it."""

    def __init__(self, top: Path):
        super().__init__(name="package-vm", daemon=True)
        self.top = top
        self.started_at = time.monotonic()
        self._result: dict | None = None
        self._error: BaseException | None = None

    def run(self) -> None:
        try:
            idle_priority()  # this thread's own work (copies, parsing) too
            built = build_deb(self.top, preexec_fn=idle_priority)
            self._result = run_vm_check(built["deb"], built["seconds"], background=True)
        except BaseException as e:  # handed to the tests, which report it
            self._error = e
            say(f"failed: {type(e).__name__}: {e}")

    def result(self) -> dict:
        t = time.monotonic()
        if self.is_alive():
            say("waiting for the package VM, which ran beside the checks")
        self.join()
        say(f"package VM done {time.monotonic() - self.started_at:.0f} s after it started "
            f"(waited {time.monotonic() - t:.0f} s for it at the end)")
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result
