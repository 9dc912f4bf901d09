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

from nm_scanguard import attribution as A
from nm_scanguard.cli import common, configure, show
from nm_scanguard.cli import scanguardctl as cli
from nm_scanguard.diagnose import record as D
from nm_scanguard.diagnose import targets as T
from nm_scanguard.diagnose import document as DOC
from nm_scanguard.diagnose import findings as F
from nm_scanguard.peers.bus import BusError
from nm_scanguard.dbuslib import Message, MessageType, Variant
from nm_scanguard.names import BUS_NAME, IFACE, PATH
from nm_scanguard.status import device_line
from tests.hostile import CAFE, EVIL, HOSTILE, raw_troublemakers

OWNER = ":1.7"  # the unique name of the service's connection, in the monitor tests


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
    line = show.hold_line(hold(reason=text, application_id=text, interface=text))
    clean(line)
    assert line.count(CAFE) == 3
    clean(show.hold_line(hold(application_id="", caller=EVIL, cookie=EVIL, caller_uid=EVIL)))


def test_the_status_verb_prints_no_peers_text_raw(monkeypatch, capsys):
    class Bus:
        def disconnect(self) -> None:
            pass

    async def connect() -> Bus:
        return Bus()

    async def properties(bus: Bus) -> dict:
        return {"Version": "0.1.0", "Devices": [device()], "ActiveHolds": [hold(), hold()]}

    monkeypatch.setattr(show, "connect", connect)
    monkeypatch.setattr(show, "properties", properties)
    assert asyncio.run(show.cmd_status(argparse.Namespace(json=False))) == 0
    out = capsys.readouterr().out
    clean(out)
    assert len(out.splitlines()) == 4  # the device, its hint, two holds: no line was split


def test_a_daemons_error_text_is_escaped_in_scanguardctls_message():
    clean(str(common.explain(BusError("org.example.Error.Whatever", EVIL))))
    clean(str(common.explain(BusError("org.freedesktop.DBus.Error.AccessDenied", EVIL))))


def test_monitor_labels_are_escaped():
    before = {"scans_by_source": {"networkmanager": 0}}
    (line,) = show._new_scans(device(), before)
    clean(line)
    (line,) = show._new_scans(device(scans_by_source={EVIL: 2}, last_scan=""), before)
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
                       member=member, signature=signature, body=body, sender=OWNER)

    async def resolve(self, bus: Bus) -> None:
        self._owners[show.NAME] = OWNER

    def feed() -> None:
        (on_message,) = handlers
        on_message(signal_of("StateChanged", "sss", [EVIL, EVIL, EVIL]))
        # Anyone can send this connection a signal; one not from the service's owner is no news.
        forged = signal_of("StateChanged", "sss", ["forged0", "guarding", f"forged {CAFE}"])
        forged.sender = ":1.99"
        on_message(forged)
        on_message(Message(message_type=MessageType.SIGNAL, path="/org/freedesktop/DBus",
                           interface="org.freedesktop.DBus", member="NameOwnerChanged",
                           signature="sss", body=[BUS_NAME, OWNER, ""], sender=":1.99"))
        changed = {"Devices": Variant("aa{sv}", [{"interface": Variant("s", EVIL)}]),
                   "ActiveHolds": Variant("aa{sv}", [])}
        on_message(Message(message_type=MessageType.SIGNAL, path=PATH,
                           interface="org.freedesktop.DBus.Properties",
                           member="PropertiesChanged", signature="sa{sv}as",
                           body=[IFACE, changed, []], sender=OWNER))
        # what ends monitor: Ctrl-C, once the holds' change has been asked about
        asyncio.get_running_loop().call_later(0.3, os.kill, os.getpid(), signal.SIGINT)

    async def properties(bus: Bus) -> dict:
        asyncio.get_running_loop().call_soon(feed)
        return {"Version": EVIL, "Devices": [device()], "ActiveHolds": [hold()]}

    async def active_holds(bus: Bus, public: list) -> list:
        # A change of ActiveHolds is shown as GetActiveHolds names it.
        assert public == []
        return [hold(cookie=18)]

    monkeypatch.setattr(show, "connect", connect)
    monkeypatch.setattr(show.NameOwners, "resolve", resolve)
    monkeypatch.setattr(show, "add_match", add_match)
    monkeypatch.setattr(show, "properties", properties)
    monkeypatch.setattr(show, "active_holds", active_holds)
    assert await asyncio.wait_for(cli.cmd_monitor(argparse.Namespace()), 5) == 0
    out = capsys.readouterr().out
    clean(out)
    # monitoring, the device, a hold, the state change, the new device and the one that left,
    # the new hold, the old one released: one line each
    assert len(out.splitlines()) == 8, out
    assert "hold 17 released" in out and "no longer guarded" in out and "-> guarding" not in out
    assert "hold 18 by " in out
    assert "forged" not in out and "service stopped" not in out


