"""Settings: built-in defaults, the global INI file, and per-connection NetworkManager user data.

Every key can be set in `/etc/scanguard/scanguard.conf` (section `[scanguard]`) and overridden
for one connection by NetworkManager profile user data `scanguard.<key>` (profile_settings.py).
A bad global file is fatal at start-up (like `sshd -t`); a bad profile value only falls back to
the global value for that key, with a warning, because a user's profile must never stop the
service.
"""

from __future__ import annotations

import codecs
import configparser
import dataclasses
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .files import Unreadable, kind, read_regular
from .text import NAME_CHARS, clipped, quoted, shown

log = logging.getLogger(__name__)

DEFAULT_CONFIG_PATH = "/etc/scanguard/scanguard.conf"
SECTION = "scanguard"
USER_DATA_PREFIX = "scanguard."

# A real scanguard.conf is about 2 KiB with every comment; anything much larger is the wrong file
# (or /dev/zero behind a symlink) and must not be read into memory whole.
MAX_FILE_BYTES = 65536

_ASCII_SPACE = " \t\n\r\f\v"
# The number grammar is deliberately narrower than int()/float(): ASCII digits only (no "١٢"),
# no "1_000", no exponent, no nan/inf, no inner spaces.  A sign is allowed; so is a single
# decimal point for non-whole quantities ("2.5", ".5", "5.").
_INTEGER = re.compile(r"[+-]?[0-9]+", re.ASCII)
_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)", re.ASCII)
_MAX_NUMBER_CHARS = 32


class ConfigError(Exception):
    """A configuration problem, worded for the person who has to fix it."""


class ConfigMissing(ConfigError):
    """A settings file that had to exist does not."""


class Key(NamedTuple):
    name: str
    parse: Callable[[str], Any]
    form: str  # the expected form, shown in error messages
    doc: str
    # A key that takes one of a few words: those words, which bash completion offers and
    # scanguard.conf(5) lists; () for a number.
    words: tuple[str, ...] = ()


def _bool(text: str) -> bool:
    value = text.strip(_ASCII_SPACE).lower()
    if value in ("1", "yes", "true", "on"):
        return True
    if value in ("0", "no", "false", "off"):
        return False
    raise ValueError(text)


_YES_NO = ("yes", "no")
ROAM_SCANS = ("targeted", "full")


def _one_of(words: tuple[str, ...]) -> Callable[[str], str]:
    """One of `words`, in any case, with spaces around it, as _bool reads yes and no."""

    def parse(text: str) -> str:
        value = text.strip(_ASCII_SPACE).lower()
        if value not in words:
            raise ValueError(text)
        return value

    return parse


def _number(lo: float, hi: float, integer: bool = False) -> Callable[[str], float | int]:
    grammar = _INTEGER if integer else _DECIMAL

    def parse(text: str) -> float | int:
        digits = text.strip(_ASCII_SPACE)
        if len(digits) > _MAX_NUMBER_CHARS or grammar.fullmatch(digits) is None:
            raise ValueError(text)
        value = int(digits) if integer else float(digits)
        if not lo <= value <= hi:
            raise ValueError(text)
        return value

    return parse


KEYS: dict[str, Key] = {
    k.name: k
    for k in (
        Key("enabled", _bool, "yes or no", "Guard at all: no in a profile leaves that network "
            "alone; no in the settings file turns nm-scanguard off for every connection, whatever "
            "their profiles say (daemon/off.py).", _YES_NO),
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
            "Below this signal, let wpa_supplicant roam: roam_scans says how."),
        Key("signal_hysteresis_db", _number(0.0, 60.0), "a number of dB from 0 to 60",
            "Re-engage only when the signal is this far above the floor again."),
        Key("signal_poll_interval", _number(0.5, 3600.0), "a number of seconds from 0.5 to 3600",
            "How often the signal is read while guarding."),
        Key("roam_scans", _one_of(ROAM_SCANS), " or ".join(ROAM_SCANS),
            "Below signal_floor_dbm while busy: keep bgscan suspended, scan only the channels "
            "of the network's other known access points and roam (targeted), or restore bgscan "
            "and scan every channel (full).", ROAM_SCANS),
        Key("defer_client_scans", _bool, "yes or no",
            "While guarding or held, refuse the Wi-Fi scans that other programs ask "
            "NetworkManager for (RequestScan), through the shipped polkit rule.", _YES_NO),
        Key("abort_scans", _bool, "yes or no",
            "While guarding or held, abort (wpa_supplicant AbortScan) a scan that is running "
            "when the guard engages or that starts while it guards, whoever asked for it.",
            _YES_NO),
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
    roam_scans: str = "targeted"  # one of ROAM_SCANS
    defer_client_scans: bool = True
    abort_scans: bool = True
    # key -> where the value came from: "default", a file path, or "profile <id>"
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)

    def source(self, key: str) -> str:
        return self.sources.get(key, "default")

    def values(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in KEYS}

    def with_values(self, values: Mapping[str, Any], source: str) -> Settings:
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
    """One value, or a ConfigError naming `where`, the key, the value (cut) and the form wanted."""
    spec = KEYS.get(key)
    if spec is None:
        raise ConfigError(f"{where}: unknown key {quoted(key, NAME_CHARS)} "
                          f"(known keys: {', '.join(KEYS)})")
    try:
        return spec.parse(text)
    except (ValueError, TypeError):
        raise ConfigError(f"{where}: {key} = {quoted(text)} is not valid; "
                          f"expected {spec.form}") from None


