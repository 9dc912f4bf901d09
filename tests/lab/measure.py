"""Parsers and statistics for what the lab measures. Pure functions, no VM: easy to check by hand.

All timestamps are the guest's wall clock (seconds since the epoch, float): `iw event -t`,
wpa_supplicant `-t`, `ping -D`, iperf3's JSON and the capture all use it.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100); NaN for an empty list."""
    if not values:
        return math.nan
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(p / 100 * len(s)) - 1))
    return s[k]


# ---- scans (iw event -t) -------------------------------------------------------------------
@dataclass
class Scan:
    start: float
    end: float | None      # None: still running when the log was read
    aborted: bool = False
    freqs: tuple[int, ...] = ()  # the channels (MHz) it covered: `iw event` lists them at its end

    @property
    def duration(self) -> float | None:
        return None if self.end is None else self.end - self.start

    def overlaps(self, t0: float, t1: float) -> bool:
        return self.start <= t1 and (self.end is None or self.end >= t0)


_IW_EVENT = re.compile(
    r"^(\d+\.\d+): (\S+) \(phy #\d+\): scan (started|finished|aborted)(?::((?: \d+)*))?")


def parse_scans(text: str, ifname: str = "wlan1") -> list[Scan]:
    """Scans of `ifname` from `iw event -t` output, pairing each start with its end."""
    scans: list[Scan] = []
    current: Scan | None = None
    for line in text.splitlines():
        m = _IW_EVENT.match(line)
        if not m or m.group(2) != ifname:
            continue
        t, what = float(m.group(1)), m.group(3)
        if what == "started":
            if current is not None:  # a start without an end: keep it, open-ended
                scans.append(current)
            current = Scan(t, None)
        else:
            if current is None:  # the end of a scan that started before the log
                current = Scan(t, None)
            current.end, current.aborted = t, what == "aborted"
            current.freqs = tuple(int(f) for f in (m.group(4) or "").split())
            scans.append(current)
            current = None
    if current is not None:
        scans.append(current)
    return scans


# The station losing its link: mac80211 missed beacons (a CPU-starved TCG guest), then gave up
# ("disconnected (local request) reason: 4"), or a deauthentication either way.
_IW_LINK = re.compile(r"^(\d+\.\d+): (\S+) \(phy #\d+\): "
                      r"(CQM event: beacon loss|disconnected.*|deauth .*|disassoc .*)$")


def parse_link_losses(text: str, ifname: str = "wlan1") -> list[tuple[float, str]]:
    """(time, event) of every beacon loss, disconnect or deauth of `ifname` in `iw event -t`."""
    out = []
    for line in text.splitlines():
        m = _IW_LINK.match(line)
        if m and m.group(2) == ifname:
            out.append((float(m.group(1)), m.group(3)))
    return out


_WPA_TS = re.compile(r"^(\d+\.\d+): (.*)$")


def parse_medium_stats(text: str) -> list[dict[str, float]]:
    """The medium's once-a-second lines, `medium: stats t=<guest wall time> fps=... busy_2437=...`
    (tests/lab/medium/medium.c), as dicts of floats."""
    out = []
    for line in text.splitlines():
        if not line.startswith("medium: stats "):
            continue
        fields = {}
        for item in line.split()[2:]:
            key, _, value = item.partition("=")
            try:
                fields[key] = float(value)
            except ValueError:
                continue
        if "t" in fields:
            out.append(fields)
    return out


def bgscan_levels(wpa_log: str) -> list[tuple[float, bool]]:
    """(time, above) of each `bgscan simple: signal level changed (above=N ...` line of a
    wpa_supplicant debug log (-dd -t): bgscan's reaction to the kernel's CQM event."""
    out = []
    for line in wpa_log.splitlines():
        m = re.match(r"^(\d+\.\d+): bgscan simple: signal level changed \(above=([01])", line)
        if m:
            out.append((float(m[1]), m[2] == "1"))
    return out


