"""The default-policy timing: which point each layer gives, and a run that stores it beside its pinned time."""

import pandas as pd
import pytest

from bench import default_policy
from bench.cli import main
from bench.errors import RunFailed
from bench.spec import PointSpec

FAST = ["--rounds", "6", "--target-time", "0.01", "--passes", "3", "--no-progress", "--no-extend", "--yes"]


def _points(rows):
    base = dict(d=16, batch=1, k=None, heads=None, window=None, dilation=None, device="cpu", dtype="float32")
    return pd.DataFrame([{**base, "status": "ok", **row} for row in rows])


def test_each_layer_gives_the_largest_n_of_its_widest_sweep():
    points = _points(
        [
            *({"layer": "lstm", "mode": "inference", "n": n} for n in (8, 16, 32)),
            *({"layer": "lstm", "mode": "train", "n": n} for n in (8, 16, 32, 64)),
            *({"layer": "conv", "mode": "inference", "n": n, "k": 3} for n in (8, 16)),
            *({"layer": "conv", "mode": "train", "n": n, "k": 3} for n in (8, 16)),
            {"layer": "conv", "mode": "inference", "n": 4096, "k": 3, "status": "oom"},
            *({"layer": "rnn", "mode": "inference", "n": n, "device": "cuda"} for n in (8, 16)),
        ]
    )
    chosen = default_policy.chosen(points)
    assert [(s.layer, s.mode, s.n) for s in chosen] == [("conv", "inference", 16), ("lstm", "train", 64)]
    assert chosen[0].k == 3 and chosen[0].heads is None


def test_a_plan_without_cpu_points_foresees_no_default_process_timing():
    """A GPU-only plan (the estimate of `run --device cuda`) and an empty one: nothing timed again, no error."""
    gpu = [PointSpec("conv", n=n, d=8, k=3, device="cuda") for n in (64, 128, 256)]
    for specs in (gpu, []):
        assert default_policy.duration_s(specs, lambda s: 1.0, lambda s: 1.0, 3.0) == 0.0


def test_the_points_a_planner_added_are_not_timed_again(tmp_path, monkeypatch):
    """The estimate counts this step from the plan's points (duration_s), so the run times the planned largest n."""
    rows = [{"layer": "conv", "mode": "inference", "n": n, "k": 3, "extended": n > 32} for n in (8, 16, 32, 4096)]

    class Folder:
        path = tmp_path

        def points(self):
            return _points(rows)

        def add_table(self, name, frame):
            self.table = frame

    timed = []
    monkeypatch.setattr(default_policy, "measure", lambda specs, *a: timed.extend(specs) or [s.as_row() for s in specs])
    default_policy.store(Folder(), 1, None, lambda line: None)
    assert [s.n for s in timed] == [32]


def test_a_child_that_fails_is_a_clear_error():
    with pytest.raises(RunFailed, match="default-policy timing failed"):
        default_policy.measure([PointSpec("no_such_layer", 8, 8)], threads=1, outside_layers=None)


@pytest.mark.slow
def test_a_run_stores_the_default_time_of_each_layers_largest_point(tmp_path, monkeypatch):
    monkeypatch.setenv("SEQBENCH_DEFAULT_POLICY", "1")
    out = tmp_path / "run"
    assert (
        main(["run", "--layers", "conv,attention_math", "--n", "32,64,128", "--d", "16", "--out", str(out), *FAST]) == 0
    )
    table = pd.read_csv(out / "default_policy.csv")
    points = pd.read_csv(out / "points.csv").set_index("point_id")
    assert sorted(table["layer"]) == ["attention_math", "conv"]
    assert (table["n"] == 128).all() and set(table["point_id"]) <= set(points.index)
    assert (table["time_median_s"] > 0).all() and (table["time_min_s"] <= table["time_median_s"]).all()
    assert (table["faults_per_call"] >= 0).all() and (table["calls"] >= 1).all()
