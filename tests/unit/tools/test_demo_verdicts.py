"""`make demo`'s table and verdict lines (tests/lab/demo.py) from made-up run summaries, and its
summary.json, which must be strict JSON."""

import json
import math

import pytest

from tests.lab.demo import host_limited, rtt_context, strict_json, table, verdicts
from tests.lab.measure import host_paced


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
    cpu = verdicts(_summary(0.63, 78.9, _air(0.71)), off)
    assert cpu[0].startswith("worst second / median 63.0% (target >= 90%): NOT met (no scan; the "
                             "channel was only 71% busy: not the air but the senders fell short")
    air = verdicts(_summary(0.85, 78.9, _air(0.97)), off)
    assert air[0].endswith("NOT met (no scan; the channel was 97% busy)")
    scan = verdicts(_summary(0.5, 78.9, _air(0.3, in_scan=True)), off)
    assert scan[0].endswith("NOT met (a scan ran then)")
    old = verdicts(_summary(0.5, 78.9, None), off)
    assert old[0].endswith("NOT met (no channel figures)")
    close = verdicts(_summary(0.897, 78.9, _air(0.97)), off)
    assert close[0].startswith("worst second / median 89.7% (target >= 90%): NOT met")
    met = verdicts(_summary(0.95, 12.0, _air(0.71)), off)
    assert met[0].endswith(": met") and met[1].endswith(": met")
    assert cpu[1] == ("RTT p99 78.9 ms = 1.32x the unguarded run's 60.0 ms in its seconds without a "
                      "scan (target <= 1.1x): NOT met")


def _rtt(on_p99: float, off_scan_free: float, off_during: float = 113.0) -> tuple[dict, dict]:
    on = _summary(0.98, on_p99, _air(0.97))
    off = _summary(0.74, 113.0, _air(0.83, in_scan=True))
    off["rtt"]["outside_scans"]["p99_ms"] = off_scan_free
    off["rtt"]["during_scans"]["p99_ms"] = off_during
    return on, off


def test_rtt_is_judged_like_with_like_and_the_idle_link_is_only_information():
    # The upload of 2026-11-24 03:17: guarded p99 58.9 ms, unguarded 82.8 ms without a scan and
    # 113.0 ms with one, idle link 8.5 ms (the old verdict called this "6.91x ...: NOT met").
    on, off = _rtt(58.9, 82.8)
    judged = verdicts(on, off)
    assert judged[1] == ("RTT p99 58.9 ms = 0.71x the unguarded run's 82.8 ms in its seconds "
                         "without a scan (target <= 1.1x): met")
    assert not any("idle" in line for line in judged)
    info = rtt_context(off, 8.5)
    assert info.startswith("for information: RTT p99 113.0 ms in the unguarded run's seconds with a "
                           "scan; 8.5 ms on the idle link")
    assert "target" not in info and "met" not in info


@pytest.mark.parametrize("on_p99, verdict", [(66.0, "met"), (66.1, "NOT met")])
def test_the_rtt_target_allows_ten_percent_over_the_scan_free_figure(on_p99, verdict):
    on, off = _rtt(on_p99, 60.0)
    assert verdicts(on, off)[1].endswith(f"(target <= 1.1x): {verdict}")


def test_an_rtt_that_cannot_be_computed_is_not_judged():
    for on_p99, scan_free in ((58.9, math.nan), (math.nan, 82.8)):
        on, off = _rtt(on_p99, scan_free)
        line = verdicts(on, off)[1]
        assert line.endswith("not judged (a figure is missing)") and "met" not in line


def _strict(text: str) -> object:
    def refuse(name: str) -> None:
        raise ValueError(f"not strict JSON: {name}")
    return json.loads(text, parse_constant=refuse)


def test_summary_json_is_strict_json_with_null_for_figures_that_could_not_be_computed():
    off = _summary(0.74, 113.0, _air(0.83, in_scan=True))
    on = _summary(0.98, 58.9, dict(_air(0.97), worst_second_late_ms=math.nan))
    on["per_second"]["scans"].update(during_median_mbps=math.nan, outside_median_mbps=6.8)
    on["rtt"]["during_scans"] = {"n": 0, "p50_ms": math.nan, "p99_ms": math.inf, "max_ms": -math.inf}
    summary = {"air": "Café ☕ lab at -72 dBm", "idle_ping": {"p99_ms": 8.5, "loss": math.nan},
               "runs": {"upload": {"guard_off": off, "guard_on": on}},
               "scans": [(1.0, math.nan)], "host_limited": None}
    with pytest.raises(ValueError):
        _strict(json.dumps(summary))  # what a plain json.dumps would write: NaN, Infinity
    doc = _strict(strict_json(summary))
    guarded = doc["runs"]["upload"]["guard_on"]
    assert guarded["per_second"]["scans"]["during_median_mbps"] is None
    assert guarded["per_second"]["scans"]["ratio"] is None
    assert guarded["per_second"]["air"]["worst_second_late_ms"] is None
    assert guarded["rtt"]["during_scans"] == {"n": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}
    assert guarded["rtt"]["all"]["p99_ms"] == 58.9
    assert doc["idle_ping"] == {"p99_ms": 8.5, "loss": None}
    assert doc["scans"] == [[1.0, None]]
    assert doc["air"] == "Café ☕ lab at -72 dBm"


def test_a_missed_worst_second_names_a_stall_of_the_medium_but_not_its_usual_lateness():
    off = _summary(0.6, 120.0, _air(0.6, in_scan=True))
    stalled = dict(_air(0.93), worst_second_late_ms=39.9, late_ms_median=6.7)
    line = verdicts(_summary(0.835, 52.3, stalled), off)[0]
    assert line.endswith("NOT met (no scan; the channel was 93% busy; the medium delivered "
                         "frames up to 40 ms late then (median second 7 ms): the guest CPU "
                         "stalled)")
    for late, typical in ((12.6, 6.0), (25.0, 14.0), (math.nan, 6.7)):  # usual, or unknown
        calm = dict(_air(0.93), worst_second_late_ms=late, late_ms_median=typical)
        assert verdicts(_summary(0.85, 52.3, calm), off)[0].endswith(
            "NOT met (no scan; the channel was 93% busy)")
    cpu = dict(_air(0.71), worst_second_late_ms=60.0, late_ms_median=9.0)
    assert verdicts(_summary(0.6, 80.0, cpu), off)[0].endswith(
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


@pytest.mark.parametrize(("short", "judged", "paced"), [
    (0, 58, None),  # a quiet host: every scan-free second kept the channel busy
    (5, 58, None),  # 8.6 %: still the air's
    (6, 58, "6 of 58"),  # 10.3 %: the host's
    (48, 58, "48 of 58"),  # the slow host of 2026-12-04, whose baseline could not show the scan
    (3, 0, None),  # no second judged: not judged
])
def test_one_run_is_the_hosts_when_over_a_tenth_of_its_scan_free_seconds_left_the_air_idle(
        short, judged, paced):
    air = dict(_air(0.9, short=short), seconds_judged=judged)
    assert host_paced(_summary(0.9, 80.0, air)) == paced
    assert host_paced(_summary(0.9, 80.0, None)) is None  # no channel figures: not judged
