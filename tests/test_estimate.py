"""The run estimate (bench.estimate, bench.cost): its arithmetic against the timing engine and hand-worked sizes on a
made-up machine, each point's memory against the stored reference run's peaks (no timing decides a verdict here)."""

import dataclasses
import json
import math
from pathlib import Path

import pandas as pd
import pytest
import torch

import models
from bench import cost, estimate, preflight
from bench.cost import CALIBRATION_CALLS, PROBE_CALLS, Ceilings, Costs, LayerCosts, Memory, group_of
from bench.default_policy import FAULT_CALLS, MIN_RUN_S
from bench.estimate import PlanEstimate, PointEstimate, estimate_plan
from bench.footprint import flop_count_bytes, point_memory_bytes
from bench.policy import TimingPolicy
from bench.spec import PointSpec
from bench.timing import Clocks, calibrate, time_rounds
from bench.units import format_duration

ROOT = Path(__file__).resolve().parent.parent
QUICK_POLICY = TimingPolicy(min_rounds=10, max_rounds=60, target_s=0.25, min_round_s=0.005, passes=5)
RATE = 1e11  # FLOP/s, a round number for the hand-worked cases


def _reference_quick_run() -> Path:
    """The newest stored reference run of the quick preset on the CPU (results/reference/<machine>/<run>-cpu/)."""
    metas = [
        json.loads(path.read_text()) | {"folder": path.parent}
        for path in ROOT.glob("results/reference/*/*-cpu/meta.json")
    ]
    runs = [meta for meta in metas if meta.get("preset") == "quick"]
    assert runs, "no stored reference run of the quick preset under results/reference/"
    return max(runs, key=lambda meta: meta["started_utc"])["folder"]  # the newest


@pytest.fixture(scope="module")
def reference():
    run = _reference_quick_run()
    meta = json.loads((run / "meta.json").read_text())
    plan = json.loads((run / "plan.json").read_text())
    specs = [PointSpec(**row) for row in plan["specs"]]
    policy = TimingPolicy.stored(plan["timing_policy"])
    points = pd.read_csv(run / "points.csv").set_index("point_id")
    return meta, specs, policy, points


# ------------------------------------------------------------------------------ against the stored run
# Layers whose implementation changed after the stored reference run was measured: their peaks are measured
# here instead (allocation events, exact and quick; no timing). Empty once the reference is measured again.
MEASURED_AGAIN: dict[str, str] = {}  # layer -> why (the reference of 20261121T21 measured every layer as it is)


def _peak_now(spec: PointSpec) -> int:
    from bench.memory import measure_memory  # noqa: PLC0415

    layer = models.build(spec.layer, spec.config())
    x = torch.randn(spec.batch, spec.n, spec.d)
    with torch.inference_mode():
        layer(x)  # oneDNN's and the allocator's first-call work, as a run's warm-up call
        return measure_memory(lambda: layer(x), "cpu").peak_bytes


def test_the_points_memory_follows_the_measured_peaks(reference):
    """The estimate (weights, input, activations) against what the point held: the allocator's peak above
    what was live, plus the weights and input that were live, within a factor 2 for every point."""
    meta, specs, policy, points = reference
    # A decode point's stored peak is its step's; the estimate also holds its prefill (the planner's guard).
    for spec in (s for s in specs if not s.decodes):
        row = points.loc[spec.point_id]
        elem = 4  # the reference is float32
        peak = _peak_now(spec) if spec.layer in MEASURED_AGAIN else row["mem_peak_bytes"]
        held = peak + spec.batch * spec.n * spec.d * elem + _parameters(spec) * elem
        ratio = point_memory_bytes(spec) / held
        assert 0.5 <= ratio <= 2, (spec, ratio)


def _parameters(spec: PointSpec) -> int:
    return sum(p.numel() for p in models.build(spec.layer, spec.config()).parameters())


# ----------------------------------------------------------------------------------- by hand
FIXED = LayerCosts(call_s=1e-4, step_s=1e-5, visit_s=5e-3, probes_s=2e-3, probe_step_s=3e-4, share=0.5)


