"""`scanguardctl diagnose` without a system: attribution from recorded scan events, the spike
and throughput figures, the verdict, the report and strict JSON, and the parsers of what the
kernel shows any user (/proc/net/route, /proc/net/wireless, /proc/PID/comm, ICMP)."""

from __future__ import annotations

import asyncio
import json
import re
import time

import pytest

from nm_scanguard import attribution as A
from nm_scanguard.diagnose import ping as PING
from nm_scanguard.diagnose import record as D
from nm_scanguard.diagnose import targets as T
from nm_scanguard.diagnose import document as DOC
from nm_scanguard.diagnose import findings as F
from nm_scanguard.cli.scanguardctl import build_parser, main
from nm_scanguard.peers.nl80211 import ScanEvent

CAFE = "Café ☕".encode()
HOME = b"home"
FREQS = tuple(range(2412, 2473, 5)) + (5180, 5200)


@pytest.fixture(params=[HOME, CAFE], ids=["ascii", "non-ascii"])
def ssid(request) -> bytes:
    return request.param


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def target(ssid: bytes, index: int = 3) -> T.Target:
    t = T.Target(interface="wlan0", ifindex=index, ssid=ssid)
    t.link.interface = "wlan0"
    t.link.ssid = ssid.decode()
    return t


def started(ssids, index: int = 3) -> ScanEvent:
    return ScanEvent(kind="started", ifindex=index, wdev=None, ssids=ssids, frequencies=FREQS,
                     flags=0)


def ended(kind: str = "finished", index: int = 3) -> ScanEvent:
    return ScanEvent(kind=kind, ifindex=index, wdev=None, ssids=None, frequencies=(), flags=0)


def recorded(ssid: bytes, sequence, evidence=None, seconds: float = 60.0,
             rtt=lambda t, scanning: 80.0 if scanning else 2.0, mbit=lambda scanning: 10 if scanning else 60):
    """Feed a Recorder (fake clock) the scan events of `sequence` [(at, event)], echoes every
    0.2 s whose round trip `rtt` gives, and per-second counters; label with `evidence`."""
    clock = Clock()
    t = target(ssid)
    rec = D.Recorder([t], clock)
    events = sorted(sequence, key=lambda x: x[0])
    i = 0
    scanning = False
    for step in range(int(seconds / 0.2)):
        now = step * 0.2
        while i < len(events) and events[i][0] <= now:
            at, ev = events[i]
            clock.t = 1000.0 + at
            rec.on_event(ev, clock.t, 1_700_000_000.0 + at)
            scanning = ev.kind == "started"
            i += 1
        clock.t = 1000.0 + now
        t.link.echoes.append(F.Echo(now, rtt(now, scanning)))
        if step % 5 == 0:
            bps = mbit(scanning) * 1e6
            t.link.seconds.append(F.Second(now, bps / 2, bps / 2))
    rec.label({t.ifindex: evidence or A.Evidence(current_ssid=ssid)})
    return t.link


def guard(**kw) -> F.GuardSeen:
    return F.GuardSeen(**kw)


# ---- attribution -----------------------------------------------------------------------------

def test_bgscan_probes_only_the_current_ssid(ssid):
    lab = A.attribute((ssid,), 10.0, A.Evidence(current_ssid=ssid))
    assert lab.source == A.BGSCAN and lab.signature == "current"
    assert "only the current network's SSID" in lab.basis


def test_wildcard_only_is_networkmanager_unnamed_without_the_rules_record(ssid):
    lab = A.attribute((b"",), 10.0, A.Evidence(current_ssid=ssid))
    assert lab.source == A.NETWORKMANAGER and lab.name == ""
    assert "polkit rule" in lab.basis


def test_hidden_profiles_ssids_beside_the_wildcard_are_still_networkmanager(ssid):
    lab = A.attribute((b"", b"hidden-one"), 10.0, A.Evidence(current_ssid=ssid))
    assert lab.source == A.NETWORKMANAGER


def test_the_polkit_rules_record_names_the_program(ssid):
    seen = A.Request(at=9.4, program="nmcli", pid=4242, user="Café ☕")
    lab = A.attribute((b"",), 10.0, A.Evidence(current_ssid=ssid, client_requests=[seen]))
    assert lab.source == A.NETWORKMANAGER and lab.name == "nmcli"
    assert "nmcli" in lab.text() and "Café ☕" in lab.basis


def test_a_request_too_long_before_or_after_names_nothing(ssid):
    for at in (10.0 - A.REQUEST_WINDOW - 0.1, 10.5):
        seen = A.Request(at=at, program="nmcli", pid=1)
        lab = A.attribute((b"",), 10.0, A.Evidence(current_ssid=ssid, client_requests=[seen]))
        assert lab.source == A.NETWORKMANAGER and lab.name == ""


