"""nm_scanguard.dbuslib: which D-Bus library is chosen and what its import leaves loaded; the
EAGAIN patch of the writer, and the warning when it cannot apply (issue 21).

- The version rule (`BROKEN_BELOW`) lets the daemon skip Debian 12's dbus-fast 1.84.2 without
  importing it (it stayed loaded: 2.1 MiB).  A rule about a version is only as good as its tie to
  the behaviour, so each installed library's version verdict is checked here against what its
  marshaller really writes for "é" — on Debian 12 and, in the trixie root, on Debian 13.
- The daemon's import loads no gi/GLib (3.5 MiB) and no refused library; gi stays importable
  for scanguardctl's config verbs (libnm).
"""

from __future__ import annotations

import asyncio
import logging
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nm_scanguard import dbuslib
from nm_scanguard.dbuslib import (
    BROKEN_BELOW, KNOWN, WRONG_LENGTH, _EagainSafeSocket, installed_version, known_broken,
    make_writer_eagain_safe, marshals_utf8, version_tuple,
)

ROOT = Path(__file__).resolve().parents[3]


def fresh(code: str) -> str:
    """Run `code` in a fresh interpreter (pytest has loaded much already); its stdout."""
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


# ---- the version rule, tied to the behaviour ----------------------------------------------------

@pytest.mark.parametrize("name", KNOWN)
def test_the_version_rule_agrees_with_the_marshaller_here(name: str) -> None:
    version = installed_version(name)
    assert version is not None, f"{name} is not installed (make deps-test installs both)"
    assert known_broken(name, version) == (not marshals_utf8(name)), (name, version)


@pytest.mark.parametrize("version, broken", [
    ("1.84.2", True), ("1.0", True), ("0.1", True), ("2", False), ("2.0", False),
    ("2.44.1", False), ("10.0.0", False), ("2.0rc1", False), ("garbage", False),
    ("", False), (None, False),
])
def test_known_broken_dbus_fast(version: str | None, broken: bool) -> None:
    assert known_broken("dbus_fast", version) is broken


def test_dbus_next_has_no_broken_versions_known() -> None:
    assert not known_broken("dbus_next", "0.2.3") and not known_broken("dbus_next", "0.0.1")


def test_version_tuple() -> None:
    assert version_tuple("1.84.2") == (1, 84, 2)
    assert version_tuple("2.0rc1") == (2,)
    assert version_tuple("rc") == ()