def _costs(specs, memory: Memory | None = None, layer: LayerCosts = FIXED) -> Costs:
    """A made-up machine: RATE for products and convolutions, `memory`, FIXED for every layer."""
    ceilings = {"cpu": Ceilings(RATE, 2 * RATE, memory)}
    return Costs(ceilings, {group_of(s): layer for s in specs}, {"cpu": 5e-9}, {"cpu": 1.0})


def test_a_convolutions_call_is_its_fixed_cost_and_its_flops_at_its_share_of_the_convolution_rate():
    spec = PointSpec("conv", n=512, d=128, batch=4, k=3)
    flops = 2 * 4 * 512 * 128 * 128 * 3
    assert _costs([spec]).call_s(spec) == pytest.approx(FIXED.call_s + flops / (FIXED.share * 2 * RATE))
    train = dataclasses.replace(spec, mode="train")  # forward and backward: 3x the products
    assert _costs([train]).call_parts_s(train) == pytest.approx((FIXED.call_s, 3 * flops / (FIXED.share * 2 * RATE)))


def test_the_explicit_attentions_call_is_set_by_its_bytes_where_they_outweigh_its_flops():
    """n×n scores and softmax per head: out of the caches, their bytes at the memory's bandwidth."""
    spec = PointSpec("attention_math", n=2048, d=32, batch=4, heads=4)
    activations = (5 * 4 * 2048 * 32 + 2 * 4 * 4 * 2048 * 2048) * 4
    flops = 4 * 2 * 4 * 2048 * 32 * 32 + 2 * (2 * 4 * 2048 * 2048 * 32)
    slow = Memory(((2**20, 1e11), (2**40, 1e9)))
    assert activations / 1e9 > flops / RATE
    assert _costs([spec], slow).call_s(spec) == pytest.approx(FIXED.call_s + activations / 1e9 / FIXED.share)
    assert _costs([spec]).call_s(spec) == pytest.approx(FIXED.call_s + flops / RATE / FIXED.share)  # no memory


def test_a_recurrence_pays_each_of_its_n_steps_and_its_probes_each_step():
    short, long = PointSpec("gru", n=256, d=128), PointSpec("gru", n=512, d=128)
    costs = _costs([short])
    flops_s = 2 * 3 * 2 * 128 * 128 / (FIXED.share * RATE)  # 3 gates, the input and the hidden product
    assert costs.call_s(long) - costs.call_s(short) == pytest.approx(256 * (FIXED.step_s + flops_s))
    policy = TimingPolicy(passes=1, extra_passes=0)
    visits = costs.visit_s(long, policy, 1e-3) - costs.visit_s(short, policy, 1e-3)  # equal calls: steps and inputs
    assert visits == pytest.approx(256 * FIXED.probe_step_s + 256 * 128 * 5e-9)


def test_a_decodes_state_read_takes_the_bandwidth_of_the_level_it_fits_in():
    """A decode's state is read at the triad's rate at its size: past the last cache at memory's, a step in time."""
    bandwidth = {
        "hierarchy": {"levels": [dict(up_to_bytes=2**25, bytes_per_s=4e10), dict(up_to_bytes=2**31, bytes_per_s=1e10)]}
    }
    memory = cost.memory_of(bandwidth)
    assert memory.bytes_per_s(2**20) == 4e10 and memory.bytes_per_s(2**26) == 1e10 == memory.bytes_per_s(2**40)
    assert cost.memory_of({"bytes_per_s_device": 3e12}).bytes_per_s(2**40) == 3e12  # a GPU's: one level
    assert cost.memory_of({}) is None
    inside, beyond = (PointSpec("attention", n=n, d=64, heads=1, mode="decode") for n in (2**15, 2**17))
    for spec, rate in ((inside, 4e10), (beyond, 1e10)):
        state = models.analytic_decode_state_bytes("attention", 1, spec.n, spec.config())
        assert _costs([spec], memory).call_s(spec) == pytest.approx(FIXED.call_s + state / (FIXED.share * rate))


