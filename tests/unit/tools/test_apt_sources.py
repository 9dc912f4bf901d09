"""tests/debian_roots/apt_sources.py: the Debian mirror the trixie roots are built from is the one the
host's apt already uses, read from sources.list (one-line) and *.sources (deb822) files."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

HERE = Path(__file__).resolve().parents[1]


def _load() -> ModuleType:
    """tests/debian_roots is a directory of scripts, not a package: load the module by its path."""
    path = HERE.parents[0] / "debian_roots" / "apt_sources.py"
    spec = importlib.util.spec_from_file_location("apt_sources", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("apt_sources", module)
    spec.loader.exec_module(module)
    return module


apt = _load()
Source = apt.Source

# What this Debian 12 host has, and what Debian 13's installer writes.
DEBIAN_SOURCES = """\
Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""


# ---- one-line format ----------------------------------------------------------------------------

def test_one_line_with_options_comments_and_deb_src() -> None:
    text = """\
# a comment
deb-src http://src.example/debian bookworm main
deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://mirror.example/debian/ bookworm main contrib  # trailing comment
deb http://security.debian.org/debian-security bookworm-security main

deb   http://proxy.lan:3142/deb.debian.org/debian   bookworm-updates   main
"""
    assert apt.parse_one_line(text) == [
        Source("http://mirror.example/debian/", ("bookworm",), ("main", "contrib")),
        Source("http://security.debian.org/debian-security", ("bookworm-security",), ("main",)),
        Source("http://proxy.lan:3142/deb.debian.org/debian", ("bookworm-updates",), ("main",)),
    ]


@pytest.mark.parametrize("line", [
    "deb", "deb http://x/debian", "deb [arch=amd64 http://x/debian bookworm main",
    "debx http://x/debian bookworm main", "Café ☕ deb http://x bookworm main",
])
def test_malformed_one_line_entries_are_skipped(line: str) -> None:
    assert apt.parse_one_line(line + "\n") == []


# ---- deb822 format ------------------------------------------------------------------------------

def test_deb822_stanzas() -> None:
    assert apt.parse_deb822(DEBIAN_SOURCES) == [
        Source("http://deb.debian.org/debian", ("bookworm", "bookworm-updates"), ("main",)),
        Source("http://deb.debian.org/debian-security", ("bookworm-security",), ("main",)),
    ]


def test_deb822_disabled_source_only_and_several_uris() -> None:
    text = """\
Types: deb
URIs: http://off.example/debian
Suites: trixie
Components: main
Enabled: no

Types: deb-src
URIs: http://src.example/debian
Suites: trixie
Components: main

types: deb deb-src
uris: http://a.example/debian
 http://b.example/debian/
suites: trixie
components: main non-free-firmware
"""
    assert apt.parse_deb822(text) == [
        Source("http://a.example/debian", ("trixie",), ("main", "non-free-firmware")),
        Source("http://b.example/debian/", ("trixie",), ("main", "non-free-firmware")),
    ]


def test_deb822_garbage_does_not_raise() -> None:
    text = "Café ☕\n: \n\tcontinued\nTypes deb\nURIs:\n\n\n#x\nTypes: deb\n"
    assert apt.parse_deb822(text) == []


# ---- which source is Debian's archive -----------------------------------------------------------

@pytest.mark.parametrize("suite, archive", [
    ("bookworm", True), ("trixie", True), ("trixie-updates", True), ("bookworm-backports", True),
    ("stable", True), ("sid", True), ("unstable", True), ("stable-proposed-updates", True),
    ("bookworm-security", False), ("buster/updates", False), ("nodistro", False),
    ("cloud-sdk-bookworm", False), ("noble", False), ("jammy-updates", False), ("", False),
    ("Café ☕", False),
])
def test_debian_archive_suites(suite: str, archive: bool) -> None:
    assert apt.is_debian_archive_suite(suite) is archive


