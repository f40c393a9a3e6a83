"""Which runs the report shows: this machine's by default, the reference only when asked (or when this
machine has none yet), the runs of one machine and device combined point by point, machines never pooled."""

import json

import pandas as pd
import pytest
from test_report import _write_run

from bench import storage
from bench.report import load
from bench.report.build import build_report

pytestmark = pytest.mark.slow  # each test builds whole reports

HERE = {"cpu_model": "Intel(R) Xeon(R) Processor", "cpu_cores": 2, "hostname": "laptop"}
THERE = {"cpu_model": "AMD EPYC 7763 64-Core Processor", "cpu_cores": 64, "hostname": "server"}


def _run(root, run_id, machine, started):
    run = _write_run(root, run_id, new_format=True)
    meta = json.loads((run / "meta.json").read_text())
    (run / "meta.json").write_text(json.dumps(meta | machine | {"started_utc": started}))
    return run


@pytest.fixture
def results(tmp_path, monkeypatch):
    root = tmp_path / "results"
    monkeypatch.setattr(storage, "RESULTS_ROOT", root)
    monkeypatch.setattr(load, "REFERENCE_DIR", root / "reference")
    monkeypatch.setattr(load.machine, "this_machine", lambda: ("intel-xeon-2c-laptop", "Intel Xeon, 2 cores (laptop)"))
    _run(root / "reference" / "amd-epyc-7763-64c-server", "ref1", THERE, "2026-01-01T00:00:00+00:00")
    return root


def numbers_of(out):
    return json.loads((out / "numbers.json").read_text())["numbers"]


def test_without_a_run_of_this_machine_the_reference_is_shown_and_said(results, tmp_path):
    out = tmp_path / "reports"
    build_report(None, out)
    md = (out / "report.md").read_text()
    assert "No run of this machine (Intel Xeon, 2 cores (laptop))" in md
    assert all(key.startswith("reference.amd-epyc-7763-64c-server.") for key in numbers_of(out))


def test_this_machine_first_and_alone_then_side_by_side_with_the_reference(results, tmp_path):
    _run(results, "old", HERE, "2026-02-01T00:00:00+00:00")
    _run(results, "new", HERE, "2026-03-01T00:00:00+00:00")
    _run(results, "elsewhere", THERE, "2026-03-02T00:00:00+00:00")  # copied from another machine
    out = tmp_path / "mine"
    build_report(None, out)
    md, numbers = (out / "report.md").read_text(), numbers_of(out)
    assert {v["run_id"] for v in numbers.values()} == {"new"}  # new measured every point of old again
    assert (
        "Intel Xeon, 2 cores (laptop) · cpu: runs old (10 points), new (10 points) combined point by point; "
        "10 of old's points measured again later, the newer kept (" in md
    )
    assert "1 stored run(s) of other machines in results/ are not shown" in md
    key = "intel-xeon-2c-laptop.cpu.attention.time.exponent_n"
    headlines = [line for line in md.splitlines() if line.startswith("**On ")]
    assert len(headlines) == 1 and headlines[0].startswith("**On Intel Xeon, 2 cores (laptop) · cpu**")

    both = tmp_path / "both"
    build_report(None, both, compare_reference=True)
    compared = numbers_of(both)
    assert compared[key] == numbers[key]  # a key means the same with the reference beside it
    assert "reference.amd-epyc-7763-64c-server.cpu.attention.time.exponent_n" in compared
    html = (both / "report.html").read_text()
    assert "here · cpu" in html and "ref. AMD EPYC 7763 · cpu" in html  # side by side, by name


def test_results_named_show_every_machine_apart(results, tmp_path):
    _run(results, "here", HERE, "2026-02-01T00:00:00+00:00")
    out = tmp_path / "all"
    build_report([results], out)
    runs = {v["run_id"] for v in numbers_of(out).values()}
    assert runs == {"here", "ref1"}


def test_two_machines_with_the_same_run_id_are_told_apart(results, tmp_path):
    _run(tmp_path / "a", "same", HERE, "2026-02-01T00:00:00+00:00")
    _run(tmp_path / "b", "same", THERE, "2026-02-01T00:00:00+00:00")
    out = tmp_path / "r"
    build_report([tmp_path / "a", tmp_path / "b", tmp_path / "a"], out)  # a folder named twice is read once
    runs = {v["run_id"] for v in numbers_of(out).values()}
    assert runs == {"same", "same@amd-epyc-7763-64c-server"}


def test_the_default_report_combines_this_machines_runs_point_by_point(results, tmp_path):
    old = _run(results, "old", HERE, "2026-02-01T00:00:00+00:00")
    meta = json.loads((old / "meta.json").read_text())
    del meta["compute_peak"]  # a run from before the compute peak: one peak of this source cited, new's
    (old / "meta.json").write_text(json.dumps(meta))
    new = _run(results, "new", HERE, "2026-03-01T00:00:00+00:00")
    points = pd.read_csv(new / "points.csv")
    points[points["layer"] == "lstm"].to_csv(new / "points.csv", index=False)  # new measured lstm again only
    out = tmp_path / "mine"
    build_report(None, out)
    fits = pd.read_csv(out / "fits.csv").set_index(["layer", "metric"])
    assert fits.loc[("lstm", "time"), "run_id"] == "new" and fits.loc[("attention", "time"), "run_id"] == "old"
    assert fits.loc[("attention", "time"), "sweep_points"] == 5  # old's attention points stay in the report
    numbers = numbers_of(out)
    assert numbers["intel-xeon-2c-laptop.cpu.lstm.time.exponent_n"]["run_id"] == "new"
    assert numbers["intel-xeon-2c-laptop.cpu.attention.time.exponent_n"]["run_id"] == "old"
    assert (
        "Intel Xeon, 2 cores (laptop) · cpu: runs old (10 points), new (5 points) combined point by point; "
        "5 of old's points measured again later, the newer kept (" in (out / "report.md").read_text()
    )


def test_a_folder_with_a_runs_tables_but_no_meta_json_is_named(tmp_path, capsys):
    from bench.cli import main  # noqa: PLC0415

    run = tmp_path / "results" / "r1"
    run.mkdir(parents=True)
    (run / "points.csv").write_text("layer,n,d,status,point_id\nconv,8,4,ok,abc\n")
    assert main(["report", "--results", str(tmp_path / "results"), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: --results: {run} has points.csv but no meta.json (a run folder needs both)"
    )