def test_the_guards_own_record_labels_its_roaming_scan(ssid):
    lab = A.attribute((b"",), 10.0, A.Evidence(current_ssid=ssid, own_scans=[9.9],
                                               client_requests=[A.Request(9.8, "nmcli", 1)]))
    assert lab.source == A.GUARD and "nm-scanguard recorded" in lab.basis


def test_current_and_wildcard_is_a_direct_caller_named_geoclue_only_if_it_runs(ssid):
    with_geoclue = A.attribute((ssid, b""), 10.0, A.Evidence(current_ssid=ssid, geoclue_pid=812))
    assert with_geoclue.source == A.DIRECT and with_geoclue.name == "GeoClue"
    assert "pid 812" in with_geoclue.basis
    without = A.attribute((b"", ssid), 10.0, A.Evidence(current_ssid=ssid))
    assert without.source == A.DIRECT and without.name == ""
    assert "not running" in without.basis


def test_passive_and_strange_scans_stay_unknown(ssid):
    assert A.attribute(None, 1.0, A.Evidence(current_ssid=ssid)).source == A.UNKNOWN
    assert A.attribute((), 1.0, A.Evidence(current_ssid=ssid)).source == A.UNKNOWN
    other = A.attribute((b"elsewhere",), 1.0, A.Evidence(current_ssid=ssid))
    assert other.source == A.UNKNOWN and "none of the known" in other.basis


def test_without_knowing_the_current_ssid_a_single_ssid_is_not_called_bgscan():
    assert A.attribute((HOME,), 1.0, A.Evidence()).source == A.UNKNOWN
    assert A.attribute((b"",), 1.0, A.Evidence()).source == A.NETWORKMANAGER


# ---- the recorder and the analysis -----------------------------------------------------------

def test_bgscan_scan_under_load_is_found_with_its_spikes(ssid):
    link = recorded(ssid, [(20.0, started((ssid,))), (27.0, ended())])
    assert len(link.scans) == 1
    scan = link.scans[0]
    assert scan.source == A.BGSCAN and scan.outcome == "finished"
    assert scan.duration == pytest.approx(7.0, abs=0.01)
    a = F.analyse(link, 60.0)
    assert a.median_ms == 2.0 and a.spike_threshold_ms == 32.0
    assert a.spikes == a.spikes_in_scans == 35  # 7 s of echoes at 0.2 s
    assert a.inside_share == pytest.approx(10 / 60)
    lines = F.verdict(a, guard())
    assert lines[0].startswith("Scans cause the stalls on wlan0: 35 of 35")
    assert "17 %" in lines[1]
    assert any("bgscan" in line and "install nm-scanguard" in line for line in lines)


def test_no_scans_are_never_blamed(ssid):
    link = recorded(ssid, [], rtt=lambda t, s: 90.0 if int(t) % 10 == 0 else 2.0)
    a = F.analyse(link, 60.0)
    assert a.scans == 0 and a.spikes > 0
    lines = F.verdict(a, guard(installed=True, running=True, state="guarding"))
    assert "No Wi-Fi scan ran" in lines[0] and "not scans" in lines[0]
    assert "guarding" in lines[1]
    assert not any("Scans cause" in line for line in lines)


def test_a_quiet_run_says_so():
    link = recorded(HOME, [])
    lines = F.verdict(F.analyse(link, 60.0), guard())
    assert lines == ["No Wi-Fi scan ran on wlan0, and latency stayed steady."]


def test_scans_without_spikes_are_not_named_the_cause(ssid):
    link = recorded(ssid, [(5.0, started((b"",))), (9.0, ended("aborted"))],
                    rtt=lambda t, s: 2.0)
    lines = F.verdict(F.analyse(link, 60.0), guard())
    assert "no latency spike fell inside one" in lines[0]
    assert link.scans[0].outcome == "aborted"


def test_lost_echoes_are_spikes():
    link = recorded(HOME, [(10.0, started((HOME,))), (12.0, ended())],
                    rtt=lambda t, s: None if s else 3.0)
    a = F.analyse(link, 60.0)
    assert a.spikes == a.spikes_in_scans == 10 and a.answered == a.echoes - 10


def test_an_idle_link_gives_no_throughput_ratio():
    link = recorded(HOME, [(10.0, started((HOME,))), (17.0, ended())], mbit=lambda s: 0.01)
    a = F.analyse(link, 60.0)
    assert not a.busy
    assert any("nearly idle" in line for line in F.verdict(a, guard()))


# ---- a verdict only for what was measured (issue 34, item 2) --------------------------------

NO_GATEWAY = ("wlan0 has no IPv4 gateway of its own to send echoes to: NetworkManager names "
              "none, and no route in the kernel's main table goes through one on wlan0")