def test_installed_version_reads_the_file_without_importing(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "sgfakelib"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise RuntimeError('imported')\n")
    (pkg / "__version__.py").write_text('__title__ = "x"\n__version__ = "1.2.3"\n')
    bare = tmp_path / "sgbarelib"
    bare.mkdir()
    (bare / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert installed_version("sgfakelib") == "1.2.3"
    assert "sgfakelib" not in sys.modules
    assert installed_version("sgbarelib") is None
    assert installed_version("sg_not_installed_anywhere") is None
    assert installed_version("os") is None  # a module, not a package


def test_a_refused_library_is_named_with_its_version_and_why() -> None:
    """SCANGUARD_DBUS_LIB=dbus_fast on a release whose dbus-fast is refused: the skip says so."""
    out = fresh("import os; os.environ['SCANGUARD_DBUS_LIB'] = 'dbus_fast'\n"
                "import sys, nm_scanguard.dbuslib as d\n"
                "print(d.LIBRARY); print('dbus_fast' in sys.modules); print(*d.SKIPPED, sep='|')")
    library, loaded, skipped = (out.splitlines() + [""])[:3]  # no skip: an empty third line
    if known_broken("dbus_fast", installed_version("dbus_fast")):  # Debian 12
        assert library == "dbus_next" and loaded == "False"
        assert skipped.startswith(f"dbus_fast {installed_version('dbus_fast')} ")
        assert "wrong length" in skipped
    else:  # Debian 13
        assert library == "dbus_fast" and skipped == ""


def test_an_expected_pass_over_is_no_warning() -> None:
    """Issue 34: every start on Debian 12 warned that dbus-fast 1.84.2 is not used.  With
    nothing asked for, passing it over is the expected case: kept for a debug line
    (`describe`), not among the skips the daemon warns of."""
    out = fresh("import os; os.environ.pop('SCANGUARD_DBUS_LIB', None)\n"
                "import nm_scanguard.dbuslib as d\n"
                "print(d.LIBRARY); print(len(d.SKIPPED)); print(d.describe())")
    library, skipped, described = out.splitlines()
    fast = installed_version("dbus_fast")
    assert skipped == "0"
    if known_broken("dbus_fast", fast):  # Debian 12
        assert described == (f"using D-Bus library dbus_next {installed_version('dbus_next')}; "
                             f"passed over: dbus_fast {fast} {WRONG_LENGTH}")
    else:  # Debian 13
        assert described == f"using D-Bus library {library} {installed_version(library)}"


# ---- the package asks for a library the daemon uses ----------------------------------------------

def control_fields(paragraph: str) -> dict[str, list[str]]:
    """A debian/control paragraph's relation fields: name -> its comma-separated entries."""
    fields: dict[str, list[str]] = {}
    for name, value in re.findall(r"^([A-Za-z-]+):(.*(?:\n[ \t].*)*)", paragraph, re.M):
        fields[name] = [e.strip() for e in " ".join(value.split()).split(",") if e.strip()]
    return fields


def alternatives(entry: str) -> list[tuple[str, str, str]]:
    """`a (>= 2) | b <!nocheck>` -> [("a", ">=", "2"), ("b", "", "")]; none for a
    substitution variable such as ${misc:Depends}."""
    if entry.startswith("${"):
        return []
    out = []
    for alt in entry.split("|"):
        m = re.fullmatch(r"\s*([a-z0-9.+-]+)\s*(?:\((>=|<=|>>|<<|=)\s*([^)\s]+)\s*\))?\s*(?:<[^>]*>)?\s*", alt)
        assert m, alt
        out.append((m[1], m[2] or "", m[3] or ""))
    return out


def satisfies(version: str, op: str, floor: str) -> bool:
    """dpkg's answer to `version op floor` (dpkg --compare-versions), as apt applies it."""
    if not op:
        return True
    word = {">=": "ge", "<=": "le", ">>": "gt", "<<": "lt", "=": "eq"}[op]
    if shutil.which("dpkg") is None:
        pytest.skip("dpkg is needed to compare Debian versions")
    return subprocess.run(["dpkg", "--compare-versions", version, word, floor],
                          check=False).returncode == 0


def module_of(package: str) -> str | None:
    """python3-dbus-fast -> dbus_fast, for the D-Bus libraries dbuslib knows."""
    module = package.removeprefix("python3-").replace("-", "_")
    return module if module in KNOWN else None


def test_the_package_installs_only_a_library_the_daemon_uses() -> None:
    """Issue 34: on Debian 12 the package must not pull in or recommend dbus-fast 1.84.2,
    which the daemon refuses.  apt takes the first alternative of a dependency that the
    release can satisfy: every alternative naming a library has a floor at or above the
    versions dbuslib refuses (BROKEN_BELOW), so Debian 12 (dbus-fast 1.84.2) gets dbus-next
    and Debian 13 (2.44.1) dbus-fast; Recommends and Suggests name neither.  Checked against
    the versions installed here as well (the Makefile installs this release's both)."""
    control = (ROOT / "debian" / "control").read_text(encoding="utf-8")
    source, binary = control.split("\n\n", 1)
    src, pkg = control_fields(source), control_fields(binary)
    entries = {field: [e for e in fields.get(field, []) if
                       any(module_of(name) for name, _, _ in alternatives(e))]
               for fields, field in ((pkg, "Depends"), (pkg, "Recommends"), (pkg, "Suggests"),
                                     (src, "Build-Depends"))}
    assert entries["Recommends"] == [] and entries["Suggests"] == [], entries
    # The build itself imports the package (the manual pages): one library, with no
    # alternative, since Debian's buildds (sbuild's resolver) take only the first alternative
    # of a build dependency, and python3-dbus-fast (>= 2) is not in Debian 12 (make
    # archive-check found the build unbuildable there).  dbus-next is in both releases.  The
    # build's own tests compare both libraries' marshallers (above): the other one is
    # <!nocheck>.
    for_tests = [e for e in entries["Build-Depends"] if e.endswith("<!nocheck>")]
    for_build = [e for e in entries["Build-Depends"] if e not in for_tests]
    assert for_build == ["python3-dbus-next"], for_build
    assert all("|" not in e for e in entries["Build-Depends"]), entries["Build-Depends"]
    assert sorted(module_of(e.split()[0]) for e in for_tests + for_build) == sorted(KNOWN)
    assert len(entries["Depends"]) == 1, entries
    choice = alternatives(entries["Depends"][0])
    for name, op, floor in choice:
        broken_below = BROKEN_BELOW.get(module_of(name) or "")
        if broken_below is not None:
            assert op == ">=" and version_tuple(floor) >= broken_below, (name, op, floor)
    for name, op, floor in choice:
        module = module_of(name)
        have = installed_version(module) if module else None
        if have is not None and satisfies(have, op, floor):
            assert not known_broken(module, have) and marshals_utf8(module), (name, have)
            break


# ---- what the daemon's import loads -------------------------------------------------------------

def test_the_daemon_loads_no_gi_and_no_refused_library() -> None:
    out = fresh("import sys, nm_scanguard.daemon.service, nm_scanguard.dbuslib as d\n"
                "print(d.LIBRARY)\n"
                "print(' '.join(sorted(m for m in ('gi', 'dbus_fast', 'dbus_next', 'pyroute2')\n"
                "                      if m in sys.modules)))\n")
    library, loaded = out.splitlines()
    assert loaded.split() == [library]


def test_gi_stays_importable_after_the_library() -> None:
    """scanguardctl imports dbuslib first and gi later (profiles.py, libnm)."""
    out = fresh("import nm_scanguard.cli.scanguardctl, sys\n"
                "assert 'gi' not in sys.modules\n"
                "import gi\n"
                "gi.require_version('NM', '1.0')\n"
                "from gi.repository import GLib, NM\n"
                "print(GLib.MAJOR_VERSION, NM.__name__)")
    assert out.split() == ["2", "gi.repository.NM"]


def test_gi_loaded_before_is_left_alone() -> None:
    out = fresh("import gi, sys\n"
                "import nm_scanguard.dbuslib\n"
                "print(sys.modules['gi'] is gi)")
    assert out.strip() == "True"


def test_without_gi() -> None:
    out = fresh("import sys\n"
                "from nm_scanguard.dbuslib import without_gi\n"
                "with without_gi():\n"
                "    try:\n"
                "        import gi\n"
                "    except ImportError:\n"
                "        print('refused')\n"
                "import gi\n"
                "print(type(gi).__name__)\n")
    assert out.split() == ["refused", "module"]


# ---- the EAGAIN patch ---------------------------------------------------------------------------

class Writer:
    def __init__(self, sock: Any) -> None:
        self.sock = sock


class SlottedWriter:
    """Like a compiled writer: `sock` can be read, not replaced."""

    __slots__ = ("_sock",)

    def __init__(self, sock: Any) -> None:
        self._sock = sock

    @property
    def sock(self) -> Any:
        return self._sock


class Bus:
    def __init__(self, writer: Any) -> None:
        if writer is not None:
            self._writer = writer


def test_the_patch_wraps_the_writers_socket_once() -> None:
    raw = object()
    bus = Bus(Writer(raw))
    assert make_writer_eagain_safe(bus) is None
    assert isinstance(bus._writer.sock, _EagainSafeSocket) and bus._writer.sock._sock is raw
    wrapped = bus._writer.sock
    assert make_writer_eagain_safe(bus) is None and bus._writer.sock is wrapped


@pytest.mark.parametrize("bus, why", [
    (Bus(None), "has no _writer"),
    (Bus(Writer(None)), "has no sock"),
    (Bus(SlottedWriter(object())), "does not take another sock"),
])
def test_the_patch_says_why_it_cannot_apply(bus: Any, why: str) -> None:
    reason = make_writer_eagain_safe(bus)
    assert reason is not None and why in reason and dbuslib.LIBRARY in reason


def test_the_warning_is_logged_once(monkeypatch: pytest.MonkeyPatch,
                                    caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(dbuslib, "_warned_unsafe_writer", False)
    with caplog.at_level(logging.WARNING, logger="nm_scanguard.dbuslib"):
        dbuslib._warn_unsafe_writer("Café ☕'s writer has no sock")
        dbuslib._warn_unsafe_writer("again")
    records = [r for r in caplog.records if r.name == "nm_scanguard.dbuslib"]
    assert len(records) == 1
    text = records[0].getMessage()
    assert "EAGAIN" in text and "Café ☕'s writer has no sock" in text and "restarts" in text


async def test_connect_patches_the_real_writer_and_warns_when_it_cannot(
        system_bus: Any, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """On this release the library's writer takes the patch; when a library's would not,
    connect() warns (the wiring, with the patch made to fail)."""
    bus = await dbuslib.MessageBus(bus_type=dbuslib.BusType.SYSTEM).connect()
    try:
        assert isinstance(bus._writer.sock, _EagainSafeSocket)
    finally:
        bus.disconnect()
    monkeypatch.setattr(dbuslib, "_warned_unsafe_writer", False)
    monkeypatch.setattr(dbuslib, "make_writer_eagain_safe", lambda _bus: "a test's reason")
    with caplog.at_level(logging.WARNING, logger="nm_scanguard.dbuslib"):
        bus = await dbuslib.MessageBus(bus_type=dbuslib.BusType.SYSTEM).connect()
        bus.disconnect()
        await asyncio.sleep(0)
    assert [r.getMessage() for r in caplog.records
            if "a test's reason" in r.getMessage() and "EAGAIN" in r.getMessage()]
