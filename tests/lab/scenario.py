"""What the checks and `make demo` do with a running lab: the weak link, the daemon under test,
and one measured transfer.  Shared so that the demo's figures are exactly what the checks
assert on (issue 4: checks 1 and 2 and both demo runs call `measured_transfer`).

The weak link is a real one (issue 9): the lab's wireless medium (tests/lab/medium) puts the
station at WEAK_SIGNAL_DBM (-72 dBm), below NetworkManager's -70 dBm threshold, and
NetworkManager's own, unmodified `simple:30:-70:86400` scans every 30 s.  The air is the
medium's: 802.11g at up to 9 Mbit/s with airtime, per-link signal and an error model.
"""

from __future__ import annotations

import json
import re
import shlex
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from nm_scanguard.names import IFACE as SCANGUARD_IFACE, PATH as SCANGUARD_PATH
from nm_scanguard.status import FIELDS

from . import measure
from .lab import (AIR_RATES_MBIT, AP2_OFF_DBM, PING_INTERVAL, SCANGUARD_NAME, STA_IF, STRONG_SIGNAL_DBM,
                  WEAK_SIGNAL_DBM, Lab, TrafficRun, wait_until)
from .vm import REPO, GuestProcess, LabError

NM_DEFAULT_BGSCAN = "simple:30:-70:86400"
NM_BGSCAN_THRESHOLD_DBM = int(NM_DEFAULT_BGSCAN.split(":")[2])
# The bgscan a weak link runs: NetworkManager's own (the name stays for the checks' readability).
WEAK_LINK_BGSCAN = NM_DEFAULT_BGSCAN
SIMULATION_NOTE = (f"Virtual air: lab medium, 802.11g up to {max(AIR_RATES_MBIT)} Mbit/s, station at "
                   f"{WEAK_SIGNAL_DBM} dBm, NetworkManager's own bgscan {NM_DEFAULT_BGSCAN}")

# Lab values: the station works at WEAK_SIGNAL_DBM (-72); a -80 floor releases at FADED_SIGNAL_DBM
# (-85); -72 is above floor + hysteresis (-75), so the guard engages again.
GUARD_SETTINGS = {
    "sample_interval": 1,
    "engage_after": 2,
    "release_after": 5,
    "signal_floor_dbm": -80,
    "signal_hysteresis_db": 5,
    "signal_poll_interval": 2,
}
GUARD_CONFIG = "[scanguard]\n" + "".join(f"{k} = {v}\n" for k, v in GUARD_SETTINGS.items())

SCANGUARDCTL = "/usr/bin/python3 -m nm_scanguard.cli.scanguardctl"


