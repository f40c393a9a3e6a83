"""The sweep planner's rule on synthetic sweeps (seeded, nothing timed): a power law with noise, a per-call intercept,
a cache step, a rate still rising at the end. It decides them, keeps to its budgets, and plans the same twice."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench import planner
from bench.cost import analytic_flops
from bench.fits import fit_table
from bench.folder import read_points
from bench.footprint import point_memory_bytes
from bench.policy import TimingPolicy
from bench.spec import PointSpec
from bench.sweeps import Reason

Z = 1.96
TOLERANCE = 0.2


def _row(spec: PointSpec, time_s: float, sigma: float) -> dict:
    return spec.as_row() | dict(
        status="ok",
        point_id=spec.point_id,
        flops_counted=analytic_flops(spec),
        time_median_s=time_s,
        time_ci_low_s=time_s * math.exp(-Z * sigma),
        time_ci_high_s=time_s * math.exp(Z * sigma),
        time_reliable=True,
        mem_peak_bytes=1e3,
    )


def _sweep(truth, ns, seed: int, sigma: float = 0.03) -> tuple[pd.DataFrame, dict, np.random.Generator]:
    rng = np.random.default_rng(seed)
    specs = [PointSpec("conv", n=n, d=32, k=3, batch=2) for n in ns]
    rows = [_row(s, truth(s.n) * math.exp(rng.normal(0, sigma)), sigma) for s in specs]
    return pd.DataFrame(rows), {s.point_id: s for s in specs}, rng


def simulate(truth, ns, seed: int, budget_s: float = 1e3, memory: float = math.inf, sigma: float = 0.03):
    """The planner's rounds on a sweep whose calls take truth(n) (times noise); a point costs 100 calls."""
    points, specs, rng = _sweep(truth, ns, seed, sigma)
    spent, plan = 0.0, []
    while True:
        states = planner.states(points, specs)
        chosen, stopped = planner.choose(
            states, set(specs), lambda s: 100 * truth(s.n), {"cpu": memory}, budget_s - spent
        )
        if not chosen:
            return points, spent, plan, stopped
        for c in chosen:
            spent += c.cost_s
            plan.append(tuple(s.n for s in c.specs))
            new = [_row(s, truth(s.n) * math.exp(rng.normal(0, sigma)), sigma) for s in c.specs]
            points = pd.concat([points, pd.DataFrame(new)], ignore_index=True)
            specs |= {s.point_id: s for s in c.specs}


def _time_fit(points: pd.DataFrame):
    table = fit_table(points)
    return table[(table.metric == "time") & (table.variable == "n")].iloc[0]


EXPONENTS = (0.85, 1.0, 1.15, 1.25, 1.4)  # 0.05 or more inside the band 1 ± 0.2, or outside it above


@pytest.mark.parametrize("exponent", EXPONENTS)
def test_a_noisy_power_law_is_decided(exponent):
    decided = 0
    for seed in range(20):
        points, *_ = simulate(lambda n: 1e-6 * n**exponent, [64, 128, 256], seed)
        row = _time_fit(points)
        decided += row.verdict != "inconclusive"
        assert row.verdict != ("consistent" if abs(exponent - 1) > TOLERANCE else "inconsistent"), row.reason
    assert decided >= 19  # 95 %


def test_a_time_below_the_band_is_never_judged_consistent_and_the_budget_holds():
    """t ∝ n^0.6 where the FLOPs grow as n: the rate rises without end, which the fit range reads as a per-call cost
    not yet outgrown (docs/method.md, Fit ranges), so no fit decides; the planner goes on within its budget."""
    for seed in range(3):
        points, spent, _, stopped = simulate(lambda n: 1e-6 * n**0.6, [64, 128, 256], seed, budget_s=60.0)
        assert _time_fit(points).verdict != "consistent" and spent <= 60.0


def test_a_per_call_intercept_is_outgrown():
    """t = c + a·n: the rate rises until the work outweighs c; the rule goes past the end until it is asymptotic."""
    for seed in range(10):
        points, _, plan, _ = simulate(lambda n: 1e-3 + 1e-7 * n, [64, 128, 256, 512], seed)
        assert _time_fit(points).verdict == "consistent"
        assert max(points["n"]) >= 10**4  # where c is below a fifth of the time


def test_a_cache_step_is_settled_past():
    """The rate falls by half past n = 4096 (the data leave a cache), then settles: measured past the step."""

    def truth(n):
        return 1e-7 * n * (2.0 if n > 4096 else 1.0)

    for seed in range(10):
        points, *_ = simulate(truth, [1024, 2048, 4096, 8192], seed)
        row = _time_fit(points)
        assert row.verdict == "consistent" and row.x_min > 4096


def test_a_rate_still_rising_at_the_end_is_extended():
    points, _, plan, _ = simulate(lambda n: 2e-4 + 1e-8 * n**2, [64, 128, 256, 512], seed=3)
    assert plan and plan[0][0] > 512  # past the end, not between
    assert _time_fit(points).verdict != "inconclusive"


