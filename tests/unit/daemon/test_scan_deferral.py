"""Deferral of other programs' scan requests, without a bus: the state file the daemon publishes,
the helper polkitd runs (systemd/nm-scanguard-scan-deferral, run by dash as on Debian), the
Guard's deferring state and counts, the Devices entry and scanguardctl's lines."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from nm_scanguard.daemon.guard import policy as P
from nm_scanguard.attribution import Request
from nm_scanguard.cli.show import GEOCLUE_HINT, device_line, scan_hint, status_json
from nm_scanguard.config import KEYS, ConfigError, Settings, load_file
from nm_scanguard.profile_settings import apply_profile
from nm_scanguard.daemon.daemon import Daemon
from nm_scanguard.daemon.service import Supervisor
from nm_scanguard.daemon.deferral import DEFER_FILE, ScanDeferral
from nm_scanguard.status import FIELDS, DeviceStatus
from nm_scanguard.daemon.guard.guard import Guard
from nm_scanguard.daemon.bgscan.journal import Journal
from nm_scanguard.peers.nm import WifiDevice
from nm_scanguard.daemon.bgscan.suspension import Bgscan
from tests.conftest import start_private_bus, stop_process
from tests.unit.daemon.guard.test_guard import SETTINGS, FakeCounters, FakeView, Listener, run

HELPER = Path(__file__).resolve().parents[3] / "systemd" / "nm-scanguard-scan-deferral"
CAFE = "Café ☕"


def start_time(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]


@pytest.fixture
def parts(tmp_path) -> dict:
    sup, journal = FakeView(), Journal(str(tmp_path / "journal"))
    return {"sup": sup, "journal": journal, "counters": FakeCounters(), "listener": Listener(),
            "bgscan": Bgscan(sup, journal)}


@pytest.fixture
async def guard(parts) -> Guard:
    dev = WifiDevice(path="/org/freedesktop/NetworkManager/Devices/1", ifname="wlan0", state=100,
                     connection_id=CAFE, connection_uuid="u-1")
    g = parts["listener"].guard(dev, SETTINGS, parts)
    await g.iface()
    return g


# ---- the state file ------------------------------------------------------------------------

def test_the_state_file_names_this_process_deferring_or_watching_and_is_gone_once_cleared(tmp_path):
    d = ScanDeferral(str(tmp_path))
    path = tmp_path / DEFER_FILE
    me = f"{os.getpid()} {start_time(os.getpid())}\n"
    d.set(True)
    assert path.read_text() == "defer " + me
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # polkitd's helper reads it
    assert [p.name for p in tmp_path.iterdir()] == [DEFER_FILE]  # no temporary file left
    d.set(False)
    assert path.read_text() == "watch " + me  # requests are allowed, and reported
    d.clear()
    assert not path.exists() and d.active is None
    d.set(True)  # a guard's last change while the daemon stops: not written again
    assert not path.exists()
    d.clear()  # nothing to remove: fine
    assert not path.exists()


def test_a_leftover_is_replaced_at_the_first_set(tmp_path):
    (tmp_path / DEFER_FILE).write_text("defer 1 1\n")
    ScanDeferral(str(tmp_path)).set(False)
    assert (tmp_path / DEFER_FILE).read_text().startswith(f"watch {os.getpid()} ")


def test_a_write_that_fails_is_logged_once_and_tried_again(tmp_path, caplog):
    blocked = tmp_path / "state"
    blocked.write_text("a file where the directory should be")
    d = ScanDeferral(str(blocked))
    d.set(True)
    d.active = False  # as if a change came in between
    d.set(True)
    assert d.active is None
    warnings = [r.getMessage() for r in caplog.records if "cannot write" in r.getMessage()]
    assert warnings == [f"{blocked / DEFER_FILE}: cannot write (File exists), so other "
                        "programs' Wi-Fi scan requests are not refused; check that the directory "
                        "exists and belongs to the service user"]
    assert d.problem == warnings[0].split("; check")[0] and not d.in_force
    blocked.unlink()
    d.set(True)
    assert d.active is True and (blocked / DEFER_FILE).exists()
    assert d.in_force and d.problem is None


def unwritable(directory: Path) -> None:
    """Make `directory` refuse new files, for root too (a mode does not stop root): it is
    replaced by a plain file."""
    for p in directory.iterdir():
        p.unlink()
    directory.rmdir()
    directory.write_text("not a directory")


def test_the_warnings_say_what_happens_to_other_programs_scans(tmp_path, caplog):
    """At start the daemon writes "watch"; a directory it cannot write must not read as if
    scans were refused (they are allowed: no file names this process)."""
    state = tmp_path / "state"
    state.write_text("not a directory")
    ScanDeferral(str(state)).set(False)
    assert [r.getMessage() for r in caplog.records] == [
        f"{state / DEFER_FILE}: cannot write (File exists), so other programs' Wi-Fi scan "
        "requests are allowed, but scanguardctl diagnose cannot name who asked for them; check "
        "that the directory exists and belongs to the service user"]
    caplog.clear()
    # Deferring, then the directory breaks: the file still says "defer" for this process.
    state.unlink()
    state.mkdir()
    d = ScanDeferral(str(state))
    d.set(True)
    (state / DEFER_FILE).rename(tmp_path / "kept")
    unwritable(state)
    d.set(False)
    d.clear()
    assert [r.getMessage() for r in caplog.records] == [
        f"{state / DEFER_FILE}: cannot write (File exists), so other programs' Wi-Fi scan "
        "requests stay refused until it can be written or scanguardd stops; check that the "
        "directory exists and belongs to the service user",
        f"{state / DEFER_FILE}: cannot remove (Not a directory), so other programs' Wi-Fi scan "
        "requests stay refused until this process has exited; check that the directory exists "
        "and belongs to the service user"]
    assert d.in_force


def test_a_private_state_directory_is_opened_for_search_only(tmp_path):
    """Run by hand, the journal may have made the directory 0700 first: polkitd could not
    reach the file.  It gets search permission for others, never read (no listing)."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    ScanDeferral(str(state)).set(True)
    assert stat.S_IMODE(state.stat().st_mode) == 0o711
    fresh = tmp_path / "fresh"
    ScanDeferral(str(fresh)).set(True)
    assert stat.S_IMODE(fresh.stat().st_mode) & 0o077 == 0o011


