"""NetworkManager over the system bus: which Wi-Fi devices are activated, with which profile.

Read-only.  The daemon never asks NM to change anything (profiles are written by scanguardctl
through libnm); it follows NM's signals and re-reads what it needs when one arrives.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .bus import BusError, call, get_all, get_property, unwrap
from .dbuslib import MessageBus

NAME = "org.freedesktop.NetworkManager"
PATH = "/org/freedesktop/NetworkManager"
DEVICE = NAME + ".Device"
ACTIVE = NAME + ".Connection.Active"
SETTINGS_CONNECTION = NAME + ".Settings.Connection"

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

    @property
    def activated(self) -> bool:
        return self.state == STATE_ACTIVATED


class NetworkManager:
    def __init__(self, bus: MessageBus) -> None:
        self.bus = bus

    async def device_paths(self) -> list[str]:
        (paths,) = await call(self.bus, NAME, PATH, NAME, "GetDevices")
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
                conn = await get_property(self.bus, NAME, active, ACTIVE, "Connection")
                dev.connection_path = conn if conn not in ("", "/") else None
                if dev.connection_path:
                    await self.read_profile(dev)
            except BusError:
                # The active connection went away between two calls: NM will signal again.
                dev.connection_path = None
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

