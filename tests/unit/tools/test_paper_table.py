"""`make paper`'s arithmetic (tests/lab/paper.py) from made-up runs: the figures per run, the
verdict per cell against the paper, the table (which prints no paper number where the lab
cannot reproduce the mechanism), the sender's queue from `ss`, and strict JSON."""

import json
import math

import pytest

from tests.lab.demo import strict_json
from tests.lab.paper import (CELLS_BY_KEY, COLUMNS, cwnd_series, judge, parse_queue_samples,
                             run_figures, table)


def summary(scans=4, aborted=0, ratio=0.6, worst=0.4, median=6.0, p99=180.0, pm1=8) -> dict:
    return {"scans": scans, "scans_aborted": aborted, "scan_seconds": 3.0 * scans,
            "pm1_null_frames": pm1, "guard_engaged_after_s": None,
            "per_second": {"scans": {"ratio": ratio, "during_n": 2 * scans},
                           "worst_over_median": worst, "median_mbps": median},
            "rtt": {"all": {"p99_ms": p99}}}


def raw(retrans=0, cc="cubic") -> dict:
    return {"end": {"sum_sent": {"retransmits": retrans}, "sender_tcp_congestion": cc}}


def figures(**kw) -> dict:
    r = {k: kw.pop(k) for k in ("retrans", "cc") if k in kw}
    return run_figures(summary(**kw), raw(**r))


GUARDED = dict(scans=0, ratio=math.nan, worst=0.95, pm1=0)


def test_run_figures_are_read_from_the_summary_and_iperf3():
    f = figures(scans=5, aborted=1, ratio=0.5, worst=0.3, median=7.5, p99=210, pm1=12, retrans=9)
    assert f == {"scans": 5, "scans_aborted": 1, "scan_seconds": 15.0, "pm1_null_frames": 12,
                 "share_in_scans": 0.5, "seconds_in_scans": 10, "worst_over_median": 0.3,
                 "median_mbps": 7.5, "rtt_p99_ms": 210, "retransmits": 9, "congestion": "cubic",
                 "guard_engaged_after_s": None}
    assert run_figures(summary(), {})["retransmits"] is None
    assert run_figures(summary(), {})["congestion"] is None


def test_upload_with_tsq_holds_when_scans_cut_throughput_and_the_guard_flattens_it():
    v = judge(CELLS_BY_KEY["upload-tsq"], figures(ratio=0.8), figures(**GUARDED))
    assert v[0].startswith("paper: throughput drops during scans") and "80%" in v[0]
    assert v[0].endswith("held (the lab's scans are shorter and its air slower: see "
                         "docs/paper.md)")
    assert v[1].startswith("guard on: 0 scans, worst second 95%") and "for this cell" in v[1]
    no_drop = judge(CELLS_BY_KEY["upload-tsq"], figures(ratio=0.95), figures(**GUARDED))
    assert "did NOT hold" in no_drop[0]


def test_a_guarded_run_with_scans_or_a_deep_worst_second_is_not_called_flat():
    v = judge(CELLS_BY_KEY["upload-tsq"], figures(), figures(scans=2, aborted=1, worst=0.5))
    assert v[-1] == ("guard on: 2 scan(s) (1 not aborted), worst second 50% of the median "
                     "(target >= 90%): drops NOT removed")
    v = judge(CELLS_BY_KEY["upload-tsq"], figures(), figures(scans=0, worst=math.nan))
    assert v[-1].endswith("worst second - of the median (target >= 90%): drops NOT removed")
    # no scan and still a stall (the no-TSQ queue overflowing): said to be no scan's doing
    v = judge(CELLS_BY_KEY["upload-no-tsq"], figures(), figures(scans=0, worst=0.0, retrans=900))
    assert v[-1] == ("guard on: 0 scans, yet the worst second is 0% of the median (target >= "
                     "90%; 900 retransmissions): no scan's doing, so nothing the guard can remove")


@pytest.mark.parametrize("share, retrans, held", [(0.2, 40, True), (0.7, 40, False),
                                                  (0.2, 0, False)])
def test_no_tsq_holds_only_when_deeper_than_with_tsq_and_with_more_losses(share, retrans, held):
    base = figures(ratio=0.6, retrans=0)
    v = judge(CELLS_BY_KEY["upload-no-tsq"], figures(ratio=share, retrans=retrans),
              figures(**GUARDED), base)
    assert f"{share:.0%} against 60% with TSQ, {retrans} retransmissions against 0" in v[0]
    assert v[0].endswith(": held") == held and ("did NOT hold" in v[0]) == (not held)
    assert "only the upload with TSQ" in " ".join(v) or "shows the upload with TSQ only" in v[1]