@pytest.mark.parametrize("call_s", [1e-5, 3e-4, 2e-3, 0.04, 0.5])
def test_the_passes_arithmetic_is_the_timing_engines(call_s):
    """Count the calls bench.timing really makes (calibrate, then each pass's time_rounds) on a fake clock
    that advances by call_s a call, against passes_time_s."""
    now, calls = [0.0], [0]

    def target():
        now[0] += call_s
        calls[0] += 1

    def clock():
        return now[0]

    rounds, iterations = calibrate(target, QUICK_POLICY, clock)
    for _ in range(QUICK_POLICY.passes):
        time_rounds(target, QUICK_POLICY.rounds_per_pass(rounds), iterations, Clocks(wall=clock, cpu=None))
    spec = PointSpec("conv", n=64, d=8, k=3)
    expected = cost.calls_s(spec, QUICK_POLICY, call_s) / call_s - PROBE_CALLS  # the probes' calls are apart
    assert calls[0] == pytest.approx(expected) and CALIBRATION_CALLS == 2


def test_a_points_memory_is_its_weights_input_and_activations():
    spec = PointSpec("conv", n=64, d=8, batch=2, k=3)
    weights = (8 * 8 * 3 + 8) * 4  # Conv1d weight and bias, float32
    # the input, the output, and oneDNN's reordered copy of the weights
    assert point_memory_bytes(spec) == weights + 2 * 64 * 8 * 4 + 2 * 64 * 8 * 4 + 8 * 8 * 3 * 4
    half = PointSpec("conv", n=64, d=8, batch=2, k=3, dtype="bfloat16")
    assert point_memory_bytes(half) * 2 == point_memory_bytes(spec)


def test_the_ceilings_are_counted_per_dtype_for_compute_and_once_per_device_for_memory():
    """The compute peak at the run's start and end; the memory hierarchy once (bench.peak keeps it for the end)."""
    specs = [PointSpec("conv", 64, 8, k=3), PointSpec("conv", 64, 8, k=3, dtype="bfloat16")]
    costs = dataclasses.replace(
        _costs(specs), ceilings={key: Ceilings(RATE, RATE, None) for key in ("cpu", "cpu-bfloat16")}
    )
    plan = estimate_plan(specs, QUICK_POLICY, costs)
    compute_s = cost.peak_measurement_s("cpu", RATE)
    assert plan.peaks_s == pytest.approx(2 * 2 * compute_s + costs.memory_s["cpu"])


def test_a_busy_machine_lengthens_the_estimate_by_the_cores_wanted_over_those_there():
    from bench.load import Load, slowdown

    busy, quiet = Load(2.0, 2.0, 2, 1.0), Load(0.0, 0.1, 2, 1.0)
    assert slowdown(busy, 1) == 1.5 and slowdown(quiet, 1) == 1.0 and slowdown(Load(1.0, 1.0, 4, 1.0), 2) == 1.0
    specs = [PointSpec("conv", n, 8, k=3) for n in (64, 128)]
    plan = estimate_plan(specs, QUICK_POLICY, _costs(specs))
    assert dataclasses.replace(plan, slowdown=1.5).time_s == pytest.approx(1.5 * plan.time_s)
    args = dict(threads=1, yes=True, on_cluster=False, costs=_costs(specs))
    said = preflight.before_measuring(specs, QUICK_POLICY, load=busy, **args)[0][-1]
    assert "all 1.5x what it would take alone" in said  # shown from 1.05x on
    assert "alone" not in preflight.before_measuring(specs, QUICK_POLICY, load=quiet, **args)[0][-1]


def test_what_the_commands_start_lost_of_its_core_to_others_counts_but_not_what_it_waited_on_io():
    from bench.load import Load, LoadMeter, sample_load, slowdown

    # two spinners on 2 cores: they got 1.43 cores and the command's start 0.57 of its one, none idle (as measured)
    spun = Load(1.43, 1.6, 2, 3.0, own_cores=0.57, idle_cores=0.0)
    assert slowdown(spun, 1) == pytest.approx(1 / 0.57) and slowdown(dataclasses.replace(spun, own_cores=None), 1) == (
        pytest.approx(1.215)
    )
    assert slowdown(Load(0.0, 0.1, 2, 3.0, own_cores=0.6, idle_cores=1.4), 1) == 1.0  # it waited on the disk
    assert slowdown(Load(1.0, 1.0, 2, 3.0, own_cores=1.0, idle_cores=0.0), 1) == 1.0  # one spinner, a core each
    assert slowdown(Load(1.0, 1.0, 2, 3.0, own_cores=0.8, idle_cores=0.1), 1) == pytest.approx(0.9 / 0.8)
    assert sample_load(0.01).own_cores is None  # a wait wants no core
    assert sample_load(0.0, since=LoadMeter()).own_cores is not None


