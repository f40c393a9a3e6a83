"""Several runs of one machine and device in one report: combined point by point (a point measured twice keeps
its newest measurement, said in a note), kept apart where a setting makes their times incomparable."""

import json

import pandas as pd
import pytest

from bench import fits
from bench.cli import main
from bench.report.build import build_report
from bench.report.load import combine, keep_apart

RUNS = {  # run id -> the meta.json fields combining reads
    "a": {
        "started_utc": "2026-01-01T00:00:00+00:00",
        "torch": "2.5.0",
        "threads": 1,
        "timing_policy": {"clock": "auto"},
    },
    "b": {
        "started_utc": "2026-02-01T00:00:00+00:00",
        "torch": "2.5.0",
        "threads": 1,
        "timing_policy": {"clock": "auto"},
    },
    "c": {
        "started_utc": "2026-03-01T00:00:00+00:00",
        "torch": "2.5.0",
        "threads": 2,
        "timing_policy": {"clock": "auto"},
    },
}


def _points(*rows):
    """Points of conv at d = 8, k = 3 on one source: (run, n, status, time)."""
    return pd.DataFrame(
        [
            dict(run_id=r, source="m.cpu", layer="conv", device="cpu", n=n, d=8, k=3, status=s, time_median_s=t)
            for r, n, s, t in rows
        ]
    )


@pytest.mark.parametrize("newer_first", [False, True])  # the order the folders came in changes nothing
def test_a_point_of_two_runs_keeps_its_newest_measurement(newer_first):
    a = [("a", 32, "ok", 1.0), ("a", 64, "ok", 2.0), ("a", 128, "ok", 4.0)]
    b = [("b", 64, "ok", 2.5), ("b", 128, "skipped", None), ("b", 256, "ok", 8.0)]
    table = _points(*(b + a if newer_first else a + b))
    kept, notes = combine(table, RUNS, "source", ("layer", "n", "d", "k"), {"m.cpu": "M · cpu"}, "points")
    # by hand: n = 64 measured in both, b's kept; n = 128 skipped in b, a's measurement kept; older run first
    assert list(zip(kept["run_id"], kept["n"], kept["time_median_s"].fillna(-1))) == [
        ("a", 32, 1.0),
        ("a", 128, 4.0),
        ("b", 64, 2.5),
        ("b", 256, 8.0),
    ]
    assert list(kept[fits.RUN_STARTED]) == [RUNS[r]["started_utc"] for r in ("a", "a", "b", "b")]
    assert notes == [
        "M · cpu: runs a (3 points), b (3 points) combined point by point; 1 of a's points measured again later, "
        "the newer kept (conv n=64 d=8 k=3); 1 of b's points skipped there, kept from a run that measured them."
    ]


def test_runs_of_two_groups_are_never_pooled_and_one_run_says_nothing():
    table = pd.concat([_points(("a", 32, "ok", 1.0)), _points(("b", 32, "ok", 2.0)).assign(source="m.cuda")])
    kept, notes = combine(table, RUNS, "source", ("layer", "n", "d", "k"), {}, "points")
    assert list(kept["time_median_s"]) == [1.0, 2.0] and notes == []


def test_a_run_with_other_threads_is_kept_apart_under_its_own_source():
    table = _points(("a", 32, "ok", 1.0), ("b", 64, "ok", 2.0), ("c", 32, "ok", 0.6))
    sources, labels, notes = keep_apart(table, RUNS, {"m.cpu": "M · cpu"})
    # c is the newest: it keeps the source (and its keys); a and b agree with each other, not with c
    assert list(sources) == ["m.cpu@b", "m.cpu@b", "m.cpu"]
    assert labels["m.cpu@b"] == "M · cpu, runs a, b"
    assert notes == [
        "M · cpu: runs a, b kept apart from the newest run c, as source `m.cpu@b` side by side (threads 1 there, "
        "2 in c): their times do not compare."
    ]


