"""The access points a profile's network is known to have (daemon/guard/candidates.py): pure."""

from __future__ import annotations

import pytest

from nm_scanguard.daemon.guard.candidates import MAX_CHANNELS, PER_PROFILE, PROFILES, Candidates
from nm_scanguard.peers.supplicant import Bss

SSIDS = [b"home", "Café ☕".encode()]


def bss(n: int, ssid: bytes, freq: int = 2412, signal: int = -60, security: str = "wpa-psk") -> Bss:
    return Bss(f"/i/BSSs/{n}", f"02:00:00:00:{n // 256:02x}:{n % 256:02x}", ssid, freq, signal,
               security)


@pytest.mark.parametrize("ssid", SSIDS)
def test_only_the_same_ssid_and_security_are_the_network(ssid):
    c = Candidates()
    current = bss(1, ssid, 2412, -80)
    seen = [current, bss(2, ssid, 5180, -50), bss(3, b"neighbour", 2437, -40),
            bss(4, ssid, 2462, -45, security="open")]
    assert c.learn("u-1", current, seen, 10.0) == 2
    assert [o.bssid for o in c.others("u-1", current.bssid)] == [seen[1].bssid]
    assert c.others("u-2", current.bssid) == []  # another profile knows nothing


def test_kept_after_wpa_supplicant_forgets_them_and_updated_when_seen_again():
    c = Candidates()
    current, other = bss(1, b"home"), bss(2, b"home", 5180, -55)
    c.learn("u-1", current, [current, other], 10.0)
    c.learn("u-1", current, [current], 400.0)  # wpa_supplicant's list expired: kept here
    assert [o.signal for o in c.others("u-1", current.bssid)] == [-55]
    c.learn("u-1", current, [current, other._replace(signal=-48)], 500.0)
    (o,) = c.others("u-1", current.bssid)
    assert (o.signal, o.seen) == (-48, 500.0)


def test_strongest_first_and_the_current_one_is_not_a_candidate():
    c = Candidates()
    current = bss(1, b"home", 2412, -80)
    others = [bss(2, b"home", 5180, -70), bss(3, b"home", 2437, -50), bss(4, b"home", 5500, -60)]
    c.learn("u-1", current, others, 1.0)
    assert [o.signal for o in c.others("u-1", current.bssid)] == [-50, -60, -70]
    assert c.channels("u-1", current.bssid, 2412) == [2412, 2437, 5500, 5180]


def test_at_most_max_channels_with_the_current_one_first_and_no_repeats():
    c = Candidates()
    current = bss(0, b"home", 2412, -80)
    others = [bss(n, b"home", 5000 + 20 * (n % 8), -40 - n) for n in range(1, 15)]
    c.learn("u-1", current, others, 1.0)
    channels = c.channels("u-1", current.bssid, 2412)
    assert channels[0] == 2412 and len(channels) == MAX_CHANNELS == len(set(channels))


def test_bounded_per_profile_the_least_recently_seen_go_first():
    c = Candidates()
    current = bss(0, b"home")
    for n in range(1, PER_PROFILE + 5):
        c.learn("u-1", current, [bss(n, b"home", 5180)], float(n))
    known = c.known("u-1")
    assert len(known) == PER_PROFILE
    assert bss(1, b"home").bssid not in {k.bssid for k in known}
    assert current.bssid in {k.bssid for k in known}  # seen at every look


def test_bounded_in_profiles_the_least_recently_used_go_first():
    c = Candidates()
    for n in range(PROFILES + 1):
        c.learn(f"u-{n}", bss(1, b"home"), [bss(2, b"home")], float(n))
    assert c.known("u-0") == [] and len(c.known(f"u-{PROFILES}")) == 2


def test_a_profile_that_now_means_another_network_starts_afresh():
    c = Candidates()
    c.learn("u-1", bss(1, b"home"), [bss(2, b"home", 5180)], 1.0)
    current = bss(3, "Café ☕".encode())
    c.learn("u-1", current, [current], 2.0)
    assert c.others("u-1", current.bssid) == []
