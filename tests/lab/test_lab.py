"""The lab itself works, and the problem nm-scanguard solves shows in it (issue 4, item 1).

Run with `make lab` (or `/usr/bin/python3 -m pytest -v -s tests/lab`); the lab boots once.
"""

import math
import time

import pytest

from . import measure
from .measure import percentile
from .lab import (AP_ADDR, CONNECTION, COUNTRY, SCAN_FREQS_MHZ, SSID, STA_IF,
                  STRONG_SIGNAL_DBM, WEAK_SIGNAL_DBM)
from .demo import strict_json
from .scenario import (NM_DEFAULT_BGSCAN, Diagnose, MeasuredRun, arm_weak_link, diagnose_link,
                       matching_scan, measured_transfer, transfer_problems)

pytestmark = pytest.mark.lab

# The weak link is a real signal on the lab's medium (issue 9): see scenario.py.
BASELINE_SECONDS = 60  # bgscan's first scan at ≈27 s, ≈7 s long under load: one whole scan
# Pings every 50 ms in the baseline: on Debian 12's 6.1 the station goes back to its channel
# between scanned channels, so a scan delays only the pings that fall into one of its dwells
# (26 × 30-110 ms in ≈7 s).  At the transfers' 0.2 s, about 35 pings fall inside a scan and a
# run can hold no delayed one at all; four times as many make the tail a measurement.
BASELINE_PING_INTERVAL = 0.05
# A run whose pace the host set is measured again, up to this many runs in all (≈80 s each).
BASELINE_RUNS = 3


def test_station_connected_and_bgscan_visible(lab):
    t = time.monotonic()
    state = lab._busctl_json(f"get-property fi.w1.wpa_supplicant1 {lab.interface_path()} "
                             f"fi.w1.wpa_supplicant1.Interface State")["data"]
    assert state == "completed"
    assert lab.check("nmcli -t -f GENERAL.STATE device show wlan1").strip() \
        == "GENERAL.STATE:100 (connected)"
    assert lab.sta_addr.startswith("192.168.77.")
    # The SSID is not ASCII: wpa_supplicant gives it in hex, NetworkManager as text.
    ssid = str(lab.network_properties()["ssid"])
    assert measure.wpas_string(ssid) == SSID, (ssid, SSID.encode().hex())
    assert (CONNECTION, STA_IF) in lab.active_connections(), lab.active_connections()
    assert lab.bgscan() == NM_DEFAULT_BGSCAN
    assert lab.signal() == pytest.approx(STRONG_SIGNAL_DBM, abs=3)
    # nm-dispatcher was activated by dbus-daemon and ran our logging script.
    assert ("wlan1", "up") in [(i, a) for _, i, a in lab.dispatcher_events()]
    idle = lab.ping(5)
    assert idle.sent >= 20 and idle.loss == 0, idle.stats()
    lab.say(f"idle ping to {AP_ADDR}: {idle.stats()}; checks took {time.monotonic() - t:.1f} s")


def test_medium_sets_the_signal_the_station_sees(lab):
    """The medium's per-link signal is what wpa_supplicant's SignalPoll reports (and NM, and
    bgscan); the medium's statistics show frames crossing it."""
    t = time.monotonic()
    try:
        lab.set_signal(WEAK_SIGNAL_DBM)
        assert lab.wait_signal(WEAK_SIGNAL_DBM) == pytest.approx(WEAK_SIGNAL_DBM, abs=2)
    finally:
        lab.set_signal(STRONG_SIGNAL_DBM)
    assert lab.wait_signal(STRONG_SIGNAL_DBM) == pytest.approx(STRONG_SIGNAL_DBM, abs=2)
    stats = lab.medium_stats()
    assert stats and sum(s["delivered"] for s in stats) > 0, lab.log_text("medium")[-2000:]
    lab.say(f"medium: signal {STRONG_SIGNAL_DBM} -> {WEAK_SIGNAL_DBM} dBm at the station and "
            f"back in {time.monotonic() - t:.1f} s")


