"""Issue 24's lab check: the "without TSQ" setting of `make paper` really changes how much the
sender queues during a scan, and raising tcp_limit_output_bytes (the sysctl the paper names)
does not.

Three 30 s uploads, each with a scan (`iw dev wlan1 scan trigger`, the kernel's own) 10 s in,
and the sending socket read with `ss` every 0.25 s: the kernel as it ships, the same with
tcp_limit_output_bytes raised 16-fold, and the sender behind a veth (tests/lab/paper.py,
docs/paper.md).  The figure is the bytes sent and not yet acknowledged while the scan runs:
on the lab's air a few kB are on the way, the rest waits at the station.
"""

from __future__ import annotations

import shlex
import time

import pytest

from .lab import STA_IF, wait_until
from .measure import percentile
from .paper import (QueueSample, parse_queue_samples, queue_sampler, remove_sender_without_tsq,
                    sender_without_tsq)

pytestmark = pytest.mark.lab

UPLOAD_SECONDS = 30
SCAN_AFTER = 10
RAISED = 16  # tcp_limit_output_bytes x 16


def _upload_with_a_scan(lab, label: str, netns: str | None) -> tuple[list[QueueSample], list]:
    where = f"ip netns exec {shlex.quote(netns)} " if netns else ""
    upload = lab.start_traffic("upload", UPLOAD_SECONDS, ping_interval=None, netns=netns)
    sampler = lab.spawn(f"{where}sh -c {shlex.quote(queue_sampler(UPLOAD_SECONDS))}",
                        name=f"paper-check-ss-{label}")
    time.sleep(SCAN_AFTER)
    t_scan = lab.guest_time()
    wait_until(lambda: lab.run(f"iw dev {STA_IF} scan trigger", 30)[0] == 0, 20,
               "the kernel to take a scan request (busy while one runs)", interval=1)
    upload.wait()  # raises LabError naming iperf3's log if it did not finish
    assert sampler.wait(60) is not None
    scans = [s for s in lab.scans(t_scan - 1) if s.end is not None]
    samples = parse_queue_samples(sampler.output())
    return samples, scans


def _in_scans(samples: list[QueueSample], scans) -> list[QueueSample]:
    return [q for q in samples if any(s.start <= q.t <= s.end for s in scans)]


def test_without_tsq_the_sender_queues_more_during_a_scan(lab):
    assert lab.name_owner() is None, "a guard is running: it would abort the scan"
    default = int(lab.check("sysctl -n net.ipv4.tcp_limit_output_bytes"))
    figures = {}
    try:
        for label, netns, limit in (("kernel", None, default),
                                    ("raised-limit", None, default * RAISED),
                                    ("no-tsq", "sender", default)):
            lab.check(f"sysctl -qw net.ipv4.tcp_limit_output_bytes={limit}")
            ns = sender_without_tsq(lab) if netns else None
            samples, scans = _upload_with_a_scan(lab, label, ns)
            assert scans, f"{label}: no scan ended after the trigger: {lab.scans(0)[-3:]}"
            during = _in_scans(samples, scans)
            assert len(during) >= 4, (label, len(samples), scans)
            figures[label] = {
                "in_flight_kB": percentile([q.in_flight / 1000 for q in during], 50),
                "below_tcp_kB": percentile([q.below_tcp / 1000 for q in during], 50),
                "below_tcp_upload_kB": percentile([q.below_tcp / 1000 for q in samples], 50),
                "cwnd": percentile([q.cwnd for q in during], 50),
                "rtt_ms": percentile([q.rtt_ms for q in during], 50),
                "samples": len(during), "scan_s": round(sum(s.end - s.start for s in scans), 1)}
    finally:
        lab.check(f"sysctl -qw net.ipv4.tcp_limit_output_bytes={default}")
        remove_sender_without_tsq(lab)
    for label, f in figures.items():
        lab.say(f"sender during the scan, {label}: median {f['in_flight_kB']:.0f} kB in flight, "
                f"{f['below_tcp_kB']:.0f} kB owned below TCP (TSQ's count; "
                f"{f['below_tcp_upload_kB']:.0f} kB over the whole upload), cwnd {f['cwnd']:.0f}, "
                f"srtt {f['rtt_ms']:.0f} ms ({f['samples']} readings in {f['scan_s']} s of scan)")
    kernel, raised, no_tsq = figures["kernel"], figures["raised-limit"], figures["no-tsq"]
    # the no-TSQ setting lets the queue at the station grow: several times the kernel's
    assert no_tsq["in_flight_kB"] >= 4 * kernel["in_flight_kB"], figures
    # ... and TSQ no longer sees it: over the upload the kernel's sender owns tens of kB below
    # TCP and the one behind the veth next to nothing, and during the scan the latter owns a
    # sliver of what it has in flight.  (During the scan alone the kernel's own count is no
    # yardstick: cwnd-limited, its few segments are on the air and freed, and on 6.12 most
    # readings inside a scan are 0.)
    assert no_tsq["below_tcp_upload_kB"] < 0.25 * kernel["below_tcp_upload_kB"], figures
    assert no_tsq["below_tcp_kB"] <= 0.01 * no_tsq["in_flight_kB"], figures
    # raising the sysctl the paper names changes nothing that matters: TSQ's limit is the
    # smaller of it and a few ms at the pacing rate (docs/paper.md)
    assert raised["in_flight_kB"] <= 2 * kernel["in_flight_kB"], figures
