"""A device's Devices entry as D-Bus values: the fields' Variants are made once per value
(status.py caches them), and a cached one is the same as one made afresh."""

from __future__ import annotations

import dataclasses

from nm_scanguard.status import FIELDS, DeviceStatus, _scalar_variant


def test_each_field_keeps_its_type_and_value_through_the_cache():
    a = DeviceStatus(interface="wlp2s0", state="guarding", reason="Café ☕ busy", rx_bps=1,
                     roams=1)
    for _ in range(2):  # the second time from the cache
        wire = a.as_dbus()
        assert wire["interface"].signature == "s" and wire["interface"].value == "wlp2s0"
        assert wire["reason"].value == "Café ☕ busy"
        assert (wire["rx_bps"].signature, wire["rx_bps"].value) == ("d", 1.0)
        assert (wire["roams"].signature, wire["roams"].value) == ("u", 1)
        assert set(wire) <= set(FIELDS)


def test_equal_values_of_different_types_are_not_confused():
    """True == 1 == 1.0 in Python, so a cache keyed on the value alone would hand a "s" field
    the text of another type's value."""
    assert _scalar_variant("s", True, 100).value == "True"
    first = DeviceStatus(interface="wlan0", state="idle", reason="1")
    second = dataclasses.replace(first, reason=True)  # type: ignore[arg-type]
    assert first.as_dbus()["reason"].value == "1"
    assert second.as_dbus()["reason"].value == "True"


def test_a_value_that_cannot_be_a_key_is_still_published():
    odd = DeviceStatus(interface="wlan0", state="idle", reason=["Café ☕"])  # type: ignore[arg-type]
    assert odd.as_dbus()["reason"].value == "['Café ☕']"