TRY = ("try `--target ADDR`, an IPv4 address that answers pings through wlan0 (its gateway, or "
       "a host on its network)")


def unmeasured(link: F.Link) -> F.Link:
    """The link as diagnose leaves it when it found no gateway to echo."""
    link.echoes.clear()
    link.latency_method, link.latency_try = NO_GATEWAY, TRY
    return link


def test_without_latency_a_run_without_scans_is_not_called_steady(ssid):
    a = F.analyse(unmeasured(recorded(ssid, [])), 60.0)
    lines = F.verdict(a, guard(installed=True, running=True, state="idle"))
    assert lines == [f"No Wi-Fi scan ran on wlan0; cannot tell whether it stalled for another "
                     f"reason: no latency measured because {NO_GATEWAY}; {TRY}."]
    assert not any("steady" in line for line in lines)


def test_without_latency_scans_are_neither_blamed_nor_cleared(ssid):
    link = unmeasured(recorded(ssid, [(20.0, started((ssid,))), (27.0, ended())]))
    lines = F.verdict(F.analyse(link, 60.0), guard())
    assert lines[0] == (f"Cannot tell whether the 1 scan on wlan0 stalled it: no latency "
                        f"measured because {NO_GATEWAY}; {TRY}.")
    assert lines[2].startswith("1 scan by wpa_supplicant's bgscan (the periodic scan "
                               "NetworkManager configures) (7.0 s off the channel): install")
    assert not any("spike" in line for line in lines)


def test_echoes_nobody_answered_are_no_measurement(ssid):
    link = recorded(ssid, [(20.0, started((ssid,))), (27.0, ended())], rtt=lambda t, s: None)
    link.target = "192.168.1.1"
    a = F.analyse(link, 60.0)
    assert a.median_ms is None and a.echoes == 300
    lines = F.verdict(a, guard())
    assert lines[0] == ("Cannot tell whether the 1 scan on wlan0 stalled it: no latency measured "
                        "because none of the 300 echoes to 192.168.1.1 was answered (it may not "
                        f"answer pings); {TRY}.")
    assert "Latency: not measured (none of the 300 echoes" in DOC.report(recording(link))


@pytest.mark.parametrize("measured", [True, False])
def test_without_the_kernels_scan_events_no_scan_is_counted(ssid, measured):
    link = recorded(ssid, [], rtt=lambda t, s: 90.0 if int(t) % 10 == 0 else 2.0)
    if not measured:
        unmeasured(link)
    rec = recording(link)
    rec.scans_seen = False
    rec.scan_events_source = "not seen: this kernel has no Wi-Fi (cfg80211)"
    lines = DOC.as_json(rec)["links"][0]["verdict"]
    assert lines[0] == ("Cannot tell whether Wi-Fi scans ran on wlan0: the kernel's scan events "
                        "were not seen (this kernel has no Wi-Fi (cfg80211)).")
    assert lines[1] == ("Its 30 latency spikes in 300 echoes can be neither tied to scans nor "
                        "cleared of them." if measured else
                        f"Cannot tell whether wlan0 stalled either: no latency measured because "
                        f"{NO_GATEWAY}; {TRY}.")
    assert not any("No Wi-Fi scan ran" in line for line in lines)


def test_throughput_that_was_not_counted_is_not_called_idle(ssid):
    link = recorded(ssid, [(20.0, started((ssid,))), (27.0, ended())])
    link.seconds.clear()
    lines = F.verdict(F.analyse(link, 60.0), guard())
    assert ("What scans cost in throughput cannot be told: the byte counters of wlan0 could not "
            "be read.") in lines
    assert not any("idle" in line for line in lines)
    whole = recorded(ssid, [(0.0, started((ssid,)))])  # one scan the whole run long
    lines = F.verdict(F.analyse(whole, 60.0), guard())
    assert ("What scans cost in throughput cannot be told: no second of the run was free of "
            "scans to compare with.") in lines


def test_recorder_ignores_other_interfaces_and_counts_ends_it_never_saw_start():
    clock = Clock()
    t = target(HOME)
    rec = D.Recorder([t], clock)
    rec.on_event(ended(), 1000.5, 1.0)
    rec.on_event(started((HOME,), index=9), 1001.0, 2.0)
    rec.on_event(started((HOME,)), 1002.0, 3.0)
    assert rec.unmatched_ends == 1 and len(t.link.scans) == 1
    scan = t.link.scans[0]
    assert scan.outcome == "running" and scan.until(30.0) == 30.0 and scan.duration is None


