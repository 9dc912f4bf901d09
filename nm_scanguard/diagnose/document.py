"""`scanguardctl diagnose`'s two outputs from one Recording: the JSON document (`--json`)
and the report a person reads, with bgscan in words."""

from __future__ import annotations

import time
from typing import Any

from ..output import finite
from ..peers.nl80211 import ssid_text
from ..text import NAME_CHARS, clipped, shown
from .findings import (
    GuardSeen,
    Recording,
    Scan,
    _n,
    analyse,
    spike_definition,
    verdict,
)

# ---- the JSON document -----------------------------------------------------------------------

def scans_unseen(rec: Recording) -> str:
    """Why the recording saw no scan events ("" when it saw them)."""
    if rec.scans_seen:
        return ""
    return rec.scan_events_source.removeprefix("not seen: ") or "no reason given"


def _ssid(ssid: bytes) -> str:
    return ssid.decode("utf-8", "backslashreplace")


def as_json(rec: Recording) -> dict[str, Any]:
    links = []
    for link in rec.links:
        a = analyse(link, rec.duration)
        guard = rec.guards.get(link.interface, GuardSeen())
        links.append({
            "interface": link.interface, "ssid": link.ssid, "signal_dbm": link.signal_dbm,
            "signal_source": link.signal_source, "gateway": link.gateway,
            "target": link.target, "latency_method": link.latency_method,
            "latency_try": link.latency_try,
            "bgscan": link.bgscan, "bgscan_source": link.bgscan_source,
            "bgscan_explained": link.bgscan_words,
            "guard": {"installed": guard.installed, "running": guard.running,
                      "state": guard.state, "states_seen": guard.states_seen,
                      "settings_sources": guard.settings_sources, "detail": guard.detail},
            "summary": {
                "echoes": a.echoes, "answered": a.answered,
                "median_rtt_ms": finite(a.median_ms),
                "spike_threshold_ms": finite(a.spike_threshold_ms),
                "spikes": a.spikes, "spikes_in_scans": a.spikes_in_scans, "scans": a.scans,
                "seconds_scanning": round(a.scan_seconds, 3),
                "throughput_inside_scans_bps": finite(a.inside_bps),
                "throughput_outside_scans_bps": finite(a.outside_bps),
                "inside_share": finite(a.inside_share), "busy": a.busy,
                "by_source": {k: {"scans": v.scans, "seconds": round(v.seconds_off, 3),
                                  "spikes": v.spikes, "names": v.names}
                              for k, v in a.by_source.items()},
            },
            "verdict": verdict(a, guard, scans_unseen(rec)),
            "scans": [{"start": round(s.start, 3), "end": None if s.end is None else round(s.end, 3),
                       "duration": None if s.duration is None else round(s.duration, 3),
                       "outcome": s.outcome, "source": s.source, "name": s.name,
                       "label": s.label_text, "basis": s.basis,
                       "ssids": None if s.ssids is None else [_ssid(x) for x in s.ssids],
                       "channels": len(s.frequencies)} for s in link.scans],
            "echoes": [[round(e.sent, 3), None if e.rtt_ms is None else round(e.rtt_ms, 3)]
                       for e in link.echoes],
            "seconds": [[round(s.at, 3), round(s.rx_bps), round(s.tx_bps)] for s in link.seconds],
        })
    return {"started_at": rec.started_at, "duration": round(rec.duration, 3),
            "interrupted": rec.interrupted, "spike_definition": spike_definition(),
            "scan_events": rec.scan_events_source, "notes": rec.notes, "links": links}


# ---- the report a person reads -----------------------------------------------------------------

def _mbit(bps: float | None) -> str:
    return "-" if bps is None else f"{bps / 1e6:.1f} Mbit/s"


def guard_line(guard: GuardSeen) -> str:
    if not guard.installed:
        return "not installed" + (f" ({guard.detail})" if guard.detail else "")
    if not guard.running:
        return "installed, not running" + (f" ({guard.detail})" if guard.detail else "")
    seen = [shown(s, NAME_CHARS) for s in guard.states_seen if s]
    text = "installed, running"
    if seen:
        text += f", {' then '.join(seen)} during the run"
    if guard.settings_sources:
        sources = sorted({shown(s) for s in guard.settings_sources.values()})
        text += f" (settings from {', '.join(sources)})"
    if guard.detail:
        text += f"; {guard.detail}"
    return text


