"""`make roam`'s judging (tests/lab/roam_study.py): the time off the channel read off the air,
and the issue 35 checks and goals, on figures written by hand.  No VM."""

from tests.lab.measure import NullFrame
from tests.lab.roam_study import checks, clipped, goals_missed, off_channel

STA, AP = "02:00:00:00:00:00", "02:00:00:00:01:00"


def null(t: float, pm: bool, ta: str = STA) -> NullFrame:
    return NullFrame(t, 0x24, pm, ta)


def test_off_channel_pairs_each_pm1_with_the_next_pm0_of_the_station():
    frames = [null(10.0, True), null(10.05, True), null(10.3, False),  # one trip: 10.0-10.3
              null(11.0, True, AP), null(11.1, False, AP),            # the AP's: not ours
              null(20.0, False),                                      # PM=0 with no trip
              null(30.0, True), null(45.0, False),                    # 15 s: not a scan's trip
              null(50.0, True), null(50.2, False)]
    assert off_channel(frames, STA, 0, 100) == [(10.0, 10.3), (50.0, 50.2)]
    assert off_channel(frames, STA, 10.5, 100) == [(50.0, 50.2)]


def test_clipped_keeps_the_part_of_each_stretch_inside_the_window():
    assert clipped([(1.0, 3.0), (5.0, 6.0), (9.0, 12.0)], 2.0, 10.0) == [(2.0, 3.0), (5.0, 6.0),
                                                                         (9.0, 10.0)]


def fade(roam_s: float, off: float, full_scans: int, marginal_pct: float | None = 0.5,
         gave_up: bool = False) -> dict:
    f = {"roam_s": roam_s, "longest_off_channel_s": off, "off_channel_fade_s": 2 * off,
         "longest_scan_s": off,
         "full_scans_busy": full_scans, "gave_up": gave_up, "none_known": False,
         "targeted_scans_asked": 1, "worst_over_median": 0.2}
    if marginal_pct is not None:
        f["off_channel_marginal_pct"] = marginal_pct
    return f


def test_checks_pass_when_targeted_beats_full_and_fail_naming_what_did_not():
    results = {"long": {"targeted": fade(2.5, 0.2, 0), "full": fade(8.9, 0.25, 1)},
               "walk": {"targeted": fade(1.9, 0.2, 0, None), "full": fade(9.0, 6.7, 1, None)},
               "none": {"targeted": dict(fade(9.5, 6.8, 1, None), none_known=True,
                                         targeted_scans_asked=0)},
               "good": {"targeted": {"scans_busy": 0}}}
    judged = checks(results)
    assert len(judged) == 13 and all(ok for _, ok, _ in judged), judged
    results["long"]["targeted"] = fade(9.0, 0.4, 1, 3.1)
    results["good"]["targeted"] = {"scans_busy": 2}
    failed = [name for name, ok, _ in checks(results) if not ok]
    assert failed == ["(a) long: targeted: no scan of more than two channels while busy",
                      "(a) long: targeted roamed sooner than full",
                      "(a) long: targeted: longest stretch off the channel in the fade ≤ 0.3 s",
                      "(a) long: targeted: less time off the channel in the fade than full",
                      "(a) long: targeted: ≤ 1 % of the marginal hold off the channel",
                      "(d) good signal: no scan at all while busy"]


def test_a_scenario_not_run_is_not_judged():
    assert checks({"long": {"targeted": fade(2.5, 0.2, 0)}}) == []


def test_goals_missed_names_the_figure_and_its_goal():
    results = {"long": {"targeted": fade(2.5, 0.2, 0)}, "walk": {"full": fade(9.0, 6.7, 1)}}
    assert goals_missed(results) == ["long/targeted: roam_s 2.5 (goal ≤ 2 s)",
                                     "long/targeted: worst_over_median 0.2 (goal ≥ 0.8)"]
