"""Plain regression tests for what the model rung found: each is one fixed sequence, run on the
same simulated machine and checked with the same invariant as test_model.py, so that a fix
stays fixed without waiting for Hypothesis to draw it again.  Which finding each holds down is
said in its docstring."""

from __future__ import annotations

import pytest

from tests.model.peers import NM_BGSCAN
from tests.model.test_model import ACCESS_DENIED, CAFE, Machine

pytestmark = pytest.mark.filterwarnings("ignore:coroutine .* was never awaited:RuntimeWarning")


@pytest.mark.parametrize("then_crash", ["sigkill", "lose_bus"])
def test_a_bad_settings_file_does_not_keep_the_next_start_from_restoring(then_crash):
    """Found 2026-11-25 (LoseBus, then Reload with a bad file): the next start read the broken
    file and exited 1 without replaying the journal, so a bgscan the previous instance had
    suspended stayed off.  A start that cannot guard now restores, then exits 1."""
    state = Machine()
    try:
        state.traffic(ifname="wlan0", mbit=50.0, then=6.0)
        assert any(n.bgscan == "" for n in state.world.wpa.live_nets()), "guard engaged"
        state.reload(config=f"[scanguard]\nthreshold_mbit = {CAFE}\n", then=0.5)
        getattr(state, then_crash)(then=0.0)
        state.traffic(ifname="wlan0", mbit=0.0, then=5.0)
        state.bgscan_is_safe()
        assert state.world.instance is None, "a start with a bad file does not guard"
        assert not state.world.end_state(), state.world.end_state()
    finally:
        state.teardown()


def test_a_write_racing_a_reactivation_at_the_same_instant_is_the_known_race():
    """Found 2026-11-25 while building the rung (a fault of the model, kept as a test of it):
    NetworkManager re-created the network between the daemon's read and its Set, at the same
    virtual instant as the read; the model compared times and called the daemon's put-back a
    restore over someone else's value.  It now orders wpa_supplicant's events by sequence, and
    the race the API cannot close (logged by the daemon) is recognised as such.  (Found with
    traffic on wlan0 too; since the guard reads Scanning when it starts, wlan0's Set came first
    and took the race, so only wlan1 is busy here.)"""
    state = Machine()
    try:
        state.advance(t=2.50000000523869)
        state.advance(t=0.0003)
        state.restart_nm(gap=0.0, then=0.0)
        state.traffic(ifname="wlan1", mbit=3.0, then=0.0)
        state.race(what="other-set", member=None, ifname="wlan1", bgscan=None, then=0.0)
        state.race(what="activate", member="Set", ifname="wlan1", bgscan="simple:30:-70:86400",
                   then=0.0)
        state.advance(t=7.0)
        state.bgscan_is_safe()
        assert any(n.raced for n in state.world.wpa.live_nets()), "the race happened"
    finally:
        state.teardown()


def test_another_program_writing_between_our_read_and_our_restore_is_the_known_race():
    """Found 2026-11-25 (a fault of the model, kept as a test of it): after a lost bus the next
    start's journal replay read our "", and another program wrote bgscan before the replay's
    Set arrived; the Set overwrote it.  No client of wpa_supplicant can prevent that (no
    compare-and-set), so the model counts a write after someone else's change since our last
    read as the race, not as a restore over someone else's value."""
    state = Machine()
    try:
        state.advance(t=0.0)
        state.traffic(ifname="wlan1", mbit=3.0, then=0.0)
        state.advance(t=4.0)
        state.race(what="other-set", member="Set", ifname="wlan1", bgscan=None, then=0.0)
        state.lose_bus(then=0.5)
        state.bgscan_is_safe()
        assert any(n.raced for n in state.world.wpa.live_nets()), "the race happened"
    finally:
        state.teardown()


def test_a_restart_right_after_a_reactivation_restores_the_suspend_it_cancelled():
    """Found 2026-11-25 by the busy check's engaged states: the guard suspended the network
    NetworkManager had just re-created, and `systemctl restart` came while that Set was on its
    way; stopping cancelled the suspend, so the guard had nothing to restore and the clean stop
    left our "" until the next instance replayed the journal.  The stop now restores what the
    journal names for the interface."""
    state = Machine()
    try:
        state.busy_for_a_while()
        state.activate(bgscan="simple:30:-70:86400", gap=0.0003, ifname="wlan0", then=0.001)
        state.systemctl_restart(then=0.0)
        state.bgscan_is_safe()
    finally:
        state.teardown()


def test_an_interface_recreated_without_a_gap_is_guarded_again():
    """Found 2026-11-25 by the busy check: NetworkManager removed and added wpa_supplicant's
    interface (a new path) in one instant; the guard kept calling the old path and never
    guarded again (tests/unit/daemon/guard/test_guard.py has the two calls that now look the path up anew)."""
    state = Machine()
    try:
        state.hold(client=0, interface="", reason=CAFE, then=0.0)
        state.busy_for_a_while()
        state.profile(data={"scanguard.signal_floor_dbm": "-40"}, ifname="wlan0", readable=True,
                      then=0.0)
        state.recreate_interface(ifname="wlan0", then=1.0)
        state.recreate_interface(ifname="wlan0", then=0.0)
        state.busy_for_a_while()
    finally:
        state.teardown()