def scan_line(scan: Scan) -> str:
    took = "still running" if scan.duration is None else f"{scan.duration:6.2f} s"
    probed = ("no SSID (passive)" if not scan.ssids else
              ", ".join(ssid_text(s) if not s else f"'{ssid_text(s)}'" for s in scan.ssids))
    who = scan.label_text
    return (f"  at {scan.start:7.1f} s  {took}  {scan.outcome:<8}  {who}\n"
            f"      probed {probed} on {len(scan.frequencies)} channel(s); "
            f"how we know: {scan.basis}")


def report(rec: Recording) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(rec.started_at))
    out = [f"scanguardctl diagnose: {rec.duration:.0f} s from {when}"
           + (" (ended early by Ctrl-C)" if rec.interrupted else "")]
    if not rec.links:
        out.append("No activated Wi-Fi connection was found: nothing to diagnose.")
    for link in rec.links:
        a = analyse(link, rec.duration)
        guard = rec.guards.get(link.interface, GuardSeen())
        head = shown(link.interface, NAME_CHARS) + (f" ('{clipped(link.ssid, 64)}')" if link.ssid else "")
        out.append("")
        out.append(f"== {head}")
        out.extend(f"* {line}" for line in verdict(a, guard, scans_unseen(rec)))
        out.append("")
        signal = (f"{link.signal_dbm} dBm ({link.signal_source})" if link.signal_dbm is not None
                  else f"unknown ({link.signal_source or 'not readable'})")
        out.append(f"Signal: {signal}")
        if link.bgscan is None:
            out.append(f"bgscan: unknown ({link.bgscan_source})")
        else:
            value = f"'{shown(link.bgscan)}'" if link.bgscan else '"" (none)'
            out.append(f"bgscan: {value}, {link.bgscan_source}: {link.bgscan_words}")
        out.append(f"nm-scanguard: {guard_line(guard)}")
        if a.median_ms is None:
            out.append(f"Latency: not measured ({a.latency_why})")
        else:
            out.append(f"Latency: {a.echoes} echoes, {link.latency_method}; median "
                       f"{a.median_ms:.1f} ms; {_n(a.spikes, 'spike')} (≥ "
                       f"{a.spike_threshold_ms:.0f} ms or lost), {a.spikes_in_scans} inside scans")
        out.append(f"Throughput (median second): {_mbit(a.outside_bps)} outside scans, "
                   f"{_mbit(a.inside_bps)} inside")
        out.append(f"Scans: {a.scans} ({rec.scan_events_source})")
        out.extend(scan_line(s) for s in link.scans)
    out.append("")
    out.append(f"Spike: {spike_definition()}.")
    out.extend(rec.notes)
    return "\n".join(out) + "\n"


# ---- bgscan in words ---------------------------------------------------------------------------

NM_SINGLE = "simple:30:-70:86400"
NM_MULTI = "simple:30:-65:300"


def _every(seconds: int) -> str:
    if seconds >= 3600 and seconds % 3600 == 0:
        hours = seconds // 3600
        return "once a day" if hours == 24 else f"every {hours} h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"every {seconds // 60} min"
    return f"every {seconds} s"


def explain_bgscan(value: str | None, *, suspended_by_guard: bool = False,
                   access_points: int | None = None) -> str:
    """A bgscan string in words, and why NetworkManager chose it where that can be told.
    `access_points`: how many access points (BSSIDs) of this network NetworkManager lists."""
    if value is None:
        return ("no bgscan at all: NetworkManager sets none for a hotspot, an ad-hoc network or "
                "a profile locked to one BSSID, so wpa_supplicant does not scan while connected")
    if value == "":
        return ("background scans are off" + (": nm-scanguard suspended them while the link is "
                                              "busy and restores NetworkManager's value after"
                                              if suspended_by_guard else ""))
    parts = value.split(":")
    if parts[0] in ("simple", "learn") and len(parts) >= 4:
        try:
            short, limit, long = int(parts[1]), int(parts[2]), int(parts[3])
        except ValueError:
            return f"a {parts[0]} bgscan with parameters that are not numbers"
        words = (f"a scan {_every(long)} while the signal is at or above {limit} dBm, "
                 f"{_every(short)} below it, and one at once when it crosses {limit} dBm")
        if parts[0] == "learn":
            words += " (the learn module, which also remembers the channels it found)"
        if value == NM_MULTI:
            why = ("NetworkManager chose it because it saw more than one access point of this "
                   "network, or the network uses 802.1X")
            if access_points is not None:
                why += f" (it lists {_n(access_points, 'access point')} of it now)"
            words += f"; {why}"
        elif value == NM_SINGLE:
            words += ("; NetworkManager's choice for a network with a single access point "
                      "(it scans once a day while the signal is good)")
        return words
    return f"the bgscan module '{clipped(parts[0])}', which this tool cannot explain"
