"""`make demo`: the same upload and download in the virtual Wi-Fi lab, guard off then on.

    /usr/bin/python3 -m tests.lab.demo [--seconds 90] [--download-seconds 60] [--fade]
                                       [--out demo-results]

Boots the lab (QEMU TCG, mac80211_hwsim with the lab's wireless medium, hostapd,
NetworkManager, wpa_supplicant), puts the station at -72 dBm (below NetworkManager's -70 dBm
bgscan threshold: its own `simple:30:-70:86400` scans every 30 s; see scenario.py), measures an
idle ping, then runs an iperf3 upload and a download with ping alongside, without nm-scanguard
and then with it.  Prints a side-by-side table and writes <out>/summary.json and <out>/demo.png
(per-second throughput and RTT over time, scans shaded, the runs stacked like Fig. 25/26 of the
paper).  Each run is measured by scenario.measured_transfer, the function the lab checks 1 and 2
assert on.  With --fade (`make demo DEMO_ARGS=--fade`), then a fade under load: a second AP of
the network comes in range while the station's AP fades (`make roam`'s walk), once with
`roam_scans = targeted` and once with `full`; the table shows how soon each roamed and how long
the station was off its channel.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from nm_scanguard.output import finite

from .lab import PING_INTERVAL, Lab
from .measure import AIR_LIMITED, HOST_LIMITED_SHARE, host_paced
from .scenario import (GUARD_SETTINGS, SIMULATION_NOTE, WEAK_LINK_BGSCAN, Diagnose, Guardd,
                       MeasuredRun, arm_weak_link, measured_transfer, wait_bgscan)
from .vm import REPO

# What the demo judges a guarded run by; every verdict it prints is one the project holds itself
# to (issue 25).  The worst second at least 90 % of the median (issue 9).  RTT like with like:
# the guarded p99 against the same load's without the guard in its seconds without a scan, with
# 10 % for the spread between two runs (issue 9's bound for two runs' medians).  Under load the
# RTT is the station's own transmit queue: hwsim has no airtime queue limit, so mac80211 hands it
# every frame TCP's small queues let through and ping waits behind them; no guard changes that,
# so the idle link's p99 is shown, not judged (the guarded p99 was 4.6-6.9x it in the runs of
# 2026-11-24, and 0.71-1.00x the unguarded run's scan-free p99).
WORST_OVER_MEDIAN_TARGET = 0.9
RTT_P99_OVER_SCAN_FREE_TARGET = 1.1

T_START = time.monotonic()


def say(msg: str) -> None:
    print(f"[demo {time.monotonic() - T_START:6.1f}s] {msg}", flush=True)


def machine() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")),
               platform.processor())
    qemu = subprocess.run(["qemu-system-x86_64", "--version"], capture_output=True,
                          text=True).stdout.splitlines()
    return {"date": time.strftime("%Y-%m-%d %H:%M %Z"), "host": platform.node(),
            "kernel": platform.release(), "cpu": cpu, "cores": os.cpu_count(),
            "qemu": qemu[0] if qemu else "?", "accel": "TCG (no KVM), 2 vCPU, 2 GiB",
            "os": _os_release()}


def _os_release() -> str:
    for line in Path("/etc/os-release").read_text().splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip('"')
    return "?"


# ---- the table ----------------------------------------------------------------------------------
def _pct(value: float) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.0%}"


ROWS = [
    ("scans during the transfer", lambda s: f"{s['scans']}"),
    ("  of which aborted", lambda s: f"{s['scans_aborted']}"),
    ("  seconds spent scanning", lambda s: f"{s['scan_seconds']:.0f}"),
    ("bgscan scan requests", lambda s: f"{s['bgscan_requests']}"),
    ("PM=1 Null frames from the station", lambda s: f"{s['pm1_null_frames']}"),
    ("sender Mbit/s per second: min", lambda s: f"{s['throughput']['sender_mbps']['min']:.1f}"),
    ("                          p5", lambda s: f"{s['throughput']['sender_mbps']['p5']:.1f}"),
    ("                          median", lambda s: f"{s['throughput']['sender_mbps']['median']:.1f}"),
    ("receiver Mbit/s per second: min", lambda s: f"{s['throughput']['receiver_mbps']['min']:.1f}"),
    ("                            p5", lambda s: f"{s['throughput']['receiver_mbps']['p5']:.1f}"),
    ("                            median",
     lambda s: f"{s['throughput']['receiver_mbps']['median']:.1f}"),
    ("mean Mbit/s received", lambda s: f"{s['throughput']['mean_received_mbps']:.1f}"),
    ("receiver/s during scans / outside", lambda s: _pct(s["per_second"]["scans"]["ratio"])),
    ("worst second / median (receiver)", lambda s: _pct(s["per_second"]["worst_over_median"])),
    ("channel busy: median", lambda s: _pct(_air(s).get("busy_median"))),
    ("               in the worst second", lambda s: _pct(_air(s).get("worst_second_busy"))),
    (f"scan-free seconds < {AIR_LIMITED:.0%} busy", lambda s: "-" if not _air(s)
     else f"{_air(s)['seconds_not_air_limited']}/{_air(s)['seconds_judged']}"),
    ("link losses", lambda s: f"{s['link_losses']}"),
    ("ping RTT ms: p50", lambda s: f"{s['rtt']['all']['p50_ms']:.1f}"),
    ("             p99", lambda s: f"{s['rtt']['all']['p99_ms']:.1f}"),
    ("             max", lambda s: f"{s['rtt']['all']['max_ms']:.1f}"),
    ("ping loss", lambda s: f"{s['rtt']['loss']:.1%}"),
    ("guard engaged after (s)", lambda s: "-" if s.get("guard_engaged_after_s") is None
     else f"{s['guard_engaged_after_s']:.1f}"),
]


def _air(s: dict) -> dict:
    """The channel's figures of a run (measure.air_figures); empty if it has none."""
    return s["per_second"].get("air") or {}


