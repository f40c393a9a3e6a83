"""Sweeps that reach the answer (bench.extend): which sweeps get points beyond their end, at which sizes, within
which budget; a run that adds them, marks them, stores them in its plan and resumes them."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pandas as pd
import pytest

from bench import estimate, extend, policy
from bench.cli import main
from bench.estimate import estimate_plan
from bench.folder import read_points
from bench.preflight import summary_line
from bench.spec import PointSpec
from bench.storage import read_json

CONV = PointSpec("conv", n=64, d=8, batch=1, k=3)


def _points(specs: list[PointSpec], time_s, flops) -> pd.DataFrame:
    """A run's rows of `specs`: ok, timed on the wall clock, reliable."""
    rows = []
    for spec, t, f in zip(specs, time_s, flops):
        row = spec.as_row() | dict(status="ok", point_id=spec.point_id, flops_counted=f, mem_peak_bytes=1e3)
        row |= dict(time_clock="wall", time_median_s=t, time_ok=True, time_reliable=True)
        rows.append(row)
    return pd.DataFrame(rows)


def _conv_sweep(ns, c=1e-3, rate=1e9):
    """conv against n with t = c + f/R, f = 1000·n: a per-call cost c that a sweep to small n never leaves."""
    specs = [PointSpec("conv", n=n, d=8, batch=1, k=3) for n in ns]
    flops = 1e3 * np.asarray(ns, float)
    return specs, _points(specs, c + flops / rate, flops)


def test_the_ladder_reaches_a_predicted_plateau_in_two_steps_then_steps_on():
    x = np.array([100.0, 200.0, 400.0])
    assert extend.ladder(x, math.nan) == [800.0, 1600.0]  # the sweep's own step, NEW_PER_ROUND times
    assert extend.ladder(x, 6400.0) == pytest.approx([1600.0, 6400.0, 12800.0, 25600.0])  # 400 → 6400: √16 a step
    assert extend.ladder(x, 500.0) == [800.0, 1600.0]  # a plateau within one step: stepping on is enough
    assert extend.ladder(np.array([100.0, 110.0]), math.nan) == pytest.approx([110 * 2**0.5, 220.0])  # at least √2


def test_sizes_are_ones_the_layer_takes():
    attention = PointSpec("attention", n=64, d=12, batch=1, heads=3)
    assert extend.sized(attention, "d", 17.2).d == 18  # 16, a multiple of 4, then of the heads
    assert extend.sized(CONV, "k", 6.0).k == 7  # odd
    assert extend.sized(CONV, "n", 1e4).n == 10_240 and extend.sized(CONV, "n", 1448.2).n == 1536  # 5·2¹¹, 3·2⁹
    assert extend.sized(CONV, "n", 7.0).n == 7 and extend.sized(CONV, "k", 29.0).k == 29  # small n and k as they are
    assert extend.sized(PointSpec("attention_local", n=64, d=8, batch=1, heads=2, window=64), "n", 32.0) is None


def test_an_undecided_sweep_gets_points_beyond_its_end_and_a_decided_one_none():
    specs, points = _conv_sweep([64, 128, 256, 512])  # u = f/(c·R) = 0.064 → 0.512: per-call cost throughout
    ids = {s.point_id: s for s in specs}
    (proposal,) = extend.propose(points, ids, lambda pid: 1.0, {"cpu": math.inf})
    assert "not asymptotic yet" in proposal.reason and proposal.variable == "n"
    sizes = [s.n for s in proposal.specs]
    assert sizes[0] > 512 and sizes == sorted(sizes) and len(sizes) >= extend.NEW_PER_ROUND
    # a visit's cost grows with the FLOPs and the time from the end point's 1 s: the steeper exponent is 1 here
    assert proposal.costs_s == pytest.approx([n / 512 for n in sizes], rel=0.05)
    # visits that grow faster than the call (a decode's prefill, say): the cost follows the visits, and a round
    # takes the first size past the end alone where the next costs over 3x it: its times may settle the sweep
    (steep,) = extend.propose(points, ids, lambda pid: (ids[pid].n / 512) ** 2, {"cpu": math.inf})
    assert steep.costs_s == pytest.approx([(sizes[0] / 512) ** 2], rel=1e-6)
    assert [s.n for s in steep.specs] == sizes[:1] and (sizes[1] / sizes[0]) ** 2 > extend.STEP_COST_RATIO
    big_specs, big = _conv_sweep([2**20, 2**21, 2**22, 2**23])  # f/R from 1 s: the per-call cost is gone
    assert extend.propose(big, {s.point_id: s for s in big_specs}, lambda pid: 1.0, {"cpu": math.inf}) == []
    two_specs, two = _conv_sweep([64, 128])  # two points: nothing to extend from, and said (issue 56: 10)
    (short,) = extend.propose(two, {s.point_id: s for s in two_specs}, lambda pid: 1.0, {"cpu": math.inf})
    assert short.specs == () and "needs 3 sizes to fit" in short.stopped


