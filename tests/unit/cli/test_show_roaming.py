"""What `scanguardctl status` and `monitor` say of targeted roaming (cli/show.py)."""

from __future__ import annotations

import time

from nm_scanguard.cli.show import own_scan_news, roam_line


def device(**extra):
    d = {"interface": "wlan0", "state": "guarding", "connection_id": "Café ☕"}
    d.update(extra)
    return d


def test_no_line_before_anything_is_known():
    assert roam_line(device()) is None


def test_the_other_aps_and_the_guard_s_own_scans_are_shown():
    d = device(roam_candidates=[
        {"bssid": "02:00:00:00:01:00", "frequency": 2412, "signal": -80, "current": True},
        {"bssid": "02:00:00:00:02:00", "frequency": 5180, "signal": -50, "current": False}],
        own_scan_details=[{"at": time.time() - 3, "kind": "targeted", "channels": [2412, 5180]}],
        roams=1)
    line = roam_line(d)
    assert line == ("roaming: 1 other access point(s) of this network known: 02:00:00:00:02:00 "
                    "(5180 MHz, -50 dBm); 1 scan(s) of its own, the last targeted of 2412, 5180 "
                    "MHz, 3s ago; asked wpa_supplicant to roam 1 time(s)")


def test_a_full_scan_reads_every_channel():
    d = device(own_scan_details=[{"at": time.time(), "kind": "full", "channels": []}])
    assert roam_line(d) == ("roaming: no other access point of this network known; 1 scan(s) of "
                            "its own, the last full of every channel, 0s ago")


def test_monitor_tells_each_new_own_scan_and_roam_once():
    before = device(own_scan_details=[{"at": 1.0, "kind": "refresh", "channels": [5180]}], roams=0)
    now = device(own_scan_details=[{"at": 1.0, "kind": "refresh", "channels": [5180]},
                                   {"at": 2.0, "kind": "targeted", "channels": [2412, 5180]}],
                 roams=1)
    assert own_scan_news(now, before) == [
        "the guard's own targeted scan of 2412, 5180 MHz (roaming)",
        "the guard asked wpa_supplicant to roam to a stronger access point"]
    assert own_scan_news(now, now) == []


def test_the_last_move_and_why_are_shown_escaped():
    d = device(own_scan_details=[{"at": time.time(), "kind": "walk", "channels": [2437, 2462]}],
               last_move="12:00:03 from 02:00:00:00:01:00 to 02:00:00:00:02:00 (2462 MHz) by "
                         "wpa_supplicant's own choice, after a walk scan: the signal fell 6 dB "
                         "to -76 dBm\x1b[2J")
    line = roam_line(d)
    assert line.endswith("last move 12:00:03 from 02:00:00:00:01:00 to 02:00:00:00:02:00 (2462 "
                         "MHz) by wpa_supplicant's own choice, after a walk scan: the signal fell "
                         "6 dB to -76 dBm\\x1b[2J")
    assert "the last walk of 2437, 2462 MHz" in line