# ---- the daemon under test ---------------------------------------------------------------------
class Guardd:
    """nm-scanguard running in the guest, from this checkout, as root (see Lab.start_daemon)."""

    def __init__(self, lab: Lab, config: str = GUARD_CONFIG, module: bool = False):
        """module=True: a module's daemon, shared by its checks; a check that starts it again
        does not stop it at its end (Lab.check_scope), and every check of the module starts
        with it running (StartState.keep)."""
        self.lab, self.config, self.module = lab, config, module
        self.proc: GuestProcess | None = None
        self.owner: str | None = None      # its unique bus name since start, e.g. ":1.23"
        self.started_at = 0.0              # guest time it owned its name

    def start(self, timeout: float = 60, require_bus: bool = True) -> "Guardd":
        """Start it and wait until it owns its bus name and has looked at NetworkManager.

        require_bus=False: a daemon that logs its start but is not on the bus is left running
        for the checks to report (bus_problem), instead of raising here in a fixture."""
        self.proc = self.lab.start_daemon(self.config, outlives_check=self.module)
        wait_until(lambda: "started (nm-scanguard" in self.log() or not self.proc.running(),
                   timeout, "scanguardd to start", interval=0.5)
        if not self.proc.running():
            raise LabError(f"scanguardd exited at start:\n{self.log()}")
        self.started_at = self.lab.guest_time()
        try:
            self.owner = wait_until(lambda: self.lab.name_owner(), 15,
                                    f"scanguardd to own {SCANGUARD_NAME}")
        except LabError:
            self.owner = None
            if require_bus:
                raise LabError(self.bus_problem()) from None
        return self

    def bus_problem(self) -> str | None:
        """Why the daemon is not the same connection on the bus as at its start; None if it is.

        A dropped connection shows as no owner, or as another unique name if it reconnected.
        """
        now = self.lab.name_owner()
        running = self.running()
        if self.owner is not None and now == self.owner and running:
            return None
        since = self.lab.guest_time() - self.started_at
        what = ("nobody owns it now" if now is None else
                f"{now} owns it now (a new connection: the old one was dropped)")
        then = (f"owned {SCANGUARD_NAME} as {self.owner} when it started" if self.owner else
                f"did not own {SCANGUARD_NAME} within 15 s of logging its start")
        return (f"scanguardd (started {since:.0f} s ago) {then}; {what}; the process is "
                f"{'running' if running else 'gone'}.  A daemon "
                f"that falls off the bus leaves bgscan as it was and answers nobody.  Its last "
                f"log lines ({self.proc.host_log if self.proc else '-'}):\n"
                + "\n".join(self.log().splitlines()[-25:]))

    def running(self) -> bool:
        return self.proc is not None and self.proc.running()

    def stop(self) -> int | None:
        """SIGTERM (the daemon restores what it suspended); None if it was not running."""
        if self.proc is None:
            return None
        rc = self.proc.stop(signal.SIGTERM, timeout=15)
        return rc

    def kill9(self) -> int:
        return self.proc.stop(signal.SIGKILL, timeout=5)

    def log(self) -> str:
        return self.proc.output() if self.proc else ""

    def ctl(self, args: str, timeout: float = 60) -> str:
        return self.lab.check(f"cd {shlex.quote(str(REPO))} && {SCANGUARDCTL} {args}", timeout)

    def status(self) -> dict:
        """The station's entry of the daemon's `Devices` property, read with busctl: the same
        keys as `scanguardctl status --json` (a key the daemon left out is None).  For polling
        and state checks: busctl takes ≈0.4 s in the TCG guest, scanguardctl (a Python start)
        ≈4 s, and the lab's loops called it 50-odd times (229-268 s of a run, calls.tsv).
        cli_status() is the CLI's own view, for the checks about what the CLI says."""
        out = self.lab.check(f"busctl --system --json=short get-property {SCANGUARD_NAME} "
                             f"{SCANGUARD_PATH} {SCANGUARD_IFACE} Devices", 30)
        devices = [_plain(d) for d in json.loads(out)["data"]]
        device = next((d for d in devices if d.get("interface") == STA_IF), None)
        return {} if device is None else {key: device.get(key) for key in FIELDS} | device

    def cli_status(self) -> dict:
        """`scanguardctl status --json`, the device entry of the station."""
        doc = json.loads(self.ctl("status --json"))
        devices = [d for d in doc["devices"] if d["interface"] == STA_IF]
        return devices[0] if devices else {}