def test_every_source_gets_its_own_figures_and_advice(ssid):
    ev = A.Evidence(current_ssid=ssid, geoclue_pid=77, own_scans=[1_700_000_040.0],
                    client_requests=[A.Request(1_700_000_029.5, "gnome-shell", 1500, "ann")])
    link = recorded(ssid, [(10.0, started((ssid,))), (15.0, ended()),
                           (30.0, started((b"",))), (33.0, ended()),
                           (40.0, started((b"",))), (43.0, ended()),
                           (50.0, started((ssid, b""))), (50.1, ended("aborted"))], evidence=ev)
    assert [s.source for s in link.scans] == [A.BGSCAN, A.NETWORKMANAGER, A.GUARD, A.DIRECT]
    assert link.scans[1].name == "gnome-shell" and link.scans[3].name == "GeoClue"
    a = F.analyse(link, 60.0)
    assert set(a.by_source) == {A.BGSCAN, A.NETWORKMANAGER, A.DIRECT, A.GUARD}
    text = "\n".join(F.verdict(a, guard(installed=True, running=True, state="idle")))
    assert "gnome-shell" in text and "defer_client_scans" in text
    assert "GeoClue" in text and "abort_scans" in text
    assert "roam" in text and "scanguardctl hold" in text


# ---- the report and JSON ---------------------------------------------------------------------

def recording(link: F.Link, **guard_kw) -> F.Recording:
    rec = F.Recording(started_at=time.time(), duration=60.0, links=[link],
                      scan_events_source="seen in the kernel's nl80211 scan events")
    rec.guards["wlan0"] = guard(**guard_kw)
    link.bgscan = "simple:30:-65:300"
    link.bgscan_source = "read from wpa_supplicant"
    link.bgscan_words = DOC.explain_bgscan(link.bgscan, access_points=2)
    return rec


def test_report_leads_with_the_verdict_and_shows_users_text(ssid):
    link = recorded(ssid, [(20.0, started((ssid,))), (27.0, ended())])
    text = DOC.report(recording(link))
    lines = text.splitlines()
    assert lines[2] == f"== wlan0 ('{ssid.decode()}')"
    assert lines[3].startswith("* Scans cause the stalls")
    assert "every 5 min while the signal is at or above -65 dBm" in text
    assert "how we know: it probed only the current network's SSID" in text
    assert f"probed '{ssid.decode()}'" in text
    assert "Spike: a spike is an echo that took at least 2 times the median" in text


def test_json_is_strict_and_complete(ssid):
    link = recorded(ssid, [(20.0, started((ssid,))), (27.0, ended())])
    link.echoes.append(F.Echo(59.9, None))
    doc = DOC.as_json(recording(link, installed=True, running=True, state="idle",
                              states_seen=["idle"]))
    text = json.dumps(doc, allow_nan=False, ensure_ascii=False)
    back = json.loads(text)
    entry = back["links"][0]
    assert entry["ssid"] == ssid.decode()
    assert entry["scans"][0]["source"] == "bgscan" and entry["scans"][0]["ssids"] == [ssid.decode()]
    assert entry["summary"]["spikes_in_scans"] == 35
    assert entry["echoes"][-1] == [59.9, None]
    assert entry["guard"]["states_seen"] == ["idle"]


def test_json_without_echoes_has_nulls_not_nan():
    link = F.Link(interface="wlan0")
    rec = F.Recording(started_at=1.0, duration=5.0, links=[link])
    doc = DOC.as_json(rec)
    json.dumps(doc, allow_nan=False)
    assert doc["links"][0]["summary"]["median_rtt_ms"] is None
    assert doc["links"][0]["summary"]["inside_share"] is None
    assert doc["links"][0]["verdict"] == [
        "No Wi-Fi scan ran on wlan0; cannot tell whether it stalled for another reason: no "
        "latency measured because no echo was sent."]


def test_explain_bgscan():
    assert "every 5 min" in DOC.explain_bgscan(DOC.NM_MULTI)
    assert "more than one access point" in DOC.explain_bgscan(DOC.NM_MULTI, access_points=3)
    assert "3 access points" in DOC.explain_bgscan(DOC.NM_MULTI, access_points=3)
    assert "once a day" in DOC.explain_bgscan(DOC.NM_SINGLE)
    assert "single access point" in DOC.explain_bgscan(DOC.NM_SINGLE)
    assert "nm-scanguard suspended" in DOC.explain_bgscan("", suspended_by_guard=True)
    assert DOC.explain_bgscan("") == "background scans are off"
    assert "no bgscan at all" in DOC.explain_bgscan(None)
    assert "learn module" in DOC.explain_bgscan("learn:10:-60:600:/tmp/x")
    assert "not numbers" in DOC.explain_bgscan("simple:a:b:c")
    assert "cannot explain" in DOC.explain_bgscan("Café ☕:1")


# ---- what the system shows any user ----------------------------------------------------------

ROUTE_HEAD = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\n"