def test_a_replay_that_waited_does_not_undo_a_guard_that_took_the_network_over():
    """Found 2026-11-25 (tests/unit/daemon/bgscan/test_suspension.py has Bgscan's side): after a lost
    bus and another program's write, the next instance's replay waited on a lost reply while the
    guard suspended the network anew; the replay then restored the value it had read before."""
    state = Machine()
    try:
        state.busy_for_a_while()
        state.lose_bus(then=0.0)
        state.other_program_sets_bgscan(ifname="wlan1", then=0.0, value="simple:60:-80:3600")
        state.fault(count=1, error="org.freedesktop.DBus.Error.Failed", kind="lost", member="Get",
                    t=0.001, then=0.0)
        state.busy_for_a_while()
        state.bgscan_is_safe()
    finally:
        state.teardown()


def test_a_suspension_under_a_re_created_interface_object_is_let_go():
    """Found 2026-11-25 in `make test`: a suspend whose Set and put-back replies were both lost
    kept a suspension on a network of an interface object that NetworkManager had meanwhile
    removed and added again; the guard counted itself engaged, the new object's network kept
    its bgscan, and releasing could never confirm the old network gone.  Since an unconfirmed
    Set across a removal is left in doubt instead of put back, this sequence no longer reaches
    that state (the suspension under the old object ends with its NetworkRemoved); the rule is
    held by tests/unit/daemon/guard/test_guard.py's
    test_a_suspension_under_a_recreated_interface_object_is_let_go."""
    state = Machine()
    try:
        state.busy_for_a_while()
        state.deactivate(ifname="wlan0", then=0.0)
        state.race(bgscan="simple:30:-70:86400", ifname="wlan0", member=None, then=0.0,
                   what="activate")
        state.fault(count=2, error="org.freedesktop.DBus.Error.Failed", kind="lost", member="Set",
                    t=0.001, then=0.0)
        state.busy_for_a_while()
        state.recreate_interface(ifname="wlan0", then=0.01)
        state.busy_for_a_while()
    finally:
        state.teardown()


def test_a_restart_racing_the_suspend_set_leaves_the_journal_naming_our_value():
    """Found 2026-11-25 in `make model`: `systemctl restart` began while wpa_supplicant
    handled the suspend's `Set` on a network that had just been activated."""
    state = Machine()
    try:
        state.leave(client=0, then=0.0)
        state.race(bgscan="simple:30:-70:86400", ifname="wlan0", member="Set", then=0.0,
                   what="activate")
        state.race(bgscan="simple:30:-70:86400", ifname="wlan0", member="Set", then=0.0,
                   what="daemon-restart")
        state.busy_for_a_while()
        state.bgscan_is_safe()
    finally:
        state.teardown()


def test_a_set_answered_no_reply_that_did_not_land_is_tried_again():
    """Found 2026-11-25 by the busy check: the suspend's Set got NoReply and was never carried
    out; the guard took it for applied and counted itself engaged, bgscan on, for as long as
    the link stayed busy (tests/unit/daemon/bgscan/test_suspension.py has the read-back).  The bus answers
    NoReply when wpa_supplicant leaves with the call pending: here it restarts just as the Set
    arrives."""
    state = Machine()
    try:
        state.restart_nm(gap=0.001, then=40.0)
        state.restart_nm(gap=1.0, then=0.0)
        state.sigkill(then=0.0)
        state.reload(config="[scanguard]\nthreshold_pps = 0\nrelease_below_mbit = 0.4\n",
                     then=5e-324)
        state.race(bgscan="simple:30:-70:86400", ifname="wlan0", member="Set", then=3.0,
                   what="wpa-restart")
        state.systemctl_restart(then=0.0)
        state.other_program_sets_bgscan(ifname="wlan0", then=0.0, value="simple:60:-80:3600")
        state.busy_for_a_while()
        state.release(client=2, then=6.588738675228872, which=2)
        state.busy_for_a_while()
    finally:
        state.teardown()


def test_no_put_back_over_a_new_object_when_the_lost_set_hit_the_old_one():
    """Found 2026-11-25 while adding the read-back after an unanswered Set: NetworkManager
    re-activated just before that read, so the Set had hit the old object; putting the old
    value back overwrote the new object's own bgscan.  A read-back without "" now means
    nothing of ours is at the path."""
    state = Machine()
    try:
        state.advance(t=0.0)
        state.fault(count=1, error="org.freedesktop.DBus.Error.Failed", kind="lost", member="Set",
                    t=0.001, then=0.0)
        state.busy_for_a_while()
        state.race(bgscan="simple:30:-65:300", ifname="wlan0", member=None, then=0.0,
                   what="activate")
        state.busy_for_a_while()
    finally:
        state.teardown()


def test_a_restart_for_a_bad_file_is_the_only_process_until_it_exits():
    """Found 2026-11-25 by a 6000-sequence run (a fault of the model, kept as a test of it): a
    crash during the stop of `systemctl restart` left a Restart=on-failure timer, and the
    restart's own start (a bad file: restore, then exit 1) was still waiting for a lost reply
    when the timer and then the settling started two more processes beside it.  systemd starts
    a unit once; the model now does too."""
    state = Machine()
    try:
        state.busy_for_a_while()
        state.crash_in_journal_write(then=0.0)
        state.reload(config=f"[scanguard]\nthreshold_mbit = {CAFE}\n", then=0.0)
        state.systemctl_restart(then=0.0)
        state.fault(count=1, error="org.freedesktop.DBus.Error.Failed", kind="lost", member=None,
                    t=0.001, then=0.0)
        state.reload(config="", then=0.5)
        state.bgscan_is_safe()
    finally:
        state.teardown()