def _plain(node):
    """busctl --json=short's value without its variant wrappers ({"type": .., "data": ..})."""
    if isinstance(node, dict):
        if set(node) == {"type", "data"}:
            return _plain(node["data"])
        return {k: _plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    return node


# ---- the simulated weak link -------------------------------------------------------------------
FADED_SIGNAL_DBM = -85


def strong_link(lab: Lab) -> None:
    """Back to the strong signal the lab starts with: bgscan then scans once a day."""
    lab.set_signal(STRONG_SIGNAL_DBM)
    lab.wait_signal(STRONG_SIGNAL_DBM)


def on_ap1_alone(lab: Lab, ap1: str) -> None:
    """The second AP stopped (no scan can see it), the station on AP1 at the strong signal.

    A station left on AP2 is brought back by a reconnect with AP2 gone: with AP2 up,
    NetworkManager would pick from wpa_supplicant's cached results, and a scan does not move it
    (NetworkManager's scans are scan-only; wpa_supplicant 2.10 skips a roam while the current
    AP's SNR is above 25 dB)."""
    lab.stop_second_ap()
    lab.set_signals({("ap", "sta"): STRONG_SIGNAL_DBM, ("ap2", "sta"): AP2_OFF_DBM})
    if lab.bssid() != ap1:
        lab.reconnect()
    lab.ensure_connected()
    wait_until(lambda: lab.bssid() == ap1, 60, f"the station on AP1 {ap1}", interval=1)


def bgscan_levels(lab: Lab, t0: float = 0) -> list[tuple[float, bool]]:
    """(guest time, above) of each signal-level change bgscan's module logged since t0: its
    reaction to the kernel's CQM event (`bgscan simple: signal level changed (above=N ...`).
    wpa_supplicant 2.10-12 also logs CTRL-EVENT-SIGNAL-CHANGE; 2.10-24 (Debian 13) does not."""
    return [(t, up) for t, up in measure.bgscan_levels(lab.log_text("wpa_supplicant")) if t >= t0]


def bgscan_above_threshold(lab: Lab) -> bool | None:
    """What bgscan last heard from the kernel: above its threshold (True), below (False), or
    nothing yet (None)."""
    levels = bgscan_levels(lab)
    return levels[-1][1] if levels else None


def arm_weak_link(lab: Lab, timeout: float = 60) -> float:
    """Put the station at WEAK_SIGNAL_DBM and start NetworkManager's bgscan afresh, so that its
    first scan comes 30 s later.

    Waits for a running scan to end first (an idle scan takes 2–5 s), so that every run starts
    in the same phase: no scan, bgscan's 30 s timer just started.  Setting "" first makes the
    second Set a change (the same value again would be a no-op and keep the old timer).
    Call only while the guard is idle.  Returns the guest time of the reset.
    """
    before, above, t_set = lab.signal(), bgscan_above_threshold(lab), lab.guest_time()
    lab.set_signal(WEAK_SIGNAL_DBM)
    lab.wait_signal(WEAK_SIGNAL_DBM)
    if before > NM_BGSCAN_THRESHOLD_DBM >= WEAK_SIGNAL_DBM and above is not False:
        # Crossing NetworkManager's threshold: the kernel's CQM event reaches bgscan seconds
        # later (an averaged signal), and bgscan then scans at once.  Let that happen (and end,
        # below) before arming, or the scan lands in the measured transfer: seen in the first
        # roaming control run, 6 s after the change, just before the guard engaged.  Only if
        # bgscan last heard "above": the kernel reports a crossing once (a brief -72 dBm
        # earlier may have left it "below", seen on 6.12), and no event is no immediate scan.
        try:
            wait_until(lambda: [t for t, up in bgscan_levels(lab, t_set) if not up], 30,
                       "bgscan to hear the kernel's CQM event below its threshold", interval=1)
            time.sleep(1)
        except LabError as e:
            lab.say(f"arm_weak_link: {e}; arming anyway (no event, no immediate scan)")
    wait_until(lambda: not any(s.end is None for s in lab.scans(lab.guest_time() - 120)),
               timeout, "the station's scan to finish", interval=1)
    network = lab.network_path()
    lab.set_bgscan("", network)
    lab.set_bgscan(WEAK_LINK_BGSCAN, network)
    if lab.bgscan(network) != WEAK_LINK_BGSCAN:
        raise LabError(f"bgscan did not take {WEAK_LINK_BGSCAN!r}: {lab.bgscan(network)!r}")
    return lab.guest_time()


def bgscan_changes(lab: Lab, t0: float = 0, t1: float = float("inf")) -> list[measure.BgscanChange]:
    return [c for c in measure.bgscan_changes(lab.log_text("wpa_supplicant")) if t0 <= c.time <= t1]


def wait_bgscan(lab: Lab, value: str, timeout: float, interval: float = 0.5) -> float:
    """Poll wpa_supplicant until the current network's bgscan is `value`; host seconds waited."""
    t = time.monotonic()
    wait_until(lambda: lab.bgscan() == value, timeout, f"bgscan {value!r}", interval=interval)
    return time.monotonic() - t


def wait_bgscan_off(lab: Lab, since: float, timeout: float) -> float:
    """Wait until bgscan was stopped after guest time `since` (the guard engaged) and reads "";
    returns the guest time wpa_supplicant logged the stop."""
    def off():
        changes = [c for c in bgscan_changes(lab, since) if not c.on]
        return changes[0].time if changes and lab.bgscan() == "" else None
    return wait_until(off, timeout, "the guard to suspend bgscan", interval=0.5)


def wait_bgscan_set_off(lab: Lab, since: float, timeout: float) -> float:
    """Wait until bgscan was set to "" over D-Bus after guest time `since` and reads ""; returns
    the guest time wpa_supplicant logged that Set.  Unlike wait_bgscan_off, this sees a Set
    made while no bgscan module runs (mid-roam, wpa_supplicant has stopped it itself, so no
    stop is logged)."""
    def off():
        sets = lab.wpa_events("bgscan - hexdump_ascii(len=0)", since)
        return sets[0] if sets and lab.bgscan() == "" else None
    return wait_until(off, timeout, "the guard to suspend bgscan again", interval=0.5)


def wait_bgscan_on(lab: Lab, since: float, params: str, timeout: float) -> float:
    """Wait until wpa_supplicant initialised bgscan with `params` after guest time `since`;
    returns the guest time of that log line."""
    def on():
        changes = [c for c in bgscan_changes(lab, since) if c.on and c.params == params]
        return changes[0].time if changes else None
    return wait_until(on, timeout, f"bgscan restored to '{params}'", interval=0.5)


def params(bgscan: str) -> str:
    """'simple:30:-25:86400' -> '30:-25:86400', as wpa_supplicant logs it."""
    return bgscan.split(":", 1)[1]


def wait_scan(lab: Lab, since: float, timeout: float) -> measure.Scan:
    """The station's first scan starting after guest time `since`."""
    return wait_until(lambda: next((s for s in lab.scans(since) if s.start >= since), None),
                      timeout, "a scan of the station", interval=1)


def transfer_problems(m: "MeasuredRun", seconds: float, slack: float = 2.0) -> list[str]:
    """Why `m` was not a transfer that ran for its whole `seconds`; [] if it was.

    Judged by the time iperf3's intervals cover at each end, not by how many there are: a
    sending iperf3 on the loaded TCG guest reports its intervals late and merges them (the
    server of a download gave 24 intervals of up to 2.2 s for 40 s), so the count says how busy
    the emulated CPU was, not whether data flowed (README.md, trap 18).
    """
    tp = m.summary["throughput"]
    problems = []
    for side in ("sender", "receiver"):
        st = tp[f"{side}_mbps"]
        if st["seconds"] < seconds - slack:
            problems.append(
                f"iperf3's {side} reported {st['intervals']} intervals covering only "
                f"{st['seconds']:.1f} s of the {seconds:g} s {m.run.direction} (expected at least "
                f"{seconds - slack:g} s): the transfer stopped early")
    if not tp["mean_received_mbps"] > 1:
        problems.append(f"the receiver got {tp['mean_received_mbps']:.2f} Mbit/s on average over "
                        f"the {m.run.direction} (expected > 1): the link carried no traffic")
    return problems


def lab_problems(m: "MeasuredRun", seconds: float, quiet_limit: float,
                 below_mbps: float = 1.0) -> list[str]:
    """Why `m` cannot judge the guard, because of the lab rather than the daemon; [] if it can.

    - the station lost its link during the transfer (a CPU-starved TCG guest misses beacons and
      mac80211 disconnects: seen on a loaded host), and reconnecting restarts bgscan by itself;
    - the receiver saw less than `below_mbps` for `quiet_limit` s in a row: a guard that
      releases then is right to;
    - the transfer did not run for its whole duration (transfer_problems).
    """
    problems = []
    lost = m.link_losses  # the kernel's and wpa_supplicant's, between t0 and iperf3's end
    if lost:
        problems.append("the station lost its link during the transfer: " + "; ".join(
            f"t0 + {tm - m.t0:.1f} s {e}" for tm, e in lost[:4]))
    start, quiet = measure.longest_quiet(m.run.iperf.receiver, below_mbps)
    if quiet >= quiet_limit:
        problems.append(f"the receiver got under {below_mbps:g} Mbit/s for {quiet:.1f} s in a row "
                        f"from t0 + {start - m.t0:.0f} s (±1 s), at least {quiet_limit:g} s: "
                        f"the link was quiet long enough for the guard to release")
    return problems + transfer_problems(m, seconds)


def link_losses(lab: Lab, t0: float, t1: float) -> list[tuple[float, str]]:
    """The station's link losses in [t0, t1], guest time: the kernel's beacon loss, disconnect
    and deauth events (`iw event`) and wpa_supplicant's CTRL-EVENT-DISCONNECTED, in time order."""
    events = [(t, e) for t, e in measure.parse_link_losses(lab.log_text("iw-event"), STA_IF)
              if t0 <= t <= t1]
    events += [(t, "CTRL-EVENT-DISCONNECTED") for t in
               lab.wpa_events("CTRL-EVENT-DISCONNECTED", t0, t1)]
    return sorted(events)


# ---- one measured transfer ----------------------------------------------------------------------
@dataclass
class MeasuredRun:
    """One transfer with everything the lab measures about it, and its summary figures."""
    label: str
    run: TrafficRun
    scans: list[measure.Scan]
    pm1: list[measure.NullFrame]
    bgscan_requests: list[float]
    bgscan_changes: list[measure.BgscanChange]
    summary: dict
    phases: dict = field(default_factory=dict)
    link_losses: list[tuple[float, str]] = field(default_factory=list)

    @property
    def t0(self) -> float:
        return self.run.t0

    @property
    def t_end(self) -> float:
        return self.run.t_end

    def engaged_at(self) -> float | None:
        """Guest time bgscan was stopped during the transfer (the guard engaged), if it was.

        A stop within 10 s after a link loss is the disconnect's (wpa_supplicant deinitialises
        bgscan when it loses the network), never the guard's."""
        return next((c.time for c in self.bgscan_changes
                     if not c.on and self.t0 <= c.time <= self.t_end
                     and not any(0 <= c.time - t <= 10 for t, _ in self.link_losses)), None)

    def scans_after(self, t: float) -> list[measure.Scan]:
        """Scans that ran (even partly) between `t` and the end of the transfer."""
        return [s for s in self.scans if s.overlaps(t, self.t_end)]

    def report(self) -> str:
        lines = [f"{self.label} -- {SIMULATION_NOTE}", measure.format_summary(self.summary),
                 f"  bgscan scan requests: {len(self.bgscan_requests)}",
                 "  scans (start after t0 + duration): " + (", ".join(
                     f"{s.start - self.t0:.0f}s+" + (f"{s.duration:.1f}s" if s.end else "(running)")
                     + (f" ({len(s.freqs)} ch)" if s.freqs else "")
                     + (" (aborted)" if s.aborted else "") for s in self.scans) or "none")]
        engaged = self.engaged_at()
        if engaged is not None:
            lines.append(f"  guard engaged (bgscan stopped) at t0 + {engaged - self.t0:.1f} s")
        lines.append("  phases: " + ", ".join(f"{k} {v:.1f} s" for k, v in self.phases.items()))
        return "\n".join(lines)


def measured_transfer(lab: Lab, direction: str, seconds: float, label: str,
                      progress: Callable[[str], None] | None = None, netns: str | None = None,
                      congestion: str | None = None,
                      ping_interval: float = PING_INTERVAL) -> MeasuredRun:
    """Capture the air, run iperf3 (`direction`) with ping alongside (every `ping_interval`
    seconds), and summarise: scans (kernel `iw event`), bgscan's own requests and starts/stops
    (wpa_supplicant log), the station's PM=1 Null frames, per-second throughput at both ends,
    ping RTT.  `netns` and `congestion`: see Lab.start_traffic."""
    phases = {}
    t = time.monotonic()
    cap = lab.start_capture(re.sub(r"[^A-Za-z0-9]+", "-", label).strip("-"))
    phases["start capture"] = time.monotonic() - t
    t = time.monotonic()
    traffic = lab.start_traffic(direction, seconds, ping_interval, netns=netns,
                                congestion=congestion)
    while traffic.iperf.wait(min(15.0, seconds + 60)) is None:
        if progress:
            elapsed = time.monotonic() - t
            if elapsed > seconds + 60:
                break  # Traffic.wait() gives up and reports it
            n = len(lab.scans(traffic.t0))
            progress(f"{label}: {min(elapsed, seconds):3.0f}/{seconds:g} s, "
                     f"{n} scan{'s' if n != 1 else ''} so far")
    run = traffic.wait()
    phases[f"{direction} + ping"] = time.monotonic() - t
    t = time.monotonic()
    cap.stop()
    scans = lab.scans(run.t0, run.t_end)
    pm1 = cap.pm1_nulls(run.t0, run.t_end)
    requests = lab.bgscan_requests(run.t0, run.t_end)
    changes = bgscan_changes(lab, run.t0 - 600, run.t1)
    losses = link_losses(lab, run.t0, run.t_end)
    air = lab.medium_stats(run.t0 - 2, run.t_end + 2)
    summary = measure.summarize(run.iperf, run.ping, scans, pm1, run.t0, run.t_end, losses, air)
    summary["label"] = label
    summary["simulation"] = SIMULATION_NOTE
    summary["bgscan_requests"] = len(requests)
    phases["stop capture + analysis"] = time.monotonic() - t
    m = MeasuredRun(label, run, scans, pm1, requests, changes, summary, phases, losses)
    engaged = m.engaged_at()
    summary["guard_engaged_after_s"] = None if engaged is None else round(engaged - run.t0, 2)
    return m


# ---- scanguardctl diagnose as a desktop user (issue 23) ------------------------------------------
# A desktop user has no privileges; Debian's installer puts the first user into group netdev,
# which Debian's wpa_supplicant policy lets read the bgscan string.  `nobody` stands in for both.
DIAGNOSE_USERS = {
    "user": "setpriv --reuid=nobody --regid=nogroup --clear-groups",
    "netdev": "setpriv --reuid=nobody --regid=nogroup --groups=netdev",
}


class Diagnose:
    """`scanguardctl diagnose --json` run as an unprivileged user in the guest, beside a check;
    `result()` waits for it and gives its JSON, with each scan's start and end on the guest's
    clock (`t0`, `t1`) for comparison with what the lab knows independently."""

    count = 0

    def __init__(self, lab: Lab, seconds: float, as_user: str = "user", label: str = "diagnose",
                 text: bool = False, plot: bool = False):
        Diagnose.count += 1
        self.lab, self.seconds, self.text = lab, seconds, text
        self.label = f"{label}-{Diagnose.count}"
        self.path = f"/run/lab/{self.label}.{'txt' if text else 'json'}"
        self.plot = f"/run/lab/plots/{self.label}.png" if plot else None
        options = "" if text else " --json"
        if self.plot:
            lab.check("mkdir -p -m 1777 /run/lab/plots", 10)  # the user writes the plot there
            options += f" --plot {self.plot}"
        self.t_spawned = lab.guest_time()
        self.proc = lab.spawn(
            f"cd {shlex.quote(str(REPO))} && PYTHONDONTWRITEBYTECODE=1 exec "
            f"{DIAGNOSE_USERS[as_user]} {SCANGUARDCTL} diagnose --seconds {seconds:g}{options} "
            f"--interface {STA_IF} > {self.path}", name=self.label)

    def recording(self) -> bool:
        """Whether it records yet (its python and NetworkManager queries take seconds in the
        TCG guest): it opens its ICMP socket, owned by nobody (uid 65534), after subscribing to
        the kernel's scan events, just before the first echo."""
        return self.lab.run("awk 'NR > 1 && $8 == 65534' /proc/net/icmp | grep -q .", 10)[0] == 0

    def wait_recording(self, timeout: float = 60) -> float:
        wait_until(self.recording, timeout, f"{self.label} to start recording", interval=0.5)
        return self.lab.guest_time()

    def _finished(self, timeout: float | None) -> bytes:
        rc = self.proc.wait(timeout if timeout is not None else self.seconds + 90)
        if rc is None:
            self.proc.stop()
            raise AssertionError(f"diagnose did not finish: {self.proc.output()[-2000:]}")
        assert rc == 0, f"diagnose exited {rc}: {self.proc.output()[-2000:]}"
        return self.lab.read_file(self.path)

    def result(self, timeout: float | None = None) -> dict:
        doc = json.loads(self._finished(timeout).decode("utf-8"))
        for link in doc["links"]:
            for scan in link["scans"]:
                scan["t0"] = doc["started_at"] + scan["start"]
                scan["t1"] = None if scan["end"] is None else doc["started_at"] + scan["end"]
        (self.lab.vm.rundir / f"{self.label}.json").write_text(json.dumps(doc, indent=1))
        return doc

    def report(self, plot_to: Path | None = None, timeout: float | None = None) -> str:
        """The text a user sees; the plot copied to `plot_to` when one was asked for."""
        text = self._finished(timeout).decode("utf-8")
        if self.plot and plot_to is not None:
            plot_to.write_bytes(self.lab.read_file(self.plot))
        return text


def diagnose_link(doc: dict) -> dict:
    (link,) = [entry for entry in doc["links"] if entry["interface"] == STA_IF]
    return link


def matching_scan(scans: list[measure.Scan], t0: float, slack: float = 0.5) -> measure.Scan | None:
    """The kernel scan (`iw event`, the lab's own record) that started at t0 (guest clock)."""
    return next((s for s in scans if abs(s.start - t0) <= slack), None)
