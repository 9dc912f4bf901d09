"""Issue 5 on a booted system: the built .deb installed in the lab VM with systemd as PID 1.

The package is built from a clean copy of the tree (the `build` fixture of
tests/package/test_package.py), the VM boots Debian's systemd (tests/lab/systemd_lab.py) with
NetworkManager and wpa_supplicant from Debian's units and the station associated to the
hostapd AP, and tests/package/vm-check.sh runs in the guest on the .deb and wlan1: install,
user/groups/capabilities/seccomp, STATUS=, the CLI as an unprivileged user, polkit and bus
policy refusals, a hold suspending bgscan, reload, SIGKILL restart, a run with the system call
filter in log mode, a probe of every sandbox directive from inside the unit, bus activation,
the off switches (a masked unit that no call or connection starts, `enabled = no`), a hold
without a command ended by SIGTERM, `apt-get remove` restoring bgscan and stopping the service,
`apt-get purge` leaving nothing.
Then (tests/lab/package_vm.py): the upgrade from the previous release's package, built from
git, to this tree's, a profile private to another user, and `systemctl reload` with a bad
settings file.  debian/tests run with autopkgtest in the clean roots (make clean-install).

The guest sees the host's / read-only, so the daemon's dependencies are the host's; nothing of
nm-scanguard is on the host's Python path, so every file of the product comes from the .deb.
Each test below asserts one group of vm-check.sh's PASS lines (all of them must pass).
"""

from __future__ import annotations

import re

import pytest

from tests.package.test_package import build  # noqa: F401  (the clean-tree .deb build fixture)

from . import conftest
from .package_vm import IFACE, previous_or_why, run_vm_check


@pytest.fixture(scope="module")
def vm_check(request) -> dict:
    """Boot, install the .deb, run vm-check.sh once; its results by section for the tests.

    In a session with the lab's checks it ran beside them (conftest.py started it); alone, it
    runs here."""
    job = conftest.PACKAGE_VM_JOB
    if job is not None:
        result = job.result()
    else:
        built = request.getfixturevalue("build")
        previous = previous_or_why(request.getfixturevalue("tmp_path_factory").mktemp("deb-previous"))
        result = run_vm_check(built["deb"], built["seconds"], previous=previous)
    print(result["out"], flush=True)
    return result


def _section(vm_check: dict, prefix: str, expected: list[str]) -> list[str]:
    """Every check of the section passed, and each expected check is among them."""
    names = [s for s in vm_check["sections"] if s.startswith(prefix)]
    assert names, f"no section '{prefix}' in vm-check output:\n{vm_check['out']}\n{vm_check['err']}"
    checks = vm_check["sections"][names[0]]
    failed = [c for verdict, c in checks if verdict != "PASS"]
    assert not failed, f"failed in '{names[0]}': {failed}\n\n{vm_check['out']}"
    passed = [c for _, c in checks]
    missing = [e for e in expected if not any(c.startswith(e) for c in passed)]
    assert not missing, f"checks not run in '{names[0]}': {missing}\n\n{vm_check['out']}"
    return passed


def test_installs_and_runs_as_static_user(vm_check: dict) -> None:
    _section(vm_check, "install", [
        "apt-get install", "service active", "the bus policy let the first start own",
        "enabled for multi-user.target",
        "main process runs as user scanguard", "supplementary group netdev",
        "no capabilities", "no_new_privs set", "seccomp filter active",
        "daemon runs the packaged code", "owns io.github.nm_scanguard.ScanGuard1",
        "STATUS= line in systemctl status"])
    assert re.search(r'^\s+Status: "wlan1: ', vm_check["out"], re.M), vm_check["out"]


def test_sandbox_seen_from_outside(vm_check: dict) -> None:
    _section(vm_check, "sandbox of the running daemon", [
        "own mnt namespace", "own user namespace", "own ipc namespace", "own uts namespace",
        "host network namespace", "its sockets are AF_UNIX / AF_NETLINK only",
        "MemoryDenyWriteExecute: runs with its C extensions",
        "no writable+executable mapping"])


def test_cli_and_api_as_unprivileged_user(vm_check: dict) -> None:
    _section(vm_check, "as an unprivileged user", [
        "scanguardctl status works without root", "scanguardctl status --json is JSON",
        "properties readable", "DeviceEvent refused", "Reload refused", "Hold refused",
        "other interfaces refused by the bus policy"])