def test_baseline_upload_bgscan_scans_disturb_the_link(lab):
    """Guard not running: bgscan scans during an upload, with PM=1 Null frames and RTT spikes.
    `scanguardctl diagnose`, run beside it as a desktop user, finds the scan, names bgscan and
    finds the latency spikes inside it (issue 23 (a))."""
    network = lab.network_path()
    original = lab.bgscan(network)
    try:
        m, doc = air_paced_baseline(lab)
    finally:
        lab.set_bgscan(original, network)
    assert lab.bgscan(network) == original
    summary, scans = m.summary, m.scans
    lab.say(m.report())
    (lab.vm.rundir / "baseline-upload.json").write_text(strict_json(summary))  # NaN: null
    lab.results[m.label] = summary

    # bgscan scanned, and the scan is the bgscan module's (that it scans again every 30 s is
    # check 3's and the demo's; one scan is what this check needs, and 30 s of the lab's budget).
    assert len(scans) >= 1, summary
    assert len(m.bgscan_requests) >= 1, summary
    # The scans cover the channels of a 2.4/5 GHz laptop card under the APs' country, not
    # hwsim's sub-GHz (802.11ah) band that the world domain would add (lab.COUNTRY).
    lo, hi = SCAN_FREQS_MHZ
    covered = sorted({f for s in scans for f in s.freqs})
    assert covered and all(lo <= f <= hi for f in covered), (
        f"the scans under country {COUNTRY} covered {covered} MHz, expected only {lo}-{hi} MHz")
    # The paper's mechanism: the station left the channel, announcing it with PM=1 Null frames,
    # and only while scanning.
    assert len(m.pm1) >= 10, summary
    assert summary["pm1_null_frames_outside_scans"] <= len(m.pm1) // 10, summary
    # What the air decides (the medium, not the emulated CPU, sets the pace): compared with the
    # same run's scan-free seconds, per-second throughput at the receiver drops while a scan runs
    # (first run on the medium: medians 7.3 vs 8.3 Mbit/s, 87 %; scan-free seconds 8.0-8.5) and
    # the RTT tail grows (p99 165 vs 130 ms).
    # A scan of S seconds runs for at least half of floor(S) - 1 of the seconds, wherever they
    # fall (one scan of 7 s on Debian 12, of 4.8-7 s on Debian 13); three at least, for a median.
    per_scan = summary["per_second"]["scans"]
    enough = max(3, math.floor(summary["scan_seconds"]) - 1)
    assert per_scan["during_n"] >= enough and per_scan["outside_n"] >= 20, (enough, summary)
    assert per_scan["ratio"] <= 0.95, per_scan
    # The pings show it too: a longer tail during scans (Debian 12's kernel), or, where a scan
    # all but stalls the transfer (Debian 13's 6.12: the receiver at 17 % during the scan),
    # no queue to wait in but pings lost while the station is away.
    rtt = summary["rtt"]
    assert rtt["during_scans"]["n"] > 0 and rtt["outside_scans"]["n"] > 0, summary
    scan_s = summary["scan_seconds"]
    answered_during = rtt["during_scans"]["n"] * BASELINE_PING_INTERVAL / scan_s
    answered_outside = (rtt["outside_scans"]["n"] * BASELINE_PING_INTERVAL
                        / (summary["seconds"] - scan_s))
    assert (rtt["during_scans"]["p99_ms"] > rtt["outside_scans"]["p99_ms"]
            or answered_during < answered_outside - 0.05), (
        f"the scans did not show in the pings: RTT p99 during scans "
        f"{rtt['during_scans']['p99_ms']} ms vs {rtt['outside_scans']['p99_ms']} ms outside; "
        f"answered {answered_during:.0%} during scans vs {answered_outside:.0%} outside", summary)
    # No link losses in the baseline: its scans are bgscan's, not a reconnect's.
    assert summary["link_losses"] == 0, summary["link_loss_events"]
    check_diagnose_found_bgscan(lab, doc, m)
    # The transfer itself ran for the whole time (judged by the time iperf3's intervals cover).
    problems = transfer_problems(m, BASELINE_SECONDS)
    assert not problems, "; ".join(problems) + "\n" + m.report()


def air_paced_baseline(lab) -> tuple[MeasuredRun, dict]:
    """The baseline upload with diagnose beside it, measured again while the host, not the
    air, set its pace (measure.host_paced), at most BASELINE_RUNS times in all.  What this check
    judges (throughput and RTT inside bgscan's scan against outside it) is the air's doing only
    when the senders keep the channel busy; on a slow host the emulated CPU leaves it idle and
    stalls the echoes whether or not a scan runs.  A host that sets the pace of every run fails
    the check with that said: it cannot judge there, and never passes without judging."""
    paced = []
    for run in range(1, BASELINE_RUNS + 1):
        arm_weak_link(lab)
        # As a user of group netdev, as Debian's installer makes the first user: wpa_supplicant
        # lets it read the bgscan string.  It records while bgscan's scan comes (≈27 s in).
        diagnose = Diagnose(lab, BASELINE_SECONDS - 5, as_user="netdev", label="diagnose-a")
        m = measured_transfer(lab, "upload", BASELINE_SECONDS, "baseline upload, guard off",
                              ping_interval=BASELINE_PING_INTERVAL)
        doc = diagnose.result()
        why = measure.host_paced(m.summary)
        if why is None:
            return m, doc
        paced.append(why)
        lab.say(f"baseline run {run} of {BASELINE_RUNS}: the host set its pace ({why} scan-free "
                f"seconds under {measure.AIR_LIMITED:.0%} busy)"
                + ("; measuring again" if run < BASELINE_RUNS else ""))
        lab.say(m.report())
    raise AssertionError(
        f"the host, not the air, set the pace of each of {BASELINE_RUNS} baseline runs (scan-free "
        f"seconds under {measure.AIR_LIMITED:.0%} busy: {', '.join(paced)}; more than "
        f"{measure.HOST_LIMITED_SHARE:.0%} is a slow or busy host): the scans' effect on the "
        "link cannot be judged on it; run make test again with the machine quiet")


