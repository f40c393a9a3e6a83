"""`--preset auto` (bench.auto): each layer's sweep against n starts where its work outweighs a call's fixed cost on
the machine at hand, doubles over 16x, and stays within the memory and the time budget."""

from __future__ import annotations

import json
import math

import pytest

import models
from bench import auto
from bench.cli import main
from bench.cost import Ceilings, Costs, LayerCosts, analytic_flops
from bench.footprint import point_memory_bytes
from bench.policy import TimingPolicy
from bench.presets import get_preset
from bench.spec import DECODE_MODE, DEFAULT_MODE

CPU_RATE, GPU_RATE = 5e10, 3e14  # FLOP/s: a laptop core's matmul, an H100's TF32


class _Every(dict):
    def __missing__(self, key):  # every layer and mode: a 50 µs call, 10 µs a step, half the rate reached
        return LayerCosts(50e-6, 10e-6, 5e-3, 5e-3, 5e-4, 0.5)


COSTS = Costs(
    {"cpu": Ceilings(CPU_RATE, CPU_RATE, None), "cuda": Ceilings(GPU_RATE, GPU_RATE, None)},
    _Every(),
    {"cpu": 5e-9, "cuda": 0.0},
    {"cpu": 1.0, "cuda": 0.1},
)
PLENTY = {"cpu": 16e9, "cuda": 80e9}
POLICY = TimingPolicy(passes=3, target_s=0.2)
GRIDS = get_preset("auto").grids
MODES = {grid["mode"][0]: grid["layers"] for grid in GRIDS}  # presets.toml's [auto]: the layers of each mode


def _local_flops_exponent(layer: str, n: int, d: int | None = None) -> float:
    a, b = (auto._spec(layer, size, "cpu", "float32", DEFAULT_MODE, d) for size in (n, 2 * n))
    return math.log2(analytic_flops(b) / analytic_flops(a))