def test_config_show_escapes_the_profiles_name(monkeypatch, capsys, tmp_path):
    conn = SimpleNamespace(get_id=lambda: EVIL, get_uuid=lambda: EVIL)
    fake = SimpleNamespace(client=lambda: None, find=lambda client, name: conn,
                           user_data=lambda c: {"scanguard.threshold_mbit": "3",
                                                f"scanguard.{EVIL}": "1"})
    monkeypatch.setattr(configure, "_profiles", lambda: fake)
    (tmp_path / "empty.conf").write_text("")  # a --config file must exist
    args = argparse.Namespace(config=str(tmp_path / "empty.conf"), connection=CAFE)
    assert cli.cmd_config_show(args) == 0
    captured = capsys.readouterr()
    clean(captured.out)


# ---- diagnose ----------------------------------------------------------------------------------

def hostile_recording() -> F.Recording:
    """A recording whose every peer-supplied value is hostile: the interface, SSID, bgscan,
    the guard's states and settings sources, and the programs and users the polkit rule saw."""
    ssid = EVIL.encode()
    link = F.Link(interface=f"wl{EVIL}", ssid=EVIL, bgscan=f"simple{EVIL}",
                  bgscan_source="read from wpa_supplicant", latency_method="ICMP echo")
    link.bgscan_words = DOC.explain_bgscan(link.bgscan)
    for i in range(300):
        link.echoes.append(F.Echo(i * 0.2, 80.0 if 10 <= i * 0.2 < 14 else 2.0))
    for s in range(60):
        link.seconds.append(F.Second(float(s), 5e6, 5e6))
    ev = A.Evidence(current_ssid=ssid, geoclue_pid=77,
                    client_requests=[A.Request(1_700_000_009.5, EVIL, 1500, EVIL)])
    for start, ssids in ((10.0, (b"",)), (30.0, (ssid, b"")), (50.0, (ssid,))):
        label = A.attribute(ssids, 1_700_000_000.0 + start, ev)
        link.scans.append(F.Scan(start=start, end=start + 4.0, outcome="finished",
                                 ssids=ssids, frequencies=(2412,), source=label.source,
                                 name=label.name, basis=label.basis, label_text=label.text()))
    if label.name == "":  # the bgscan scan: give it a peer's name to show, as a forged one might
        link.scans[-1].name = EVIL
    rec = F.Recording(started_at=time.time(), duration=60.0, links=[link],
                      scan_events_source="seen in the kernel's nl80211 scan events")
    rec.guards[link.interface] = F.GuardSeen(installed=True, running=True, state=EVIL,
                                         states_seen=[EVIL, "idle"],
                                         settings_sources={"threshold_mbit": f"profile {EVIL}"})
    return rec


def test_the_diagnose_report_prints_no_peers_text_raw():
    rec = hostile_recording()
    text = DOC.report(rec)
    clean(text)
    assert "a program asked NetworkManager to scan (" in text  # the names are in the advice