def test_the_estimate_is_the_same_from_the_same_measurements():
    specs = [PointSpec("conv", n, 8, k=3) for n in (64, 128, 256, 512)]
    policy = dataclasses.replace(QUICK_POLICY, extend_budget=0.5)
    plans = [estimate_plan(specs, policy, _costs(specs), {"cpu": math.inf}) for _ in range(2)]
    assert plans[0] == plans[1] and plans[0].extend_points > 0


def test_a_local_runs_default_process_timing_is_counted():
    """Per CPU layer the largest point of its widest n-sweep, built, timed at least MIN_RUN_S and called FAULT_CALLS
    times more, after a child's start-up; nothing where the run does not time it (no start-up given)."""
    specs = [PointSpec("conv", n, 8, k=3) for n in (64, 128, 256)] + [PointSpec("gru", n, 8) for n in (64, 128)]
    costs = _costs(specs)
    alone, again = (estimate_plan(specs, QUICK_POLICY, costs, startup_s=s) for s in (None, 3.0))
    top = [PointSpec("conv", 256, 8, k=3), PointSpec("gru", 128, 8)]
    by_hand = 3.0 + sum(costs.overhead_s(s) + MIN_RUN_S + FAULT_CALLS * costs.call_s(s) for s in top)
    assert alone.default_policy_s == 0 and again.default_policy_s == pytest.approx(by_hand)
    assert again.time_s == pytest.approx(alone.time_s + by_hand)
    assert "timing each layer's largest point again" in preflight.summary_line(again)


# ----------------------------------------------------------------------------------- judging
def _plan(memory: dict[str, list[int]], time_s: float = 60.0) -> PlanEstimate:
    points = tuple(
        PointEstimate(PointSpec("attention_math", n=64 * (i + 1), d=8, heads=1, device=device), 1e-3, 0.0, m)
        for device, sizes in memory.items()
        for i, m in enumerate(sizes)
    )
    return PlanEstimate(points, peaks_s=time_s)


def test_a_long_plan_is_asked_about_and_a_short_one_is_not():
    assert preflight.reasons_to_ask(_plan({"cpu": [10]}, time_s=preflight.LONG_RUN_S - 1), {"cpu": 100}) == []
    (reason,) = preflight.reasons_to_ask(_plan({"cpu": [10]}, time_s=2 * 3600), {"cpu": 100})
    assert "about 2.0 h (estimate)" in reason and "30 min" in reason


def test_cpu_points_beyond_memory_are_named_and_gpu_ones_only_warned_about():
    plan = _plan({"cpu": [10, 5000, 3000], "cuda": [10, 9000]})
    (ask,) = preflight.reasons_to_ask(plan, {"cpu": 1000, "cuda": 1000})
    assert ask.startswith("attention_math n=128 d=8 batch=1 heads=1 on cpu and 1 smaller point(s)")
    assert "5 kB" in ask and "1 kB available on cpu now" in ask
    (refused,) = preflight.too_large(plan, {"cpu": 4000, "cuda": 4000})
    assert refused.startswith("attention_math n=128 d=8 batch=1 heads=1 on cpu needs about 5 kB")
    (warned,) = preflight.expected_ooms(plan, {"cpu": 4000, "cuda": 4000})
    assert "on cuda needs about 9 kB" in warned and "oom" in warned
    assert preflight.too_large(plan, {"cpu": 5000, "cuda": 9000}) == []


