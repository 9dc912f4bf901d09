"""Per-connection settings in NetworkManager profiles, read and written through libnm.

nmcli cannot write a profile's user data (the `user` setting has no nmcli properties), so
`scanguardctl config set` uses libnm over GObject introspection: NMSettingUser.set_data, then
commit the profile.  NetworkManager announces the change and the daemon re-reads it; the
active connection needs no reapply for scanguard's own keys.
"""

from __future__ import annotations

from typing import Any

from .config import USER_DATA_PREFIX
from .text import NAME_CHARS, quoted

GLib: Any = None
NM: Any = None
_client: Any = None  # profiles are only valid while their client lives


class ProfileError(Exception):
    """A problem with a NetworkManager profile, worded for the person at the keyboard."""


def _load_libnm() -> None:
    """Import libnm only when a profile is needed: it costs a tenth of a second."""
    global GLib, NM
    if NM is not None:
        return
    try:
        import gi

        gi.require_version("NM", "1.0")
        from gi.repository import GLib as _GLib, NM as _NM
    except (ImportError, ValueError) as e:
        raise ProfileError(f"libnm is not available ({e}); install gir1.2-nm-1.0 and "
                           "python3-gi") from None
    GLib, NM = _GLib, _NM


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
    raise ProfileError(f"{len(matches)} NetworkManager profiles are named {quoted(name, NAME_CHARS)}: {uuids}; "
                       "give the UUID instead")


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
        raise ProfileError(f"NetworkManager did not save '{conn.get_id()}': {failure[0]}")


def _explain(e: Any) -> str:
    message = str(e.message)
    text = message.strip().splitlines()[-1] if message.strip() else str(e)
    if "PermissionDenied" in message or "Insufficient privileges" in message or \
            "not authorized" in message.lower():
        return (f"{text}. Changing a profile needs NetworkManager's permission "
                "(org.freedesktop.NetworkManager.settings.modify.*): run with sudo, or from "
                "the desktop session that owns the profile")
    return text
