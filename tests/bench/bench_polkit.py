"""What the polkit rule 50-nm-scanguard.rules adds to polkit checks, against the real polkitd.

    python3 -m tests.bench.bench_polkit            # 200 checks per case
    python3 -m tests.bench.bench_polkit -n 50

polkitd runs rules on every authorisation check, one check at a time, so whatever our rule
costs is paid by every program on the system that asks polkit anything.  This starts the real
polkitd (as root: a private bus and a private mount namespace, see tests/access/realpolkit.py)
once without and once with our rule, and times CheckAuthorization over D-Bus for a process of
user nobody: an unrelated action (our rule must return at once) and wifi.scan (our rule spawns
its helper), with no daemon, while it watches (the helper allows and starts busctl in the
background to report who asked) and while it defers (refuses, and reports the same way).  A
test-only rule after ours says yes to wifi.scan (an active session).  The rule reuses an
answer for 250 ms, so the checks of one case are spaced 300 ms apart: each wifi.scan check
runs the helper.  Prints median and p95 in milliseconds.

Then a flood: 8 connections asking about wifi.scan as fast as polkitd answers for 5 s,
without our rule, with it while deferring, and with it while deferring for a daemon that
never answers its reports: checks per second, helper reports, most reporting busctl
processes alive at once.  Asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time

from nm_scanguard.dbuslib import MessageBus, Variant
from nm_scanguard.peers.bus import call
from nm_scanguard.names import POLKIT
from tests.access.realpolkit import (REUSE_S, SCAN, UNRELATED, RealPolkit, StandIn, available,
                                     flood, process_start)


async def timings(instances: list[RealPolkit], actions: list[str], n: int,
                  subject_pid: int) -> dict[tuple[int, str], tuple[list[float], bool]]:
    """n rounds; each round asks every instance about every action once, in turn, so that
    whatever else the machine does at that moment weighs on every case alike."""
    buses = [await MessageBus(bus_address=p.bus.address).connect() for p in instances]
    subject = ["unix-process", {"pid": Variant("u", subject_pid),
                                "start-time": Variant("t", int(process_start(subject_pid))),
                                "uid": Variant("i", 65534)}]
    out: dict[tuple[int, str], tuple[list[float], bool]] = {}
    try:
        for _ in range(n):
            for i, bus in enumerate(buses):
                for action in actions:
                    t0 = time.perf_counter()
                    ((authorized, _challenge, _details),) = await call(
                        bus, *POLKIT, "CheckAuthorization", "(sa{sv})sa{ss}us",
                        [subject, action, {}, 0, ""])
                    ms = (time.perf_counter() - t0) * 1000
                    out.setdefault((i, action), ([], False))[0].append(ms)
                    out[(i, action)] = (out[(i, action)][0], bool(authorized))
            await asyncio.sleep(REUSE_S + 0.05)  # each round's wifi.scan runs the helper
    finally:
        for bus in buses:
            bus.disconnect()
    return out


def summary(ms: list[float]) -> tuple[float, float]:
    ms = sorted(ms)
    return statistics.median(ms), ms[min(len(ms) - 1, int(round(0.95 * (len(ms) - 1))))]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=200, help="checks per case (default %(default)s)")
    args = p.parse_args()
    why = available()
    if why:
        print(f"bench_polkit: cannot run the real polkitd here: {why}")
        return 0
    sleeper = subprocess.Popen(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                                "sleep", "3600"])
    rows: list[tuple[str, float, float, bool]] = []
    # idle: no daemon (no state file); watching: the daemon runs and does not defer (the
    # helper allows and reports in the background); deferring: it refuses and reports.
    cases = (("without our rule", False, None), ("with our rule, no daemon", True, None),
             ("with our rule, watching", True, "watch"), ("with our rule, deferring", True, "defer"))
    instances: list[RealPolkit] = []
    try:
        time.sleep(0.2)
        for _label, with_rule, mode in cases:
            instances.append(RealPolkit(with_rule=with_rule))
            if mode:
                instances[-1].defer(mode=mode)
        actions = [UNRELATED, SCAN]
        asyncio.run(timings(instances, actions, 5, sleeper.pid))  # warm up
        results = asyncio.run(timings(instances, actions, args.n, sleeper.pid))
        for action, name in ((UNRELATED, "unrelated action"), (SCAN, "wifi.scan")):
            for i, (label, _, _) in enumerate(cases):
                ms, ok = results[(i, action)]
                med, p95 = summary(ms)
                rows.append((f"{name}, {label}", med, p95, ok))
    finally:
        for p in instances:
            p.stop()
        sleeper.kill()
        sleeper.wait()
    print(f"polkit CheckAuthorization latency, real polkitd, {args.n} checks per case "
          f"(subject: a process of user nobody; cases interleaved; {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.1f})")
    print(f"{'case':48} {'median ms':>10} {'p95 ms':>8}  answer")
    for name, med, p95, ok in rows:
        print(f"{name:48} {med:10.2f} {p95:8.2f}  {'yes' if ok else 'no'}")
    base = {r[0].split(",")[0]: r for r in rows if r[0].endswith("without our rule")}
    print("added by our rule (median, p95):")
    for name, med, p95, _ in rows:
        kind = name.split(",")[0]
        if name.endswith("without our rule"):
            continue
        print(f"  {name:46} {med - base[kind][1]:+7.2f} {p95 - base[kind][2]:+7.2f} ms")
    print(f"flood: 8 connections asking about wifi.scan for 5 s (load {os.getloadavg()[0]:.1f})")
    print(f"{'case':48} {'checks/s':>9} {'reports':>8} {'busctl at once':>15}")
    for label, with_rule, hang in (("without our rule", False, False),
                                   ("with our rule, deferring", True, False),
                                   ("with our rule, deferring, daemon hung", True, True)):
        seen, reports = asyncio.run(flooded(with_rule, hang))
        print(f"{label:48} {seen['checks'] / seen['seconds']:9.0f} {reports:8d} "
              f"{seen['most reporters']:15d}")
    return 0


async def flooded(with_rule: bool, hang: bool) -> tuple[dict, int]:
    polkitd = RealPolkit(with_rule=with_rule)
    stand_in = None
    try:
        stand_in = await StandIn(hang=hang).start(polkitd.bus.address)
        polkitd.defer()
        seen = await flood(polkitd, 5.0)
        await asyncio.sleep(0.5)
        return seen, len(stand_in.reports)
    finally:
        if stand_in is not None:
            stand_in.stop()
        polkitd.stop()


if __name__ == "__main__":
    sys.exit(main())
