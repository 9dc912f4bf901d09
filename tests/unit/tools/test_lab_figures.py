"""The lab's figures (tests/lab/measure.py): pure functions, no VM."""

import math

from tests.lab.measure import (Interval, IperfResult, PingResult, Scan, air_figures, bgscan_levels,
                               channel_busy, during_vs_outside, format_summary, medium_late_ms,
                               parse_medium_stats, parse_scans, summarize, vmstat_idle)

LOG = """\
medium: registered with mac80211_hwsim (family 30)
medium: config /run/lab/medium.conf: 2 radios, noise -91 dBm, airtime x1, ap-sta -72 dBm
medium: stats t=1795404877.808 dt=1.005 frames=231 fps=230 delivered=220 acked=207 failed=0 \
offchannel=3 late=66 mean_late_us=3690 max_late_us=8521 busy_2437=0.952 busy_5700=0.000
medium: stats garbage
medium: stats t=1795404878.813 dt=1.005 frames=217 fps=216 delivered=215 acked=201 failed=1
"""


def test_parse_medium_stats_reads_every_field_and_skips_other_lines():
    stats = parse_medium_stats(LOG)
    assert [s["t"] for s in stats] == [1795404877.808, 1795404878.813]
    first = stats[0]
    assert first["fps"] == 230 and first["offchannel"] == 3 and first["busy_2437"] == 0.952
    assert first["busy_5700"] == 0.0
    assert stats[1]["failed"] == 1 and "busy_2437" not in stats[1]


# `iw event -t` as the lab's guest writes it: the SSID (here "Café ☕ lab") comes escaped.
IW_EVENT = r"""1795475185.871441: wlan1 (phy #1): scan started
1795475185.9: wlan0 (phy #0): scan started
1795475193.900362: wlan1 (phy #1): scan finished: 2412 2437 5180 902 903, ""
1795475194.177658: wlan1 (phy #1): scan started
1795475206.016361: wlan1 (phy #1): scan aborted: 2412 2417, ""
1795475214.562817: wlan1 (phy #1): scan started
1795475236.301559: wlan1 (phy #1): scan finished: 2412 5825, "Caf\xc3\xa9 \xe2\x98\x95 lab"
1795475240.0: wlan1 (phy #1): scan started
"""


def test_parse_scans_pairs_starts_with_ends_and_keeps_the_channels():
    scans = parse_scans(IW_EVENT, "wlan1")
    assert [(s.start, s.end, s.aborted) for s in scans] == [
        (1795475185.871441, 1795475193.900362, False),
        (1795475194.177658, 1795475206.016361, True),
        (1795475214.562817, 1795475236.301559, False),
        (1795475240.0, None, False)]
    assert [s.freqs for s in scans] == [(2412, 2437, 5180, 902, 903), (2412, 2417), (2412, 5825), ()]
    assert [s.start for s in parse_scans(IW_EVENT, "wlan0")] == [1795475185.9]


def test_vmstat_idle_drops_the_since_boot_line():
    text = """\
procs -----------memory---------- ---swap-- -----io---- -system-- ------cpu-----
 r  b   swpd   free   buff  cache   si   so    bi    bo   in   cs us sy id wa st
 5  0      0 1858504      0  80560    0    0     0     0  617  705 14 34 52  0  0
 5  0      0 1858504      0  80560    0    0     0     0 2277 3703 16 84  0  0  0
 1  0      0 1858504      0  80560    0    0     0     0   84   83  0  1 99  0  0
"""
    assert vmstat_idle(text) == [0, 99]


def _iv(start, mbps, seconds=1.0):
    return Interval(start=start, seconds=seconds, mbps=mbps)


def test_during_vs_outside_counts_seconds_mostly_inside_a_scan_and_those_without_any():
    scans = [Scan(start=10.2, end=13.0), Scan(start=20.0, end=None)]  # the second still running
    intervals = [_iv(t, 8.0) for t in range(0, 10)] + [_iv(10, 6.0), _iv(11, 4.0), _iv(12, 4.0),
                                                       _iv(13, 8.0)] + [_iv(20, 2.0)]
    d = during_vs_outside(intervals, scans, t_end=21.0)
    # 10-11 overlaps 0.8 s (counted), 13-14 none; 20-21 is inside the running scan
    assert d["during_n"] == 4 and d["outside_n"] == 11
    assert d["during_median_mbps"] == 4.0 and d["outside_median_mbps"] == 8.0  # 2, 4, 4, 6
    assert d["ratio"] == 0.5


