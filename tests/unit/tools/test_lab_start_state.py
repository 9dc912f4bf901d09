"""tests/lab/lab.py's start state (Lab.start_problems): what the guest says, read into the
problems a check's set-up names.  The lab itself shows the rest (tests/lab/test_lab_harness.py)."""

from __future__ import annotations

import types

import pytest

from tests.lab.lab import OURS, Lab, LabError, LabStartError, StartState, _ours

AP1 = "02:00:00:00:00:00"
GOOD = f"""@ps
    1 /sbin/init
  200 ip netns exec apns iperf3 -s -J -B 192.168.77.1
  201 /usr/bin/python3 -m nm_scanguard --config /run/lab/scanguard-1.conf -v
  202 bash -c echo '@ps'; ps -eo pid=,args=
@netns
apns (id: 0)
@link
Connected to {AP1} (on wlan1)
\tSSID: Café ☕ lab
@addr
5: wlan1    inet 192.168.77.140/24 brd 192.168.77.255 scope global dynamic wlan1
@nm
100 (connected)
@profile

no

@user
@signal
RSSI=-51
LINKSPEED=54
"""


class FakeLab(Lab):
    def __init__(self, out: str):  # no VM: only what start_problems reads
        self.out = out
        self.signals = {("ap", "sta"): -50, ("ap2", "sta"): -100}
        self.radio_macs = {"ap": AP1}

    def check(self, cmd: str, timeout: float = 60) -> str:
        return self.out


def test_the_lab_as_it_starts_has_no_problem_with_the_modules_daemon_kept():
    assert FakeLab(GOOD).start_problems(StartState(keep=201)) == []


def test_each_part_that_does_not_hold_is_named():
    bad = (GOOD.replace(f"Connected to {AP1} (on wlan1)", "Not connected.")
           .replace("100 (connected)", "30 (disconnected)")
           .replace("5: wlan1    inet 192.168.77.140/24", "")
           .replace("@user\n", "@user\n/etc/NetworkManager/system-connections/Café ☕ lab.nmconnection\n")
           .replace("\nno\n", "\nyes\n"))
    lab = FakeLab(bad)
    lab.signals[("ap", "sta")] = -72
    text = "; ".join(lab.start_problems(StartState(second_ap=True)))
    for words in ("processes of ours still running: 201", "the second AP is not up",
                  "the medium's signals are {'ap-sta': -72}", "the station is on no AP",
                  "wlan1 has no IPv4 address", "30 (disconnected)",
                  "profile connection.autoconnect is 'yes'", "Café ☕ lab.nmconnection"):
        assert words in text, text


def test_a_missing_module_daemon_and_a_weak_reading_are_named():
    text = "; ".join(FakeLab(GOOD.replace("RSSI=-51", "RSSI=-72")).start_problems(StartState(keep=999)))
    assert "the module's daemon (pid 999) is not running" in text
    assert "the station reads -72 dBm" in text


@pytest.mark.parametrize("args, ours", [
    ("/usr/bin/python3 -m nm_scanguard --config x", True),
    ("/usr/bin/python3 -m nm_scanguard.cli.scanguardctl hold --reason Café ☕ -- sleep 45", True),
    ("ip netns exec ns iperf3 -c 192.168.77.1 -t 90", True),
    ("ping -D -n -i 0.2 -w 62 192.168.77.1", True),
    ("dumpcap -q -i hwsim0 -f x -w /lab/cap/a.pcapng", True),
    ("ip netns exec apns iperf3 -s -J -B 192.168.77.1", False),
    ("hostapd -t -d -f /lab/logs/hostapd.log /run/lab/hostapd.conf", False),
    ("bash -c echo '@ps'; ps -eo pid=,args=", False),
    ("timeout 3 dbus-send --system --print-reply --reply-timeout=2000 "
     "--dest=io.github.nm_scanguard.ScanGuard1 /io/github/nm_scanguard/ScanGuard1 x", False),
])
def test_our_processes_are_told_by_their_command_lines(args, ours):
    assert bool(OURS.search(args)) is ours
    assert bool(_ours(f" 42 {args}\n")) is ours


class MendingLab(FakeLab):
    """Lab.establish's path for a check that left only the signal astray: each guest reading
    is counted, the medium and SignalPoll are stand-ins."""

    def __init__(self, reads_strong: bool):
        super().__init__(GOOD.replace("RSSI=-51", "RSSI=-72"))
        self.signals[("ap", "sta")] = -72
        self.reads_strong = reads_strong
        self.readings = 0
        self.brought = 0
        self.vm = types.SimpleNamespace(rundir="/lab/logs")

    def check(self, cmd: str, timeout: float = 60) -> str:
        self.readings += 1
        return self.out

    def set_signals(self, signals) -> None:
        self.signals.update(signals)
        if self.reads_strong:
            self.out = GOOD

    def wait_signal(self, dbm: int, timeout: float = 15, tolerance: int = 3) -> int:
        if not self.reads_strong:
            raise LabError(f"timed out waiting for signal {dbm} dBm")
        return dbm

    def say(self, msg: str) -> None:
        pass

    def save_diagnostics(self, reason: str):
        return None

    def bring_to_start(self, want: StartState) -> None:
        self.brought += 1


def test_a_signal_left_weak_is_mended_by_the_medium_and_verified_by_the_station_reading():
    lab = MendingLab(reads_strong=True)
    lab.establish(StartState(keep=201), "check")
    # one reading found only the signal astray; the station's strong reading verifies the rest
    assert (lab.readings, lab.brought) == (1, 0)


def test_a_signal_the_station_does_not_follow_is_read_again_and_named():
    lab = MendingLab(reads_strong=False)
    with pytest.raises(LabStartError, match="the station reads -72 dBm"):
        lab.establish(StartState(keep=201), "check")
    assert (lab.readings, lab.brought) == (4, 2)  # mend, then two attempts, each read again
