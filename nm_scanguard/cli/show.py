"""scanguardctl status and monitor: what the guard does on each interface, once or as it
changes."""

from __future__ import annotations

import argparse
import asyncio
import signal
import time
from typing import Any

from ..attribution import DESCRIPTIONS
from ..dbuslib import Message, MessageType
from ..names import BUS_NAME as NAME
from ..names import IFACE, PATH
from ..peers.bus import (
    NameOwners,
    add_match,
    unwrap,
)
from ..status import FIELDS, aborted_total, device_line, duration, requests, who_scanned
from ..text import NAME_CHARS, shown
from .common import Failure, active_holds, connect, json_text, properties
from .off import OFF_EXIT, off_by_settings

# ---- status ----------------------------------------------------------------------------------

def _ago(since: float) -> str:
    return duration(time.time() - since)


GEOCLUE_HINT = ("scans ran while bgscan was suspended and the polkit rule refused no program's "
                "request to NetworkManager: most likely GeoClue (location services: automatic "
                "time zone, Night Light schedule, weather), or root (e.g. sudo nmcli device wifi "
                "rescan), about whom polkit is never asked; to turn location off or down, see "
                "/usr/share/doc/nm-scanguard/docs/scan-deferral.md, \"GeoClue is never refused\"")


def scan_hint(d: dict[str, Any]) -> str | None:
    """Who asked for the scans bgscan suspension could not stop, where we can tell.  With no
    refused client request seen, the likeliest source is GeoClue, which calls wpa_supplicant
    directly and is never refused (refusing would end its Wi-Fi location for the session)."""
    if not d.get("scans_guarding"):
        return None
    aborted = aborted_total(d)
    cut = f"; abort_scans cut {aborted} of them short" if aborted else ""
    if not d.get("settings", {}).get("defer_client_scans", True):
        return ("defer_client_scans is off for this connection, so desktop shells, widgets and "
                "nmcli may scan through NetworkManager while guarding, and GeoClue directly" + cut)
    if not d.get("scan_requests_deferred"):
        return GEOCLUE_HINT + cut
    return f"scans that still ran while guarding came from {who_scanned(True)}" + cut


def _channels(channels: list[int]) -> str:
    return ", ".join(f"{c}" for c in channels) + " MHz" if channels else "every channel"


def roam_line(d: dict[str, Any]) -> str | None:
    """What the guard knows for roaming: the network's other access points, its own scans."""
    cands = [c for c in d.get("roam_candidates", []) if not c.get("current")]
    own = d.get("own_scan_details", [])
    if not cands and not own:
        return None
    known = (f"{len(cands)} other access point(s) of this network known: "
             + ", ".join(f"{c.get('bssid', '?')} ({c.get('frequency', '?')} MHz, "
                         f"{c.get('signal', '?')} dBm)" for c in cands)) if cands \
        else "no other access point of this network known"
    parts = [known]
    if own:
        last = own[-1]
        parts.append(f"{len(own)} scan(s) of its own, the last {last.get('kind', '?')} of "
                     f"{_channels(last.get('channels', []))}, {_ago(last.get('at', 0.0))} ago")
    if d.get("roams"):
        parts.append(f"asked wpa_supplicant to roam {d['roams']} time(s)")
    if d.get("last_move"):
        parts.append(f"last move {shown(d['last_move'])}")
    return "roaming: " + "; ".join(parts)


def own_scan_news(now: dict[str, Any], before: dict[str, Any]) -> list[str]:
    """The guard's own scans and Roams since the last update, for `monitor`."""
    seen = {o.get("at") for o in before.get("own_scan_details", [])}
    out = [f"the guard's own {o.get('kind', '?')} scan of {_channels(o.get('channels', []))} "
           "(roaming)" for o in now.get("own_scan_details", []) if o.get("at") not in seen]
    if now.get("roams", 0) > before.get("roams", now.get("roams", 0)):
        out.append("the guard asked wpa_supplicant to roam to a stronger access point")
    return out