def _echoes_by_scan(link: dict) -> tuple[list, list]:
    """diagnose's echoes (sent, rtt or None) that overlapped a scan, and the others; a lost
    echo counts as waiting 1 s."""
    spans = [(s["start"], s["end"] if s["end"] is not None else float("inf")) for s in link["scans"]]
    inside, outside = [], []
    for sent, rtt in link["echoes"]:
        end = sent + (1.0 if rtt is None else rtt / 1000)
        (inside if any(a < end and sent < b for a, b in spans) else outside).append(rtt)
    return inside, outside


def spike_rates(link: dict) -> tuple[float, float]:
    """The share of diagnose's echoes that were spikes, inside scans and outside them."""
    limit = link["summary"]["spike_threshold_ms"]

    def rate(rtts: list) -> float:
        spikes = [r is None or (limit is not None and r >= limit) for r in rtts]
        return sum(spikes) / len(spikes) if spikes else 0.0
    inside, outside = _echoes_by_scan(link)
    return rate(inside), rate(outside)


def rtt_medians(link: dict, q: float = 50) -> tuple[float, float]:
    """The median (or percentile `q`) RTT of diagnose's answered echoes inside scans and
    outside them."""
    inside, outside = _echoes_by_scan(link)
    return (percentile([r for r in inside if r is not None], q),
            percentile([r for r in outside if r is not None], q))


def check_diagnose_found_bgscan(lab, doc: dict, m) -> None:
    """Issue 23 (a): what diagnose said, against what the lab knows independently: the kernel's
    scans (`iw event`, run as root) and bgscan's own requests (wpa_supplicant's debug log)."""
    link = diagnose_link(doc)
    summary = link["summary"]
    since = doc["started_at"] - 10
    kernel, asked_all = lab.scans(since), lab.bgscan_requests(since)
    bgscan = [s for s in link["scans"] if s["source"] == "bgscan"]
    assert bgscan, f"diagnose labelled no scan bgscan: {link['scans']}"
    for scan in link["scans"]:
        assert matching_scan(kernel, scan["t0"]) is not None, \
            f"diagnose's scan at {scan['t0']:.2f} is not among iw event's: {kernel}"
        asked = [t for t in asked_all if 0 <= scan["t0"] - t <= 2.0]
        assert (scan["source"] == "bgscan") == bool(asked), (
            f"diagnose labelled the scan at {scan['t0']:.2f} {scan['source']}; bgscan asked for "
            f"one at {asked}")
    window = [s for s in kernel if doc["started_at"] + 1 <= s.start <= doc["started_at"] + doc["duration"] - 1]
    assert len(link["scans"]) >= len(window), (link["scans"], window)
    assert link["bgscan"] == NM_DEFAULT_BGSCAN and "wpa_supplicant" in link["bgscan_source"], link
    assert "every 30 s below it" in link["bgscan_explained"]
    assert not link["guard"]["running"]
    inside, outside = spike_rates(link)
    rtt_in, rtt_out = rtt_medians(link)
    # On 6.1 mac80211 goes back to the channel between channels while frames wait, so one scan
    # under load shows in diagnose's echoes in one measure or another, not always in each: a scan
    # with no echo past the spike threshold (2x the median), or a median inside the scan no higher
    # than outside it while the tail and the losses grew.  What must hold every time: the scan
    # showed in at least one of them (spike share, median, 90th percentile), and spikes were no
    # likelier outside scans than inside.
    tail_in, tail_out = rtt_medians(link, 90)
    assert inside >= outside and (inside > outside or rtt_in > rtt_out or tail_in > tail_out), (
        "diagnose's echoes did not show the scan", summary, rtt_in, rtt_out, tail_in, tail_out,
        inside, outside)
    assert link["ssid"] == SSID
    lab.say(f"diagnose (a), guard off, as a netdev user: {summary['scans']} scan(s) "
            f"({', '.join(s['source'] for s in link['scans'])}), {summary['spikes']} spikes "
            f"(median {summary['median_rtt_ms']:.1f} ms, threshold "
            f"{summary['spike_threshold_ms']:.0f} ms), {summary['spikes_in_scans']} inside scans; "
            f"echoes that were spikes: {inside:.0%} inside scans, {outside:.0%} outside; median "
            f"RTT {rtt_in:.0f} ms inside scans, {rtt_out:.0f} ms outside; "
            f"throughput inside/outside {summary['inside_share']}; verdict: {link['verdict'][0]}")
