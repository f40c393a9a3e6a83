"""Sweeps that reach the answer (bench.planner): which sweeps get which points, within which budget; the extension the
estimate expects; a run that adds them, marks them, stores them in its plan and resumes them."""

from __future__ import annotations

import json
import math
import time
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from bench import estimate, planner, policy
from bench.cli import main
from bench.cost import Ceilings, Costs, LayerCosts, Measured, analytic_flops, calls_s, group_of, passes
from bench.estimate import OPTIONAL_SHARE, estimate_plan, first_pass_line
from bench.folder import read_points
from bench.footprint import point_memory_bytes
from bench.preflight import summary_line
from bench.spec import PointSpec
from bench.storage import read_json
from bench.sweeps import ASYMPTOTIC_POINTS, Reason
from bench.units import format_duration

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


def test_sizes_are_ones_the_layer_takes():
    attention = PointSpec("attention", n=64, d=12, batch=1, heads=3)
    assert planner.sized(attention, "d", 17.2).d == 18  # 16, a multiple of 4, then of the heads
    assert planner.sized(CONV, "k", 6.0).k == 7  # odd
    assert planner.sized(CONV, "n", 1e4).n == 10_240 and planner.sized(CONV, "n", 1448.2).n == 1536  # 5·2¹¹, 3·2⁹
    assert planner.sized(CONV, "n", 7.0).n == 7 and planner.sized(CONV, "k", 29.0).k == 29  # small n and k as they are
    assert planner.sized(CONV, "k", 63.0).k == 63 and planner.sized(CONV, "k", 65.0) is None  # no kernel wider than n
    assert planner.sized(PointSpec("attention_local", n=64, d=8, batch=1, heads=2, window=64), "n", 32.0) is None


def _choose(points, specs, limit=math.inf, left_s=100.0, cost=lambda s: s.n / 512):
    states = planner.states(points, {s.point_id: s for s in specs})
    return planner.choose(states, {s.point_id for s in specs}, cost, {"cpu": limit}, left_s)


def test_an_undecided_sweep_gets_points_beyond_its_end_and_a_decided_one_none():
    specs, points = _conv_sweep([64, 128, 256, 512])  # u = f/(c·R) = 0.064 → 0.512: per-call cost throughout
    (chosen,), stopped = _choose(points, specs)
    assert chosen.state.code == Reason.NOT_ASYMPTOTIC and chosen.state.variable == "n" and not stopped
    sizes = [s.n for s in chosen.specs]
    assert sizes[0] > 512 and sizes == sorted(sizes)  # past its end: only larger sizes settle a rate still rising
    assert chosen.cost_s == pytest.approx(sum(sizes) / 512)
    big_specs, big = _conv_sweep([2**20, 2**21, 2**22, 2**23])  # f/R from 1 s: the per-call cost is gone
    assert _choose(big, big_specs) == ([], {})
    two_specs, two = _conv_sweep([64, 128])  # two points: nothing to extend from, and said (issue 56: 10)
    chosen, stopped = _choose(two, two_specs)
    ((_, stop, why),) = stopped.values()
    assert chosen == [] and stop == planner.Stop.TOO_SHORT and "needs 3 sizes to fit" in why


def test_a_wide_interval_gets_the_size_of_most_narrowing_per_second():
    ns = [2**19, 2**20, 2**21, 2**22]  # on the plateau, but four points whose rates scatter: too wide to decide
    specs = [PointSpec("conv", n=n, d=8, batch=1, k=3) for n in ns]
    flops = 1e3 * np.asarray(ns, float)
    points = _points(specs, flops / 1e9 / np.array([0.85, 1.0, 0.8, 1.0]), flops)
    (chosen,), _ = _choose(points, specs, cost=lambda s: 1.0)
    assert chosen.state.code in (Reason.TOO_WIDE, Reason.STRADDLES)
    assert [s.n for s in chosen.specs] == [2**23]  # at equal cost, one doubling past the end narrows most
    (between,), _ = _choose(points, specs, cost=lambda s: s.n / 2**19)  # costs that grow: a size between is dearer
    assert between.specs[0].n > 2**22 or between.gain / between.cost_s >= chosen.gain / (2**23 / 2**19)