def hold_line(h: dict[str, Any]) -> str:
    """One hold in one line; every field is the holder's or the daemon's, so each is escaped.
    Another user's hold comes without holder and reason (GetActiveHolds)."""
    where = shown(h.get("interface"), NAME_CHARS) if h.get("interface") else "every interface"
    if "caller_uid" not in h:
        return (f"hold {shown(h.get('cookie'))} by another user on {where} for "
                f"{_ago(h.get('since', time.time()))}")
    who = shown(h.get("application_id") or h.get("caller", "?"))
    reason = f": {shown(h['reason'])}" if h.get("reason") else ""
    return (f"hold {shown(h.get('cookie'))} by {who} (uid {shown(h.get('caller_uid', '?'))}) on "
            f"{where} for {_ago(h.get('since', time.time()))}{reason}")


def status_json(props: dict[str, Any]) -> dict[str, Any]:
    """The stable --json form: every device has every key (signal_dbm null when unknown)."""
    devices = []
    for d in props.get("Devices", []):
        d = dict(d)
        for key in FIELDS:  # a key the daemon left out (signal_dbm when unknown) is null
            d.setdefault(key, None)
        devices.append(d)
    return {"version": props.get("Version", ""), "off": props.get("Off", ""), "devices": devices,
            "holds": list(props.get("ActiveHolds", []))}


# json.dumps escapes C0 controls only; DEL, the C1 controls (0x9b is a CSI) and format
# characters such as U+202E would reach the terminal raw.
async def cmd_status(args: argparse.Namespace) -> int:
    bus = await connect()
    try:
        props = await properties(bus)
    finally:
        bus.disconnect()
    # Off by the administrator's choice (enabled = no) is not an error, but a script asking
    # whether the guard works must learn it: the exit status of a masked unit's status.
    off = props.get("Off", "")
    done = OFF_EXIT if off else 0
    if args.json:
        print(json_text(status_json(props)))
        return done
    devices, holds = props.get("Devices", []), props.get("ActiveHolds", [])
    if off:
        print(off_by_settings(off))
    elif not devices:
        print("no activated Wi-Fi connection: nothing to guard")
    for d in devices:
        print(device_line(d))
        for extra in (roam_line(d), scan_hint(d)):
            if extra:
                print(f"  {shown(d.get('interface', '?'), NAME_CHARS)}: {extra}")
    for h in holds:
        print(hold_line(h))
    return done


# ---- monitor ---------------------------------------------------------------------------------

def _stamp() -> str:
    return time.strftime("%H:%M:%S")


