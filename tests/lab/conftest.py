"""One lab VM per pytest session (booting costs ≈40 s of the ≤ 20 min budget)."""

import time

import pytest

from .lab import Lab

PHASES: list[tuple[str, float]] = []  # (phase, seconds), printed at the end of the session


@pytest.fixture(scope="session")
def lab():
    t = time.monotonic()
    lab = Lab.start()
    PHASES.append(("boot: QEMU start -> station associated", time.monotonic() - t))
    try:
        yield lab
    finally:
        t = time.monotonic()
        lab.stop()
        PHASES.append(("stop VM", time.monotonic() - t))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and "lab" in item.fixturenames:
        PHASES.append((item.name, report.duration))
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
    tr.write_line(f"{sum(s for _, s in PHASES):7.1f} s  total (fixture set-up of the daemon "
                  "is counted in its first test's set-up, not here)")


def pytest_collection_modifyitems(items):
    """test_package_vm.py boots its own VM (systemd as PID 1) and holds it for its module only.
    It runs first: the session-wide `lab` VM above lives until the session ends, and a second
    Lab.start() in the same process would wait for the one-VM lock forever."""
    items.sort(key=lambda item: item.module.__name__.rpartition(".")[2] != "test_package_vm")
