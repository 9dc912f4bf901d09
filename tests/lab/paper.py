"""`make paper`: the paper's experiment matrix in the virtual Wi-Fi lab, guard off and on.

    /usr/bin/python3 -m tests.lab.paper [--seconds 105] [--cells upload-tsq,...] [--out paper-results]

The paper (Kato et al., "Experimental Analysis and Resolution Proposal on Performance Degradation
of TCP over IEEE 802.11n Wireless LAN Caused by Access Point Scanning") measures an upload with
and without TCP small queues (TSQ) and a download with CUBIC and NewReno at the sender, then the
upload with its scan-skipping NetworkManager (Figs. 25-26).  This runs each cell in the lab,
once with the guard off and once on, with NetworkManager's own bgscan at the lab's weak signal
(a scan every 30 s: at least three in the default 105 s), and writes <out>/table.md,
<out>/summary.json (strict JSON) and one plot per cell, in the style of the paper's
throughput-and-cwnd-over-time figures.  docs/paper.md explains the table.
"""

from __future__ import annotations

import argparse
import math
import re
import shlex
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

from .demo import machine, strict_json
from .lab import AP_ADDR, AP_NS, STA_IF, Lab
from .scenario import (GUARD_SETTINGS, SIMULATION_NOTE, WEAK_LINK_BGSCAN, Guardd, MeasuredRun,
                       arm_weak_link, measured_transfer, wait_bgscan)
from .vm import REPO, LabError

# ---- the matrix --------------------------------------------------------------------------------
# "Without TSQ" on today's kernels (docs/paper.md): the station's iperf3 sends from a network
# namespace behind a veth pair and the station routes its packets out of wlan1.  ip_rcv() orphans
# each packet as it enters the station's own stack, so the sending socket's sk_wmem_alloc, which
# TSQ counts, falls as soon as a segment crosses the veth: TSQ never throttles, and the queue
# between TCP and the air (wlan1's fq_codel, hwsim's frames awaiting the medium) is filled by
# congestion control alone, as before Linux 3.6.  tcp_limit_output_bytes cannot do this: TSQ's
# limit is the smaller of it and the pacing rate's few milliseconds (test_lab_paper.py).
NO_TSQ_NS = "notsq"
NO_TSQ_NET = ("10.77.0.1", "10.77.0.2", "10.77.0.0/30")  # station's end, sender's end, net
NO_TSQ_LINK = ("sgv0", "sgv1")  # NetworkManager leaves them alone (NM_CONF: only wlan1)

A_MPDU = ("the paper's download mechanism is the AP sending fewer A-MPDUs with fewer MPDUs each "
          "(Figs. 17-18, 21-22); the lab's 802.11g air has no aggregation, so the lab's share "
          "measures what a scan costs a download without it, not the paper's effect")


@dataclass(frozen=True)
class Cell:
    key: str
    title: str
    direction: str           # "upload" (station -> AP) or "download" (AP -> station)
    congestion: str          # at the sender
    tsq: bool                # False: the sender behind a veth (NO_TSQ_NS)
    paper: str               # what the paper found, with its figure
    paper_share: float | None  # its throughput in degraded periods / normal, where it gives one
    figure: str              # the paper's figure for this cell
    comparable: str | None   # None, or why the lab cannot reproduce the paper's mechanism


CELLS = (
    Cell("upload-tsq", "upload, TSQ as the kernel ships it", "upload", "cubic", True,
         "136 Mbit/s, down to 57% in ~10 s degraded periods every 120 s (Fig. 3); with the "
         "scan-skipping method no periodic drop (Fig. 26)", 0.57, "Fig. 3", None),
    Cell("upload-no-tsq", "upload, TSQ made ineffective (sender behind a veth)", "upload",
         "cubic", False, "174 Mbit/s, down to 10%, with losses and cwnd collapsing (Fig. 9)",
         0.10, "Fig. 9", None),
    Cell("download-cubic", "download, CUBIC at the sender", "download", "cubic", True,
         "drops sharply in degraded periods, low just after; no share given (Fig. 15)", None,
         "Fig. 15", A_MPDU),
    Cell("download-reno", "download, Reno at the sender", "download", "reno", True,
         "as with CUBIC; cwnd grows linearly (Fig. 19); no share given", None, "Fig. 19",
         A_MPDU),
    Cell("download-bbr", "download, BBR at the sender", "download", "bbr", True,
         "not in the paper", None, "-", None),
)
CELLS_BY_KEY = {c.key: c for c in CELLS}
MIN_SCANS = 3          # the issue: each unguarded run contains at least three scans
DROP = 0.9             # a share of outside below this is a drop the paper would call one
FLAT = 0.9             # a guarded run's worst second at least this share of its median

