"""`scanguardctl diagnose --plot`: latency and throughput over time, scans shaded by source.

matplotlib is optional (the package Suggests python3-matplotlib): it is imported only here, only
when a plot is asked for, and checked before the recording starts so that nobody waits two
minutes to learn that it is missing.
"""

from __future__ import annotations

import os
from typing import Any

from .attribution import DESCRIPTIONS
from .findings import Recording, analyse, is_spike
from .text import NAME_CHARS, clipped, shown

COLOURS = {"bgscan": "#d62728", "networkmanager": "#1f77b4", "direct": "#9467bd",
           "guard": "#2ca02c", "unknown": "#7f7f7f"}
MISSING = ("--plot needs matplotlib, which is not installed: as root, apt install "
           "python3-matplotlib (or leave out --plot; the report and --json need nothing more)")


class PlotError(Exception):
    pass


def require() -> Any:
    """matplotlib's pyplot with a file-only backend, or PlotError saying what to install."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as pyplot
    except ImportError:
        raise PlotError(MISSING) from None
    return pyplot


def check_writable(path: str) -> None:
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise PlotError(f"cannot write the plot to {path!r}: the folder {folder!r} does not exist")
    if not os.access(folder, os.W_OK):
        raise PlotError(f"cannot write the plot to {path!r}: the folder {folder!r} is not "
                        "writable by you")


def draw(rec: Recording, path: str, pyplot: Any) -> None:
    links = rec.links or []
    rows = max(1, len(links))
    fig, axes = pyplot.subplots(rows * 2, 1, figsize=(11, 4.2 * rows), sharex=True, squeeze=False)
    for i, link in enumerate(links):
        a = analyse(link, rec.duration)
        lat, thr = axes[2 * i][0], axes[2 * i + 1][0]
        answered = [(e.sent, e.rtt_ms) for e in link.echoes if e.rtt_ms is not None]
        if answered:
            lat.plot([t for t, _ in answered], [r for _, r in answered], lw=0.8, color="black",
                     label="round trip to the gateway")
        spikes = [e for e in link.echoes if is_spike(e, a.spike_threshold_ms)]
        slow = [e for e in spikes if e.rtt_ms is not None]
        lost = [e for e in spikes if e.rtt_ms is None]
        top = max([r for _, r in answered], default=10.0)
        if spikes:  # one legend entry for both kinds
            lat.scatter([e.sent for e in slow], [e.rtt_ms for e in slow], s=14, color="#ff7f0e",
                        zorder=3, label="spike (x: lost)")
            lat.scatter([e.sent for e in lost], [top] * len(lost), s=22, marker="x",
                        color="#ff7f0e", zorder=3)
        if a.spike_threshold_ms is not None:
            lat.axhline(a.spike_threshold_ms, ls="--", lw=0.7, color="#ff7f0e")
        lat.set_yscale("log")
        lat.set_ylabel("RTT (ms)")
        title = shown(link.interface, NAME_CHARS) + (f" ('{clipped(link.ssid, 64)}')"
                                                      if link.ssid else "")
        # Plain text: matplotlib would read "$...$" in an SSID as mathtext, and "$\frac$" fails.
        lat.set_title(f"{title}: {a.scans} scan(s), {a.spikes} spike(s), "
                      f"{a.spikes_in_scans} inside scans", parse_math=False)
        secs = link.seconds
        thr.step([s.at for s in secs], [s.bps / 1e6 for s in secs], where="post", color="black",
                 lw=0.9, label="throughput (rx + tx)")
        thr.set_ylabel("Mbit/s")
        used = set()
        for scan in link.scans:
            colour = COLOURS.get(scan.source, COLOURS["unknown"])
            label = None if scan.source in used else DESCRIPTIONS[scan.source]
            used.add(scan.source)
            for ax in (lat, thr):
                ax.axvspan(scan.start, scan.until(rec.duration), color=colour, alpha=0.25,
                           label=label if ax is thr else None)
        lat.legend(loc="lower left", fontsize=8, framealpha=0.9)
        thr.legend(loc="lower left", fontsize=8, framealpha=0.9)
    axes[-1][0].set_xlabel("seconds since the start")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    pyplot.close(fig)