def vmstat_idle(text: str) -> list[int]:
    """The `id` column of `vmstat 1` lines (the first line is since boot: dropped)."""
    rows = [line.split() for line in text.splitlines() if line.strip()[:1].isdigit()]
    return [int(r[14]) for r in rows[1:] if len(r) >= 15]


def wpa_log_events(text: str, needle: str) -> list[float]:
    """Timestamps of wpa_supplicant `-t` log lines containing `needle`."""
    out = []
    for line in text.splitlines():
        m = _WPA_TS.match(line)
        if m and needle in m.group(2):
            out.append(float(m.group(1)))
    return out


@dataclass
class BgscanChange:
    time: float
    on: bool          # True: a bgscan module was initialised; False: bgscan stopped
    params: str = ""  # e.g. '30:-25:86400' when on


_BGSCAN_INIT = re.compile(r"bgscan: Initialized module '[^']*' with parameters '([^']*)'")


def bgscan_changes(text: str) -> list[BgscanChange]:
    """bgscan starting and stopping, from wpa_supplicant's `-dd -t` log.

    A new value on a running bgscan shows as "Deinitializing" then "Initialized" within a few
    ms: that is one change to the new value, not a stop.  A "Deinitializing" not followed by an
    init (the guard's "" or a disconnect) is a stop.
    """
    out: list[BgscanChange] = []
    pending: float | None = None
    for line in text.splitlines():
        m = _WPA_TS.match(line)
        if not m:
            continue
        t, msg = float(m.group(1)), m.group(2)
        if msg.startswith("bgscan: Deinitializing module"):
            if pending is not None:
                out.append(BgscanChange(pending, False))
            pending = t
        elif msg.startswith("bgscan: Initialized module"):
            pending = None
            out.append(BgscanChange(t, True, _BGSCAN_INIT.search(msg).group(1)
                                    if _BGSCAN_INIT.search(msg) else ""))
        elif pending is not None and t - pending > 0.5:
            out.append(BgscanChange(pending, False))
            pending = None
    if pending is not None:
        out.append(BgscanChange(pending, False))
    return out


# ---- ping -D ---------------------------------------------------------------------------------
@dataclass
class PingResult:
    times: list[float] = field(default_factory=list)   # guest time of each reply
    rtts: list[float] = field(default_factory=list)    # ms
    sent: int = 0

    @property
    def received(self) -> int:
        return len(self.rtts)

    @property
    def loss(self) -> float:
        return 1 - self.received / self.sent if self.sent else math.nan

    def stats(self) -> dict:
        return {"n": self.received, "sent": self.sent, "loss": round(self.loss, 4),
                "p50_ms": percentile(self.rtts, 50), "p99_ms": percentile(self.rtts, 99),
                "max_ms": max(self.rtts, default=math.nan)}

    def between(self, t0: float, t1: float) -> list[float]:
        return [r for t, r in zip(self.times, self.rtts) if t0 <= t <= t1]


_PING_REPLY = re.compile(r"^\[(\d+\.\d+)\] \d+ bytes from .*icmp_seq=(\d+) .*time=([\d.]+) ms")
_PING_SUMMARY = re.compile(r"^(\d+) packets transmitted, (\d+) received")


def parse_ping(text: str) -> PingResult:
    res = PingResult()
    for line in text.splitlines():
        m = _PING_REPLY.match(line)
        if m:
            res.times.append(float(m.group(1)))
            res.rtts.append(float(m.group(3)))
            continue
        m = _PING_SUMMARY.match(line)
        if m:
            res.sent = int(m.group(1))
    if not res.sent:  # interrupted before the summary
        res.sent = len(res.rtts)
    return res


# ---- iperf3 -J -------------------------------------------------------------------------------
@dataclass
class Interval:
    start: float    # guest wall clock (start of the test + offset; ±1 s: iperf3 gives whole seconds)
    seconds: float
    mbps: float


