"""The memory hierarchy measured: the working sets swept, the levels found in a bandwidth curve drawn by hand, the
effective last-level cache, and the roofline's spill rule reading it rather than the size the OS reports."""

import math

import pandas as pd
import pytest

import models
from bench import hierarchy
from bench.peak import memory_bandwidth as UNSHARED_MEMORY_BANDWIDTH  # bound before conftest shares it
from bench.roofline import BANDWIDTH, COMPUTE, against_roofline

MiB = 2**20


def test_the_sweep_doubles_from_48_kib_to_four_times_the_reported_cache_within_memory():
    sizes = hierarchy.working_sets(480 * MiB, 64 * 2**30)
    assert sizes[0] == 3 * 2**14 and all(b == 2 * a for a, b in zip(sizes, sizes[1:]))
    assert sizes[-1] <= 4 * 480 * MiB < 2 * sizes[-1] and all(s % 12 == 0 for s in sizes)
    assert hierarchy.working_sets(None, 64 * 2**30)[-1] <= 2**30 < 2 * hierarchy.working_sets(None, 64 * 2**30)[-1]
    assert hierarchy.working_sets(480 * MiB, 2**30)[-1] <= 2**30 / 8  # an eighth of the memory available


def test_levels_of_a_curve_drawn_by_hand():
    # 4 sizes at about 100 GB/s, 3 at about 50 GB/s, 3 at 20 GB/s: three plateaus, each its median
    sizes = [2**i for i in range(10)]
    rates = [90e9, 100e9, 105e9, 98e9, 52e9, 50e9, 49e9, 21e9, 20e9, 20e9]
    found = hierarchy.levels(sizes, rates)
    assert [(f["from_bytes"], f["up_to_bytes"], f["points"]) for f in found] == [(1, 8, 4), (16, 64, 3), (128, 512, 3)]
    assert [f["bytes_per_s"] for f in found] == [99e9, 50e9, 20e9]
    assert hierarchy.effective_last_level_bytes(found) == 64


def test_no_cache_above_memory_or_no_memory_reached_has_no_effective_cache():
    assert hierarchy.effective_last_level_bytes(hierarchy.levels([1, 2, 4], [10e9, 9.5e9, 9.8e9])) is None
    one_point_of_memory = hierarchy.levels([1, 2, 4], [50e9, 48e9, 20e9])
    assert hierarchy.effective_last_level_bytes(one_point_of_memory) is None


def test_measure_sweeps_every_working_set_once():
    seen = []

    def triad(elements):
        seen.append(elements)
        return 100e9 if elements * 12 <= 4 * MiB else 25e9

    out = hierarchy.measure(triad, 8 * MiB, 2**34)
    assert [e * 12 for e in seen] == out["working_set_bytes"]
    assert out["effective_last_level_cache_bytes"] == max(s for s in out["working_set_bytes"] if s <= 4 * MiB)
    assert out["reported_last_level_cache_bytes"] == 8 * MiB


@pytest.mark.parametrize("effective, ceiling", [(96 * MiB, BANDWIDTH), (None, COMPUTE)])
def test_the_explicit_attentions_scores_spill_out_of_the_measured_cache(effective, ceiling):
    """n = 4096, d = 32, 4 heads: 268 MB of scores, inside the 480 MiB a VM reports, outside the 96 MiB measured."""
    bandwidth = {"bytes_per_s": 30e9, "last_level_cache_bytes": 480 * MiB, "cache": {"bytes_per_s": 57e9}}
    if effective:
        bandwidth["effective_last_level_cache_bytes"] = effective
    runs = {"r": {"memory_bandwidth": {"cpu": bandwidth}}}
    row = dict(layer="attention_math", n=4096, d=32, batch=1, heads=4, k=None, window=None, dilation=None)
    row |= dict(device="cpu", dtype="float32", mode="inference", run_id="r", clock="wall", useful=1e9, time_s=0.1)
    (out,) = against_roofline(pd.DataFrame([row]), runs, pd.Series([1e11])).itertuples()
    cfg = models.LayerConfig(d=32, heads=4)
    assert out.min_bytes == models.analytic_min_bytes("attention_math", 1, 4096, cfg, effective or 480 * MiB)
    assert out.ceiling == ceiling and not math.isnan(out.bound)


def test_a_runs_end_reuses_its_starts_sweep(monkeypatch):
    """The sweep takes seconds: measured once a run, at its start; the end's triads read its effective cache."""
    from bench import peak

    given = {"effective_last_level_cache_bytes": 8 * MiB, "working_set_bytes": [], "bytes_per_s": [], "levels": []}
    monkeypatch.setattr(hierarchy, "measure", lambda *a: pytest.fail("swept again"))
    out = UNSHARED_MEMORY_BANDWIDTH("cpu", given)
    assert out["hierarchy"] is given and out["effective_last_level_cache_bytes"] == 8 * MiB
    assert out["cache"]["array_bytes"] == 8 * MiB // peak.TRIAD_IN_CACHE_SHARE // 4 * 4