def test_the_busy_check_waits_for_the_journal_retry_after_a_silent_peer():
    """Found 2026-11-25 by a 6000-sequence run (the model's check was too strict): six calls in a
    row got no reply, so the journal's retry had backed off; the busy check came 16 s before
    the retry that restored an interface the settings had just disabled.  The daemon restores
    on that retry (at most JOURNAL_RETRY_MAX after the peer answers again)."""
    state = Machine()
    try:
        state.profile(data={}, ifname="wlan1", readable=False, then=0.0)
        state.busy_for_a_while()
        state.lose_bus(then=0.0)
        state.fault(count=6, error="org.freedesktop.DBus.Error.Failed", kind="lost", member=None,
                    t=0.001, then=0.0)
        state.busy_for_a_while()
        state.busy_for_a_while()
        state.reload(config="[scanguard]\nenabled = no\n", then=0.0)
        for _ in range(4):
            state.busy_for_a_while()
        state.bgscan_is_safe()
    finally:
        state.teardown()


def test_a_restart_while_a_start_with_a_bad_file_restores_stops_that_process_first():
    """Found 2026-11-25 by the model rung in make test (a fault of the model): `systemctl
    restart` while a start with a bad settings file waited on wpa_supplicant (a lost reply)
    stopped nothing, so the new instance found the name taken and the settled end still had our
    "".  SIGTERM ends such a process at once (service.main installs no handler on that path)."""
    state = Machine()
    try:
        state.busy_for_a_while()
        state.lose_bus(then=0.0)
        state.fault(count=1, error="org.freedesktop.DBus.Error.Failed", kind="lost", member=None,
                    t=0.001, then=0.0)
        state.reload(config=f"[scanguard]\nthreshold_mbit = {CAFE}\n", then=0.0)
        state.busy_for_a_while()
        state.reload(config="", then=0.0)
        state.systemctl_restart(then=0.01)
        assert "stop:restoring" in state.world.events, "the restart met the restoring process"
        state.bgscan_is_safe()
    finally:
        state.teardown()


# Found by the model rung in make test on 2026-11-25 at 00:25 UTC; both sequences fail the same
# way on 9cdcd79 (the tree before that session), so neither comes from issue 23's change.  The
# first was a daemon liveness defect, the second a fault of the model.
def test_a_recreated_interface_after_a_weak_signal_is_guarded_again():
    """Found 2026-11-25 by the busy check.  The hold reads wlan1 at -78 dBm (released for a
    weak signal); NetworkManager re-creates wlan1's interface object in the same instant
    (gapless: the guard is kept, with its policy); the busy check sets the new object's signal
    to -20 dBm.  The daemon learns of the new object only from a failing call: its next
    SignalPoll, 5 s later, on the old path (ObjectGone).  Guard._signal resets the path but
    Policy.observe_signal(now, None) records that failure as the poll, so the new object is
    read a poll interval later still (here 6 s: 12.008 - 7.008000000000001 < 5 in virtual time)
    and the guard stays released-weak-signal on the removed object's -78 dBm until 13.01,
    past the check at 12.01.  Fixed in Guard.kick: a poll of a gone object is no reading, so
    the new object is read at the next sample."""
    state = Machine()
    try:
        state.signal(ifname="wlan1", rssi=-78, then=0.0)
        state.hold(client=0, interface="", reason=CAFE, then=0.01)
        state.recreate_interface(ifname="wlan1", then=0.0)
        state.busy_for_a_while()
    finally:
        state.teardown()


def test_a_stop_after_a_restart_raced_into_a_set_restores_or_keeps_the_journal():
    """Found 2026-11-25 by the model rung in make test (a fault of the model): the raced
    wpa_supplicant restart (gap 0.5 s) was still down when the sequence ended, and settling
    brought it back at once, 5 ms before the raced restart's own return started it a second
    time.  That second start took a new unique name while the well-known name stayed with the
    first, so the bus dropped every reply: the daemon's calls timed out (it kept wlan1's entry
    in the journal, rightly) while peers_healthy() saw a running wpa_supplicant.  A restart now
    replaces the pending return, and a peer started while it runs is an error of the model."""
    state = Machine()
    try:
        state.busy_for_a_while()
        state.restart_supplicant(gap=0.01, then=0.0)
        state.advance(t=0.01)
        state.advance(t=1.5)
        state.race(bgscan="simple:30:-70:86400", ifname="wlan0", member="Set", then=3.0,
                   what="wpa-restart")
        state.bgscan_is_safe()
    finally:
        state.teardown()


def test_a_hold_being_taken_keeps_its_holder_watched_when_another_is_released():
    """Found 2026-11-26 by CI's model rung (a daemon defect; bgscan stayed off on both
    interfaces): one client asked for two holds, and released the first while the second was
    still being authorised.  The release stopped watching the client's leaving, since only
    committed holds counted; the second hold then committed unwatched and outlived its holder.
    Reservations count now, and concurrent Holds of one client share one AddMatch."""
    state = Machine()
    try:
        state.hold(client=1, interface="", reason=CAFE, then=0.001)
        state.hold(client=1, interface="", reason=CAFE, then=0.001)
        state.release(client=1, then=0.0003, which=0)
        state.bgscan_is_safe()
    finally:
        state.teardown()