def test_a_settled_range_one_size_short_of_a_fit_takes_a_size_between_its_points():
    """The rate settles from n = 512 on (a step below it), three sizes: a fit needs four. A size between two of them
    joins the fit at a fraction of a rung past the end's cost, so the rule takes it first."""
    for seed in range(5):
        points, _, plan, _ = simulate(lambda n: 1e-7 * n * (3.0 if n <= 256 else 1.0), [256, 512, 1024, 2048], seed)
        assert 512 < plan[0][0] < 2048
        assert _time_fit(points).verdict == "consistent"


def test_a_round_extends_one_sweep_of_a_layer_and_variable():
    """Two conv n-sweeps (d = 32 and 48) and a gru one, none decided: a round takes the better conv sweep and the gru
    one; the other conv sweep waits, since the first may decide conv against n."""
    frames, specs = [], {}
    for layer, d in (("conv", 32), ("conv", 48), ("gru", 32)):
        batch = [PointSpec(layer, n=n, d=d, k=3 if layer == "conv" else None, batch=2) for n in (64, 128, 256, 512)]
        rows = [_row(s, 1e-7 * s.n * d * (1 + 0.2 * (i % 2)), 0.03) for i, s in enumerate(batch)]
        frames.append(pd.DataFrame(rows))
        specs |= {s.point_id: s for s in batch}
    states = planner.states(pd.concat(frames, ignore_index=True), specs)
    assert sum(not s.decided for s in states) == 3
    chosen, stopped = planner.choose(states, set(specs), lambda x: 1e-4 * x.n, {}, math.inf)
    assert sorted(c.state.end.layer for c in chosen) == ["conv", "gru"] and not stopped


def test_a_round_fits_again_only_the_sweeps_whose_points_changed():
    """bench.run keeps the states of a round (`memo`): a sweep with the same points is not fitted again, an extended
    one is, and either way the states are those made afresh."""
    points, specs, _ = _sweep(lambda n: 1e-7 * n, [64, 128, 256, 512], seed=3)
    wider = [PointSpec("conv", n=n, d=48, k=3, batch=2) for n in (96, 192, 384, 768)]
    other, others = pd.DataFrame([_row(s, 1e-7 * s.n, 0.03) for s in wider]), {s.point_id: s for s in wider}
    memo: dict = {}
    first = planner.states(pd.concat([points, other], ignore_index=True), specs | others, memo=memo)
    added = PointSpec("conv", n=1024, d=32, k=3, batch=2)
    points = pd.concat([points, pd.DataFrame([_row(added, 1e-7 * 1024, 0.03)])], ignore_index=True)
    specs |= {added.point_id: added}
    frame = pd.concat([points, other], ignore_index=True)
    again = planner.states(frame, specs | others, memo=memo)
    kept = [s for s in again if any(s is f for f in first)]
    assert [s.sizes[-1] for s in kept] == [768.0] and len(again) == len(first) == 2
    assert again == planner.states(frame, specs | others)


@pytest.mark.parametrize("budget_s", [0.5, 3.0, 20.0])
def test_the_time_budget_is_never_exceeded(budget_s):
    _, spent, _, stopped = simulate(lambda n: 1e-3 + 1e-7 * n, [64, 128, 256, 512], seed=1, budget_s=budget_s)
    assert spent <= budget_s
    if budget_s < 1:
        assert [stop for _, stop, _ in stopped.values()] == [planner.Stop.BUDGET]


def test_the_memory_budget_is_never_exceeded():
    limit = point_memory_bytes(PointSpec("conv", n=4096, d=32, k=3, batch=2))
    points, _, plan, stopped = simulate(lambda n: 1e-3 + 1e-7 * n, [64, 128, 256, 512], seed=1, memory=limit)
    assert all(point_memory_bytes(PointSpec("conv", n=n, d=32, k=3, batch=2)) <= limit for n in points["n"])
    assert planner.Stop.MEMORY in [stop for _, stop, _ in stopped.values()]


def test_the_same_input_gives_the_same_plan():
    runs = [simulate(lambda n: 1e-3 + 1e-7 * n, [64, 128, 256, 512], seed=5)[2] for _ in range(2)]
    assert runs[0] == runs[1] and runs[0]


def test_the_gain_is_the_halfwidth_narrowed_toward_a_verdict():
    """Sxx and t(m − 2) by hand: four doublings give t(2)·σ/√(5·ln²2); a fifth point beyond narrows it."""
    four = [64, 128, 256, 512]
    by_hand = 4.302653 * 0.05 / math.sqrt(5 * math.log(2) ** 2)
    assert planner.halfwidth(four, 0.05) == pytest.approx(by_hand, rel=1e-5)
    assert planner.halfwidth(four[:3], 0.05) == math.inf  # a time fit needs four
    end = PointSpec("conv", n=512, d=32, k=3, batch=2)
    state = planner.SweepState(("n",), "n", end, tuple(four), tuple(four), 64, Reason.STRADDLES, 1.17, 1.0, 0.05, False)
    assert state.needed == pytest.approx(0.03)
    assert state.gain([1024]) == pytest.approx(by_hand - planner.halfwidth([*four, 1024], 0.05))
    assert state.gain([32]) == 0.0  # below where new sizes join the fit


