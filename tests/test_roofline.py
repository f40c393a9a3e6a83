"""The roofline of a point (bench.roofline) by hand: its bound, its binding ceiling, its dependent operators."""

import math

import pandas as pd
import pytest

import models
from bench import roofline
from bench.roofline import BANDWIDTH, CACHE, COMPUTE, LATENCY, against_roofline, bound, dependent_ops


def test_the_bound_is_the_slowest_ceiling_by_hand():
    # 1e9 FLOPs at 1e11 FLOP/s take 10 ms; 1e8 bytes at 1e10 B/s take 10 ms: equal, compute named first.
    assert bound(1e9, 1e8, 1e11, 1e10, None, None) == (1e11, COMPUTE)
    # 4e8 bytes take 40 ms: bandwidth binds, 1e9 FLOPs / 40 ms = 2.5e10 FLOP/s
    assert bound(1e9, 4e8, 1e11, 1e10, None, None) == pytest.approx((2.5e10, BANDWIDTH))
    # 5000 dependent operators at 10 µs take 50 ms: latency binds, 1e9 / 0.05 = 2e10
    assert bound(1e9, 4e8, 1e11, 1e10, 5000, 1e-5) == pytest.approx((2e10, LATENCY))
    # without a bandwidth or a latency only the peak is left
    assert bound(1e9, 4e8, 1e11, None, 5000, None) == (1e11, COMPUTE)


def test_dependent_operators_follow_how_the_layer_runs():
    assert dependent_ops("rnn", 300, "cpu", "float32") == 300  # ATen's per-step loop
    assert dependent_ops("rnn", 300, "cuda", "float32") is None  # cuDNN's one kernel
    assert dependent_ops("lstm", 300, "cpu", "float32") is None  # oneDNN's one operator
    assert dependent_ops("scan", 300, "cpu", "float32") == models.LAYERS["scan"].scan_levels(300) == 9
    assert dependent_ops("attention", 300, "cpu", "float32") is None
    assert dependent_ops("conv", 300, "cpu", "float32") is None


RUNS = {
    "r": {
        "memory_bandwidth": {
            "cpu": {
                "bytes_per_s": 1e10,
                "bytes_per_s_cpu": 1.2e10,
                "last_level_cache_bytes": 2**20,
                "cache": {"bytes_per_s": 4e10},
            }
        },
        "op_latency": {"cpu": {"seconds": 2e-6, "seconds_cpu": 1e-6}},
    },
    "old": {},  # a run from before the bandwidth
}


def _points(*rows):
    base = dict(device="cpu", dtype="float32", mode="inference", k=None, heads=None, window=None, dilation=None)
    return pd.DataFrame([base | r for r in rows])


def test_each_point_gets_the_ceilings_of_its_run_device_and_clock_by_hand():
    points = _points(
        # conv n=4096 d=64 batch=2: above the 1 MiB cache, so the DRAM triad on the wall clock
        dict(layer="conv", n=4096, d=64, batch=2, k=3, run_id="r", clock="wall", useful=1e9, time_s=0.05),
        # an rnn on the CPU clock: 300 steps at 1 µs = 0.3 ms; its bytes fit in the cache
        dict(layer="rnn", n=300, d=24, batch=2, run_id="r", clock="cpu", useful=1e6, time_s=1e-3),
        dict(layer="conv", n=300, d=24, batch=2, k=3, run_id="old", clock="wall", useful=1e6, time_s=1e-3),
        dict(layer="conv", n=300, d=24, batch=2, k=3, run_id="r", clock="wall", useful=1e6, time_s=1e-3, mode="train"),
    )
    peaks = pd.Series([1e11, 1e11, 1e11, 1e11])
    out = against_roofline(points, RUNS, peaks)
    assert list(out.index) == [0, 1, 2, 3]  # every mode has a roofline
    conv, rnn, old, train = (out.loc[i] for i in range(4))
    small = models.LayerConfig(d=24, k=3)
    assert train.min_bytes == models.analytic_train_min_bytes("conv", 2, 300, small, 2**20)
    cfg = models.LayerConfig(d=64, k=3)
    assert conv.min_bytes == models.analytic_min_bytes("conv", 2, 4096, cfg, 2**20) > 2**20
    assert conv.bandwidth == 1e10 and conv.intensity == 1e9 / conv.min_bytes
    expected = 1e9 / max(1e9 / 1e11, conv.min_bytes / 1e10)
    assert conv.bound == pytest.approx(expected) and conv.fraction == pytest.approx(1e9 / 0.05 / expected)
    assert rnn.min_bytes <= 2**20 and rnn.bandwidth == 4e10  # the cache triad
    assert rnn.ops == 300 and rnn.bound == pytest.approx(1e6 / 3e-4) and rnn.ceiling == LATENCY
    assert math.isnan(old.bound) and old.ceiling == "no bandwidth stored"