@dataclass
class IperfResult:
    direction: str              # "upload" (station -> AP) or "download" (AP -> station)
    sender: list[Interval]      # per-second intervals at the sending side
    receiver: list[Interval]    # per-second intervals at the receiving side
    sent_mbps: float
    received_mbps: float
    raw: dict

    @staticmethod
    def _stats(intervals: list[Interval]) -> dict:
        # Under TCG interval lengths jitter (0.4–2.2 s); drop only stubs such as iperf3's last
        # fractional interval, which would bias the minimum.  How many intervals there are says
        # little (a busy sender reports fewer, longer ones: trap 18 of README.md); how much time
        # they cover says whether the transfer ran for its whole duration.
        v = [i.mbps for i in intervals if i.seconds >= 0.5]
        return {"n": len(v), "min": min(v, default=math.nan), "p5": percentile(v, 5),
                "median": percentile(v, 50), "max": max(v, default=math.nan),
                "intervals": len(intervals), "seconds": round(covered_seconds(intervals), 2),
                "longest_s": round(max((i.seconds for i in intervals), default=math.nan), 2)}

    def stats(self) -> dict:
        return {"sender_mbps": self._stats(self.sender),
                "receiver_mbps": self._stats(self.receiver),
                "mean_sent_mbps": self.sent_mbps, "mean_received_mbps": self.received_mbps}


def covered_seconds(intervals: list[Interval]) -> float:
    """The time iperf3's intervals cover: the whole transfer, however they are cut up."""
    return sum(i.seconds for i in intervals)


def longest_quiet(intervals: list[Interval], below_mbps: float) -> tuple[float, float]:
    """(start, seconds) of the longest run of consecutive intervals under `below_mbps`;
    (nan, 0) if there is none.  iperf3's last stub interval (< 0.5 s) is not judged."""
    best, run_start, run = (math.nan, 0.0), math.nan, 0.0
    for iv in intervals:
        if iv.seconds < 0.5 and iv is intervals[-1]:
            break
        if iv.mbps < below_mbps:
            if run == 0.0:
                run_start = iv.start
            run += iv.seconds
            if run > best[1]:
                best = (run_start, run)
        else:
            run = 0.0
    return best


def _intervals(doc: dict) -> list[Interval]:
    t0 = doc["start"]["timestamp"]["timesecs"]
    return [Interval(t0 + iv["sum"]["start"], iv["sum"]["seconds"],
                     iv["sum"]["bits_per_second"] / 1e6) for iv in doc.get("intervals", [])]


def parse_iperf(text: str, direction: str) -> IperfResult:
    """The client's `iperf3 -J --get-server-output` document."""
    doc = json.loads(text)
    if "error" in doc:
        raise ValueError(f"iperf3: {doc['error']}")
    client = _intervals(doc)
    server = _intervals(doc["server_output_json"]) if "server_output_json" in doc else []
    sender, receiver = (client, server) if direction == "upload" else (server, client)
    end = doc["end"]
    return IperfResult(direction, sender, receiver,
                       end["sum_sent"]["bits_per_second"] / 1e6,
                       end["sum_received"]["bits_per_second"] / 1e6, doc)


# ---- wpa_supplicant's strings ------------------------------------------------------------------
def wpas_string(value: str) -> str:
    """A string property as wpa_supplicant gives it ("ssid", ...): quoted when every byte is
    printable ASCII, else the bytes in hex (so "Café ☕ lab" comes back as 436166c3a9...)."""
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    try:
        return bytes.fromhex(value).decode()
    except ValueError as e:
        raise ValueError(f"wpa_supplicant string {value!r} is neither quoted nor UTF-8 hex: {e}") \
            from None


# ---- capture on hwsim0 -----------------------------------------------------------------------
# Trap 6 of LAB.md: hwsim0 shows every data frame and its ACK (≈290 k a minute under iperf3);
# keep management, control other than ACK, and Null/QoS-Null frames.
CAPTURE_FILTER = ("not (wlan type data subtype qos-data) and not (wlan type data subtype data)"
                  " and not (wlan type ctl subtype ack)")
NULL = 0x24
QOS_NULL = 0x2C


@dataclass
class NullFrame:
    time: float
    subtype: int     # NULL or QOS_NULL
    pm: bool         # power-management bit: True = "I am going to sleep" (leaving the channel)
    ta: str          # transmitter address