T_START = time.monotonic()


def say(msg: str) -> None:
    print(f"[paper {time.monotonic() - T_START:6.1f}s] {msg}", flush=True)


# ---- the figures of one run --------------------------------------------------------------------
def sender_side(raw: dict, direction: str) -> dict:
    """The sending end's iperf3 document: the client's for an upload, the server's (which the
    client fetched with --get-server-output) for a download."""
    return raw if direction == "upload" else raw.get("server_output_json", {})


def cwnd_series(raw: dict, direction: str) -> list[tuple[float, float]]:
    """(guest time, cwnd in kB) per interval at the sender, as iperf3 reads it from TCP_INFO."""
    doc = sender_side(raw, direction)
    try:
        t0 = doc["start"]["timestamp"]["timesecs"]
    except (KeyError, TypeError):
        return []
    out = []
    for iv in doc.get("intervals", []):
        streams = iv.get("streams") or [{}]
        cwnd = streams[0].get("snd_cwnd")
        if isinstance(cwnd, (int, float)):
            out.append((t0 + iv["sum"]["start"], cwnd / 1000))
    return out


def congestion_used(raw: dict) -> str | None:
    """The congestion control the sender ran, as iperf3 reports it."""
    value = raw.get("end", {}).get("sender_tcp_congestion")
    return value if isinstance(value, str) else None


def retransmits(raw: dict) -> int | None:
    value = raw.get("end", {}).get("sum_sent", {}).get("retransmits")
    return value if isinstance(value, int) else None


def run_figures(summary: dict, raw: dict) -> dict:
    """The figures of one run the table prints (the issue's list), from measure.summarize's
    summary and iperf3's own document."""
    per_second = summary["per_second"]
    return {
        "scans": summary["scans"],
        "scans_aborted": summary["scans_aborted"],
        "scan_seconds": summary["scan_seconds"],
        "pm1_null_frames": summary["pm1_null_frames"],
        "share_in_scans": per_second["scans"]["ratio"],
        "seconds_in_scans": per_second["scans"]["during_n"],
        "worst_over_median": per_second["worst_over_median"],
        "median_mbps": per_second["median_mbps"],
        "rtt_p99_ms": summary["rtt"]["all"]["p99_ms"],
        "retransmits": retransmits(raw),
        "congestion": congestion_used(raw),
        "guard_engaged_after_s": summary.get("guard_engaged_after_s"),
    }


