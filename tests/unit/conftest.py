"""Fixtures shared by the unit tests."""

from __future__ import annotations

import os

import pytest


@pytest.fixture
def writes(monkeypatch):
    """How many times a file was renamed into place (each journal write is one os.replace)."""
    count = {"n": 0}
    real = os.replace

    def counting(src, dst, *a, **kw):
        count["n"] += 1
        return real(src, dst, *a, **kw)

    monkeypatch.setattr(os, "replace", counting)
    return count
