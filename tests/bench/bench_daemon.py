"""Resource benchmark: the daemon's memory (RSS and PSS), CPU and start-up time.

    make bench                                   # 60 s each period, this checkout
    make bench BENCH_ARGS='--against HEAD~3'     # the same run also measures another revision
    python3 -m tests.bench.bench_daemon --seconds 10 --against main

Runs the real daemon process on a private system bus with the NetworkManager and
wpa_supplicant mocks, and a veth pair carrying ~20 Mbit/s while "sampling".  Prints figures;
it asserts nothing (resource goals live here, not in timed tests).  Also prints what a bare
import of each part costs, and the daemon's thread count: systemd/scanguard.service sizes
MemoryMax= and TasksMax= from these.

- RSS counts every shared page the process maps (libpython, libc, ...) in full; PSS
  (/proc/PID/smaps_rollup) divides each shared page by the number of processes mapping it, so it
  is nearer to what the daemon really costs on a machine with other Python programs running.
- Start-up: the time from the process's start (fork, before the interpreter loads) to the
  moment it owns its bus name (the bus's NameOwnerChanged signal, as systemd waits for a
  Type=dbus service), the median of several starts; beside it the floor: a program that loads
  only the interpreter, asyncio and the D-Bus library and owns a name (FLOOR), timed in the same
  rotation, so that the difference is the daemon's own start-up.
- `--against REV` measures the daemon of git revision REV too (its nm_scanguard/ exported with
  `git archive` into a temporary directory; the mocks and this bench stay the checkout's), in
  the same run and on the same machine, and prints both side by side.  Nothing else prints a
  "before" figure: figures from another run or machine are not comparable.
- Each daemon runs from a byte-compiled copy of its nm_scanguard/, as an installed package does.
- On Debian 13: `tests/debian_roots/trixie.py bench --seconds 60 --against REV` runs this in the
  trixie root (tests/debian_roots/README.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from nm_scanguard.dbuslib import LIBRARY, BusType, Message, MessageBus
from nm_scanguard.peers.bus import add_match, name_has_owner
from nm_scanguard.names import BUS_NAME
from tests.conftest import MockSupplicant, start_private_bus
from tests.peers import DaemonProcess, Link, NetworkManagerMock, Peers, env_for

TICK = os.sysconf("SC_CLK_TCK")
REPO = Path(__file__).resolve().parents[2]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


def _kib(path: str, key: str) -> int:
    """The `key:` line of a /proc file of "key: value kB" lines, in KiB (0 if absent)."""
    with open(path, encoding="ascii") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def rss_kib(pid: int) -> int:
    return _kib(f"/proc/{pid}/status", "VmRSS")


def pss_kib(pid: int) -> int:
    return _kib(f"/proc/{pid}/smaps_rollup", "Pss")


def threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


IMPORTS = {
    "python3 alone": "pass",
    "asyncio": "import asyncio",
    "nm_scanguard.dbuslib (the D-Bus library)": "import nm_scanguard.dbuslib",
    "netlink (interface counters)": "import nm_scanguard.peers.netlink",
    "service (the whole daemon)": "import nm_scanguard.daemon.service",
}
# Where a revision from before the layers (issue 33) has the same module.
FLAT = {"import nm_scanguard.peers.netlink": "import nm_scanguard.netlink",
        "import nm_scanguard.daemon.service": "import nm_scanguard.service"}
PROBE = """\
import sys, time
t = time.perf_counter()
{}
t = time.perf_counter() - t
status = open('/proc/self/status').read()
rss = int(status.split('VmRSS:')[1].split()[0])
pss = int(open('/proc/self/smaps_rollup').read().split('Pss:')[1].split()[0])
gi = sorted(m for m in ('gi', 'dbus_fast', 'dbus_next', 'pyroute2') if m in sys.modules)
print(rss, pss, len(sys.modules), round(t * 1000, 1), ','.join(gi) or '-')
"""


@dataclass(frozen=True)
class Daemon:
    """One version of the daemon to measure: a label and the directory nm_scanguard/ is in."""

    label: str
    source: Path


def import_costs(daemon: Daemon) -> None:
    """RSS, PSS, module count and import time of a fresh interpreter after one import."""
    for label, stmt in IMPORTS.items():
        if stmt in FLAT and not (daemon.source / "nm_scanguard" / "peers").is_dir():
            stmt = FLAT[stmt]
        out = subprocess.run([sys.executable, "-c", PROBE.format(stmt)], cwd=daemon.source,
                             env=dict(os.environ, PYTHONPATH=str(daemon.source)),
                             capture_output=True, text=True, check=False)
        if out.returncode == 0:
            rss, pss, modules, ms, heavy = out.stdout.split()
            figure = (f"RSS {int(rss) / 1024:5.1f} MiB  PSS {int(pss) / 1024:5.1f} MiB  "
                      f"{int(modules):4d} modules  {float(ms):6.1f} ms  (loaded: {heavy})")
        else:
            figure = f"failed: {out.stderr.strip().splitlines()[-1:]}"
        print(f"  [{daemon.label}] bare import, {label + ':':42s} {figure}")


class SourceDaemon(DaemonProcess):
    """DaemonProcess, run from `source` (a checkout or an exported revision)."""

    def __init__(self, source: Path, address: str, workdir: Path, config: str) -> None:
        super().__init__(address, workdir, config, verbose=False)
        self.source = source

    def start(self) -> SourceDaemon:
        env = env_for(self.address)
        env["PYTHONPATH"] = str(self.source)
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "nm_scanguard", "-c", str(self.config),
                 "--state-dir", str(self.state_dir)],
                stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.source)
        return self


# The least any daemon built like scanguardd needs to own a bus name: the interpreter, asyncio,
# argparse, configparser, logging and the D-Bus library scanguardd uses (OpenSSL and GObject kept
# out as scanguardd keeps them), connected and asking for a name.  Timed in the same rotation as
# the daemons, it shows how much of their start-up is their own.
FLOOR_NAME = "io.github.nm_scanguard.BenchFloor"
FLOOR = """
import sys
for name in ("ssl", "_ssl", "_hashlib", "gi"):
    sys.modules.setdefault(name, None)
