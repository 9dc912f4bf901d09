"""Resource benchmark: the daemon's RSS and CPU over a period idle and a period sampling.

    make bench            # 60 s each
    python3 -m tests.bench.bench_daemon --seconds 10

Runs the real daemon process on a private system bus with the NetworkManager and
wpa_supplicant mocks, and a veth pair carrying ~20 Mbit/s while "sampling".  Prints figures;
it asserts nothing (resource goals live here, not in timed tests).  Also prints what a bare
import of each part costs, and the daemon's thread count: systemd/scanguard.service sizes
MemoryMax= and TasksMax= from these.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nm_scanguard.dbuslib import BusType, MessageBus
from tests.conftest import MockSupplicant, start_private_bus
from tests.peers import DaemonProcess, Link, NetworkManagerMock, Peers

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def threads(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/task"))


IMPORTS = {
    "python3 alone": "pass",
    "asyncio": "import asyncio",
    "nm_scanguard.dbuslib (the D-Bus library)": "import nm_scanguard.dbuslib",
    "nm_scanguard.netlink (pyroute2)": "import nm_scanguard.netlink",
    "nm_scanguard.service (the whole daemon)": "import nm_scanguard.service",
}


def import_rss() -> None:
    """RSS of a fresh interpreter after one import: what each way of reading counters costs."""
    probe = ("import re; {}; "
             "print(re.search(r'VmRSS:\\s+(\\d+)', open('/proc/self/status').read())[1])")
    root = Path(__file__).resolve().parents[2]
    for label, stmt in IMPORTS.items():
        out = subprocess.run([sys.executable, "-c", probe.format(stmt)], cwd=root,
                             capture_output=True, text=True)
        figure = (f"{int(out.stdout) / 1024:.1f} MiB" if out.returncode == 0
                  else f"failed: {out.stderr.strip().splitlines()[-1:]}")
        print(f"bare import, {label + ':':40s} RSS {figure}")


async def measure(pid: int, seconds: float) -> tuple[float, int, int, int]:
    """CPU % over the period, RSS at the end, the maximum RSS seen (KiB), the most threads."""
    c0, t0, peak, tasks = cpu_seconds(pid), time.monotonic(), 0, 0
    while time.monotonic() - t0 < seconds:
        peak, tasks = max(peak, rss_kib(pid)), max(tasks, threads(pid))
        await asyncio.sleep(0.5)
    cpu = (cpu_seconds(pid) - c0) / (time.monotonic() - t0) * 100
    return cpu, rss_kib(pid), peak, tasks


async def main(seconds: float, sample_interval: float) -> None:
    import_rss()
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
        daemon = DaemonProcess(bus_daemon.address, tmp,
                               f"[scanguard]\nsample_interval = {sample_interval}\n", verbose=False)
        cleanup.callback(daemon.stop)
        pid = daemon.start().process.pid
        await asyncio.sleep(3)  # start-up (imports, bus connection) is not what we measure
        print(f"daemon started: RSS {rss_kib(pid) / 1024:.1f} MiB "
              f"(dbus library: {os.environ.get('SCANGUARD_DBUS_LIB', 'default')})")
        cpu, rss, peak, tasks = await measure(pid, seconds)
        print(f"idle, no activated Wi-Fi, {seconds:g} s:      CPU {cpu:.2f} %  RSS {rss / 1024:.1f} MiB "
              f"(max {peak / 1024:.1f}); threads {tasks}")
        await peers.activate()
        link.send(mbit=20)
        await asyncio.sleep(3)
        cpu, rss, peak, tasks = await measure(pid, seconds)
        state = "bgscan suspended" if (await peers.sets()) else "NOT engaged"
        print(f"sampling every {sample_interval:g} s at ~20 Mbit/s, {seconds:g} s: CPU {cpu:.2f} %  "
              f"RSS {rss / 1024:.1f} MiB (max {peak / 1024:.1f}); threads {tasks}; {state}")
        link.stop()

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="length of each period (default 60)")
    ap.add_argument("--sample-interval", type=float, default=1.0, help="daemon sample_interval")
    args = ap.parse_args()
    asyncio.run(main(args.seconds, args.sample_interval))