# ---- the helper polkitd runs ---------------------------------------------------------------

def uptime() -> float:
    return float(Path("/proc/uptime").read_text().split()[0])


# What the helper prints when it started a report: the answer, then the reporter's pid and
# start time.
REPORTED = re.compile(r"(defer|allow)\nreport [0-9]+ [0-9]+\n")


def helper(state: Path, tmp_path: Path, user: str = "alice", pid: str = "1",
           last: tuple[str, str] | None = None, full: bool = False) -> tuple[str, list[str]]:
    """Run the helper with a fake busctl first in PATH; returns its answer (the first line;
    everything it printed if `full`) and what busctl got.  `last`: the last report the rule
    was told of (pid, start time)."""
    record = tmp_path / "busctl.args"
    fake = tmp_path / "bin" / "busctl"
    fake.parent.mkdir(exist_ok=True)
    fake.write_text(f'#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done > {record}.tmp\n'
                    f'mv {record}.tmp {record}\n')
    fake.chmod(0o755)
    record.unlink(missing_ok=True)
    env = dict(os.environ, SCANGUARD_DEFER_FILE=str(state), PATH=f"{fake.parent}:/usr/bin:/bin")
    r = subprocess.run(["dash", str(HELPER), user, pid, *(last or ())], env=env,
                       capture_output=True, timeout=10)
    assert r.returncode == 0 and r.stderr == b""
    out = r.stdout.decode()
    answer = out.split("\n", 1)[0] + "\n"
    called: list[str] = []
    if "\nreport " in out:
        assert REPORTED.fullmatch(out), out
    if "\nreport " in out or (
            last is None and (answer == "defer\n" or (
                answer == "allow\n" and state.exists()
                and state.read_text(errors="replace").startswith("watch ")))):
        deadline = time.monotonic() + 5
        while not record.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        # a dead daemon's "watch" reports nothing: then nothing came after 5 s
        called = record.read_text(encoding="utf-8").splitlines() if record.exists() else []
    return (out if full else answer), called


@pytest.mark.parametrize("user", ["alice", CAFE])
@pytest.mark.parametrize("mode, answer, refused", [("defer", "defer\n", "true"),
                                                   ("watch", "allow\n", "false")])
