"""The Debian mirror this host's apt already uses, read from its sources files.

The trixie roots (trixie.py; the lab's guest root through `trixie.py lab-root`) are fetched from
the mirror the host itself installs Debian from — a local mirror or a caching proxy such as
apt-cacher-ng included — rather than from a host name written into the code: a machine that can
only reach its own mirror must be able to build them too.  TRIXIE_MIRROR still overrides.

Both formats apt reads (sources.list(5)):
- one-line: `deb [option=value ...] URI SUITE [COMPONENT ...]` in /etc/apt/sources.list and
  /etc/apt/sources.list.d/*.list;
- deb822: stanzas of `Types:`, `URIs:`, `Suites:`, `Components:` (and `Enabled: no`) in
  /etc/apt/sources.list.d/*.sources.
apt reads sources.list first, then sources.list.d's files in name order; files with other
endings (`.disabled`, `.save`, ...) are ignored, here as by apt.

The Debian archive is the first `deb` source whose suite is a Debian release or suite name
(bookworm, trixie-updates, stable, sid, ...) with the `main` component; the security archive
(`*-security`, `*/updates`) carries no release and is passed over.  Other vendors' sources name
their own suites (`nodistro`, `cloud-sdk-bookworm`, Ubuntu's `noble`) and are not taken.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

# Debian's release code names (since 2005) and suite names; `-updates`, `-backports`,
# `-proposed-updates` and `-backports-sloppy` on any of them are the same archive.
DEBIAN_CODENAMES = frozenset({
    "sarge", "etch", "lenny", "squeeze", "wheezy", "jessie", "stretch", "buster", "bullseye",
    "bookworm", "trixie", "forky", "duke", "sid",
    "oldoldstable", "oldstable", "stable", "testing", "unstable", "experimental",
})
ARCHIVE_SUFFIXES = ("", "-updates", "-backports", "-backports-sloppy", "-proposed-updates")


@dataclass(frozen=True)
class Source:
    """One `deb` line, or one URI of a deb822 stanza."""

    uri: str
    suites: tuple[str, ...]
    components: tuple[str, ...]


def is_debian_archive_suite(suite: str) -> bool:
    """True for a suite of Debian's main archive: "bookworm", "trixie-updates", "stable"; false
    for the security archive ("bookworm-security", "buster/updates") and other vendors'."""
    suite = suite.strip("/")
    for suffix in ARCHIVE_SUFFIXES:
        if suffix == "" and suite in DEBIAN_CODENAMES:
            return True
        if suffix and suite.endswith(suffix) and suite[:-len(suffix)] in DEBIAN_CODENAMES:
            return True
    return False


def parse_one_line(text: str) -> list[Source]:
    """The `deb` sources of a sources.list-format text (deb-src and malformed lines skipped)."""
    sources = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        kind, _, rest = line.partition(" ")
        if kind != "deb":
            continue
        rest = rest.strip()
        if rest.startswith("["):  # [arch=amd64 signed-by=/usr/share/keyrings/x.gpg]
            end = rest.find("]")
            if end < 0:
                continue
            rest = rest[end + 1:]
        words = rest.split()
        if len(words) < 2:
            continue
        sources.append(Source(words[0], (words[1],), tuple(words[2:])))
    return sources


def _stanzas(text: str) -> list[dict[str, str]]:
    """deb822 stanzas as {lower-case field: value}; continuation lines folded in, comments out."""
    stanzas: list[dict[str, str]] = []
    current: dict[str, str] = {}
    key = None
    for raw in text.splitlines():
        if raw.startswith("#"):
            continue
        if not raw.strip():
            if current:
                stanzas.append(current)
            current, key = {}, None
            continue
        if raw[0] in " \t":
            if key is not None:
                current[key] += " " + raw.strip()
            continue
        name, colon, value = raw.partition(":")
        if not colon:
            key = None  # not a field: ignored, as the rest of a broken stanza would be
            continue
        key = name.strip().lower()
        current[key] = value.strip()
    if current:
        stanzas.append(current)
    return stanzas


def parse_deb822(text: str) -> list[Source]:
    """The `deb` sources of a deb822 .sources text, one per URI (disabled stanzas skipped)."""
    sources = []
    for stanza in _stanzas(text):
        if stanza.get("enabled", "yes").lower() in ("no", "false", "0"):
            continue
        if "deb" not in stanza.get("types", "").split():
            continue
        suites = tuple(stanza.get("suites", "").split())
        components = tuple(stanza.get("components", "").split())
        for uri in stanza.get("uris", "").split():
            sources.append(Source(uri, suites, components))
    return sources


def debian_mirror(sources: list[Source]) -> str | None:
    """The URI of the first source of Debian's main archive with `main`, without a trailing
    slash; None if there is none."""
    for source in sources:
        if "main" in source.components and any(map(is_debian_archive_suite, source.suites)):
            if source.uri.startswith("cdrom:"):
                continue
            return source.uri.rstrip("/")
    return None


def sources_files(etc_apt: Path = Path("/etc/apt")) -> list[Path]:
    """The files apt reads, in apt's order."""
    files = [etc_apt / "sources.list"] if (etc_apt / "sources.list").is_file() else []
    parts = etc_apt / "sources.list.d"
    if parts.is_dir():
        files += sorted(p for p in parts.iterdir()
                        if p.is_file() and re.fullmatch(r"[A-Za-z0-9_.-]+\.(list|sources)", p.name))
    return files


def host_debian_mirror(etc_apt: Path = Path("/etc/apt")) -> tuple[str | None, list[Path]]:
    """The Debian mirror in the host's apt sources (None if none) and the files read."""
    files = sources_files(etc_apt)
    sources: list[Source] = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        sources += parse_deb822(text) if path.suffix == ".sources" else parse_one_line(text)
    return debian_mirror(sources), files
