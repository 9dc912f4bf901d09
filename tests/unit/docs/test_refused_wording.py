"""Other programs' scan requests are refused, and every text a user reads says so (issue 50, item
10): the polkit rule answers NO and the client sees PermissionDenied; nothing waits and runs
later, as "deferred" would mean.  The names that carry the old word stay for compatibility
(the setting defer_client_scans, the D-Bus method ScanRequestDeferred, the Devices and --json
keys deferring_scans and scan_requests_deferred, the file defer-scans and the helper
nm-scanguard-scan-deferral), so an identifier or a `code span` may carry it; prose may not.

Read: README.md, NEWS.md, docs/*.md, the man pages as man/build.py writes them (every --help
text and man/*.extra) and scanguard.conf(5), the D-Bus XML's descriptions, and every message
string of nm_scanguard/ (docstrings and comments aside)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tests.unit.docs.test_doc_paths import message_strings

REPO = Path(__file__).resolve().parents[3]
# A verb form saying the scans are deferred.
WORD = re.compile(r"\bdefer(?:red|s|ring)\b", re.I)
# An identifier with the word in it (snake_case, kebab-case, CamelCase) or a code span.
NAME = re.compile(r"`[^`\n]*`|\b\w*[_-]\w*defer\w*|\b\w*defer\w*[_-][\w-]*|\b[A-Z]\w*Deferred\w*", re.I)


def said(text: str) -> list[str]:
    """The places `text` says deferred in prose, with some context."""
    prose = NAME.sub("", text.replace("\\-", "-"))
    return [prose[max(0, m.start() - 40):m.end() + 20].replace("\n", " ") for m in WORD.finditer(prose)]


def test_the_check_sees_prose_and_spares_names():
    assert said("client scans deferred (Café ☕)") == ["client scans deferred (Café ☕)"]
    assert said("the daemon Defers them; deferring") != []
    assert said("`defer_client_scans`, deferring_scans, scan_requests_deferred, ScanRequestDeferred, "
                "/run/scanguard/defer-scans, nm\\-scanguard\\-scan\\-deferral, `deferred`") == []


DOCUMENTS = [REPO / "README.md", REPO / "NEWS.md", *sorted((REPO / "docs").glob("*.md")),
             REPO / "systemd" / "scanguard.conf.5"]


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: str(p.relative_to(REPO)))
def test_documents_say_refused(path):
    assert said(path.read_text(encoding="utf-8")) == []


def test_man_pages_and_help_say_refused(tmp_path):
    sys.path.insert(0, str(REPO / "man"))
    try:
        import build  # man/build.py
    finally:
        sys.path.remove(str(REPO / "man"))
    for page in build.build(tmp_path):
        assert said(page.read_text(encoding="utf-8")) == [], page.name


def test_dbus_descriptions_say_refused():
    xml = (REPO / "nm_scanguard" / "io.github.nm_scanguard.ScanGuard1.xml").read_text(encoding="utf-8")
    comments = "\n".join(re.findall(r"<!--(.*?)-->", xml, re.S))
    assert comments and said(comments) == []


@pytest.mark.parametrize("path", sorted((REPO / "nm_scanguard").rglob("*.py")),
                         ids=lambda p: str(p.relative_to(REPO / "nm_scanguard")))
def test_messages_say_refused(path):
    assert [s for s in message_strings(path) if said(s)] == []