def test_the_wifi_gateway_is_found_when_a_vpn_owns_the_default_route(tmp_path):
    """tun0 has the default route; wlan0 keeps only its network and the route to the VPN's
    server (203.0.113.9) through its gateway 192.168.1.1."""
    route = tmp_path / "route"
    route.write_text(ROUTE_HEAD
                     + "tun0\t00000000\t00000000\t0001\t0\t0\t50\t00000000\n"
                     + "wlan0\t0001A8C0\t00000000\t0001\t0\t0\t600\t00FFFFFF\n"
                     + "wlan0\t097100CB\t0101A8C0\t0007\t0\t0\t600\tFFFFFFFF\n")
    assert T.route_gateway("wlan0", str(route)) == "192.168.1.1"
    assert T.route_gateway("tun0", str(route)) == ""  # a default route without a gateway


def test_the_default_route_with_the_lowest_metric_comes_first(tmp_path):
    route = tmp_path / "route"
    route.write_text(ROUTE_HEAD
                     + "wlan0\t097100CB\t0301A8C0\t0007\t0\t0\t10\tFFFFFFFF\n"
                     + "wlan0\t00000000\t0201A8C0\t0003\t0\t0\t700\t00000000\n"
                     + "wlan0\t00000000\t0101A8C0\t0003\t0\t0\t600\t00000000\n"
                     + "wlan0\t00000000\t0401A8C0\t0002\t0\t0\t1\t00000000\n")  # not up
    assert T.route_gateway("wlan0", str(route)) == "192.168.1.1"


def test_route_gateway(tmp_path):
    route = tmp_path / "route"
    route.write_text("Iface\tDestination\tGateway \tFlags\n"
                     "eth0\t00000000\t0101A8C0\t0003\n"
                     "wlan0\t0000A8C0\t00000000\t0001\n"
                     "wlan0\t00000000\t0100000A\t0003\n")
    assert T.route_gateway("wlan0", str(route)) == "10.0.0.1"
    assert T.route_gateway("eth0", str(route)) == "192.168.1.1"
    assert T.route_gateway("wlan1", str(route)) == ""
    assert T.route_gateway("wlan0", str(tmp_path / "missing")) == ""


def test_proc_wireless(tmp_path):
    f = tmp_path / "wireless"
    f.write_text("Inter-| sta-|   Quality        |   Discarded packets\n"
                 " face | tus | link level noise |  nwid  crypt   frag  retry   misc | beacon | 22\n"
                 " wlan0: 0000   38.  -72.  -256        0      0      0      0      0        0\n")
    assert D.proc_wireless_dbm("wlan0", str(f)) == -72
    assert D.proc_wireless_dbm("wlan1", str(f)) is None


def test_geoclue_pid(tmp_path):
    for pid, comm in ((12, "bash"), (812, "geoclue"), (13, "geoclue-demo")):
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "comm").write_text(comm + "\n")
    (tmp_path / "self").mkdir()
    assert D.geoclue_pid(str(tmp_path)) == 812
    assert D.geoclue_pid(str(tmp_path / "none")) is None


def test_echo_packets_and_their_checksum():
    assert PING.echo_reply_seq(PING.echo_request(7)) is None  # a request is no reply
    reply = bytes([0, 0]) + PING.echo_request(7)[2:]
    assert PING.echo_reply_seq(reply) == 7
    raw = PING.echo_request(9, ident=0x1234)
    assert PING.checksum(raw) == 0  # a correct checksum sums to zero
    ip_header = bytes([0x45]) + bytes(19)
    assert PING.echo_reply_seq(ip_header + bytes([0, 0]) + raw[2:], ident=0x1234) == 9
    assert PING.echo_reply_seq(ip_header + bytes([0, 0]) + raw[2:], ident=0x9999) is None
    assert PING.echo_reply_seq(b"\x00") is None


def test_pinger_measures_loopback():
    async def go() -> list[F.Echo]:
        echoes: list[F.Echo] = []
        try:
            p = PING.Pinger("127.0.0.1", echoes, time.monotonic)
        except PermissionError:  # ping_group_range excludes us: the raw socket, as root
            p = PING.Pinger("127.0.0.1", echoes, time.monotonic, raw=True)
        for _ in range(4):
            p.send()
            await asyncio.sleep(0.05)
        p.expire(final=True)
        p.close()
        return echoes

    echoes = asyncio.run(go())
    assert len(echoes) == 4
    assert all(e.rtt_ms is not None and 0 < e.rtt_ms < 50 for e in echoes)