# Found by the model rung in make test on 2026-11-26 at 03:50 UTC (first failing sequence 352 of
# a worker); it failed the same way on 80a1782, so it did not come from that session's changes.
def test_a_lost_set_after_a_weak_signal_is_guarded_again_once_the_signal_is_back():
    """A daemon defect (liveness: bgscan on while the link was busy).  wlan0 fell below the
    floor; the release's restoring Set landed but its reply was lost, so the suspension stayed
    live and the guard counted itself engaged; when the signal came back it did not suspend
    again.  Bgscan.restore now reads back after an unanswered Set, and a suspension whose
    read-back failed too is read again before the guard counts itself engaged."""
    state = Machine()
    try:
        state.busy_for_a_while()
        state.restart_nm(gap=0.0, then=0.0)
        state.signal(ifname="wlan0", rssi=-78, then=0.0)
        state.fault(count=1, error="org.freedesktop.DBus.Error.Failed", kind="lost", member="Set",
                    t=0.001, then=0.0)
        state.signal(ifname="wlan1", rssi=-40, then=4.0)
        state.busy_for_a_while()
    finally:
        state.teardown()


def test_a_suspend_answered_late_across_two_wpa_supplicant_restarts_is_not_kept():
    """Found 2026-11-26 by `make model-long SEQUENCES=10000` (a daemon defect; liveness:
    bgscan on while the link was busy).  wpa_supplicant restarted; the guard's suspend of the
    new process's network got its Set answer 11 s late, and a second restart came meanwhile;
    the read-back went to the third process, which had no network yet, so the Set was taken
    for applied, and the suspension became live on a network that was gone: the guard counted
    itself engaged and never suspended the new one.  A suspend that spans a restart is now
    journaled again and read before the guard counts itself engaged."""
    state = Machine()
    try:
        state.busy_for_a_while()
        state.fault(count=1, error="org.freedesktop.DBus.Error.Failed", kind="late", member="Set",
                    t=11.0, then=0.0)
        state.restart_supplicant(gap=0.0003, then=11.0)
        state.restart_supplicant(gap=0.0, then=0.0003)
        state.busy_for_a_while()
    finally:
        state.teardown()


def test_a_restart_while_a_suspend_is_under_way_keeps_its_journal_entry():
    """Found 2026-11-26 by `make model-long SEQUENCES=10000` (a daemon defect of the safety
    kind; it fails the same way on 82b2be5): wpa_supplicant stalled on a read, the hold's Sets
    were sent once it recovered, and it restarted before handling them; the new process, its
    networks already added again, handled them.  supplicant_restarted had dropped every journal entry,
    those of the suspends under way too, so their "" stood unjournaled.  It now keeps them."""
    state = Machine()
    try:
        state.advance(t=0.0003)
        state.fault(count=1, error="org.freedesktop.DBus.Error.Failed", kind="late", member=None,
                    t=3.0, then=0.0)
        state.hold(client=0, interface="", reason=CAFE, then=1.0)
        state.recover(then=0.001)
        state.restart_supplicant(gap=0.0003, then=0.0)
    finally:
        state.teardown()


def test_a_leftover_whose_take_over_failed_after_the_replay_ended_is_restored():
    """A daemon defect, found by the systematic mode from its "left-over" situation (bgscan
    stayed off after settling): the replay at start could not restore (look-ups refused); a
    hold had the guard take wlan0's entry over while the journal's retry ran, which restored
    wlan1's and, counting nothing left, stopped; the take-over's read then went unanswered,
    and the entry fell back to the replay with no retry left to run it.  An entry being taken
    over now counts as left to the replay until the take-over ends."""
    state = Machine()
    try:
        state.busy_for_a_while()
        state.fault(kind="error", member="GetInterface", error=ACCESS_DENIED, t=0.001, count=6,
                    then=0.0)
        state.sigkill(then=0.0)
        state.advance(t=1.0)
        state.hold(client=0, reason=CAFE, interface="wlan0", then=0.0)
        state.fault(kind="lost", member="Get.Properties", error=ACCESS_DENIED, t=0.001, count=1,
                    then=0.0)
        state.busy_for_a_while()
        state.bgscan_is_safe()
    finally:
        state.teardown()


# Found 2026-11-26 by `pytest tests/model/test_model.py` (2000 sequences, the derandomized draw:
# first failing sequence 588, the first case); it failed the same way on c89bf59.
@pytest.mark.parametrize("read_back_lost", [False, True])
def test_a_lost_set_then_a_reactivation_without_bgscan_gets_no_put_back(read_back_lost):
    """A daemon defect of the safety kind (bgscan ended as NetworkManager did not set it).  The
    guard's suspend of the re-created interface's network sent its Set "" and the reply was
    lost; NetworkManager then re-activated with a BSSID-locked profile (no bgscan key) at the
    same network path.  The read-back after the timeout read the new object: no bgscan key.
    That was taken for a failed read (both were None), so the Set counted as assumed applied,
    the removal sent it to the put-back, and the put-back wrote the old object's value on an
    object the daemon had just read without "".  A read-back that answers is evidence: no
    key is not our "", so the Set counts as not applied there and nothing is written.
    With the read-back's reply lost too (`read_back_lost`, found while fixing the first) the
    daemon never saw that answer, and the assumed Set went to the same put-back: an assumed
    Set across a removal is now left in doubt instead, read before it counts, and restored
    only where our "" is read."""
    state = Machine()
    try:
        state.busy_for_a_while()
        state.fault(count=1, error=ACCESS_DENIED, kind="lost", member="Set", t=0.001, then=0.0)
        state.recreate_interface(ifname="wlan0", then=1.0)
        state.activate(bgscan=None, gap=0.0003, ifname="wlan0", then=0.0)
        if read_back_lost:
            state.fault(count=1, error=ACCESS_DENIED, kind="lost", member="Get.Properties",
                        t=0.001, then=11.0)
        state.bgscan_is_safe()
    finally:
        state.teardown()