def test_hold_suspends_and_restores_bgscan(vm_check: dict) -> None:
    _section(vm_check, f"bgscan on {IFACE}", [
        "a hold suspends bgscan", "scanguardctl status shows the hold",
        "releasing the hold restores bgscan"])


def test_life_cycle(vm_check: dict) -> None:
    _section(vm_check, "life cycle", ["systemctl reload keeps it running"])
    _section(vm_check, "restart after SIGKILL", [
        "restarted after SIGKILL", "/run/scanguard kept across the restart"])


def test_system_call_filter_denies_nothing_the_daemon_does(vm_check: dict) -> None:
    """With SystemCallLog= of every call the filter denies, a start, status, hold, release,
    reload and stop (restoring bgscan) make the kernel log nothing."""
    _section(vm_check, "restart after SIGKILL", [
        "log mode in effect", "status in log mode", "hold suspends bgscan in log mode",
        "release restores bgscan in log mode",
        "a hold suspends bgscan before the stop in log mode",
        "stop with a hold restores bgscan in log mode",
        "no system call outside the filter in log mode"])


def test_every_sandbox_directive_in_force(vm_check: dict) -> None:
    passed = _section(vm_check, "sandbox probed from inside", [
        "bus activation starts the unit", "running the enforcing unit again"])
    directives = {c.split(":")[1].strip() for c in passed if c.startswith("sandbox: ")}
    expected = {"NoNewPrivileges", "CapabilityBoundingSet/AmbientCapabilities",
                "SystemCallFilter", "UMask", "MemoryDenyWriteExecute",
                "MemoryDenyWriteExecute+ctypes", "RestrictAddressFamilies", "RestrictSUIDSGID",
                "RestrictNamespaces", "LockPersonality", "RestrictRealtime",
                "ProtectSystem=strict", "RuntimeDirectory", "RuntimeDirectoryMode", "PrivateTmp",
                "ProtectHome", "ProtectKernelTunables", "ProtectControlGroups",
                "ProtectKernelModules", "ProtectKernelLogs", "PrivateDevices",
                "ProtectProc=invisible", "ProcSubset=pid", "PrivateUsers"}
    assert expected <= directives, f"not probed: {sorted(expected - directives)}"


def test_journal_clean(vm_check: dict) -> None:
    _section(vm_check, "journal", ["journal free of sandbox errors",
                                   "no seccomp kills logged by the kernel"])


def test_a_masked_unit_stays_off_and_says_so(vm_check: dict) -> None:
    """Issue 50, item 2: bus activation starts the service at every scanguardctl call and
    dispatcher event, so only a mask keeps it off: a reapply of the connection (the dispatcher
    script) and a status as the unprivileged user leave it stopped, the bus is not even asked,
    status says it is masked with exit status 3, and after the unmask the next call starts it."""
    _section(vm_check, "off switch: systemctl mask", [
        "systemctl mask --now scanguard", "masked: the service is stopped",
        "masked: bgscan as NetworkManager set it",
        "the dispatcher script, run as NetworkManager runs it, exits 0 in silence",
        f"a reapply of {IFACE} and the dispatcher run leave it stopped",
        "... and the bus was not asked to start it",
        "scanguardctl status as sgcheck says it is masked, exit status 3",
        "... and did not start it", "systemctl unmask scanguard",
        "unmasked, scanguardctl status as sgcheck starts it by bus activation",
        "... the service is active again", "... started by the bus",
        f"... and follows {IFACE} again"])


def test_enabled_no_keeps_it_running_and_idle(vm_check: dict) -> None:
    """Issue 50, item 2: enabled = no in the settings file and a reload give back the bgscan a
    hold kept suspended, status (exit 3) and systemctl status say it is off, a hold is refused;
    the packaged file back, the same hold suspends bgscan again."""
    _section(vm_check, "off switch: enabled = no", [
        "a hold suspends bgscan before it is turned off", "systemctl reload with enabled = no",
        "the daemon gives bgscan back, the hold still there",
        "scanguardctl status as sgcheck says it is off by enabled = no, exit status 3",
        "systemctl status says it is off", "a hold without a command is refused, exit status 125",
        "systemctl reload with the packaged file", "on again: scanguardctl status exits 0",
        "on again: the hold still there suspends bgscan", "releasing that hold restores bgscan"])


