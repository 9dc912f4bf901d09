"""`make demo`'s table and verdict lines (tests/lab/demo.py) from made-up run summaries."""

import math

from tests.lab.demo import host_limited, table, verdicts


def _summary(worst: float, p99: float, air: dict | None) -> dict:
    per_second = {"worst_over_median": worst, "p5_mbps": 5.0, "median_mbps": 6.0,
                  "scans": {"ratio": math.nan}}
    if air is not None:
        per_second["air"] = air
    rtt = {"p50_ms": 30.0, "p99_ms": p99, "max_ms": p99 + 10, "n": 400}
    mbps = {"min": 4.0, "p5": 5.0, "median": 6.0}
    return {"scans": 0, "scans_aborted": 0, "scan_seconds": 0.0, "bgscan_requests": 0,
            "pm1_null_frames": 0, "link_losses": 0, "guard_engaged_after_s": 2.5,
            "throughput": {"sender_mbps": mbps, "receiver_mbps": mbps, "mean_received_mbps": 6.0},
            "per_second": per_second,
            "rtt": {"all": rtt, "outside_scans": dict(rtt, p99_ms=60.0),
                    "during_scans": dict(rtt, p99_ms=130.0), "loss": 0.0}}


def _air(busy: float, in_scan: bool = False, short: int = 4) -> dict:
    return {"busy_median": 0.98, "worst_second_busy": busy, "worst_second_in_scan": in_scan,
            "seconds_not_air_limited": short, "seconds_judged": 88}


def test_a_missed_worst_second_says_whether_the_air_the_cpu_or_a_scan_made_it():
    off = _summary(0.6, 120.0, _air(0.6, in_scan=True))
    cpu = verdicts(_summary(0.63, 78.9, _air(0.71)), off, idle_p99=10.4)
    assert cpu[0].startswith("worst second / median 63.0% (target >= 90%): NOT met (no scan; the "
                             "channel was only 71% busy: not the air but the senders fell short")
    air = verdicts(_summary(0.85, 78.9, _air(0.97)), off, idle_p99=10.4)
    assert air[0].endswith("NOT met (no scan; the channel was 97% busy)")
    scan = verdicts(_summary(0.5, 78.9, _air(0.3, in_scan=True)), off, idle_p99=10.4)
    assert scan[0].endswith("NOT met (a scan ran then)")
    old = verdicts(_summary(0.5, 78.9, None), off, idle_p99=10.4)
    assert old[0].endswith("NOT met (no channel figures)")
    close = verdicts(_summary(0.897, 78.9, _air(0.97)), off, idle_p99=10.4)
    assert close[0].startswith("worst second / median 89.7% (target >= 90%): NOT met")
    met = verdicts(_summary(0.95, 12.0, _air(0.71)), off, idle_p99=10.4)
    assert met[0].endswith(": met") and met[1].endswith(": met")
    assert "RTT p99 78.9 ms = 7.59x the idle link's 10.4 ms (target <= 1.5x): NOT met" in cpu[1]


def test_a_missed_worst_second_names_a_stall_of_the_medium_but_not_its_usual_lateness():
    off = _summary(0.6, 120.0, _air(0.6, in_scan=True))
    stalled = dict(_air(0.93), worst_second_late_ms=39.9, late_ms_median=6.7)
    line = verdicts(_summary(0.835, 52.3, stalled), off, idle_p99=11.7)[0]
    assert line.endswith("NOT met (no scan; the channel was 93% busy; the medium delivered "
                         "frames up to 40 ms late then (median second 7 ms): the guest CPU "
                         "stalled)")
    for late, typical in ((12.6, 6.0), (25.0, 14.0), (math.nan, 6.7)):  # usual, or unknown
        calm = dict(_air(0.93), worst_second_late_ms=late, late_ms_median=typical)
        assert verdicts(_summary(0.85, 52.3, calm), off, idle_p99=11.7)[0].endswith(
            "NOT met (no scan; the channel was 93% busy)")
    cpu = dict(_air(0.71), worst_second_late_ms=60.0, late_ms_median=9.0)
    assert verdicts(_summary(0.6, 80.0, cpu), off, idle_p99=11.7)[0].endswith(
        "the emulated CPU; the medium delivered frames up to 60 ms late then (median second "
        "9 ms): the guest CPU stalled)")


def test_the_table_shows_the_channel_rows_and_dashes_without_them():
    text = table(_summary(0.6, 120.0, None), _summary(0.63, 78.9, _air(0.71)), "upload")
    rows = {line[:36].strip(): line[36:].split() for line in text.splitlines()[3:]}
    assert rows["channel busy: median"] == ["-", "98%"]
    assert rows["in the worst second"] == ["-", "71%"]
    assert rows["scan-free seconds < 90% busy"] == ["-", "4/88"]


def test_a_run_paced_by_the_host_is_called_so_and_an_air_paced_one_is_not():
    fine = {"upload, guard off": _summary(0.6, 120.0, _air(0.6, short=2)),
            "upload, guard on": _summary(0.95, 60.0, _air(0.97, short=8)),  # 9 %: still the air's
            "download, guard on": _summary(0.95, 60.0, None)}  # no channel figures: not judged
    assert host_limited(fine) is None
    slow = dict(fine, **{"upload, guard on": _summary(0.7, 94.9, _air(0.67, short=34)),
                         "download, guard off": _summary(0.6, 120.0, _air(0.5, short=57))})
    warning = host_limited(slow)
    assert warning is not None and warning.startswith("WARNING: in this run the guest CPU")
    assert "upload, guard on 34 of 88, download, guard off 57 of 88;" in warning
    assert "upload, guard off" not in warning
