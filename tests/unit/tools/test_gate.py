"""`make test` is a gate: every Hypothesis test in it draws the same examples on every run."""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import settings

TESTS = Path(__file__).resolve().parents[2]


def test_the_gate_profile_is_loaded_without_a_seed() -> None:
    assert settings.default.derandomize is True
    assert settings.default.database is None


def test_no_test_asks_for_fresh_draws_or_an_example_database() -> None:
    """A test's own settings override the profile: none may turn derandomizing off or keep a
    database (whose saved failures change the next run's draws)."""
    offenders = []
    for path in sorted(TESTS.rglob("*.py")):
        if path == TESTS / "conftest.py":  # where the profiles are defined
            continue
        text = path.read_text(encoding="utf-8")
        for n, line in enumerate(text.splitlines(), 1):
            if re.search(r"derandomize\s*=\s*False|database\s*=\s*(?!None)\w", line):
                offenders.append(f"{path.relative_to(TESTS)}:{n}: {line.strip()}")
    assert offenders == []


def test_the_debian_13_pass_runs_the_model_rung_with_make_tests_seed() -> None:
    """tests/debian_roots/trixie.py starts the model rung inside the Debian 13 root; without a seed
    tests/model/parallel.py draws one, and the gate would draw new sequences every run."""
    import sys

    sys.path.insert(0, str(TESTS / "debian_roots"))
    try:
        import trixie
    finally:
        sys.path.pop(0)
    assert "SCANGUARD_MODEL_SEED" in trixie.PASSED_VARIABLES
    recipe = (TESTS.parent / "mk" / "trixie.mk").read_text(encoding="utf-8")
    rule = recipe[recipe.index("\ntest-trixie:"):]
    rule = rule[:rule.index("\n\n")]
    assert "SCANGUARD_MODEL_SEED=$(MODEL_SEED)" in rule
    assert "MODEL_SEED ?=" in (TESTS.parent / "Makefile").read_text(encoding="utf-8")
