"""make test's package VM as a process of its own (tests/lab/package_vm_job.py): the lab's handle
gives its result, says why there is none, and the process stops when the make that started it
is gone (its VM goes with it: run_vm_check's `finally`)."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.lab import package_vm_job
from tests.lab.package_vm_job import ExternalPackageVmJob


def _ended_job(folder: Path) -> Path:
    proc = subprocess.Popen(["true"])
    proc.wait()
    folder.mkdir(exist_ok=True)
    (folder / "pid").write_text(str(proc.pid))
    (folder / "log").write_text("[package-vm] progress line\n")
    (folder / "started").write_text(repr(time.time() - 5))
    return folder


def test_the_handle_returns_the_jobs_result_and_shows_its_log(tmp_path, capsys) -> None:
    folder = _ended_job(tmp_path / "job")
    result = {"rc": 0, "sections": {"install": [["PASS", "apt-get install Café ☕"]]}}
    (folder / "result.json").write_text(json.dumps(result, ensure_ascii=False))
    assert ExternalPackageVmJob(folder).result() == result
    assert "[package-vm] progress line" in capsys.readouterr().err


def test_a_failed_job_raises_with_its_error(tmp_path) -> None:
    folder = _ended_job(tmp_path / "job")
    (folder / "error.txt").write_text("BuildError: dpkg-buildpackage failed\n")
    with pytest.raises(RuntimeError, match="package VM job failed: BuildError: dpkg-buildpackage"):
        ExternalPackageVmJob(folder).result()


def test_a_job_that_died_without_a_word_is_named(tmp_path) -> None:
    folder = _ended_job(tmp_path / "job")
    with pytest.raises(RuntimeError, match=r"ended without a result; its log is above"):
        ExternalPackageVmJob(folder).result()


def test_the_jobs_checks_wait_for_the_lab_step(tmp_path) -> None:
    """The job readies its VM early but starts the checks only once the lab's handle exists."""
    parent = subprocess.Popen(["sleep", "60"])
    script = f"""
import sys, time
from pathlib import Path
from tests.lab import package_vm, package_vm_job
def work(self):
    self.before_checks()
    self._result = {{"checks began": time.time()}}
package_vm.PackageVmJob.run = work
sys.exit(package_vm_job.run(Path({str(tmp_path)!r}), {parent.pid}))
"""
    try:
        (tmp_path / "pid").write_text("0")
        proc = subprocess.Popen([sys.executable, "-c", script], cwd=package_vm_job.REPO,
                                stderr=subprocess.PIPE, text=True)
        time.sleep(3)
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        assert not (tmp_path / "result.json").exists()
        (tmp_path / "pid").write_text(str(proc.pid))
        t = time.time()
        ExternalPackageVmJob(tmp_path)  # the lab rung has begun
        assert proc.wait(20) == 0
        assert json.loads((tmp_path / "result.json").read_text())["checks began"] >= t
    finally:
        parent.kill()
        parent.wait()


def test_a_make_gone_before_the_work_begins_still_leaves_why(tmp_path) -> None:
    """make can end before the job has begun its work (a slow start): the SIGTERM then comes
    early, and the job still ends with status 1 and error.txt."""
    gone = subprocess.Popen(["true"])
    gone.wait()
    script = f"""
import sys, time
from pathlib import Path
from tests.lab import package_vm, package_vm_job
def slow_init(self, *args, **kwargs):
    time.sleep(60)  # the work has not begun when the watch finds make gone
package_vm.PackageVmJob.__init__ = slow_init
sys.exit(package_vm_job.run(Path({str(tmp_path)!r}), {gone.pid}))
"""
    proc = subprocess.run([sys.executable, "-c", script], cwd=package_vm_job.REPO,
                          capture_output=True, text=True, timeout=40)
    assert proc.returncode == 1, proc.stderr
    assert "SystemExit: 143" in (tmp_path / "error.txt").read_text()


def test_a_zombie_counts_as_gone() -> None:
    proc = subprocess.Popen(["true"])
    deadline = time.monotonic() + 10
    while Path(f"/proc/{proc.pid}/stat").read_text().split(") ", 1)[1][:1] != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert not package_vm_job._alive(proc.pid)
    proc.wait()
    assert not package_vm_job._alive(proc.pid)


def test_the_job_stops_when_its_make_is_gone(tmp_path, monkeypatch) -> None:
    """The job's watch ends it with SIGTERM once its parent is gone; SystemExit unwinds the
    package VM's work (here a stand-in that waits), and error.txt says why."""
    parent = subprocess.Popen(["sleep", "1"])
    script = f"""
import sys, time
from pathlib import Path
from tests.lab import package_vm, package_vm_job
def work(self):
    try:
        time.sleep(60)
    except BaseException as e:
        self._error = e
package_vm.PackageVmJob.run = work
sys.exit(package_vm_job.run(Path({str(tmp_path)!r}), {parent.pid}))
"""
    t = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", script], cwd=package_vm_job.REPO,
                          capture_output=True, text=True, timeout=40)
    parent.wait()
    assert proc.returncode == 1, proc.stderr
    assert time.monotonic() - t < 30
    assert "is gone: stopping the package VM" in proc.stderr
    assert "SystemExit: 143" in (tmp_path / "error.txt").read_text()
    assert not (tmp_path / "result.json").exists()
