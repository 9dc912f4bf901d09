"""`scanguardctl diagnose --plot`: latency and throughput over time, scans shaded by source.

matplotlib is optional (the package Suggests python3-matplotlib): it is imported only here, only
when a plot is asked for, and checked before the recording starts so that nobody waits two
minutes to learn that it is missing.

The file is opened without following a symbolic link, and only a regular file with one link is
written (an existing one is overwritten, as `--plot wifi.png` run twice expects): whoever runs
diagnose under sudo cannot be made to write through a link someone placed at that name during
the recording.  The format is the file name's suffix (png when it has none).
"""

from __future__ import annotations

import argparse
import errno
import os
import stat
from typing import IO, Any

from ..attribution import DESCRIPTIONS
from ..text import NAME_CHARS, clipped, shown
from .findings import Recording, analyse, is_spike

COLOURS = {"bgscan": "#d62728", "networkmanager": "#1f77b4", "direct": "#9467bd",
           "guard": "#2ca02c", "unknown": "#7f7f7f"}
MISSING = ("matplotlib is not installed: as root, apt install "
           "python3-matplotlib (or leave out --plot; the report and --json need nothing more)")


NOT_PLAIN = ("cannot write the plot to {path!r}: it exists and is not a plain file (a symbolic "
             "link, a file with several hard links, a device or a pipe); give the name of a new "
             "file")


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


def file_format(path: str, pyplot: Any) -> str:
    """The format the plot is written in: the file name's suffix, png when it has none."""
    suffix = os.path.splitext(path)[1][1:].lower()
    if not suffix:
        return "png"
    fig = pyplot.figure()
    try:
        known = fig.canvas.get_supported_filetypes()
    finally:
        pyplot.close(fig)
    if suffix not in known:
        raise PlotError(f"cannot write the plot to {path!r}: matplotlib does not write .{suffix} "
                        f"files (it writes {', '.join(sorted(known))})")
    return suffix


def argument(path: str) -> str:
    """`--plot FILE` as argparse reads it: everything that can be told before the recording
    (matplotlib, the format, the folder, what is at that name) is refused here, as a usage
    error, so that nobody records for minutes to learn that the plot cannot be written."""
    if not path:
        return path  # argparse passes the default "" through here too: no plot
    try:
        file_format(path, require())
        check_writable(path)
    except PlotError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return path


def check_writable(path: str) -> None:
    """Before the recording: the problems that can be told now, said at once."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise PlotError(f"cannot write the plot to {path!r}: the folder {folder!r} does not exist")
    if not os.access(folder, os.W_OK):
        raise PlotError(f"cannot write the plot to {path!r}: the folder {folder!r} is not "
                        "writable by you")
    try:
        _check_target(path, os.lstat(path))
    except FileNotFoundError:
        pass
    except OSError as e:
        raise PlotError(f"cannot write the plot to {path!r}: {e.strerror}") from None


def _check_target(path: str, st: os.stat_result) -> None:
    if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
        raise PlotError(NOT_PLAIN.format(path=path))


def open_output(path: str) -> IO[bytes]:
    """The plot's file, created or truncated, never reached through a symbolic link."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as e:
        # O_NOFOLLOW's answer to a symbolic link; O_NONBLOCK's to a pipe nobody reads, a socket
        if e.errno in (errno.ELOOP, errno.ENXIO):
            raise PlotError(NOT_PLAIN.format(path=path)) from None
        raise PlotError(f"cannot write the plot to {path!r}: {e.strerror}") from None
    try:
        _check_target(path, os.fstat(fd))
        os.ftruncate(fd, 0)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "wb")
    except BaseException:
        os.close(fd)
        raise


def draw(rec: Recording, path: str, pyplot: Any) -> None:
    """Draw the recording into `path` (PlotError if it cannot be written there)."""
    fmt = file_format(path, pyplot)
    links = rec.links or []
    rows = max(1, len(links))
    fig, axes = pyplot.subplots(rows * 2, 1, figsize=(11, 4.2 * rows), sharex=True, squeeze=False)
    for i, link in enumerate(links):
        a = analyse(link, rec.duration)
        lat, thr = axes[2 * i][0], axes[2 * i + 1][0]
        answered = [(e.sent, e.rtt_ms) for e in link.echoes if e.rtt_ms is not None]
        if answered:
            lat.plot([t for t, _ in answered], [r for _, r in answered], lw=0.8, color="black",
                     label=f"round trip to {shown(link.target or 'the gateway', NAME_CHARS)}")
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
        latency = (f"{a.spikes} spike(s), {a.spikes_in_scans} inside scans"
                   if a.median_ms is not None else "latency not measured")
        lat.set_title(f"{title}: {a.scans} scan(s), {latency}", parse_math=False)
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
        for ax in (lat, thr):
            # matplotlib logs a warning for a legend with nothing in it (no echo answered)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(loc="lower left", fontsize=8, framealpha=0.9)
    axes[-1][0].set_xlabel("seconds since the start")
    fig.tight_layout()
    try:
        with open_output(path) as f:
            fig.savefig(f, format=fmt, dpi=100)
    except OSError as e:  # a full disk, a quota: the report is out already, say why no plot
        raise PlotError(f"cannot write the plot to {path!r}: {e.strerror or e}") from None
    finally:
        pyplot.close(fig)