def test_the_echoes_leave_through_the_interface_they_measure():
    """Bound to lo, the echoes to 127.0.0.1 are answered; bound to an interface that does not
    lead there, none is: SO_BINDTODEVICE overrides the routing table, as for a VPN's route."""
    import socket

    async def go(device: str) -> tuple[bool, list[F.Echo]]:
        echoes: list[F.Echo] = []
        try:
            p = PING.Pinger("127.0.0.1", echoes, time.monotonic, device=device)
        except PermissionError:  # ping_group_range excludes us: the raw socket, as root
            p = PING.Pinger("127.0.0.1", echoes, time.monotonic, raw=True, device=device)
        for _ in range(3):
            p.send()
            await asyncio.sleep(0.05)
        p.expire(final=True)
        p.close()
        return p.bound, echoes

    bound, echoes = asyncio.run(go("lo"))
    assert bound and len(echoes) == 3 and all(e.rtt_ms is not None for e in echoes)
    other = next((name for _, name in socket.if_nameindex() if name != "lo"), None)
    if other is None:
        pytest.skip("no interface beside lo")
    bound, echoes = asyncio.run(go(other))
    assert bound and not any(e.rtt_ms is not None for e in echoes)


@pytest.mark.parametrize("name", ["wlan0", "wlé0"])
def test_no_gateway_says_why_and_what_to_try(name):
    t = T.Target(interface=name, ifindex=3)
    assert PING.open_pinger(t, time.monotonic) is None
    assert t.link.latency_method == NO_GATEWAY.replace("wlan0", name)
    assert t.link.latency_try == TRY.replace("wlan0", name)
    assert t.link.target == ""


# ---- the command line ------------------------------------------------------------------------

def test_parser_defaults_and_bad_seconds(capsys):
    args = build_parser().parse_args(["diagnose"])
    assert args.seconds == 120 and not args.json and args.plot == ""
    for bad in ("0", "-5", "nan", "inf", "Café ☕"):
        with pytest.raises(SystemExit):
            build_parser().parse_args(["diagnose", "--seconds", bad])
        assert "seconds" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["Café ☕", "192.168.1", "192.168.001.1", "224.0.0.1",
                                  "0.0.0.0", "255.255.255.255", "router.home"])
def test_target_is_the_address_of_one_host(monkeypatch, capsys, text):
    monkeypatch.setattr(D, "run", lambda *a: pytest.fail("recorded"))
    assert refused(["diagnose", "--target", text]) == 2
    err = capsys.readouterr().err
    assert f"argument --target: '{text}' is not" in err and "give one such as 192.168.1.1" in err


def test_target_reaches_the_recording(monkeypatch, capsys, ssid):
    seen = []

    def run(seconds, only, on_terminal, address):
        seen.append(address)
        return recording(recorded(ssid, []))

    monkeypatch.setattr(D, "run", run)
    assert main(["diagnose", "--seconds", "1", "--target", "192.168.1.1"]) == 0
    assert main(["diagnose", "--seconds", "1"]) == 0
    assert seen == ["192.168.1.1", ""]


def test_plot_without_matplotlib_says_what_to_install(monkeypatch, capsys):
    import builtins
    real = builtins.__import__

    def no_matplotlib(name, *a, **kw):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    assert refused(["diagnose", "--plot", "/tmp/x.png", "--seconds", "1"]) == 2
    assert ("argument --plot: matplotlib is not installed: as root, apt install "
            "python3-matplotlib (or leave out --plot" in capsys.readouterr().err)


def refused(argv: list[str]) -> int | str | None:
    """The exit code of a command line that argparse refuses before anything runs."""
    with pytest.raises(SystemExit) as exited:
        main(argv)
    return exited.value.code


@pytest.mark.plot
def test_plot_into_a_missing_folder_is_refused_before_recording(monkeypatch, capsys):
    monkeypatch.setattr(D, "run", lambda *a: pytest.fail("recorded"))
    assert refused(["diagnose", "--plot", "/nonexistent/Café ☕/x.png", "--seconds", "1"]) == 2
    assert ("argument --plot: cannot write the plot to '/nonexistent/Café ☕/x.png': the folder "
            "'/nonexistent/Café ☕' does not exist" in capsys.readouterr().err)


@pytest.mark.plot
def test_plot_is_drawn(tmp_path, ssid):
    from nm_scanguard.diagnose import plot
    link = recorded(ssid, [(20.0, started((ssid,))), (27.0, ended()),
                           (40.0, started((b"",))), (41.0, ended("aborted"))])
    link.echoes.append(F.Echo(21.0, None))  # a lost echo: drawn as an x at the top
    out = tmp_path / "diagnose.png"
    plot.draw(recording(link), str(out), plot.require())
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000


PNG = b"\x89PNG\r\n\x1a\n"


def plotted(tmp_path, ssid: bytes = CAFE) -> F.Recording:
    return recording(recorded(ssid, [(20.0, started((ssid,))), (27.0, ended())]))


