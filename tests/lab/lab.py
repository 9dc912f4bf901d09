"""The virtual Wi-Fi lab: a QEMU guest with mac80211_hwsim, an AP and a NetworkManager station.

    lab = Lab.start()          # boot + AP + station associated (≈1 min under TCG); retried once
    try:
        lab.bgscan()           # 'simple:30:-70:86400', read from wpa_supplicant over D-Bus
        run = lab.upload(60)   # iperf3 station -> AP with ping alongside
        lab.scans(run.t0, run.t1)
    finally:
        lab.stop()             # guest powered off, QEMU gone, pass or fail

Topology inside the guest:
    netns "apns":  wlan0 (radio 0)  192.168.77.1/24  hostapd (WPA2-PSK, 2.4 GHz ch 6), udhcpd,
                                                   iperf3 server, ping target
    root netns:    wlan1 (radio 1)  DHCP from udhcpd   wpa_supplicant -u + NetworkManager
                   hwsim0           monitor of the whole simulated air (captures)
    system bus:    dbus-daemon; nm-dispatcher is activated by it on demand

Guest files: the writable share is /lab in the guest and <boot dir>/guest on the host, with
logs/ (hostapd, wpa_supplicant, NetworkManager, iw-event, ...) and cap/ (pcapng). Boot dirs are
$CACHE/lab-logs/<timestamp>/boot<N>/.
"""

from __future__ import annotations

import atexit
import fcntl
import json
import re
import shlex
import shutil
import signal
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from . import build, measure
from .vm import BACKGROUND_SLOWDOWN, GUEST_SHARE, REPO, GuestProcess, LabError, VM, kill_stale_qemu

# Not ASCII on purpose: NetworkManager names a profile after its SSID, so users' profiles carry
# names like this one, and the daemon sends that name over D-Bus (status, signals).  13 bytes in
# UTF-8 (the SSID limit is 32 bytes).  Quote both with shlex.quote in every guest command.
SSID = "Café ☕ lab"
PSK = "scanguard-lab-psk"
AP_IF, STA_IF, AP2_IF = "wlan0", "wlan1", "wlan2"
AP_NS, AP2_NS = "apns", "apns2"
# Both APs are ports of one Ethernet segment (a bridge in each netns, joined by a veth pair), as
# in an office: the station keeps its address when it roams from one to the other.
AP_BRIDGE = "br0"
AP_ADDR = "192.168.77.1"
CONNECTION = SSID  # what `nmcli device wifi connect` would name the profile
SCANGUARD_NAME = "io.github.nm_scanguard.ScanGuard1"
KEEP_SESSIONS = 10  # older $CACHE/lab-logs/<timestamp> dirs are pruned
# The medium's noise floor and the signal the lab starts with (a strong link: association and
# the checks that need no scan are quick); `arm_weak_link` moves the station to WEAK_SIGNAL_DBM.
MEDIUM_NOISE_DBM = -91
STRONG_SIGNAL_DBM = -50
AP2_OFF_DBM = -100  # the second AP's radio is there but out of range until a check needs it
WEAK_SIGNAL_DBM = -72  # below NetworkManager's -70 dBm bgscan threshold: it scans every 30 s

WPAS = "fi.w1.wpa_supplicant1"

NM_CONF = """\
# nm-scanguard lab: NetworkManager without systemd, polkit, DNS or other devices.
[main]
plugins=keyfile
dhcp=internal
auth-polkit=false
dns=none

[keyfile]
unmanaged-devices=except:interface-name:wlan1

[device]
wifi.scan-rand-mac-address=no

[connectivity]
enabled=false

[logging]
level=INFO
domains=ALL,WIFI:DEBUG,SUPPLICANT:DEBUG
"""

# The lab's dbus-daemon uses Debian's system.conf (deny own="*" by default).  The project's
# policy lets only user 'scanguard' own the name; in the lab the daemon runs as root.
DBUS_POLICY = "io.github.nm_scanguard.ScanGuard1.conf"
DBUS_LAB_ROOT_POLICY = f"""\
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<!-- nm-scanguard lab only: the daemon runs as root here, not as user 'scanguard'. -->
<busconfig>
  <policy user="root">
    <allow own="{SCANGUARD_NAME}"/>
  </policy>
</busconfig>
"""

# Also logs the profile's user data NetworkManager ≥ 1.46 passes as CONNECTION_USER_* (none on
# 1.42): one line per variable, for check 11's comparison of the releases.
DISPATCHER_LOG = f"""\
#!/bin/sh
t=$(date +%s.%N)
# The user data first: the events line, which the checks wait for, marks the event complete.
env | grep '^CONNECTION_USER_' | sed "s|^|$t $1 $2 |" >>{GUEST_SHARE}/logs/dispatcher-user.log
echo "$t $1 $2 $CONNECTION_ID" >>{GUEST_SHARE}/logs/dispatcher-events.log
"""

# ssid2= in hex: `ssid=` would take the raw UTF-8 bytes too, but hex says exactly which bytes go
# on the air.  utf8_ssid=1 sets the "SSID is UTF-8" bit in the Extended Capabilities element.
PING_INTERVAL = 0.2  # seconds between the pings that run beside a transfer (ping -i)
AIR_RATES_MBIT = (6, 9)  # the 802.11g rates the APs offer (hostapd: in 100 kbit/s units)
# The APs announce a country (802.11d), as real APs do, and the guest's regulatory domain follows
# it.  Without one it stays at wireless-regdb's world domain "00", which allows passive scanning
# at 755-928 MHz: hwsim offers an 802.11ah (S1G) band there, so every scan also visited 34
# sub-GHz channels that no laptop's card has (72 channels, ≈22 s per scan under load, twice a
# real one).  CN's rules cover 2.4 and 5 GHz and neither S1G nor 6 GHz: the 26 channels of a
# 2.4/5 GHz card like the paper's (≈7 s per scan under load; the paper: ≈10 s).
COUNTRY = "CN"
SCAN_FREQS_MHZ = (2400, 5900)  # what a scan may cover under COUNTRY on hwsim (checked)
HOSTAPD_CONF = f"""\
interface={AP_IF}
bridge={AP_BRIDGE}
driver=nl80211
ctrl_interface=/run/lab/hostapd
ssid2={SSID.encode().hex()}
utf8_ssid=1
hw_mode=g
channel=6
# The lab's air (issue 9): 802.11g OFDM at 6 and 9 Mbit/s, so that the medium's airtime, not the
# TCG guest's CPU, limits throughput (≈6.5 Mbit/s of TCP, with CPU to spare: at 12 Mbit/s the
# channel ran ≈97 % busy and the CPU-starved seconds showed as dips); see tests/lab/README.md,
# "The air".
ieee80211n=0
supported_rates={' '.join(str(r * 10) for r in AIR_RATES_MBIT)}
basic_rates={AIR_RATES_MBIT[0] * 10}
wmm_enabled=1
wpa=2
wpa_key_mgmt=WPA-PSK
rsn_pairwise=CCMP
wpa_passphrase={PSK}
# A CPU-starved TCG guest answers EAPOL-Key frames late; hostapd's first retry comes after
# 100 ms and it gives up after 4 tries (4-way handshake timeout, seen on a loaded host).
wpa_pairwise_update_count=8
country_code={COUNTRY}
ieee80211d=1
"""

