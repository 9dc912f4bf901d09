"""What the system-bus API's object shows: its properties (Version, Off, Devices, ActiveHolds,
RecentScanRequests) and how their changes go out.

A state change goes out at once (StateChanged, then Devices); any other change is coalesced to
about one PropertiesChanged a second per property, so that a client taking and releasing holds
in a loop, or a program asking NetworkManager for scans in a loop, cannot make the daemon write
faster than the bus reads.  The Devices status is built here and nowhere else (`devices`).
"""

from __future__ import annotations

from typing import Any, Protocol

from ... import __version__
from ...config import Settings
from ...dbuslib import Variant
from ...status import DeviceStatus
from ...text import cut
from ..changes import Changes
from ..guard.policy import off_reason
from ..guard.who_asked import WhoAsked
from ..throttle import Throttle
from .export import ExportedObject
from .holds import HOLD_FIELDS, Hold, Holds

DEVICES_EVERY = 1.0  # seconds between Devices PropertiesChanged while only figures change
HOLDS_EVERY = 1.0  # seconds between ActiveHolds PropertiesChanged under a stream of changes
REQUESTS_EVERY = 1.0  # seconds between RecentScanRequests PropertiesChanged under a stream of reports


class Shown(Protocol):
    """What the properties read of the daemon, and the changes they follow (Daemon provides it)."""

    holds: Holds
    who_asked: WhoAsked
    state_changed: Changes[[str, str, str]]  # (interface, state, reason)
    changed: Changes[[]]  # any figure changed

    settings: Settings  # the settings file's: its `enabled = no` turns it off (off.py)

    def status(self) -> list[DeviceStatus]: ...


def devices(status: list[DeviceStatus]) -> Variant:
    return Variant("aa{sv}", [d.as_dbus() for d in status])


# What every local user may read of any hold: that it is there, where, since when, and the
# cookie (which releases nothing: only the holder or root may release).  Who holds and why
# (reason, application id, bus name, uid) only the holder's user and root see.
PUBLIC_HOLD_FIELDS = ("cookie", "interface", "since")


def hold_as_dbus(hold: Hold, named: bool = True) -> dict[str, Variant]:
    return {key: Variant(sig, getattr(hold, key)) for key, sig in HOLD_FIELDS.items()
            if named or key in PUBLIC_HOLD_FIELDS}


def holds(daemon: Shown, reader: int | None = None) -> Variant:
    """The holds as user `reader` may see them: every key for root and for the holds of the
    reader's own user, the public keys of the others.  The property (reader None) reads the
    same for every local user, so it names nobody."""
    return Variant("aa{sv}", [hold_as_dbus(h, reader == 0 or (reader is not None
                                                               and h.caller_uid == reader))
                              for h in daemon.holds.all()])


def requests(daemon: Shown, reader: int | None = None, own: str = "") -> Variant:
    """The scan requests the polkit rule saw, as user `reader` (named `own`) may see them:
    when and whether refused, for everyone; who asked (user, pid, program) only for root
    and for the user whose request it was.  The property (reader None) names nobody: it
    reads the same for every local user, and a user's processes are theirs to show
    (hidepid)."""
    return Variant("a(dsusb)", [
        [r.at, cut(r.user), r.pid, cut(r.program), refused]
        if reader == 0 or (own and r.user == own) else [r.at, "", 0, "", refused]
        for r, refused in daemon.who_asked.requests.recent()])


def property_values(daemon: Shown) -> dict[str, Variant]:
    return {
        "Version": Variant("s", __version__),
        "Off": Variant("s", off_reason(daemon.settings)),
        "Devices": devices(daemon.status()),
        "ActiveHolds": holds(daemon),
        "RecentScanRequests": requests(daemon),
    }


class Announcer:
    """Sends the object's StateChanged and PropertiesChanged as the daemon changes."""

    def __init__(self, daemon: Shown, obj: ExportedObject) -> None:
        self.daemon = daemon
        self.object = obj
        self._devices_sent: list[Any] | None = None
        self._off_sent = off_reason(daemon.settings)
        self._devices = Throttle(DEVICES_EVERY, self._send_devices)
        self._active_holds = Throttle(HOLDS_EVERY, lambda: self.object.emit_properties(["ActiveHolds"]))
        self._recent_requests = Throttle(REQUESTS_EVERY, self._send_requests)

    def start(self) -> None:
        self.daemon.state_changed.connect(self.state_changed)
        self.daemon.changed.connect(self._devices.poke)
        self.daemon.changed.connect(self._off_changed)
        self.daemon.holds.changed.connect(self._active_holds.poke)

    def state_changed(self, ifname: str, state: str, reason: str) -> None:
        self.object.emit_signal("StateChanged", "sss", [ifname, state, cut(reason)])
        self._devices.flush()

    def _off_changed(self) -> None:
        """Off changes only with a reload, which ends with a change of the figures."""
        off = off_reason(self.daemon.settings)
        if off != self._off_sent:
            self._off_sent = off
            self.object.emit_properties(["Off"], {"Off": Variant("s", off)})

    def requests_changed(self) -> None:
        self._recent_requests.poke()

    def _send_requests(self) -> None:
        self.object.emit_properties(["RecentScanRequests"], {"RecentScanRequests": requests(self.daemon)})

    def _send_devices(self) -> None:
        """Devices, rebuilt whole from the daemon's status, only when it differs from the last
        one sent."""
        status = self.daemon.status()
        if status != self._devices_sent:
            self._devices_sent = status
            self.object.emit_properties(["Devices"], {"Devices": devices(status)})