import argparse, asyncio, configparser, importlib, logging
aio = importlib.import_module(sys.argv[1] + ".aio")
constants = importlib.import_module(sys.argv[1] + ".constants")

async def main():
    bus = await aio.MessageBus(bus_type=constants.BusType.SYSTEM).connect()
    await bus.request_name(sys.argv[2])
    await asyncio.Event().wait()

asyncio.run(main())
"""
FLOOR_LABEL = "floor (python3, asyncio, D-Bus)"


class FloorProcess:
    """The FLOOR program, started and stopped as a DaemonProcess is."""

    def __init__(self, address: str, workdir: Path) -> None:
        self.env = env_for(address)
        self.log_path = workdir / "floor.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> FloorProcess:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen([sys.executable, "-c", FLOOR, LIBRARY, FLOOR_NAME],
                                            stdout=log, stderr=subprocess.STDOUT, env=self.env)
        return self

    def returncode(self) -> int | None:
        return self.process.poll() if self.process else None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(10)


async def start_to_name(daemon: Daemon | None, address: str, bus: MessageBus,
                        workdir: Path) -> float:
    """Seconds from one start of `daemon` (None: the floor) to its owning its bus name (stopped
    after).  The bench learns it from the bus's NameOwnerChanged signal, as systemd does for a
    Type=dbus service: asking the bus every few milliseconds would take CPU from the start it
    measures (two cores: the daemon, the bus, this process)."""
    name = BUS_NAME if daemon else FLOOR_NAME
    label = daemon.label if daemon else FLOOR_LABEL
    workdir.mkdir()
    owned = asyncio.Event()

    def on_message(msg: Message) -> None:
        if msg.member == "NameOwnerChanged" and msg.body and msg.body[0] == name and msg.body[2]:
            owned.set()

    rule = f"type='signal',sender='org.freedesktop.DBus',member='NameOwnerChanged',arg0='{name}'"
    await add_match(bus, rule)
    bus.add_message_handler(on_message)
    proc: SourceDaemon | FloorProcess = (SourceDaemon(daemon.source, address, workdir, "")
                                         if daemon else FloorProcess(address, workdir))
    try:
        t0 = time.monotonic()
        proc.start()
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(owned.wait(), 0.5)
            if owned.is_set():
                seconds = time.monotonic() - t0
                break
            if proc.returncode() is not None or time.monotonic() - t0 > 30:
                raise RuntimeError(f"{label}: did not take {name}:\n{proc.log()}")
    finally:
        bus.remove_message_handler(on_message)
        proc.stop()
    while await name_has_owner(bus, name):  # the next start must find the name free
        await asyncio.sleep(0.01)
    return seconds


async def start_times(daemons: list[Daemon], starts: int) -> dict[str, list[float]]:
    """`starts` timed starts of each daemon, taking turns (the order alternating each round),
    so that whatever else loads the machine meanwhile weighs on every daemon alike."""
    times: dict[str, list[float]] = {d.label: [] for d in daemons}
    times[FLOOR_LABEL] = []
    tmp = Path(tempfile.mkdtemp(prefix="scanguard-bench-start-"))
    with contextlib.ExitStack() as cleanup:
        bus_daemon = start_private_bus()
        cleanup.callback(bus_daemon.stop)
        os.environ["DBUS_SYSTEM_BUS_ADDRESS"] = bus_daemon.address
        wpa = MockSupplicant(bus_daemon.address, tmp / "wpa.log")
        cleanup.callback(wpa.close)
        nm = NetworkManagerMock(bus_daemon.address, tmp / "nm.log")
        cleanup.callback(nm.close)
        bus = await MessageBus(bus_type=BusType.SYSTEM).connect()
        cleanup.callback(bus.disconnect)
        link = Link()
        cleanup.callback(link.remove)
        await Peers(bus, link.ifname, wpa, nm).setup(activate=False)
        turn: list[Daemon | None] = [*daemons, None]
        for n in range(starts):
            for i, d in enumerate(turn if n % 2 == 0 else turn[::-1]):
                workdir = tmp / f"start-{n}-{i}"
                label = d.label if d else FLOOR_LABEL
                times[label].append(await start_to_name(d, bus_daemon.address, bus, workdir))
    for label, runs in times.items():
        t = sorted(runs)
        print(f"  [{label}] start to owning its bus name: median {statistics.median(t) * 1000:.0f} "
              f"ms, fastest {t[0] * 1000:.0f} ms, of {starts} starts "
              f"({', '.join(f'{x * 1000:.0f}' for x in runs)} ms)", flush=True)
    return times


@dataclass
class Period:
    cpu: float  # percent of one core
    rss: int  # KiB, at the end
    rss_max: int
    pss: int
    pss_max: int
    threads: int

    def line(self) -> str:
        return (f"CPU {self.cpu:.2f} %  RSS {self.rss / 1024:.1f} MiB (max {self.rss_max / 1024:.1f})"
                f"  PSS {self.pss / 1024:.1f} MiB (max {self.pss_max / 1024:.1f});"
                f" threads {self.threads}")


async def measure(pid: int, seconds: float) -> Period:
    """CPU % over the period; RSS and PSS at the end and the most seen; the most threads."""
    c0, t0 = cpu_seconds(pid), time.monotonic()
    rss_max = pss_max = tasks = 0
    while time.monotonic() - t0 < seconds:
        rss_max, pss_max = max(rss_max, rss_kib(pid)), max(pss_max, pss_kib(pid))
        tasks = max(tasks, threads(pid))
        await asyncio.sleep(0.5)
    cpu = (cpu_seconds(pid) - c0) / (time.monotonic() - t0) * 100
    return Period(cpu, rss_kib(pid), rss_max, pss_kib(pid), pss_max, tasks)


@dataclass
class Result:
    start: list[float]
    idle: Period
    sampling: Period
    engaged: bool


async def run(daemon: Daemon, seconds: float, sample_interval: float,
              start: list[float]) -> Result:
    print(f"==> {daemon.label}: memory and CPU", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="scanguard-bench-"))
    with contextlib.ExitStack() as cleanup:  # everything started is stopped, in reverse order
        bus_daemon = start_private_bus()
        cleanup.callback(bus_daemon.stop)
        os.environ["DBUS_SYSTEM_BUS_ADDRESS"] = bus_daemon.address
        wpa = MockSupplicant(bus_daemon.address, tmp / "wpa.log")
        cleanup.callback(wpa.close)
        nm = NetworkManagerMock(bus_daemon.address, tmp / "nm.log")
        cleanup.callback(nm.close)
        bus = await MessageBus(bus_type=BusType.SYSTEM).connect()
        cleanup.callback(bus.disconnect)
        link = Link()
        cleanup.callback(link.remove)
        peers = Peers(bus, link.ifname, wpa, nm)
        await peers.setup(activate=False)
        proc = SourceDaemon(daemon.source, bus_daemon.address, tmp,
                            f"[scanguard]\nsample_interval = {sample_interval}\n")
        cleanup.callback(proc.stop)
        pid = proc.start().process.pid  # type: ignore[union-attr]
        await asyncio.sleep(3)  # start-up (imports, bus connection) is not what we measure here
        idle = await measure(pid, seconds)
        print(f"  [{daemon.label}] idle, no activated Wi-Fi, {seconds:g} s: {idle.line()}",
              flush=True)
        await peers.activate()
        link.send(mbit=20)
        await asyncio.sleep(3)
        sampling = await measure(pid, seconds)
        engaged = bool(await peers.sets())
        print(f"  [{daemon.label}] sampling every {sample_interval:g} s at ~20 Mbit/s, "
              f"{seconds:g} s: {sampling.line()}; "
              f"{'bgscan suspended' if engaged else 'NOT engaged'}", flush=True)
        link.stop()
        if proc.returncode() is not None:
            raise RuntimeError(f"{daemon.label}: the daemon ended:\n{proc.log()}")
    return Result(start, idle, sampling, engaged)


def export(revision: str | None, into: Path) -> Path:
    """nm_scanguard/ of git revision `revision` (None: this checkout's working tree), written
    under `into` and byte-compiled, as an installed package is: every daemon measured starts
    from .pyc files, also where PYTHONDONTWRITEBYTECODE is set or the checkout is read-only
    (the trixie root).  Returns the directory to put on PYTHONPATH."""
    target = into / (revision or "checkout")
    target.mkdir()
    if revision is None:
        shutil.copytree(REPO / "nm_scanguard", target / "nm_scanguard",
                        ignore=shutil.ignore_patterns("__pycache__"))
    else:
        archive = subprocess.run(["git", "archive", "--format=tar", revision, "nm_scanguard"],
                                 cwd=REPO, capture_output=True, check=True).stdout
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            if hasattr(tarfile, "data_filter"):
                tar.extractall(target, filter="data")
            else:  # Python before 3.11.4: our own repository's archive, trusted
                tar.extractall(target)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(target)], check=True)
    return target


def summary(results: dict[str, Result], floor: list[float]) -> None:
    print("==> summary (same run, same machine)"
          f"; dbus library asked for: {os.environ.get('SCANGUARD_DBUS_LIB', 'default')}")
    print(f"  {'':28s} {'start→name ms':>14s} {'(fastest)':>9s} {'RSS sampling':>13s} "
          f"{'PSS sampling':>13s} {'RSS idle':>9s} {'PSS idle':>9s}")
    print(f"  {FLOOR_LABEL:28s} {statistics.median(floor) * 1000:14.0f} {min(floor) * 1000:9.0f}")
    for label, r in results.items():
        print(f"  {label:28s} {statistics.median(r.start) * 1000:14.0f} {min(r.start) * 1000:9.0f} "
              f"{r.sampling.rss / 1024:9.1f} MiB {r.sampling.pss / 1024:9.1f} MiB "
              f"{r.idle.rss / 1024:5.1f} MiB {r.idle.pss / 1024:5.1f} MiB")


async def main(seconds: float, sample_interval: float, starts: int, against: str | None) -> None:
    with tempfile.TemporaryDirectory(prefix="scanguard-bench-src-") as tmp:
        daemons = [Daemon("this checkout", export(None, Path(tmp)))]
        if against:
            commit = subprocess.run(["git", "rev-parse", "--short", against], cwd=REPO,
                                    capture_output=True, text=True, check=True).stdout.strip()
            daemons.append(Daemon(f"revision {commit}", export(commit, Path(tmp))))
        for d in daemons:
            print(f"==> {d.label}: nm_scanguard from {d.source}", flush=True)
            import_costs(d)
        print("==> start-up", flush=True)
        start = await start_times(daemons, starts)
        results = {d.label: await run(d, seconds, sample_interval, start[d.label])
                   for d in daemons}
    summary(results, start[FLOOR_LABEL])


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="length of each period (default 60)")
    ap.add_argument("--sample-interval", type=float, default=1.0, help="daemon sample_interval")
    ap.add_argument("--starts", type=int, default=7,
                    help="starts timed to owning the bus name; the median is printed (default 7)")
    ap.add_argument("--against", metavar="REV",
                    help="also measure the daemon of this git revision, in the same run")
    args = ap.parse_args()
    asyncio.run(main(args.seconds, args.sample_interval, args.starts, args.against))