@pytest.mark.parametrize("name", [r"$\frac$", r"$x^$ " + CAFE.decode(), "$$", r"a $\foo$ b"])
@pytest.mark.plot
def test_an_ssid_with_dollars_is_drawn_as_text_not_math(tmp_path, name):
    from nm_scanguard.diagnose import plot
    rec = plotted(tmp_path, name.encode())
    rec.links[0].interface = "wl$\\frac$"
    out = tmp_path / f"{CAFE.decode()}.png"
    plot.draw(rec, str(out), plot.require())
    assert out.read_bytes()[:8] == PNG


@pytest.mark.parametrize("scans", [0, 1])
@pytest.mark.plot
def test_a_plot_without_echoes_warns_of_no_empty_legend(tmp_path, caplog, ssid, scans):
    """Without answered echoes the latency panel has nothing labelled: no legend, and so no
    "No artists with labels found to put in legend" from matplotlib on a successful run."""
    import logging

    from nm_scanguard.diagnose import plot
    link = recorded(ssid, [(20.0, started((ssid,))), (27.0, ended())][:2 * scans])
    link.echoes.clear()
    out = tmp_path / f"{CAFE.decode()}.png"
    with caplog.at_level(logging.DEBUG):
        plot.draw(recording(link), str(out), plot.require())
    assert out.read_bytes()[:8] == PNG
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


@pytest.mark.parametrize("kind", ["symlink", "hardlink", "fifo"])
@pytest.mark.plot
def test_the_plot_is_never_written_through_a_link_or_into_a_pipe(tmp_path, kind):
    import os

    from nm_scanguard.diagnose import plot
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious " + CAFE)
    out = tmp_path / f"{CAFE.decode()}.png"
    if kind == "symlink":
        out.symlink_to(victim)
    elif kind == "hardlink":
        os.link(victim, out)
    else:
        os.mkfifo(out)
    with pytest.raises(plot.PlotError, match="not a plain file"):
        plot.check_writable(str(out))
    with pytest.raises(plot.PlotError, match="not a plain file"):
        plot.draw(plotted(tmp_path), str(out), plot.require())
    assert victim.read_bytes() == b"precious " + CAFE


@pytest.mark.plot
def test_an_existing_plot_is_overwritten_whole(tmp_path, ssid):
    from nm_scanguard.diagnose import plot
    out = tmp_path / f"{CAFE.decode()}.png"
    out.write_bytes(b"x" * 2_000_000)
    plot.check_writable(str(out))
    plot.draw(plotted(tmp_path, ssid), str(out), plot.require())
    data = out.read_bytes()
    assert data[:8] == PNG and b"x" * 1000 not in data


@pytest.mark.parametrize("name, magic", [("plot.svg", b"<?xml"), ("plot.PDF", b"%PDF"),
                                         ("plot", PNG), (f"{CAFE.decode()}.png", PNG)])
@pytest.mark.plot
def test_the_format_is_the_file_names_suffix(tmp_path, name, magic):
    from nm_scanguard.diagnose import plot
    out = tmp_path / name
    plot.draw(plotted(tmp_path), str(out), plot.require())
    assert out.read_bytes().startswith(magic)


@pytest.mark.plot
def test_a_suffix_matplotlib_cannot_write_is_refused_before_recording(monkeypatch, tmp_path,
                                                                     capsys):
    monkeypatch.setattr(D, "run", lambda *a: pytest.fail("recorded"))
    out = tmp_path / f"{CAFE.decode()}.doc"
    assert refused(["diagnose", "--plot", str(out), "--seconds", "1"]) == 2
    assert (f"argument --plot: cannot write the plot to '{out}': matplotlib does not write .doc "
            "files (it writes " in capsys.readouterr().err and not out.exists())


@pytest.mark.plot
def test_a_link_placed_during_the_recording_is_refused_and_the_report_still_printed(
        monkeypatch, tmp_path, capsys):
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    out = tmp_path / f"{CAFE.decode()}.png"

    def run(seconds, only, on_terminal, address):
        out.symlink_to(victim)  # after check_writable, as a race would
        return plotted(tmp_path)

    monkeypatch.setattr(D, "run", run)
    assert main(["diagnose", "--plot", str(out), "--seconds", "1"]) == 1
    captured = capsys.readouterr()
    assert captured.out.startswith("scanguardctl diagnose:") and "Scans cause" in captured.out
    assert "Plot:" not in captured.out and "not a plain file" in captured.err
    assert victim.read_bytes() == b"precious"


def test_a_guard_that_guarded_and_let_go_during_the_run_is_said_to_have_guarded():
    link = recorded(HOME, [])
    g = guard(installed=True, running=True, state="idle", states_seen=["guarding", "idle"])
    lines = F.verdict(F.analyse(link, 60.0), g)
    assert lines[1] == ("nm-scanguard was guarding this interface during the run: bgscan was "
                        "suspended.")
    assert "guarding then idle during the run" in DOC.guard_line(g)


