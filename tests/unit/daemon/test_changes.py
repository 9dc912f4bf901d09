"""Changes (daemon/changes.py), the daemon's one way to tell of a change: the holds, a guard's
state and figures, and the daemon's to the bus API all use it."""

from __future__ import annotations

import pytest

from nm_scanguard.daemon.changes import Changes

CAFE = "Café ☕"


def test_every_callback_hears_each_change_in_the_order_connected():
    heard: list[tuple[str, str, str, str]] = []
    changes: Changes[[str, str, str]] = Changes()
    changes.connect(lambda *args: heard.append(("first", *args)))
    changes.connect(lambda *args: heard.append(("second", *args)))
    changes(CAFE, "guarding", "busy")
    assert heard == [("first", CAFE, "guarding", "busy"), ("second", CAFE, "guarding", "busy")]


def test_nobody_connected_is_no_error():
    Changes()()


def test_a_failing_callback_is_logged_and_the_others_still_hear(caplog: pytest.LogCaptureFixture):
    def broken() -> None:
        raise RuntimeError(f"bug in {CAFE}")

    heard: list[str] = []
    changes: Changes[[]] = Changes()
    changes.connect(broken)
    changes.connect(lambda: heard.append("after"))
    changes()  # does not raise: the change has happened
    assert heard == ["after"]
    assert f"bug in {CAFE}" in caplog.text and "broken" in caplog.text


def test_a_callback_connected_while_telling_hears_the_next_change():
    heard: list[str] = []
    changes: Changes[[]] = Changes()

    def first() -> None:
        heard.append("first")
        changes.connect(lambda: heard.append("late"))

    changes.connect(first)
    changes()
    assert heard == ["first"]
    changes()
    assert heard == ["first", "first", "late"]


def test_an_owner_that_shows_failures_gets_the_first_once_every_callback_ran():
    heard: list[str] = []
    changes: Changes[[str]] = Changes(raises=True)

    def broken(name: str) -> None:
        raise RuntimeError(f"bug in {name}")

    def also_broken(name: str) -> None:
        raise ValueError(name)

    changes.connect(broken)
    changes.connect(heard.append)
    changes.connect(also_broken)
    with pytest.raises(RuntimeError, match=f"bug in {CAFE}"):
        changes(CAFE)
    assert heard == [CAFE]