def test_helper_answers_for_the_named_process_and_tells_the_daemon_who_asked(
        tmp_path, user, mode, answer, refused):
    """While the daemon that the file names runs: "defer" refuses, "watch" allows; either way
    the helper reports who asked, whether refused, and when (polkit's moment)."""
    state = tmp_path / "defer-scans"
    state.write_text(f"{mode} {os.getpid()} {start_time(os.getpid())}\n")
    before = uptime()
    got, called = helper(state, tmp_path, user=user, pid=str(os.getpid()))
    after = uptime()
    assert got == answer
    comm = Path(f"/proc/{os.getpid()}/comm").read_text().rstrip("\n")
    assert called[-7:-1] == ["ScanRequestSeen", "susbd", user, str(os.getpid()), comm, refused]
    # when polkit asked, on the boot-time clock; /proc/uptime counts in 10 ms steps, so the
    # helper's reading may equal ours
    assert before <= float(called[-1]) <= after
    # it waits for the reply (the daemon must still be able to ask the bus who called), in the
    # background, as long as a D-Bus call does by default (a slow daemon still gets it); and it
    # never starts the daemon by bus activation
    assert "--expect-reply=no" not in called and "--auto-start=no" in called
    assert "--timeout=25" in called


@pytest.mark.parametrize("mode, answer", [("defer", "defer\n"), ("watch", "allow\n")])
def test_helper_starts_no_report_while_the_last_one_runs(tmp_path, mode, answer):
    """The rule hands back the report it was told of: while that process lives (same pid,
    same start time) the helper answers and starts none; once it is gone, or the pid names
    another process, it reports and names the new reporter."""
    state = tmp_path / "defer-scans"
    state.write_text(f"{mode} {os.getpid()} {start_time(os.getpid())}\n")
    running = subprocess.Popen(["sleep", "30"])
    try:
        alive = (str(running.pid), start_time(running.pid))
        assert helper(state, tmp_path, last=alive, full=True) == (answer, [])
    finally:
        running.kill()
        running.wait()
    out, called = helper(state, tmp_path, last=alive, full=True)  # ended: a new report
    assert out.startswith(answer + "report ") and called[-7] == "ScanRequestSeen"
    exited = subprocess.Popen(["true"])  # exited, not reaped (where PID 1 is slow to reap)
    try:
        deadline = time.monotonic() + 5
        while Path(f"/proc/{exited.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            assert time.monotonic() < deadline
            time.sleep(0.01)
        out, called = helper(state, tmp_path, last=(str(exited.pid), start_time(exited.pid)),
                             full=True)
    finally:
        exited.wait()
    assert out.startswith(answer + "report ") and called[-7] == "ScanRequestSeen"
    out, called = helper(state, tmp_path, last=(str(os.getpid()), "1"), full=True)  # pid reused
    assert out.startswith(answer + "report ") and called[-7] == "ScanRequestSeen"
    for odd in (("x1", "2"), ("1", ""), ("-1", "2"), ("0", "0")):
        out, called = helper(state, tmp_path, last=odd, full=True)
        assert out.startswith(answer + "report ") and called[-7] == "ScanRequestSeen", odd


def test_helper_names_no_report_when_there_is_no_daemon_to_tell(tmp_path):
    state = tmp_path / "defer-scans"
    assert helper(state, tmp_path, full=True) == ("allow\n", [])
    state.write_text("watch 4194303 1\n")
    assert helper(state, tmp_path, full=True) == ("allow\n", [])


def test_helper_reports_pid_zero_and_no_program_for_a_strange_pid(tmp_path):
    state = tmp_path / "defer-scans"
    state.write_text(f"watch {os.getpid()} {start_time(os.getpid())}\n")
    answer, called = helper(state, tmp_path, pid="12x")
    assert answer == "allow\n"
    assert called[-6:-1] == ["susbd", "alice", "0", "", "false"]


@pytest.mark.parametrize("content", [
    None,  # no file: the daemon is not deferring (or not running)
    "",
    "allow\n",
    "defer\n",
    "defer 1\n",
    "defer {pid} {start} extra\n",
    "defer {pid} 1\n",  # same pid, another start time: the daemon died and the pid was reused
    "defer 4194303 {start}\n",  # no such process: the daemon crashed
    "defer x{pid} {start}\n",
    "defer {pid} {start}x\n",
    "defer ../../self {start}\n",
    "defer -1 {start}\n",
    "défer {pid} {start}\n",
    "watch {pid} 1\n",  # a watching daemon that died: allowed, and nobody to tell
    "watch 4194303 {start}\n",
])
def test_helper_fails_open(tmp_path, content):
    state = tmp_path / "defer-scans"
    if content is not None:
        state.write_text(content.format(pid=os.getpid(), start=start_time(os.getpid())))
    assert helper(state, tmp_path) == ("allow\n", [])


def test_helper_allows_when_it_cannot_read_the_file():
    """As user nobody (polkitd's stand-in) in a directory it may enter, but the file is 0000.
    (Not under pytest's tmp_path or a build tree: those are private to root.)"""
    shared = Path(tempfile.mkdtemp(prefix="scanguard-helper-"))
    try:
        shared.chmod(0o755)
        script = shared / HELPER.name
        shutil.copy(HELPER, script)
        script.chmod(0o755)
        state = shared / "defer-scans"
        state.write_text(f"defer {os.getpid()} {start_time(os.getpid())}\n")
        env = dict(os.environ, SCANGUARD_DEFER_FILE=str(state),
                   DBUS_SYSTEM_BUS_ADDRESS="unix:path=/nonexistent")  # the report goes nowhere
        as_nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                     "dash", str(script), "alice", "1"]
        state.chmod(0o644)  # the control: readable, it defers (busctl fails quietly here)
        r = subprocess.run(as_nobody, env=env, capture_output=True, text=True, timeout=10)
        assert (r.returncode, r.stderr) == (0, "") and REPORTED.fullmatch(r.stdout), r.stdout
        assert r.stdout.startswith("defer\n")
        state.chmod(0)
        r = subprocess.run(as_nobody, env=env, capture_output=True, text=True, timeout=10)
        assert (r.returncode, r.stdout, r.stderr) == (0, "allow\n", "")
    finally:
        shutil.rmtree(shared, ignore_errors=True)