def test_during_vs_outside_without_scans_has_no_ratio():
    d = during_vs_outside([_iv(0, 5.0), _iv(1, 5.0)], [], t_end=2.0)
    assert d["during_n"] == 0 and math.isnan(d["ratio"])


def test_summary_reports_link_losses_and_worst_second_over_median():
    iperf = IperfResult(direction="upload",
                        sender=[_iv(t, 6.0) for t in range(4)],
                        receiver=[_iv(0, 6.0), _iv(1, 3.0), _iv(2, 6.0), _iv(3, 6.0),
                                  _iv(4, 9.0, seconds=0.1)],
                        sent_mbps=6.0, received_mbps=5.5, raw={})
    s = summarize(iperf, PingResult(), [], [], 0.0, 4.0,
                  [(1.5, "CQM event: beacon loss"), (2.0, "CTRL-EVENT-DISCONNECTED")])
    assert s["link_losses"] == 2
    assert s["link_loss_events"] == ["t0 + 1.5 s CQM event: beacon loss",
                                     "t0 + 2.0 s CTRL-EVENT-DISCONNECTED"]
    assert s["per_second"]["worst_over_median"] == 0.5  # the 0.1 s fragment is left out
    text = format_summary(s)
    assert "link losses: 2" in text
    # No scan and no ping in this run: said in words, never "nan" (a newcomer reads these lines).
    assert "nan" not in text.lower()
    assert "receiver per second: no scan in this run; " in text
    assert "ping RTT, during scans:   no ping answered in these seconds (n=0)" in text


def _air_line(t, busy, **other):
    return {"t": t, "dt": 1.0, "busy_2437": busy, "busy_2412": 0.0, **other}


def test_channel_busy_weights_each_medium_second_by_its_overlap_and_takes_the_busiest_channel():
    # medium lines cover (t - 1, t]: (0, 1] at 100 %, (1, 2] at 40 %
    air = [_air_line(1.0, 1.0), _air_line(2.0, 0.4)]
    assert channel_busy(air, 0.0, 1.0) == 1.0
    assert abs(channel_busy(air, 0.5, 1.0) - 0.7) < 1e-9   # half of each
    assert abs(channel_busy(air, 0.0, 2.0) - 0.7) < 1e-9
    assert math.isnan(channel_busy(air, 5.0, 1.0))            # no line overlaps
    assert math.isnan(channel_busy([{"t": 1.0, "dt": 1.0, "fps": 3.0}], 0.0, 1.0))  # no busy_*
    assert channel_busy([_air_line(1.0, 0.2, busy_5700=0.9)], 0.0, 1.0) == 0.9


def test_air_figures_tell_cpu_short_seconds_from_scans():
    """The worst second fell where the channel was half idle and no scan ran: the CPU's; a
    second inside a scan is never counted as one the air did not set."""
    rx = [_iv(t, 6.0) for t in range(0, 10)]
    rx[4] = _iv(4, 3.0)                       # the worst second
    rx[8] = _iv(8, 5.0)                       # inside the scan
    air = [_air_line(float(t), 0.98) for t in range(1, 13)]
    for t in (5, 6):                          # an interval reads [start, start + 2): 4 -> 5, 6
        air[t - 1] = _air_line(float(t), 0.5)
    air[9 - 1] = _air_line(9.0, 0.3)          # the scan's second: off channel
    a = air_figures(rx, [Scan(start=8.0, end=9.0)], t_end=10.0, air=air)
    assert a["worst_second_busy"] == 0.5 and not a["worst_second_in_scan"]
    # 3 -> (4, 5] 0.98 and (5, 6] 0.5 = 0.74; 4 -> 0.5; 5 -> 0.74; 7 -> 0.64, but the scan
    # (8, 9) may overlap it ([7, 9)): not counted; nor 8, in the scan
    assert a["seconds_not_air_limited"] == 3 and a["seconds_judged"] == 8  # not 0 and 9
    # per interval 0.98 0.98 0.98 0.74 0.5 0.74 0.98 0.64 0.64 0.98: nearest-rank median 0.74
    assert abs(a["busy_median"] - 0.74) < 1e-9
    in_scan = air_figures([_iv(8, 1.0), _iv(2, 6.0)], [Scan(start=8.0, end=9.0)], 10.0, air)
    assert in_scan["worst_second_in_scan"]
    air[0] = _air_line(1.0, 0.2)              # TCP's first second: not judged
    assert air_figures(rx, [Scan(start=8.0, end=9.0)], 10.0, air)["seconds_not_air_limited"] == 3
    empty = air_figures(rx, [], 10.0, [])
    assert math.isnan(empty["worst_second_busy"]) and empty["seconds_judged"] == 0