def read_null_frames(pcap: Path) -> list[NullFrame]:
    """Null and QoS-Null data frames in a capture, read with the host's tshark."""
    out = subprocess.run(
        ["tshark", "-n", "-r", str(pcap), "-Y", "wlan.fc.type_subtype == 0x24 || "
         "wlan.fc.type_subtype == 0x2c", "-T", "fields", "-e", "frame.time_epoch",
         "-e", "wlan.fc.type_subtype", "-e", "wlan.fc.pwrmgt", "-e", "wlan.ta"],
        capture_output=True, text=True, check=True).stdout
    frames = []
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) < 4 or not parts[0]:
            continue
        frames.append(NullFrame(float(parts[0]), int(parts[1], 0),
                                parts[2].strip().lower() in ("1", "true"), parts[3].lower()))
    return frames


# ---- one transfer, summarised ----------------------------------------------------------------
def in_any(t: float, scans: list[Scan], margin: float = 0.5) -> bool:
    return any(s.start - margin <= t <= (s.end if s.end is not None else math.inf) + margin
               for s in scans)


def scan_overlap(start: float, seconds: float, scans: list[Scan], t_end: float) -> float:
    """How many of the seconds [start, start + seconds] a scan was running."""
    return sum(max(0.0, min(start + seconds, s.end if s.end is not None else t_end)
                   - max(start, s.start)) for s in scans)


def during_vs_outside(intervals: list[Interval], scans: list[Scan], t_end: float) -> dict:
    """Per-second throughput in seconds with a scan running for at least half of them, against
    seconds without any scan (the paper's comparison: 57 % with TSQ, 10 % without)."""
    overlaps = [(i, scan_overlap(i.start, i.seconds, scans, t_end)) for i in intervals]
    during = [i.mbps for i, o in overlaps if o >= i.seconds / 2]
    outside = [i.mbps for i, o in overlaps if o == 0]
    d_med, o_med = percentile(during, 50), percentile(outside, 50)
    return {"during_n": len(during), "outside_n": len(outside),
            "during_median_mbps": d_med, "outside_median_mbps": o_med,
            "ratio": d_med / o_med if during and outside and o_med > 0 else math.nan}


# A channel busier than this carried all it could: the air limited the second.  Below it, with
# no scan running, the senders did not keep it busy -- on the TCG guest, the CPU fell short.
AIR_LIMITED = 0.9


# A run is the air's when its senders kept the channel busy: in more than this share of its
# scan-free seconds under AIR_LIMITED busy, the emulated CPU (a slow or busy host) set the pace.
HOST_LIMITED_SHARE = 0.10


def host_paced(summary: dict) -> str | None:
    """"N of M" (its scan-free seconds under AIR_LIMITED busy, of those judged) when the host,
    not the air, set the pace of a run (summarize's figures), else None.  Such a run measures
    the host: the emulated CPU leaves the channel idle and delays frames whether or not a scan
    runs (tests/lab/README.md has the runs that showed it).  A run without the channel's
    figures is not judged (None)."""
    air = summary.get("per_second", {}).get("air") or {}
    judged, short = air.get("seconds_judged") or 0, air.get("seconds_not_air_limited") or 0
    return f"{short} of {judged}" if judged and short / judged > HOST_LIMITED_SHARE else None


def _overlap(line: dict[str, float], start: float, seconds: float) -> float:
    """Seconds a medium statistics line (it covers (t - dt, t]) shares with [start, start +
    seconds]; zero or less if none."""
    return min(line["t"], start + seconds) - max(line["t"] - line.get("dt", 1.0), start)


def channel_busy(air: list[dict[str, float]], start: float, seconds: float) -> float:
    """The busiest channel's busy fraction over [start, start + seconds], weighted by overlap,
    from the medium's per-second lines; nan if none overlaps."""
    num = den = 0.0
    for line in air:
        overlap = _overlap(line, start, seconds)
        busy = [v for k, v in line.items() if k.startswith("busy_")]
        if overlap > 0 and busy:
            num += max(busy) * overlap
            den += overlap
    return num / den if den > 0 else math.nan


