"""The daemon's guards by interface (daemon/guard_set.py): what passes from a guard that stops to
the one that follows it on the same interface.  Guards of test_guard's fakes."""

from __future__ import annotations

import pytest

from nm_scanguard.daemon.guard_set import Guards
from nm_scanguard.peers.nm import WifiDevice
from tests.unit.daemon.guard import test_guard as G

parts = G.parts  # the fixtures of test_guard


def _guard(parts) -> G.Guard:
    dev = WifiDevice(path="/org/freedesktop/NetworkManager/Devices/1", ifname="wlan0",
                     state=100, connection_id="Café ☕", connection_uuid="u-1")
    return parts["listener"].guard(dev, G.SETTINGS, parts)


@pytest.mark.parametrize("restarted", [False, True])
async def test_the_guard_that_follows_carries_on_our_running_scan(parts, tmp_path, restarted):
    """A re-activation stops the guard and starts another on the interface: the scan of ours
    the first left running stays ours (never aborted), unless wpa_supplicant restarted in
    between, which ended it."""
    guards = Guards(parts["journal"], lambda coro, guard=None: coro.close())
    first = _guard(parts)
    await guards.start(first, held=False)
    await first.roaming.ask_for_scan()
    first.roaming.scanning_changed(True)
    await guards.stop("wlan0")
    if restarted:
        guards.supplicant_restarted()
    second = _guard(parts)
    await guards.start(second, held=True)
    assert second.roaming.is_ours() is not restarted
    second.roaming.scanning_changed(False)
    assert not second.roaming.is_ours()


async def test_a_guard_with_no_scan_of_ours_running_hands_none_on(parts):
    guards = Guards(parts["journal"], lambda coro, guard=None: coro.close())
    first = _guard(parts)
    await guards.start(first, held=False)
    await first.roaming.ask_for_scan()
    first.roaming.scanning_changed(True)
    first.roaming.scanning_changed(False)  # ours ended
    await guards.stop("wlan0")
    second = _guard(parts)
    await guards.start(second, held=False)
    assert not second.roaming.is_ours()