# ---- roaming by targeted scans (issue 35) -----------------------------------------------------

def _guarding_with_a_second_ap(state: Machine) -> None:
    """wlan0 busy and guarded, a second access point of its network on another channel known
    to the daemon (another program's scan of every channel found it)."""
    state.second_ap(ifname="wlan0", same=True, then=0.0)
    state.scan(ifname="wlan0", then=11.0)
    state.traffic(ifname="wlan0", mbit=50.0, then=8.0)
    guard = state.world.instance.daemon.guards["wlan0"]
    assert guard.state == "guarding"
    assert [c["bssid"] for c in guard.targeted.candidates_status() if not c["current"]] == \
        ["02:00:00:00:00:02"], "the second access point is a candidate"


def _daemon_scans(state: Machine) -> list[tuple[int, ...]]:
    """The channels of every scan the running daemon started on wlan0 (() every channel)."""
    daemon = state.world.instance.conn.unique
    return [channels for _, ifname, own, channels in state.world.wpa.scans
            if ifname == "wlan0" and own == daemon]


@pytest.mark.parametrize("itself", [True, False], ids=["wpa_supplicant-moves", "roam-asked"])
def test_a_fade_with_a_second_access_point_known_roams_by_a_targeted_scan(itself):
    """Busy on AP1 (2412 MHz) with AP2 (5500 MHz) known; AP1 fades below the floor while AP2 is
    strong.  The guard keeps bgscan "" (roaming), scans only the two channels, and the station
    moves to AP2: by wpa_supplicant's own selection on the scan's results, or (when its
    throughput estimate keeps it) by the Roam the guard asks for.  Then guarding again, with no
    scan of every channel at any point."""
    state = Machine()
    try:
        _guarding_with_a_second_ap(state)
        world, guard = state.world, state.world.instance.daemon.guards["wlan0"]
        state.fade(ifname="wlan0", itself=itself, then=0.0)
        seen = set()
        for _ in range(16):
            state.advance(t=0.5)
            state.bgscan_is_safe()
            seen.add(guard.state)
            assert world.wpa.ifaces["wlan0"].current.bgscan == "", "bgscan kept suspended"
        iface = world.wpa.ifaces["wlan0"]
        assert "roaming" in seen and guard.state == "guarding"
        assert (iface.bss.bssid, iface.rssi) == ("02:00:00:00:00:02", -45)
        assert _daemon_scans(state) == [(2412, 5500)]
        assert world.wpa.counts.get("roamed on request", 0) == (0 if itself else 1)
        assert guard.targeted.roams == (0 if itself else 1)
    finally:
        state.teardown()


# The scans the daemon started on wlan0 in each case: the targeted one (if it started), then,
# after the fallback, one of every channel.
TARGETED, FULL = (2412, 5500), ()


@pytest.mark.parametrize("member,kind,scans", [
    ("Scan", "error", [FULL]), ("Scan", "slow", [TARGETED]),
    ("Roam", "error", [TARGETED, FULL]), ("Roam", "lost", [TARGETED])])
def test_a_fault_in_the_targeted_path_falls_back_to_a_scan_of_every_channel(member, kind, scans):
    """The same fade with wpa_supplicant's own selection keeping the station on AP1, and the
    targeted scan or the Roam meeting a fault: refused, or not answered (the Scan handled only
    after a 25 s stall; the Roam's reply lost, its move made all the same, so the guard sees
    the station move and goes on guarding).  When the station has not left the fade, the
    guard gives up, restores bgscan and asks for one scan of every channel (roam_scans =
    full's path); after the stalled Scan, that one is refused ("Scan request rejected": the
    targeted scan, handled at last, is running) and bgscan's own scans go on."""
    state = Machine()
    try:
        _guarding_with_a_second_ap(state)
        world, guard = state.world, state.world.instance.daemon.guards["wlan0"]
        state.fault(kind=kind, member=member, error=ACCESS_DENIED, t=25.0, count=1, then=0.0)
        state.fade(ifname="wlan0", itself=False, then=0.0)
        for _ in range(40):
            state.advance(t=1.0)
            state.bgscan_is_safe()
        iface = world.wpa.ifaces["wlan0"]
        assert _daemon_scans(state) == scans
        if (member, kind) == ("Roam", "lost"):
            assert (iface.bss.bssid, guard.state) == ("02:00:00:00:00:02", "guarding")
            assert iface.current.bgscan == ""
        else:
            assert iface.bss.bssid == "02:00:00:00:00:01", "nothing moved the station"
            assert guard.state == "released-weak-signal"
            assert iface.current.bgscan == iface.current.expected, "bgscan restored"
    finally:
        state.teardown()


# Found 2026-11-27 by the sampled rung (`python3 -m tests.model.parallel --seed 20261126`, the
# first worker's sequence 214, there without a second access point; with one known, as here,
# the check of roam_checks.py holds it).
def test_a_fade_read_while_a_suspend_is_under_way_still_takes_the_targeted_path():
    """Issue 35's rule (not bgscan's safety): with a second access point known, a restarted
    daemon reloads its settings, the signal is already below the floor, and a hold comes.  The
    hold's kick reads the weak signal while the reconcile of the reload's device sync is
    suspending bgscan for the hold.  The targeted path takes the fade all the same (it does not
    wait for the suspension): no restore and no scan of every channel once the suspend lands,
    which would leave the channel for seconds although the targeted path can roam in one."""
    state = Machine()
    try:
        state.second_ap(ifname="wlan0", same=True, then=0.0)
        state.scan(ifname="wlan0", then=11.0)
        state.systemctl_restart(then=0.0)
        state.reload(config="", then=0.0)
        state.fade(ifname="wlan0", itself=False, then=0.001)
        state.hold(client=0, interface="", reason=CAFE, then=0.0)
        state.advance(t=0.01)
        state.bgscan_is_safe()
    finally:
        state.teardown()