def medium_late_ms(air: list[dict[str, float]], start: float, seconds: float) -> float:
    """How late (ms) the medium delivered its latest frame in the lines overlapping
    [start, start + seconds]: tens of ms mean the guest CPU stalled it; nan if no line says."""
    late = [line["max_late_us"] / 1000 for line in air
            if "max_late_us" in line and _overlap(line, start, seconds) > 0]
    return max(late, default=math.nan)


def air_figures(intervals: list[Interval], scans: list[Scan], t_end: float,
                air: list[dict[str, float]]) -> dict:
    """What the channel did in the receiver's seconds: its median busy fraction, how busy it
    was in the worst second (and whether a scan ran then), and how many scan-free seconds it
    was under AIR_LIMITED busy: seconds the air did not set (the senders left it idle: on the
    TCG guest the emulated CPU, or TCP still recovering from a scan that ended before); and
    how late the medium delivered frames in the worst second against its median second.

    iperf3 stamps a test's start in whole seconds, so an interval really lies somewhere in
    [start, start + seconds + 1): the channel is read over all of that (a dip of one second
    is blurred with its neighbour; one of several seconds, as the CPU's are, is not)."""
    judged = [i for i in intervals if i.seconds >= 0.5]
    busy = [channel_busy(air, i.start, i.seconds + 1.0) for i in judged]
    late = [medium_late_ms(air, i.start, i.seconds + 1.0) for i in judged]
    scanned = [scan_overlap(i.start, i.seconds + 1.0, scans, t_end) > 0 for i in judged]
    known = [b for b in busy if not math.isnan(b)]
    worst = min(range(len(judged)), key=lambda k: judged[k].mbps, default=None)
    return {
        "busy_median": percentile(known, 50),
        "worst_second_busy": math.nan if worst is None else busy[worst],
        "worst_second_in_scan": worst is not None and scanned[worst],
        "worst_second_late_ms": math.nan if worst is None else late[worst],
        "late_ms_median": percentile([x for x in late if not math.isnan(x)], 50),
        # The first and last seconds (TCP's start, the end of the test) are not judged.
        "seconds_not_air_limited": sum(1 for b, sc in zip(busy[1:-1], scanned[1:-1])
                                       if b < AIR_LIMITED and not sc),
        "seconds_judged": sum(1 for b in busy[1:-1] if not math.isnan(b)),
    }


def summarize(iperf: IperfResult, ping: PingResult, scans: list[Scan],
              pm1: list[NullFrame], t0: float, t1: float,
              link_losses: list[tuple[float, str]] | None = None,
              air: list[dict[str, float]] | None = None) -> dict:
    """The figures the lab reports for one transfer (also what `make demo` tabulates).

    Per-second figures come from the receiving end (1.00 s intervals; the sender's are late
    and merged on the TCG guest, trap 18).  `air`: the medium's statistics lines over the
    transfer, for the channel's share (air_figures)."""
    rtt_in = [r for t, r in zip(ping.times, ping.rtts) if in_any(t, scans)]
    rtt_out = [r for t, r in zip(ping.times, ping.rtts) if not in_any(t, scans)]

    def rtt(values: list[float]) -> dict:
        return {"n": len(values), "p50_ms": percentile(values, 50),
                "p99_ms": percentile(values, 99), "max_ms": max(values, default=math.nan)}

    scan_seconds = sum(min(s.end if s.end is not None else t1, t1) - max(s.start, t0)
                       for s in scans)
    rx = [i.mbps for i in iperf.receiver if i.seconds >= 0.5]  # not the closing fragment
    rx_median = percentile(rx, 50)
    losses = link_losses or []
    return {
        "direction": iperf.direction,
        "seconds": round(t1 - t0, 1),
        "scans": len(scans),
        "scans_aborted": sum(s.aborted for s in scans),
        "scan_seconds": round(scan_seconds, 1),
        "pm1_null_frames": len(pm1),
        "pm1_null_frames_outside_scans": sum(not in_any(f.time, scans, 1.0) for f in pm1),
        "throughput": iperf.stats(),
        "per_second": {"worst_over_median": min(rx) / rx_median if rx and rx_median > 0
                       else math.nan, "p5_mbps": percentile(rx, 5), "median_mbps": rx_median,
                       "scans": during_vs_outside(iperf.receiver, scans, t1),
                       "air": air_figures(iperf.receiver, scans, t1, air or [])},
        "link_losses": len(losses),
        "link_loss_events": [f"t0 + {t - t0:.1f} s {e}" for t, e in losses],
        "rtt": {"all": rtt(ping.rtts), "during_scans": rtt(rtt_in),
                "outside_scans": rtt(rtt_out), "sent": ping.sent, "loss": ping.loss},
    }