def test_a_wide_interval_gets_points_inside_its_fitted_range_before_any_beyond_it():
    ns = [2**19, 2**20, 2**21, 2**22]  # on the plateau, but four points whose rates scatter: too wide to decide
    specs = [PointSpec("conv", n=n, d=8, batch=1, k=3) for n in ns]
    flops = 1e3 * np.asarray(ns, float)
    points = _points(specs, flops / 1e9 / np.array([0.85, 1.0, 0.8, 1.0]), flops)
    (proposal,) = extend.propose(points, {s.point_id: s for s in specs}, lambda pid: 1.0, {"cpu": math.inf})
    assert any(words in proposal.reason for words in extend.NARROWABLE), proposal.reason
    sizes = [s.n for s in proposal.specs]
    assert sizes == [3 * 2**18, 3 * 2**19]  # the midpoints (sized: 2^19.5 → 3·2^18), cheapest first; no ladder yet
    assert proposal.costs_s == pytest.approx([0.1875, 0.375])
    assert extend.midpoints(specs[-1], "n", np.array([8.0, 9.0, 10.0, 32.0]), 8.0, 10.0) == []  # no size between


def test_flops_not_yet_in_table1s_regime_get_the_points_that_reach_it_all_or_none():
    specs = [PointSpec("attention", n=n, d=128, batch=1, heads=2) for n in (64, 128, 256)]
    flops = [estimate.analytic_flops(s) for s in specs]  # n·d² still outweighs n²·d: exponent 1.34 against 2
    points = _points(specs, [f / 1e10 for f in flops], flops)
    (proposal,) = extend.propose(points, {s.point_id: s for s in specs}, lambda pid: 1.0, {"cpu": math.inf})
    assert "does not set the counted FLOPs" in proposal.reason and proposal.whole
    # the local exponent is within 0.15 of 2 from n = 2048 on: two steps to it (√8·256 → 768), then two more
    assert extend.flops_regime_start(specs[-1], "n", 2.0) == 2048
    assert [s.n for s in proposal.specs] == [768, 2048, 4096, 8192]
    total = sum(proposal.costs_s)
    assert extend.choose([proposal], total - 1, set())[0] == []  # a prefix would not decide: none
    assert "the 4 points it needs (n = 768, 2,048, 4,096, 8,192)" in extend.choose([proposal], total - 1, set())[1][0]
    assert extend.choose([proposal], total, set())[0] == list(proposal.specs)
    # memory that stops it before its regime: none of its points, and why (a part would decide nothing)
    limit = estimate.point_memory_bytes(proposal.specs[2]) - 1
    (capped,) = extend.propose(points, {s.point_id: s for s in specs}, lambda pid: 1.0, {"cpu": limit})
    assert capped.whole and capped.specs == () and "n = 4096 would hold about" in capped.stopped


def test_memory_stops_a_sweep_and_says_so():
    specs, points = _conv_sweep([64, 128, 256, 512])
    (proposal,) = extend.propose(points, {s.point_id: s for s in specs}, lambda pid: 1.0, {"cpu": 1.0})
    assert proposal.specs == () and "over the 1e-09 GB the extension may use" in proposal.stopped
    chosen, lines, cost_s = extend.choose([proposal], 100.0, told := set())
    assert (
        chosen == []
        and cost_s == 0
        and lines == [f"not extended: {proposal.sweep}, not asymptotic yet: {proposal.stopped}"]
    )
    assert extend.choose([proposal], 100.0, told) == ([], [], 0.0)  # said once


