"""Resource benchmark: the daemon's RSS and CPU over a period idle and a period sampling.

    make bench            # 60 s each
    python3 -m tests.bench.bench_daemon --seconds 10

Runs the real daemon process on a private system bus with the NetworkManager and
wpa_supplicant mocks, and a veth pair carrying ~20 Mbit/s while "sampling".  Prints figures;
it asserts nothing (resource goals live here, not in timed tests).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nm_scanguard.dbuslib import BusType, MessageBus
from tests.conftest import MockSupplicant, start_private_bus, stop_process
from tests.dbus.conftest import Link, Peers

REPO = Path(__file__).resolve().parents[2]
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime + stime


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def measure(pid: int, seconds: float) -> tuple[float, int, int]:
    """CPU % over the period, RSS at the end and the maximum RSS seen (KiB)."""
    c0, t0, peak = cpu_seconds(pid), time.monotonic(), 0
    while time.monotonic() - t0 < seconds:
        peak = max(peak, rss_kib(pid))
        await asyncio.sleep(0.5)
    cpu = (cpu_seconds(pid) - c0) / (time.monotonic() - t0) * 100
    return cpu, rss_kib(pid), peak


async def main(seconds: float, sample_interval: float) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="scanguard-bench-"))
    bus_daemon = start_private_bus()
    os.environ["DBUS_SYSTEM_BUS_ADDRESS"] = bus_daemon.address
    wpa = MockSupplicant(bus_daemon.address, tmp / "wpa.log")
    link = Link()
    bus = await MessageBus(bus_type=BusType.SYSTEM).connect()
    peers = Peers(bus, link.ifname, wpa)
    daemon = None
    try:
        await peers.setup(activate=False)
        conf = tmp / "scanguard.conf"
        conf.write_text(f"[scanguard]\nsample_interval = {sample_interval}\n")
        daemon = subprocess.Popen(
            [sys.executable, "-m", "nm_scanguard", "-c", str(conf), "--state-dir", str(tmp / "state")],
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=open(tmp / "daemon.log", "w"))
        await asyncio.sleep(3)  # start-up (imports, bus connection) is not what we measure
        print(f"daemon started: RSS {rss_kib(daemon.pid) / 1024:.1f} MiB "
              f"(dbus library: {os.environ.get('SCANGUARD_DBUS_LIB', 'default')})")
        cpu, rss, peak = await measure(daemon.pid, seconds)
        print(f"idle, no activated Wi-Fi, {seconds:g} s:      CPU {cpu:.2f} %  RSS {rss / 1024:.1f} MiB "
              f"(max {peak / 1024:.1f})")
        await peers.activate()
        link.send(mbit=20)
        await asyncio.sleep(3)
        cpu, rss, peak = await measure(daemon.pid, seconds)
        state = "bgscan suspended" if (await peers.sets()) else "NOT engaged"
        print(f"sampling every {sample_interval:g} s at ~20 Mbit/s, {seconds:g} s: CPU {cpu:.2f} %  "
              f"RSS {rss / 1024:.1f} MiB (max {peak / 1024:.1f}); {state}")
        link.stop()
    finally:
        if daemon is not None:
            stop_process(daemon)
        link.remove()
        peers.close()
        bus.disconnect()
        wpa.close()
        bus_daemon.stop()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="length of each period (default 60)")
    ap.add_argument("--sample-interval", type=float, default=1.0, help="daemon sample_interval")
    args = ap.parse_args()
    asyncio.run(main(args.seconds, args.sample_interval))