def _why_worst(s: dict) -> str:
    """What the channel did in the run's worst second: a scan, or the air or the CPU."""
    air = _air(s)
    if air.get("worst_second_in_scan"):
        return "a scan ran then"
    busy = air.get("worst_second_busy")
    if busy is None or math.isnan(busy):
        return "no channel figures"
    if busy < AIR_LIMITED:
        return (f"no scan; the channel was only {busy:.0%} busy: not the air but the senders "
                "fell short, on the TCG guest the emulated CPU") + _stalled(air)
    return f"no scan; the channel was {busy:.0%} busy" + _stalled(air)


# The medium delivers a frame late when the guest CPU did not run it in time: its latest frame
# in a second is typically 5-12 ms late; this much later, and at least twice the run's median
# second, is a stall (2026-11-24 00:56: 40 ms, in the one guarded second that missed the target).
STALL_MS = 20.0


def _stalled(air: dict) -> str:
    """A clause naming a stall of the medium in the worst second, or ''."""
    late, typical = air.get("worst_second_late_ms"), air.get("late_ms_median")
    if late is None or typical is None or math.isnan(late) or math.isnan(typical):
        return ""
    if late < STALL_MS or late < 2 * typical:
        return ""
    return (f"; the medium delivered frames up to {late:.0f} ms late then (median second "
            f"{typical:.0f} ms): the guest CPU stalled")


def table(off: dict, on: dict, title: str = "") -> str:
    w = max(len(r[0]) for r in ROWS)
    lines = ([title] if title else []) + [f"{'':{w}}  {'guard off':>10}  {'guard on':>10}",
                                           "-" * (w + 24)]
    for name, fmt in ROWS:
        lines.append(f"{name:{w}}  {fmt(off):>10}  {fmt(on):>10}")
    return "\n".join(lines)


def _ms(value: float) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.1f} ms"


