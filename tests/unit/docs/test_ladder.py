"""One ladder: the rungs `make test` prints are the numbered items of docs/testing.md, with the
same numbers and names, and every `make TARGET` a document or a test names exists."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
MAKEFILES = [REPO / "Makefile", *sorted((REPO / "mk").glob("*.mk"))]


def _recipe(target: str) -> str:
    text = (REPO / "Makefile").read_text(encoding="utf-8")
    start = re.search(rf"^{target}:.*\n", text, re.M)
    assert start, f"the Makefile has no {target} target"
    body = text[start.end():]
    end = re.search(r"^\S", body, re.M)
    return body[:end.start()] if end else body


def _printed_rungs() -> list[tuple[int, int, str]]:
    """(N, OF, NAME) of each rung make test prints as `rung N/OF NAME:`, in the order each first
    appears in its recipe (rung 3 prints one step per D-Bus library)."""
    seen: dict[int, tuple[int, int, str]] = {}
    for n, of, name in re.findall(r"rung (\d+)/(\d+) ([^:]+):", _recipe("test")):
        seen.setdefault(int(n), (int(n), int(of), name))
    return list(seen.values())


def _documented_rungs() -> list[tuple[int, str]]:
    """(N, NAME) of each top-level item `N. **NAME**` of docs/testing.md's ladder section."""
    text = (REPO / "docs" / "testing.md").read_text(encoding="utf-8")
    section = text.split("## `make test`: the testing ladder", 1)[1].split("\n## ", 1)[0]
    return [(int(n), name) for n, name in re.findall(r"^(\d+)\. \*\*([^*]+)\*\*", section, re.M)]


def test_make_test_prints_the_rungs_of_docs_testing_md_in_their_order() -> None:
    printed = _printed_rungs()
    documented = _documented_rungs()
    assert documented and [n for n, _ in documented] == list(range(1, len(documented) + 1))
    assert {of for _, of, _ in printed} == {len(documented)}
    assert [(n, name) for n, _, name in printed] == documented


def test_every_step_of_make_test_is_a_rung() -> None:
    steps = re.findall(r"\$\(call step,([^,]*)", _recipe("test"))
    assert steps and all(re.match(r"rung \d+/\d+ ", step) for step in steps), steps


def _targets() -> set[str]:
    found: set[str] = set()
    for path in MAKEFILES:
        found |= set(re.findall(r"^([a-z][a-z0-9-]*):", path.read_text(encoding="utf-8"), re.M))
    return found


def test_every_make_target_named_in_a_document_or_a_test_exists() -> None:
    targets = _targets()
    paths = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *MAKEFILES,
             *sorted((REPO / "tests").rglob("README.md")), *sorted((REPO / "tests").rglob("*.py")),
             *sorted((REPO / "nm_scanguard").rglob("*.py"))]
    missing = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"`+make ([a-z][a-z0-9-]*)(?![a-z0-9*-])", text):  # not deps-*
            if m.group(1) not in targets:
                missing.append(f"{path.relative_to(REPO)}: make {m.group(1)}")
    assert missing == []
