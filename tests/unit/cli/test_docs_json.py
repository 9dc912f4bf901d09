"""What `scanguardctl status --json` prints (README.md, docs/dbus-api.md) is strict JSON: a figure
that could not be computed is null, never NaN or Infinity, which JavaScript's JSON.parse, jq and
other strict parsers reject.  (`make demo`'s summary.json: tests/unit/tools/test_demo_verdicts.py.)"""

from __future__ import annotations

import argparse
import asyncio
import json
import math

import pytest

from nm_scanguard.cli import show

USER_TEXT = "Café ☕"


def strict(text: str) -> object:
    """json.loads that refuses NaN, Infinity and -Infinity, as a strict parser does."""
    def refuse(name: str) -> None:
        raise ValueError(f"not strict JSON: {name}")
    return json.loads(text, parse_constant=refuse)


def _props(rx_bps: float) -> dict:
    device = {"interface": "wlp2s0", "state": "guarding", "reason": USER_TEXT, "since": 1.0,
              "rx_bps": rx_bps, "tx_bps": -math.inf, "pps": 12.0, "connection_id": USER_TEXT,
              "settings": {"threshold_mbit": math.nan, "enabled": True}}
    hold = {"cookie": 2874461021, "reason": USER_TEXT, "application_id": "org.gnome.Calls",
            "interface": "", "caller": ":1.42", "caller_uid": 1000, "since": 2.0}
    return {"Version": "0.1.0", "Devices": [device], "ActiveHolds": [hold]}


def test_strict_refuses_what_a_plain_json_dumps_writes():
    with pytest.raises(ValueError):
        strict(json.dumps({"rx_bps": math.nan}))


@pytest.mark.parametrize("rx_bps", [math.nan, math.inf, 142e6])
def test_status_json_is_strict_json_with_null_for_non_finite_figures(rx_bps):
    doc = strict(show.json_text(show.status_json(_props(rx_bps))))
    (device,) = doc["devices"]
    assert device["rx_bps"] == (142e6 if math.isfinite(rx_bps) else None)
    assert device["tx_bps"] is None and device["pps"] == 12.0
    assert device["settings"] == {"threshold_mbit": None, "enabled": True}
    assert device["signal_dbm"] is None  # a key the daemon left out is null, as documented
    assert device["connection_id"] == USER_TEXT and device["reason"] == USER_TEXT
    assert doc["holds"][0]["reason"] == USER_TEXT and doc["holds"][0]["cookie"] == 2874461021
    assert doc["version"] == "0.1.0"


def test_the_status_verb_prints_that_text(monkeypatch, capsys):
    class Bus:
        def disconnect(self) -> None:
            pass

    async def connect() -> Bus:
        return Bus()

    async def properties(bus: Bus) -> dict:
        return _props(math.nan)

    monkeypatch.setattr(show, "connect", connect)
    monkeypatch.setattr(show, "properties", properties)
    assert asyncio.run(show.cmd_status(argparse.Namespace(json=True))) == 0
    out = capsys.readouterr().out
    assert "NaN" not in out
    assert strict(out)["devices"][0]["rx_bps"] is None
    assert out == show.json_text(show.status_json(_props(math.nan))) + "\n"
