"""The parts of api.py that need no bus: PropertiesChanged pacing and the Devices wire format."""

from __future__ import annotations

import asyncio

from nm_scanguard import api
from nm_scanguard.api import Api, device_as_dbus
from nm_scanguard.dbuslib import Message


class FakeBus:
    def __init__(self) -> None:
        self.sent: list[Message] = []

    def send(self, msg: Message) -> None:
        self.sent.append(msg)

    def devices_changes(self) -> int:
        return sum(1 for m in self.sent
                   if m.member == "PropertiesChanged" and "Devices" in m.body[1])


class FakeDaemon:
    def __init__(self) -> None:
        self.rx = 0.0
        self.state = "idle"
        self.on_state_changed: list = []
        self.on_changed: list = []

    def status(self) -> list[dict]:
        return [{"interface": "wlan0", "state": self.state, "rx_bps": self.rx, "signal_dbm": None}]


async def test_devices_changes_are_paced_while_only_figures_change(monkeypatch):
    monkeypatch.setattr(api, "DEVICES_EVERY", 0.2)
    bus, daemon = FakeBus(), FakeDaemon()
    a = Api(daemon, bus)
    loop = asyncio.get_running_loop()
    end = loop.time() + 1.0
    while loop.time() < end:  # a sample every 10 ms, each with new rates
        daemon.rx += 1
        a._changed()
        await asyncio.sleep(0.01)
    assert 2 <= bus.devices_changes() <= 7  # about one per 0.2 s, not one per sample (~100)

    # the last figures are not lost: a pending announcement goes out
    await asyncio.sleep(0.25)
    last = [m for m in bus.sent if "Devices" in m.body[1]][-1]
    assert last.body[1]["Devices"].value[0]["rx_bps"].value == daemon.rx


async def test_a_state_change_is_announced_at_once(monkeypatch):
    monkeypatch.setattr(api, "DEVICES_EVERY", 60)
    bus, daemon = FakeBus(), FakeDaemon()
    a = Api(daemon, bus)
    a._changed()
    assert bus.devices_changes() == 1
    daemon.rx = 5.0
    a._changed()
    assert bus.devices_changes() == 1  # paced
    daemon.state = "held"
    a._state_changed("wlan0", "held", "held by an application")
    assert [m.member for m in bus.sent][-2:] == ["StateChanged", "PropertiesChanged"]
    assert bus.devices_changes() == 2
    a._changed()  # nothing new since: nothing sent
    assert bus.devices_changes() == 2


async def test_nothing_is_announced_when_nothing_changed():
    bus, daemon = FakeBus(), FakeDaemon()
    a = Api(daemon, bus)
    a._changed()
    a._flush_devices()
    a._flush_devices()
    assert bus.devices_changes() == 1


def test_unknown_signal_is_left_out_and_types_follow_the_xml():
    wire = device_as_dbus({"interface": "wlan0", "signal_dbm": None, "scans_idle": 3,
                           "since": 1700000000.5, "settings": {"enabled": True, "threshold_pps": 60},
                           "settings_sources": {"enabled": "default"}})
    assert "signal_dbm" not in wire
    assert (wire["scans_idle"].signature, wire["since"].signature) == ("u", "d")
    assert wire["settings"].value["enabled"].signature == "b"
    assert wire["settings"].value["threshold_pps"].signature == "x"
    assert wire["settings_sources"].signature == "a{ss}"
    assert device_as_dbus({"signal_dbm": -61.6})["signal_dbm"].value == -62