def _too_big(path: str, size: str) -> ConfigError:
    return ConfigError(f"{path}: is {size} bytes; at most {MAX_FILE_BYTES} "
                       "(a scanguard.conf is a few KiB at most: is this the right file?)")


def _read_config(path: str) -> str | None:
    """The file's text, or None when it does not exist.

    Read by files.read_regular: a FIFO cannot hang start-up or a reload, and a symlink to
    /dev/zero is refused instead of eating all memory."""
    try:
        data = read_regular(path, MAX_FILE_BYTES, follow_symlinks=True)
    except FileNotFoundError:
        return None
    except Unreadable as e:
        if e.why == "open" and isinstance(e.error, PermissionError):
            raise ConfigError(f"{path}: cannot read: permission denied; make it readable by the "
                              "service's user (e.g. mode 0644, owner root)") from None
        if e.why == "kind":
            what = kind(e.mode)
            raise ConfigError(f"{path}: cannot read: it is "
                              f"{what + ', not' if what else 'not'} a regular file; "
                              "point --config at a regular file") from None
        if e.why == "size":
            raise _too_big(path, str(e.size)) from None
        if e.why == "grew":
            raise _too_big(path, f"more than {MAX_FILE_BYTES}") from None
        error = e.error
        raise ConfigError(f"{path}: cannot read: {(error.strerror if error else None) or error}; "
                          "point --config at a readable regular file") from None
    if data.startswith(codecs.BOM_UTF8):  # some editors write one; it is not part of the text
        data = data[len(codecs.BOM_UTF8):]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ConfigError(f"{path}: line {line}: not valid UTF-8 ({e.reason}); "
                          "save the file as UTF-8") from None


def _ini_error(path: str, e: configparser.Error) -> ConfigError:
    """configparser's own texts quote whole lines (megabytes, if the file is one long line)."""
    what = f"{path}: not a valid INI file"
    if isinstance(e, configparser.MissingSectionHeaderError):
        return ConfigError(f"{what}: line {e.lineno}: a setting before the first section header; "
                           f"put [{SECTION}] at the top")
    if isinstance(e, configparser.ParsingError):
        lines = [str(lineno) for lineno, _ in e.errors]
        more = f" (and {len(lines) - 5} more lines)" if len(lines) > 5 else ""
        return ConfigError(f"{what}: line{'s' if len(lines) > 1 else ''} {', '.join(lines[:5])}"
                           f"{more}: not 'key = value', a [section] header or a # comment")
    if isinstance(e, configparser.DuplicateOptionError):
        return ConfigError(f"{what}: line {e.lineno}: {quoted(e.option, NAME_CHARS)} is set twice "
                           f"in [{clipped(e.section, NAME_CHARS)}]; keep one")
    if isinstance(e, configparser.DuplicateSectionError):
        return ConfigError(f"{what}: line {e.lineno}: section [{clipped(e.section, NAME_CHARS)}] "
                           "appears twice; keep one")
    return ConfigError(f"{what}: {type(e).__name__}; compare it with the shipped example")


def load_file(path: str | None, required: bool = False) -> Settings:
    """Read the global file.  A missing file means defaults, unless `required`; anything else
    wrong is fatal."""
    base = Settings()
    if path is None:
        return base
    text = _read_config(path)
    if text is None:
        if required:
            raise ConfigMissing(f"{path}: no such file; give the path of an existing file, or "
                              f"leave --config out to use {DEFAULT_CONFIG_PATH} (which may be "
                              "absent: then the built-in defaults apply)")
        log.debug("no %s, using built-in defaults", path)
        return base
    # default_section "\n" cannot occur in a header, so a [DEFAULT] section is refused as unknown
    # instead of being merged silently into [scanguard].
    parser = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=("#", ";"),
                                       default_section="\n")
    try:
        parser.read_string(text, source=path)
    except configparser.Error as e:
        raise _ini_error(path, e) from None
    extra = [s for s in parser.sections() if s != SECTION]
    if extra:
        raise ConfigError(f"{path}: unknown section [{clipped(extra[0], NAME_CHARS)}]; "
                          f"put every key under [{SECTION}]")
    values: dict[str, Any] = {}
    if parser.has_section(SECTION):
        for key, value in parser.items(SECTION):
            values[key] = parse_value(key, value, f"{path} [{SECTION}]")
    settings = base.with_values(values, path)
    settings.check(path)
    return settings


def named_file_required(path: str) -> bool:
    """Whether the settings file at `path` must exist: only the default one may be absent
    (built-in defaults); a path given on the command line that is not there is a typing
    mistake, which must not pass for "built-in defaults apply"."""
    return path != DEFAULT_CONFIG_PATH


def format_value(value: Any) -> str:
    """A value in the file's own syntax, the form parse_value reads back to the same value:
    yes/no, whole numbers without a point, other numbers without an exponent."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        text = repr(value)  # the shortest text that reads back as the same float
        if "e" in text:
            from decimal import Decimal  # rare: not loaded at scanguardd's start (daemon/entry.py)

            text = format(Decimal(text), "f")
        return text[:-2] if text.endswith(".0") else text
    return str(value)


def settings_table(settings: Settings) -> list[str]:
    """One line per key: name, value (format_value) and where it came from, as `scanguardctl
    config show` and `scanguardd --check-config` print them."""
    width = max(len(k) for k in KEYS)
    return [f"{key:<{width}}  {format_value(value):<10}  {shown(settings.source(key))}"
            for key, value in settings.values().items()]
