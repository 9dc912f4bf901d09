"""Hold floods on a default-deny bus: caps that cannot be raced, other clients still served,
bgscan back when the flood's connections close.

Finding (issue 8): six connections × 64 holds with 256-character texts made ActiveHolds
≈256 KB; the daemon stopped reading its socket with bgscan off; and 120 concurrent Holds on
one connection gave 120 holds because the cap was checked before the polkit await.
"""

from __future__ import annotations

import asyncio
import os

from nm_scanguard.daemon.api.holds import MAX_PER_CALLER, MAX_PER_UID, MAX_TEXT_BYTES
from nm_scanguard.names import ACTION_HOLD, ERROR_TOO_MANY_HOLDS
from tests.api.harness import BGSCAN, api_call, error_of, named_holds, props
from tests.conftest import assert_eventually

QUOTED = f'"{BGSCAN}"'
# The longest text allowed: 256 bytes of UTF-8, non-ASCII (☕ is 3 bytes, é 2).
LONG = ("Café ☕ " * 40).encode()[:MAX_TEXT_BYTES].decode("utf-8", "ignore")


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


async def test_a_hold_flood_is_capped_and_others_are_still_served(strict_scenario, nobody, polkit):
    polkit.allow(ACTION_HOLD)
    clients = [nobody() for _ in range(6)]
    taken, refused = [], []
    for n in range(64):
        for c in clients:
            reply = c.call("Hold", "sss", [LONG, LONG, ""])
            (taken if "body" in reply else refused).append(reply)
    # The flood from one user gets at most its per-uid cap, each connection at most its own.
    assert len(taken) == MAX_PER_UID
    assert {r["error"] for r in refused} == {ERROR_TOO_MANY_HOLDS}
    assert any("user 65534 already has" in r["text"] for r in refused)
    assert all(len(r["text"]) < 300 for r in refused)

    # Another client is still answered at once, and may still hold (the total cap is not hit).
    start = asyncio.get_running_loop().time()
    p = await props(strict_scenario.bus)
    assert len(p["ActiveHolds"]) == MAX_PER_UID
    assert all(h["reason"] == LONG for h in await named_holds(strict_scenario.bus))
    reply = await api_call(strict_scenario.bus, "Hold", "sss", ["Café ☕ root", "", ""])
    assert error_of(reply) is None, reply.body
    assert asyncio.get_running_loop().time() - start < 5
    await assert_eventually(lambda: strict_scenario.bgscan() == '""', message="bgscan suspended")
    (root_cookie,) = reply.body
    hwm = rss_kib(strict_scenario.daemon.process.pid)
    print(f"\n[figure] hold flood: {len(taken)} + 1 holds, {len(refused)} refused, "
          f"daemon peak RSS {hwm / 1024:.1f} MiB")

    # The flood's connections close: their holds go; root's keeps bgscan off until released.
    for c in clients:
        c.close()
    await assert_eventually(lambda: _holds(strict_scenario, 1), message="flood's holds gone")
    assert strict_scenario.bgscan() == '""'
    reply = await api_call(strict_scenario.bus, "Release", "u", [root_cookie])
    assert error_of(reply) is None, reply.body
    await assert_eventually(lambda: strict_scenario.bgscan() == QUOTED, message="bgscan restored")


async def _holds(scenario, n: int) -> bool:
    return len((await props(scenario.bus))["ActiveHolds"]) == n


async def test_concurrent_holds_on_one_connection_cannot_race_the_cap(strict_scenario):
    """120 Hold calls in flight at once on one connection: exactly the per-caller cap succeed."""
    replies = await asyncio.gather(*(api_call(strict_scenario.bus, "Hold", "sss",
                                              [f"race {n} Café ☕", "", ""]) for n in range(120)))
    ok = [r for r in replies if error_of(r) is None]
    errors = {error_of(r)[0] for r in replies if error_of(r) is not None}
    assert len(ok) == MAX_PER_CALLER
    assert errors == {ERROR_TOO_MANY_HOLDS}
    assert len((await props(strict_scenario.bus))["ActiveHolds"]) == MAX_PER_CALLER
    for r in ok:
        assert error_of(await api_call(strict_scenario.bus, "Release", "u", r.body)) is None
    await assert_eventually(lambda: strict_scenario.bgscan() == QUOTED, message="bgscan restored")
    assert os.path.exists(f"/proc/{strict_scenario.daemon.process.pid}")