REFERENCE = Path(__file__).resolve().parent.parent / "results" / "reference"


def _decided(points: pd.DataFrame) -> int:
    table = fit_table(points)
    return int(((table.metric == "time") & (table.verdict != "inconclusive")).sum())


def _between(stored: pd.DataFrame, spec: PointSpec, visits: dict) -> tuple[dict, float]:
    """A row for `spec` from the two stored points of its sweep around it, its times and visits interpolated on log
    size (FLOPs counted as the layer's formula says); no row and an infinite cost outside what the run stored."""
    for variable in ("n", "d", "k"):
        key = {k: v for k, v in spec.as_row().items() if k != variable and k in stored}
        same = stored[[all(_equal(row[k], v) for k, v in key.items()) for _, row in stored.iterrows()]]
        x = float(getattr(spec, variable) or 0)
        below, above = same[same[variable] <= x], same[same[variable] >= x]
        if below.empty or above.empty:
            continue
        lo, hi = below.sort_values(variable).iloc[-1], above.sort_values(variable).iloc[0]
        w = 0.0 if hi[variable] == lo[variable] else math.log(x / lo[variable]) / math.log(hi[variable] / lo[variable])
        row = lo.to_dict() | spec.as_row() | {"point_id": spec.point_id, "flops_counted": analytic_flops(spec)}
        for column in stored.columns:
            if "time" in column and column.endswith("_s") and lo[column] > 0 and hi[column] > 0:
                row[column] = lo[column] ** (1 - w) * hi[column] ** w
        return row, visits.get(lo["point_id"], math.inf) ** (1 - w) * visits.get(hi["point_id"], math.inf) ** w
    return {}, math.inf


def _equal(a, b) -> bool:
    return (b is None and pd.isna(a)) or a == b


# Runs extended by the planner before this one (bench/extend.py's ladder): 12 and 28 time fits decided there.
@pytest.mark.parametrize(
    "run", ["h100-intel-xeon-16c-vm/20261126T154035Z-cuda-more", "h100-intel-xeon-16c-vm/20261126T154035Z-cuda"]
)
def test_replayed_on_a_reference_run_it_decides_as_many_fits_as_the_planner_that_ran(run):
    """From the run's planned points, the rule takes the sizes it chooses where the run stored points around them
    (their times and visits interpolated, within the budget that run had): it decides at least as many time fits as
    all the stored points do."""
    folder = REFERENCE / run
    points, plan = read_points(folder), json.loads((folder / "plan.json").read_text())
    specs = {s.point_id: s for s in (PointSpec(**row) for row in plan["specs"] + plan["extended"])}
    visits: dict[str, float] = {}
    for line in (folder / "timings.jsonl").read_text().splitlines():
        record = json.loads(line)
        visits[record["point_id"]] = visits.get(record["point_id"], 0.0) + record["visit_s"]
    now = points[~points["extended"]]
    left_s = TimingPolicy.stored(plan["timing_policy"]).extend_budget_s(sum(visits.get(p, 0.0) for p in now.point_id))
    found: dict[str, tuple[dict, float]] = {}

    def cost_s(spec: PointSpec) -> float:
        if spec.point_id not in found:
            found[spec.point_id] = _between(points, spec, visits)
        return found[spec.point_id][1]

    while True:
        chosen, _ = planner.choose(planner.states(now, specs), set(now.point_id), cost_s, {}, left_s)
        if not chosen:
            break
        specs |= {s.point_id: s for c in chosen for s in c.specs}
        now = pd.concat([now, pd.DataFrame([found[s.point_id][0] for c in chosen for s in c.specs])], ignore_index=True)
        left_s -= sum(c.cost_s for c in chosen)
    assert _decided(now) >= _decided(points)


def test_a_modelled_sweep_whose_flops_term_is_not_set_yet_joins_new_sizes_as_a_measured_one():
    """Attention at n < 8d: the n²·d term does not set its FLOPs yet; the sizes from where it does (its end, here)
    count toward a fit in the model as in a run, so the model takes the three rungs a run takes, not four."""
    members = [PointSpec("attention", n=n, d=48, heads=3, batch=3) for n in (96, 192, 384, 768, 1536)]
    state = planner.modelled_state("n", members, lambda s: analytic_flops(s) / 1e10)
    start = planner.flops_regime_start(members[-1], "n", 2.0)
    assert state.code == Reason.FLOPS_TERM and start == 1536
    assert state.fitted == (1536.0,) and state.joins_from == 1536
    assert state.gain([2048, 3072, 4096]) > 0 and state.gain([2048, 3072]) == 0