@pytest.mark.parametrize("kind", ["fifo", "fifo with a writer", "link to a deferring file",
                                  "link to /dev/zero"])
def test_helper_answers_at_once_and_allows_when_the_state_file_is_a_fifo_or_a_link(
        tmp_path, kind):
    """/run/scanguard belongs to the service user: a compromised daemon could put a FIFO or a
    link there instead of the file, and polkitd checks nothing else while the helper runs (it
    kills it after 10 s).  The helper opens the file without following a link and without
    blocking, reads one bounded chunk, and allows (fails open) when that is not a plain file's
    line."""
    state = tmp_path / "defer-scans"
    writer = None
    if kind.startswith("fifo"):
        os.mkfifo(state)
        if kind == "fifo with a writer":  # opening succeeds, reading would wait for data
            writer = os.open(state, os.O_RDWR | os.O_NONBLOCK)
    elif kind == "link to /dev/zero":  # a line that never ends
        state.symlink_to("/dev/zero")
    else:  # a line the helper would act on, if it followed the link
        real = tmp_path / "elsewhere"
        real.write_text(f"defer {os.getpid()} {start_time(os.getpid())}\n")
        state.symlink_to(real)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    reported = tmp_path / "busctl.ran"
    (bin_dir / "busctl").write_text(f"#!/bin/sh\ntouch {reported}\n")
    (bin_dir / "busctl").chmod(0o755)
    env = dict(os.environ, SCANGUARD_DEFER_FILE=str(state), PATH=f"{bin_dir}:/usr/bin:/bin")
    try:
        started = time.monotonic()
        r = subprocess.run(["dash", str(HELPER), "alice", "1"], env=env, capture_output=True,
                           timeout=5)  # half of polkitd's limit; it takes milliseconds
        took = time.monotonic() - started
    finally:
        if writer is not None:
            os.close(writer)
    assert (r.returncode, r.stdout, r.stderr) == (0, b"allow\n", b""), took
    time.sleep(0.2)
    assert not reported.exists()  # an allow without a live daemon behind it reports nothing