# Found 2026-11-27 by the same run's second worker (seed 20261127, sequence 540, shrunk).
def test_a_fade_read_while_a_stalled_suspend_lands_still_takes_the_targeted_path():
    """The same rule by another way in: a second access point of each network seen by the
    connect scan after a wpa_supplicant restart, the next read stalled (wpa_supplicant hangs
    before handling it) while the guard suspends, and the fade read before that suspend lands:
    the targeted path, not a restore and a scan of every channel when it lands."""
    state = Machine()
    try:
        for _ in range(18):
            state.busy_for_a_while()
        state.crash_in_journal_write(then=0.0)
        state.busy_for_a_while()
        state.crash_in_journal_write(then=7.629394531250014e-06)
        state.restart_supplicant(gap=9.0, then=0.0)
        state.second_ap(ifname="wlan0", same=True, then=0.0)
        state.advance(t=0.0003)
        state.second_ap(ifname="wlan1", same=True, then=5.000000000000002)
        state.fault(count=1, error=ACCESS_DENIED, kind="hang-before", member="Get", t=0.001,
                    then=0.0)
        state.busy_for_a_while()
        state.fade(ifname="wlan0", itself=False, then=0.0)
        state.bgscan_is_safe()
    finally:
        state.teardown()


# NetworkManager killed while guarding (World.crash_nm): on its return the daemon stops both
# guards while wpa_supplicant keeps their networks and our "".
def test_a_stop_left_to_the_replay_while_its_pass_runs_gets_another_pass():
    """wlan0's stop refused: its entry goes to the journal's retry, whose pass reads the
    entries no guard holds, while wlan1's guard is still stopping; wlan1's stop is refused too
    and leaves its entry to the retry after that pass began.  The retry makes one more pass, so
    wlan1's bgscan is restored before the next start."""
    state = Machine()
    try:
        state.busy_for_a_while()
        state.fault(kind="error", member="Set", error=ACCESS_DENIED, t=0.001, count=1, then=0.0)
        state.crash_nm(gap=1.0, then=0.0)
        state.fault(kind="error", member="Set", error=ACCESS_DENIED, t=0.001, count=1, then=0.0)
        state.busy_for_a_while()
        state.bgscan_is_safe()
    finally:
        state.teardown()


@pytest.mark.parametrize("restart", ["race", "sampled"])
def test_a_clean_stop_restores_what_no_guard_holds(restart):
    """A stopped guard's restore refused, its entry left to the journal's retry; then a clean
    stop (systemctl restart), which cancels the retry.  The stop restores that entry too, at
    once: it is this instance's "", not the next start's to find.  ("sampled": the sampled
    rung's sequence, seed 20261126, shrunk.)"""
    state = Machine()
    try:
        state.busy_for_a_while()
        if restart == "race":
            state.fault(kind="error", member="Set", error=ACCESS_DENIED, t=0.001, count=1,
                        then=0.0)
            state.crash_nm(gap=1.0, then=0.0)
            state.race(what="daemon-restart", member="Set", ifname="wlan0", bgscan=NM_BGSCAN,
                       then=0.0)
            state.busy_for_a_while()
        else:
            state.crash_nm(gap=5.0, then=0.0)
            state.second_ap(ifname="wlan0", same=False, then=4.0)
            state.race(bgscan=NM_BGSCAN, ifname="wlan0", member=None, then=2.0,
                       what="daemon-restart")
        state.bgscan_is_safe()
    finally:
        state.teardown()


def test_a_walk_before_the_floor_is_looked_at_and_roamed_with_bgscan_kept_off():
    """Busy on AP1 with AP2 known and strong; AP1's signal falls to -74 dBm, above the floor
    (-75) and past the walk's first look (-73): the guard scans the two channels (a walk scan,
    never aborted), wpa_supplicant moves to AP2 on its results (14 dB stronger), and the guard
    goes on guarding, bgscan "" all along and no scan of every channel."""
    state = Machine()
    try:
        _guarding_with_a_second_ap(state)
        world, guard = state.world, state.world.instance.daemon.guards["wlan0"]
        state.signal(ifname="wlan0", rssi=-74, then=0.0)
        for _ in range(8):
            state.advance(t=0.5)
            state.bgscan_is_safe()
            assert guard.state == "guarding"
            assert world.wpa.ifaces["wlan0"].current.bgscan == "", "bgscan kept suspended"
        assert _daemon_scans(state) == [(2412, 5500)]
        assert [s.kind for s in guard.roaming.own] == ["walk"]
        assert world.wpa.ifaces["wlan0"].bss.bssid == "02:00:00:00:00:02"
        assert guard.targeted.roams == 0
        assert "by wpa_supplicant's own choice, after a walk scan" in guard.status().last_move
    finally:
        state.teardown()