def verdicts(on: dict, off: dict) -> list[str]:
    """The guarded run judged, each target with the figure it got: its worst second against its
    median, and its RTT p99 against the unguarded run's p99 in that run's seconds without a
    scan (the same load, the same queue; only the scans differ)."""
    worst = on["per_second"]["worst_over_median"]
    p99 = on["rtt"]["all"]["p99_ms"]
    calm = off["rtt"]["outside_scans"]["p99_ms"]
    if math.isnan(p99) or math.isnan(calm) or calm <= 0:
        rtt = (f"RTT p99 {_ms(p99)} against the unguarded run's {_ms(calm)} in its seconds "
               "without a scan: not judged (a figure is missing)")
    else:
        ratio = p99 / calm
        rtt = (f"RTT p99 {_ms(p99)} = {ratio:.2f}x the unguarded run's {_ms(calm)} in its seconds "
               f"without a scan (target <= {RTT_P99_OVER_SCAN_FREE_TARGET}x): "
               + ("met" if ratio <= RTT_P99_OVER_SCAN_FREE_TARGET else "NOT met"))
    return [
        # one decimal: a rounded "90%" next to "NOT met" reads as a contradiction
        f"worst second / median {'-' if math.isnan(worst) else f'{worst:.1%}'} (target >= {WORST_OVER_MEDIAN_TARGET:.0%}): "
        + ("met" if worst >= WORST_OVER_MEDIAN_TARGET else f"NOT met ({_why_worst(on)})"),
        rtt,
    ]


def rtt_context(off: dict, idle_p99: float) -> str:
    """The RTT figures that are information, not targets: the unguarded run during its scans
    (what the guard removes) and the idle link (the queue under load, which no guard removes)."""
    return (f"for information: RTT p99 {_ms(off['rtt']['during_scans']['p99_ms'])} in the unguarded "
            f"run's seconds with a scan; {_ms(idle_p99)} on the idle link (under load the station's "
            "own transmit queue sets the RTT, which no guard changes)")


def host_limited(runs: dict[str, dict]) -> str | None:
    """A warning naming the runs (label -> summary) whose pace the host set (host_paced), or
    None: a demo on a host that slowed down measures the host, not the guard."""
    bad = [f"{label} {paced}" for label, s in runs.items() if (paced := host_paced(s))]
    if not bad:
        return None
    return ("WARNING: in this run the guest CPU, not the air, set the pace (scan-free seconds with "
            f"the channel under {AIR_LIMITED:.0%} busy: " + ", ".join(bad) + f"; more than "
            f"{HOST_LIMITED_SHARE:.0%} is a slow or busy host).  Its throughput and RTT figures "
            "describe the host, not the guard: run `make demo` again with the machine quiet.")


