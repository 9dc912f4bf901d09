"""The shipped polkit rule (systemd/50-nm-scanguard.rules), run as it is in a JavaScript engine.

polkitd 122/126 run rules in duktape: Debian's `duk` command is that engine, so the rule is run
in it (and in node when present, a second engine that would catch a duktape-only accident).  A
fake `polkit` object records every spawn() and answers as the test says; the rule must:
return NOT_HANDLED for every other action without spawning, never touch root, say NO (never an
AUTH_* prompt) only when the helper answers exactly "defer" (and, optionally, the report it
started), and fail open on anything else.  The cases run one after another in one context, as
polkitd runs checks, with a clock each case sets (Date.now): the rule reuses an answer for
REUSE_MS and hands the helper the last report it started.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

RULE = Path(__file__).resolve().parents[3] / "systemd" / "50-nm-scanguard.rules"
HELPER = "/usr/libexec/nm-scanguard/nm-scanguard-scan-deferral"
SCAN = "org.freedesktop.NetworkManager.wifi.scan"
CAFE = "Café ☕"

# duk is polkitd's own engine and must be there (make test installs duktape); node is a
# second opinion where it is installed (not on Debian 13's minimal test root).
ENGINES = [pytest.param("duk", id="duk")] + [
    pytest.param(e, marks=pytest.mark.skipif(shutil.which(e) is None,
                                             reason=f"{e} is not installed"), id=e)
    for e in ("node",)]

# polkit's own values (src/polkitbackend/init.js): NOT_HANDLED is null.
PRELUDE = r"""
var out = (typeof print === "function") ? print : console.log;
var polkit = {
    Result: {NO: "no", YES: "yes", AUTH_SELF: "auth_self", AUTH_SELF_KEEP: "auth_self_keep",
             AUTH_ADMIN: "auth_admin", AUTH_ADMIN_KEEP: "auth_admin_keep", NOT_HANDLED: null},
    rules: [], spawned: [], answer: null,
    addRule: function(f) { this.rules.push(f); },
    log: function(m) {},
    spawn: function(argv) {
        this.spawned.push(argv);
        if (this.answer === "throw") { throw new Error("Error spawning helper: exit status 1"); }
        return this.answer;
    }
};
"""

RUNNER = r"""
var cases = CASES;
var results = [];
var clock = 0;
Date.now = function() { return clock; };
for (var i = 0; i < cases.length; i++) {
    var c = cases[i];
    clock = (c.clock !== null) ? c.clock : (i + 1) * 3600000;
    polkit.spawned = [];
    polkit.answer = c.answer;
    var action = {id: c.action, lookup: function(k) { return undefined; }};
    var subject = {user: c.user, pid: c.pid, groups: [], local: true, active: true,
                   isInGroup: function(g) { return false; }, isInNetGroup: function(g) { return false; }};
    var result = null;
    for (var r = 0; r < polkit.rules.length; r++) {
        result = polkit.rules[r](action, subject);
        if (result !== undefined && result !== null) { break; }
    }
    results.push({result: (result === undefined ? null : result), spawned: polkit.spawned});
}
out(JSON.stringify(results));
"""


def run_rule(engine: str, cases: list[dict], tmp_path: Path) -> list[dict]:
    script = tmp_path / "rule-test.js"
    script.write_text(PRELUDE + RULE.read_text(encoding="utf-8")
                      + RUNNER.replace("CASES", json.dumps(cases, ensure_ascii=False)),
                      encoding="utf-8")
    r = subprocess.run([engine, str(script)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def case(action: str = SCAN, user: str = "alice", pid: int = 4242, answer: str | None = "allow\n",
         clock: int | None = None) -> dict:
    """One check; `clock` is Date.now() in ms during it (default: an hour after the last)."""
    return {"action": action, "user": user, "pid": pid, "answer": answer, "clock": clock}


@pytest.mark.parametrize("engine", ENGINES)
def test_other_actions_are_not_handled_and_spawn_nothing(engine, tmp_path):
    actions = ["org.freedesktop.NetworkManager.network-control",
               "org.freedesktop.NetworkManager.wifi.scan.extra", "org.freedesktop.login1.suspend",
               "io.github.nm_scanguard.hold", ""]
    results = run_rule(engine, [case(a, answer="defer\n") for a in actions], tmp_path)
    assert [r["result"] for r in results] == [None] * len(actions)
    assert [r["spawned"] for r in results] == [[]] * len(actions)


@pytest.mark.parametrize("engine", ENGINES)
def test_root_is_never_refused_and_spawns_nothing(engine, tmp_path):
    (r,) = run_rule(engine, [case(user="root", pid=1, answer="defer\n")], tmp_path)
    assert r == {"result": None, "spawned": []}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("user", ["alice", CAFE])
def test_deferring_says_no_and_passes_user_and_pid(engine, user, tmp_path):
    (r,) = run_rule(engine, [case(user=user, pid=31337, answer="defer\n")], tmp_path)
    assert r["result"] == "no"  # polkit.Result.NO, never an AUTH_* prompt
    assert r["spawned"] == [[HELPER, user, "31337", "0", "0"]]  # no report started yet


@pytest.mark.parametrize("engine", ENGINES)
def test_not_deferring_leaves_the_decision_to_others(engine, tmp_path):
    (r,) = run_rule(engine, [case(user=CAFE, answer="allow\n")], tmp_path)
    assert r["result"] is None and len(r["spawned"]) == 1


@pytest.mark.parametrize("engine", ENGINES)
def test_a_failing_helper_fails_open(engine, tmp_path):
    (r,) = run_rule(engine, [case(answer="throw")], tmp_path)
    assert r["result"] is None and len(r["spawned"]) == 1


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("garbage", ["", "defer", "DEFER\n", " defer\n", "defer\nallow\n",
                                     "no\n", "yes\n", "defer \n", "déféř\n",
                                     "defer\nreport 1 2", "defer\nreport x 2\n",
                                     "defer\nreport 1\n", "defer\nreport 1 2 3\n",
                                     "defer\nreport -1 2\n", "defer\nreport 1 2\nmore\n"])
def test_garbage_output_fails_open(engine, garbage, tmp_path):
    (r,) = run_rule(engine, [case(answer=garbage)], tmp_path)
    assert r["result"] is None


def test_the_rule_runs_before_networkmanagers_and_the_defaults():
    """First answer wins, in file-name order over both rules.d directories: ours must sort
    before Debian's org.freedesktop.NetworkManager.rules and 50-default.rules is only an admin
    rule (it answers no action), and after an admin's 49-… overrides."""
    names = sorted([RULE.name, "org.freedesktop.NetworkManager.rules", "50-default.rules",
                    "49-local.rules", "60-site.rules"])
    assert names.index(RULE.name) < names.index("org.freedesktop.NetworkManager.rules")
    assert names.index("49-local.rules") < names.index(RULE.name) < names.index("60-site.rules")


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("answer, result", [("defer\n", "no"), ("allow\n", None), ("throw", None)])
def test_an_answer_serves_every_check_for_a_quarter_second(engine, answer, result, tmp_path):
    """A flood of wifi.scan checks runs the helper at most once per 250 ms: the checks in
    between get its answer without a spawn; other actions and root are unaffected."""
    cases = [case(answer=answer, clock=10_000 + ms) for ms in (0, 1, 100, 249)]
    cases += [case("org.freedesktop.NetworkManager.network-control", clock=10_100),
              case(user="root", clock=10_101)]
    cases += [case(answer="allow\n", clock=10_250), case(answer="allow\n", clock=10_251)]
    results = run_rule(engine, cases, tmp_path)
    assert [len(r["spawned"]) for r in results] == [1, 0, 0, 0, 0, 0, 1, 0]
    assert [r["result"] for r in results[:4]] == [result] * 4
    assert [r["result"] for r in results[4:]] == [None] * 4