# ---- judging a cell against the paper ----------------------------------------------------------
def _finite(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def judge(cell: Cell, off: dict, on: dict, upload_tsq_off: dict | None = None) -> list[str]:
    """Sentences saying, for one cell, whether the paper's finding held in the lab, each with
    the figures it rests on.  `off`/`on`: run_figures of the two runs; `upload_tsq_off`: the
    TSQ upload's unguarded figures, which the no-TSQ cell is compared with."""
    out = []
    share = off["share_in_scans"]
    if off["scans"] < MIN_SCANS:
        out.append(f"only {off['scans']} scan(s) in the unguarded run (at least {MIN_SCANS} "
                   "wanted): run longer (--seconds)")
    if cell.comparable:
        out.append(f"not comparable with the paper: {cell.comparable}")
    elif not _finite(share):
        out.append("no second fell inside a scan: the drop could not be measured")
    elif cell.key == "upload-tsq":
        held = share < DROP
        out.append(f"paper: throughput drops during scans (to 57%, Fig. 3); lab: {share:.0%} "
                   f"of outside: {'held' if held else 'did NOT hold'}"
                   + (" (the lab's scans are shorter and its air slower: see docs/paper.md)"
                      if held and share > 0.57 else ""))
    elif cell.key == "upload-no-tsq":
        base = (upload_tsq_off or {}).get("share_in_scans")
        if _finite(base):
            deeper = share < base
            losses = (off["retransmits"] or 0) > ((upload_tsq_off or {}).get("retransmits") or 0)
            out.append(f"paper: without TSQ the drop is deeper (10% against 57%) and comes "
                       f"with losses; lab: {share:.0%} against {base:.0%} with TSQ, "
                       f"{off['retransmits']} retransmissions against "
                       f"{(upload_tsq_off or {}).get('retransmits')}: "
                       + ("held" if deeper and losses else
                          "deeper: " + ("yes" if deeper else "no") + ", more losses: "
                          + ("yes" if losses else "no") + ": did NOT hold"))
        else:
            out.append(f"lab: {share:.0%} of outside; no TSQ upload to compare with")
    else:
        out.append(f"lab: {share:.0%} of outside (not in the paper)")
    # the guard's counterpart of Fig. 26: no scan, no drop
    flat = on["worst_over_median"]
    if on["scans"] == 0 and _finite(flat) and flat >= FLAT:
        out.append(f"guard on: 0 scans, worst second {flat:.0%} of the median: the drops are "
                   "gone (the paper's Fig. 26 " + ("for this cell" if cell.key == "upload-tsq"
                                                    else "shows the upload with TSQ only") + ")")
    elif on["scans"] == 0 and _finite(flat):
        out.append(f"guard on: 0 scans, yet the worst second is {flat:.0%} of the median "
                   f"(target >= {FLAT:.0%}; {on['retransmits']} retransmissions): no scan's "
                   "doing, so nothing the guard can remove")
    else:
        scans = on["scans"] - on["scans_aborted"]
        out.append(f"guard on: {on['scans']} scan(s) ({scans} not aborted), worst second "
                   + (f"{flat:.0%}" if _finite(flat) else "-")
                   + f" of the median (target >= {FLAT:.0%}): drops NOT removed")
    return out


# ---- the table ----------------------------------------------------------------------------------
def _pct(x) -> str:
    return f"{x:.0%}" if _finite(x) else "-"


def _num(x, fmt: str = "{:.0f}") -> str:
    return fmt.format(x) if _finite(x) else "-"


COLUMNS = ("cell", "guard", "scans", "PM=1 Nulls", "throughput in scans / outside",
           "worst s / median", "median Mbit/s", "RTT p99 ms", "retrans.", "paper")


def table(rows: list[tuple[Cell, dict, dict]]) -> str:
    """A Markdown table: per cell its guard-off and guard-on runs; the paper's value where it
    gives one, and where the lab cannot reproduce the mechanism, that instead of a number."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for cell, off, on in rows:
        if cell.comparable:
            paper = "not comparable: no A-MPDU in the lab's 802.11g air"
        elif cell.paper_share is not None:
            paper = f"{cell.paper_share:.0%} ({cell.figure})"
        else:
            paper = cell.paper
        for mode, f in (("off", off), ("on", on)):
            in_scans = _pct(f["share_in_scans"])
            if cell.comparable and mode == "off" and in_scans != "-":
                in_scans += " (no A-MPDU)"
            lines.append("| " + " | ".join([
                f"{cell.title} ({f['congestion'] or cell.congestion})" if mode == "off" else "",
                mode, f"{f['scans']}" + (f" ({f['scans_aborted']} aborted)"
                                         if f["scans_aborted"] else ""),
                f"{f['pm1_null_frames']}", in_scans, _pct(f["worst_over_median"]),
                _num(f["median_mbps"], "{:.1f}"), _num(f["rtt_p99_ms"]),
                _num(f["retransmits"]), paper if mode == "off" else "no periodic drop (Fig. 26)"
                if cell.key == "upload-tsq" else ""]) + " |")
    return "\n".join(lines)


# ---- the plot -----------------------------------------------------------------------------------
def plot(cell: Cell, runs: dict[str, MeasuredRun], path: Path, subtitle: str) -> None:
    """Throughput (receiver, per second) and the sender's cwnd over time, scans shaded: the
    paper's Figs. 3, 9, 15, 19 and 25-26, guard off above and on below."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 1, figsize=(8, 5.6), sharex=True, dpi=80)
    for ax, mode in zip(axes, ("off", "on")):
        m = runs[mode]
        t0 = m.t0
        for i, s in enumerate(m.scans):
            end = s.end if s.end is not None else m.t_end
            ax.axvspan(s.start - t0, end - t0, color="tab:red", alpha=0.15, lw=0,
                       label="scan" if i == 0 else None)
        rx = m.run.iperf.receiver
        ax.step([i.start - t0 for i in rx], [i.mbps for i in rx], where="post",
                color="tab:blue", lw=1.3, label="throughput (receiver, 1 s)")
        ax.set_ylabel("Mbit/s")
        ax.set_ylim(0, max([i.mbps for i in rx] + [1]) * 1.2)
        cax = ax.twinx()
        cw = cwnd_series(m.run.iperf.raw, cell.direction)
        cax.plot([t - t0 for t, _ in cw], [c for _, c in cw], color="tab:green", lw=1,
                 label="cwnd at the sender (kB)")
        cax.set_ylabel("cwnd kB")
        cax.set_ylim(0, max([c for _, c in cw] + [1]) * 1.2)
        f = run_figures(m.summary, m.run.iperf.raw)
        ax.set_title(f"guard {mode}: {f['scans']} scans, in scans {_pct(f['share_in_scans'])} "
                     f"of outside, worst s {_pct(f['worst_over_median'])} of median, "
                     f"{_num(f['retransmits'])} retransmissions", fontsize=9)
        h1, l1 = ax.get_legend_handles_labels()
        h2, l2 = cax.get_legend_handles_labels()
        ax.legend(h1 + h2, l1 + l2, loc="lower left", fontsize=7, ncol=3, framealpha=0.8)
    axes[-1].set_xlabel("seconds since the start of the transfer")
    fig.suptitle(f"{cell.title} ({cell.congestion})\n" + textwrap.fill(subtitle, 100),
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# ---- the sender's queue (the lab check that the no-TSQ setting does what docs/paper.md says) ----
SS_EVERY = 0.25  # seconds between two readings of the sending socket


def queue_sampler(seconds: float) -> str:
    """A guest shell loop printing, every SS_EVERY s, a time stamp and `ss`'s view of the TCP
    sockets to iperf3's port: run it in the sender's network namespace."""
    # until a deadline, not a count: on the TCG guest a reading takes 0.1-0.5 s itself
    return (f"end=$(( $(date +%s) + {math.ceil(seconds)} )); "
            f"while [ $(date +%s) -lt $end ]; do echo \"T $(date +%s.%N)\"; "
            f"ss -tnimH dst {AP_ADDR} 'dport = :5201'; sleep {SS_EVERY}; done")


_SS_FIELDS = {"unacked": r"\bunacked:(\d+)", "mss": r"\bmss:(\d+)", "cwnd": r"\bcwnd:(\d+)",
              "rtt_ms": r"\brtt:([\d.]+)/", "bytes_acked": r"\bbytes_acked:(\d+)",
              "wmem": r"skmem:\([^)]*\bt(\d+)"}


@dataclass
class QueueSample:
    t: float            # guest time
    in_flight: int      # bytes sent and not yet acknowledged (unacked x mss)
    below_tcp: int      # bytes the socket still owns below TCP (sk_wmem_alloc: TSQ's count)
    cwnd: int
    rtt_ms: float


def parse_queue_samples(text: str) -> list[QueueSample]:
    """queue_sampler's output: per reading, the busiest socket (the most bytes acknowledged:
    iperf3's data connection, not its control one).  Readings without one are left out."""
    out: list[QueueSample] = []
    t: float | None = None
    best: dict[str, float] | None = None

    def flush() -> None:
        if t is not None and best is not None:
            out.append(QueueSample(t, int(best.get("unacked", 0) * best.get("mss", 0)),
                                   int(best.get("wmem", 0)), int(best.get("cwnd", 0)),
                                   best.get("rtt_ms", math.nan)))

    for line in text.splitlines():
        if line.startswith("T "):
            flush()
            try:
                t, best = float(line[2:]), None
            except ValueError:
                t, best = None, None
            continue
        got = {k: float(m.group(1)) for k, rx in _SS_FIELDS.items()
               if (m := re.search(rx, line))}
        if "bytes_acked" in got and (best is None
                                     or got["bytes_acked"] > best.get("bytes_acked", -1)):
            best = got
    flush()
    return out


# ---- the lab ------------------------------------------------------------------------------------
def sender_without_tsq(lab: Lab) -> str:
    """Set up (once) the network namespace the no-TSQ cell sends from; returns its name."""
    if NO_TSQ_NS in lab.check("ip netns list").split():
        return NO_TSQ_NS
    near, far, net = NO_TSQ_NET
    a, b = NO_TSQ_LINK
    lab.check(f"""set -e
        ip netns add {NO_TSQ_NS}
        ip link add {a} type veth peer name {b} netns {NO_TSQ_NS}
        ip addr add {near}/30 dev {a}
        ip link set {a} up
        ip -n {NO_TSQ_NS} addr add {far}/30 dev {b}
        ip -n {NO_TSQ_NS} link set {b} up
        ip -n {NO_TSQ_NS} link set lo up
        ip -n {NO_TSQ_NS} route add default via {near}
        sysctl -qw net.ipv4.conf.{a}.forwarding=1 net.ipv4.conf.{STA_IF}.forwarding=1
        ip -n {AP_NS} route replace {net} via {lab.sta_addr}
        ip netns exec {NO_TSQ_NS} ping -c 1 -W 5 {AP_ADDR} >/dev/null""")
    return NO_TSQ_NS


def remove_sender_without_tsq(lab: Lab) -> None:
    lab.run(f"ip netns del {NO_TSQ_NS}; ip -n {AP_NS} route del {NO_TSQ_NET[2]}; "
            f"sysctl -qw net.ipv4.conf.{STA_IF}.forwarding=0")


def congestion_available(lab: Lab, name: str) -> str | None:
    """None if the guest's kernel can run congestion control `name`, else why not."""
    lab.run(f"modprobe tcp_{shlex.quote(name)}")
    have = lab.check("sysctl -n net.ipv4.tcp_available_congestion_control").split()
    return None if name in have else (f"the guest's kernel offers {' '.join(have)}, not "
                                      f"{name}")


def run_cell(lab: Lab, cell: Cell, mode: str, seconds: float) -> MeasuredRun:
    netns = None if cell.tsq else sender_without_tsq(lab)
    m = measured_transfer(lab, cell.direction, seconds, f"{cell.key}, guard {mode}",
                          progress=say, netns=netns, congestion=cell.congestion)
    used = congestion_used(m.run.iperf.raw)
    if used != cell.congestion:
        raise LabError(f"{cell.key}: the sender ran {used!r}, not {cell.congestion!r}")
    return m


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="make paper", description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=105,
                   help="length of each transfer (bgscan scans every 30 s: 105 s holds three)")
    p.add_argument("--cells", default=",".join(CELLS_BY_KEY),
                   help="comma-separated cells to run, of: " + ", ".join(CELLS_BY_KEY))
    p.add_argument("--out", type=Path, default=REPO / "paper-results")
    args = p.parse_args(argv)
    try:
        cells = [CELLS_BY_KEY[k.strip()] for k in args.cells.split(",") if k.strip()]
    except KeyError as e:
        p.error(f"--cells: no cell {e}; the cells are {', '.join(CELLS_BY_KEY)}")
    args.out.mkdir(parents=True, exist_ok=True)
    info = machine()
    minutes = (60 + len(cells) * 2 * (args.seconds + 45)) / 60
    say(f"{info['date']} on {info['cpu']} x{info['cores']}; {len(cells)} cells, guard off "
        f"then on, {args.seconds:g} s each: about {minutes:.0f} min")
    say(SIMULATION_NOTE)
    lab = Lab.start(log=print)
    guardd = Guardd(lab)
    runs: dict[str, dict[str, MeasuredRun]] = {c.key: {} for c in cells}
    skipped: dict[str, str] = {}
    try:
        info["guest_kernel"] = lab.check("uname -r").strip()
        info["guest_qdisc"] = lab.check("sysctl -n net.core.default_qdisc").strip()
        info["tcp_limit_output_bytes"] = int(lab.check(
            "sysctl -n net.ipv4.tcp_limit_output_bytes"))
        for c in cells:
            why = congestion_available(lab, c.congestion)
            if why:
                skipped[c.key] = why
                say(f"{c.key}: skipped: {why}")
        original = lab.bgscan()
        for mode in ("off", "on"):
            if mode == "on":
                say("starting nm-scanguard (" + ", ".join(
                    f"{k}={v}" for k, v in GUARD_SETTINGS.items()) + ")")
                guardd.start()
            for c in cells:
                if c.key in skipped:
                    continue
                if mode == "on":
                    wait_bgscan(lab, WEAK_LINK_BGSCAN, GUARD_SETTINGS["release_after"] + 20)
                arm_weak_link(lab)
                say(f"{c.key}, guard {mode}: {c.direction} {args.seconds:g} s "
                    f"({c.congestion}{'' if c.tsq else ', sender behind a veth: no TSQ'})")
                m = run_cell(lab, c, mode, args.seconds)
                runs[c.key][mode] = m
                say(m.report())
        say("waiting for the guard to restore bgscan")
        wait_bgscan(lab, WEAK_LINK_BGSCAN, GUARD_SETTINGS["release_after"] + 20)
        guardd.stop()
        lab.set_bgscan(original)
        remove_sender_without_tsq(lab)
    finally:
        if guardd.running():
            guardd.stop()
        lab.stop()
    return report(cells, runs, skipped, info, args.out)


def report(cells: list[Cell], runs: dict[str, dict[str, MeasuredRun]], skipped: dict[str, str],
           info: dict, out: Path) -> int:
    figures = {k: {mode: run_figures(m.summary, m.run.iperf.raw) for mode, m in r.items()}
               for k, r in runs.items() if len(r) == 2}
    rows = [(c, figures[c.key]["off"], figures[c.key]["on"]) for c in cells if c.key in figures]
    tsq_off = figures.get("upload-tsq", {}).get("off")
    verdicts = {c.key: judge(c, off, on, tsq_off) for c, off, on in rows}
    head = (f"{info['date']}; host {info['cpu']} x{info['cores']} ({info['os']}, "
            f"{info['qemu']}, TCG); guest kernel {info.get('guest_kernel')}, qdisc "
            f"{info.get('guest_qdisc')}, tcp_limit_output_bytes "
            f"{info.get('tcp_limit_output_bytes')}; {SIMULATION_NOTE}")
    text = [f"nm-scanguard lab: the paper's matrix, {head}", "", table(rows), ""]
    for c, _, _ in rows:
        text.append(f"- {c.key}: " + "; ".join(verdicts[c.key]))
    for key, why in skipped.items():
        text.append(f"- {key}: not run: {why}")
    body = "\n".join(text) + "\n"
    print(body)
    (out / "table.md").write_text(body)
    summary = {"machine": info, "air": SIMULATION_NOTE, "guard_settings": GUARD_SETTINGS,
               "cells": {c.key: {"title": c.title, "direction": c.direction,
                                 "congestion": c.congestion, "tsq": c.tsq, "paper": c.paper,
                                 "paper_share": c.paper_share, "comparable": c.comparable,
                                 "guard_off": figures[c.key]["off"],
                                 "guard_on": figures[c.key]["on"],
                                 "verdict": verdicts[c.key]} for c, _, _ in rows},
               "skipped": skipped}
    (out / "summary.json").write_text(strict_json(summary))
    for c, _, _ in rows:
        plot(c, runs[c.key], out / f"{c.key}.png", head)
    say(f"wrote {out / 'table.md'}, {out / 'summary.json'} and "
        f"{len(rows)} plots ({', '.join(c.key + '.png' for c, _, _ in rows)})")
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