def test_on_a_gpu_the_cpu_threads_do_not_keep_runs_apart_but_torch_does():
    table = _points(("a", 32, "ok", 1.0), ("c", 64, "ok", 2.0)).assign(device="cuda", source="m.cuda")
    assert list(keep_apart(table, RUNS, {})[0]) == ["m.cuda", "m.cuda"]
    runs = RUNS | {"c": RUNS["c"] | {"torch": "2.6.0"}}
    sources, _, notes = keep_apart(table, runs, {"m.cuda": "M · cuda"})
    assert list(sources) == ["m.cuda@a", "m.cuda"] and "torch 2.5.0 there, 2.6.0 in c" in notes[0]


def test_a_fit_of_points_of_two_runs_is_the_newest_runs_and_names_both():
    points = _points(("b", 64, "ok", 2.0), ("a", 32, "ok", 1.0), ("a", 128, "ok", 4.0))
    points = points.assign(**{fits.RUN_STARTED: [RUNS[r]["started_utc"] for r in points["run_id"]]})
    assert fits.newest_run_of(points) == "b"  # the run of neither the last nor the largest point
    assert fits.runs_text(points) == "; points of 2 runs: a (2), b (1)"
    assert fits.runs_text(points[points["run_id"] == "a"]) == ""


FAST = ["--rounds", "6", "--target-time", "0.01", "--passes", "3", "--no-progress", "--device", "cpu"]


@pytest.mark.slow
def test_an_n_sweep_then_a_k_sweep_of_this_machine_both_fitted(tmp_path):
    """The README's custom grid in two steps: conv over n (run A), then over k at n = 128 (run B)."""
    sweep_n = ["--layers", "conv", "--n", "32,64,128,256", "--d", "8", "--k", "3"]
    sweep_k = ["--layers", "conv", "--n", "128", "--d", "8", "--k", "3,5,9,17"]
    assert main(["run", *sweep_n, *FAST, "--out", str(tmp_path / "A")]) == 0
    assert main(["run", *sweep_k, *FAST, "--out", str(tmp_path / "B")]) == 0
    out = tmp_path / "report"
    build_report([tmp_path / "A", tmp_path / "B"], out)  # `report --results A B`, raising what main would print
    table = pd.read_csv(out / "fits.csv")
    flops = table[table["metric"] == "flops"].set_index("variable")
    assert sorted(flops.index) == ["k", "n"]  # both sweeps' fits
    # n = 128, k = 3 is in both runs: B's measurement, so the n-sweep holds 3 points of A and 1 of B
    assert flops.loc["n", "run_id"] == "B" and flops.loc["n", "reason"].endswith("; points of 2 runs: A (3), B (1)")
    assert flops.loc["k", "run_id"] == "B" and "points of" not in flops.loc["k", "reason"]
    md = (out / "report.md").read_text()
    assert "runs A (4 points), B (4 points) combined point by point; 1 of A's points measured again later" in md
    numbers = json.loads((out / "numbers.json").read_text())["numbers"]
    assert {"A", "B"} <= {v["run_id"] for v in numbers.values()}
    assert any(k.endswith(".cpu.conv.flops.exponent_n") for k in numbers)
    assert any(k.endswith(".cpu.conv.flops.exponent_k") for k in numbers)


def test_replaced_points_are_named_the_rest_counted():
    rows = [("a", n, "ok", 1.0) for n in (16, 32, 64, 128, 256, 512, 1024, 2048)]
    newer = [("b", n, "ok", 2.0) for n in (16, 32, 64, 128, 256, 512, 1024, 2048)]
    _, (note,) = combine(_points(*rows, *newer), RUNS, "source", ("layer", "n", "d", "k"), {}, "points")
    named = ", ".join(f"conv n={n} d=8 k=3" for n in (16, 32, 64, 128, 256, 512))
    assert f"8 of a's points measured again later, the newer kept ({named}, and 2 more)" in note