def test_flops_not_yet_in_table1s_regime_get_the_points_that_reach_it():
    specs = [PointSpec("attention", n=n, d=128, batch=1, heads=2) for n in (64, 128, 256)]
    flops = [analytic_flops(s) for s in specs]  # n·d² still outweighs n²·d: exponent 1.34 against 2
    points = _points(specs, [f / 1e10 for f in flops], flops)
    # the local exponent is within 0.15 of 2 from n = 2048 on: the fit needs four points from there
    assert planner.flops_regime_start(specs[-1], "n", 2.0) == 2048
    (chosen,), _ = _choose(points, specs, cost=lambda s: 1.0)
    assert chosen.state.code == Reason.FLOPS_TERM and chosen.state.joins_from == 2048
    assert sum(s.n >= 2048 for s in chosen.specs) == ASYMPTOTIC_POINTS
    # memory that stops it before its regime: none of its points, and why
    limit = point_memory_bytes(PointSpec("attention", n=2048, d=128, batch=1, heads=2)) - 1
    chosen, stopped = _choose(points, specs, limit=limit, cost=lambda s: 1.0)
    ((_, stop, why),) = stopped.values()
    assert chosen == [] and stop == planner.Stop.MEMORY and "n = 2,048 would hold about" in why


def test_memory_stops_a_sweep_and_says_so_once():
    specs, points = _conv_sweep([64, 128, 256, 512])
    chosen, stopped = _choose(points, specs, limit=1.0)
    ((state, stop, why),) = stopped.values()
    assert chosen == [] and stop == planner.Stop.MEMORY and "over the 1 B the extension may use" in why
    told: set = set()
    assert planner.lines(chosen, stopped, told) == [f"not extended: {state.words()}, not asymptotic yet: {why}"]
    assert planner.lines(chosen, stopped, told) == []  # said once


def test_the_budget_takes_the_most_narrowing_per_second_first():
    cheap_specs, cheap = _conv_sweep([64, 128, 256, 512])
    dear_specs = [PointSpec("conv", n=n, d=16, batch=1, k=3) for n in (64, 128, 256, 512)]
    dear = _points(dear_specs, [1e-3 + 1e3 * s.n / 1e9 for s in dear_specs], [1e3 * s.n for s in dear_specs])
    specs, points = cheap_specs + dear_specs, pd.concat([cheap, dear], ignore_index=True)
    chosen, stopped = _choose(points, specs, left_s=30.0, cost=lambda s: s.n / (512 if s.d == 8 else 64))
    assert [c.state.end.d for c in chosen] == [8]  # the cheaper sweep's points fit; the dearer waits, and says why
    ((_, stop, why),) = stopped.values()
    assert stop == planner.Stop.BUDGET and "over the" in why and "left of the extension's budget" in why


