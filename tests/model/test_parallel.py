"""The figures of several model-rung workers add up to the figures of one run."""

import json

from tests.model.conftest import Stats, _to_json, merged


def _worker(events: list[list[str]], calls: dict[str, int], crashes: int) -> dict:
    s = Stats()
    for ev in events:
        s.sequences += 1
        s.steps += len(ev)
        s.sequence_done(ev, calls, 3600.0)
    s.crashes = crashes
    s.kinds = {"hold": len(events)}
    return json.loads(json.dumps(_to_json(s), allow_nan=False))  # as the file carries it


def test_workers_figures_add_up_and_shared_interleavings_count_once():
    a = _worker([["Set:ok", "Get:ok"], ["Café ☕"]], {"ok": 2}, crashes=1)
    b = _worker([["Set:ok", "Get:ok"], ["Get:late"]], {"ok": 1, "late": 1}, crashes=2)
    total = merged([a, b], started=0.0)
    assert (total.sequences, total.steps, total.crashes) == (4, 6, 3)
    assert len(total.interleavings) == 3  # the first sequence of each is the same
    assert total.calls == {"ok": 2 * 2 + 2 * 1, "late": 2}
    assert total.kinds == {"hold": 4} and total.virtual_seconds == 4 * 3600.0
    assert total.lines()[0] == "sequences run: 4, steps: 6, distinct interleavings: 3"