def test_the_first_debian_archive_source_wins_and_others_are_passed_over() -> None:
    sources = [
        Source("https://deb.nodesource.com/node_20.x", ("nodistro",), ("main",)),
        Source("http://security.debian.org/debian-security", ("bookworm-security",), ("main",)),
        Source("http://contrib-only.example/debian", ("bookworm",), ("contrib",)),
        Source("cdrom:[Debian GNU/Linux 12]/", ("bookworm",), ("main",)),
        Source("http://local.lan/debian/", ("bookworm",), ("main",)),
        Source("http://deb.debian.org/debian", ("bookworm",), ("main",)),
    ]
    assert apt.debian_mirror(sources) == "http://local.lan/debian"
    assert apt.debian_mirror(sources[:4]) is None


# ---- the files apt reads ------------------------------------------------------------------------

def _etc(tmp_path: Path, files: dict[str, str]) -> Path:
    etc = tmp_path / "apt"
    (etc / "sources.list.d").mkdir(parents=True)
    for name, text in files.items():
        (etc / name).write_text(text, encoding="utf-8")
    return etc


def test_host_mirror_from_a_sources_file(tmp_path: Path) -> None:
    etc = _etc(tmp_path, {
        "sources.list.d/debian.sources": DEBIAN_SOURCES,
        "sources.list.d/google-cloud-sdk.list.disabled-by-farm":
            "deb http://elsewhere.example/debian bookworm main\n",
    })
    mirror, files = apt.host_debian_mirror(etc)
    assert mirror == "http://deb.debian.org/debian"
    assert [f.name for f in files] == ["debian.sources"]  # not the .disabled-by-farm one


def test_sources_list_comes_first_then_the_directory_by_name(tmp_path: Path) -> None:
    etc = _etc(tmp_path, {
        "sources.list": "# empty but for this\n",
        "sources.list.d/20-debian.sources": DEBIAN_SOURCES,
        "sources.list.d/10-proxy.list": "deb http://apt-cacher.lan:3142/debian bookworm main\n",
    })
    mirror, files = apt.host_debian_mirror(etc)
    assert mirror == "http://apt-cacher.lan:3142/debian"
    assert [f.name for f in files] == ["sources.list", "10-proxy.list", "20-debian.sources"]
    (etc / "sources.list").write_text("deb http://first.lan/debian/ trixie main\n")
    assert apt.host_debian_mirror(etc)[0] == "http://first.lan/debian"


def test_no_debian_source_gives_none(tmp_path: Path) -> None:
    etc = _etc(tmp_path, {"sources.list.d/nodesource.sources":
                          "Types: deb\nURIs: https://deb.nodesource.com/node_20.x\n"
                          "Suites: nodistro\nComponents: main\n"})
    assert apt.host_debian_mirror(etc)[0] is None
    assert apt.host_debian_mirror(tmp_path / "missing") == (None, [])


def test_a_non_utf8_file_is_read_anyway(tmp_path: Path) -> None:
    etc = tmp_path / "apt"
    (etc / "sources.list.d").mkdir(parents=True)
    (etc / "sources.list").write_bytes(b"# caf\xe9\ndeb http://m.lan/debian bookworm main\n")
    assert apt.host_debian_mirror(etc)[0] == "http://m.lan/debian"


def test_trixie_py_falls_back_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """trixie.py's default: the host's mirror, else the fallback with a line on stderr."""
    monkeypatch.syspath_prepend(str(HERE.parents[0] / "debian_roots"))
    spec = importlib.util.spec_from_file_location(
        "trixie_under_test", HERE.parents[0] / "debian_roots" / "trixie.py")
    assert spec is not None and spec.loader is not None
    trixie = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "trixie_under_test", trixie)  # its dataclasses look it up
    spec.loader.exec_module(trixie)
    monkeypatch.setattr(trixie, "host_debian_mirror", lambda: ("http://m.lan/debian", []))
    assert trixie.mirror_of_host() == "http://m.lan/debian"
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(trixie, "host_debian_mirror",
                        lambda: (None, [Path("/etc/apt/sources.list")]))
    assert trixie.mirror_of_host() == trixie.FALLBACK_MIRROR
    err = capsys.readouterr().err
    assert "no Debian mirror found" in err and trixie.FALLBACK_MIRROR in err
    assert "/etc/apt/sources.list" in err