def test_the_settings_files_enabled_no_is_not_undone_by_a_profiles_yes():
    """Found 2026-11-29 by the gate's seed once `enabled = no` in the settings file became the
    administrator's off switch: the model still judged a profile's `scanguard.enabled=yes` to
    turn guarding back on and called the idle guard's untouched bgscan a failure.  With the
    file's no, nothing is guarded whatever the profile says, and bgscan stays NetworkManager's."""
    state = Machine()
    try:
        state.reload(config="[scanguard]\nenabled = no\n", then=0.0)
        state.profile(data={"scanguard.enabled": "yes"}, ifname="wlan0", readable=True, then=0.0)
        state.busy_for_a_while()
        assert state.world.should_guard("wlan0") is False
        assert all(n.bgscan == NM_BGSCAN for n in state.world.wpa.live_nets())
        state.bgscan_is_safe()
    finally:
        state.teardown()


def test_a_polkit_check_cut_short_by_a_kill_leaves_no_task_failing_after_it():
    """Found 2026-12-04 by make model-long (seed 684268312): a hold asked polkit, and a SIGKILL
    cancelled its check; the withdrawal the cancellation starts then called on the closed
    connection and its EOFError went unretrieved.  A killed process runs nothing more (its
    calls now stop it there), and the daemon takes a connection closing under a withdrawal as
    the end of the check (tests/api/test_api_unit.py)."""
    state = Machine()
    try:
        state.hold(client=0, interface="", reason=CAFE, then=0.001)
        state.advance(t=0.0003)
        state.deactivate(ifname="wlan0", then=0.0003)
        state.sigkill(then=0.0003)
        state.bgscan_is_safe()
        state.busy_for_a_while()
        state.bgscan_is_safe()
    finally:
        state.teardown()


def test_a_guard_stopped_with_its_roaming_scan_on_the_way_does_not_start_it():
    """Found 2026-12-04 by make model-long (seed 684268312): wpa_supplicant restarted during a
    fade, NetworkManager re-activated wlan0, and a hold's kick of the old guard, still under
    way, asked for its targeted scan after that guard stopped.  The new guard on wlan0 took the
    scan for another program's and aborted the daemon's own roaming scan.  A guard that stops
    asks for no scan of its own."""
    state = Machine()
    try:
        state.sigkill(then=0.0)
        state.restart_supplicant(gap=0.0, then=0.0003)
        state.sigkill(then=0.5)
        state.restart_supplicant(gap=1.4124003984664843e-308, then=0.0)
        state.restart_supplicant(gap=0.0003, then=0.01)
        state.fade(ifname="wlan0", itself=False, then=0.0)
        state.restart_supplicant(gap=0.001, then=0.0)
        state.hold(client=0, interface="", reason=CAFE, then=0.01)
        state.bgscan_is_safe()
    finally:
        state.teardown()


def test_a_stop_whose_restore_loses_the_bus_keeps_the_journal_for_the_next_start():
    """Found 2026-12-04 by make model-long (seed 684268311): a `systemctl restart` stopped the
    daemon and its stop replayed the journal; the bus dropped the daemon's connection during
    that replay, and the EOFError of the call it waited on rose out of the stop.  A closed
    connection is now a D-Bus error like any call that got no answer (peers.bus.call): the
    entry stays in the journal and the next start restores it."""
    state = Machine()
    try:
        state.hold(client=0, interface="", reason=CAFE, then=0.0)
        state.advance(t=0.01)
        state.race(bgscan=NM_BGSCAN, ifname="wlan0", member=None, then=0.0,
                   what="daemon-restart")
        state.fault(count=1, error=ACCESS_DENIED, kind="lost", member="Get", t=0.001, then=0.0)
        state.lose_bus(then=1.0)
        state.lose_bus(then=0.0003)
        state.bgscan_is_safe()
    finally:
        state.teardown()


def test_a_stop_that_cancels_a_journal_retry_as_its_call_fails_ends():
    """Found 2026-12-04 by the gate's seed once a closed connection became a BusError: the bus
    was lost while the journal's retry waited on a call; on Python 3.11 wait_for handed the
    retry the call's error instead of the stop's cancellation (CPython gh-86296), the retry
    took it as a failed replay and slept again, and the stop waited for it forever.
    peers.bus.call raises a pending cancellation instead of the call's outcome."""
    state = Machine()
    try:
        state.restart_nm(gap=0.01, then=1.0)
        state.restart_nm(gap=3.0, then=0.0)
        state.busy_for_a_while()
        state.second_ap(ifname='wlan1', same=False, then=0.0)
        state.fault(count=1, error='org.freedesktop.DBus.Error.AccessDenied', kind='hang-before', member='Get.BSSs', t=11.0, then=1.0)
        state.fault(count=1, error='fi.w1.wpa_supplicant1.Interface.ScanError', kind='hang-before', member=None, t=0.001, then=3.0)
        state.sigkill(then=0.3333333333333333)
        state.other_program_sets_bgscan(ifname='wlan0', then=0.0, value='learn:10:-60:600')
        state.sigkill(then=16.0)
        state.busy_for_a_while()
        state.sigkill(then=2.225073858507203e-309)
        state.release(client=1, then=0.0, which=3)
        state.release(client=2, then=0.0003, which=2)
        state.recreate_interface(ifname='wlan1', then=1.1)
        state.release(client=2, then=0.0003, which=2)
        state.reload(config='[scanguard]\nrelease_after = 2\nengage_after = 1\nsample_interval = 0.5\n', then=2.220446049250313e-16)
        state.busy_for_a_while()
        state.crash_nm(gap=16.0, then=0.0)
        state.other_program_sets_bgscan(ifname='wlan0', then=2.00001, value='simple:60:-80:3600')
        state.restart_nm(gap=3.0, then=0.0)
        state.lose_bus(then=0.0)
        state.bgscan_is_safe()
    finally:
        state.teardown()