class RefusingSupplicant:
    """wpa_supplicant's Debian policy to a user outside netdev: every call refused."""

    def __init__(self, _bus) -> None:
        pass

    async def interface(self, ifname: str) -> str:
        from nm_scanguard.peers.supplicant import SupplicantError
        raise SupplicantError("wpa_supplicant refused GetInterface(wlan0): Rejected send message",
                              "org.freedesktop.DBus.Error.AccessDenied")


@pytest.mark.parametrize("suspended", ["", "simple:30:-65:300"])
async def test_a_user_outside_netdev_is_told_why_bgscan_was_not_read(monkeypatch, tmp_path, suspended):
    monkeypatch.setattr(D, "Supplicant", RefusingSupplicant)
    monkeypatch.setattr(D, "proc_wireless_dbm", lambda name: None)
    t = target(CAFE)
    t.strength, t.access_points = 64, 2
    await D.read_supplicant(None, t, {"suspended_bgscan": suspended, "signal_dbm": -61})
    link = t.link
    if suspended:  # the guard's record stands in
        assert link.bgscan == "" and "reports it suspended NetworkManager's" in link.bgscan_source
        assert "every 5 min" in link.bgscan_words and "2 access points" in link.bgscan_words
    else:
        assert link.bgscan is None
        assert link.bgscan_source == ("not read (wpa_supplicant lets only root and group netdev "
                                      "read it)")
    assert (link.signal_dbm, link.signal_source) == (-61, "nm-scanguard")


# ---- the guard's scan requests: the caller's own, named ------------------------------------

def _guard_bus(monkeypatch, method_error: str | None):
    """The guard running, its property naming nobody, GetRecentScanRequests answering (or
    failing with `method_error`)."""
    public = [[10.0, "", 0, "", False]]
    own = [[10.0, "Café ☕", 4242, "Café ☕", False]]

    async def name_has_owner(_bus, _name):
        return True

    async def get_all(_bus, _dest, _path, _iface):
        return {"Devices": [], "RecentScanRequests": public}

    async def call(_bus, _dest, _path, _iface, member, *args, **kwargs):
        if member == "ListActivatableNames":
            return [[D.BUS_NAME]]
        assert member == "GetRecentScanRequests", member
        if method_error:
            raise D.BusError(method_error, "Café ☕ failed")
        return [own]

    monkeypatch.setattr(D, "name_has_owner", name_has_owner)
    monkeypatch.setattr(D, "get_all", get_all)
    monkeypatch.setattr(D, "call", call)
    return public, own


async def test_diagnose_names_the_users_own_scan_requests_from_the_method(monkeypatch):
    _, own = _guard_bus(monkeypatch, None)
    installed, running, props, detail = await D.guard_properties(None)
    assert (installed, running, detail) == (True, True, "")
    assert props["RecentScanRequests"] == own
    evidence = D.evidence_from(props, "wlan0", b"home", None)
    assert evidence.client_requests == [A.Request(at=10.0, program="Café ☕", pid=4242, user="Café ☕")]


async def test_diagnose_falls_back_to_the_property_of_an_older_daemon(monkeypatch):
    public, _ = _guard_bus(monkeypatch, "org.freedesktop.DBus.Error.UnknownMethod")
    _, _, props, detail = await D.guard_properties(None)
    assert props["RecentScanRequests"] == public and detail == ""


async def test_diagnose_says_when_the_scan_requests_could_not_be_read(monkeypatch):
    public, _ = _guard_bus(monkeypatch, "org.freedesktop.DBus.Error.NoReply")
    _, _, props, detail = await D.guard_properties(None)
    assert props["RecentScanRequests"] == public and props["Devices"] == []
    assert detail == "its scan requests could not be read (Café ☕ failed)"


def test_docs_quote_the_advice_and_verdicts_the_code_prints():
    """docs/diagnose.md's example report and its guard-on quote, against the code's texts: the
    example's advice for bgscan without the guard, and the sentences of a guarded run."""
    from pathlib import Path

    from nm_scanguard.diagnose.findings import ADVICE_GUARD_OFF, GUARDED_DURING_RUN

    doc = (Path(__file__).resolve().parents[3] / "docs" / "diagnose.md").read_text(encoding="utf-8")
    example = next(block for block in doc.split("```")[1::2] if "\n== wlan1" in block)
    bullets = [" ".join(b.split()) for b in re.split(r"\n\* ", example)[1:]]
    bgscan = next(b for b in bullets if "bgscan (the periodic scan" in b)
    assert bgscan.split(" spikes): ", 1)[1].split("\n")[0].startswith(
        " ".join(ADVICE_GUARD_OFF["not-installed"].split()))
    quoted = " ".join(doc.split())
    assert f'"No Wi-Fi scan ran on wlan1, and latency stayed steady. {GUARDED_DURING_RUN}"' in quoted