def test_download_cells_say_why_they_are_not_comparable_instead_of_a_verdict():
    v = judge(CELLS_BY_KEY["download-cubic"], figures(ratio=0.3), figures(**GUARDED))
    assert v[0].startswith("not comparable with the paper: the paper's download mechanism")
    assert "A-MPDU" in v[0] and not any("held" in s for s in v)


def test_too_few_scans_and_no_second_inside_a_scan_are_said():
    v = judge(CELLS_BY_KEY["download-bbr"], figures(scans=2, ratio=math.nan), figures(**GUARDED))
    assert v[0] == ("only 2 scan(s) in the unguarded run (at least 3 wanted): run longer "
                    "(--seconds)")
    assert v[1] == "no second fell inside a scan: the drop could not be measured"


def test_the_table_has_two_rows_per_cell_and_no_paper_number_where_not_comparable():
    rows = [(CELLS_BY_KEY["upload-tsq"], figures(ratio=0.81, retrans=3), figures(**GUARDED)),
            (CELLS_BY_KEY["download-reno"], figures(ratio=0.4, cc="reno"), figures(**GUARDED))]
    lines = table(rows).splitlines()
    assert lines[0] == "| " + " | ".join(COLUMNS) + " |" and len(lines) == 2 + 4
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]
    assert all(len(c) == len(COLUMNS) for c in cells)
    off, on = cells[0], cells[1]
    assert off[0] == "upload, TSQ as the kernel ships it (cubic)" and off[1] == "off"
    assert (off[4], off[8], off[9]) == ("81%", "3", "57% (Fig. 3)")
    assert (on[0], on[2], on[4], on[5], on[9]) == ("", "0", "-", "95%",
                                                   "no periodic drop (Fig. 26)")
    reno = cells[2]
    assert reno[4] == "40% (no A-MPDU)"
    assert reno[9] == "not comparable: no A-MPDU in the lab's 802.11g air"


SS = """T 100.00
ESTAB 0      0      192.168.77.140:43086 192.168.77.1:5201
\t skmem:(r0,rb131072,t0,tb87040,f0,w0,o0,bl0,d0) cubic mss:1448 cwnd:10 bytes_acked:187 rtt:19.0/7.4
ESTAB 0      363448 192.168.77.140:43098 192.168.77.1:5201
\t skmem:(r0,rb131072,t72360,tb382976,f1864,w374968,o0,bl0,d0) cubic rto:236 rtt:32.585/4.917 mss:1448 cwnd:44 bytes_acked:7156054 unacked:21
T 100.25
T 100.50
ESTAB 0      1284376 10.77.0.2:53944 192.168.77.1:5201
\t skmem:(r0,rb131072,t0,tb1671168,f3816,w1437976,o0,bl0,d0) cubic rtt:272.006/12.536 mss:1448 cwnd:192 bytes_acked:8792294 unacked:196
T garbled
"""


def test_the_sender_s_queue_is_read_from_the_data_connection_of_each_reading():
    got = parse_queue_samples(SS)
    assert [(q.t, q.in_flight, q.below_tcp, q.cwnd, q.rtt_ms) for q in got] == [
        (100.0, 21 * 1448, 72360, 44, 32.585), (100.5, 196 * 1448, 0, 192, 272.006)]
    assert parse_queue_samples("") == []


def test_cwnd_comes_from_the_sending_end_of_each_direction():
    doc = {"start": {"timestamp": {"timesecs": 1000}},
           "intervals": [{"sum": {"start": 0.0}, "streams": [{"snd_cwnd": 64000}]},
                         {"sum": {"start": 1.0}, "streams": [{}]}]}
    assert cwnd_series(doc, "upload") == [(1000.0, 64.0)]
    assert cwnd_series({"server_output_json": doc}, "download") == [(1000.0, 64.0)]
    assert cwnd_series({}, "download") == []


def test_the_summary_is_strict_json_with_a_nan_figure_as_null():
    text = strict_json({"cells": {"download-bbr": {"guard_on": figures(**GUARDED)}}})
    doc = json.loads(text, parse_constant=lambda c: pytest.fail(f"non-strict JSON: {c}"))
    assert doc["cells"]["download-bbr"]["guard_on"]["share_in_scans"] is None