def test_the_worst_second_carries_how_late_the_medium_was_then_against_its_median_second():
    """A guarded upload on 2026-11-24 00:56 missed 90 % in a second with the channel 93 % busy
    and no scan: the medium's latest frame then was 40 ms late (7 ms in its median second)."""
    air = [_air_line(1.0, 0.9, max_late_us=7000.0), _air_line(2.0, 0.9, max_late_us=40000.0),
           _air_line(3.0, 0.9, max_late_us=6000.0), _air_line(4.0, 0.9)]  # an old medium: none
    assert medium_late_ms(air, 1.2, 0.5) == 40.0        # (1, 2] only
    assert medium_late_ms(air, 0.0, 3.0) == 40.0        # the latest of the lines it overlaps
    assert math.isnan(medium_late_ms(air, 3.0, 1.0))    # (3, 4] has no figure
    rx = [_iv(0, 6.0), _iv(1, 4.9), _iv(2, 6.0)]
    a = air_figures(rx, [], t_end=3.0, air=air)
    # interval 1 reads [1, 3): 40; 0 reads [0, 2): 40; 2 reads [2, 4): 6
    assert a["worst_second_late_ms"] == 40.0 and a["late_ms_median"] == 40.0
    assert math.isnan(air_figures(rx, [], 3.0, [])["worst_second_late_ms"])


def test_summary_carries_the_air_figures_and_the_report_shows_them():
    iperf = IperfResult(direction="download", sender=[_iv(t, 6.0) for t in range(3)],
                        receiver=[_iv(t, 6.0) for t in range(3)], sent_mbps=6.0,
                        received_mbps=6.0, raw={})
    air = [_air_line(float(t), 0.95) for t in range(1, 5)]
    s = summarize(iperf, PingResult(), [], [], 0.0, 3.0, [], air)
    assert s["per_second"]["air"]["busy_median"] == 0.95
    assert ("channel: median 95% busy, 95% in the worst second (no scan); 0 of 1 seconds "
            "scan-free and under 90% busy") in format_summary(s)
    without = summarize(iperf, PingResult(), [], [], 0.0, 3.0)
    assert "channel:" not in format_summary(without)


def test_bgscan_levels_from_both_releases_logs():
    """wpa_supplicant 2.10-12 (Debian 12) logs CTRL-EVENT-SIGNAL-CHANGE and bgscan's line;
    2.10-24 (Debian 13) only bgscan's: the lab reads bgscan's."""
    bookworm = """\
1795417231.061630: nl80211: Connection quality monitor event: RSSI low
1795417231.070324: wlan1: CTRL-EVENT-SIGNAL-CHANGE above=0 signal=-72 noise=-92 txrate=12000
1795417231.071000: bgscan simple: signal level changed (above=0 current_signal=-72 current_noise=-92 current_txrate=12000))
1795417231.072126: bgscan simple: Trigger immediate scan
"""
    trixie = """\
1795419198.929574: bgscan simple: signal level changed (above=1 current_signal=-50 current_noise=-92 current_txrate=6000))
1795419215.984778: nl80211: Connection quality monitor event: RSSI low
1795419215.989729: bgscan simple: signal level changed (above=0 current_signal=-72 current_noise=-92 current_txrate=9000))
"""
    assert bgscan_levels(bookworm) == [(1795417231.071, False)]
    assert bgscan_levels(trixie) == [(1795419198.929574, True), (1795419215.989729, False)]
    assert bgscan_levels("") == []
