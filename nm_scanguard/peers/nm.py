"""NetworkManager over the system bus: which Wi-Fi devices are activated, with which profile.

Read-only.  The daemon never asks NM to change anything (profiles are written by scanguardctl
through libnm); it follows NM's signals and re-reads what it needs when one arrives.

A profile whose settings cannot be read (private to a user through `connection.permissions`,
or NM did not answer) is not read as "no settings": its scanguard.* keys, `enabled = no`
among them, are unknown, so `WifiDevice.settings_error` says why and the daemon leaves that
interface's bgscan alone until it can read them.
"""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass, field

from ..dbuslib import MessageBus
from ..names import NM
from ..text import NAME_CHARS, quoted
from .bus import BusError, call, get_all, unwrap

NAME, PATH = NM[:2]
DEVICE = NAME + ".Device"
ACTIVE = NAME + ".Connection.Active"
SETTINGS_CONNECTION = NAME + ".Settings.Connection"
# GetSettings of a profile whose connection.permissions do not name the caller (nor root).
PERMISSION_DENIED = NAME + ".Settings.PermissionDenied"
_GONE = ("UnknownObject", "UnknownMethod", "UnknownInterface")
# The signals after which the daemon looks again at the devices and profiles (it checks their
# sender: bus.NameOwners).
SIGNAL_RULES = tuple(
    f"type='signal',sender='{NAME}',interface='{NAME}{where}',member='{member}'"
    for where, member in (("", "DeviceAdded"), ("", "DeviceRemoved"), (".Device", "StateChanged"),
                          (".Settings.Connection", "Updated")))

DEVICE_TYPE_WIFI = 2
STATE_ACTIVATED = 100


@dataclass
class WifiDevice:
    path: str
    ifname: str
    state: int
    connection_path: str | None = None  # the settings (profile) object
    connection_id: str = ""
    connection_uuid: str = ""
    user_data: dict[str, str] = field(default_factory=dict)
    # Why the profile's settings could not be read, worded with what to do; None when read.
    settings_error: str | None = None

    @property
    def activated(self) -> bool:
        return self.state == STATE_ACTIVATED


class NetworkManager:
    def __init__(self, bus: MessageBus) -> None:
        self.bus = bus

    async def device_paths(self) -> list[str]:
        (paths,) = await call(self.bus, *NM, "GetDevices")
        return list(paths)

    async def wifi_device(self, path: str) -> WifiDevice | None:
        """The device at `path` if it is Wi-Fi (None otherwise or if it vanished meanwhile)."""
        try:
            props = await get_all(self.bus, NAME, path, DEVICE)
        except BusError as e:
            if e.name.endswith(("UnknownObject", "UnknownMethod", "UnknownInterface")):
                return None
            raise
        if props.get("DeviceType") != DEVICE_TYPE_WIFI:
            return None
        dev = WifiDevice(path=path, ifname=props.get("Interface", ""), state=props.get("State", 0))
        active = props.get("ActiveConnection", "/")
        if dev.activated and active not in ("", "/"):
            try:
                # Id and Uuid too: readable even when the profile's settings are not.
                info = await get_all(self.bus, NAME, active, ACTIVE)
                dev.connection_id = str(info.get("Id", ""))
                dev.connection_uuid = str(info.get("Uuid", ""))
                conn = info.get("Connection", "/")
                dev.connection_path = conn if conn not in ("", "/") else None
                await self.read_profile(dev)
            except BusError as e:
                dev.settings_error = settings_error(dev, e)
        return dev

    async def read_profile(self, dev: WifiDevice) -> None:
        if dev.connection_path is None:
            return
        (settings,) = await call(self.bus, NAME, dev.connection_path, SETTINGS_CONNECTION, "GetSettings")
        settings = unwrap(settings)
        connection = settings.get("connection", {})
        dev.connection_id = str(connection.get("id", ""))
        dev.connection_uuid = str(connection.get("uuid", ""))
        data = settings.get("user", {}).get("data", {})
        dev.user_data = {str(k): str(v) for k, v in dict(data).items()}

    async def wifi_devices(self) -> list[WifiDevice]:
        devices = []
        for path in await self.device_paths():
            dev = await self.wifi_device(path)
            if dev is not None:
                devices.append(dev)
        return devices



def settings_error(dev: WifiDevice, err: BusError) -> str:
    """What to tell about a profile whose settings NetworkManager did not give us."""
    profile = f"profile {quoted(dev.connection_id, NAME_CHARS)}" if dev.connection_id \
        else "its profile"
    if err.name == PERMISSION_DENIED:
        # The user the fix names is whoever runs the daemon (scanguard, as packaged).
        # Short enough that a status (cut at 256 characters) keeps the whole command.
        return (f"{dev.ifname}: {profile} is private to a user (connection.permissions): not "
                "guarded, as its scanguard.* settings cannot be read; to guard it: nmcli "
                f"connection modify {dev.connection_uuid or dev.connection_id} "
                f"+connection.permissions user:{_user()}")
    if err.name.endswith(_GONE):
        return (f"{dev.ifname}: {profile} went away while it was read ({err.name}); not "
                "guarding until NetworkManager says what is active")
    return (f"{dev.ifname}: cannot read {profile} ({err}); not guarding, since its "
            "scanguard.* settings (enabled = no among them) are unknown, until NetworkManager "
            "answers")


def _user() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())