def test_the_plan_states_the_extension_it_expects_and_the_run_keeps_to_its_band():
    specs = [PointSpec("conv", n=n, d=8, batch=1, k=3) for n in (64, 128, 256)]
    on = policy.TimingPolicy(extend_budget=0.5)
    costs = _costs(specs)
    plan = estimate_plan(specs, on, costs)
    assert plan.extend_s == max(0.5 * (sum(p.time_s for p in plan.points) + plan.extra_s), policy.EXTEND_MIN_S)
    assert plan.extend_points > 0  # a per-call cost throughout: the rule adds points
    assert 0 <= plan.extend_structural_s <= plan.extend_foreseen_s
    mandatory_s = sum(p.time_s for p in plan.points) + plan.peaks_s
    assert plan.mandatory_s == pytest.approx(mandatory_s)
    # Counted: what is foreseen, at most its structural part and a quarter of the run it adds to (docs/method.md).
    structural_s = plan.extend_structural_s
    share_s = structural_s + OPTIONAL_SHARE * (mandatory_s + structural_s)
    assert plan.optional_s == pytest.approx(min(plan.extra_s + plan.extend_foreseen_s, share_s))
    assert plan.time_s == pytest.approx(mandatory_s + plan.optional_s)
    # The run adds no point past 1.25x its estimate, less the ceilings measured at its end: a run whose end errs by
    # up to 1.2x still ends within 1.5x of its estimate.
    assert plan.extend_until_s == pytest.approx(1.25 * plan.time_s - plan.peaks_s / 2)
    begun = replace(plan, begun_s=10.0)  # the seconds before the plan line: counted in the estimate, not in the run
    assert begun.extend_until_s == pytest.approx(1.25 * (plan.time_s + 10) - 10 - plan.peaks_s / 2)
    said = f"{format_duration(plan.optional_s)} of it sampling points until their time is known and extending"
    foreseen = f"{plan.extend_points} point(s) in {format_duration(plan.extend_foreseen_s)} on the modelled calls"
    assert said in summary_line(plan) and foreseen in summary_line(plan)
    assert plan.kept_by(on).extend_until_s == pytest.approx(plan.extend_until_s, abs=1e-3)
    busy = replace(plan, slowdown=2.0)  # a load foreseen: the estimate's seconds are twice, and so is the deadline
    assert busy.kept_by(on).extend_until_s == pytest.approx(2 * plan.extend_until_s, abs=2e-3)
    assert estimate_plan(specs, policy.TimingPolicy(), costs).extend_s == 0.0  # off: nothing said
    off = policy.TimingPolicy()
    assert off.extend_until_s is None and estimate_plan(specs, off, costs).kept_by(off).extend_until_s is None
    assert on.extend_budget_s(1000.0) == 500.0 and on.extend_budget_s(1.0) == policy.EXTEND_MIN_S


def test_the_extension_budget_is_sized_from_every_visit_of_the_plan_as_the_run_sizes_it():
    """bench.run gives the extension `extend_budget` of the planned points' visits, their extra passes too."""
    specs = [PointSpec("conv", n=n, d=8, batch=1, k=3) for n in (64, 128, 256)]
    on = policy.TimingPolicy(extend_budget=0.5, min_rounds=3, max_rounds=3)
    plan = estimate_plan(specs, on, _costs(specs, call_s=30.0))  # calls of 30 s: far above the budget's floor
    planned_s = sum(p.time_s for p in plan.points)
    assert plan.extra_s == pytest.approx(on.extra_budget * planned_s) and plan.extra_s > 0
    assert plan.extend_s == pytest.approx(0.5 * (planned_s + plan.extra_s)) and plan.extend_s > policy.EXTEND_MIN_S


def _costs(specs, call_s=1e-3, share=0.1):
    """Costs of a made-up machine: 1e10 FLOP/s, a fixed 1 ms a call and 5 ms a visit, a tenth of the rate reached."""
    layer = LayerCosts(call_s, 0.0, 5e-3, 1e-3, 0.0, share)
    return Costs({"cpu": Ceilings(1e10, 1e10, None)}, {group_of(s): layer for s in specs}, {"cpu": 0.0}, {"cpu": 0.0})


def test_the_estimate_prices_a_new_point_as_the_run_does_at_its_visits():
    """Both price a point at its visits: its sampling further, optional as the plan's, the deadline's margin holds.
    Priced with the extra passes' budget (1.5x), a custom training grid's attention ladder (87 s) was refused with
    86 s left, and its sweep stayed undecided."""
    specs = [PointSpec("conv", n=n, d=8, batch=1, k=3) for n in (64, 128, 256, 512)]
    costs, on = _costs(specs), policy.TimingPolicy(extend_budget=0.5)
    plan = estimate_plan(specs, on, costs)
    foreseen = planner.extension_s(specs, costs.call_s, lambda s: costs.visit_s(s, on), plan.extend_s, {})
    assert plan.extend_foreseen_s == pytest.approx(foreseen[0]) and plan.extend_points == len(foreseen[1]) > 0
    calls = {s: costs.call_s(s) for s in specs}
    visits = {s: [costs.visit_s(s, on) / passes(s, on)] * passes(s, on) for s in specs}
    own = Measured.of(calls, visits, on)  # a run whose visits took what the estimate said
    assert [own.visit_s(s) for s in specs] == pytest.approx([costs.visit_s(s, on) for s in specs])