@pytest.mark.parametrize("engine", ENGINES)
def test_a_clock_set_back_asks_the_helper_again(engine, tmp_path):
    results = run_rule(engine, [case(answer="defer\n", clock=50_000),
                                case(answer="allow\n", clock=20_000)], tmp_path)
    assert [(r["result"], len(r["spawned"])) for r in results] == [("no", 1), (None, 1)]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("user", ["alice", CAFE])
def test_the_last_report_started_is_handed_to_the_next_helper(engine, user, tmp_path):
    """The helper names the report it started; the rule passes it to the next run, which
    starts none while that one runs.  An answer naming no report keeps the last one."""
    results = run_rule(engine, [
        case(user=user, pid=1, answer="defer\nreport 4321 98765\n", clock=1_000),
        case(user=user, pid=2, answer="defer\n", clock=2_000),  # still in flight: none started
        case(user=user, pid=3, answer="allow\nreport 4400 99000\n", clock=3_000),
        case(user=user, pid=4, answer="allow\n", clock=4_000),
    ], tmp_path)
    assert [r["spawned"][0][1:] for r in results] == [
        [user, "1", "0", "0"], [user, "2", "4321", "98765"], [user, "3", "4321", "98765"],
        [user, "4", "4400", "99000"]]
    assert [r["result"] for r in results] == ["no", "no", None, None]
