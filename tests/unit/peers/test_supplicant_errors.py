"""What a person reads when wpa_supplicant says no: each error names the cause and the fix."""

import pytest

from nm_scanguard.peers.bus import BusError
from nm_scanguard.peers.supplicant import ObjectGone, SupplicantError, explain, unquote


def test_access_denied_says_which_group_is_needed():
    e = explain(BusError("org.freedesktop.DBus.Error.AccessDenied", "Rejected send message"),
                "setting bgscan on /fi/w1/wpa_supplicant1/Interfaces/0/Networks/0")
    assert not isinstance(e, ObjectGone)
    assert "refused setting bgscan" in str(e) and "group 'netdev'" in str(e)


@pytest.mark.parametrize("name", ["org.freedesktop.DBus.Error.ServiceUnknown",
                                  "org.freedesktop.DBus.Error.NameHasNoOwner",
                                  "org.freedesktop.DBus.Error.Timeout"])
def test_not_running_points_at_the_service(name):
    e = explain(BusError(name, ""), "GetInterface(wlan0)")
    assert "is wpa_supplicant.service running?" in str(e)


@pytest.mark.parametrize("name", ["fi.w1.wpa_supplicant1.InterfaceUnknown",
                                  # a removed network answers UnknownMethod (contract test)
                                  "org.freedesktop.DBus.Error.UnknownMethod",
                                  "org.freedesktop.DBus.Error.UnknownObject"])
def test_gone_objects_are_told_apart(name):
    assert isinstance(explain(BusError(name, ""), "reading"), ObjectGone)


def test_other_errors_keep_the_original_text():
    e = explain(BusError("org.freedesktop.DBus.Error.InvalidArgs", "invalid message format"), "x")
    assert type(e) is SupplicantError and "invalid message format" in str(e)


@pytest.mark.parametrize("raw, value", [('"simple:30:-70:86400"', "simple:30:-70:86400"),
                                        ('""', ""), ("simple", "simple"), ('"', '"')])
def test_unquote_strips_exactly_one_pair(raw, value):
    assert unquote(raw) == value