def test_a_point_bound_by_the_cache_says_so():
    points = _points(dict(layer="conv", n=64, d=8, batch=1, k=3, run_id="r", clock="wall", useful=1e3, time_s=1))
    (row,) = against_roofline(points, RUNS, pd.Series([1e15])).itertuples()
    assert row.ceiling == CACHE and row.bound == pytest.approx(1e3 / (row.min_bytes / 4e10))
    assert roofline.CACHE != roofline.BANDWIDTH


def test_a_point_inside_the_cache_of_a_run_without_its_triad_has_no_bandwidth_ceiling():
    """A run (a GPU's, or from before the cache triad) without `cache`: memory's triad does not bound a call whose
    bytes never leave the cache, so its peak alone does."""
    runs = {"r": {"memory_bandwidth": {"cpu": {"bytes_per_s": 1e10, "last_level_cache_bytes": 2**20}}}}
    points = _points(dict(layer="conv", n=64, d=8, batch=1, k=3, run_id="r", clock="wall", useful=1e3, time_s=1))
    (row,) = against_roofline(points, runs, pd.Series([1e15])).itertuples()
    assert row.min_bytes <= 2**20 and math.isnan(row.bandwidth) and (row.bound, row.ceiling) == (1e15, COMPUTE)


def test_a_decode_step_is_bound_by_reading_its_state_and_weights():
    # attention at t = 4096, d = 64, 4 heads, batch 2: its 4 MiB of keys and values outgrow the 1 MiB cache
    row = dict(layer="attention", n=4096, d=64, batch=2, heads=4, run_id="r", clock="wall", useful=2e6, time_s=1e-3)
    (out,) = against_roofline(_points(row | {"mode": "decode"}), RUNS, pd.Series([1e11])).itertuples()
    cfg = models.LayerConfig(d=64, heads=4, causal=True)
    assert out.min_bytes == models.analytic_decode_min_bytes("attention", 2, 4096, cfg) > 2 * 2 * 4096 * 64 * 4
    assert out.ceiling == BANDWIDTH and out.bound == pytest.approx(2e6 / (out.min_bytes / 1e10))
    assert math.isnan(out.ops)  # a step's operators are not a per-position chain


def test_each_point_is_held_to_the_ceiling_of_the_math_it_runs():
    """A GPU's float32: cuDNN's convolutions and fused recurrences run TF32 by torch's default, cuBLAS's matmuls do
    not; each point gets its mode's peak (issue 60: 2), a run from before the modes its one peak."""
    from bench import peak
    from bench.report.roofline import point_peaks

    modes = {"float32": {"flops_per_s": 50e12}, "tf32": {"flops_per_s": 400e12}}
    tf32 = {"cublas": False, "cudnn": True}
    runs = {
        "new": {"compute_peak": {"cuda": {"flops_per_s": 400e12, "modes": modes, "tf32": tf32}}},
        "old": {"compute_peak": {"cuda": {"flops_per_s": 300e12}}},
    }
    rows = [
        ("new", "conv", "inference"),
        ("new", "lstm", "train"),
        ("new", "lstm", "decode"),  # the step's products are matmuls
        ("new", "attention", "inference"),
        ("old", "conv", "inference"),
    ]
    points = pd.DataFrame(
        [dict(run_id=r, layer=layer, mode=mode, device="cuda", dtype="float32") for r, layer, mode in rows]
    )
    assert point_peaks(points, runs).tolist() == [400e12, 400e12, 50e12, 50e12, 300e12]
    assert peak.math_mode("float32", "cuda", True, {"cublas": True, "cudnn": False}) == "float32"
    assert peak.math_mode("float32", "cuda", False, {"cublas": True, "cudnn": False}) == "tf32"
    assert peak.math_mode("bfloat16", "cuda", True, tf32) == "bfloat16"
    assert peak.math_mode("float32", "cpu", True, tf32) == "float32"
    entry = peak.with_measurement(None, "start", {"flops_per_s": 1.0, "modes": {"tf32": {"flops_per_s": 3.0}}})
    entry = peak.with_measurement(entry, "end", {"flops_per_s": 2.0, "modes": {"tf32": {"flops_per_s": 1.0}}})
    assert entry["flops_per_s"] == 2.0 and entry["modes"]["tf32"]["flops_per_s"] == 3.0  # each mode's best
