"""Every setting a message names exists (issue 34, item 3: diagnose once advised "lower busy_bps
(scanguard.conf(5))", a setting there never was).

The messages are the string constants and f-strings of nm_scanguard's modules, docstrings left
out (they name code, not settings).  A word names a setting when it is written the way settings
are written to a person, and is snake_case (lower case, with an underscore):

- followed by "=" or " = ": a line of scanguard.conf, `config set KEY=VALUE`, "abort_scans = yes";
- after "scanguard.": a NetworkManager profile's user-data key;
- in the clause that leads up to "scanguard.conf" (from the last ";", ":", "." or "!" before it):
  "or lower threshold_pps (scanguard.conf(5))".

A snake_case word in backquotes, or one after a dot ("net.ipv4.ping_group_range=..."), is code or
a kernel setting, not one of ours, and is not checked.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import nm_scanguard
from nm_scanguard.config import KEYS

SNAKE = r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+"
ASSIGNED = re.compile(rf"(?<![\w.$/-])({SNAKE}) ?=(?!=)")
PREFIXED = re.compile(rf"(?<![\w.-])scanguard\.({SNAKE})\b")
CLAUSE_END = ";:.!\n"
PACKAGE = Path(nm_scanguard.__file__).parent


def setting_names(text: str) -> set[str]:
    """The words of `text` that are written as names of our settings."""
    names = set(ASSIGNED.findall(text)) | set(PREFIXED.findall(text))
    for m in re.finditer(r"scanguard\.conf", text):
        clause = text[max(text.rfind(c, 0, m.start()) for c in CLAUSE_END) + 1:m.start()]
        names |= set(re.findall(rf"(?<![\w.$/-])({SNAKE})\b", clause))
    return names


def _docstrings(tree: ast.Module) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def _text(node: ast.expr) -> str | None:
    """A string constant, an f-string (its fields as "{}") or a `+` of them, as one text."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _text(node.left), _text(node.right)
        if left is not None or right is not None:
            return (left or "{}") + (right or "{}")
    return None


def messages(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every message in one module: its strings, whole and as parts of `+`."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    skip = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.expr) and id(node) not in skip:
            text = _text(node)
            if text is not None:
                found.append((node.lineno, text))
    return found


MODULES = sorted(PACKAGE.rglob("*.py"))


def test_the_modules_the_messages_come_from_are_walked():
    names = {p.name for p in MODULES}
    assert {"findings.py", "record.py", "scanguardctl.py", "guard.py", "status.py"} <= names


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_every_setting_a_message_names_exists(path):
    unknown = [f"{path.name}:{line}: {name!r} in {text[:120]!r}"
               for line, text in messages(path)
               for name in sorted(setting_names(text)) if name not in KEYS]
    assert unknown == [], "\n".join(unknown)


def test_the_messages_do_name_settings():
    """The walk reads what it should: the advice that names settings is found."""
    named = {name for path in MODULES for _, text in messages(path)
             for name in setting_names(text)}
    assert {"defer_client_scans", "abort_scans", "threshold_pps"} <= named


@pytest.mark.parametrize("text, names", [
    # issue 34's finding, in its words and split as the source had it
    ("for a call that moves little data, hold it: scanguardctl hold --reason call -- COMMAND, "
     "or lower busy_bps (scanguard.conf(5))", {"busy_bps"}),
    ("nm-scanguard's defer_client_scans = yes (the default) refuses these", {"defer_client_scans"}),
    ("set threshold_mbit=5 for Café ☕", {"threshold_mbit"}),
    ("nmcli connection modify Café ☕ +user-data scanguard.busy_bps 5", {"busy_bps"}),
    ("raise busy_bps in /etc/scanguard/scanguard.conf", {"busy_bps"}),
    # code, kernel settings and D-Bus keys are not our settings
    ("sysctl net.ipv4.ping_group_range='0 2147483647'", set()),
    ("sysctl -w net.ipv6.conf.wlan0.disable_ipv6=1", set()),
    ("the daemon records when it asks (`own_scans` in `Devices`)", set()),
    ("suspended_bgscan is '' while Café ☕ is guarded; see scanguard.conf(5)", set()),
    ("a == b_c", set()),
    ("cannot read /etc/scanguard/scanguard.conf: permission denied", set()),
])
def test_what_counts_as_naming_a_setting(text, names):
    assert setting_names(text) == names