def test_the_verdict_names_programs_escaped():
    rec = hostile_recording()
    (link,) = rec.links
    for line in F.verdict(F.analyse(link, rec.duration), rec.guards[link.interface]):
        assert raw_troublemakers(line) == [], line
    for scan in link.scans:
        assert raw_troublemakers(scan.basis + scan.label_text) == []


async def test_what_diagnose_learns_from_its_peers_is_escaped_in_its_sentences(monkeypatch):
    class Supplicant:
        def __init__(self, _bus) -> None:
            pass

        async def interface(self, ifname: str) -> str:
            from nm_scanguard.peers.supplicant import SupplicantError
            raise SupplicantError(EVIL, "org.freedesktop.DBus.Error.Failed")

    monkeypatch.setattr(D, "Supplicant", Supplicant)
    monkeypatch.setattr(D, "proc_wireless_dbm", lambda name: None)
    t = T.Target(interface="wlan0", ifindex=3, ssid=CAFE.encode())
    await D.read_supplicant(None, t, {"suspended_bgscan": EVIL})
    clean(t.link.bgscan_source + t.link.bgscan_words)
    t.link.bgscan_source = ""
    await D.read_supplicant(None, t, {})
    clean(t.link.bgscan_source)


async def test_interface_names_and_bus_errors_in_diagnose_notes_are_escaped(monkeypatch):
    async def call(bus, *args, **kw):
        if args[-1] == "ListActivatableNames":
            raise BusError("org.freedesktop.DBus.Error.Failed", EVIL)
        return ([f"/dev/{i}" for i in range(2)],)

    async def get_all(bus, name, path, iface):
        if name == BUS_NAME:
            raise BusError("org.freedesktop.DBus.Error.Failed", EVIL)
        return {"DeviceType": 2, "Interface": EVIL, "State": 30}

    async def name_has_owner(bus, name):
        return True

    for module in (D, T):  # find_targets lives in targets, guard_properties in record
        monkeypatch.setattr(module, "call", call)
        monkeypatch.setattr(module, "get_all", get_all)
    monkeypatch.setattr(D, "name_has_owner", name_has_owner)
    targets, notes = await T.find_targets(None, None)
    assert targets == [] and len(notes) == 2
    clean(" ".join(notes))
    with pytest.raises(LookupError) as e:
        await T.find_targets(None, "wlan9")
    clean(str(e.value))
    *_, detail = await D.guard_properties(None)
    clean(detail.replace("bus could not be asked", CAFE))


# ---- --json --------------------------------------------------------------------------------------

def test_json_output_escapes_what_a_terminal_would_act_on_and_reads_back_the_same():
    import json
    doc = {"devices": [device()], "holds": [hold()], "astral": "\U000e0041\U0001f4de",
           "lone": "\udcff"}
    text = common.json_text(doc)
    clean(text)
    assert "\U0001f4de" in text  # an emoji stays as it is
    assert json.loads(text) == json.loads(json.dumps(doc))


def test_the_json_verbs_print_that_text(monkeypatch, capsys):
    class Bus:
        def disconnect(self) -> None:
            pass

    async def connect() -> Bus:
        return Bus()

    async def properties(bus: Bus) -> dict:
        return {"Version": EVIL, "Devices": [device()], "ActiveHolds": [hold()]}

    monkeypatch.setattr(show, "connect", connect)
    monkeypatch.setattr(show, "properties", properties)
    assert asyncio.run(show.cmd_status(argparse.Namespace(json=True))) == 0
    clean(capsys.readouterr().out)
    monkeypatch.setattr(D, "run", lambda seconds, only, on_terminal, address: hostile_recording())
    assert cli.main(["diagnose", "--json", "--seconds", "1"]) == 0
    clean(capsys.readouterr().out)


def test_networkmanagers_error_text_is_escaped_when_diagnose_cannot_ask_it(monkeypatch, capsys):
    def run(seconds, only, on_terminal, address):
        raise BusError("org.freedesktop.NetworkManager.Failed", EVIL)

    monkeypatch.setattr(D, "run", run)
    assert cli.main(["diagnose", "--seconds", "1"]) == 1
    clean(capsys.readouterr().err)