async def cmd_monitor(args: argparse.Namespace) -> int:
    bus = await connect()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    last: dict[str, dict[str, Any]] = {}
    holds: set[int] = set()

    def show_devices(devices: list[dict[str, Any]]) -> None:
        for d in devices:
            name = d.get("interface", "?")
            shown_name = shown(name, NAME_CHARS)
            before = last.get(name, {})
            extra = d.get("scans_guarding", 0) - before.get("scans_guarding", d.get("scans_guarding", 0))
            refused = (d.get("scan_requests_deferred", 0)
                       - before.get("scan_requests_deferred", d.get("scan_requests_deferred", 0)))
            if refused > 0:
                print(f"{_stamp()} {shown_name}: {requests(refused)} for a scan refused (while "
                      "guarding: desktop shell, widget or nmcli)", flush=True)
            cut = aborted_total(d) - aborted_total(before or d)
            if cut > 0:
                print(f"{_stamp()} {shown_name}: aborted {cut} scan(s) that took the radio off the "
                      "channel while guarding (abort_scans)", flush=True)
            for text in own_scan_news(d, before) if before else []:
                print(f"{_stamp()} {shown_name}: {text}", flush=True)
            labelled = _new_scans(d, before)
            for text in labelled:
                print(f"{_stamp()} {shown_name}: {text}", flush=True)
            if extra > 0 and not labelled:
                who = who_scanned(bool(d.get("deferring_scans") or before.get("deferring_scans")))
                print(f"{_stamp()} {shown_name}: {extra} scan(s) while guarding, requested by {who}",
                      flush=True)
            last[name] = d
            print(f"{_stamp()} {device_line(d)}", flush=True)
        for name in [n for n in last if n not in {d.get('interface') for d in devices}]:
            del last[name]
            print(f"{_stamp()} {shown(name, NAME_CHARS)}: no longer guarded (disconnected)",
                  flush=True)

    def show_holds(active: list[dict[str, Any]]) -> None:
        now = {h["cookie"]: h for h in active}
        for cookie in now.keys() - holds:
            print(f"{_stamp()} {hold_line(now[cookie])}", flush=True)
        for cookie in holds - now.keys():
            print(f"{_stamp()} hold {shown(cookie)} released", flush=True)
        holds.clear()
        holds.update(now)

    # Any local user can send a signal to this connection: only the bus's NameOwnerChanged and
    # the signals of the connection that owns the service's name are shown.
    owners = NameOwners((NAME,))

    closed: list[OSError] = []  # standard output's write error (output.run_main reports it)

    def on_message(msg: Message) -> None:
        # The library would log an exception from a handler and go on: output that cannot be
        # written (monitor | head, > /dev/full) ends the monitor instead.
        try:
            show(msg)
        except OSError as e:
            closed.append(e)
            stop.set()

    def show(msg: Message) -> None:
        if msg.message_type != MessageType.SIGNAL:
            return
        if msg.member == "NameOwnerChanged" and msg.interface == "org.freedesktop.DBus":
            change = owners.changed(msg)
            if change is not None:
                print(f"{_stamp()} scanguard service {'started' if change[1] else 'stopped'}",
                      flush=True)
        elif msg.path != PATH or not owners.sent_by(msg, NAME):
            return
        elif msg.member == "StateChanged":
            ifname, state, reason = msg.body
            print(f"{_stamp()} {shown(ifname, NAME_CHARS)}: -> {shown(state, NAME_CHARS)} "
                  f"({shown(reason)})", flush=True)
        elif msg.member == "PropertiesChanged" and msg.body[0] == IFACE:
            changed = unwrap(msg.body[1])
            if "Off" in changed:
                print(f"{_stamp()} " + (off_by_settings(changed["Off"]) if changed["Off"]
                                        else "nm-scanguard is on again"), flush=True)
            if "Devices" in changed:
                show_devices(changed["Devices"])
            if "ActiveHolds" in changed:
                task = asyncio.ensure_future(refresh_holds(changed["ActiveHolds"]))
                pending.add(task)  # kept until done: the loop holds tasks weakly
                task.add_done_callback(pending.discard)

    # The property names nobody: each change is shown as GetActiveHolds gives it, which names
    # this user's own holds.  One at a time, each asking afresh, so the last shown is current.
    refreshing = asyncio.Lock()
    pending: set[asyncio.Future[None]] = set()

    async def refresh_holds(public: list[dict[str, Any]]) -> None:
        async with refreshing:
            try:
                named = await active_holds(bus, public)
            except Failure:  # the service left meanwhile: NameOwnerChanged says so
                named = public
            try:
                show_holds(named)
            except OSError as e:
                closed.append(e)
                stop.set()

    bus.add_message_handler(on_message)
    try:
        for rule in (f"type='signal',sender='{NAME}',path='{PATH}'",
                     "type='signal',sender='org.freedesktop.DBus',member='NameOwnerChanged',"
                     f"arg0='{NAME}'"):
            await add_match(bus, rule)
        await owners.resolve(bus)
        props = await properties(bus)
        print(f"{_stamp()} monitoring nm-scanguard {shown(props.get('Version', ''))}; Ctrl-C to stop",
              flush=True)
        if props.get("Off"):
            print(f"{_stamp()} {off_by_settings(props['Off'])}", flush=True)
        show_devices(props.get("Devices", []))
        show_holds(props.get("ActiveHolds", []))
        await stop.wait()
    finally:
        for task in list(pending):
            task.cancel()
        bus.disconnect()
    if closed:
        raise closed[0]
    return 0


def _new_scans(now: dict[str, Any], before: dict[str, Any]) -> list[str]:
    """One line per source whose count of scans grew since the last Devices entry: the
    newest scan's label when it was the only one, else the source and how many."""
    if not before:
        return []
    was, counts = before.get("scans_by_source") or {}, now.get("scans_by_source") or {}
    grown = {k: int(v) - int(was.get(k, 0)) for k, v in counts.items() if int(v) > int(was.get(k, 0))}
    if len(grown) == 1 and sum(grown.values()) == 1 and now.get("last_scan"):
        return [f"a scan by {shown(now['last_scan'])}"]
    return [f"{n} scan(s) by {shown(DESCRIPTIONS.get(k, k))}" for k, n in sorted(grown.items())]
