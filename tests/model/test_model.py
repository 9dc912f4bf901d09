"""The model rung: thousands of generated sequences against scanguardd's real logic, in-process.

The end-to-end fault rung (tests/fault) runs the daemon as a process on a real bus, a few dozen
sequences per run.  This one runs the same code -- Daemon, Api, Guard, Bgscan, Holds,
Journal, Policy, unchanged -- against simulated peers on an in-process bus with a virtual clock
(tests/model/world.py), so a sequence of minutes costs milliseconds and thousands of them fit in
`make test`.  The promise checked is the one the product makes: bgscan ends as NetworkManager
(or another program) set it.

After every step (Hypothesis `@invariant`):
- no Set ever carries a key besides `bgscan` (any other key flushes the PMKSA cache);
- never two suspensions of one network object (a "" written where our "" already stands);
- the journal on disk names every network object that carries our "";
- a restore writes only where our "" still stands (except the race the API cannot close, as it
  has no compare-and-set: the object at that path was re-created, or another program wrote its
  bgscan, after our last read of it);
- nothing the daemon did raised out of the event loop unhandled;
- never an AbortScan of a scan the same daemon started (a roaming scan of every channel, a
  targeted one or a refresh: peers.py);
- roaming by targeted scans (tests/model/roam_checks.py): no scan of every channel asked by the
  daemon unless the targeted path gave up (or knew no other access point), and "roaming" shown
  only while bgscan is our "".
The world's radio has one access point per interface; steps bring a second one of the same
network (or one of another network) into range and fade the current one below the floor.
A `busy_for_a_while` step also checks that the guard works, where that can be judged: both
links busy for 10 s at a strong signal with the peers answering all along, every network that
its settings say to guard carries our "", and no other one does.
At the end of every sequence the faults end, holders leave, the link goes quiet, a daemon runs
(after a SIGKILL or lost bus, the next one, which must restore from the journal), and after
settling every network's bgscan is what NetworkManager set; then a clean stop restores at once.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from tests.model.conftest import SEQUENCES, SHRINK, STATS, STEPS
from tests.model.peers import NM_BGSCANS, Fault, Race
from tests.model.world import IFNAMES, World

CAFE = "Café ☕"
# What the real wpa_supplicant 2.10 or dbus-daemon answers to the daemon's well-formed calls
# while wpa_supplicant runs and the object exists, per call (checked against both programs;
# docs/testing.md, "Only faults the real peers can produce"):
# - AccessDenied, to every call: dbus-daemon's bus_context_check_security_policy, once a policy
#   reload (SIGHUP, ReloadConfig, or inotify on system.d) denies the daemon's user; a streak of
#   them ends with the reload that fixes the policy;
# - Failed "Failed to read signal", to SignalPoll: dbus_new_handlers.c
#   wpas_dbus_handler_signal_poll, when the driver cannot read the signal;
# - Interface.ScanError, to Scan ("Scan request rejected", wpas_dbus_handler_scan, a scan
#   already running) and AbortScan ("Abort failed or no scan in progress",
#   wpas_dbus_handler_abort_scan).
# Roam, and the reads of the BSS list (Get.BSSs, Get.CurrentBSS, GetAll on a BSS object), have
# no error of their own for a well-formed call while the network is selected and the BSS
# exists (wpas_dbus_handler_roam, the BSS getters): only AccessDenied is drawn for them.
# Everything else comes from a change the model makes happen: ServiceUnknown and NoReply from a
# wpa_supplicant that left (restart_supplicant), InterfaceUnknown and UnknownMethod from objects
# that are gone (recreate_interface, a removed network), UnknownObject from a BSS that expired,
# Roam's NotConnected (no network selected) and "Target BSS not found" (the BSS expired, or a
# new process has not scanned yet), a late or missing reply (the late, lost, slow and hang
# kinds: the daemon's own call timeout, org.freedesktop.DBus.Error.Timeout).
ACCESS_DENIED = "org.freedesktop.DBus.Error.AccessDenied"
SCAN_ERROR = "fi.w1.wpa_supplicant1.Interface.ScanError"
ERRORS = (ACCESS_DENIED, "org.freedesktop.DBus.Error.Failed", SCAN_ERROR)
POSSIBLE_ERRORS = {"SignalPoll": (ACCESS_DENIED, "org.freedesktop.DBus.Error.Failed"),
                   "Scan": (ACCESS_DENIED, SCAN_ERROR), "AbortScan": (ACCESS_DENIED, SCAN_ERROR),
                   "Roam": (ACCESS_DENIED,), "GetAll": (ACCESS_DENIED,),
                   "Get.BSSs": (ACCESS_DENIED,), "Get.CurrentBSS": (ACCESS_DENIED,)}


def possible_error(member: str | None, error: str) -> str:
    """`error` if the real peers can answer `member` with it, else AccessDenied (which they
    can answer to any call)."""
    return error if error in POSSIBLE_ERRORS.get(member or "", ()) else ACCESS_DENIED


# The calls a race can be armed for, and the calls (or property reads) a fault can be.
RACE_MEMBERS = (None, "Get", "Set", "GetInterface", "SignalPoll", "Scan", "AbortScan", "Roam",
                "GetAll")
MEMBERS = RACE_MEMBERS + ("Get.BSSs", "Get.CurrentBSS")
PROFILE_DATA = ({}, {"scanguard.enabled": "no"}, {"scanguard.enabled": "yes"},
                {"scanguard.release_after": "3", "scanguard.engage_after": "1"},
                {"scanguard.enabled": CAFE}, {"scanguard.threshold_mbit": "20"},
                {"scanguard.signal_floor_dbm": "-40"})
CONFIGS = ("", "[scanguard]\nenabled = no\n",
           "[scanguard]\nrelease_after = 2\nengage_after = 1\nsample_interval = 0.5\n",
           "[scanguard]\nsignal_floor_dbm = -60\nsignal_poll_interval = 1\n",
           f"[scanguard]\nthreshold_mbit = {CAFE}\n",  # refused: the old settings stay
           "[scanguard]\nthreshold_pps = 0\nrelease_below_mbit = 0.4\n")

ifnames = st.sampled_from(IFNAMES)
seconds = st.one_of(st.sampled_from([0.0003, 0.001, 0.01, 0.5, 1.0, 3.0, 5.0, 16.0, 40.0]),
                    st.floats(0.0, 20.0, allow_nan=False))
text = st.one_of(st.just(CAFE), st.text(max_size=24))
then = st.one_of(st.just(0.0), seconds)


class Machine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        import tempfile
        from pathlib import Path
        self._tmp = tempfile.TemporaryDirectory(prefix="scanguard-model-",
                                                dir="/dev/shm" if _shm() else None)
        self.world = World(Path(self._tmp.name)).__enter__()
        STATS.sequences += 1
        self.number = STATS.sequences

    def _step(self, kind: str) -> None:
        STATS.steps += 1
        STATS.kinds[kind] = STATS.kinds.get(kind, 0) + 1
        self.world.events.append(kind)

    def _then(self, t: float) -> None:
        """Let time run after a step, so that what it started interleaves with the rest."""
        if t:
            self.world.run(self.world.advance(t))

    # ---- the link and the user --------------------------------------------------------

    @rule(ifname=ifnames, mbit=st.sampled_from([0.0, 0.3, 3.0, 50.0]), then=then)
    def traffic(self, ifname: str, mbit: float, then: float) -> None:
        self._step("traffic")
        self.world.link.set_rate(ifname, mbit)
        self._then(then)

    @rule(t=seconds)
    def advance(self, t: float) -> None:
        self._step("advance")
        self.world.run(self.world.advance(t))

    @rule(client=st.integers(0, 3), reason=text,
          interface=st.sampled_from(["", "wlan0", "wlan1", "wlan9", CAFE]), then=then)
    def hold(self, client: int, reason: str, interface: str, then: float) -> None:
        self._step("hold")
        self.world.hold(client, reason, interface)
        self._then(then)

    @rule(client=st.integers(0, 3), which=st.integers(0, 3), then=then)
    def release(self, client: int, which: int, then: float) -> None:
        self._step("release")
        self.world.release(client, which)
        self._then(then)

    @rule(client=st.integers(0, 3), then=then)
    def leave(self, client: int, then: float) -> None:
        self._step("holder-left")
        self.world.leave(client)
        self._then(then)

    # -72: between the floor (-75) and bgscan's threshold (-70, -65), where the guard refreshes its
    # candidates by scans of one channel; -74: past the walk's first look (2 dB above the floor),
    # where it scans the candidates' channels and may ask for a Roam before the floor
    @rule(ifname=ifnames, rssi=st.sampled_from([-40, -60, -72, -74, -78, -90]), then=then)
    def signal(self, ifname: str, rssi: int, then: float) -> None:
        self._step("signal")
        iface = self.world.wpa.ifaces.get(ifname)
        if iface is not None:
            iface.rssi = rssi
        self._then(then)

    @rule(ifname=ifnames, same=st.booleans(), then=then)
    def second_ap(self, ifname: str, same: bool, then: float) -> None:
        self._step("second-ap" if same else "other-network-ap")
        self.world.second_ap(ifname, same)
        self._then(then)

    @rule(ifname=ifnames, itself=st.booleans(), then=then)
    def fade(self, ifname: str, itself: bool, then: float) -> None:
        self._step("fade")
        self.world.fade(ifname, itself)
        self._then(then)

    @rule(ifname=ifnames, then=then)
    def scan(self, ifname: str, then: float) -> None:
        self._step("scan")
        self.world.wpa.submit(lambda: self.world.wpa.scan(ifname))
        self._then(then)

    # ---- NetworkManager ---------------------------------------------------------------

    @rule(ifname=ifnames, bgscan=st.sampled_from(NM_BGSCANS), gap=seconds, then=then)
    def activate(self, ifname: str, bgscan: str | None, gap: float, then: float) -> None:
        self._step("activate")
        self.world.nm.activate(ifname, bgscan, gap)
        self._then(then)

    @rule(ifname=ifnames, then=then)
    def deactivate(self, ifname: str, then: float) -> None:
        self._step("deactivate")
        self.world.nm.deactivate(ifname)
        self._then(then)

    @rule(ifname=ifnames, then=then)
    def recreate_interface(self, ifname: str, then: float) -> None:
        self._step("recreate-interface")
        self.world.nm.recreate_interface(ifname)
        self._then(then)

    @rule(ifname=ifnames, data=st.sampled_from(PROFILE_DATA), readable=st.booleans(), then=then)
    def profile(self, ifname: str, data: dict[str, str], readable: bool, then: float) -> None:
        self._step("profile")
        self.world.nm.update_profile(ifname, data, readable)
        self._then(then)

    @rule(gap=seconds, then=then)
    def restart_nm(self, gap: float, then: float) -> None:
        self._step("nm-restart")
        if self.world.nm.alive:
            self.world.restart_nm(gap)
        self._then(then)

    @rule(gap=seconds, then=then)
    def crash_nm(self, gap: float, then: float) -> None:
        """NetworkManager killed and started again: wpa_supplicant keeps the network it had
        selected, and the devices show disconnected until a re-activation (World.crash_nm)."""
        self._step("nm-crash")
        if self.world.nm.alive:
            self.world.crash_nm(gap)
        self._then(then)

    # ---- wpa_supplicant ---------------------------------------------------------------

    @rule(kind=st.sampled_from(["error", "lost", "late", "slow", "hang-before", "hang-after"]),
          member=st.sampled_from(MEMBERS), error=st.sampled_from(ERRORS),
          t=st.sampled_from([0.001, 0.5, 3.0, 11.0, 25.0]), count=st.sampled_from([1, 1, 2, 6]),
          then=then)
    def fault(self, kind: str, member: str | None, error: str, t: float, count: int,
              then: float) -> None:
        self._step(f"fault:{kind}")
        self.world.wpa.faults.append(Fault(kind, member, possible_error(member, error), t, count))
        self._then(then)

    @rule(what=st.sampled_from(["activate", "deactivate", "other-set", "wpa-restart",
                                "daemon-restart", "wpa-restart-after"]),
          member=st.sampled_from(RACE_MEMBERS), ifname=ifnames,
          bgscan=st.sampled_from(NM_BGSCANS), then=then)
    def race(self, what: str, member: str | None, ifname: str, bgscan: str | None,
             then: float) -> None:
        """`what` happens in wpa_supplicant just before the daemon's next `member` call
        (`...-after`: just after it is answered)."""
        self._step(f"race:{what}")
        w = self.world
        work = {"activate": lambda: w.nm.activate(ifname, bgscan),
                "deactivate": lambda: w.nm.deactivate(ifname),
                "other-set": lambda: w.wpa.other_program_sets(ifname, "simple:60:-80:3600"),
                "wpa-restart": lambda: w.restart_supplicant(0.5),
                "wpa-restart-after": lambda: w.restart_supplicant(0.0),
                "daemon-restart": w.restart_daemon_now}[what]
        w.wpa.races.append(Race(member, work, what, after=what.endswith("-after")))
        self._then(then)

    @rule(then=then)
    def recover(self, then: float) -> None:
        self._step("recover")
        self.world.wpa.recover()
        self._then(then)

    @rule(gap=seconds, then=then)
    def restart_supplicant(self, gap: float, then: float) -> None:
        self._step("wpa-restart")
        if self.world.wpa.alive:
            self.world.restart_supplicant(gap)
        self._then(then)

    @rule(ifname=ifnames, value=st.sampled_from(["simple:60:-80:3600", "learn:10:-60:600"]), then=then)
    def other_program_sets_bgscan(self, ifname: str, value: str, then: float) -> None:
        self._step("other-set")
        self.world.wpa.submit(lambda: self.world.wpa.other_program_sets(ifname, value))
        self._then(then)

    # ---- scanguardd itself ------------------------------------------------------------

    @rule(then=then)
    def sigkill(self, then: float) -> None:
        self._step("sigkill")
        self.world.crash()
        self._then(then)

    @rule(then=then)
    def crash_in_journal_write(self, then: float) -> None:
        self._step("journal-crash")
        self.world.arm_journal_crash()
        self._then(then)

    @rule(then=then)
    def lose_bus(self, then: float) -> None:
        self._step("lost-bus")
        self.world.run(self.world.lose_bus())
        self._then(then)

    @rule(then=then)
    def systemctl_restart(self, then: float) -> None:
        self._step("restart")
        self.world.run(self.world.restart_daemon())
        self._then(then)

    @rule(config=st.sampled_from(CONFIGS), then=then)
    def reload(self, config: str, then: float) -> None:
        self._step("reload")
        self.world.reload(config)
        self._then(then)

    @rule()
    def busy_for_a_while(self) -> None:
        """Liveness, where it can be judged: see World.busy_check."""
        self._step("busy-check")
        problems = self.world.run(self.world.busy_check())
        if problems:
            self._failed()
        assert not problems, "\n".join(problems)

    # ---- the invariant ----------------------------------------------------------------

    @invariant()
    def bgscan_is_safe(self) -> None:
        problems = self.world.violations()
        if problems:
            self._failed()
        assert not problems, "\n".join(problems)

    def teardown(self) -> None:
        try:
            problems = self.world.settle_and_check()
            w = self.world
            STATS.crashes += w.crashes
            STATS.journal_crashes += w.journal_crashes
            STATS.stops += w.stops
            STATS.lost_buses += w.lost_buses
            STATS.sequence_done(w.events, w.wpa.counts, w.loop.time())
        finally:
            self.world.__exit__(None, None, None)
            self._tmp.cleanup()
        if problems:
            self._failed()
        assert not problems, "\n".join(problems)

    def _failed(self) -> None:
        if STATS.first_failure_at is None:
            STATS.first_failure_at = self.number


def _shm() -> bool:
    import os
    return os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK)


# A task the daemon spawned and a SIGKILL cancelled before it ran: its coroutine never started.
@pytest.mark.filterwarnings("ignore:coroutine .* was never awaited:RuntimeWarning")
def test_bgscan_ends_as_networkmanager_set_it() -> None:
    # run_state_machine_as_test, not Machine.TestCase: pytest-asyncio's collection hook trips
    # over the TestCase's wrapped runTest.
    run_state_machine_as_test(Machine, settings=settings(
        max_examples=SEQUENCES, stateful_step_count=STEPS, deadline=None, database=None,
        phases=[Phase.explicit, Phase.reuse, Phase.generate, *([Phase.shrink] if SHRINK else [])],
        suppress_health_check=list(HealthCheck)))
    if SEQUENCES >= 500:
        # The crash-between-write-and-rename trap sits in nm_scanguard.files' `os`: if the
        # atomic write moves, the trap must move with it, or that fault silently stops happening.
        assert STATS.journal_crashes > 0, "no sequence crashed in the journal's write"
