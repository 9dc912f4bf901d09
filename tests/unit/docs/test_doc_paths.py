"""Messages point only to documents the package installs (issue 34, item 10), and the installed
documents' links lead somewhere (issue 50, item 10).

A message of the daemon or of scanguardctl (any string in nm_scanguard/ that is not a
docstring) and the manual pages may name a document only by its installed path under
/usr/share/doc/nm-scanguard/ or as one of the package's manual pages; "README" or "docs/x.md"
alone names a file of a source checkout, which an installed system does not have.  What is
installed is read from debian/nm-scanguard.docs, debian/rules and debian/nm-scanguard.manpages."""

from __future__ import annotations

import ast
import os
import re
import shutil
from pathlib import Path

import pytest

from tests.unit.docs.test_docs import LINKED, anchors, broken_links, links

REPO = Path(__file__).resolve().parents[3]
DOC = "/usr/share/doc/nm-scanguard"
DOC_PATH = re.compile(re.escape(DOC) + r"(?:/[\w.-]*[\w])*/?")
BARE = re.compile(r"(?<![/\w])README\b|(?<![/\w-])docs/[\w.-]+")
MAN_REF = re.compile(r"\b(scanguard[\w.]*)\((\d)\)")


def installed_docs() -> set[str]:
    """Every path under /usr/share/doc/nm-scanguard the package installs, with the folders."""
    out = {f"{DOC}/{Path(line.strip()).name}"
           for line in (REPO / "debian" / "nm-scanguard.docs").read_text().splitlines()
           if line.strip() and not line.startswith("#")}
    rules = (REPO / "debian" / "rules").read_text()
    for dest, pattern in re.findall(r"install -D -m 0644 -t \$\(PKG\)(\S+) (\S+)", rules):
        out |= {f"{dest}/{p.name}" for p in REPO.glob(pattern)}
    # dh_compress would make a large one NAME.md.gz, a path no message names.
    assert re.search(r"^\tdh_compress -X\.md$", rules, re.M), "debian/rules compresses the .md files"
    folders = {str(Path(p).parent) for p in out}
    return out | folders | {f + "/" for f in folders}


def man_pages() -> set[str]:
    return {Path(line.strip()).name
            for line in (REPO / "debian" / "nm-scanguard.manpages").read_text().splitlines()
            if line.strip()}