def test_a_roaming_scan_refused_while_our_own_runs_does_not_make_that_one_someone_elses():
    """Found 2026-12-05 by a fresh-seed model run (`python3 -m tests.model.parallel --jobs 2
    --sequences 16000 --seed 3237577631 --only-machine`, worker seed 3237577632): after two
    NetworkManager restarts and a wpa_supplicant restart during a fade, the guard's targeted
    scan started, and a second one it asked for was rejected (a scan was running).  The refusal
    forgot the running scan was ours, and the guard aborted its own roaming scan when guarding
    resumed.  A refused request now leaves a scan of ours that runs ours."""
    state = Machine()
    try:
        state.bgscan_is_safe()
        state.leave(client=1, then=0.0)
        state.deactivate(ifname="wlan0", then=0.0)
        state.deactivate(ifname="wlan1", then=0.001)
        state.deactivate(ifname="wlan0", then=0.0)
        state.crash_in_journal_write(then=0.0)
        state.traffic(ifname="wlan0", mbit=3.0, then=0.0)
        state.fade(ifname="wlan0", itself=False, then=0.0)
        state.hold(client=0, interface="wlan1", reason=CAFE, then=1.5)
        state.activate(bgscan=NM_BGSCAN, gap=0.0, ifname="wlan0", then=0.0)
        state.fault(count=1, error=ACCESS_DENIED, kind="hang-before", member="Get", t=0.001,
                    then=0.0)
        state.restart_nm(gap=0.001, then=40.0)
        state.fault(count=1, error=ACCESS_DENIED, kind="lost", member=None, t=0.001, then=0.0)
        state.restart_nm(gap=0.0003, then=0.0)
        state.restart_supplicant(gap=0.0, then=1.0)
        state.bgscan_is_safe()
    finally:
        state.teardown()


def test_a_scan_asked_for_as_wpa_supplicant_restarts_is_ours_if_the_new_process_starts_it():
    """Found 2026-12-05 by a fresh-seed model run (`python3 -m tests.model.parallel --jobs 2
    --sequences 30000 --seed 1792946409 --only-machine`, worker seed 1792946410): wpa_supplicant
    restarted just after the suspend's Set on a fading link; the guard's targeted Scan, sent
    before it heard of the restart, reached the new process, which started it.  Hearing of the
    restart then forgot that scan was ours, and the guard aborted it as another program's.  A
    restart now leaves a request on its way to its answer."""
    state = Machine()
    try:
        state.bgscan_is_safe()
        state.advance(t=0.0003)
        state.hold(client=0, interface="wlan1", reason=CAFE, then=0.0)
        state.advance(t=0.0)
        state.signal(ifname="wlan1", rssi=-78, then=0.0)
        state.restart_supplicant(gap=0.0, then=0.0)
        state.race(bgscan=NM_BGSCAN, ifname="wlan0", member="Set", then=1.0,
                   what="wpa-restart-after")
        state.bgscan_is_safe()
    finally:
        state.teardown()


def test_a_reactivation_keeps_the_roaming_scan_the_guard_before_asked_for_ours():
    """Found 2026-12-05 by a fresh-seed model run (`python3 -m tests.model.parallel --jobs 2
    --sequences 20000 --seed 1706357889 --only-machine`, worker seed 1706357889): a weak signal
    released wlan0's bgscan and its guard asked for a scan of every channel; NetworkManager
    restarted and re-activated wlan0, and the new guard, held before it read the signal,
    aborted that scan as one running when it engaged.  A guard now carries on the scan of ours
    the guard before it on the interface left running."""
    state = Machine()
    try:
        state.hold(client=0, interface="", reason=CAFE, then=0.01)
        state.signal(ifname="wlan0", rssi=-78, then=0.0)
        state.recover(then=5.0)
        state.crash_nm(gap=0.0, then=0.001)
        state.activate(bgscan=NM_BGSCAN, gap=0.0003, ifname="wlan0", then=0.01)
        state.bgscan_is_safe()
    finally:
        state.teardown()


def test_a_sync_while_the_targeted_path_reads_the_station_does_not_scan_every_channel():
    """Found 2026-12-05 by a fresh-seed model run (`python3 -m tests.model.parallel --jobs 2
    --sequences 20000 --seed 464344138 --only-machine`, worker seed 464344139): the signal fell
    below the floor on a busy wlan0 with a second access point known; while the targeted path
    read CurrentBSS (its answer lost), the sync a profile change started reconciled the guard,
    found the policy WEAK and released bgscan for a scan of every channel.  The targeted path
    now takes the fade on before it awaits anything."""
    state = Machine()
    try:
        state.second_ap(ifname="wlan0", same=True, then=0.0)
        state.sigkill(then=0.0)
        state.recreate_interface(ifname="wlan0", then=0.0)
        state.busy_for_a_while()
        state.recreate_interface(ifname="wlan0", then=0.0)
        state.fault(count=1, error=ACCESS_DENIED, kind="error", member=None, t=0.001, then=1.0)
        state.fault(count=1, error=ACCESS_DENIED, kind="lost", member="Get", t=0.001, then=0.0)
        state.fade(ifname="wlan0", itself=False, then=4.0)
        state.profile(data={}, ifname="wlan0", readable=True, then=0.01)
        state.bgscan_is_safe()
    finally:
        state.teardown()
