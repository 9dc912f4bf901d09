"""`make roam`: a fade under load in the virtual Wi-Fi lab, targeted roaming against a scan of
every channel (issue 35; docs/roaming.md).

    /usr/bin/python3 -m tests.lab.roam_study [--scenarios long,walk] [--modes targeted,full]
                                             [--guard-seconds 200] [--out roam-results]

A second AP of the lab's network (same SSID and PSK) runs on channel 11 (`--ap2-channel`), AP1
on channel 6.  Not channel 1, where a scan of every channel starts (2412 MHz): on 2026-11-27,
with AP2 there, both such scans under load on the Debian 12 guest missed it at -50 dBm (the
`full` path then roamed on bgscan's next scan, 47 and 53 s after the fade), and on the Debian
13 guest the idle scans before the guard missed it at -78 dBm, so the targeted path had nothing
to learn: the figures would measure that, not the two paths.  The
station guards an upload on AP1 at -72 dBm (between the floor, -80 dBm, and NetworkManager's
bgscan threshold, -70 dBm), with AP2 seen by one scan at -78 dBm before the guard starts.  Then,
once with `roam_scans = targeted` and once with `roam_scans = full` (the path before issue 35),
in the same lab session:

- long: the guard holds `--guard-seconds` (default 200: longer than wpa_supplicant's 180 s BSS
  expiry, so without scans of its own its list no longer holds AP2); then AP1 fades to -85 dBm
  while AP2 rises to -50 dBm, in one change of the medium;
- walk: AP1 falls 1 dB/s from -62 to -85 dBm while AP2 rises from -85 to -62 dBm.

Per run: seconds from AP1 crossing the floor to the association with AP2, the longest scan
while busy (the time off the channel is at most that), scans of more than two channels while
busy, the worst receiving second in the 30 s after the crossing against the median second
before the fade, and (walk) the time scans took per minute while the signal was marginal.
Writes <out>/table.md and <out>/summary.json (strict JSON); exits 1 if a run did not roam.
The issue's goals are printed beside the figures; this is a measurement, not a check.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from .demo import machine, strict_json
from .lab import AP2_OFF_DBM, STA_IF, STRONG_SIGNAL_DBM, Lab, wait_until
from .scenario import (FADED_SIGNAL_DBM, GUARD_SETTINGS, SIMULATION_NOTE, Guardd, arm_weak_link,
                       wait_bgscan_off)
from .vm import REPO, LabError

T_START = time.monotonic()
SCENARIOS = ("long", "walk")
MODES = ("targeted", "full")
AP2_SEEN_DBM = -78  # in range, weaker than AP1 at -72: seen by scans, not roamed to
WALK = (-62, -85)  # AP1 from, to; AP2 the other way
FLOOR = GUARD_SETTINGS["signal_floor_dbm"]
AFTER = 30.0  # seconds after the crossing that are judged
MARGINAL = (FLOOR, -70)  # between the floor and NetworkManager's bgscan threshold in the lab
GOALS = {"roam_s": "≤ 2 s", "first_scan_s": "", "longest_scan_s": "≤ 0.3 s", "full_scans_busy": "0",
         "worst_over_median": "≥ 0.8", "off_channel_per_minute_pct": "≤ 1 %"}


def say(msg: str) -> None:
    print(f"[roam {time.monotonic() - T_START:6.1f}s] {msg}", flush=True)


def guard_config(mode: str) -> str:
    settings = dict(GUARD_SETTINGS, roam_scans=mode)
    return "[scanguard]\n" + "".join(f"{k} = {v}\n" for k, v in settings.items())


def on_ap1_with_ap2_seen(lab: Lab, ap1: str) -> None:
    """AP1 strong, AP2 in range but weaker: one scan sees AP2 and moves a station left on AP2
    back to AP1 (a reconnect would pick from wpa_supplicant's cache, which may favour AP2)."""
    lab.ensure_connected()
    lab.set_signals({("ap", "sta"): STRONG_SIGNAL_DBM, ("ap2", "sta"): AP2_SEEN_DBM})
    seen = lab.guest_time()
    lab.check(f"nmcli device wifi rescan ifname {STA_IF}", 30)
    wait_until(lambda: any(s.end is not None for s in lab.scans(seen)), 30,
               "the rescan that sees AP2 to end", interval=0.5)
    wait_until(lambda: lab.bssid() == ap1, 60, f"the station on AP1 {ap1}", interval=1)


def walk(lab: Lab) -> tuple[float, float, float]:
    """AP1 down and AP2 up by 1 dB/s of guest time (a step the lab's commands made late is
    skipped, not stretched); returns the guest times AP1 went below -70 (marginal), below the
    floor, and the walk's start."""
    start = lab.guest_time()
    marginal = crossed = 0.0
    k = 0
    while k <= WALK[0] - WALK[1]:
        t = lab.guest_time()
        ap1 = WALK[0] - k
        lab.set_signals({("ap", "sta"): ap1, ("ap2", "sta"): WALK[1] + k})
        if ap1 < MARGINAL[1] and not marginal:
            marginal = t
        if ap1 < FLOOR and not crossed:
            crossed = t
        time.sleep(max(0.0, start + k + 1 - lab.guest_time()))
        k = max(k + 1, int(lab.guest_time() - start))
    return marginal, crossed, start


def run(lab: Lab, scenario: str, mode: str, guard_seconds: float, ap1: str, ap2: str) -> dict:
    on_ap1_with_ap2_seen(lab, ap1)
    d = Guardd(lab, guard_config(mode)).start()
    try:
        wait_until(lambda: d.status().get("state") == "idle" and lab.bgscan() != "",
                   GUARD_SETTINGS["release_after"] + 30, "the guard to be idle", interval=1)
        if scenario == "walk":
            lab.set_signals({("ap", "sta"): WALK[0], ("ap2", "sta"): WALK[1]})
        else:
            arm_weak_link(lab)
        hold = guard_seconds if scenario == "long" else 20.0
        seconds = hold + (WALK[0] - WALK[1] + 1 if scenario == "walk" else 0) + AFTER + 15
        traffic = lab.start_traffic("upload", seconds, ping_interval=None)
        engaged = wait_bgscan_off(lab, traffic.t0, 30)
        say(f"{scenario}, {mode}: guarding since t0+{engaged - traffic.t0:.1f} s; holding "
            f"{hold:g} s before the fade")
        time.sleep(max(0.0, hold - (lab.guest_time() - engaged)))
        if scenario == "walk":
            marginal, crossed, fade_start = walk(lab)
        else:
            fade_start = crossed = lab.guest_time()
            marginal = 0.0
            lab.set_signals({("ap", "sta"): FADED_SIGNAL_DBM, ("ap2", "sta"): STRONG_SIGNAL_DBM})
        roamed = wait_until(lambda: next(iter(lab.wpa_events(
            f"CTRL-EVENT-CONNECTED - Connection to {ap2}", fade_start)), None),
            AFTER + 120, f"the station to roam to AP2 {ap2}", interval=1)
        result = traffic.wait()
        log = d.log()
    finally:
        d.stop()
        lab.set_signals({("ap", "sta"): STRONG_SIGNAL_DBM, ("ap2", "sta"): AP2_OFF_DBM})
    return figures(lab, result, engaged, fade_start, marginal, crossed, roamed, log)


def figures(lab: Lab, result, engaged: float, fade_start: float, marginal: float,
            crossed: float, roamed: float, log: str) -> dict:
    busy = [s for s in lab.scans(engaged, result.t_end) if s.start >= engaged]
    fade = [s for s in busy if s.overlaps(fade_start, crossed + AFTER)]
    before = [iv.mbps for iv in result.iperf.receiver
              if engaged + 5 <= iv.start and iv.start + iv.seconds <= fade_start]
    after = [iv.mbps for iv in result.iperf.receiver
             if crossed <= iv.start <= crossed + AFTER]
    median = statistics.median(before) if before else 0.0
    out = {
        "roam_s": round(roamed - crossed, 2),
        # When the first scan after the crossing started: the signal seen below the floor.
        "first_scan_s": round(min((s.start for s in busy if s.start >= crossed),
                                  default=roamed) - crossed, 2),
        "longest_scan_s": round(max((s.duration or 0.0 for s in fade), default=0.0), 2),
        "full_scans_busy": sum(1 for s in busy if len(s.freqs) > 2),
        "scans_in_fade": [{"t": round(s.start - crossed, 2), "channels": list(s.freqs),
                           "s": round(s.duration or 0.0, 2)} for s in fade],
        "worst_over_median": round(min(after) / median, 2) if after and median > 0 else None,
        "median_mbps_before": round(median, 2),
        "targeted_scans_asked": log.count("asked wpa_supplicant for a targeted scan of"),
        "roams_asked": log.count("asked wpa_supplicant to roam from"),
        "gave_up": "targeted roaming gave up" in log,
    }
    if marginal:
        window = [s for s in busy if s.overlaps(marginal, crossed)]
        took = sum(min(s.end or crossed, crossed) - max(s.start, marginal) for s in window)
        out["off_channel_per_minute_pct"] = round(100 * took / max(crossed - marginal, 1e-9), 2)
        out["marginal_s"] = round(crossed - marginal, 1)
    return out


def table(results: dict[str, dict[str, dict]]) -> str:
    keys = ["roam_s", "first_scan_s", "longest_scan_s", "full_scans_busy", "worst_over_median",
            "off_channel_per_minute_pct"]
    head = "| scenario | roam_scans | " + " | ".join(keys) + " |"
    rows = [head, "|" + "---|" * (len(keys) + 2),
            "| goal | | " + " | ".join(GOALS[k] for k in keys) + " |"]
    for scenario, modes in results.items():
        for mode, f in modes.items():
            rows.append(f"| {scenario} | {mode} | " + " | ".join(
                "–" if f.get(k) is None else str(f[k]) for k in keys) + " |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="make roam", description=__doc__.split("\n\n")[0])
    p.add_argument("--scenarios", default=",".join(SCENARIOS),
                   help="comma-separated, of: " + ", ".join(SCENARIOS))
    p.add_argument("--modes", default=",".join(MODES),
                   help="comma-separated roam_scans values, of: " + ", ".join(MODES))
    p.add_argument("--guard-seconds", type=float, default=200,
                   help="how long the long scenario guards before the fade (wpa_supplicant "
                        "forgets an AP unseen for 180 s)")
    p.add_argument("--ap2-channel", type=int, default=11, choices=range(1, 14), metavar="1-13",
                   help="the second AP's 2.4 GHz channel (AP1 is on 6; default 11)")
    p.add_argument("--out", type=Path, default=REPO / "roam-results")
    args = p.parse_args(argv)
    scenarios = [s for s in args.scenarios.split(",") if s]
    modes = [m for m in args.modes.split(",") if m]
    for name, got, known in (("--scenarios", scenarios, SCENARIOS), ("--modes", modes, MODES)):
        bad = [g for g in got if g not in known]
        if bad:
            p.error(f"{name}: unknown {', '.join(bad)}; known: {', '.join(known)}")
    args.out.mkdir(parents=True, exist_ok=True)
    info = machine()
    say(f"{info['date']}; {SIMULATION_NOTE}")
    lab = Lab.start(log=print)
    results: dict[str, dict[str, dict]] = {s: {} for s in scenarios}
    failed: list[str] = []
    try:
        info["guest_kernel"] = lab.check("uname -r").strip()
        lab.start_second_ap(channel=args.ap2_channel)
        ap1, ap2 = lab.radio_macs["ap"], lab.radio_macs["ap2"]
        for scenario in scenarios:
            for mode in modes:
                try:
                    f = run(lab, scenario, mode, args.guard_seconds, ap1, ap2)
                except LabError as e:
                    failed.append(f"{scenario}/{mode}: {e}")
                    say(f"{scenario}, {mode}: {e}")
                    continue
                results[scenario][mode] = f
                say(f"{scenario}, {mode}: {strict_json(f)}")
    finally:
        lab.stop()
    body = (f"nm-scanguard lab: a fade under load, {info['date']}, guest kernel "
            f"{info.get('guest_kernel')}; {SIMULATION_NOTE}\n\n{table(results)}\n"
            + "".join(f"\n- not measured: {f}" for f in failed) + "\n")
    print(body)
    (args.out / "table.md").write_text(body)
    (args.out / "summary.json").write_text(strict_json(
        {"machine": info, "guard_settings": GUARD_SETTINGS, "guard_seconds": args.guard_seconds,
         "ap2_channel": args.ap2_channel,
         "goals": GOALS, "results": results, "not_measured": failed}))
    say(f"wrote {args.out / 'table.md'} and {args.out / 'summary.json'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
