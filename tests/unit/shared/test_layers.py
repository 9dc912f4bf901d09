"""The package's layers, read from the code's own imports (issues 33 and 49).

nm_scanguard/ has four folders over the modules they all share at the top, and daemon/ has
three of its own under the composition at its top:

    cli/             scanguardctl                       may import diagnose, peers, the top
    daemon/          scanguardd: its composition        may import its parts, peers, the top
                     (entry, service, daemon, guard_set,
                     off, deferral, systemd_status)
      (shared)       changes, throttle                  may import the top
      bgscan/        the bgscan core: table, ledger,    may import peers, the top
                     suspension, journal
      guard/         one interface's guard and its      may import bgscan/, (shared), peers,
                     parts (policy, sampling, ...)      the top
      api/           the D-Bus API and the hold table   may import guard/, (shared), peers,
                                                        the top; never bgscan/
    diagnose/        scanguardctl diagnose              may import peers, the top
    peers/           wpa_supplicant, NetworkManager,    may import the top
                     rtnetlink, nl80211, the bus
    (top)            text, names, config, status, ...   imports only the top

So diagnose and the CLI never import the daemon's core, peers never import the daemon, nothing
imports upward, and no module reaches itself again through its imports (no circles, lazy
imports inside functions included).  Code outside bgscan/ imports it only through its package
(bgscan/__init__.py names what it offers), never one of its modules: the ledger and the journal
stay inside.  `nm_scanguard/__main__.py` is the package's face (`python3 -m nm_scanguard` starts
the daemon) and stands outside the layers.

Sizes: no module over 400 lines, no class over 250, no folder over 12 modules (the .py files
besides __init__.py and the face).  The modules, classes and folders listed in OVER_THE_LIMIT
and FOLDERS_OVER_THE_LIMIT are older than the rule; none may grow past its figure there, and
each leaves the list when it fits.  Every folder is a package that the build installs
(setup.cfg finds them: `packages = find:`).
"""

from __future__ import annotations

