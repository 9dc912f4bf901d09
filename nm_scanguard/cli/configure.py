"""scanguardctl config: the settings in force, and a profile's scanguard.* user data."""

from __future__ import annotations

import argparse
import contextlib
import sys
from types import ModuleType

from ..config import (
    KEYS,
    USER_DATA_PREFIX,
    ConfigError,
    ConfigMissing,
    Settings,
    load_file,
    named_file_required,
    parse_value,
    settings_table,
)
from ..profile_settings import apply_profile
from ..text import NAME_CHARS, clipped, quoted, shown
from .common import Failure

# ---- config ----------------------------------------------------------------------------------

def _profiles() -> ModuleType:
    """profiles.py, imported only by the config verbs: libnm through GObject introspection
    costs ~100 ms and memory that status, hold and monitor do not need."""
    from . import profiles

    return profiles


def _global(path: str) -> Settings:
    """The global settings as the service reads them at start: a file named with --config must
    exist, and a bad file is an error, as `scanguardd --check-config` says (ConfigError)."""
    return load_file(path, required=named_file_required(path))


def _global_base(path: str) -> Settings:
    """The global settings that `config set` checks a profile's values against.  A bad file is
    only a warning there: the profile's values can still be checked, against the defaults."""
    try:
        return _global(path)
    except ConfigMissing:
        raise
    except ConfigError as e:
        print(f"scanguardctl: warning: {e}; the service will not start until it is fixed. "
              "Checking against the built-in defaults instead", file=sys.stderr)
        return Settings()


def cmd_config_show(args: argparse.Namespace) -> int:
    settings = _global(args.config)
    if args.connection:
        p = _profiles()
        conn = p.find(p.client(), args.connection)
        data = p.user_data(conn)
        settings = apply_profile(settings, data, conn.get_id())
        print(f"connection '{shown(conn.get_id(), NAME_CHARS)}' ({shown(conn.get_uuid())})")
        ignored = [k for k in data if k.startswith(USER_DATA_PREFIX)
                   and k[len(USER_DATA_PREFIX):] not in KEYS]
        for k in ignored:
            print(f"  (ignored: unknown user data key {clipped(k, NAME_CHARS)})")
    for line in settings_table(settings):
        print(line)
    return 0


def _unprefixed(text: str) -> str:
    return text[len(USER_DATA_PREFIX):] if text.startswith(USER_DATA_PREFIX) else text


def _key(text: str) -> str:
    """A known key as given (with or without "scanguard."), or a Failure naming the known keys
    and the likeliest one meant."""
    key = _unprefixed(text)
    if key not in KEYS:
        from difflib import get_close_matches

        near = get_close_matches(key, KEYS, n=1)
        meant = f"; did you mean {near[0]}?" if near else ""
        raise Failure(f"unknown key {quoted(text, NAME_CHARS)}{meant} "
                      f"(known keys: {', '.join(KEYS)})")
    return key


def cmd_config_set(args: argparse.Namespace) -> int:
    # What the command line and the global file say is checked before NetworkManager is asked:
    # a mistyped key or value, or --config, is said at once, whatever NetworkManager's state.
    values: dict[str, str] = {}
    where = f"profile {quoted(args.connection, NAME_CHARS)}"
    for item in args.assignments:
        key, sep, text = item.partition("=")
        if not sep:
            raise Failure(f"{quoted(item)} is not KEY=VALUE (e.g. threshold_mbit=5)")
        key = _key(key.strip())
        parse_value(key, text, where)  # raises ConfigError with the expected form
        values[key] = text.strip()
    base = _global_base(args.config)
    p = _profiles()
    conn = p.find(p.client(), args.connection)
    where = f"profile '{shown(conn.get_id(), NAME_CHARS)}'"
    # Check the result as a whole (release thresholds above engage thresholds, ...).
    merged = {**p.scanguard_data(conn), **values}
    parsed = {}
    for k, v in merged.items():
        if k in KEYS:
            with contextlib.suppress(ConfigError):  # an old bad value: the daemon ignores it
                parsed[k] = parse_value(k, v, where)
    base.with_values(parsed, where).check(where)
    p.update(conn, values, [])
    print(f"{shown(conn.get_id(), NAME_CHARS)}: "
          + ", ".join(f"{USER_DATA_PREFIX}{k}={v}" for k, v in values.items()))
    return 0


def cmd_config_unset(args: argparse.Namespace) -> int:
    if args.all:
        return _unset_all(args)
    if args.connection is None or not args.keys:
        raise Failure("config unset: give CONNECTION and the KEYs to remove, or --all "
                      "[CONNECTION] to remove every scanguard.* setting", 2)
    p = _profiles()
    conn = p.find(p.client(), args.connection)
    present = p.scanguard_data(conn)
    # A key this version does not know is refused (a typing mistake must not pass for "is not
    # set"), unless the profile has it: `config show` lists such keys as ignored, and this is
    # how they are removed.  All are checked before anything is changed.
    wanted = [_unprefixed(text) if _unprefixed(text) in present else _key(text)
              for text in args.keys]
    keys = []
    for key in wanted:
        if key not in present:
            print(f"scanguardctl: {shown(conn.get_id(), NAME_CHARS)}: {USER_DATA_PREFIX}{key} is not set",
                  file=sys.stderr)
        else:
            keys.append(key)
    if keys:
        p.update(conn, {}, keys)
        print(f"{shown(conn.get_id(), NAME_CHARS)}: removed "
              + ", ".join(USER_DATA_PREFIX + k for k in keys))
    return 0


def _unset_all(args: argparse.Namespace) -> int:
    """`config unset --all [CONNECTION]`: every scanguard.* key, known or not, from one profile
    or from every profile NetworkManager shows this user (root: all).  A profile that cannot be
    changed is said and the others are still done; the exit status is 1 if any was not."""
    if args.keys:
        raise Failure("config unset --all removes every scanguard.* setting: give no KEY with it", 2)
    p = _profiles()
    nm = p.client()
    conns = [p.find(nm, args.connection)] if args.connection is not None else nm.get_connections()
    found = failed = 0
    for conn in conns:
        keys = list(p.scanguard_data(conn))
        if not keys:
            continue
        found += 1
        try:
            p.update(conn, {}, keys)
        except p.ProfileError as e:
            print(f"scanguardctl: {e}", file=sys.stderr)
            failed += 1
            continue
        print(f"{shown(conn.get_id(), NAME_CHARS)}: removed "
              + ", ".join(USER_DATA_PREFIX + k for k in keys))
    if not found:
        print(f"scanguardctl: profile '{shown(conns[0].get_id(), NAME_CHARS)}' has no "
              f"{USER_DATA_PREFIX}* settings" if args.connection is not None else
              f"scanguardctl: no NetworkManager profile you can see has {USER_DATA_PREFIX}* settings",
              file=sys.stderr)
    return 1 if failed else 0
