"""Settings: built-in defaults, the global INI file, and per-connection NetworkManager user data.

Every key can be set in `/etc/scanguard/scanguard.conf` (section `[scanguard]`) and overridden
for one connection by NetworkManager profile user data `scanguard.<key>`.  A bad global file is
fatal at start-up (like `sshd -t`); a bad profile value only falls back to the global value for
that key, with a warning, because a user's profile must never stop the service.
"""

from __future__ import annotations

import configparser
import dataclasses
import logging
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

log = logging.getLogger(__name__)

DEFAULT_CONFIG_PATH = "/etc/scanguard/scanguard.conf"
SECTION = "scanguard"
USER_DATA_PREFIX = "scanguard."


class ConfigError(Exception):
    """A configuration problem, worded for the person who has to fix it."""


@dataclass(frozen=True)
class Key:
    name: str
    parse: Callable[[str], Any]
    form: str  # the expected form, shown in error messages
    doc: str


def _bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("1", "yes", "true", "on"):
        return True
    if value in ("0", "no", "false", "off"):
        return False
    raise ValueError(text)


def _number(lo: float, hi: float, integer: bool = False) -> Callable[[str], float | int]:
    def parse(text: str) -> float | int:
        value = int(text.strip()) if integer else float(text.strip())
        if not math.isfinite(value) or not lo <= value <= hi:
            raise ValueError(text)
        return value

    return parse


KEYS: dict[str, Key] = {
    k.name: k
    for k in (
        Key("enabled", _bool, "yes or no", "Guard this connection at all."),
        Key("threshold_mbit", _number(0.0, 100000.0), "a number of Mbit/s from 0 to 100000",
            "Busy when receive or transmit rate is at or above this."),
        Key("threshold_pps", _number(0, 10_000_000, True), "a whole number of packets/s (0 = off)",
            "Also busy when packets per second (rx + tx) reach this: catches calls and games."),
        Key("engage_after", _number(1, 3600, True), "a whole number of samples from 1 to 3600",
            "Consecutive busy samples before bgscan is suspended."),
        Key("release_below_mbit", _number(0.0, 100000.0), "a number of Mbit/s from 0 to 100000",
            "Quiet when both rates are below this (and below release_below_pps)."),
        Key("release_below_pps", _number(0, 10_000_000, True), "a whole number of packets/s",
            "Quiet also needs packets per second (rx + tx) below this."),
        Key("release_after", _number(0.0, 86400.0), "a number of seconds from 0 to 86400",
            "Seconds of continuous quiet before bgscan is restored."),
        Key("sample_interval", _number(0.1, 60.0), "a number of seconds from 0.1 to 60",
            "How often the interface counters are read while connected."),
        Key("signal_floor_dbm", _number(-120.0, 0.0), "a number of dBm from -120 to 0",
            "Below this signal, release so wpa_supplicant can roam."),
        Key("signal_hysteresis_db", _number(0.0, 60.0), "a number of dB from 0 to 60",
            "Re-engage only when the signal is this far above the floor again."),
        Key("signal_poll_interval", _number(0.5, 3600.0), "a number of seconds from 0.5 to 3600",
            "How often the signal is read while guarding."),
    )
}


@dataclass(frozen=True)
class Settings:
    """Effective settings for one interface/connection.  Defaults are explained in README.md."""

    enabled: bool = True
    threshold_mbit: float = 1.0
    threshold_pps: int = 60
    engage_after: int = 3
    release_below_mbit: float = 0.5
    release_below_pps: int = 30
    release_after: float = 15.0
    sample_interval: float = 1.0
    signal_floor_dbm: float = -75.0
    signal_hysteresis_db: float = 5.0
    signal_poll_interval: float = 5.0
    # key -> where the value came from: "default", a file path, or "profile <id>"
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    def source(self, key: str) -> str:
        return self.sources.get(key, "default")

    def values(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in KEYS}

    def with_values(self, values: Mapping[str, Any], source: str) -> "Settings":
        sources = dict(self.sources)
        sources.update({k: source for k in values})
        return dataclasses.replace(self, **values, sources=sources)

    def check(self, where: str) -> None:
        """Cross-key sanity: release thresholds must not exceed engage thresholds."""
        if self.release_below_mbit > self.threshold_mbit:
            raise ConfigError(
                f"{where}: release_below_mbit ({self.release_below_mbit:g}) must not be above "
                f"threshold_mbit ({self.threshold_mbit:g}), or the guard would never release"
            )
        if self.threshold_pps and self.release_below_pps > self.threshold_pps:
            raise ConfigError(
                f"{where}: release_below_pps ({self.release_below_pps}) must not be above "
                f"threshold_pps ({self.threshold_pps})"
            )


def parse_value(key: str, text: str, where: str) -> Any:
    spec = KEYS.get(key)
    if spec is None:
        raise ConfigError(f"{where}: unknown key '{key}' (known keys: {', '.join(KEYS)})")
    try:
        return spec.parse(text)
    except (ValueError, TypeError):
        raise ConfigError(f"{where}: {key} = '{text}' is not valid; expected {spec.form}") from None


def load_file(path: str | None) -> Settings:
    """Read the global file.  A missing file means defaults; anything else wrong is fatal."""
    base = Settings()
    if path is None:
        return base
    parser = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=("#", ";"))
    try:
        with open(path, encoding="utf-8") as f:
            parser.read_file(f, source=path)
    except FileNotFoundError:
        log.debug("no %s, using built-in defaults", path)
        return base
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read: {e}") from None
    except configparser.Error as e:
        raise ConfigError(f"{path}: not a valid INI file: {e}") from None
    extra = [s for s in parser.sections() if s != SECTION]
    if extra:
        raise ConfigError(f"{path}: unknown section [{extra[0]}]; put every key under [{SECTION}]")
    values: dict[str, Any] = {}
    if parser.has_section(SECTION):
        for key, text in parser.items(SECTION):
            values[key] = parse_value(key, text, f"{path} [{SECTION}]")
    settings = base.with_values(values, path)
    settings.check(path)
    return settings


def apply_profile(base: Settings, user_data: Mapping[str, str], profile: str) -> Settings:
    """Overlay `scanguard.*` user data of one NM profile; bad values fall back with a warning."""
    where = f"NetworkManager profile '{profile}'"
    values: dict[str, Any] = {}
    for full_key, text in sorted(user_data.items()):
        if not full_key.startswith(USER_DATA_PREFIX):
            continue
        key = full_key[len(USER_DATA_PREFIX):]
        try:
            values[key] = parse_value(key, text, f"{where}: user data {full_key}")
        except ConfigError as e:
            log.warning("%s; using %s", e, _fallback(base, key))
    settings = base.with_values(values, f"profile {profile}")
    try:
        settings.check(where)
    except ConfigError as e:
        log.warning("%s; ignoring this profile's scanguard settings", e)
        return base
    return settings


def _fallback(base: Settings, key: str) -> str:
    if key in KEYS:
        return f"the value from {base.source(key)} ({getattr(base, key)})"
    return "nothing (the key is ignored)"
