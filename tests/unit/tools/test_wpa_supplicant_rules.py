"""The wpa_supplicant rules both simulations follow (tests/wpa_supplicant_rules.py), held against
the answers the contract pins for the real binary (tests/contract/wpa_roaming_scenarios.py,
wpa_scenarios.py) without a bus: a rule that drifts fails here before either simulation runs."""

from __future__ import annotations

import pytest

from nm_scanguard.dbuslib import Variant
from tests import wpa_supplicant_rules as rules
from tests.contract.wpa_roaming_scenarios import (ROAM_WHILE_NOT_CONNECTED, SCAN_OPTION_ERRORS,
                                                  SCAN_OPTIONS_LENIENT)


def _options(args: dict[str, Variant]) -> dict[str, tuple[str, object]]:
    return {k: (v.signature, v.value) for k, v in args.items()}


@pytest.mark.parametrize(("args", "detail"), SCAN_OPTION_ERRORS)
def test_each_bad_scan_option_is_named_as_the_binary_names_it(args, detail) -> None:
    with pytest.raises(rules.BadArguments) as info:
        rules.scan_request(_options(args))
    assert (info.value.name, info.value.text, info.value.detail) == (
        "fi.w1.wpa_supplicant1.InvalidArgs", "Did not receive correct message arguments.", detail)


def test_odd_but_accepted_scan_options() -> None:
    wide, zero = SCAN_OPTIONS_LENIENT
    assert rules.scan_request(_options(wide)) == rules.ScanRequest("passive", (2412,), True)
    assert rules.scan_request(_options(zero)) == rules.ScanRequest("passive", (), True)


def test_a_targeted_scan_reads_its_channels_and_roaming() -> None:
    request = rules.scan_request({"Type": ("s", "active"), "SSIDs": ("aay", [b"x"]),
                                  "Channels": ("a(uu)", [[5180, 80], [2412, 20]]),
                                  "AllowRoam": ("b", False)})
    assert request == rules.ScanRequest("active", (5180, 2412), False)
    with pytest.raises(rules.BadArguments) as info:
        rules.scan_request(None)  # not a dict at all
    assert info.value.detail is None


@pytest.mark.parametrize(("address", "answer"), ROAM_WHILE_NOT_CONNECTED)
def test_roam_checks_the_address_then_the_selected_network(address, answer) -> None:
    with pytest.raises(rules.WpaError) as info:
        rules.roam_target(address, connected=False, find=lambda bssid: pytest.fail(bssid))
    assert (info.value.name, info.value.text, info.value.detail) == answer


def test_roam_looks_up_the_first_seventeen_characters_last() -> None:
    asked: list[str] = []
    with pytest.raises(rules.BadArguments) as info:
        rules.roam_target("02:00:00:00:01:00zz", True, lambda bssid: asked.append(bssid))
    assert (info.value.detail, asked) == ("Target BSS not found", ["02:00:00:00:01:00"])
    assert rules.roam_target("02:00:00:00:01:00", True, lambda bssid: "bss") == "bss"


@pytest.mark.parametrize(("key", "signature", "value", "read_back"), [
    ("bgscan", "s", "simple:30:-70:86400", '"simple:30:-70:86400"'),
    ("bgscan", "s", "", '""'),  # no way back to "absent"
    ("bgscan", "s", '"simple:30:-70:86400"', '""simple:30:-70:86400""'),  # quoted again
    ("priority", "i", 5, "5"), ("priority", "u", 7, "7"),
    ("key_mgmt", "s", "WPA-PSK", "WPA-PSK"),  # DONT_QUOTE
    ("ssid", "ay", b"a\x01b", "610162"), ("ssid", "s", "Café ☕", "436166c3a920e29895"),
    ("ssid", "ay", b"myssid", '"myssid"'), ("bssid", "s", "02:00:00:00:01:00", "02:00:00:00:01:00"),
    ("psk", "s", "secretpass", '"secretpass"'),  # kept, never read back
])
def test_network_values_read_back_as_the_binary_reads_them(key, signature, value,
                                                           read_back) -> None:
    assert rules.network_value(key, signature, value) == read_back


@pytest.mark.parametrize(("key", "signature", "value"), [
    ("priority", "s", "9"),  # integer fields reject (quoted) strings
    ("bgscan", "b", True),  # only s, i, u, ay are accepted
    ("nosuchkey", "s", "x"), ("psk", "s", "short"), ("ssid", "ay", b""),
    ("ssid", "ay", b"x" * 33),
])
def test_bad_network_values_are_an_invalid_message_format(key, signature, value) -> None:
    with pytest.raises(rules.WpaError) as info:
        rules.network_value(key, signature, value)
    assert (info.value.name, info.value.text) == ("org.freedesktop.DBus.Error.InvalidArgs",
                                                  "invalid message format")


def test_a_fresh_network_and_interface() -> None:
    defaults = {k: v for k, v in rules.NETWORK_FIELDS if v is not None}
    assert (defaults["key_mgmt"], defaults["disabled"], "bgscan" in defaults) == (
        "WPA-PSK WPA-EAP", "1", False)
    assert {k: v[:2] for k, v in rules.INTERFACE_PROPERTIES.items()
            if k in ("BSSs", "CurrentBSS", "BSSExpireAge", "BSSExpireCount", "RoamComplete",
                     "RoamTime")} == {
        "BSSs": ("ao", []), "CurrentBSS": ("o", "/"), "BSSExpireAge": ("u", 180),
        "BSSExpireCount": ("u", 2), "RoamComplete": ("b", False), "RoamTime": ("u", 0)}
    assert {"BSSs", "CurrentBSS", "State", "Scanning", "CurrentNetwork"} \
        <= rules.INTERFACE_READ_ONLY
    assert not {"BSSExpireAge", "BSSExpireCount"} & rules.INTERFACE_READ_ONLY
    rules.check_expire_age(10)
    with pytest.raises(rules.WpaError) as info:
        rules.check_expire_age(5)
    assert (info.value.name, info.value.text) == ("org.freedesktop.DBus.Error.Failed",
                                                  "BSSExpireAge must be >= 10")


def test_a_bss_object_per_kind_of_network() -> None:
    props = rules.bss_properties("Café ☕".encode(), "0A:bb:00:00:01:00", 5180, -61, "sae", 3)
    assert set(props) == rules.BSS_PROPERTIES
    assert props["BSSID"] == ("ay", b"\x0a\xbb\x00\x00\x01\x00")
    assert (props["Frequency"], props["Signal"], props["Age"], props["Privacy"]) == (
        ("q", 5180), ("n", -61), ("u", 3), ("b", True))
    assert props["RSN"] == ("a{sv}", {"KeyMgmt": ("as", ["sae"]), "Pairwise": ("as", ["ccmp"]),
                                      "Group": ("s", "ccmp"), "MgmtGroup": ("s", "aes128cmac")})
    assert props["WPA"] == ("a{sv}", {"KeyMgmt": ("as", []), "Pairwise": ("as", []),
                                      "Group": ("s", "")})
    wpa = rules.bss_properties(b"x", "02:00:00:00:00:01", 2412, -50, "wpa-psk")["WPA"]
    assert wpa[1]["Pairwise"] == ("as", ["tkip"])
    assert rules.bss_properties(b"x", "02:00:00:00:00:01", 2412, -50, "open")["Privacy"] == \
        ("b", False)
    with pytest.raises(ValueError, match="security must be one of"):
        rules.bss_properties(b"x", "02:00:00:00:00:01", 2412, -50, "wep")