UDHCPD_CONF = f"""\
interface {AP_BRIDGE}
start 192.168.77.100
end 192.168.77.150
lease_file /run/lab/udhcpd.leases
option subnet 255.255.255.0
option lease 86400
# A default route through the AP: with NetworkManager's connectivity check off (Debian's
# default), NM then reports full connectivity, which GeoClue's Wi-Fi source waits for.
option router {AP_ADDR}
"""


_CON = shlex.quote(CONNECTION)


def wait_until(cond: Callable[[], object], timeout: float, what: str, interval: float = 0.5):
    """Poll `cond` until it returns something truthy; return that, or raise LabError."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise LabError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


@dataclass
class TrafficRun:
    """One iperf3 transfer with ping alongside. t0/t1 are guest times around the whole run."""
    direction: str
    t0: float
    t1: float
    iperf: measure.IperfResult
    ping: measure.PingResult
    wall_seconds: float
    t_end: float = 0.0  # guest time just after iperf3 exited (ping runs on for ≈2 s after it)


class Traffic:
    """A transfer in progress (see Lab.start_traffic); `wait()` gives its TrafficRun."""

    def __init__(self, lab: "Lab", direction: str, seconds: float, ping_interval: float | None,
                 netns: str | None = None, congestion: str | None = None):
        self.lab, self.direction, self.seconds = lab, direction, seconds
        self.started = time.monotonic()
        self.t0 = lab.guest_time()
        n = lab._next("traffic")
        self.ping = lab.start_ping(seconds + 2, ping_interval, name=f"ping-{direction}-{n}") \
            if ping_interval else None
        reverse = "-R " if direction == "download" else ""
        # -C: the congestion control of both ends' sockets (iperf3 hands it to the server,
        # which is the sender of a download); the result's sender_tcp_congestion says which ran
        algorithm = f"-C {shlex.quote(congestion)} " if congestion else ""
        where = f"ip netns exec {shlex.quote(netns)} " if netns else ""
        self.iperf = lab.spawn(f"exec {where}iperf3 -c {AP_ADDR} {reverse}{algorithm}"
                               f"-t {seconds:g} -i 1 -J --get-server-output",
                               name=f"iperf3-{direction}-{n}")

    def stop(self) -> None:
        """End the transfer early, its figures unread (a check that needs only the load)."""
        self.iperf.stop()
        if self.ping:
            self.ping.stop(signal.SIGINT)

    def wait(self) -> TrafficRun:
        rc = self.iperf.wait(self.seconds + 60)
        if rc is None:
            self.iperf.stop()
            raise LabError(f"iperf3 did not finish; see {self.iperf.host_log}")
        t_end = self.lab.guest_time()
        if self.ping:
            if self.ping.wait(30) is None:
                self.ping.stop(signal.SIGINT)
        t1 = self.lab.guest_time()
        text = self.iperf.output()
        try:
            result = measure.parse_iperf(text, self.direction)
        except ValueError as e:
            raise LabError(f"{e}; see {self.iperf.host_log}") from None
        ping = measure.parse_ping(self.ping.output()) if self.ping else measure.PingResult()
        return TrafficRun(self.direction, self.t0, t1, result, ping,
                          time.monotonic() - self.started, t_end)


class Capture:
    """dumpcap on hwsim0 (the whole simulated air) with LAB.md's filter; read with tshark."""

    def __init__(self, lab: "Lab", name: str):
        self.lab = lab
        self.guest_path = f"{GUEST_SHARE}/cap/{name}.pcapng"
        self.path = lab.vm.host_path(self.guest_path)
        self.proc = lab.spawn(f"exec dumpcap -q -i hwsim0 -f {shlex.quote(measure.CAPTURE_FILTER)}"
                              f" -w {self.guest_path}", name=f"dumpcap-{name}")
        wait_until(lambda: "Capturing on" in self.proc.output() or not self.proc.running(),
                   30, "dumpcap to start")
        if not self.proc.running():
            raise LabError(f"dumpcap failed: {self.proc.output()}")
        self.frames: list[measure.NullFrame] | None = None

    def stop(self) -> list[measure.NullFrame]:
        """Stop capturing; return the Null/QoS-Null frames of every station and AP."""
        if self.frames is None:
            self.proc.stop(signal.SIGINT, timeout=10)
            self.frames = measure.read_null_frames(self.path)
        return self.frames

    def pm1_nulls(self, t0: float = 0, t1: float = float("inf")) -> list[measure.NullFrame]:
        """The station's Null/QoS-Null frames with PM=1 (it told the AP it leaves the channel)."""
        sta = self.lab.sta_mac
        return [f for f in self.stop() if f.pm and f.ta == sta and t0 <= f.time <= t1]


def _take_vm_lock(cache: Path, say: Callable[[str], None]):
    """One lab VM at a time on this machine: two TCG guests on 2 cores starve each other and
    every timing in the checks goes wrong.  The lock dies with the process holding it."""
    f = open(cache / "lab-vm.lock", "w")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        say("another lab VM is running on this machine; waiting for it to finish")
        fcntl.flock(f, fcntl.LOCK_EX)
    return f


class LabStartError(LabError):
    """The lab could not be brought to a check's start state (Lab.establish): a lab error,
    reported as an error at the check's set-up, not a product failure."""


@dataclass(frozen=True)
class StartState:
    """What every check starts from (Lab.start_problems names each part that does not hold):
    the station associated to AP1 at STRONG_SIGNAL_DBM with its address and NetworkManager's
    device connected; the lab's profile as the lab made it (no user data, no permissions, no
    BSSID lock, autoconnect off); the second AP up and out of range only in the module that
    keeps it (`second_ap`), else gone; no daemon, client, transfer or capture of ours but the
    module's own daemon (`keep`, its pid), which must be running."""

    second_ap: bool = False
    keep: int | None = None


# The processes a check may start, by their command lines: the daemon and scanguardctl (hold,
# diagnose, monitor), a transfer's iperf3 client and ping, a capture.  The AP's iperf3 server
# (-s), the lab's own daemons and the dispatcher script's dbus-send to the daemon (NetworkManager
# runs it on its events; it ends within its 3 s timeout) do not match.
OURS = re.compile(r"-m nm_scanguard|iperf3 -c |^(\S*/)?ping |dumpcap ")


# start_problems' words for a medium left at another signal, which the medium alone mends.
SIGNAL_ONLY = ("the medium's signals", "the station reads")