def test_the_budget_takes_the_points_that_fit_against_n_first_then_cheapest_first():
    specs = [PointSpec("conv", n=n, d=8, batch=1, k=3) for n in (1000, 2000, 4000)]
    cheap = extend.Proposal("cheap", "n", "interval too wide (width 2 > 1)", tuple(specs[:2]), (1.0, 2.0))
    dear = extend.Proposal("dear", "n", "interval straddles the tolerance edge (1 ± 0.2)", (specs[2],), (50.0,))
    chosen, lines, cost_s = extend.choose([dear, cheap], 2.5, set())
    assert chosen == specs[:1] and cost_s == 1.0  # 1 s of cheap's fits, its 2 s more does not
    assert lines[0] == "extending cheap to n = 1,000: interval too wide"
    assert lines[1].startswith("not extended: dear, interval straddles the tolerance edge: its next point (n = 4,000)")
    wide = PointSpec("conv", n=64, d=2048, batch=1, k=3)
    in_d = extend.Proposal("in d", "d", "interval too wide (width 2 > 1)", (wide,), (0.1,))
    told: set[str] = set()
    chosen, lines, _ = extend.choose([in_d, dear], 50.0, told)
    assert chosen == [specs[2]]  # n first, though dearer; d waits while a sweep against n takes points, said once
    assert lines[1] == "waiting: in d, interval too wide: the sweeps against n are extended first"
    assert extend.choose([in_d, dear], 50.0, told)[1] == [
        "extending dear to n = 4,000: interval straddles the tolerance edge"
    ]
    chosen, lines, _ = extend.choose([in_d, dear], 10.0, told)  # no sweep against n takes any: d's turn
    assert chosen == [wide] and lines[1] == "extending in d to d = 2,048: interval too wide"


def test_a_rate_still_falling_at_the_end_of_a_straddling_fit_gets_points_past_the_end():
    # conv's training on the 2-core VM: 124, 110, 96, 75 GFLOP/s past n = 4096 as its activations leave the caches;
    # points between would keep that trend in the fit, points past the end reach where the rate settles
    ns = [1024, 2048, 3072, 4096, 5120, 6144, 8192]
    specs = [PointSpec("conv", n=n, d=64, batch=1, k=3) for n in ns]
    flops = np.array([estimate.analytic_flops(s) for s in specs], float)
    rates = np.array([100, 117, 124, 123, 110, 96, 75]) * 1e9
    points = _points(specs, flops / rates, flops)
    (proposal,) = extend.propose(points, {s.point_id: s for s in specs}, lambda pid: 1.0, {"cpu": math.inf})
    assert any(words in proposal.reason for words in extend.NARROWABLE), proposal.reason
    assert min(s.n for s in proposal.specs) > 8192  # the ladder, not the midpoints inside
    between = proposal.instead.specs  # unless the ladder is beyond the budget: then the midpoints narrow what they can
    assert between and all(1024 < s.n < 8192 for s in between)
    chosen, lines, _ = extend.choose([proposal], min(proposal.costs_s) - 0.01, set())
    assert chosen and chosen == list(between[: len(chosen)]) and lines[0].startswith("extending conv against n")
    # ranked by its cheaper offer: its midpoints go before a dearer sweep's points
    first_s = proposal.instead.costs_s[0]
    other = extend.Proposal("other", "n", "interval too wide", (PointSpec("conv", n=99, d=64, k=3),), (first_s + 1,))
    chosen, _, _ = extend.choose([other, proposal], first_s + 0.5, set())
    assert chosen[0] == between[0] and other.specs[0] not in chosen
    assert extend.rate_still_moving(points, "n", 1024, 8192)
    assert not extend.rate_still_moving(points.iloc[:4], "n", 1024, 4096)  # 117, 124, 123: settled