def test_helper_defers_for_a_daemon_whose_name_has_spaces_and_parentheses(tmp_path):
    """/proc/PID/stat's COMM may hold ") (": the start time is counted from the last ")"."""
    odd = tmp_path / "a) (b c"
    odd.write_bytes(Path("/bin/sleep").read_bytes())
    odd.chmod(0o755)
    proc = subprocess.Popen([str(odd), "30"])
    try:
        deadline = time.monotonic() + 5
        while Path(f"/proc/{proc.pid}/comm").read_text() != "a) (b c\n" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert ") (" in Path(f"/proc/{proc.pid}/stat").read_text()
        state = tmp_path / "defer-scans"
        state.write_text(f"defer {proc.pid} {start_time(proc.pid)}\n")
        assert helper(state, tmp_path)[0] == "defer\n"
    finally:
        proc.kill()
        proc.wait()


# ---- what the helper passes on: the requester's command name -----------------------------

SCANGUARD = "io.github.nm_scanguard.ScanGuard1"
SCANGUARD_PATH = "/io/github/nm_scanguard/ScanGuard1"

# A requester chooses its command name freely (prctl PR_SET_NAME, or the name of a link it runs
# as); the helper passes on only letters, digits, space and "._+:@/()-", every other byte
# becomes "?", and so does a leading "-".
ODD_NAMES = [
    ("-Hattacker.ex", "?Hattacker.ex"),  # busctl -H: runs ssh attacker.ex systemd-stdio-bridge
    ("-h", "?h"),  # busctl --help: prints its help and sends nothing
    ("--system", "?-system"),
    ("\x1b]0;owned\x07", "??0?owned?"),  # a terminal escape for whoever reads diagnose
    ("a\nb\tc\x7f", "a?b?c?"),
    (CAFE, "Caf?? ???"),  # not ASCII: one "?" per byte
    ("Web Content", "Web Content"),
    ("(sd-pam)", "(sd-pam)"),
    ("kw/0:1+a@b_c.d", "kw/0:1+a@b_c.d"),
]


