"""What the service says about one interface: the `Devices` entry, defined once.

Each field carries its D-Bus type; the bus API marshals from it, scanguardctl reads with it,
and a test holds it against the XML's documentation.  Texts that come from users or peers
(profile names, reasons, each problem in `error`) are cut to `MAX_TEXT` characters so that no
single message can grow without bound, and escaped (`shown`) wherever a line shows them to a
person.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .dbuslib import Variant
from .text import MAX_TEXT, NAME_CHARS, cut, shown

# `error` holds every problem an interface has at once, one per kind (problems.KINDS, at most
# MAX_PROBLEMS), each cut to MAX_TEXT: a state directory that cannot be written gives two (the
# journal and the scan-deferral file), and neither may push the other out.
MAX_PROBLEMS = 9
ERROR_CHARS = MAX_PROBLEMS * (MAX_TEXT + 2)


# What each state word means, in the words of `scanguardctl status --help` and scanguardctl(1);
# the D-Bus XML documents the same words (a test holds the three to the policy's states).
STATE_MEANINGS = {
    "idle": "the link is not busy and nothing holds it: bgscan runs as NetworkManager set it",
    "guarding": "the link is busy: bgscan is suspended and other programs' scans are refused "
                "or aborted",
    "held": "an application holds it (scanguardctl hold): bgscan is suspended whatever the "
            "traffic",
    "roaming": "busy or held with the signal below signal_floor_dbm: the guard scans the "
               "channels of the network's other known access points itself, bgscan still "
               "suspended; a few seconds at most",
    "released-weak-signal": "busy or held, but the signal is below signal_floor_dbm: bgscan "
                            "is back on so that wpa_supplicant can roam (roam_scans = full, or "
                            "targeted roaming found no better access point)",
    "disabled": "enabled = no for this connection, or its profile cannot be read (the problem "
                "says how to fix it), or nm-scanguard is off (enabled = no in the settings "
                "file): the guard leaves it alone",
    "no-bgscan": "it would guard, but the network has no bgscan to suspend (e.g. a profile "
                 "locked to one BSSID); other programs' scans are still refused",
    "error": "it would guard, but suspending bgscan failed, so bgscan runs (other programs' "
             "scans are still refused); or restoring bgscan failed, so it stays off until a try "
             "succeeds; the problem says why, and it is tried again at each sample",
}


def state_words() -> str:
    """The states and their meanings as one paragraph of help text."""
    return "States: " + "; ".join(f"{word}: {meaning}" for word, meaning in STATE_MEANINGS.items()) + "."


def device_line(d: Mapping[str, Any], *, connection: bool = True, age: bool = True) -> str:
    """One interface's status in one line, from its Devices entry (the keys of DeviceStatus):
    the one wording of `scanguardctl status` and `monitor` and of the daemon's STATUS= line in
    `systemctl status`, which leaves out the connection's name and how long the state has
    lasted (`connection=False, age=False`: an idle line that does not change is not re-sent, and
    systemd shows when the unit's status changed)."""
    name = shown(d.get("interface", "?"), NAME_CHARS)
    conn = d.get("connection_id") if connection else None
    head = f"{name} ('{shown(conn, NAME_CHARS)}')" if conn else name
    state = shown(d.get("state", "?"), NAME_CHARS)
    parts = [f"rx {d.get('rx_bps', 0) / 1e6:.1f} Mbit/s", f"tx {d.get('tx_bps', 0) / 1e6:.1f} Mbit/s"]
    if d.get("signal_dbm") is not None:
        parts.append(f"{d['signal_dbm']} dBm")
    if d.get("suspended_bgscan"):
        parts.append("bgscan suspended")
    n = d.get("scans_guarding", 0)
    if state in ("guarding", "held") or n:
        parts.append(f"{n} scan{'s' if n != 1 else ''} while guarding")
    aborted = aborted_total(d)
    if aborted:
        parts.append(f"{aborted} aborted")
    deferred = d.get("scan_requests_deferred", 0)
    if d.get("deferring_scans"):
        parts.append(f"client scans refused ({requests(deferred)} so far)")
    elif deferred:
        parts.append(f"{requests(deferred)} for scans refused while guarding")
    since = f" for {duration(time.time() - d.get('since', time.time()))}" if age else ""
    text = f"{head}: {state}{since} ({shown(d.get('reason', ''))}); " + ", ".join(parts)
    if d.get("error"):
        text += f"; problem: {shown(d['error'], ERROR_CHARS)}"
    return text


def aborted_total(d: Mapping[str, Any]) -> int:
    """How many scans the guard aborted on this interface (its scans_aborted, summed)."""
    counts = d.get("scans_aborted") or {}
    return sum(int(v) for v in counts.values()) if isinstance(counts, Mapping) else 0


def requests(n: int) -> str:
    return f"{n} request{'s' if n != 1 else ''}"


def who_scanned(deferring: bool) -> str:
    """Who asked for a scan that ran while bgscan was suspended, as far as we can tell: the
    one wording of the daemon's log, `scanguardctl monitor` and the status hint."""
    if deferring:
        return ("root (e.g. sudo nmcli device wifi rescan), or a program that calls "
                "wpa_supplicant directly, such as GeoClue (location services)")
    return ("someone else: a desktop shell, widget or nmcli through NetworkManager, or GeoClue "
            "directly")


def _typed(signature: str, default: Any = dataclasses.MISSING, limit: int = MAX_TEXT) -> Any:
    """A field of D-Bus type `signature`; a text is cut to `limit` characters on the bus."""
    metadata = {"dbus": signature, "limit": limit}
    if isinstance(default, (dict, list)):
        return field(default_factory=type(default), metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass
class DeviceStatus:
    interface: str = _typed("s")
    state: str = _typed("s")
    reason: str = _typed("s", "")
    since: float = _typed("d", 0.0)
    rx_bps: float = _typed("d", 0.0)
    tx_bps: float = _typed("d", 0.0)
    pps: float = _typed("d", 0.0)
    signal_dbm: float | None = _typed("i", None)  # absent on the bus when unknown
    suspended_bgscan: str = _typed("s", "")
    network: str = _typed("s", "")
    scans_guarding: int = _typed("u", 0)
    scans_idle: int = _typed("u", 0)
    deferring_scans: bool = _typed("b", False)
    scan_requests_deferred: int = _typed("u", 0)
    scans_aborted: dict[str, int] = _typed("a{su}", {})
    own_scans: list[float] = _typed("ad", [])
    # The guard's own scans (kind full, targeted or refresh; channels in MHz, [] for all) and
    # the access points of the network it knows (targeted roaming).
    own_scan_details: list[dict[str, Any]] = _typed("aa{sv}", [])
    roam_candidates: list[dict[str, Any]] = _typed("aa{sv}", [])
    roams: int = _typed("u", 0)
    last_move: str = _typed("s", "")
    scans_by_source: dict[str, int] = _typed("a{su}", {})
    last_scan: str = _typed("s", "")
    connection_id: str = _typed("s", "")
    connection_uuid: str = _typed("s", "")
    error: str = _typed("s", "", ERROR_CHARS)  # the problems, "; " between them
    settings: dict[str, Any] = _typed("a{sv}", {})
    settings_sources: dict[str, str] = _typed("a{ss}", {})

    def as_plain(self) -> dict[str, Any]:
        """The Devices entry as `scanguardctl` gets it, without the D-Bus types."""
        return {name: value for name in FIELDS if (value := getattr(self, name)) is not None}

    def as_dbus(self) -> dict[str, Variant]:
        return {name: _variant(signature, value, limit) for name, signature, limit in _TYPED
                if (value := getattr(self, name)) is not None}


# key -> D-Bus signature, in declaration order
FIELDS: dict[str, str] = {f.name: f.metadata["dbus"] for f in dataclasses.fields(DeviceStatus)}
# (key, signature, limit) of each field: dataclasses.fields() rebuilds its tuple on each call.
_TYPED = tuple((f.name, f.metadata["dbus"], f.metadata["limit"])
               for f in dataclasses.fields(DeviceStatus))


def _variant(signature: str, value: Any, limit: int = MAX_TEXT) -> Variant:
    if signature in ("a{sv}", "a{ss}", "a{su}"):
        return _dict_variant(signature, tuple(value.items()))
    if signature == "ad":
        return _list_variant(tuple(value))
    if signature == "aa{sv}":
        return Variant("aa{sv}", [{str(k): _setting(v) for k, v in d.items()} for d in value])
    try:
        return _cached_scalar_variant(signature, value, limit)
    except TypeError:  # a value that cannot be a key (never one of DeviceStatus's own types)
        return _scalar_variant(signature, value, limit)


def _scalar_variant(signature: str, value: Any, limit: int) -> Variant:
    if signature == "b":
        return Variant("b", bool(value))
    if signature in ("i", "u"):
        return Variant(signature, int(round(value)))
    if signature == "d":
        return Variant("d", float(value))
    return Variant("s", cut(str(value), limit))


# Most of a device's fields are the same from one Devices update to the next, and a Variant
# checks its value against its signature each time one is made (about 10 us each, 27 fields per
# device, on every sample while the link is busy): each is made once.  typed: True and 1 differ.
_cached_scalar_variant = functools.lru_cache(maxsize=512, typed=True)(_scalar_variant)


@functools.lru_cache(maxsize=32)
def _dict_variant(signature: str, items: tuple[tuple[Any, Any], ...]) -> Variant:
    """A device's settings and their sources, its scan counts: they change on a reload, a
    profile change or a scan, not on every Devices update (each sample while the link is
    busy), so each is built once."""
    if signature == "a{sv}":
        return Variant("a{sv}", {str(k): _setting(v) for k, v in items})
    if signature == "a{su}":
        return Variant("a{su}", {str(k): int(v) for k, v in items})
    return Variant("a{ss}", {str(k): cut(str(v)) for k, v in items})


@functools.lru_cache(maxsize=8)
def _list_variant(values: tuple[float, ...]) -> Variant:
    return Variant("ad", [float(v) for v in values])


def _setting(value: Any) -> Variant:
    """A settings value: b for yes/no keys, x for whole numbers, s for words (roam_scans), d for
    the other numbers."""
    if isinstance(value, bool):
        return Variant("b", value)
    if isinstance(value, int):
        return Variant("x", value)
    if isinstance(value, float):
        return Variant("d", value)
    if isinstance(value, (list, tuple)):
        return Variant("ax", [int(v) for v in value])
    return Variant("s", cut(str(value)))


def duration(seconds: float) -> str:
    """A short human duration: 42s, 3m07s, 2h05m."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"