def test_three_settled_points_short_of_the_fit_get_points_between_them_not_past_the_end():
    # as the cached attention's decode on the 2-core VM past its caches: rates 80, 44, 48, 44 (GFLOP/s), the last
    # three within the plateau's band, one short of ASYMPTOTIC_POINTS: "not asymptotic yet", and the cheapest
    # midpoints between them (2^17.5 → 3·2^16, 2^18.5 → 3·2^17) answer it for less than one point past 2^19.
    # Their 10 % wobble is no trend to chase past the end (rate_still_moving wants a move past the band).
    ns = [2**16, 2**17, 2**18, 2**19]
    specs = [PointSpec("conv", n=n, d=8, batch=1, k=3) for n in ns]
    flops = 1e3 * np.asarray(ns, float)
    points = _points(specs, flops / np.array([80e9, 44e9, 48e9, 44e9]), flops)
    (proposal,) = extend.propose(points, {s.point_id: s for s in specs}, lambda pid: 1.0, {"cpu": math.inf})
    assert "not asymptotic yet" in proposal.reason and not extend.rate_still_moving(points, "n", 2**17, 2**19)
    assert [s.n for s in proposal.specs] == [3 * 2**16, 3 * 2**17] and proposal.instead is None
    growth = 1 + math.log2(48 / 44)  # the last step's time exponent, steeper than the FLOPs'
    assert proposal.costs_s == pytest.approx([0.375**growth, 0.75**growth])  # from 2^19's visits of 1 s


def test_a_per_call_cost_that_bends_the_fitted_range_gets_larger_sizes_first():
    # t = 1 ms + n µs, scattered ±5 %: the fit over n = 3000-12288 straddles (0.84) and explains it by the per-call
    # cost, 26 % of the time at its first point; points between would keep that share, larger ones shrink it
    ns = [3000, 4096, 6144, 8192, 12288]
    specs, points = _conv_sweep(ns)
    points["time_median_s"] *= [1, 1.05, 0.97, 1.03, 1]
    (proposal,) = extend.propose(points, {s.point_id: s for s in specs}, lambda pid: 1.0, {"cpu": math.inf})
    assert "straddles" in proposal.reason and "a per-call cost" in proposal.reason
    assert min(s.n for s in proposal.specs) > 12288 and all(3000 < s.n < 12288 for s in proposal.instead.specs)


def test_a_layer_and_mode_undecided_everywhere_goes_before_one_another_sweep_decides():
    specs = [PointSpec("conv", n=n, d=8, batch=1, k=3) for n in (1000, 2000)]
    other = extend.Proposal("other", "n", "interval too wide", (specs[0],), (1.0,), decided_elsewhere=True)
    alone = extend.Proposal("alone", "n", "interval too wide", (specs[1],), (2.0,))
    chosen, lines, _ = extend.choose([other, alone], 5.0, set())
    assert chosen == [specs[1]]  # dearer, but its layer has no verdict yet: the other waits while it takes points
    assert lines[1] == "waiting: other, interval too wide: layers without a verdict yet are extended first"
    assert extend.choose([other, alone], 1.5, set())[0] == [specs[0]]  # none of its points fits: the other's turn
    ns = [2**16, 2**17, 2**18, 2**19]  # propose marks it: a second sweep of the same layer and mode that decides
    specs, points = _conv_sweep(ns)
    flops = 1e3 * np.asarray(ns, float)
    batch4 = [PointSpec("conv", n=n, d=8, batch=4, k=3) for n in ns]
    points = pd.concat(
        [_points(specs, flops / np.array([80e9, 44e9, 48e9, 44e9]), flops), _points(batch4, flops / 1e9, flops)]
    )
    (proposal,) = extend.propose(points, {s.point_id: s for s in specs + batch4}, lambda pid: 1.0, {"cpu": math.inf})
    assert proposal.decided_elsewhere and "batch=1" in proposal.sweep


def test_the_plan_states_the_extension_budget_before_the_run():
    specs = [PointSpec("conv", n=n, d=8, batch=1, k=3) for n in (64, 128)]
    on = policy.TimingPolicy(extend_budget=0.5)
    plan = estimate_plan(specs, on, {"cpu": 1e10})
    assert plan.extend_s == max(0.5 * sum(p.time_s for p in plan.points), policy.EXTEND_MIN_S)
    assert "extending the sweeps whose time does not decide at most 1.5 min in all" in summary_line(plan)
    assert f"{plan.extend_foreseen_s:.0f} s of it extending" in summary_line(plan)
    assert plan.time_s == pytest.approx(sum(p.time_s for p in plan.points) + plan.peaks_s + plan.extend_foreseen_s)
    assert estimate_plan(specs, policy.TimingPolicy(), {"cpu": 1e10}).extend_s == 0.0  # off: nothing said
    assert on.extend_budget_s(1000.0) == 500.0 and on.extend_budget_s(1.0) == policy.EXTEND_MIN_S