def test_a_hold_without_a_command_lasts_until_sigterm(vm_check: dict) -> None:
    """Issue 50, item 1: `scanguardctl hold --reason R` holds until a signal, says so, and
    SIGTERM releases it (exit status 0, bgscan restored)."""
    _section(vm_check, "hold without a command", [
        "scanguardctl hold without a command suspends bgscan",
        "it says that it holds and how to end it", "scanguardctl status shows the hold",
        "it still holds after 6 s", "bgscan still suspended",
        "SIGTERM ends it with exit status 0", "and releases the hold: bgscan restored",
        "no hold left"])


def test_history_says_what_the_guard_did_and_what_it_takes(vm_check: dict) -> None:
    """Issue 50, item 7: on the fresh install `scanguardctl history` (as a member of
    systemd-journal) says plainly that nothing happened; after a guarded iperf3 upload during
    which an unprivileged user's `nmcli device wifi rescan`, allowed while idle, was refused
    through nm-scanguard's polkit rule and a scan asked of wpa_supplicant directly was aborted,
    it shows the spell, the refusal (naming the user and nmcli) and the abort, each with its
    time of day, in its table and its JSON; a user in neither journal group is told what it
    takes."""
    _section(vm_check, "history on a fresh install", [
        "scanguardctl history as a member of systemd-journal says plainly that nothing happened yet"])
    assert re.search(r"^      No guarded spells, refused or aborted scans since ", vm_check["out"], re.M)
    _section(vm_check, f"history of a guarded upload on {IFACE}", [
        "NetworkManager asks polkit",
        "sgcheck's nmcli device wifi rescan is allowed while idle",
        "the guard engages on the transfer", "other programs' scan requests refused now",
        "sgcheck's nmcli device wifi rescan is refused through polkit while guarding",
        "a scan asked of wpa_supplicant directly while guarding", "... is aborted",
        "bgscan restored once the link is quiet",
        "scanguardctl history --json as a member of systemd-journal: the spell, the refused "
        "request and the aborted scan",
        "scanguardctl history's table: each with its time, and who asked",
        "as sgcheck, in neither systemd-journal nor adm, history says what it takes"])
    # The lab's AP runs an iperf3 server: a real upload, not the hold that stands in without one.
    assert re.search(r"^NOTE  traffic: an iperf3 upload at 4 Mbit/s to ", vm_check["out"], re.M), \
        vm_check["out"]
    table = re.search(r"^PASS  scanguardctl history's table.*?\n((?:      .*\n)+)", vm_check["out"],
                      re.M)
    assert table and "scan refused" in table.group(1), vm_check["out"]
    print(f"history after the guarded upload:\n{table.group(1)}")


def test_remove_restores_bgscan_and_stops(vm_check: dict) -> None:
    _section(vm_check, "remove with a hold", [
        "a hold suspends bgscan", "apt-get remove", "service stopped",
        "bgscan restored on removal", "conffile kept until purge"])


def test_purge_leaves_nothing(vm_check: dict) -> None:
    _section(vm_check, "purge", [
        "apt-get purge", "package gone from dpkg", "/etc/scanguard gone", "/run/scanguard gone",
        "no unit symlinks or helper state left", "unit unknown to systemd",
        "every packaged file gone", "no byte-code left", "name no longer activatable"])
    assert "NOTE  system user scanguard kept" in vm_check["out"]
    assert vm_check["rc"] == 0 and "== 0 check(s) failed" in vm_check["out"], vm_check["out"]


def test_a_profile_private_to_a_user_is_shown_and_left_alone(vm_check: dict) -> None:
    """Issue 21: the daemon, as user scanguard, may not read a profile private to another user
    (connection.permissions): the status says so with the command that fixes it, the interface
    is not guarded (a hold leaves bgscan on), the journal has one line, and after the command
    the same hold suspends bgscan."""
    seen = vm_check["private"]
    assert "failed" not in seen, f"{seen['failed']}\n{seen.get('journal', '')}\n{seen.get('nm journal', '')}"
    assert seen["service user"] == "scanguard"
    assert seen["still active"], "NetworkManager deactivated the private profile"
    d = seen["private"]
    assert d["state"] == "disabled" and d["connection_id"] == "Café ☕ lab", d
    assert d["error"].startswith(f"{IFACE}: profile 'Café ☕ lab' is private to a user "
                                 "(connection.permissions): not guarded"), d
    assert d["error"].endswith(" +connection.permissions user:scanguard"), d
    assert f"problem: {d['error']}" in seen["status line"], seen["status line"]
    assert seen["held, unreadable"]["state"] == "disabled"
    assert seen["held, unreadable"]["bgscan"] not in ("", None), seen
    assert len(seen["log lines"]) == 1, seen["log lines"]
    assert seen["held, readable"] == {"bgscan": "", "state": "held", "error": ""}, seen
    assert seen["released"]["bgscan"] == seen["held, unreadable"]["bgscan"], seen
    print(f"private profile: shown {seen['seconds to show']:.1f} s after the change, guarded "
          f"{seen['seconds to guard']:.1f} s after `{seen['advice']}`; log line: "
          f"{seen['log lines'][0]}")