# ---- the plot -----------------------------------------------------------------------------------
def plot(runs: list[MeasuredRun], path: Path, subtitle: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(runs), 1, figsize=(9, 3.2 * len(runs)), sharex=True, dpi=80)
    for ax, m in zip(axes, runs):
        t0 = m.t0
        for i, s in enumerate(m.scans):
            end = s.end if s.end is not None else m.t_end
            ax.axvspan(s.start - t0, end - t0, color="tab:red", alpha=0.15, lw=0,
                       label="scan (iw event)" if i == 0 else None)
        tp = m.run.iperf
        ax.step([i.start - t0 for i in tp.sender], [i.mbps for i in tp.sender], where="post",
                color="tab:blue", lw=1.2, label="throughput, sender (1 s)")
        ax.step([i.start - t0 for i in tp.receiver], [i.mbps for i in tp.receiver],
                where="post", color="tab:cyan", lw=1, ls="--", label="throughput, receiver (1 s)")
        ax.set_ylabel("Mbit/s")
        ax.set_ylim(0, max([i.mbps for i in tp.sender + tp.receiver] + [1]) * 1.15)
        engaged = m.engaged_at()
        if engaged is not None:
            ax.axvline(engaged - t0, color="tab:green", lw=1, ls=":", label="guard engaged")
        rax = ax.twinx()
        ping = m.run.ping
        rax.plot([t - t0 for t in ping.times], ping.rtts, ".", ms=2.5, color="tab:orange",
                 label="ping RTT")
        rax.set_yscale("log")
        rax.set_ylim(0.3, 2000)
        rax.set_ylabel("RTT ms (log)")
        s = m.summary
        ax.set_title(f"{m.label}: {s['scans']} scans, {s['pm1_null_frames']} PM=1 Null frames, "
                     f"RTT p99 {s['rtt']['all']['p99_ms']:.0f} ms, "
                     f"sender min {s['throughput']['sender_mbps']['min']:.0f} Mbit/s",
                     fontsize=10)
        h1, l1 = ax.get_legend_handles_labels()
        h2, l2 = rax.get_legend_handles_labels()
        ax.legend(h1 + h2, l1 + l2, loc="lower left", fontsize=7, ncol=3, framealpha=0.8)
    axes[-1].set_xlabel("seconds since the start of the transfer")
    # The subtitle (air, date, machine) is too long for one line of the figure's width.
    fig.suptitle("nm-scanguard lab: iperf3, guard off vs on\n" + textwrap.fill(subtitle, 110),
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


# ---- main ---------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="make demo", description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=90, help="length of each upload")
    p.add_argument("--download-seconds", type=float, default=60,
                   help="length of each download (0: none)")
    p.add_argument("--fade", action="store_true",
                   help="then a fade under load with a second access point, roam_scans targeted "
                        "against full (about 5 more minutes)")
    p.add_argument("--out", type=Path, default=REPO / "demo-results")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    info = machine()
    transfers = [("upload", args.seconds)] + (
        [("download", args.download_seconds)] if args.download_seconds > 0 else [])
    say(f"{info['date']} on {info['cpu']} x{info['cores']}, {info['qemu']}")
    say(SIMULATION_NOTE)
    total = 60 + 2 * sum(sec + 40 for _, sec in transfers) + (300 if args.fade else 0)
    say("booting the lab (≈40-60 s), then " + " and ".join(
        f"a {sec:g} s {d}" for d, sec in transfers) + " with the guard off, then on"
        + ("; then a fade under load" if args.fade else "") + f"; about {total / 60:.0f} min in all")
    lab = Lab.start(log=print)
    runs: dict[tuple[str, str], MeasuredRun] = {}
    diagnosed: dict[str, str] = {}  # mode -> what `scanguardctl diagnose` printed
    fades: dict[str, dict] = {}  # roam_scans -> make roam's figures of the walk
    guardd = Guardd(lab)
    try:
        original = lab.bgscan()
        arm_weak_link(lab)
        idle = lab.ping(10)
        say(f"idle link at the weak signal: ping {idle.stats()}")
        for mode in ("guard off", "guard on"):
            if mode == "guard on":
                say("starting nm-scanguard (" + ", ".join(
                    f"{k}={v}" for k, v in GUARD_SETTINGS.items()) + ")")
                guardd.start()
            for direction, seconds in transfers:
                say(f"{mode}: {direction} {seconds:g} s, NetworkManager's bgscan armed afresh "
                    f"({WEAK_LINK_BGSCAN})")
                if mode == "guard on":
                    wait_bgscan(lab, WEAK_LINK_BGSCAN, GUARD_SETTINGS["release_after"] + 20)
                arm_weak_link(lab)
                # What a user would see on a laptop: `scanguardctl diagnose` as a desktop user
                # (group netdev, as Debian's first user) beside the upload.
                diagnose = (Diagnose(lab, seconds - 5, as_user="netdev", text=True, plot=True,
                                     label=f"diagnose-{mode.replace(' ', '-')}")
                            if direction == "upload" else None)
                m = measured_transfer(lab, direction, seconds, f"{direction}, {mode}",
                                      progress=say)
                runs[direction, mode] = m
                say(m.report())
                if diagnose is not None:
                    diagnosed[mode] = diagnose.report(
                        args.out / f"diagnose-{mode.replace(' ', '-')}.png")
        say("waiting for the guard to restore bgscan after the transfer")
        wait_bgscan(lab, WEAK_LINK_BGSCAN, GUARD_SETTINGS["release_after"] + 20)
        guardd.stop()
        lab.set_bgscan(original)
        if args.fade:
            fades = fade(lab)
    finally:
        if guardd.running():
            guardd.stop()
        lab.stop()
    idle_stats = idle.stats()
    print()
    print(f"nm-scanguard lab demo, {info['date']}, {info['cpu']} ({info['cores']} cores), "
          f"QEMU TCG")
    print(f"{SIMULATION_NOTE}.")
    print(f"idle link: ping RTT p50 {idle_stats['p50_ms']:.1f} / p99 {idle_stats['p99_ms']:.1f} ms")
    texts, summary = [], {"machine": info, "air": SIMULATION_NOTE, "idle_ping": idle_stats,
                          "guard_settings": GUARD_SETTINGS, "lab_logs": str(lab.vm.rundir),
                          "runs": {}}
    for direction, seconds in transfers:
        off, on = runs[direction, "guard off"].summary, runs[direction, "guard on"].summary
        text = table(off, on, f"iperf3 {direction}, {seconds:g} s each, "
                              f"ping -i {PING_INTERVAL:g} alongside")
        text += "\nguard on: " + "; ".join(verdicts(on, off))
        text += "\n" + rtt_context(off, idle_stats["p99_ms"])
        texts.append(text)
        print(text)
        print()
        summary["runs"][direction] = {"seconds": seconds, "guard_off": off, "guard_on": on}
    warning = host_limited({m.label: m.summary for m in runs.values()})
    if warning:
        print(warning)
        print()
        texts.append(warning)
    summary["host_limited"] = warning
    summary["table"] = "\n\n".join(texts)
    for mode, text in diagnosed.items():
        head = (f"scanguardctl diagnose, run as a desktop user beside the upload, {mode} "
                f"(plot: {args.out / ('diagnose-' + mode.replace(' ', '-') + '.png')}):")
        print(head)
        print(textwrap.indent(text.rstrip("\n"), "  "))
        print()
        (args.out / f"diagnose-{mode.replace(' ', '-')}.txt").write_text(text)
    summary["diagnose"] = diagnosed
    if fades:
        from .roam_study import table as fade_table
        text = ("A fade under load (AP1 -62 -> -85 dBm, AP2 -85 -> -62 dBm at 1 dB/s), seconds "
                "from AP1 crossing the floor:\n" + fade_table({"walk": fades}))
        print(text)
        print()
        summary["fade"] = fades
        summary["table"] += "\n\n" + text
    (args.out / "summary.json").write_text(strict_json(summary))
    (args.out / "table.txt").write_text(summary["table"] + "\n")
    png = args.out / "demo.png"
    plot(list(runs.values()), png, f"{SIMULATION_NOTE}; {info['date']}, "
                                   f"{info['cores']}-core host, QEMU TCG")
    say(f"wrote {args.out / 'summary.json'}, {args.out / 'table.txt'} and {png}")
    return 0


def fade(lab: Lab) -> dict[str, dict]:
    """`make roam`'s walk, targeted then full, on a second AP of the network (issue 35)."""
    from . import roam_study
    lab.start_second_ap(channel=roam_study.AP2_CHANNEL)
    ap1, ap2 = lab.radio_macs["ap"], lab.radio_macs["ap2"]
    out = {}
    for mode in roam_study.MODES:
        say(f"a fade under load, roam_scans = {mode}: AP1 fades 1 dB/s while AP2 rises")
        out[mode] = roam_study.run(lab, "walk", mode, 0, ap1, ap2, roam_study.AP2_CHANNEL)
        say(f"roam_scans = {mode}: {roam_study.short(out[mode])}")
    return out


def strict_json(summary: dict) -> str:
    """summary.json's text: strict JSON (no NaN or Infinity, which JavaScript's JSON.parse and
    other strict parsers reject); allow_nan=False raises rather than write one."""
    return json.dumps(finite(summary), indent=2, allow_nan=False) + "\n"


if __name__ == "__main__":
    sys.exit(main())