import ast
import configparser
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[3] / "nm_scanguard"
# Each folder is a layer, named by its path below nm_scanguard/.
LAYERS = ("cli", "daemon", "daemon/bgscan", "daemon/guard", "daemon/api", "diagnose", "peers")
# The modules at daemon/'s top that every part of the daemon may use; they import no part.
DAEMON_SHARED = {"nm_scanguard.daemon.changes", "nm_scanguard.daemon.throttle"}
SHARED = "daemon (shared)"
MAY_IMPORT = {
    "": {""},
    "peers": {"", "peers"},
    "daemon": {"", "peers", "daemon", SHARED, "daemon/bgscan", "daemon/guard", "daemon/api"},
    SHARED: {"", SHARED},
    "daemon/bgscan": {"", "peers", "daemon/bgscan"},
    "daemon/guard": {"", "peers", SHARED, "daemon/bgscan", "daemon/guard"},
    "daemon/api": {"", "peers", SHARED, "daemon/guard", "daemon/api"},
    "diagnose": {"", "peers", "diagnose"},
    "cli": {"", "peers", "diagnose", "cli"},
}
# The folder whose modules nothing outside it imports: it is reached through its package.
SEALED = "nm_scanguard.daemon.bgscan"
FACES = {"nm_scanguard.__main__"}
MAX_MODULE_LINES = 400
MAX_CLASS_LINES = 250
MAX_FOLDER_MODULES = 12
# What may exceed the limit, with its lines then: nothing since issue 33's split.  An entry
# here is a debt with its size; the test fails if it grows, or once it fits.
OVER_THE_LIMIT: dict[str, int] = {}
# The same for the modules in a folder ("" is nm_scanguard/ itself).
FOLDERS_OVER_THE_LIMIT: dict[str, int] = {}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(module: str) -> str:
    if module in DAEMON_SHARED:
        return SHARED
    path = "/".join(module.split(".")[1:])
    return max((name for name in LAYERS if path == name or path.startswith(name + "/")),
               key=len, default="")


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(module: str) -> set[str]:
    """The package's modules that `module` imports, at the top or inside a function."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            names = [origin] + [f"{origin}.{alias.name}" for alias in node.names]
        else:
            continue
        found |= {name for name in names if name in MODULES and name != module}
    return found


GRAPH = {module: imports_of(module) for module in MODULES}


def folders() -> set[str]:
    """Every folder below nm_scanguard/ that holds a .py file, by its path there."""
    return {str(p.parent.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if p.parent != PACKAGE}


def test_every_folder_of_the_package_is_a_layer():
    assert folders() == set(LAYERS)
    assert all((PACKAGE / folder / "__init__.py").is_file() for folder in LAYERS)


def test_the_build_installs_every_folder():
    # setup.cfg lets setuptools find the packages; a folder without __init__.py would be left out.
    setup = configparser.ConfigParser()
    setup.read(PACKAGE.parent / "setup.cfg", encoding="utf-8")
    assert setup["options"]["packages"].strip() == "find:"
    assert setup["options.packages.find"]["include"].strip() == "nm_scanguard*"
    setuptools = pytest.importorskip("setuptools")
    found = set(setuptools.find_packages(str(PACKAGE.parent), include=["nm_scanguard*"]))
    assert found == {"nm_scanguard"} | {"nm_scanguard." + f.replace("/", ".") for f in folders()}


@pytest.mark.parametrize("module", sorted(set(MODULES) - FACES))
def test_no_module_imports_a_layer_it_may_not(module):
    own = layer(module)
    wrong = sorted(f"{name} ({layer(name) or 'top'})" for name in GRAPH[module]
                   if layer(name) not in MAY_IMPORT[own])
    assert not wrong, f"{module} ({own or 'top'}) may import only {sorted(MAY_IMPORT[own])}: {wrong}"


def test_outside_code_reaches_bgscan_only_through_its_package():
    inside = [m for m in MODULES if m == SEALED or m.startswith(SEALED + ".")]
    reaching = sorted(f"{module} imports {name}" for module in set(MODULES) - set(inside)
                      for name in GRAPH[module] if name.startswith(SEALED + "."))
    assert not reaching, f"import {SEALED} itself, whose __init__ names what it offers: {reaching}"


def test_the_rule_sees_the_imports_it_judges():
    # A reader that found no imports would pass every rule above.
    assert "nm_scanguard.daemon.bgscan.suspension_table" in GRAPH["nm_scanguard.daemon.bgscan.suspension"]
    assert "nm_scanguard.daemon.bgscan" in GRAPH["nm_scanguard.daemon.guard.guard"]  # from .. import
    assert "nm_scanguard.daemon.guard.policy" in GRAPH["nm_scanguard.daemon.api.methods"]
    assert "nm_scanguard.diagnose.plot" in GRAPH["nm_scanguard.cli.scanguardctl"]  # lazy
    assert "nm_scanguard.text" in GRAPH["nm_scanguard.peers.nm"]  # from .. import
    assert "nm_scanguard.text" in GRAPH["nm_scanguard.daemon.api.holds"]  # from ... import
    assert "nm_scanguard.daemon.entry" in GRAPH["nm_scanguard.__main__"]


def test_each_module_is_in_the_layer_its_folder_says():
    assert layer("nm_scanguard.text") == ""
    assert layer("nm_scanguard.daemon.daemon") == "daemon"
    assert layer("nm_scanguard.daemon.changes") == SHARED
    assert layer("nm_scanguard.daemon.bgscan") == "daemon/bgscan"
    assert layer("nm_scanguard.daemon.bgscan.journal") == "daemon/bgscan"
    assert layer("nm_scanguard.daemon.guard_set") == "daemon"  # not guard/
    assert layer("nm_scanguard.daemon.api.holds") == "daemon/api"


def test_no_circles():
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for name in sorted(GRAPH[module]):
            if state.get(name) == 1:
                return path[path.index(name):] + [name]
            if name not in state and (circle := visit(name)):
                return circle
        path.pop()
        state[module] = 2
        return None

    for module in sorted(GRAPH):
        if module not in state:
            circle = visit(module)
            assert circle is None, "import circle: " + " -> ".join(circle)


def sizes() -> dict[str, int]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        rel = str(path.relative_to(PACKAGE))
        text = path.read_text(encoding="utf-8")
        out[rel] = len(text.splitlines())
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                assert node.end_lineno is not None
                out[f"{rel}:{node.name}"] = node.end_lineno - node.lineno + 1
    return out


def test_modules_and_classes_within_their_size():
    measured = sizes()
    too_big = []
    for name, lines in sorted(measured.items()):
        limit = MAX_CLASS_LINES if ":" in name else MAX_MODULE_LINES
        allowed = max(limit, OVER_THE_LIMIT.get(name, 0))
        if lines > allowed:
            too_big.append(f"{name}: {lines} lines, limit {allowed}")
    assert not too_big, "split these (a module ≤ 400 lines, a class ≤ 250):\n" + "\n".join(too_big)


def test_the_list_of_older_oversize_things_is_kept_short():
    measured = sizes()
    stale = sorted(f"{name}: {measured.get(name, 'gone')}" for name in OVER_THE_LIMIT
                   if measured.get(name, 0) <= (MAX_CLASS_LINES if ":" in name else MAX_MODULE_LINES))
    assert not stale, "these fit the limit now; take them off OVER_THE_LIMIT: " + ", ".join(stale)


def folder_sizes() -> dict[str, int]:
    """The modules in each folder, nm_scanguard/ itself as "": the .py files but __init__.py
    and the face."""
    out: dict[str, int] = {}
    for path in PACKAGE.rglob("*.py"):
        if path.name != "__init__.py" and module_name(path) not in FACES:
            folder = "" if path.parent == PACKAGE else str(path.parent.relative_to(PACKAGE))
            out[folder] = out.get(folder, 0) + 1
    return out


def test_folders_within_their_size():
    too_big = sorted(f"{folder or 'nm_scanguard'}/: {count} modules, limit {limit}"
                     for folder, count in folder_sizes().items()
                     if count > (limit := max(MAX_FOLDER_MODULES, FOLDERS_OVER_THE_LIMIT.get(folder, 0))))
    assert not too_big, "split these into folders:\n" + "\n".join(too_big)


def test_the_list_of_older_oversize_folders_is_kept_short():
    measured = folder_sizes()
    stale = sorted(f"{folder or 'nm_scanguard'}/: {measured.get(folder, 'gone')}"
                   for folder in FOLDERS_OVER_THE_LIMIT if measured.get(folder, 0) <= MAX_FOLDER_MODULES)
    assert not stale, "these fit the limit now; take them off FOLDERS_OVER_THE_LIMIT: " + ", ".join(stale)


def documented_modules() -> dict[str, set[str]]:
    """The module map in docs/how-it-works.md (its Layout section's table): folder -> modules."""
    text = (PACKAGE.parent / "docs" / "how-it-works.md").read_text(encoding="utf-8")
    block = text[text.index("## Layout"):].split("```")[1]
    found: dict[str, set[str]] = {}
    folder = ""
    for line in block.splitlines():
        if re.match(r"[a-z_/]+/ ", line):
            folder = line.split()[0].rstrip("/")
        elif (m := re.match(r"  ([a-z_0-9]+)\.py ", line)) and folder:
            found.setdefault(folder, set()).add(m.group(1))
    return found


def test_the_module_map_lists_every_module_of_the_daemon():
    documented = documented_modules()
    for folder in (name for name in LAYERS if name.split("/")[0] == "daemon"):
        here = {p.stem for p in (PACKAGE / folder).glob("*.py") if p.name != "__init__.py"}
        assert documented.get(folder) == here, f"docs/how-it-works.md's Layout for {folder}/"