def _shown(seen: dict) -> str:
    return "\n".join(f"{k}: {v}" for k, v in seen.items())


def test_reload_with_a_bad_file_fails_with_the_reason(vm_check: dict) -> None:
    """Issue 34, item 7: the unit's ExecReload= runs `scanguardd --check-config` before SIGHUP,
    so a reload with a bad value fails, `systemctl status` shows why, and the daemon runs on
    with its settings; once the file is mended the reload passes."""
    seen = vm_check["reload"]
    assert "failed" not in seen, _shown(seen)
    assert seen["bad"]["rc"] != 0, _shown(seen)
    assert "scanguard.service" in seen["bad"]["err"] and "failed" in seen["bad"]["err"], _shown(seen)
    assert "threshold_mbit" in seen["status"] and "Café ☕" in seen["status"], _shown(seen)
    assert seen["running on, same process"], _shown(seen)
    assert seen["mended"]["rc"] == 0 and seen["running on after the mended reload"], _shown(seen)


def test_a_burst_of_calls_needs_one_thread_under_the_units_task_limit(vm_check: dict) -> None:
    """Issue 47, item 3: 300 concurrent GetRecentScanRequests from nobody, with TasksMax at
    the daemon's tasks plus 2 (a thread per look-up would exceed it): all answered, the same
    process, no thread error in the journal, the unit's TasksMax in force again."""
    seen = vm_check["burst"]
    assert "failed" not in seen, _shown(seen)
    assert seen["unit TasksMax"] == "8", _shown(seen)
    assert seen["TasksMax for the burst"] == str(seen["tasks before"] + 2), _shown(seen)
    assert seen["answers"] == {"ok": 300, "errors": []}, _shown(seen)
    assert seen["same process"] and not seen["thread errors"], _shown(seen)
    assert seen["tasks after"] <= seen["tasks before"] + 1, _shown(seen)
    print(f"burst: 300 calls answered with {seen['tasks before']} task(s) before and "
          f"{seen['tasks after']} after, under TasksMax={seen['TasksMax for the burst']}")


def test_upgrade_from_the_previous_release(vm_check: dict) -> None:
    """Issue 34, item 11: the previous release (built from git) guarding a transfer under a hold
    dies without restoring; this tree's package installed over it reads the old journal and puts
    bgscan back, keeps the administrator's conffile edit, and guards."""
    seen = vm_check["upgrade"]
    assert "failed" not in seen, _shown(seen)
    previous = seen["previous"]["version"]
    assert seen["version before"] == previous and seen["version after"] != previous, _shown(seen)
    assert seen["daemon version"] == f"scanguardd {seen['version after']}", _shown(seen)
    original = seen["bgscan before"]
    assert original, _shown(seen)
    assert seen["state under the transfer"] == "guarding", _shown(seen)
    assert seen["bgscan guarded and held"] == "" and IFACE in seen["journal file"], _shown(seen)
    assert seen["bgscan after the kill"] == "", "the old daemon restored bgscan before it died"
    assert seen["upgrade"]["rc"] == 0, _shown(seen)
    assert seen["bgscan restored"] == original, _shown(seen)
    assert seen["replay lines"] and re.search(r"replayed: [1-9]\d* restored", seen["replay lines"][0]), \
        _shown(seen)
    assert seen["conffile"].endswith("\n# Café ☕: a local edit\nrelease_after = 20\n"), _shown(seen)
    assert re.search(r"release_after\W+20\b", seen["check-config"]), seen["check-config"]
    assert seen["bgscan after a hold on the new release"] == original, _shown(seen)
    print(f"upgrade {previous} ({seen['previous']['commit'][:12]}) -> {seen['version after']}: "
          f"bgscan restored from the old journal in {seen['seconds to restore']:.1f} s; "
          f"conffile kept{' (new one as .dpkg-dist)' if seen['dpkg-dist'] else ''}")
