"""A run's life: interleaved passes in the stored order, points sampled until their time is known within the
budget, resume of a run whose passes are partly stored."""

import json
import re

import pandas as pd
import pytest

from bench import policy as P
from bench import progress
from bench.cli import main
from bench.folder import read_timing_records
from bench.result import PointResult
from bench.spec import PointSpec

GRID = [
    "run",
    "--layers",
    "conv,lstm",
    "--n",
    "8,16,32",
    "--d",
    "4",
    "--device",
    "cpu",
    "--rounds",
    "6",
    "--target-time",
    "0.01",
    "--passes",
    "3",
    "--no-progress",
]


def _plan(out):
    return [PointSpec(**s) for s in json.loads((out / "plan.json").read_text())["specs"]]


@pytest.mark.slow
def test_first_pass_in_plan_order_then_shuffled_passes(tmp_path):
    out = tmp_path / "run"
    assert main([*GRID, "--out", str(out)]) == 0
    plan_ids = [s.point_id for s in _plan(out)]
    records = [r for r in read_timing_records(out) if r["attempt"] == 0]
    order = {p: [r["point_id"] for r in records if r["pass"] == p] for p in range(3)}
    assert order[0] == plan_ids  # smallest first: an out-of-memory point stops its larger siblings
    assert sorted(order[1]) == sorted(plan_ids) and sorted(order[2]) == sorted(plan_ids)
    assert order[1] != plan_ids and order[1] != order[2]
    assert all(r["probes"] is not None for r in records if r["pass"] == 0)
    assert all(r["probes"] is None for r in records if r["pass"] > 0)
    df = pd.read_csv(out / "points.csv")
    # each row's rounds are those of all its passes, and its medians on both clocks are theirs
    for row in df.itertuples():
        mine = [r for r in read_timing_records(out) if r["point_id"] == row.point_id]
        data = [t for r in mine for t in r["stats"]["data"]]
        cpu = [t for r in mine for t in r["extra_info"]["cpu_data"]]
        assert row.rounds == len(data) == len(cpu) and row.passes == len(mine)
        assert row.time_median_s == pytest.approx(pd.Series(data).median())
        assert row.time_cpu_median_s == pytest.approx(pd.Series(cpu).median()) and row.time_cpu_clock == "thread"
        assert row.faults_per_call >= 0


@pytest.mark.slow
def test_points_are_sampled_until_known_and_no_further(tmp_path, monkeypatch):
    """A point whose time is not known gets one more pass at a time, interleaved over the unknown points alone,
    and no more once it is known: here a point is known once it has 4 passes, 1 more than the plan's 3 (within the
    extra passes' budget, half the first passes' time)."""
    monkeypatch.setattr(PointResult, "known", property(lambda result: len(result.passes) >= 4))
    out = tmp_path / "run"
    assert main([*GRID, "--out", str(out)]) == 0
    records = read_timing_records(out)
    assert sorted({(r["attempt"], r["pass"]) for r in records}) == [(0, 0), (0, 1), (0, 2), (1, 0)]
    df = pd.read_csv(out / "points.csv")
    assert (df["passes"] == 4).all() and len(records) == 4 * len(df)
    meta = json.loads((out / "meta.json").read_text())
    # Whether a point's time is then to be trusted is the data's to say (a busy machine may leave it flagged).
    assert meta["points_sampled_further"] == len(df) and meta["points_unreliable"] == (~df["time_reliable"]).sum()


@pytest.mark.slow
def test_points_that_stay_unreliable_stop_at_the_budget_and_stay_flagged(tmp_path, monkeypatch):
    monkeypatch.setattr(P, "CI_RELATIVE_WIDTH", -1.0)  # every interval is "too wide": no point is ever known
    out = tmp_path / "run"
    assert main([*GRID, "--out", str(out)]) == 0
    df = pd.read_csv(out / "points.csv")
    assert (~df["time_reliable"]).all() and df["time_flag"].str.contains("uncertain").all()
    # in the user's words: too wide, or, on a busy machine, stalled rounds (timing.plain_flag)
    assert (
        df["time_flag"]
        .str.match("its rounds (still spread too widely|kept losing the CPU to other programs) after")
        .all()
    )
    records = read_timing_records(out)
    first = sum(r["visit_s"] for r in records if r["attempt"] == 0)
    extra = [r for r in records if r["attempt"] == 1]
    policy = P.TimingPolicy.stored(json.loads((out / "plan.json").read_text())["timing_policy"])
    passes = {r["pass"] for r in extra}
    assert passes == set(range(len(passes))) and 1 <= len(passes) <= policy.extra_passes
    # the budget is checked before each extra visit, mid-pass too: all visits but the last fit within it
    assert sum(r["visit_s"] for r in extra[:-1]) < policy.extra_budget * first
    if len(passes) < policy.extra_passes:  # stopped by the budget, not by the count
        assert sum(r["visit_s"] for r in extra) >= policy.extra_budget * first
    meta = json.loads((out / "meta.json").read_text())
    assert meta["points_sampled_further"] == len(df) == meta["points_unreliable"]