def test_the_points_a_sweep_short_of_its_regime_needs_are_counted_whole():
    """Attention at n ≤ 8d: the projections' n·d² still set its counted FLOPs, so the rule adds larger n
    whatever the noise (planner.STRUCTURAL); the estimate counts their visits whole."""
    specs = [PointSpec("attention", n=n, d=32, batch=1, heads=4) for n in (32, 64, 128, 256)]
    costs, on = _costs(specs, call_s=0.0), policy.TimingPolicy(extend_budget=0.5)
    _, added, structural = planner.extension_s(specs, costs.call_s, lambda s: costs.visit_s(s, on), 1e9, {})
    assert structural and set(structural) <= set(added) and min(s.n for s in structural) > 256
    plan = estimate_plan(specs, on, costs)
    assert plan.extend_structural_s == pytest.approx(sum(costs.visit_s(s, on) for s in structural))
    assert plan.optional_s >= plan.extend_structural_s


def test_the_expected_extension_is_deterministic_and_within_its_budget():
    specs = [PointSpec("conv", n=n, d=8, batch=1, k=3) for n in (64, 128, 256, 512)]
    costs = _costs(specs)
    on = policy.TimingPolicy(extend_budget=0.5)
    once = planner.extension_s(specs, costs.call_s, lambda s: costs.visit_s(s, on), 20.0, {"cpu": math.inf})
    assert once == planner.extension_s(specs, costs.call_s, lambda s: costs.visit_s(s, on), 20.0, {"cpu": math.inf})
    assert 0 < once[0] <= 20.0 and len(once[1]) >= ASYMPTOTIC_POINTS and set(once[2]) <= set(once[1])
    assert planner.extension_s(specs, costs.call_s, lambda s: 1.0, 0.5, {"cpu": math.inf}) == (0.0, [], [])  # none fits
    work_only = _costs(specs, call_s=0.0)  # no per-call cost: the model's sweep decides as planned
    assert planner.extension_s(specs, work_only.call_s, lambda s: 1.0, 100.0, {"cpu": math.inf}) == (0.0, [], [])


def test_after_the_first_pass_the_rest_is_said_from_its_visits_and_a_new_point_extends_its_sweeps_calls():
    specs = [PointSpec("conv", n=n, d=8, batch=1, k=3) for n in (64, 128, 256, 512)]
    records = {s: {"visit_s": 0.5, "probes_s": 0.1, "stats": {"median": 1e-3 + 1e-6 * s.n, "data": []}} for s in specs}
    on = policy.TimingPolicy(extend_budget=0.5, passes=3)
    line = first_pass_line(records, on)
    assert line == (
        "the first pass took 2 s (0 s of it counting FLOPs and memory): about 3 s more for 2 more passes, at most "
        "3 s sampling points further, at most 1.5 min extending sweeps that do not decide: about 1.6 min more in all"
    )
    own = Measured.of({s: r["stats"]["median"] for s, r in records.items()}, {s: [0.5] for s in specs}, on)
    assert own.call_s(specs[0]) == records[specs[0]]["stats"]["median"]
    larger = PointSpec("conv", n=1024, d=8, batch=1, k=3)
    slope = math.log(own.call_s(specs[-1]) / own.call_s(specs[-2])) / math.log(2)
    assert own.call_s(larger) == pytest.approx(own.call_s(specs[-1]) * 2**slope)  # its sweep's last step, extended
    assert own.visit_s(larger) > own.visit_s(specs[-1]) - 1e-9


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


