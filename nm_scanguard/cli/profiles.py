"""Per-connection settings in NetworkManager profiles, read and written through libnm.

nmcli cannot write a profile's user data (the `user` setting has no nmcli properties), so
`scanguardctl config set` uses libnm over GObject introspection: NMSettingUser.set_data, then
commit the profile.  NetworkManager announces the change and the daemon re-reads it; the
active connection needs no reapply for scanguard's own keys.

A successful commit does not prove the setting was kept: a profile store may lose user data
on the way (netplan's keyfile round trip on Ubuntu splits `user` keys at their last dot,
canonical/netplan#615).  So every change is read back from NetworkManager itself
(GetSettings, not libnm's own copy, which holds what we sent) and a lost one is an error.
"""

from __future__ import annotations

from typing import Any

from ..config import DEFAULT_CONFIG_PATH, USER_DATA_PREFIX
from ..text import NAME_CHARS, clipped, quoted

Gio: Any = None
GLib: Any = None
NM: Any = None
_client: Any = None  # profiles are only valid while their client lives


class ProfileError(Exception):
    """A problem with a NetworkManager profile, worded for the person at the keyboard."""


def _load_libnm() -> None:
    """Import libnm only when a profile is needed: it costs a tenth of a second."""
    global Gio, GLib, NM
    if NM is not None:
        return
    try:
        import gi

        gi.require_version("NM", "1.0")
        from gi.repository import NM as _NM
        from gi.repository import Gio as _Gio
        from gi.repository import GLib as _GLib
    except (ImportError, ValueError) as e:
        raise ProfileError(f"libnm is not available ({e}); install gir1.2-nm-1.0 and "
                           "python3-gi") from None
    Gio, GLib, NM = _Gio, _GLib, _NM


def client() -> Any:
    """The libnm client (one per process: the profiles it returns live as long as it does)."""
    global _client
    if _client is not None:
        return _client
    _load_libnm()
    try:
        nm = NM.Client.new(None)
    except GLib.Error as e:
        raise ProfileError(f"cannot talk to NetworkManager: {e.message}") from None
    if not nm.get_nm_running():
        raise ProfileError("NetworkManager is not running (systemctl status NetworkManager)")
    _client = nm
    return nm


def find(nm: Any, name: str) -> Any:
    """The profile whose UUID or name is `name`; unknown and ambiguous names are errors."""
    connections = nm.get_connections()
    for conn in connections:
        if conn.get_uuid() == name:
            return conn
    matches = [c for c in connections if c.get_id() == name]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise ProfileError(f"NetworkManager has no connection profile {quoted(name, NAME_CHARS)}; "
                           "`nmcli connection show` lists them (name or UUID)")
    uuids = ", ".join(f"{c.get_uuid()} ({c.get_connection_type()})" for c in matches)
    raise ProfileError(f"{len(matches)} NetworkManager profiles are named "
                       f"{quoted(name, NAME_CHARS)}: {uuids}; give the UUID instead")


def user_data(conn: Any) -> dict[str, str]:
    setting = conn.get_setting(NM.SettingUser)
    if setting is None:
        return {}
    return {k: setting.get_data(k) for k in setting.get_keys()}


def scanguard_data(conn: Any) -> dict[str, str]:
    """The profile's `scanguard.*` user data, keys without the prefix."""
    return {k[len(USER_DATA_PREFIX):]: v for k, v in user_data(conn).items()
            if k.startswith(USER_DATA_PREFIX)}


def update(conn: Any, set_values: dict[str, str], unset: list[str]) -> None:
    """Set and remove `scanguard.<key>` user data and save the profile (keys without prefix)."""
    setting = conn.get_setting(NM.SettingUser)
    if setting is None:
        setting = NM.SettingUser.new()
        conn.add_setting(setting)
    try:
        for key, value in set_values.items():
            setting.set_data(USER_DATA_PREFIX + key, value)
        for key in unset:
            setting.set_data(USER_DATA_PREFIX + key, None)
    except GLib.Error as e:
        raise ProfileError(f"NetworkManager's library rejected the user data: {e.message}") from None
    _commit(conn)
    _check_kept(conn, set_values, unset)


READ_BACK_TIMEOUT_MS = 10000


def stored_user_data(conn: Any) -> dict[str, str]:
    """The profile's user data as NetworkManager holds it now: its own GetSettings answer."""
    bus = client().get_dbus_connection()
    reply = bus.call_sync(NM.DBUS_SERVICE, conn.get_path(), NM.DBUS_INTERFACE_SETTINGS_CONNECTION,
                          "GetSettings", None, GLib.VariantType.new("(a{sa{sv}})"),
                          Gio.DBusCallFlags.NONE, READ_BACK_TIMEOUT_MS, None)
    (settings,) = reply.unpack()
    data = settings.get("user", {}).get("data", {})
    return {str(k): str(v) for k, v in data.items()}


def _check_kept(conn: Any, set_values: dict[str, str], unset: list[str]) -> None:
    """Raise ProfileError unless NetworkManager reads back what was just written."""
    name = quoted(conn.get_id(), NAME_CHARS)
    try:
        stored = stored_user_data(conn)
    except GLib.Error as e:
        raise ProfileError(f"NetworkManager saved {name} but could not read it back "
                           f"({e.message}); `scanguardctl config show {conn.get_uuid()}` shows "
                           "what it holds") from None
    problems = []
    for key, value in set_values.items():
        now = stored.get(USER_DATA_PREFIX + key)
        if now != value:
            problems.append(f"without {USER_DATA_PREFIX}{key}={clipped(value)} "
                            f"({'missing' if now is None else 'it is ' + quoted(now)})")
    for key in unset:
        if USER_DATA_PREFIX + key in stored:
            problems.append(f"with {USER_DATA_PREFIX}{key}="
                            f"{clipped(stored[USER_DATA_PREFIX + key])} (still there)")
    if problems:
        what = ", ".join(problems)
        raise ProfileError(
            f"NetworkManager saved {name}, but it reads back {what}: the change did not "
            "survive and is not in effect. Some profile stores lose user data (netplan on "
            "Ubuntu: canonical/netplan#615); set it for every network in "
            f"{DEFAULT_CONFIG_PATH} instead")


def _commit(conn: Any) -> None:
    loop = GLib.MainLoop()
    failure: list[str] = []

    def done(source: Any, result: Any) -> None:
        try:
            source.commit_changes_finish(result)
        except GLib.Error as e:
            failure.append(_explain(e))
        loop.quit()

    # An in-memory profile stays in memory; a saved one is saved.
    conn.commit_changes_async(not conn.get_unsaved(), None, done)
    loop.run()
    if failure:
        raise ProfileError(f"NetworkManager did not save {quoted(conn.get_id(), NAME_CHARS)}: "
                           f"{failure[0]}")


def _explain(e: Any) -> str:
    message = str(e.message)
    text = message.strip().splitlines()[-1] if message.strip() else str(e)
    if "PermissionDenied" in message or "Insufficient privileges" in message or \
            "not authorized" in message.lower():
        return (f"{text}. Changing a profile needs NetworkManager's permission "
                "(org.freedesktop.NetworkManager.settings.modify.*): run with sudo, or from "
                "the desktop session that owns the profile")
    return text
