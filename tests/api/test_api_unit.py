"""The parts of the bus API that need no bus: PropertiesChanged pacing and the Devices wire format."""

from __future__ import annotations

import asyncio

from nm_scanguard import api
from nm_scanguard.api import Api
from nm_scanguard.dbuslib import Message
from nm_scanguard.holds import Holds
from nm_scanguard.status import FIELDS, DeviceStatus


class FakeBus:
    def __init__(self) -> None:
        self.sent: list[Message] = []

    def send(self, msg: Message) -> None:
        self.sent.append(msg)

    def add_message_handler(self, handler) -> None:
        pass

    def changes(self, prop: str) -> int:
        return sum(1 for m in self.sent if m.member == "PropertiesChanged" and prop in m.body[1])

    def devices_changes(self) -> int:
        return self.changes("Devices")


class FakeDaemon:
    def __init__(self) -> None:
        self.rx = 0.0
        self.state = "idle"
        self.holds = Holds()
        self.on_state_changed: list = []
        self.on_changed: list = []

    def status(self) -> list[DeviceStatus]:
        return [DeviceStatus(interface="wlan0", state=self.state, rx_bps=self.rx, signal_dbm=None)]

    def changed(self) -> None:
        for cb in self.on_changed:
            cb()

    def recent_scan_requests(self) -> list:
        return []


def started(monkeypatch, devices_every: float = 60.0, holds_every: float = 60.0):
    monkeypatch.setattr(api, "DEVICES_EVERY", devices_every)
    monkeypatch.setattr(api, "HOLDS_EVERY", holds_every)
    bus, daemon = FakeBus(), FakeDaemon()
    a = Api(daemon, bus)
    a.start()
    return bus, daemon, a


async def test_devices_changes_are_paced_while_only_figures_change(monkeypatch):
    bus, daemon, _ = started(monkeypatch, devices_every=0.2)
    loop = asyncio.get_running_loop()
    end = loop.time() + 1.0
    while loop.time() < end:  # a sample every 10 ms, each with new rates
        daemon.rx += 1
        daemon.changed()
        await asyncio.sleep(0.01)
    assert 2 <= bus.devices_changes() <= 7  # about one per 0.2 s, not one per sample (~100)

    # the last figures are not lost: a pending announcement goes out
    await asyncio.sleep(0.25)
    last = [m for m in bus.sent if "Devices" in m.body[1]][-1]
    assert last.body[1]["Devices"].value[0]["rx_bps"].value == daemon.rx


async def test_a_state_change_is_announced_at_once(monkeypatch):
    bus, daemon, a = started(monkeypatch)
    daemon.changed()
    assert bus.devices_changes() == 1
    daemon.rx = 5.0
    daemon.changed()
    assert bus.devices_changes() == 1  # paced
    daemon.state = "held"
    a._state_changed("wlan0", "held", "held by an application")
    assert [m.member for m in bus.sent][-2:] == ["StateChanged", "PropertiesChanged"]
    assert bus.devices_changes() == 2


async def test_nothing_is_announced_when_nothing_changed(monkeypatch):
    bus, daemon, a = started(monkeypatch, devices_every=0.0)
    daemon.changed()
    daemon.changed()
    daemon.changed()
    assert bus.devices_changes() == 1


async def test_active_holds_changes_are_coalesced_under_a_flood(monkeypatch):
    """A client taking and releasing holds in a loop gets about one ActiveHolds change a second,
    and the last one describes the final table."""
    bus, daemon, _ = started(monkeypatch, holds_every=0.2)
    loop = asyncio.get_running_loop()
    end = loop.time() + 1.0
    n = 0
    while loop.time() < end:
        with daemon.holds.reserve(f":1.{n}") as slot:
            slot.set_uid(1000)
            hold = slot.commit("Café ☕", "org.example.Test", "", 0.0)
        daemon.holds.release(hold.cookie, hold.caller, False)
        n += 1
        await asyncio.sleep(0.005)
    assert n > 50
    assert 2 <= bus.changes("ActiveHolds") <= 7
    with daemon.holds.reserve(":1.last") as slot:
        slot.set_uid(1000)
        slot.commit("Café ☕", "org.example.Test", "", 0.0)
    await asyncio.sleep(0.25)
    last = [m for m in bus.sent if "ActiveHolds" in m.body[1]][-1]
    (entry,) = last.body[1]["ActiveHolds"].value
    assert entry["reason"].value == "Café ☕"


def test_unknown_signal_is_left_out_and_types_follow_the_declaration():
    wire = DeviceStatus(interface="wlan0", state="idle", signal_dbm=None, scans_idle=3,
                        since=1700000000.5, settings={"enabled": True, "threshold_pps": 60},
                        settings_sources={"enabled": "default"}).as_dbus()
    assert "signal_dbm" not in wire
    assert (wire["scans_idle"].signature, wire["since"].signature) == ("u", "d")
    assert wire["settings"].value["enabled"].signature == "b"
    assert wire["settings"].value["threshold_pps"].signature == "x"
    assert wire["settings_sources"].signature == "a{ss}"
    assert DeviceStatus(interface="w", state="idle", signal_dbm=-61.6).as_dbus()["signal_dbm"].value == -62
    assert {k: v.signature for k, v in DeviceStatus(interface="w", state="idle", signal_dbm=-50)
            .as_dbus().items()} == FIELDS


def test_user_texts_are_cut_so_no_entry_grows_without_bound():
    long_name = "Café ☕ " * 200
    wire = DeviceStatus(interface="wlan0", state="idle", connection_id=long_name,
                        reason=long_name, error=long_name).as_dbus()
    for key in ("connection_id", "reason", "error"):
        assert len(wire[key].value) == 256 and wire[key].value.endswith("…")
    short = DeviceStatus(interface="wlan0", state="idle", connection_id="Café ☕ lab").as_dbus()
    assert short["connection_id"].value == "Café ☕ lab"


def test_the_xml_documents_exactly_the_device_status_fields():
    """The XML's Devices comment is the documentation; DeviceStatus is the code: one list."""
    import re

    text = open(api.xml_path(), encoding="utf-8").read()
    comment = text[text.index("Devices: one dictionary"):text.index('<property name="Devices"')]
    documented = dict(re.findall(r"^ {8}([a-z_]+) +([a-z{}()]+) {2,}", comment, re.M))
    assert documented == FIELDS