def test_the_summary_line():
    plan = _plan({"cpu": [10, 579_000_000]}, time_s=140)
    assert preflight.summary_line(plan) == (
        "plan: 2 points, about 2.3 min on this machine (estimate), peak memory about 579 MB on cpu "
        "(attention_math n=128 d=8 batch=1 heads=1)"
    )
    begun = dataclasses.replace(plan, begun_s=6.0)  # the command's start-up and the measurements, counted in
    assert begun.time_s == plan.time_s + 6.0
    assert "about 2.4 min on this machine (estimate, from the command's start: 6 s of it before this line)" in (
        preflight.summary_line(begun)
    )
    with_budget = dataclasses.replace(
        plan, extra_s=70, extend_s=80, extend_foreseen_s=50, extend_points=3, extend_structural_s=12
    )
    # Sampling and extension foreseen: 70 + 50 s; counted: the structural 12 s whole, and a quarter of the 140 + 12 s
    # run they add to, 38 s (docs/method.md).
    assert with_budget.optional_s == pytest.approx(12 + estimate.OPTIONAL_SHARE * (140 + 12)) == 50
    assert with_budget.time_s == pytest.approx(140 + 50)
    assert preflight.summary_line(with_budget).startswith(
        "plan: 2 points, about 3.2 min on this machine (estimate, 50 s of it sampling points until their time is "
        "known and extending sweeps that do not decide (foreseen: at most 70 s sampling, 3 point(s) in 50 s on the "
        "modelled calls, 12 s of it for sweeps short of points in their regime; none added past 1.25x this "
        "estimate), within 50% of the memory available), peak memory"
    )
    little = dataclasses.replace(with_budget, extra_s=5, extend_foreseen_s=20)  # foreseen under the share: whole
    assert little.optional_s == 25 and little.time_s == pytest.approx(165)
    sampling = dataclasses.replace(plan, extra_s=70)  # no extension: sampling alone, at most the share of the run
    assert sampling.optional_s == pytest.approx(estimate.OPTIONAL_SHARE * 140)
    assert "35 s of it sampling points until their time is known (at most 70 s)" in preflight.summary_line(sampling)


def test_the_extra_passes_budget_is_the_policys_share_of_the_points_time_and_counted():
    specs = [PointSpec("conv", n, 8, k=3) for n in (64, 128)]
    plan = estimate_plan(specs, dataclasses.replace(QUICK_POLICY, extra_passes=0), _costs(specs))
    budget = dataclasses.replace(QUICK_POLICY, extra_passes=3, extra_budget=0.4)
    with_budget = estimate_plan(specs, budget, _costs(specs))
    assert with_budget.extra_s == pytest.approx(0.4 * sum(p.time_s for p in plan.points))
    counted = min(with_budget.extra_s, estimate.OPTIONAL_SHARE * plan.mandatory_s)  # at most the share of the run
    assert with_budget.optional_s == pytest.approx(counted) and counted > 0
    assert with_budget.time_s == pytest.approx(plan.time_s + counted)
    assert estimate_plan(specs, dataclasses.replace(budget, extra_passes=0), _costs(specs)).extra_s == 0


@pytest.mark.parametrize(
    "seconds,text", [(45, "45 s"), (140, "2.3 min"), (1800, "30 min"), (5400, "1.5 h"), (50 * 3600, "2.1 days")]
)
def test_durations_read_in_their_unit(seconds, text):
    assert format_duration(seconds) == text


# ----------------------------------------------------------------------------------- measuring
def test_a_layers_costs_are_measured_on_its_tiny_points():
    """Positive, and a recurrence's steps seen (its longer tiny point is measured); the ceilings plausible."""
    specs = [PointSpec("conv", 512, 32, k=3), PointSpec("gru", 512, 32)]
    measured = cost.measure(specs)
    conv, gru = (measured.layers[group_of(s)] for s in specs)
    assert conv.call_s > 0 and conv.step_s == 0 and gru.step_s > 0 and 0 < conv.share <= 1
    assert 1e8 < measured.ceilings["cpu"].matmul_flops_per_s < 1e14 and measured.draw_s_per_element["cpu"] > 0
    assert cost.tiny(PointSpec("attention_local", 4096, 64, heads=4, window=64), 8).window == 8


