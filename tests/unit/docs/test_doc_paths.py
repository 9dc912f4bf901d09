"""Messages point only to documents the package installs (issue 34, item 10).

A message of the daemon or of scanguardctl (any string in nm_scanguard/ that is not a
docstring) and the manual pages may name a document only by its installed path under
/usr/share/doc/nm-scanguard/ or as one of the package's manual pages; "README" or "docs/x.md"
alone names a file of a source checkout, which an installed system does not have.  What is
installed is read from debian/nm-scanguard.docs, debian/rules and debian/nm-scanguard.manpages."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

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
