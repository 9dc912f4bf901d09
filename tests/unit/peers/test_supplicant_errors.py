"""What a person reads when wpa_supplicant says no: each error names the cause and the fix."""

import asyncio

import pytest

from nm_scanguard.dbuslib import Message
from nm_scanguard.peers.bus import DISCONNECTED, BusError, call
from nm_scanguard.peers.supplicant import (NAME, ObjectGone, SupplicantError, explain, is_uncertain,
                                           unquote)


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


@pytest.mark.parametrize("closed", [EOFError(), ConnectionResetError(104, "Connection reset by peer"),
                                    BrokenPipeError(32, "Broken pipe")])
async def test_a_call_our_closing_connection_ends_is_a_bus_error_of_uncertain_outcome(closed):
    """The library ends a call still waiting on a connection that closes with the error that
    closed it: a D-Bus error (Disconnected) like a call that got no answer, so that every
    caller's handling of a failed call applies; to wpa_supplicant's callers the Set or Get may
    or may not have been carried out."""
    class ClosingBus:
        async def call(self, _msg):
            raise closed

    with pytest.raises(BusError) as caught:
        await call(ClosingBus(), NAME, "/fi/w1/wpa_supplicant1", NAME, "GetInterface", "s",  # type: ignore[arg-type]
                   ["wlan0"])
    assert caught.value.name == DISCONNECTED
    assert "closed before fi.w1.wpa_supplicant1 answered GetInterface" in str(caught.value)
    e = explain(caught.value, "setting bgscan on /fi/w1/wpa_supplicant1/Interfaces/0/Networks/0")
    assert is_uncertain(e) and "may or may not have carried out" in str(e)


async def test_a_call_on_a_closed_connection_fails_at_once():
    """dbus-next never answers a call made once its connection has closed (the reply handlers
    were all ended at the close): it would wait out the timeout.  Refused at once instead."""
    class ClosedBus:
        connected = False

        async def call(self, _msg):
            raise AssertionError("nothing is sent on a closed connection")

    with pytest.raises(BusError) as caught:
        await call(ClosedBus(), NAME, "/fi/w1/wpa_supplicant1", NAME, "GetInterface", "s",  # type: ignore[arg-type]
                   ["wlan0"])
    assert caught.value.name == DISCONNECTED and "GetInterface was not sent" in str(caught.value)
    assert is_uncertain(explain(caught.value, "GetInterface(wlan0)"))


@pytest.mark.parametrize("outcome", ["connection closed", "answered"])
async def test_a_cancellation_that_arrives_as_the_call_ends_is_not_lost(outcome):
    """Python 3.11's wait_for hands back the call's outcome when the caller's cancellation
    arrives just as the call ends: a retry loop that takes a failed call in stride would run
    on, and whoever cancelled it wait forever.  The cancellation is raised instead."""
    outer: asyncio.Task[str] | None = None

    class EndingBus:
        async def call(self, msg: Message) -> Message:
            assert outer is not None
            outer.cancel()  # the stop cancels the caller as the answer comes in
            if outcome == "connection closed":
                raise EOFError()
            msg.serial = 7
            return Message.new_method_return(msg, "o", ["/fi/w1/wpa_supplicant1/Interfaces/0"])

    async def caller() -> str:
        try:
            await call(EndingBus(), NAME, "/fi/w1/wpa_supplicant1", NAME, "GetInterface", "s",  # type: ignore[arg-type]
                       ["wlan0"])
        except BusError:
            return "carried on after a failed call"
        return "carried on after an answer"

    outer = asyncio.ensure_future(caller())
    with pytest.raises(asyncio.CancelledError):
        await outer
