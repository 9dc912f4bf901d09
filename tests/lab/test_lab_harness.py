"""The lab's own harness: a check that fails in its body leaves nothing it started behind, and a
lab left astray is named and brought back to the start state every check verifies
(conftest.verified_start, Lab.check_scope, Lab.establish)."""

from __future__ import annotations

import time

import pytest

from .lab import AP_ADDR, REPO, STA_IF, WEAK_SIGNAL_DBM, StartState
from .scenario import SCANGUARDCTL, Guardd

pytestmark = pytest.mark.lab


def test_a_check_that_raises_leaves_no_daemon_traffic_diagnose_or_second_ap_behind(lab):
    t = time.monotonic()
    with pytest.raises(RuntimeError, match="the check's body fails"), lab.check_scope() as started:
        d = Guardd(lab).start()
        lab.start_traffic("upload", 300, ping_interval=0.5)
        lab.spawn(f"exec {SCANGUARDCTL} diagnose --seconds 300", name="harness-diagnose",
                  cwd=str(REPO))
        lab.start_second_ap(channel=1)
        running = lab.our_processes()
        assert d.proc.pid in running and len(running) >= 4, running  # daemon, iperf3, ping, diagnose
        assert lab.second_ap_up()
        raise RuntimeError("the check's body fails")
    assert {p.name for p in started} >= {d.proc.name, "hostapd2-stdout"}, started
    assert lab.our_processes() == {}, lab.our_processes()
    assert not lab.second_ap_up()
    assert lab.name_owner() is None, "the daemon's bus name outlived the check"
    assert lab.start_problems(StartState()) == []
    lab.say(f"harness: a check that raised left nothing of {len(started)} processes and the "
            f"second AP [{time.monotonic() - t:.0f} s]")


def test_a_lab_left_astray_is_named_and_brought_back_to_the_start_state(lab):
    t = time.monotonic()
    # What a check that died badly could leave: a process of ours started outside any check
    # (not stopped by a scope; started while connected: ping cannot start without a route),
    # and the station disconnected at a weak signal.
    stray = lab.vm.spawn(f"exec ping -i 1 {AP_ADDR}", "harness-stray-ping")
    lab.set_signal(WEAK_SIGNAL_DBM)
    lab.disconnect()
    try:
        problems = lab.start_problems(StartState())
        text = "; ".join(problems)
        for words in ("processes of ours still running", "medium's signals",
                      "the station is on no AP", f"{STA_IF} has no IPv4 address",
                      "NetworkManager's"):
            assert words in text, problems
        lab.establish(StartState(), "harness-astray")
        assert lab.start_problems(StartState()) == []
        assert not stray.running()
    finally:
        stray.stop()
    lab.say(f"harness: a lab left astray ({len(problems)} problems named) brought back "
            f"[{time.monotonic() - t:.0f} s]")


def test_a_debug_log_read_right_after_a_burst_of_lines_holds_them_all(lab):
    # wpa_supplicant's and hostapd's debug logs are copied from the guest's tmpfs by tail -F
    # (Lab.debug_log): a read right after an event must see it, as a direct write did.
    path = lab.debug_log("harness-copy")
    for burst in (1, 2):
        lab.check(f"seq 1 20000 | sed 's/^/burst {burst} line /' >> {path}")
        text = lab.log_text("harness-copy")
        assert text.endswith(f"burst {burst} line 20000\n"), text[-200:]
        assert text.count(f"burst {burst} line ") == 20000
