"""A GPU call's own time: the CUDA graph replay beside the eager loop, the device clock chosen and read back, and a
point without a graph falling back to its wall clock (the GPU parts are marked `cuda`)."""

import pandas as pd
import pytest
import torch

from bench import clock
from bench.point import measure_pass
from bench.policy import DEVICE, WALL, TimingPolicy, choose_clock, plain_flag
from bench.result import PointResult
from bench.spec import PointSpec
from bench.timing import Rounds, record_of, rounds_of, summarize


def _rounds(wall, device=(), graph_calls=0):
    return Rounds(tuple(wall), (), len(wall), None, tuple(device), graph_calls)


def test_device_rounds_are_stored_and_read_back_with_their_graph_size():
    kept = rounds_of(record_of(_rounds([2e-4, 2.1e-4], [3e-5, 3.1e-5], 40), 1, "p"))
    assert kept.device_s == (3e-5, 3.1e-5) and kept.graph_calls == 40
    old = {"stats": {"data": [1e-3], "iterations": 1}, "extra_info": {"cpu_data": []}}
    assert rounds_of(old).device_s == () and rounds_of(old).graph_calls == 0


def test_a_graph_timed_point_is_on_the_device_clock():
    passes = [_rounds([2e-4] * 4, [3e-5, 3.05e-5, 3.02e-5, 3.01e-5], 40) for _ in range(3)]
    timing = summarize(passes, 25)
    assert timing.device is not None and timing.device.median_s == pytest.approx(3.02e-5, rel=0.02)
    assert choose_clock(timing, 0.0) == (DEVICE, "the device's own time: a CUDA graph of 40 calls replayed")
    assert choose_clock(timing, 0.0, WALL)[0] == WALL
    wall_only = summarize([_rounds([2e-4] * 4) for _ in range(3)], 25)
    assert wall_only.device is None and choose_clock(wall_only, 0.0)[0] == WALL


def test_a_gpu_points_jitter_is_named_as_launches_not_other_programs():
    stalled = summarize([_rounds([1e-4, 1e-4, 1e-4, 4e-4, 4e-4, 4e-4]) for _ in range(3)], 1).wall
    assert "launch jitter" in plain_flag(stalled, WALL, 3, on_gpu=True)
    assert "other programs" in plain_flag(stalled, WALL, 3, on_gpu=False)


def test_the_device_clock_reads_a_graph_where_there_is_one_else_the_wall():
    points = pd.DataFrame(
        {
            "time_clock": [DEVICE, WALL],
            "time_median_s": [2e-4, 5e-2],
            "time_ci_low_s": [1.9e-4, 4.9e-2],
            "time_ci_high_s": [2.1e-4, 5.1e-2],
            "time_iqr_s": [1e-5, 1e-3],
            "time_wall_flag": ["stalled", ""],
            "time_device_median_s": [3e-5, None],
            "time_device_ci_low_s": [2.9e-5, None],
            "time_device_ci_high_s": [3.1e-5, None],
            "time_device_iqr_s": [1e-7, None],
            "time_device_flag": ["", "no CUDA graph of the call"],
        }
    )
    assert clock.group_clock(points) == DEVICE
    on = clock.on_clock(points)
    assert on["time_s"].tolist() == [3e-5, 5e-2]
    assert on["time_ok"].tolist() == [True, True]  # the graph's flag, then the wall clock's
    assert clock.each_on_own_clock(points)["time_s"].tolist() == [3e-5, 5e-2]


@pytest.mark.cuda
def test_a_graph_replay_times_the_device_not_the_launches():
    from bench.graphs import device_rounds

    a = torch.randn(64, 64, device="cuda")

    def call():  # many tiny kernels: launches dominate an eager loop
        for _ in range(20):
            a.mul_(1.0)

    times, calls = device_rounds(call, 50, 5)
    assert calls == 50 and len(times) == 5
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(50):
        call()
    end.record()
    end.synchronize()
    eager = start.elapsed_time(end) / 1e3 / 50
    assert min(times) < eager


@pytest.mark.cuda
@pytest.mark.parametrize("mode", ["decode", "inference", "train"])
def test_a_gpu_point_is_timed_as_a_graph_and_stored_on_the_device_clock(mode):
    spec = PointSpec("attention", n=256, d=64, batch=2, heads=4, device="cuda", mode=mode, causal=mode == "decode")
    policy = TimingPolicy(min_rounds=4, max_rounds=4, target_s=0.01, passes=1)
    result = measure_pass(spec, policy, None, with_probes=True)
    assert not hasattr(result, "status"), result
    point = PointResult(spec, 1, passes=(rounds_of(result.record),), iterations=result.iterations, probes=result.probes)
    assert point.timing.device is not None and point.timing.graph_calls >= 1
    row = point.as_row()
    assert row["time_clock"] == DEVICE and row["time_device_median_s"] > 0
    assert row["time_device_median_s"] <= 1.5 * row["time_median_s"]