@pytest.mark.slow
def test_resume_measures_only_the_missing_passes(tmp_path):
    out = tmp_path / "run"
    assert main([*GRID, "--out", str(out)]) == 0
    whole = (out / "timings.jsonl").read_text().splitlines(keepends=True)
    # Make it look killed in its third pass, one line cut off: no rows, passes 0, 1 and part of 2 stored.
    kept = [line for line in whole if json.loads(line)["pass"] < 2]
    kept += [line for line in whole if json.loads(line)["pass"] == 2][:2]
    (out / "timings.jsonl").write_text("".join(kept) + '{"cut off')
    (out / "points.csv").unlink()
    (out / "pytest-benchmark.json").unlink()
    meta = json.loads((out / "meta.json").read_text())
    (out / "meta.json").write_text(json.dumps(meta | {"status": "running"}))  # as a killed run leaves it
    assert main(["run", "--resume", str(out), "--no-progress"]) == 0
    after = (out / "timings.jsonl").read_text().splitlines(keepends=True)
    assert after[: len(kept)] == kept  # the stored passes are kept as they were
    keys = [(r["point_id"], r["attempt"], r["pass"]) for r in map(json.loads, after)]
    assert len(keys) == len(set(keys))
    assert len([k for k in keys if k[1] == 0]) == 6 * 3  # only the missing passes of the plan were measured
    assert sorted(pd.read_csv(out / "points.csv")["point_id"]) == sorted(s.point_id for s in _plan(out))


def test_a_run_from_before_interleaving_cannot_be_resumed_and_says_why(tmp_path, capsys):
    out = tmp_path / "old"
    out.mkdir()
    spec = PointSpec(layer="conv", n=8, d=4, k=3)
    meta = {"run_id": "old", "kind": "run", "status": "running", "started_utc": "2026-01-01T00:00:00+00:00"}
    meta |= {"threads": 1, "machine_info": {}, "commit_info": {}}
    (out / "meta.json").write_text(json.dumps(meta))
    (out / "plan.json").write_text(json.dumps({"specs": [spec.as_row()], "timing_policy": {"min_rounds": 3}}))
    (out / "timings.jsonl").write_text(json.dumps({"point_id": spec.point_id, "stats": {"data": [1.0]}}) + "\n")
    assert main(["run", "--resume", str(out), "--no-progress"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert "older version" in err[-1] and "timings.jsonl" in err[-1]


@pytest.mark.slow
@pytest.mark.parametrize("quiet", [False, True])
def test_a_run_into_a_log_shows_progress_lines_and_none_with_no_progress(tmp_path, monkeypatch, capsys, quiet):
    """stderr captured (not a terminal), a line every 5 ms: 2 points x 2 passes, then one extra pass over both (a
    point is known once it has 3 passes), its 2 visits of at least 2 rounds of 5 ms (min_round_s) each."""
    monkeypatch.setattr(progress, "PROGRESS_EVERY_S", 0.005)
    monkeypatch.setattr(PointResult, "known", property(lambda result: len(result.passes) >= 3))
    grid = ["run", "--layers", "conv", "--n", "8,16", "--d", "4", "--device", "cpu", "--rounds", "6"]
    grid += ["--target-time", "0.01", "--passes", "2", "--out", str(tmp_path / "run")]
    assert main([*grid, *(["--no-progress"] if quiet else [])]) == 0
    err = capsys.readouterr().err
    found = re.findall(r"^(points|more): (\d+)/(\d+) visits, (\S+) elapsed, about (\S+) left, pass (\d+)/", err, re.M)
    if quiet:
        assert found == [] and " visits, " not in err
        return
    for what, total, passes in (("points", 4, {"1", "2"}), ("more", 2, {"3"})):
        lines = [line for line in found if line[0] == what]
        done = [int(line[1]) for line in lines]
        assert lines and done == sorted(done) and done[-1] == total  # the last, on close: all done
        assert {int(line[2]) for line in lines} == {total} and {line[5] for line in lines} <= passes
        assert all(line[4] == "?" for line in lines if line[1] == "0") and lines[-1][4] == "00:00"


def test_the_rest_of_the_run_is_said_again_from_what_the_first_pass_took(tmp_path, capsys):
    """After the first pass the run says what its other passes will take: the first pass's visits less the probes
    (FLOP counting and memory), which only the first pass runs, once for every further pass."""
    out = tmp_path / "run"
    assert main([*GRID, "--out", str(out)]) == 0
    err = capsys.readouterr().err
    first = [r for r in read_timing_records(out) if r["attempt"] == 0 and r["pass"] == 0]
    assert len(first) == 6 and all(0 < r["probes_s"] < r["visit_s"] for r in first)
    later = [r for r in read_timing_records(out) if r["attempt"] == 0 and r["pass"] > 0]
    assert later and all(r["probes_s"] < 0.01 for r in later)  # no probes: the timer's own read only
    said = [line for line in err.splitlines() if line.startswith("the first pass took")]
    assert len(said) == 1 and "more for 2 more passes" in said[0] and "sampling points further" in said[0]


def test_a_finished_runs_counts_hold_when_no_point_was_ok():
    """Every point failed: meta.json's counts are 0, read from no timing column (a frame may lack them)."""
    from bench.result import point_counts

    counts = point_counts(pd.DataFrame({"status": ["error", "oom", "error"]}), planned_passes=4)
    assert counts["points_stored"] == 3 and counts["status_counts"] == {"error": 2, "oom": 1}
    assert counts["points_unreliable"] == counts["points_cpu_clock"] == counts["points_sampled_further"] == 0
