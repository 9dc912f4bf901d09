"""One lab VM per pytest session (booting costs ≈40 s of the ≤ 20 min budget), and the
package VM beside it (package_vm.py)."""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

import pytest

from .lab import Lab, LabStartError, StartState
from .package_vm import PackageVmJob

PHASES: list[tuple[str, float]] = []  # (phase, seconds), printed at the end of the session
SPLITS: dict[str, dict[str, float]] = {}  # test id -> {"setup"/"call"/"teardown": seconds}
CALLS_TSV: list[Path] = []  # the checks' VM's trace of guest-agent requests (vm.py, _trace)
_LISTED_APART = [0.0]  # boot and stop seconds not yet taken off the set-up/teardown they were in
PACKAGE_VM_JOB: PackageVmJob | None = None  # started by `lab` when the session has its tests
LAB_ERRORS: list[str] = []  # checks that could not be brought to their start state (LabStartError)


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


@pytest.fixture(autouse=True)
def verified_start(request):
    """Every lab check starts from a state verified here (Lab.start_problems: the station on AP1
    at the strong signal and connected, the profile as the lab made it, no second AP unless the
    module keeps one, nothing of ours running but the module's daemon), brought there if need
    be, at most twice (Lab.establish); a lab that cannot be brought there is a lab error at
    the check's set-up (LabStartError), not a product failure.  Whatever the check starts is
    stopped when it ends, pass or fail (Lab.check_scope)."""
    if "lab" not in request.fixturenames:
        yield
        return
    lab = request.getfixturevalue("lab")
    keep = None
    if "guardd" in request.fixturenames:  # the module's daemon, shared by its checks
        guardd = request.getfixturevalue("guardd")
        if not guardd.running():  # a check of the module that failed before starting it again
            lab.say(f"{request.node.name}: the module's daemon is not running; starting it")
            guardd.start(require_bus=False)
        keep = guardd.proc.pid
    lab.establish(StartState(second_ap="second_ap" in request.fixturenames, keep=keep),
                  request.node.name)
    with lab.check_scope():
        yield


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
    if report.when == "setup" and report.failed and call.excinfo is not None \
            and call.excinfo.errisinstance(LabStartError):
        LAB_ERRORS.append(f"{item.nodeid}: {call.excinfo.value}")
    elif report.failed and report.when in ("setup", "call") and "lab" in item.funcargs:
        lab = item.funcargs["lab"]
        path = lab.save_diagnostics(f"{item.name}-{report.when}")
        report.sections.append(("lab logs", f"guest logs and diagnostics: {lab.vm.rundir}\n"
                                            f"({path.name})"))


def pytest_terminal_summary(terminalreporter):
    tr = terminalreporter
    if LAB_ERRORS:
        tr.section("lab errors: checks the lab could not bring to their start state (not product "
                   "failures; each fails the run)")
        for line in LAB_ERRORS:
            tr.write_line(line)
    if not PHASES:
        return
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