def format_summary(s: dict) -> str:
    tp, rtt = s["throughput"], s["rtt"]

    def mb(d: dict) -> str:
        text = f"min {d['min']:.1f} / p5 {d['p5']:.1f} / median {d['median']:.1f} Mbit/s"
        if "seconds" in d:  # summaries written before these keys existed lack them
            text += (f" ({d['intervals']} intervals over {d['seconds']:.1f} s, longest "
                     f"{d['longest_s']:.1f} s)")
        return text

    def ms(d: dict) -> str:
        if not d["n"]:
            return "no ping answered in these seconds (n=0)"
        return (f"p50 {d['p50_ms']:.1f} / p99 {d['p99_ms']:.1f} / max {d['max_ms']:.1f} ms"
                f" (n={d['n']})")

    def scans_line(p: dict) -> str:
        """Receiver per second during scans against outside; a run without a scan says so
        (its during-scan figures are null, or NaN before they are written as JSON)."""
        during, ratio = p["scans"]["during_median_mbps"], p["scans"]["ratio"]
        outside = p["scans"]["outside_median_mbps"]
        worst = f"worst second / median {p['worst_over_median']:.0%}"
        if during is None or ratio is None or math.isnan(during) or math.isnan(ratio):
            return (f"  receiver per second: no scan in this run; {outside:.1f} Mbit/s median; "
                    f"{worst}")
        return (f"  receiver per second during scans / outside: {during:.1f} / {outside:.1f} "
                f"Mbit/s (median; ratio {ratio:.0%}); {worst}")

    return "\n".join([
        f"{s['direction']} for {s['seconds']} s: {s['scans']} scans ({s['scans_aborted']} aborted,"
        f" {s['scan_seconds']} s scanning), {s['pm1_null_frames']} PM=1 Null frames from the station"
        f" ({s['pm1_null_frames_outside_scans']} outside scans)",
        f"  per-second throughput, sender:   {mb(tp['sender_mbps'])}",
        f"  per-second throughput, receiver: {mb(tp['receiver_mbps'])}",
        f"  mean: sent {tp['mean_sent_mbps']:.1f}, received {tp['mean_received_mbps']:.1f} Mbit/s",
        f"  ping RTT, all:            {ms(rtt['all'])}, "
        + (f"loss {rtt['loss']:.1%}" if rtt["sent"] else "no ping sent"),
        f"  ping RTT, during scans:   {ms(rtt['during_scans'])}",
        f"  ping RTT, outside scans:  {ms(rtt['outside_scans'])}",
    ] + ([
        scans_line(s["per_second"]),
        f"  link losses: {s['link_losses']}" + (" (" + "; ".join(s["link_loss_events"][:4]) + ")"
                                                if s["link_losses"] else ""),
    ] if "per_second" in s else []) + ([
        f"  channel: median {air['busy_median']:.0%} busy, {air['worst_second_busy']:.0%} in the "
        f"worst second ({'during a scan' if air['worst_second_in_scan'] else 'no scan'}); "
        f"{air['seconds_not_air_limited']} of {air['seconds_judged']} seconds scan-free and under "
        f"{AIR_LIMITED:.0%} busy (not set by the air)"
    ] if (air := s.get("per_second", {}).get("air")) and air["seconds_judged"] else []))
