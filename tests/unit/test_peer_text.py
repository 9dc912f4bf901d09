"""No peer's text reaches a person's terminal raw (issue #31): every name, reason, error and
label that scanguardctl (status, hold list, monitor, config) and diagnose's report print is
escaped by text.shown, and "Café ☕" stays readable beside it."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import time
from types import SimpleNamespace

import pytest

from nm_scanguard import cli
from nm_scanguard.bus import BusError
from nm_scanguard.dbuslib import Message, MessageType, Variant
from nm_scanguard.names import IFACE, PATH
from nm_scanguard.status import device_line
from tests.hostile import CAFE, EVIL, HOSTILE, raw_troublemakers


def clean(text: str) -> None:
    """`text` shows no raw control or format character and still shows Café ☕."""
    assert raw_troublemakers(text) == [], repr(text)
    assert CAFE in text, text


def device(**kw) -> dict:
    d = {"interface": f"wl{EVIL}", "state": f"guarding{EVIL}", "reason": EVIL,
         "since": time.time(), "rx_bps": 8e6, "tx_bps": 0.0, "connection_id": EVIL,
         "error": EVIL, "scans_guarding": 2, "scan_requests_deferred": 0,
         "scans_by_source": {"networkmanager": 1}, "last_scan": EVIL}
    d.update(kw)
    return d


def hold(**kw) -> dict:
    h = {"cookie": 17, "reason": EVIL, "application_id": EVIL, "interface": EVIL,
         "caller": ":1.42", "caller_uid": 1000, "since": time.time()}
    h.update(kw)
    return h


@pytest.mark.parametrize("bad", HOSTILE)
def test_a_status_line_escapes_each_of_the_peers_texts(bad):
    text = f"{CAFE}{bad}"
    line = device_line(device(interface=text, state=text, reason=text, connection_id=text,
                              error=text))
    clean(line)
    assert line.count(CAFE) == 5
    clean(device_line(device(), connection=False, age=False))  # the daemon's STATUS= line


@pytest.mark.parametrize("bad", HOSTILE)
def test_a_hold_line_escapes_the_holders_texts(bad):
    text = f"{CAFE}{bad}"
    line = cli.hold_line(hold(reason=text, application_id=text, interface=text))
    clean(line)
    assert line.count(CAFE) == 3
    clean(cli.hold_line(hold(application_id="", caller=EVIL, cookie=EVIL, caller_uid=EVIL)))


def test_the_status_verb_prints_no_peers_text_raw(monkeypatch, capsys):
    class Bus:
        def disconnect(self) -> None:
            pass

    async def connect() -> Bus:
        return Bus()

    async def properties(bus: Bus) -> dict:
        return {"Version": "0.1.0", "Devices": [device()], "ActiveHolds": [hold(), hold()]}

    monkeypatch.setattr(cli, "connect", connect)
    monkeypatch.setattr(cli, "properties", properties)
    assert asyncio.run(cli.cmd_status(argparse.Namespace(json=False))) == 0
    out = capsys.readouterr().out
    clean(out)
    assert len(out.splitlines()) == 4  # the device, its hint, two holds: no line was split


def test_a_daemons_error_text_is_escaped_in_scanguardctls_message():
    clean(str(cli.explain(BusError("org.example.Error.Whatever", EVIL))))
    clean(str(cli.explain(BusError("org.freedesktop.DBus.Error.AccessDenied", EVIL))))


def test_monitor_labels_are_escaped():
    before = {"scans_by_source": {"networkmanager": 0}}
    (line,) = cli._new_scans(device(), before)
    clean(line)
    (line,) = cli._new_scans(device(scans_by_source={EVIL: 2}, last_scan=""), before)
    clean(line)


async def test_monitor_prints_no_peers_text_raw(monkeypatch, capsys):
    """What monitor prints of the initial properties, a StateChanged and a PropertiesChanged."""
    handlers = []

    class Bus:
        def add_message_handler(self, handler) -> None:
            handlers.append(handler)

        def disconnect(self) -> None:
            pass

    async def connect() -> Bus:
        return Bus()

    async def add_match(bus: Bus, rule: str) -> None:
        pass

    def signal_of(member: str, signature: str, body: list) -> Message:
        return Message(message_type=MessageType.SIGNAL, path=PATH, interface=IFACE,
                       member=member, signature=signature, body=body)

    def feed() -> None:
        (on_message,) = handlers
        on_message(signal_of("StateChanged", "sss", [EVIL, EVIL, EVIL]))
        changed = {"Devices": Variant("aa{sv}", [{"interface": Variant("s", EVIL)}]),
                   "ActiveHolds": Variant("aa{sv}", [])}
        on_message(Message(message_type=MessageType.SIGNAL, path=PATH,
                           interface="org.freedesktop.DBus.Properties",
                           member="PropertiesChanged", signature="sa{sv}as",
                           body=[IFACE, changed, []]))
        os.kill(os.getpid(), signal.SIGINT)  # what ends monitor: Ctrl-C

    async def properties(bus: Bus) -> dict:
        asyncio.get_running_loop().call_soon(feed)
        return {"Version": EVIL, "Devices": [device()], "ActiveHolds": [hold()]}

    monkeypatch.setattr(cli, "connect", connect)
    monkeypatch.setattr(cli, "add_match", add_match)
    monkeypatch.setattr(cli, "properties", properties)
    assert await asyncio.wait_for(cli.cmd_monitor(argparse.Namespace()), 5) == 0
    out = capsys.readouterr().out
    clean(out)
    # monitoring, the device, a hold, the state change, the new device and the one that left,
    # the hold released: one line each
    assert len(out.splitlines()) == 7, out
    assert "released" in out and "no longer guarded" in out and "-> guarding" not in out


def test_config_show_escapes_the_profiles_name(monkeypatch, capsys, tmp_path):
    conn = SimpleNamespace(get_id=lambda: EVIL, get_uuid=lambda: EVIL)
    fake = SimpleNamespace(client=lambda: None, find=lambda client, name: conn,
                           user_data=lambda c: {"scanguard.threshold_mbit": "3",
                                                f"scanguard.{EVIL}": "1"})
    monkeypatch.setattr(cli, "_profiles", lambda: fake)
    args = argparse.Namespace(config=str(tmp_path / "none.conf"), connection=CAFE)
    assert cli.cmd_config_show(args) == 0
    captured = capsys.readouterr()
    clean(captured.out)