def _ours(ps: str) -> dict[int, str]:
    """pid -> command line of the lines of `ps -eo pid=,args=` that are processes of ours."""
    procs = {}
    for line in ps.splitlines():
        pid, _, args = line.strip().partition(" ")
        if pid.isdigit() and OURS.search(args.strip()):
            procs[int(pid)] = args.strip()
    return procs


class Lab:
    """A running lab VM with the AP up and the station connected. Use Lab.start()."""

    INIT = "shell"  # guest boot mode, see vm.GUEST_INITS (systemd_lab.SystemdLab: "systemd")

    def __init__(self, vm: VM, session: Path, log: Callable[[str], None]):
        self.vm = vm
        self.session = session
        self._log = log
        self._t0 = time.monotonic()
        self._counters: dict[str, int] = {}
        self._copied: dict[str, str] = {}  # debug logs copied from the guest's tmpfs (debug_log)
        self.sta_mac = ""
        self.sta_addr = ""
        self.daemon: GuestProcess | None = None
        self.results: dict[str, dict] = {}  # summaries checks leave for later checks
        self._lock = None
        self.pidfile: Path | None = None
        self.medium_bin = Path()
        self.radio_macs: dict[str, str] = {}
        self.signals: dict[tuple[str, str], float] = {
            ("ap", "sta"): STRONG_SIGNAL_DBM, ("ap2", "sta"): AP2_OFF_DBM, ("ap", "ap2"): -60}
        self.ap2: GuestProcess | None = None
        self.medium: GuestProcess | None = None
        self._scopes: list[list[GuestProcess]] = []  # check_scope(): what each check started
        self.airtime_scale = 1.0  # 0 only for the medium's benchmark (frames take no air)

    # ---- lifecycle -----------------------------------------------------------------------
    @classmethod
    def start(cls, cache: Path | None = None, attempts: int = 2,
              log: Callable[[str], None] | None = None, background: bool = False) -> "Lab":
        """Boot the VM and bring up AP and station; a failed attempt is retried once.

        On final failure raise LabError naming the session dir with every boot's console,
        hostapd, wpa_supplicant and NetworkManager logs.

        `background`: a VM that runs beside the one lab VM of this machine, on the CPU time it
        leaves (QEMU at SCHED_IDLE), so it takes no part in the one-VM lock; its figures are no
        figures (the package VM, tests/lab/package_vm.py, checks behaviour, not timing).
        """
        cache = (cache or build.cache_dir()).resolve()
        t_start = time.monotonic()

        emit = log or (lambda line: print(line, file=sys.stderr, flush=True))

        def say(msg: str) -> None:
            emit(f"[lab {time.monotonic() - t_start:6.1f}s] {msg}")

        logs = cache / "lab-logs"
        logs.mkdir(parents=True, exist_ok=True)
        lock = None if background else _take_vm_lock(cache, say)
        if background:  # starved at times (see _up): one more try before giving up
            attempts = max(attempts, 3)
        pidfile = cache / ("lab-qemu-background.pid" if background else "lab-qemu.pid")
        kill_stale_qemu(pidfile, say)
        _prune(logs)
        session = logs / time.strftime("%Y%m%d-%H%M%S")
        while session.exists():
            session = session.with_name(session.name + "x")
        session.mkdir()
        say(f"preparing kernel and initramfs under {cache / 'kernel'}")
        image = build.prepare(cache, say)
        medium_bin = build.build_medium(cache)
        say(f"kernel {image.version} ready; guest root {image.guest_root} "
            f"({build.release()})")
        last_error: Exception | None = None
        for attempt in range(1, attempts + 1):
            rundir = session / f"boot{attempt}"
            rundir.mkdir()
            vm = VM(image, rundir, say, init=cls.INIT, background=background)
            lab = cls(vm, session, emit)
            lab._t0 = t_start
            lab._lock = lock
            lab.pidfile = pidfile
            lab.medium_bin = medium_bin
            atexit.register(vm.stop)
            try:
                # Beside the checks (SCHED_IDLE), a systemd guest took 116 s of guest time to
                # reach lab.target on Debian 13 and missed 120 s three times: the wait is
                # longer there, as _up's is.
                uptime = vm.boot(timeout=360 if background else 120)
                pidfile.write_text(str(vm.qemu.pid))
                say(f"guest agent ready (guest uptime {uptime:.1f} s, attempt {attempt})")
                lab._bring_up()
                say(f"lab ready: {STA_IF} {lab.sta_addr} associated to {SSID}; logs in {rundir}")
                return lab
            except Exception as e:  # any failure: keep its logs, then retry or give up
                last_error = e
                say(f"attempt {attempt} failed: {e}")
                lab.save_diagnostics("failed-start")
                vm.stop()
                atexit.unregister(vm.stop)
        if lock is not None:
            lock.close()
        raise LabError(f"lab did not start after {attempts} attempts: {last_error}\n"
                       f"console, hostapd, wpa_supplicant and NetworkManager logs: {session}")

    def stop(self) -> None:
        """Power off the guest and make sure QEMU is gone. Idempotent; never raises."""
        t = time.monotonic()
        try:
            self.vm.stop()
        finally:
            atexit.unregister(self.vm.stop)
            if self.pidfile is not None:
                self.pidfile.unlink(missing_ok=True)
            if self._lock is not None:
                self._lock.close()  # releases the flock
                self._lock = None
        self.say(f"VM stopped in {time.monotonic() - t:.1f} s; logs in {self.vm.rundir}")

    def __enter__(self) -> "Lab":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def say(self, msg: str) -> None:
        self._log(f"[lab {time.monotonic() - self._t0:6.1f}s] {msg}")

    def _next(self, kind: str) -> int:
        self._counters[kind] = self._counters.get(kind, 0) + 1
        return self._counters[kind]

    # ---- guest access (thin wrappers over VM) ---------------------------------------------
    def run(self, cmd: str, timeout: float = 60) -> tuple[int, str, str]:
        """Run a bash command in the guest: (rc, stdout, stderr)."""
        return self.vm.run(cmd, timeout)

    def check(self, cmd: str, timeout: float = 60) -> str:
        """Run a bash command in the guest; its stdout, or GuestCommandError if rc != 0."""
        return self.vm.check(cmd, timeout)

    def spawn(self, cmd: str, name: str, cwd: str | None = None,
              outlives_check: bool = False) -> GuestProcess:
        """Start a background guest process; output in /lab/logs/<name>.log (see .host_log).
        Inside check_scope() it is stopped when the check ends, unless `outlives_check` (a
        module's daemon, started again by one of the module's checks)."""
        proc = self.vm.spawn(cmd, name, cwd)
        if self._scopes and not outlives_check:
            self._scopes[-1].append(proc)
        return proc

    def read_file(self, path: str) -> bytes:
        return self.vm.read_file(path)

    def write_file(self, path: str, data: str | bytes, mode: int = 0o644) -> None:
        self.vm.write_file(path, data, mode)

    def fetch(self, guest_path: str, dest: Path | None = None) -> Path:
        """Copy a guest file to the host (default: into this boot's dir)."""
        return self.vm.fetch(guest_path, dest or self.vm.rundir / Path(guest_path).name)

    def guest_time(self) -> float:
        return self.vm.guest_time()

    def debug_log(self, name: str) -> str:
        """Where a daemon writes its debug log in the guest (its -f): the guest's tmpfs, copied
        to /lab/logs/<name>.log by one `tail -F` for the VM's life (a restarted daemon appends
        to the same file).  Written line by line to the 9p share instead, every line is a
        round trip to QEMU: a roam's 550 lines of wpa_supplicant -dd, and hostapd's beside
        them, made the move itself last longer (docs/roaming.md)."""
        path = f"/run/lab/logs/{name}.log"
        if name not in {p.name for p in self.vm.procs}:
            self.check(f"mkdir -p /run/lab/logs && touch {path}")
            self.spawn(f"exec tail -n +1 -F {path}", name=name, outlives_check=True)
        self._copied[name] = path
        return path

    def _copy_caught_up(self, name: str) -> None:
        """Wait until the host's copy of a debug log holds all the guest's had when asked, so
        that a read right after an event (or after checking for its absence) sees it."""
        rc, out, err = self.run(f"stat -c %s {self._copied[name]}", 30)
        if rc != 0 or not out.strip().isdigit():
            raise LabError(f"the guest's {name} log ({self._copied[name]}) cannot be read: {err}")
        size, copy = int(out), self.log_path(name)
        # A background VM (SCHED_IDLE) can get no CPU for a long while: see VM.run.
        wait_until(lambda: copy.exists() and copy.stat().st_size >= size,
                   30 * (BACKGROUND_SLOWDOWN if self.vm.background else 1),
                   f"the copy of the guest's {name} log to reach {size} bytes", interval=0.05)

    def log_path(self, name: str) -> Path:
        """Host path of a guest log: 'wpa_supplicant', 'NetworkManager', 'hostapd', 'iw-event'."""
        return self.vm.share / "logs" / f"{name}.log"

    def log_text(self, name: str) -> str:
        if name in self._copied:
            self._copy_caught_up(name)
        p = self.log_path(name)
        return p.read_text(errors="replace") if p.exists() else ""

    # ---- bring-up ------------------------------------------------------------------------
    def _step(self, what: str, fn: Callable[[], object]):
        t = time.monotonic()
        result = fn()
        self.say(f"{what} ({time.monotonic() - t:.1f} s)")
        return result

    def _bring_up(self) -> None:
        self.check("mkdir -p /run/lab /run/dbus /run/wpa_supplicant")
        # What systemd's /usr/lib/sysctl.d/50-default.conf sets on every Debian desktop (this
        # guest has no systemd): unprivileged ICMP echo, which `scanguardctl diagnose` uses.
        self.check("sysctl -q -w net.ipv4.ping_group_range='0 2147483647'")
        self._step("udev running, mac80211_hwsim loaded (wlan0, wlan1, hwsim0)", self._radios)
        self._step(f"medium registered with hwsim (AP-station signal {self.signals['ap', 'sta']}"
                   f" dBm)", self._medium)
        self._step(f"hostapd up (WPA2-PSK, ch 6, country {COUNTRY}), udhcpd and iperf3 server in"
                   f" netns apns", self._access_point)
        self._step("dbus-daemon, wpa_supplicant and NetworkManager up", self._station_daemons)
        self._step(f"connected: {STA_IF} associated with an address", self.connect)

    def _radios(self) -> None:
        self.check("/lib/systemd/systemd-udevd --daemon --resolve-names=never")
        self.check("modprobe mac80211_hwsim radios=3 && udevadm settle -t 60", 90)
        self.check("ip link show wlan0 && ip link show wlan1 && ip link show wlan2 && "
                   "ip link set hwsim0 up")
        self.sta_mac = self.check(f"cat /sys/class/net/{STA_IF}/address").strip().lower()
        # Every scan start/end of the station, from the kernel, with guest timestamps.
        self.spawn("exec stdbuf -oL iw event -t", name="iw-event")

    # ---- the air -------------------------------------------------------------------------
    def _medium_config(self) -> str:
        lines = ["# written by tests/lab/lab.py; the medium re-reads it on SIGHUP",
                 f"noise {MEDIUM_NOISE_DBM}", f"airtime_scale {self.airtime_scale}"]
        lines += [f"radio {name} {mac}" for name, mac in self.radio_macs.items()]
        lines += [f"signal {a} {b} {dbm}" for (a, b), dbm in self.signals.items()]
        return "\n".join(lines) + "\n"

    def _medium(self) -> None:
        """Start the lab's wireless medium (tests/lab/medium/medium.c) before any radio
        transmits: from then on every frame crosses it (airtime, per-link signal, errors)."""
        self.radio_macs = {}
        for name, iface in (("ap", AP_IF), ("sta", STA_IF), ("ap2", AP2_IF)):
            self.radio_macs[name] = self.check(
                f"cat /sys/class/net/{iface}/phy80211/macaddress").strip().lower()
        self.write_file("/run/lab/medium.conf", self._medium_config())
        self.medium = self.spawn(f"echo $$ >/run/lab/medium.pid; exec stdbuf -oL {shlex.quote(str(self.medium_bin))} "
                                 f"/run/lab/medium.conf", name="medium")
        wait_until(lambda: "registered with mac80211_hwsim" in self.log_text("medium"), 30,
                   "the medium to register with mac80211_hwsim")

    def set_signal(self, dbm: float, a: str = "ap", b: str = "sta") -> None:
        """The signal (dBm) at which radios a and b hear each other, both ways; the medium
        applies it from the next frame (beacons: within 0.1 s).  Radios: "ap", "sta", "ap2"."""
        self.set_signals({(a, b): dbm})

    def set_signals(self, pairs: dict[tuple[str, str], float]) -> None:
        """Several pairs' signals in one change of the medium (one reload: a fade of one AP
        and the rise of another reach the station at the same moment)."""
        for (a, b), dbm in pairs.items():
            self.signals[a, b] = dbm
            self.signals.pop((b, a), None)
        self.write_file("/run/lab/medium.conf", self._medium_config())
        self.check("kill -HUP $(cat /run/lab/medium.pid) && sleep 0.2")
        self.say("medium: " + ", ".join(f"{a}-{b} signal set to {dbm} dBm"
                                        for (a, b), dbm in pairs.items()))

    def medium_stats(self, t0: float = 0, t1: float = float("inf")) -> list[dict[str, float]]:
        """The medium's per-second statistics lines (guest time) in [t0, t1]."""
        return [s for s in measure.parse_medium_stats(self.log_text("medium"))
                if t0 <= s["t"] <= t1]

    @staticmethod
    def _ap_netns(ns: str, iface: str) -> str:
        """Shell lines: netns `ns` with the radio of `iface` in it, and a bridge hostapd adds
        the AP interface to (hostapd.conf `bridge=`)."""
        return f"""
            ip netns add {ns}
            phy=$(cat /sys/class/net/{iface}/phy80211/name)
            iw phy "$phy" set netns name {ns}
            ip -n {ns} link set lo up
            ip -n {ns} link add {AP_BRIDGE} type bridge
            ip -n {ns} link set {AP_BRIDGE} up
        """

    def _access_point(self) -> None:
        self.write_file("/run/lab/hostapd.conf", HOSTAPD_CONF)
        self.write_file("/run/lab/udhcpd.conf", UDHCPD_CONF)
        self.check("set -e\n" + self._ap_netns(AP_NS, AP_IF) + f"""
            ip -n {AP_NS} addr add {AP_ADDR}/24 dev {AP_BRIDGE}
            touch /run/lab/udhcpd.leases
        """)
        self.spawn(f"exec ip netns exec {AP_NS} hostapd -t -d -f {self.debug_log('hostapd')} "
                   f"/run/lab/hostapd.conf", name="hostapd-stdout")
        wait_until(lambda: "AP-ENABLED" in self.log_text("hostapd"), 60, "hostapd AP-ENABLED")
        # hostapd set the regulatory domain (all radios: one kernel) before enabling the AP.
        reg = self.check("iw reg get")
        if f"country {COUNTRY}:" not in reg:
            raise LabError(f"the regulatory domain is not {COUNTRY} after hostapd started "
                           f"(country_code={COUNTRY}); `iw reg get` says:\n{reg}")
        self.spawn(f"exec ip netns exec {AP_NS} busybox udhcpd -f /run/lab/udhcpd.conf",
                   name="udhcpd")
        self.spawn(f"exec ip netns exec {AP_NS} iperf3 -s -J -B {AP_ADDR}", name="iperf3-server")

    def start_second_ap(self, channel: int = 1) -> None:
        """A second AP of the same network (SSID, PSK) on another channel, in its own netns,
        bridged to the first one's segment; out of range (AP2_OFF_DBM) until set_signal."""
        conf = HOSTAPD_CONF.replace(f"interface={AP_IF}", f"interface={AP2_IF}").replace(
            "ctrl_interface=/run/lab/hostapd", "ctrl_interface=/run/lab/hostapd2").replace(
            "channel=6", f"channel={channel}")
        self.write_file("/run/lab/hostapd2.conf", conf)
        self.check("set -e\n" + self._ap_netns(AP2_NS, AP2_IF) + f"""
            ip -n {AP_NS} link add ap2link type veth peer name ap1link netns {AP2_NS}
            ip -n {AP_NS} link set ap2link master {AP_BRIDGE} up
            ip -n {AP2_NS} link set ap1link master {AP_BRIDGE} up
        """)
        # hostapd -f appends: a restart's AP-ENABLED is the one after those already logged.
        enabled = self.log_text("hostapd2").count("AP-ENABLED")
        self.ap2 = self.spawn(f"exec ip netns exec {AP2_NS} hostapd -t -d -f "
                              f"{self.debug_log('hostapd2')} /run/lab/hostapd2.conf",
                              name="hostapd2-stdout")
        wait_until(lambda: self.log_text("hostapd2").count("AP-ENABLED") > enabled, 60,
                   "hostapd2 AP-ENABLED")
        self.say(f"second AP up on channel {channel} (netns {AP2_NS}, BSSID "
                 f"{self.radio_macs['ap2']})")

    def second_ap_up(self) -> bool:
        """Is the second AP's namespace there (whoever started it)?"""
        return self.run(f"ip netns list | grep -qw {AP2_NS}", 30)[0] == 0

    def stop_second_ap(self) -> None:
        """hostapd2 stopped, its namespace deleted and its radio back in the root namespace
        (`ip netns del` returns it asynchronously: a start right after would not find it)."""
        if self.ap2 is not None:
            self.ap2.stop()
            self.ap2 = None
        if self.second_ap_up():
            self.check(f"pkill -f '[h]ostapd .*hostapd2[.]conf' || true; ip netns del {AP2_NS}; "
                       f"ip -n {AP_NS} link del ap2link || true")
            wait_until(lambda: self.run(f"test -e /sys/class/net/{AP2_IF}", 30)[0] == 0, 30,
                       f"{AP2_IF} back in the root namespace", interval=0.5)

    def bssid(self) -> str:
        """The BSSID the station is associated with ('' if none), from the kernel."""
        out = self.run(f"iw dev {STA_IF} link", 30)[1]
        m = next((line.split()[2] for line in out.splitlines() if line.startswith("Connected to")),
                 "")
        return m.lower()

    def _install_scanguard(self) -> None:
        """The product's D-Bus policy and dispatcher script, as the package installs them
        (plus a lab-only policy letting root own the name), before dbus and NM start."""
        self.write_file(f"/usr/share/dbus-1/system.d/{DBUS_POLICY}",
                        (REPO / "systemd" / DBUS_POLICY).read_text())
        self.write_file("/etc/dbus-1/system.d/scanguard-lab-root.conf", DBUS_LAB_ROOT_POLICY)
        self.write_file("/etc/NetworkManager/dispatcher.d/90-scanguard",
                        (REPO / "dispatcher.d" / "90-scanguard").read_text(), mode=0o755)
        self.check("chown root:root /etc/NetworkManager/dispatcher.d/90-scanguard")

    def _station_daemons(self) -> None:
        self._install_scanguard()
        self.check("dbus-daemon --system --fork")
        self.spawn(f"exec wpa_supplicant -u -t -dd -f {self.debug_log('wpa_supplicant')} "
                   f"-O /run/wpa_supplicant", name="wpa_supplicant-stdout")
        wait_until(lambda: self._bus_has(WPAS), 60, "wpa_supplicant on the system bus")
        self.write_file("/etc/NetworkManager/conf.d/99-scanguard-lab.conf", NM_CONF)
        # Proves nm-dispatcher runs (dbus-activated, no systemd): one line per event.
        self.write_file("/etc/NetworkManager/dispatcher.d/50-scanguard-lab-log", DISPATCHER_LOG,
                        mode=0o755)
        self.spawn("exec NetworkManager --debug", name="NetworkManager")
        wait_until(lambda: self.run(f"nmcli -t -f DEVICE,STATE device | grep -qx "
                                    f"'{STA_IF}:disconnected'", 30)[0] == 0,
                   60, f"NetworkManager managing {STA_IF}", interval=1)

    def _bus_has(self, name: str) -> bool:
        rc, out, _ = self.run(f"busctl call org.freedesktop.DBus /org/freedesktop/DBus "
                              f"org.freedesktop.DBus NameHasOwner s {name}", 30)
        return rc == 0 and out.strip() == "b true"

    def connect(self) -> None:
        """Create (once) and activate the NM profile; wait for an IPv4 address and a ping."""
        if CONNECTION not in self.check("nmcli -t -f NAME connection show").splitlines():
            # autoconnect off: activations happen when a test asks, not when NM feels like it.
            self.check(f"nmcli connection add type wifi ifname {STA_IF} con-name {_CON} "
                       f"ssid {shlex.quote(SSID)} connection.autoconnect no wifi-sec.key-mgmt "
                       f"wpa-psk wifi-sec.psk {PSK} ipv6.method disabled")
        # NM refuses to activate a profile whose SSID is not in its scan list yet.  One SSID
        # a line (it has spaces); -t escapes only ':' and '\\', which it does not have.
        wait_until(lambda: SSID in self.run(f"nmcli -t -f SSID device wifi list ifname {STA_IF}"
                                            f" --rescan auto", 30)[1].splitlines(),
                   60, f"{SSID!r} in NetworkManager's scan list", interval=2)
        self._up()
        self.sta_addr = wait_until(self.station_address, 30, f"IPv4 address on {STA_IF}")
        # One answer within 45 s: a VM starved beside the checks lost both of two pings sent
        # right after the lease (the trixie package VM, 2026-11-23).
        wait_until(lambda: self.run(f"ping -c 1 -W 3 {AP_ADDR}", 15)[0] == 0, 45,
                   f"the AP ({AP_ADDR}) to answer ping", interval=1)

    def _up(self) -> None:
        """`nmcli connection up`, with the PSK in a passwd-file: after a 4-way handshake timeout
        NetworkManager asks for the secrets again, and nmcli without one fails the activation
        ("Passwords or encryption keys are required"), seen on a loaded host."""
        self.write_file("/run/lab/nmcli-secrets", f"802-11-wireless-security.psk:{PSK}\n", 0o600)
        # A background VM (SCHED_IDLE beside the checks) can be starved for seconds while they
        # load the CPU: mac80211's association timer then fires before hostapd answers, and
        # NetworkManager retries ("association took too long", seen on the trixie guest).
        wait = 180 if self.vm.background else 60
        self.check(f"nmcli --wait {wait} connection up id {_CON} passwd-file "
                   f"/run/lab/nmcli-secrets", wait + 30)

    def ensure_connected(self) -> bool:
        """Connect again if the station lost its link (and NetworkManager gave up on it);
        True if it had to."""
        if self.station_address() and self.network_path() != "/":
            return False
        self.say(f"{STA_IF} is not connected; connecting again")
        self.connect()
        return True

    def reconnect(self) -> None:
        """`nmcli connection up` again: NM creates a new wpa_supplicant network object."""
        self._up()
        self.sta_addr = wait_until(self.station_address, 30, f"IPv4 address on {STA_IF}")

    def disconnect(self) -> None:
        """`nmcli connection down` of the lab's profile."""
        self.check(f"nmcli connection down id {_CON}", 60)

    def active_connections(self) -> list[tuple[str, str]]:
        """(profile name, device) of every active NetworkManager connection."""
        out = self.check("nmcli -t -f NAME,DEVICE connection show --active")
        # -t escapes ':' in values as '\\:'; split on the last unescaped one.
        return [tuple(line.rsplit(":", 1)) for line in out.splitlines() if ":" in line]

    def name_owner(self, name: str = SCANGUARD_NAME) -> str | None:
        """The unique bus name (":1.42") owning `name` on the system bus, None if nobody does.

        dbus-daemon never hands out a unique name twice: the same owner at two moments means
        the same connection held the name all along, with no drop and reconnect in between.
        """
        rc, out, _ = self.run(f"busctl --system --json=short call org.freedesktop.DBus "
                              f"/org/freedesktop/DBus org.freedesktop.DBus GetNameOwner s {name}",
                              30)
        return json.loads(out)["data"][0] if rc == 0 else None

    def station_address(self) -> str:
        out = self.run(f"ip -4 -o addr show dev {STA_IF}")[1].split()
        return out[out.index("inet") + 1].split("/")[0] if "inet" in out else ""

    # ---- wpa_supplicant over D-Bus ---------------------------------------------------------
    def _busctl_json(self, args: str) -> dict:
        return json.loads(self.check(f"busctl --system --json=short {args}", 30))

    def interface_path(self) -> str:
        return self._busctl_json(f"call {WPAS} /fi/w1/wpa_supplicant1 {WPAS} GetInterface "
                                 f"s {STA_IF}")["data"][0]

    def network_path(self) -> str:
        """Object path of the current wpa_supplicant network ('/' when none)."""
        return self._busctl_json(f"get-property {WPAS} {self.interface_path()} "
                                 f"{WPAS}.Interface CurrentNetwork")["data"]

    def network_properties(self, path: str | None = None) -> dict[str, object]:
        props = self._busctl_json(f"get-property {WPAS} {path or self.network_path()} "
                                  f"{WPAS}.Network Properties")["data"]
        return {k: v["data"] for k, v in props.items()}

    def bgscan(self, path: str | None = None) -> str | None:
        """The current network's bgscan as wpa_supplicant has it, without its quotes.

        None when the network has no bgscan key (wpa_supplicant returns only set keys).
        """
        value = self.network_properties(path).get("bgscan")
        return None if value is None else str(value).strip('"')

    def set_bgscan(self, value: str, path: str | None = None) -> None:
        """Set bgscan on the current network over D-Bus (wpa_supplicant adds the quotes)."""
        self.check(f"busctl --system set-property {WPAS} {path or self.network_path()} "
                   f"{WPAS}.Network Properties 'a{{sv}}' 1 bgscan s {shlex.quote(value)}", 30)

    def signal(self) -> int:
        """RSSI of the current AP in dBm (wpa_supplicant SignalPoll)."""
        doc = self._busctl_json(f"call {WPAS} {self.interface_path()} {WPAS}.Interface "
                                f"SignalPoll")
        props = doc["data"][0]
        if props.get("type") == "a{sv}":  # SignalPoll's reply is a variant holding the dict
            props = props["data"]
        return int(props["rssi"]["data"])

    def wait_signal(self, dbm: int, timeout: float = 15, tolerance: int = 3) -> int:
        """Wait until SignalPoll reports `dbm` ± tolerance; returns the reading."""
        return wait_until(lambda: (lambda s: s if abs(s - dbm) <= tolerance else None)(
            self.signal()), timeout, f"signal {dbm} dBm", interval=1)

    # ---- measurements ----------------------------------------------------------------------
    def scans(self, t0: float = 0, t1: float = float("inf")) -> list[measure.Scan]:
        """The station's scans (kernel `iw event`) that overlap [t0, t1] in guest time."""
        return [s for s in measure.parse_scans(self.log_text("iw-event"), STA_IF)
                if s.overlaps(t0, t1)]

    def dispatcher_events(self) -> list[tuple[float, str, str]]:
        """(guest time, interface, action) of every nm-dispatcher event so far."""
        events = []
        for line in self.log_text("dispatcher-events").splitlines():
            parts = line.split()
            if len(parts) >= 3:
                events.append((float(parts[0]), parts[1], parts[2]))
        return events

    def dispatcher_user_data(self, t0: float = 0) -> list[tuple[float, str, str, str]]:
        """(guest time, interface, action, NAME=VALUE) of the CONNECTION_USER_* variables the
        dispatcher scripts got since t0 (NetworkManager ≥ 1.46 passes the profile's user data)."""
        out = []
        for line in self.log_text("dispatcher-user").splitlines():
            parts = line.split(" ", 3)
            if len(parts) == 4 and float(parts[0]) >= t0:
                out.append((float(parts[0]), parts[1], parts[2], parts[3]))
        return out

    def wpa_events(self, needle: str, t0: float = 0, t1: float = float("inf")) -> list[float]:
        """Times of wpa_supplicant debug-log lines containing `needle`."""
        return [t for t in measure.wpa_log_events(self.log_text("wpa_supplicant"), needle)
                if t0 <= t <= t1]

    def bgscan_requests(self, t0: float = 0, t1: float = float("inf")) -> list[float]:
        """Times wpa_supplicant's bgscan module asked for a scan (from its debug log)."""
        return [t for t in measure.wpa_log_events(self.log_text("wpa_supplicant"),
                                                  "bgscan simple: Request a background scan")
                if t0 <= t <= t1]

    def start_capture(self, name: str | None = None) -> Capture:
        return Capture(self, name or f"cap{self._next('capture')}")

    def start_ping(self, seconds: float, interval: float = 0.2,
                   name: str | None = None) -> GuestProcess:
        """ping -D the AP from the station; parse with measure.parse_ping(proc.output())."""
        return self.spawn(f"exec ping -D -n -i {interval:g} -w {seconds:g} {AP_ADDR}",
                          name=name or f"ping-{self._next('ping')}")

    def ping(self, seconds: float, interval: float = 0.2) -> measure.PingResult:
        proc = self.start_ping(seconds, interval)
        if proc.wait(seconds + 30) is None:
            proc.stop(signal.SIGINT)
        return measure.parse_ping(proc.output())

    def start_traffic(self, direction: str, seconds: float,
                      ping_interval: float | None = PING_INTERVAL, netns: str | None = None,
                      congestion: str | None = None) -> Traffic:
        """Start iperf3 ('upload' = station -> AP, 'download' = AP -> station) plus ping; the
        station's iperf3 in network namespace `netns` if given, with TCP congestion control
        `congestion` at both ends if given (the kernel's default otherwise)."""
        if direction not in ("upload", "download"):
            raise ValueError(direction)
        return Traffic(self, direction, seconds, ping_interval, netns, congestion)

    def upload(self, seconds: float, ping_interval: float | None = PING_INTERVAL) -> TrafficRun:
        return self.start_traffic("upload", seconds, ping_interval).wait()

    def download(self, seconds: float, ping_interval: float | None = PING_INTERVAL) -> TrafficRun:
        return self.start_traffic("download", seconds, ping_interval).wait()

    # ---- the product under test ------------------------------------------------------------
    def start_daemon(self, config_text: str, args: str = "-v",
                     outlives_check: bool = False) -> GuestProcess:
        """Run nm-scanguard from this checkout on the guest's system bus, as root.

        Its output is in /lab/logs/scanguard-<n>.log (`.host_log` on the returned process).
        """
        n = self._next("daemon")
        conf = f"/run/lab/scanguard-{n}.conf"
        self.write_file(conf, config_text)
        self.daemon = self.spawn(f"exec /usr/bin/python3 -m nm_scanguard --config {conf} {args}",
                                 name=f"scanguard-{n}", cwd=str(REPO), outlives_check=outlives_check)
        return self.daemon

    # ---- a check's start state, and what a check leaves ----------------------------------------
    @contextmanager
    def check_scope(self) -> Iterator[list[GuestProcess]]:
        """Everything spawned inside (daemons, scanguardctl holds and diagnose, transfers,
        captures, a second AP) is stopped on the way out, whatever the outcome: SIGTERM, so a
        daemon restores what it suspended, SIGKILL after 15 s.  Yields the list it keeps."""
        started: list[GuestProcess] = []
        ap2_before = self.ap2
        self._scopes.append(started)
        try:
            yield started
        finally:
            self._scopes.remove(started)
            left = []
            for proc in reversed(started):
                try:
                    if proc.running():
                        left.append(proc.name)
                        proc.stop(signal.SIGTERM, timeout=15)
                except Exception as e:  # the next check's start state will name what is left
                    self.say(f"could not stop {proc.name}: {e}")
            if self.ap2 is not None and self.ap2 is not ap2_before:
                left.append("the second AP")
                self.stop_second_ap()
            if left:
                self.say("stopped what the check left running: " + ", ".join(left))

    def our_processes(self) -> dict[int, str]:
        """pid -> command line of every guest process of ours (OURS) that is running."""
        return _ours(self.check("ps -eo pid=,args=", 30))

    def start_problems(self, want: StartState) -> list[str]:
        """Each part of `want` that does not hold now, in words; [] when the check may start.
        One guest command reads it all (a check pays ≈1-2 s under TCG for this)."""
        fields = "connection.permissions,connection.autoconnect,802-11-wireless.bssid"
        out = self.check(f"""
            echo '@ps'; ps -eo pid=,args=
            echo '@netns'; ip netns list
            echo '@link'; iw dev {STA_IF} link
            echo '@addr'; ip -4 -o addr show dev {STA_IF}
            echo '@nm'; nmcli -g GENERAL.STATE device show {STA_IF}
            echo '@profile'; nmcli -g {fields} connection show id {_CON} || echo '(missing)'
            echo '@user'; awk '/^\\[/ {{u = ($0 == "[user]")}} u && /=/ {{print FILENAME; nextfile}}' \\
                /etc/NetworkManager/system-connections/* /run/NetworkManager/system-connections/* \\
                2>/dev/null
            echo '@signal'; wpa_cli -p /run/wpa_supplicant -i {STA_IF} signal_poll
            true""", 60)
        part: dict[str, list[str]] = {}
        key = ""
        for line in out.splitlines():
            if line.startswith("@") and line[1:].isalpha():
                key = line[1:]
                part[key] = []
            elif key:
                part[key].append(line)
        problems = []
        procs = _ours("\n".join(part.get("ps", [])))
        stray = {pid: args for pid, args in procs.items() if pid != want.keep}
        if stray:
            problems.append("processes of ours still running: "
                            + "; ".join(f"{pid} {args[:80]}" for pid, args in sorted(stray.items())))
        if want.keep is not None and want.keep not in procs:
            problems.append(f"the module's daemon (pid {want.keep}) is not running")
        up = any(line.split()[:1] == [AP2_NS] for line in part.get("netns", []))
        if up != want.second_ap:
            problems.append("the second AP is " + ("up" if up else "not up"))
        defaults = {("ap", "sta"): STRONG_SIGNAL_DBM, ("ap2", "sta"): AP2_OFF_DBM}
        off = {f"{a}-{b}": self.signals.get((a, b)) for (a, b), dbm in defaults.items()
               if self.signals.get((a, b)) != dbm}
        if off:
            problems.append(f"the medium's signals are {off}, not {STRONG_SIGNAL_DBM}/{AP2_OFF_DBM} dBm")
        ap1 = self.radio_macs.get("ap", "")
        bssid = next((line.split()[2].lower() for line in part.get("link", [])
                      if line.startswith("Connected to")), "")
        if bssid != ap1:
            problems.append(f"the station is on {bssid or 'no AP'}, not AP1 {ap1}")
        if not any(" inet " in line for line in part.get("addr", [])):
            problems.append(f"{STA_IF} has no IPv4 address")
        state = " ".join(part.get("nm", [])).strip()
        if not state.startswith("100"):
            problems.append(f"NetworkManager's {STA_IF} is {state or 'unknown'}, not 100 (connected)")
        rssi = next((line.split("=", 1)[1] for line in part.get("signal", [])
                     if line.startswith("RSSI=")), "")
        if bssid == ap1 and not (rssi.lstrip("-").isdigit() and abs(int(rssi) - STRONG_SIGNAL_DBM) <= 3):
            problems.append(f"the station reads {rssi or 'no'} dBm, not {STRONG_SIGNAL_DBM}")
        profile = part.get("profile", [])
        if profile == ["(missing)"]:
            problems.append(f"the lab's profile {CONNECTION!r} is missing")
        else:
            values = dict(zip(fields.split(","), (profile + ["", "", ""])[:3]))
            problems += [f"profile {name} is {value!r}" for name, value in values.items()
                         if value != {"connection.autoconnect": "no"}.get(name, "")]
        if any(line.strip() for line in part.get("user", [])):
            problems.append("a profile carries user data (keys in its [user] section): "
                            + " ".join(part["user"]))
        return problems

    def bring_to_start(self, want: StartState) -> None:
        """Do what it takes to reach `want` (start_problems says whether it did): stop our
        leftover processes (SIGTERM first: a daemon restores bgscan), the second AP as wanted,
        the medium at its defaults, the station back on AP1 (a reconnect with the second AP
        down: with it up NetworkManager may pick it from wpa_supplicant's cache)."""
        stray = [pid for pid in self.our_processes() if pid != want.keep]
        if stray:
            pids = " ".join(map(str, stray))
            self.run(f"kill -TERM {pids}; for i in $(seq 30); do kill -0 {pids} 2>/dev/null "
                     f"|| break; sleep 0.5; done; kill -KILL {pids} 2>/dev/null", 60)
        self.run(f"nmcli connection modify id {_CON} connection.permissions '' "
                 f"802-11-wireless.bssid ''", 30)
        # User data (a check's `config set` not undone): nmcli cannot remove it; the keyfile
        # without its [user] section, loaded again, can.
        self.run("""for f in /etc/NetworkManager/system-connections/*; do
                      grep -q '^\\[user\\]' "$f" || continue
                      awk '/^\\[/ {u = ($0 == "[user]")} !u' "$f" >"$f.new" && mv "$f.new" "$f"
                      chmod 600 "$f"; nmcli connection load "$f"
                    done""", 60)
        if self.bssid() != self.radio_macs.get("ap") or not self.station_address():
            self.stop_second_ap()
        elif not want.second_ap:
            self.stop_second_ap()
        self.set_signals({("ap", "sta"): STRONG_SIGNAL_DBM, ("ap2", "sta"): AP2_OFF_DBM})
        if self.bssid() != self.radio_macs.get("ap"):
            self.reconnect()
        self.ensure_connected()
        wait_until(lambda: self.bssid() == self.radio_macs.get("ap"), 60, "the station on AP1",
                   interval=1)
        if want.second_ap and not self.second_ap_up():
            self.start_second_ap(channel=1)
        # A station that lost its link while the second AP came up is connected again here.
        if self.ensure_connected():
            wait_until(lambda: self.bssid() == self.radio_macs.get("ap"), 60,
                       "the station on AP1", interval=1)
        self.wait_signal(STRONG_SIGNAL_DBM, timeout=30)

    def establish(self, want: StartState, name: str) -> None:
        """Bring the lab to `want` for check `name`, or raise LabStartError naming what does
        not hold.  At most two attempts; each one's guest view is kept beside the logs."""
        problems = self.start_problems(want)
        if problems and all(p.startswith(SIGNAL_ONLY) for p in problems):
            # A check that moved the station to the weak signal (arm_weak_link) left nothing
            # else astray: the medium back to its defaults is all it takes, no attempt counted.
            self.set_signals({("ap", "sta"): STRONG_SIGNAL_DBM, ("ap2", "sta"): AP2_OFF_DBM})
            try:
                self.wait_signal(STRONG_SIGNAL_DBM, timeout=30)
            except LabError:  # the attempts below name what still does not hold
                problems = self.start_problems(want)
            else:
                # Everything else held at the reading above, and the station now reads the
                # strong signal: verified, without a second reading (≈3 s a check under TCG).
                return
        for attempt in (1, 2):
            if not problems:
                return
            self.say(f"{name}: start state, attempt {attempt}: {'; '.join(problems)}")
            self.save_diagnostics(f"{name}-start-attempt{attempt}")
            try:
                self.bring_to_start(want)
            except Exception as e:  # named below with what still does not hold
                self.say(f"{name}: bringing the lab to its start state failed: {e}")
            problems = self.start_problems(want)
        if problems:
            raise LabStartError(f"lab error, not a product failure: {name} cannot start from its "
                                f"state after two attempts: {'; '.join(problems)}.  Guest views: "
                                f"{self.vm.rundir}/diagnostics-{name}-start-attempt*.txt")

    # ---- diagnostics -----------------------------------------------------------------------
    def save_diagnostics(self, reason: str) -> Path | None:
        """Write the guest's view (dmesg, links, NM, processes) next to the logs; never raises."""
        path = self.vm.rundir / f"diagnostics-{reason}.txt"
        try:
            out = self.vm.check(f"""
                for c in 'dmesg' 'ip -d addr' 'ip netns exec {AP_NS} ip addr' 'iw dev' \
                         'ip netns exec {AP_NS} iw dev' 'nmcli -f all device' \
                         'nmcli connection show' 'ps -eo pid,ppid,stat,etime,args'; do
                    echo "===== $c"; $c 2>&1
                done""", 60)
            path.write_text(out)
        except Exception as e:
            path.write_text(f"could not collect diagnostics: {e}\n")
        return path


def _prune(logs: Path) -> None:
    sessions = sorted(p for p in logs.iterdir() if p.is_dir())
    for old in sessions[:-KEEP_SESSIONS]:
        shutil.rmtree(old, ignore_errors=True)