@pytest.mark.parametrize("layer", ["conv", "lstm", "attention", "attention_linear"])
def test_a_sweep_starts_where_its_work_is_eight_times_a_calls_fixed_cost_in_table1s_regime(layer):
    n = auto.start_n(layer, "cpu", "float32", DEFAULT_MODE, COSTS, PLENTY["cpu"])
    fixed, growing = COSTS.call_parts_s(auto._spec(layer, n, "cpu", "float32", DEFAULT_MODE))
    assert growing >= auto.WORK_OVER_CALL * fixed
    predicted = 2.0 if layer == "attention" else 1.0  # Table 1 in n: n²·d, else linear
    assert abs(_local_flops_exponent(layer, n) - predicted) <= 0.15
    if n > auto.FIRST_N:  # half of it falls short of one or the other
        fixed, growing = COSTS.call_parts_s(auto._spec(layer, n // 2, "cpu", "float32", DEFAULT_MODE))
        short = abs(_local_flops_exponent(layer, n // 2) - predicted) > 0.15
        assert growing < auto.WORK_OVER_CALL * fixed or short


def test_softmax_attention_starts_where_its_n_squared_term_sets_the_flops():
    # attention at d = 64: projections 8·n·d² against scores 4·n²·d; the local exponent is within 0.15 of 2 from 1024
    assert auto.regime_n("attention", "cpu", "float32", DEFAULT_MODE) == 1024
    assert abs(_local_flops_exponent("attention", 512) - 2) > 0.15


def test_a_decode_step_whose_state_does_not_grow_starts_at_the_first_size():
    assert auto.start_n("lstm", "cpu", "float32", DECODE_MODE, COSTS, PLENTY["cpu"]) == auto.FIRST_N
    cached = auto.start_n("attention", "cpu", "float32", DECODE_MODE, COSTS, PLENTY["cpu"])
    assert cached > auto.FIRST_N  # its cache grows with t: from where reading it outweighs the step's fixed cost


def test_the_plan_sweeps_every_layer_in_every_mode_over_16x():
    specs, notes = auto.plan(GRIDS, ["cpu"], "float32", COSTS, PLENTY, POLICY)
    for mode, layers in MODES.items():
        for layer in layers:
            ns = sorted(s.n for s in specs if s.layer == layer and s.mode == mode)
            assert len(ns) >= auto.MIN_POINTS, (layer, mode, notes)
            assert all(b == 2 * a for a, b in zip(ns, ns[1:])) and ns[-1] >= 8 * ns[0]
    total_s = sum(COSTS.visit_s(s, POLICY) for s in specs)
    assert total_s <= auto.BUDGET_S["cpu"] or all(line.startswith("auto: ") for line in notes)


def test_memory_leaves_a_layer_out_and_says_so():
    specs, notes = auto.plan(GRIDS, ["cpu"], "float32", COSTS, {"cpu": 2e6}, POLICY, mode=DEFAULT_MODE)
    assert all(point_memory_bytes(s) <= 1e6 for s in specs)  # half the memory given
    assert any("attention_math (inference on cpu) left out" in line for line in notes)


def test_the_budget_trims_the_dearest_sweeps_to_8x(monkeypatch):
    monkeypatch.setitem(auto.BUDGET_S, "cpu", 1.0)
    specs, notes = auto.plan(GRIDS, ["cpu"], "float32", COSTS, PLENTY, POLICY, mode=DEFAULT_MODE)
    counts = {layer: sum(s.layer == layer for s in specs) for layer in MODES[DEFAULT_MODE]}
    assert set(counts.values()) == {auto.MIN_POINTS}  # 1 s is less than any plan: every sweep at its 8x
    assert sum("trimmed to n ≤" in line for line in notes) == len(counts)


def test_a_gpu_is_planned_at_its_own_sizes():
    cpu = auto.start_n("conv", "cpu", "float32", DEFAULT_MODE, COSTS, PLENTY["cpu"])
    gpu = auto.start_n("conv", "cuda", "float32", DEFAULT_MODE, COSTS, PLENTY["cuda"])
    assert gpu > cpu  # a GPU's call is work only at sizes a CPU takes long over
    specs, notes = auto.plan(GRIDS, ["cuda"], "float32", COSTS, PLENTY, POLICY, mode=DEFAULT_MODE)
    assert {s.device for s in specs} == {"cuda"} and {s.layer for s in specs} == set(MODES[DEFAULT_MODE])
    narrower = {s.layer for s in specs if s.d < auto.WIDTH["cuda"]}
    assert {s.layer for s in specs if s.d == auto.WIDTH["cuda"]} >= {"conv", "lstm", "scan", "attention_linear"}
    for layer in narrower:  # each one narrowed is said, with its heads of 64
        spec = next(s for s in specs if s.layer == layer)
        assert spec.d // spec.heads == 64
        assert any(line.startswith(f"auto: {layer} (inference on cuda) at d = {spec.d}") for line in notes)


def test_explicit_attention_is_narrowed_where_its_scores_leave_the_memory_before_its_regime():
    # at d = 512 its n² scores (4·8·n²·4 bytes) pass 8 GB by n = 8192, before 8x of n past its regime's start
    specs, notes = auto.plan(GRIDS, ["cuda"], "float32", COSTS, {"cuda": 16e9}, POLICY, mode=DEFAULT_MODE)
    ns = sorted(s.n for s in specs if s.layer == "attention_math")
    (d,) = {s.d for s in specs if s.layer == "attention_math"}
    assert d < auto.WIDTH["cuda"] and len(ns) >= auto.MIN_POINTS
    assert ns[0] >= auto.regime_n("attention_math", "cuda", "float32", DEFAULT_MODE, d)
    assert any("attention_math (inference on cuda) at d = " in line and "half the memory" in line for line in notes)


def test_the_auto_preset_sweeps_every_layer_in_inference_and_decode():
    assert set(MODES) == {DEFAULT_MODE, "train", DECODE_MODE} and set(MODES[DECODE_MODE]) == set(models.LAYERS)
    assert set(MODES[DEFAULT_MODE]) == set(models.LAYERS) - {"attention_split"}  # its forward is attention's
    with pytest.raises(ValueError, match="planned at the run's start"):
        get_preset("auto").specs(["cpu"])


def test_run_preset_auto_plans_and_says_its_plan(no_measuring, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["run", "--preset", "auto", "--mode", "decode", "--device", "cpu", "--yes", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "plan: " in err and no_measuring == [out]
    plan = json.loads((out / "plan.json").read_text())
    assert {r["layer"] for r in plan["specs"]} == set(MODES[DECODE_MODE])
    assert {r["mode"] for r in plan["specs"]} == {DECODE_MODE}
