"""One lab VM per pytest session (booting costs ≈40 s of the ≤ 20 min budget), and the
package VM beside it (package_vm.py)."""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

import pytest

from .lab import Lab
from .package_vm import PackageVmJob

PHASES: list[tuple[str, float]] = []  # (phase, seconds), printed at the end of the session
SPLITS: dict[str, dict[str, float]] = {}  # test id -> {"setup"/"call"/"teardown": seconds}
CALLS_TSV: list[Path] = []  # the checks' VM's trace of guest-agent requests (vm.py, _trace)
_LISTED_APART = [0.0]  # boot and stop seconds not yet taken off the set-up/teardown they were in
PACKAGE_VM_JOB: PackageVmJob | None = None  # started by `lab` when the session has its tests


@pytest.fixture(scope="session")
def lab(request, tmp_path_factory):
    global PACKAGE_VM_JOB
    t = time.monotonic()
    lab = Lab.start()
    CALLS_TSV.append(lab.vm.rundir / "calls.tsv")
    PHASES.append(("boot: QEMU start -> station associated", time.monotonic() - t))
    _LISTED_APART[0] += PHASES[-1][1]
    # The kernel, initramfs and medium are ready now: the package VM can start beside us.
    if PACKAGE_VM_JOB is None and any(item.module.__name__.endswith(".test_package_vm")
                                      for item in request.session.items):
        PACKAGE_VM_JOB = PackageVmJob(tmp_path_factory.mktemp("deb-bg"))
        PACKAGE_VM_JOB.start()
        lab.say("package VM: build and boot started beside the checks, at idle priority")
    try:
        yield lab
    finally:
        t = time.monotonic()
        lab.stop()
        PHASES.append(("stop VM", time.monotonic() - t))
        _LISTED_APART[0] += PHASES[-1][1]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if "lab" in item.fixturenames:
        # set-up, call and teardown, so that a fixture's cost (a daemon start, the second AP,
        # a NetworkManager restart) shows against the test that pays it
        parts = SPLITS.setdefault(item.nodeid, {})
        parts[report.when] = max(0.0, report.duration - _LISTED_APART[0])
        _LISTED_APART[0] = 0.0
        if report.when == "teardown":
            extra = ", ".join(f"{when} {parts[when]:.1f} s" for when in ("setup", "teardown")
                              if parts.get(when, 0) >= 1)
            entry = (item.name + (f" ({extra})" if extra else ""), sum(parts.values()))
            # the session's last lab test: the VM stopped in its teardown, listed after it
            at = len(PHASES) - 1 if PHASES and PHASES[-1][0] == "stop VM" else len(PHASES)
            PHASES.insert(at, entry)
    if report.when == "call" and report.failed and "lab" in item.funcargs:
        lab = item.funcargs["lab"]
        path = lab.save_diagnostics(item.name)
        report.sections.append(("lab logs", f"guest logs and diagnostics: {lab.vm.rundir}\n"
                                            f"({path.name})"))


def pytest_terminal_summary(terminalreporter):
    if not PHASES:
        return
    tr = terminalreporter
    tr.section("lab phase timings")
    for name, seconds in PHASES:
        tr.write_line(f"{seconds:7.1f} s  {name}")
    tr.write_line(f"{sum(s for _, s in PHASES):7.1f} s  total (a test's time includes the "
                  "set-up and teardown of the fixtures it was first or last to use)")
    _print_guest_calls(tr)


def _print_guest_calls(tr, top: int = 6) -> None:
    """The guest commands that took the checks' time, by their first two words (calls.tsv)."""
    if not CALLS_TSV or not CALLS_TSV[0].exists():
        return
    total, count = defaultdict(float), defaultdict(int)
    for line in CALLS_TSV[0].read_text(encoding="utf-8", errors="replace").splitlines():
        fields = line.split("\t")
        if len(fields) == 4 and fields[2] == "run":
            cmd = fields[3].partition(" && ")[2] if fields[3].startswith("cd ") else fields[3]
            words = cmd.split()
            # "python3 -m nm_scanguard.cli.scanguardctl status": the module and its command say what it was
            key = " ".join(words[:4] if "-m" in words[1:2] else words[:2])
            total[key] += float(fields[1])
            count[key] += 1
    tr.write_line(f"guest commands, by time (all {sum(count.values())} took "
                  f"{sum(total.values()):.0f} s; {CALLS_TSV[0]}):")
    for key in sorted(total, key=total.get, reverse=True)[:top]:
        tr.write_line(f"{total[key]:7.1f} s  {count[key]:4d} x {total[key] / count[key]:5.2f} s  {key}")


def pytest_collection_modifyitems(items):
    """test_package_vm.py runs last: with the checks, its VM has been running beside them since
    the `lab` VM came up, and its tests only wait for the result (package_vm.PackageVmJob).
    Run alone, it boots its own VM (systemd as PID 1) in the foreground."""
    items.sort(key=lambda item: item.module.__name__.rpartition(".")[2] == "test_package_vm")