def test_the_forecast_runs_the_extension_on_modelled_calls():
    specs = [PointSpec("conv", n=n, d=8, batch=1, k=3) for n in (64, 128, 256, 512)]

    def call_s(s):  # t = c + f/R: the per-call cost of _conv_sweep, which these sizes never leave
        return 1e-3 + 1e3 * s.n / 1e9

    visits = []
    foreseen = extend.forecast_s(specs, call_s, lambda s: visits.append(s.n) or s.n / 512, 100.0, {"cpu": math.inf})
    added = sorted({n for n in visits if n > 512})
    assert added and foreseen == pytest.approx(sum(added) / 512)  # the added points' visits, each counted once
    assert extend.forecast_s(specs, call_s, lambda s: 1.0, 0.5, {"cpu": math.inf}) == 0.0  # none fits the budget
    assert extend.forecast_s(specs, lambda s: 1e3 * s.n / 1e9, lambda s: 1.0, 100.0, {"cpu": math.inf}) == 0.0


def test_a_drifted_call_walks_by_its_drift_per_doubling_one_walk_per_layer_and_variable():
    flat = extend.drifted(lambda s: 1.0, 0.0, seed=0)
    assert flat(CONV) == 1.0

    def log_step(seed: int, layer: str, d: int) -> float:  # from n = 1024 to 2048: one doubling
        call = extend.drifted(lambda s: 1.0, 0.09, seed)
        spec = PointSpec(layer, n=1024, d=d, batch=1, k=3 if layer == "conv" else None)
        return math.log(call(dataclasses.replace(spec, n=2048)) / call(spec))

    steps = np.array([log_step(seed, "conv", 64) for seed in range(400)])
    assert abs(steps.mean()) < 0.02 and steps.std() == pytest.approx(0.09, rel=0.15)
    # seeded: the same walk each time; n's walk is the layer's at every d (a d-sweep at fixed n keeps it constant)
    assert log_step(3, "conv", 64) == log_step(3, "conv", 64) == log_step(3, "conv", 128)
    assert log_step(3, "lstm", 64) != log_step(3, "conv", 64)


def test_a_drifted_forecast_is_the_mean_of_its_walks():
    specs = [PointSpec("conv", n=n, d=8, batch=1, k=3) for n in (64, 128, 256, 512)]

    def call_s(s):
        return 1e-3 + 1e3 * s.n / 1e9

    def forecast(call):
        return extend.forecast_s(specs, call, lambda s: s.n / 512, 100.0, {"cpu": math.inf})

    walks = [forecast(extend.drifted(call_s, 0.2, seed)) for seed in range(3)]
    mean = extend.forecast_s(specs, call_s, lambda s: s.n / 512, 100.0, {"cpu": math.inf}, 0.2, 3)
    assert mean == pytest.approx(np.mean(walks)) and len(set(walks)) > 1


def test_after_the_first_pass_the_forecast_uses_its_calls_and_the_runs_rates():
    specs = [PointSpec("conv", n=n, d=8, batch=1, k=3) for n in (64, 128, 256, 512)]
    records = {s: {"visit_s": 0.5, "probes_s": 0.1, "stats": {"median": 1e-3 + 1e-6 * s.n, "data": []}} for s in specs}
    on = policy.TimingPolicy(extend_budget=0.5, passes=3)
    meta = {"compute_peak": {"cpu": {"flops_per_s": 1e10}}}
    line = extend.first_pass_line(records, on, meta)
    assert line.startswith(
        "the first pass took 2 s (0 s of it counting FLOPs and memory): about 3 s more for 2 more passes"
    )
    foreseen = extend.first_pass_forecast_s({s: r["stats"]["median"] for s, r in records.items()}, on, meta, 90.0)
    assert foreseen > 0 and f"about {foreseen:.0f} s (at most 1.5 min) extending sweeps" in line
    assert "at most 1.5 min extending" in extend.first_pass_line(records, on, {})  # no rates: the budget alone


