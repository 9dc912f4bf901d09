"""wpa_supplicant's signals as the daemon follows them (peers/supplicant.py, events_of): what
each says, in the order it says it, and nothing for one that is not ours to follow."""

from __future__ import annotations

from types import SimpleNamespace

from nm_scanguard.dbuslib import Variant
from nm_scanguard.peers.supplicant import (
    IFACE,
    NAME,
    SIGNAL_RULES,
    CurrentNetwork,
    NetworkRemoved,
    ScanDone,
    Scanning,
    events_of,
)

I0 = "/fi/w1/wpa_supplicant1/Interfaces/0"
N0 = I0 + "/Networks/0"
PROPS = "org.freedesktop.DBus.Properties"


def signal(member: str, body: list, interface: str = IFACE, path: str = I0) -> SimpleNamespace:
    return SimpleNamespace(member=member, interface=interface, path=path, body=body)


def changed(**props: Variant) -> SimpleNamespace:
    return signal("PropertiesChanged", [IFACE, props, []], interface=PROPS)


def test_scan_done_and_network_removed():
    assert events_of(signal("ScanDone", [True])) == [ScanDone(I0)]
    assert events_of(signal("NetworkRemoved", [N0])) == [NetworkRemoved(I0, N0)]


def test_properties_changed_says_scanning_then_the_current_network():
    both = changed(CurrentNetwork=Variant("o", N0), Scanning=Variant("b", True))
    assert events_of(both) == [Scanning(I0, True), CurrentNetwork(I0, N0)]
    assert events_of(changed(CurrentNetwork=Variant("o", "/"))) == [CurrentNetwork(I0, None)]
    assert events_of(changed(Scanning=Variant("b", False))) == [Scanning(I0, False)]


def test_what_is_not_followed_says_nothing():
    assert events_of(changed(State=Variant("s", "completed"))) == []
    other = signal("PropertiesChanged", [IFACE + ".BSS", {"Signal": Variant("n", -50)}, []],
                   interface=PROPS)
    assert events_of(other) == []
    outside = signal("PropertiesChanged", [IFACE, {"Scanning": Variant("b", True)}, []],
                     interface=PROPS, path="/elsewhere/0")
    assert events_of(outside) == []
    assert events_of(signal("PropertiesChanged", [], interface=PROPS)) == []
    assert events_of(signal("BSSAdded", ["/x", {}])) == []


def test_every_rule_names_wpa_supplicant_as_the_sender():
    assert len(SIGNAL_RULES) == 3
    assert all(f"sender='{NAME}'" in rule for rule in SIGNAL_RULES)