def message_strings(path: Path) -> list[str]:
    """Every string constant of a module but its docstrings, f-string parts included."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    return [n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings]


def problems(texts: list[str], docs: set[str], pages: set[str]) -> list[str]:
    out = []
    for text in texts:
        for m in DOC_PATH.finditer(text):
            if m.group(0) not in docs:
                out.append(f"{m.group(0)} is not installed: {text[:80]!r}")
        for m in BARE.finditer(text):
            out.append(f"{m.group(0)!r} names a file of a checkout: {text[:80]!r}")
        for m in MAN_REF.finditer(text):
            if f"{m.group(1)}.{m.group(2)}" not in pages:
                out.append(f"{m.group(0)}: no such manual page in the package: {text[:80]!r}")
    return out


@pytest.mark.parametrize("path", sorted((REPO / "nm_scanguard").rglob("*.py")),
                         ids=lambda p: str(p.relative_to(REPO / "nm_scanguard")))
def test_messages_name_only_installed_documents(path):
    assert problems(message_strings(path), installed_docs(), man_pages()) == []


def test_man_pages_name_only_installed_documents():
    texts = ["\n".join(line for line in p.read_text(encoding="utf-8").replace("\\-", "-").splitlines()
                       if not line.startswith('.\\"'))  # troff comments are for editors
             for p in [*(REPO / "man").glob("*.extra"), REPO / "systemd" / "scanguard.conf.5"]]
    assert problems(texts, installed_docs(), man_pages()) == []
    assert any(DOC in t for t in texts)


def test_the_documents_messages_name_are_installed():
    docs = installed_docs()
    for name in ("README.md", "NEWS.md", "docs/scan-deferral.md", "docs/how-it-works.md"):
        assert f"{DOC}/{name}" in docs, f"{name} is not installed"


def test_the_check_catches_checkout_paths_and_unknown_pages():
    docs = {f"{DOC}/docs/a.md", f"{DOC}/docs", f"{DOC}/docs/"}
    pages = {"scanguardd.8"}
    assert problems([f"see {DOC}/docs/a.md, \"Café ☕\"", "scanguardd(8)"], docs, pages) == []
    found = problems(["(README, \"Install\")", "docs/scan-deferral.md", f"{DOC}/docs/b.md",
                      "scanguard.conf(5)", "Café ☕ docs/x.md"], docs, pages)
    assert [f.split(":")[0] for f in found] == [
        "'README' names a file of a checkout", "'docs/scan-deferral.md' names a file of a checkout",
        f"{DOC}/docs/b.md is not installed", "scanguard.conf(5)",
        "'docs/x.md' names a file of a checkout"]


def test_docstrings_are_not_messages(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('"""See README."""\ndef f():\n    """docs/x.md"""\n    return "docs/y.md"\n')
    assert message_strings(module) == ["docs/y.md"]


# ---- the installed documents' links (issue 50, item 10) -------------------------------------------

# A file of the source tree alone (the Makefile, the lab's README, ...) is linked by its address in
# the repository, which works from a checkout, on the web and in /usr/share/doc alike.
REPO_URL = "https://github.com/nm-scanguard/nm-scanguard/blob/main/"


def installed_layout(root: Path, rules: str, docs: str, links_file: str) -> list[Path]:
    """The files debian/rules' `install` lines, debian/nm-scanguard.docs and
    debian/nm-scanguard.links put in the package, copied from the tree under `root` (what the
    build generates, $(MAN) and $(COMPLETION), left out); the documents under /usr/share/doc."""
    def put(source: Path, dest: str) -> None:
        target = root / dest.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)

    rules = rules.replace("\\\n", " ")
    for line in rules.splitlines():
        m = re.match(r"^\tinstall -D -m \d+ -t \$\(PKG\)(\S+) (.+)$", line)
        if m:
            for pattern in m.group(2).split():
                found = sorted(REPO.glob(pattern))
                assert found, f"debian/rules installs {pattern}, which matches nothing"
                for source in found:
                    put(source, f"{m.group(1)}/{source.name}")
            continue
        m = re.match(r"^\tinstall -D -m \d+ (\S+)\s+\$\(PKG\)(\S+)$", line)
        if m and not m.group(1).startswith("$("):
            put(REPO / m.group(1), m.group(2))
    for line in docs.splitlines():
        if line.strip() and not line.startswith("#"):
            put(REPO / line.strip(), f"{DOC}/{Path(line.strip()).name}")
    for line in links_file.splitlines():
        if line.strip() and not line.startswith("#"):
            target, link = line.split()
            (root / link).parent.mkdir(parents=True, exist_ok=True)
            (root / link).symlink_to(os.path.relpath(root / target, (root / link).parent))
    return sorted((root / DOC.lstrip("/")).rglob("*.md"))


def build_layout(root: Path) -> list[Path]:
    debian = REPO / "debian"
    return installed_layout(root, (debian / "rules").read_text(encoding="utf-8"),
                            (debian / "nm-scanguard.docs").read_text(encoding="utf-8"),
                            (debian / "nm-scanguard.links").read_text(encoding="utf-8"))


def test_every_relative_link_of_the_installed_documents_resolves_there(tmp_path):
    documents = build_layout(tmp_path)
    names = {str(p.relative_to(tmp_path / DOC.lstrip("/"))) for p in documents}
    assert {"README.md", "NEWS.md", "docs/how-it-works.md", "docs/dbus-api.md"} <= names, names
    bad = {str(p.relative_to(tmp_path)): broken_links(p) for p in documents}
    assert {k: v for k, v in bad.items() if v} == {}
    # README's images and its link to the D-Bus XML, where the package puts it
    doc = tmp_path / DOC.lstrip("/")
    assert (doc / "docs" / "demo-example.png").is_file() and (doc / "docs" / "paper").is_dir()
    xml = doc / "nm_scanguard" / "io.github.nm_scanguard.ScanGuard1.xml"
    assert xml.is_symlink() and xml.resolve() == (
        tmp_path / "usr/share/dbus-1/interfaces/io.github.nm_scanguard.ScanGuard1.xml")


def test_the_layout_follows_the_install_lines_and_a_dead_link_is_seen(tmp_path):
    rules = ("\tinstall -D -m 0644 -t $(PKG)/usr/share/doc/nm-scanguard/docs docs/dbus-api.md\n"
             "\tinstall -D -m 0644 nm_scanguard/io.github.nm_scanguard.ScanGuard1.xml \\\n"
             "\t    $(PKG)/usr/share/x/ScanGuard1.xml\n"
             "\tinstall -D -m 0644 $(COMPLETION)/scanguardctl $(PKG)/usr/share/y\n")
    links_file = "usr/share/x/ScanGuard1.xml usr/share/doc/nm-scanguard/nm_scanguard/Café.xml\n"
    documents = installed_layout(tmp_path / "b", rules, "# c\nREADME.md\n", links_file)
    doc = tmp_path / "b" / DOC.lstrip("/")
    assert documents == [doc / "README.md", doc / "docs" / "dbus-api.md"]
    assert (doc / "nm_scanguard" / "Café.xml").resolve() == tmp_path / "b/usr/share/x/ScanGuard1.xml"
    assert not (tmp_path / "b/usr/share/y").exists()
    # README's docs/how-it-works.md is not in this layout
    assert any(b.startswith("docs/how-it-works.md") for b in broken_links(doc / "README.md"))


def repository_links(path: Path) -> list[str]:
    return [t[len(REPO_URL):] for t in links(path.read_text(encoding="utf-8")) if t.startswith(REPO_URL)]


@pytest.mark.parametrize("path", LINKED, ids=lambda p: str(p.relative_to(REPO)))
def test_every_repository_link_names_a_file_of_the_tree(path):
    for target in repository_links(path):
        file_part, _, fragment = target.partition("#")
        assert (REPO / file_part).is_file(), f"{path.name}: {REPO_URL}{target}: no {file_part} in the tree"
        if fragment and file_part.endswith(".md"):
            assert fragment in anchors(REPO / file_part), f"{path.name}: {target}: no such heading"


def test_the_documents_link_the_source_tree_by_address():
    found = [t for p in LINKED for t in repository_links(p)]
    assert "Makefile" in found and "tests/lab/README.md" in found, found