def test_a_run_adds_no_point_past_its_estimates_deadline(tmp_path, capsys, monkeypatch):
    """The extension's rounds end by plan.json's extend_until_s, here already past: the grid as given, and why."""
    monkeypatch.setenv("SEQBENCH_EXTEND_BUDGET", "0.5")
    monkeypatch.setattr(estimate, "OPTIONAL_SHARE", -1.0)  # a deadline before the run's start
    out = tmp_path / "run"
    argv = ["run", "--layers", "conv", "--n", "16,32,64", "--d", "8", "--batch", "1", "--target-time", "0.005"]
    assert main([*argv, "--passes", "2", "--no-progress", "--yes", "--out", str(out)]) == 0
    assert read_json(out / "plan.json")["timing_policy"]["extend_until_s"] <= 0
    assert sorted(read_points(out)["n"]) == [16, 32, 64]
    assert "left of the extension's budget" in capsys.readouterr().err


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


def test_a_run_begun_by_a_release_with_a_cap_in_seconds_resumes_and_keeps_its_plan_whole(extended_run, tmp_path):
    import shutil

    from bench.folder import RunFolder
    from bench.formats import plan_digest

    run = tmp_path / "run"
    shutil.copytree(extended_run, run)
    plan = read_json(run / "plan.json")
    plan["timing_policy"] = {k: v for k, v in plan["timing_policy"].items() if k != "extend_cap"} | {"extend_cap_s": 9}
    (run / "plan.json").write_text(json.dumps(plan))
    meta = read_json(run / "meta.json") | {"status": "interrupted", "plan_digest": plan_digest(plan)}
    (run / "meta.json").write_text(json.dumps(meta))
    assert main(["run", "--resume", str(run), "--no-progress"]) == 0
    assert read_json(run / "plan.json")["timing_policy"] == plan["timing_policy"]  # rewritten as it was stored
    RunFolder.open(run, ()).read_plan()  # its digest still that of meta.json: a later resume reads it too


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


def test_a_new_points_visits_extend_their_overhead_along_the_line_of_its_sweeps_last_two():
    """A decode visit prefills n positions: its overhead beyond its calls grows with n, and is never foreseen falling."""
    on = policy.TimingPolicy(passes=3, extra_passes=0)
    specs = [PointSpec("lstm", n=n, d=8, batch=1, mode="decode") for n in (1024, 2048, 4096)]
    call = 1e-4

    def visits(overhead_s: float) -> list[float]:
        return [calls_s(specs[0], on, call) / passes(specs[0], on) + overhead_s] * passes(specs[0], on)

    rising = Measured.of({s: call for s in specs}, {s: visits(0.1 + 1e-4 * s.n) for s in specs}, on)
    new = PointSpec("lstm", n=16384, d=8, batch=1, mode="decode")
    assert rising.overhead_s(new) == pytest.approx(0.1 + 1e-4 * 16384)
    assert rising.visit_s(new) == pytest.approx(calls_s(new, on, call) + passes(new, on) * (0.1 + 1e-4 * 16384))
    falling = Measured.of({s: call for s in specs}, {s: visits(1.0 - 1e-4 * s.n) for s in specs}, on)
    assert falling.overhead_s(new) == pytest.approx(1.0 - 1e-4 * 4096)  # its last point's, not less


@pytest.mark.slow
def test_the_extension_budget_counts_the_planning_between_rounds(tmp_path, monkeypatch):
    """A second of planning a round spends the 3 s budget as much as the visits do, so at most three rounds are
    planned (on visits alone, tiny conv points make many more). The budget alone, as a run has it without an
    estimate's deadline (a resume of an older run); the deadline is the run's wall clock, its planning too."""
    monkeypatch.setenv("SEQBENCH_EXTEND_BUDGET", "0.5")
    monkeypatch.setattr(policy, "EXTEND_MIN_S", 3.0)
    monkeypatch.setattr(estimate.PlanEstimate, "kept_by", lambda plan, policy: policy)
    states = planner.states

    def slow_states(*args, **kwargs):
        time.sleep(1.0)
        return states(*args, **kwargs)

    monkeypatch.setattr(planner, "states", slow_states)
    out = tmp_path / "run"
    argv = ["run", "--layers", "conv", "--n", "16,32,64", "--d", "8", "--batch", "1", "--target-time", "0.005"]
    assert main([*argv, "--passes", "2", "--no-progress", "--yes", "--out", str(out)]) == 0
    assert 1 <= read_json(out / "meta.json").get("extension_rounds", 0) <= 3