@pytest.fixture(scope="module")
def scanguard_mock() -> Iterator[tuple[str, Any]]:
    """python-dbusmock owning our bus name with a ScanRequestSeen method, on a private system
    bus: the helper's real busctl call goes through, and what arrived can be read back."""
    import dbus

    bus = start_private_bus()
    env = dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=bus.address)
    process = subprocess.Popen([sys.executable, "-m", "dbusmock", "--system", SCANGUARD,
                                SCANGUARD_PATH, SCANGUARD], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    connection = dbus.bus.BusConnection(bus.address)
    try:
        deadline = time.monotonic() + 10
        while not connection.name_has_owner(SCANGUARD):
            assert process.poll() is None and time.monotonic() < deadline, "dbusmock did not start"
            time.sleep(0.01)
        mock = dbus.Interface(connection.get_object(SCANGUARD, SCANGUARD_PATH, introspect=False),
                              "org.freedesktop.DBus.Mock")
        mock.AddMethod("", "ScanRequestSeen", "susbd", "", "")
        yield bus.address, mock
    finally:
        connection.close()
        stop_process(process)
        bus.stop()


@contextlib.contextmanager
def requester(name: str) -> Iterator[int]:
    """A process whose command name (/proc/PID/comm) is `name`, set with prctl(PR_SET_NAME)."""
    code = ("import ctypes, os, sys, time\n"
            "ctypes.CDLL(None, use_errno=True).prctl(15, os.fsencode(sys.argv[1]), 0, 0, 0)\n"
            "print(flush=True)\n"
            "time.sleep(30)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, name], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"\n"
        assert Path(f"/proc/{proc.pid}/comm").read_bytes() == os.fsencode(name) + b"\n"
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout:
            proc.stdout.close()


@pytest.mark.parametrize("name, reported", ODD_NAMES)
def test_helper_passes_the_requesters_name_to_the_real_busctl_as_a_safe_argument(
        tmp_path, scanguard_mock, name, reported):
    """busctl permutes options found after its arguments: a requester named "-Hattacker.ex"
    made it run "ssh attacker.ex", and one named "-h" made it print its help instead of
    reporting.  With the real busctl on a private bus: every request is reported, under a name
    that neither busctl nor a terminal takes for anything but text, and no ssh ever runs."""
    address, mock = scanguard_mock
    mock.ClearCalls()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    args, status, ssh_ran = tmp_path / "busctl.args", tmp_path / "busctl.status", tmp_path / "ssh.ran"
    (bin_dir / "busctl").write_text(
        f"#!/bin/sh\nprintf '%s\\0' \"$@\" > {args}\n/usr/bin/busctl \"$@\"\n"
        f"echo $? > {status}.tmp\nmv {status}.tmp {status}\n")
    (bin_dir / "ssh").write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" > {ssh_ran}\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    state = tmp_path / "defer-scans"
    state.write_text(f"watch {os.getpid()} {start_time(os.getpid())}\n")
    env = dict(os.environ, SCANGUARD_DEFER_FILE=str(state), DBUS_SYSTEM_BUS_ADDRESS=address,
               PATH=f"{bin_dir}:/usr/bin:/bin")
    with requester(name) as pid:
        r = subprocess.run(["dash", str(HELPER), "alice", str(pid)], env=env,
                           capture_output=True, timeout=10)
        assert (r.returncode, r.stderr) == (0, b"") and r.stdout.startswith(b"allow\nreport ")
        deadline = time.monotonic() + 10
        while not status.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not ssh_ran.exists(), f"busctl ran ssh {ssh_ran.read_text()!r}"
        assert status.read_text() == "0\n"  # the call got through
        argv = args.read_bytes().decode().split("\0")[:-1]
        assert argv.index("--") < argv.index(SCANGUARD)  # all that follows is an argument
        assert argv[-3] == reported
        (call,) = mock.GetMethodCalls("ScanRequestSeen")
        user, got_pid, program, refused, _uptime = call[1]
        assert (str(user), int(got_pid), str(program), bool(refused)) == ("alice", pid, reported,
                                                                           False)


# ---- the setting ---------------------------------------------------------------------------

def test_defer_client_scans_is_on_by_default_and_can_be_turned_off(tmp_path):
    assert Settings().defer_client_scans is True and "defer_client_scans" in KEYS
    conf = tmp_path / "scanguard.conf"
    conf.write_text("[scanguard]\ndefer_client_scans = no\n")
    assert load_file(str(conf)).defer_client_scans is False
    conf.write_text("[scanguard]\ndefer_client_scans = sometimes\n")
    with pytest.raises(ConfigError, match="defer_client_scans = 'sometimes' is not valid; expected yes or no"):
        load_file(str(conf))
    per_profile = apply_profile(Settings(), {"scanguard.defer_client_scans": "no"}, CAFE)
    assert per_profile.defer_client_scans is False
    assert per_profile.source("defer_client_scans") == f"profile {CAFE}"


# ---- the Guard -----------------------------------------------------------------------------

async def test_a_guard_defers_while_guarding_or_held_and_only_then(guard, parts):
    counters = parts["counters"]
    assert not guard.scans.deferring
    await guard.step()
    await run(guard, counters, 8, 2)
    assert guard.state == P.GUARDING and guard.scans.deferring
    await run(guard, counters, 0, 2)
    assert guard.state == P.IDLE and not guard.scans.deferring
    guard.hold_changed(True)
    await guard.kick()
    assert guard.state == P.HELD and guard.scans.deferring


async def test_the_setting_turns_deferral_off(guard, parts):
    guard.update(guard.dev, Settings(**{**guard.settings.values(), "defer_client_scans": False,
                                        "engage_after": 2, "threshold_pps": 0}))
    guard.hold_changed(True)
    await guard.kick()
    assert guard.state == P.HELD and not guard.scans.deferring
    assert not guard.status().deferring_scans


async def test_deferred_requests_are_counted_logged_once_and_summed_up(guard, parts, caplog):
    caplog.set_level("INFO")
    guard.hold_changed(True)
    await guard.kick()
    for _ in range(3):
        guard.scans.count_deferred_request(f"user '{CAFE}' (gnome-shell, pid 7)")
    refused = [r.getMessage() for r in caplog.records if "refused a Wi-Fi scan request" in r.getMessage()]
    assert refused == [f"wlan0: refused a Wi-Fi scan request from user '{CAFE}' (gnome-shell, pid 7) "
                       "while guarding (defer_client_scans); further ones are counted in "
                       "scanguardctl status"]
    status = guard.status()
    assert (status.deferring_scans, status.scan_requests_deferred) == (True, 3)
    assert "client scans refused (3 requests so far)" in guard.status_line()
    guard.hold_changed(False)
    await guard.kick()
    assert any("3 Wi-Fi scan request(s) of other programs were refused" in r.getMessage()
               for r in caplog.records)
    assert guard.status().scan_requests_deferred == 3  # the total stays
    assert not guard.status().deferring_scans


# ---- the Daemon: one file for all interfaces -----------------------------------------------

async def test_the_daemon_publishes_whether_any_guard_defers(guard, parts, tmp_path):
    daemon = Daemon(Settings(), None, str(tmp_path / "state"), tasks=Supervisor())
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / DEFER_FILE).write_text("defer 1 1\n")  # a crashed instance's
    guard.state_changed.connect(daemon._guard_state_changed)  # as Daemon.sync wires a guard
    guard.changed.connect(daemon._guard_changed)
    daemon.guards[guard.ifname] = guard
    daemon.take_state_dir()  # what start() does first
    path = tmp_path / "state" / DEFER_FILE
    assert path.read_text().startswith(f"watch {os.getpid()} ")
    guard.hold_changed(True)
    await guard.kick()
    assert path.read_text().startswith(f"defer {os.getpid()} ")
    assert daemon.who_asked.scan_request_deferred(f"user '{CAFE}'") == 1
    assert guard.scans.scan_requests_deferred == 1
    guard.hold_changed(False)
    await guard.kick()
    assert path.read_text().startswith(f"watch {os.getpid()} ")
    assert daemon.who_asked.scan_request_deferred("late") == 0  # not deferring: not counted
    assert guard.scans.scan_requests_deferred == 1
    await daemon.stop()
    assert not path.exists()


def test_the_daemon_keeps_the_requests_the_rule_saw_for_ten_minutes(tmp_path):
    daemon = Daemon(Settings(), None, str(tmp_path / "state"), tasks=Supervisor())
    now = time.time()
    old = Request(at=now - 601, program="nmcli", pid=7, user="alice")
    new = Request(at=now - 1, program="gnome-shell", pid=8, user=CAFE)
    assert daemon.who_asked.scan_request_seen(old, False, "a user") == 0
    assert daemon.who_asked.scan_request_seen(new, True, "a user") == 0  # no interface deferring
    assert daemon.who_asked.requests.recent() == [(new, True)]
    for i in range(40):
        daemon.who_asked.scan_request_seen(Request(at=now, program=f"p{i}"), False, "x")
    kept = daemon.who_asked.requests.recent()
    assert len(kept) == 32 and kept[-1][0].program == "p39"


# ---- the Devices entry and scanguardctl ----------------------------------------------------

def test_the_new_fields_have_their_dbus_types():
    wire = DeviceStatus(interface="wlan0", state="guarding", deferring_scans=True,
                        scan_requests_deferred=4).as_dbus()
    assert (wire["deferring_scans"].signature, wire["deferring_scans"].value) == ("b", True)
    assert (wire["scan_requests_deferred"].signature, wire["scan_requests_deferred"].value) == ("u", 4)
    assert FIELDS["deferring_scans"] == "b" and FIELDS["scan_requests_deferred"] == "u"


def entry(**kw) -> dict:
    base = {"interface": "wlan0", "state": "guarding", "reason": "busy", "since": time.time(),
            "rx_bps": 8e6, "tx_bps": 0.0, "connection_id": CAFE, "scans_guarding": 0,
            "deferring_scans": True, "scan_requests_deferred": 0}
    base.update(kw)
    return base


def test_status_line_shows_deferral_with_a_non_ascii_profile():
    line = device_line(entry(scan_requests_deferred=5))
    assert line.startswith(f"wlan0 ('{CAFE}'): guarding") and "client scans refused (5 requests so far)" in line
    idle = device_line(entry(state="idle", deferring_scans=False, scan_requests_deferred=1))
    assert "1 request for scans refused while guarding" in idle


def test_status_points_to_geoclue_only_when_no_client_request_was_seen():
    assert scan_hint(entry(scans_guarding=0)) is None
    assert scan_hint(entry(scans_guarding=2, scan_requests_deferred=0)) == GEOCLUE_HINT
    assert "GeoClue" in GEOCLUE_HINT and "Night Light" in GEOCLUE_HINT
    other = scan_hint(entry(scans_guarding=2, scan_requests_deferred=3))
    assert other is not None and "root" in other and other != GEOCLUE_HINT
    off = scan_hint(entry(scans_guarding=2, settings={"defer_client_scans": False}))
    assert off is not None and "defer_client_scans is off" in off
    # Root's rescans pass polkit unseen (seen in the lab, check 9): the hint names root too.
    assert "root" in GEOCLUE_HINT
    cut = scan_hint(entry(scans_guarding=3, scan_requests_deferred=0,
                          scans_aborted={"running_at_engage": 1, "started_while_guarding": 2}))
    assert cut == GEOCLUE_HINT + "; abort_scans cut 3 of them short"


def test_json_carries_the_counts():
    (dev,) = status_json({"Devices": [entry(scans_guarding=2, scan_requests_deferred=3)]})["devices"]
    assert (dev["scans_guarding"], dev["scan_requests_deferred"], dev["deferring_scans"]) == (2, 3, True)
    assert dev["connection_id"] == CAFE


async def test_the_status_line_sends_a_change_at_once_and_figures_at_most_every_few_seconds(
        tmp_path, monkeypatch):
    """sd_notify STATUS=: the one Throttle (throttle.py) the D-Bus signals use too.  A state change
    goes out at once; changed figures wait for the interval and are then sent, the last one."""
    import asyncio

    import nm_scanguard.daemon.systemd_status as systemd_status

    monkeypatch.setattr(systemd_status, "STATUS_EVERY", 0.2)
    sent: list[str] = []
    monkeypatch.setattr(systemd_status, "notify", sent.append)
    lines = iter(["wlan0: idle", "wlan0: Café ☕ 1", "wlan0: Café ☕ 2", "wlan0: guarding"])
    current = {"line": next(lines)}
    status = systemd_status.SystemdStatus(lambda: current["line"])
    status.changed(force=True)
    assert sent == ["STATUS=wlan0: idle"]
    current["line"] = next(lines)
    status.changed(force=False)
    current["line"] = next(lines)
    status.changed(force=False)
    assert sent == ["STATUS=wlan0: idle"]  # figures wait
    await asyncio.sleep(0.3)
    assert sent[-1] == "STATUS=wlan0: Café ☕ 2" and len(sent) == 2  # then the last one goes
    current["line"] = next(lines)
    status.changed(force=True)
    assert sent[-1] == "STATUS=wlan0: guarding"
    status.stopped()
    assert sent[-1].startswith("STOPPING=1")


def test_who_scanned_is_worded_once_for_the_log_the_hint_and_monitor():
    from nm_scanguard.status import who_scanned
    deferring, not_deferring = who_scanned(True), who_scanned(False)
    assert "root" in deferring and "GeoClue" in deferring
    assert "nmcli" in not_deferring and "GeoClue" in not_deferring
    assert deferring in scan_hint(entry(scans_guarding=2, scan_requests_deferred=3))


def test_status_and_systemd_share_one_formatter_and_an_idle_line_stays_the_same():
    from nm_scanguard.status import device_line
    d = entry(state="idle", deferring_scans=False, since=time.time() - 75)
    full = device_line(d)
    brief = device_line(d, connection=False, age=False)
    assert full.startswith("wlan0 ('Café ☕'): idle for 1m15s (")
    assert brief.startswith("wlan0: idle (") and full.split("; ", 1)[1] == brief.split("; ", 1)[1]
    assert brief == device_line(dict(d, since=time.time()), connection=False, age=False)


def test_the_helpers_boot_time_clock_becomes_the_wall_clock():
    from nm_scanguard.daemon.api.methods import wall_clock
    up = time.clock_gettime(time.CLOCK_BOOTTIME)
    assert abs(wall_clock(up - 5.0) - (time.time() - 5.0)) < 0.05
    assert abs(wall_clock(0.0) - time.time()) < 0.05  # unknown: now
    assert abs(wall_clock(up + 100.0) - time.time()) < 0.05  # from the future: now