@pytest.fixture(scope="module")
def extended_run(tmp_path_factory):
    """conv at tiny n, where a call is its per-call cost: the run extends it (budget at least 3 s)."""
    out = tmp_path_factory.mktemp("extend") / "run"
    patch = pytest.MonkeyPatch()
    patch.setenv("SEQBENCH_EXTEND_BUDGET", "0.5")
    patch.setattr(policy, "EXTEND_MIN_S", 3.0)
    argv = ["run", "--layers", "conv", "--n", "16,32,64", "--d", "8", "--batch", "1", "--target-time", "0.005"]
    try:
        assert main([*argv, "--passes", "2", "--no-progress", "--yes", "--out", str(out)]) == 0
    finally:
        patch.undo()
    return out


def test_a_run_extends_an_undecided_sweep_and_marks_the_points(extended_run):
    points = read_points(extended_run).sort_values("n")
    added = points[points["extended"]]
    assert list(points["n"][:3]) == [16, 32, 64] and not points["extended"][:3].any()  # planned: False
    assert len(added) >= 1 and added["n"].min() > 64 and (added["status"] == "ok").all()
    plan = read_json(extended_run / "plan.json")
    assert [r["n"] for r in plan["specs"]] == [16, 32, 64]  # the plan as given, its digest unchanged
    assert sorted(r["n"] for r in plan["extended"]) == sorted(added["n"])
    meta = read_json(extended_run / "meta.json")
    assert meta["points_planned"] == 3 and meta["points_extended"] == len(added) == meta["points_stored"] - 3


def test_a_resume_measures_the_added_points_a_cut_left(extended_run, tmp_path, monkeypatch):
    import shutil

    monkeypatch.setattr(policy, "EXTEND_MIN_S", 3.0)  # the budget the run had (the resume may still take a round more)

    run = tmp_path / "run"
    shutil.copytree(extended_run, run)
    points = read_points(run)
    kept = points[~points["extended"]]  # the added points' rows lost, as a kill before they were stored
    kept.to_csv(run / "points.csv", index=False)
    meta = json.loads((run / "meta.json").read_text()) | {"status": "interrupted", "points_stored": len(kept)}
    (run / "meta.json").write_text(json.dumps(meta))
    assert main(["run", "--resume", str(run), "--no-progress"]) == 0
    again = read_points(run)
    assert set(points["n"]) <= set(again["n"]) and len(again) == again["n"].nunique()
    assert again.loc[again["n"] > 64, "extended"].fillna(0).astype(bool).all()


def test_no_extend_measures_the_grid_as_given(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQBENCH_EXTEND_BUDGET", "0.5")
    out = tmp_path / "run"
    argv = ["run", "--layers", "conv", "--n", "16,32,64", "--d", "8", "--batch", "1", "--target-time", "0.005"]
    assert main([*argv, "--passes", "1", "--no-extend", "--no-progress", "--yes", "--out", str(out)]) == 0
    assert sorted(read_points(out)["n"]) == [16, 32, 64]
    assert read_json(out / "plan.json")["timing_policy"]["extend_budget"] == 0.0


def test_a_bad_budget_in_the_environment_is_bad_input(monkeypatch, capsys):
    monkeypatch.setenv("SEQBENCH_EXTEND_BUDGET", "-1")
    assert main(["run", "--layers", "conv", "--n", "16,32,64", "--d", "8", "--yes"]) == 2
    assert "SEQBENCH_EXTEND_BUDGET='-1'" in capsys.readouterr().err


def test_a_sweep_too_short_to_fit_is_said_not_extended(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SEQBENCH_EXTEND_BUDGET", "0.5")
    grid = ["--layers", "conv", "--n", "64,128", "--d", "8", "--rounds", "3", "--passes", "1", "--no-progress"]
    assert main(["run", *grid, "--target-time", "0.005", "--out", str(tmp_path / "run")]) == 0
    err = capsys.readouterr().err
    assert "not extended: conv against n" in err and "needs 3 sizes to fit" in err
