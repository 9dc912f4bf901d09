"""One lab VM per pytest session (booting costs ≈40 s of the ≤ 20 min budget)."""

import pytest

from .lab import Lab


@pytest.fixture(scope="session")
def lab():
    lab = Lab.start()
    try:
        yield lab
    finally:
        lab.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed and "lab" in item.funcargs:
        lab = item.funcargs["lab"]
        path = lab.save_diagnostics(item.name)
        report.sections.append(("lab logs", f"guest logs and diagnostics: {lab.vm.rundir}\n"
                                            f"({path.name})"))