@pytest.mark.parametrize(
    "layer, dtype", [("rnn", "bfloat16"), ("gru", "bfloat16"), ("lstm", "bfloat16"), ("gru", "float32")]
)
def test_counting_a_recurrence_holds_what_the_estimate_says(layer, dtype):
    """FlopCounterMode decomposes a CPU recurrence that is not fused; in bfloat16, on a CPU whose oneDNN takes it
    (AVX-512 BF16, AMX), that holds a copy of the gate weights per step: the allocator's peak during the count
    (bench.memory, allocation events) is about flop_count_bytes above the forward's own; the fused LSTM, float32
    and a CPU without oneDNN's bfloat16 (an AMD EPYC of these VMs) hold nothing that grows with n."""
    import torch  # noqa: PLC0415

    import models  # noqa: PLC0415
    from bench.flops import count_flops  # noqa: PLC0415
    from bench.memory import measure_memory  # noqa: PLC0415

    spec = PointSpec(layer=layer, n=256, d=128, batch=2, dtype=dtype)
    cfg = spec.config()
    net = models.build(layer, cfg)
    x = torch.randn(spec.batch, spec.n, spec.d).to(cfg.torch_dtype)
    with torch.inference_mode():
        forward = measure_memory(lambda: net(x), "cpu").peak_bytes
        counting = measure_memory(lambda: count_flops(lambda: net(x)), "cpu").peak_bytes
    held, expected = counting - forward, flop_count_bytes(spec)
    if expected == 0:
        assert held <= forward  # nothing that grows with n
    else:
        assert 0.9 <= held / expected <= 1.2, (held, expected)


def test_a_layer_that_convolves_takes_the_convolutions_rate_and_the_others_the_matmuls():
    # a GPU's float32 convolution runs TF32, 6x its matmul (the H100's: 3.0e14 against 4.9e13 FLOP/s)
    ceilings = Ceilings(4.9e13, 3.0e14, None)
    assert ceilings.flops_per_s("conv") == 3.0e14 == ceilings.flops_per_s("conv_dilated")
    assert ceilings.flops_per_s("conv_separable") == 4.9e13


def test_a_decode_visit_pays_each_position_it_prefills():
    short, long = (PointSpec("lstm", n=n, d=16, batch=2, mode="decode") for n in (1000, 3000))
    costs = _costs([short], layer=dataclasses.replace(FIXED, prefill_s=2e-5))
    on = TimingPolicy(passes=3, extra_passes=0)
    visits = costs.visit_s(long, on, 1e-3) - costs.visit_s(short, on, 1e-3)  # equal calls: prefill and inputs
    assert visits == pytest.approx(3 * 2000 * (2e-5 + 2 * 16 * 5e-9))


@pytest.mark.parametrize(
    "spec, long_n",
    [
        (PointSpec("lstm", n=40, d=96, batch=2, mode="decode"), 1280),  # a plan's decode starting below 1280
        (PointSpec("gru", n=16, d=64, batch=4), 40),
        (PointSpec("lstm", n=4, d=32, batch=2), 40),  # shorter than the short tiny length: itself, then 40
    ],
)
def test_a_layers_two_tiny_points_differ_in_length_alone(monkeypatch, spec, long_n):
    """A plan whose smallest point is shorter than the longer tiny length measured that point itself, at its full
    width and batch, against the narrow short one: the width's cost read as prefill (a custom decode grid from
    n = 40 at d = 96 foresaw 5.8 s of prefill in a 0.3 s visit at n = 10240) or as per-step cost."""
    pairs = []
    monkeypatch.setattr(cost, "_tiny_costs", lambda short, long: pairs.append((short, long)) or FIXED)
    monkeypatch.setattr(cost, "kept", lambda key, measure: measure())
    cost.measure_layer(spec)
    ((short, long),) = pairs
    assert (long.n, long.d, long.batch, long.heads) == (long_n, short.d, short.batch, short.heads)
    assert short.n < long.n


def test_a_layers_costs_are_its_least_visits_so_one_stall_does_not_read_as_prefill(monkeypatch):
    short, long = (PointSpec("conv", n=n, d=8, k=3, batch=1, mode="decode") for n in (8, 1280))
    visits = {short.n: iter([(1e-5, 2e-3, 1e-3)] * 3), long.n: iter([(1e-5, 0.9, 1e-3), *[(1e-5, 2.1e-3, 1e-3)] * 2])}
    monkeypatch.setattr(cost, "_warm_probes", lambda: None)
    monkeypatch.setattr(cost, "_visit", lambda spec, with_probes=True: next(visits[spec.n]))
    layer = cost._tiny_costs(short, long)
    assert layer.prefill_s == pytest.approx(1e-4 / 1272)  # the stalled visit's 0.9 s would read 0.7 ms a position
    assert layer.visit_s == pytest.approx(2e-3 - 8 * layer.prefill_s)
