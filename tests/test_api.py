"""The Python API (bench/api.py): a notebook's call measures what the command line measures, with the same errors;
fits, Table 1 beside the measurement, a figure, the crossover, a report and a cited number."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
import pytest

import bench
from bench.cli import main

matplotlib.use("Agg")

QUICK = dict(rounds=3, target_time=0.005, passes=1, progress=False)
GRID = (["conv", "lstm", "attention"], [16, 32, 64, 128], 8)


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    return bench.measure(*GRID, heads=2, batch=2, device="cpu", out=tmp_path_factory.mktemp("api") / "run", **QUICK)


@pytest.mark.slow
def test_one_call_measures_what_the_command_line_measures(measured, tmp_path):
    argv = ["run", "--layers", "conv,lstm,attention", "--n", "16,32,64,128", "--d", "8", "--heads", "2"]
    argv += ["--batch", "2", "--device", "cpu", "--rounds", "3", "--target-time", "0.005", "--passes", "1"]
    assert main([*argv, "--yes", "--no-progress", "--out", str(tmp_path / "cli")]) == 0
    cli = pd.read_csv(tmp_path / "cli" / "points.csv")
    keys = ["layer", "n"]
    both = measured.merge(cli, on=keys, suffixes=("_api", "_cli"))
    assert len(both) == len(cli) == len(measured) == 12
    assert (both["flops_counted_api"] == both["flops_counted_cli"]).all()
    assert (both["point_id_api"] == both["point_id_cli"]).all()
    assert set(measured["source"]) == {"cpu"} and (Path(measured.attrs["run_dir"]) / "meta.json").exists()


@pytest.mark.slow
def test_fits_table1_figure_crossover_report_and_cite(measured, tmp_path):
    from bench.fits import FIT_COLUMNS

    assert list(bench.fit(measured).columns) == list(FIT_COLUMNS)
    table = bench.table1(measured).set_index("layer")
    assert table.loc["attention", "predicted"] == "O(n²·d)" and table.loc["lstm", "predicted"] == "O(n·d²)"
    assert table.loc["conv", "flops"].startswith("✓ 1.00 [1.00, 1.00]")  # exact counts: a zero-width interval
    figure = bench.plot_table1(measured)
    assert len(figure.axes) == 2
    crossover = bench.crossover(measured)
    assert set(crossover["other"]) == {"conv", "lstm"}
    # attention's 8·b·n·d² + 4·b·n²·d reaches the lstm's 16·b·n·d² at n = 2d (d = 8: 16), the conv's 6·b·n·d² at once
    assert crossover.set_index("other").loc["lstm", "n_star_flops"] == 16
    report = bench.write_report(measured.attrs["run_dir"], tmp_path / "report")
    numbers = json.loads((report / "numbers.json").read_text())["numbers"]
    key = next(k for k in numbers if k.endswith(".cpu.conv.flops.exponent_n"))
    assert key in bench.cite(key, reports=report)


def _cli_error(argv: list[str]) -> str:
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        assert main(argv) == 2
    return stderr.getvalue().strip().removeprefix("error: ")


@pytest.mark.parametrize(
    "call,argv",
    [
        (dict(layers="nope", n=8, d=8), ["run", "--layers", "nope", "--n", "8", "--d", "8"]),
        (dict(layers="conv", n=8, d=8, k=4), ["run", "--layers", "conv", "--n", "8", "--d", "8", "--k", "4"]),
        (
            dict(layers="conv", n=8, d=8, mode="fit"),
            ["run", "--layers", "conv", "--n", "8", "--d", "8", "--mode", "fit"],
        ),
        (dict(preset="nope"), ["run", "--preset", "nope"]),
        # a float, and a list where run takes one integer: the command line's own line (issue 46, 3 and 4)
        (dict(layers="conv", n=64.0, d=8), ["run", "--layers", "conv", "--n", "64.0", "--d", "8"]),
        (
            dict(layers="attention", n=8, d=8, heads=[1, 2]),
            ["run", "--layers", "attention", "--n", "8", "--d", "8", "--heads", "1,2"],
        ),
        (
            dict(layers="attention_local", n=[16], d=8, window=[8, 16]),
            ["run", "--layers", "attention_local", "--n", "16", "--d", "8", "--window", "8,16"],
        ),
    ],
)
def test_bad_input_is_the_command_lines_one_line_as_a_value_error(call, argv, tmp_path):
    expected = _cli_error([*argv, "--yes", "--no-progress", "--out", str(tmp_path / "cli")])
    with pytest.raises(ValueError) as caught:
        bench.measure(**call, progress=False, out=tmp_path / "api")
    assert str(caught.value) == expected and "\n" not in expected


def test_importing_bench_leaves_the_api_and_pandas_for_later():
    code = "import sys, bench; print('pandas' in sys.modules, 'bench.api' in sys.modules, callable(bench.measure))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False", "True"]
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        bench.nope  # noqa: B018


def test_every_list_option_takes_a_python_list_and_numpy_numbers_are_numbers(tmp_path):
    """`dilation=[1, 2]` as `--dilation 1,2` (issue 43, 46: 4); numpy integers as the integers they hold (46: 3)."""
    points = bench.measure(
        "conv_dilated",
        [np.int64(16), 32],
        np.int64(8),
        k=np.int64(3),
        dilation=[1, 2],
        rounds=np.int32(2),
        passes=1,
        target_time=0.002,
        progress=False,
        out=tmp_path / "run",
    )
    assert sorted(zip(points["n"], points["dilation"])) == [(16, 1), (16, 2), (32, 1), (32, 2)]
    assert set(points["k"]) == {3} and set(points["d"]) == {8}


def test_an_option_is_never_taken_for_another_by_its_prefix():
    """`paths --d 16` is refused as `--d`, not read as `--debug` (issue 46: 5); `run --lay` is not `--layers`."""
    assert _cli_error(["paths", "--layers", "lstm", "--n", "64", "--d", "16"]) == "unrecognized arguments: --d 16"
    assert _cli_error(["run", "--lay", "conv", "--n", "8", "--d", "8"]) == "unrecognized arguments: --lay conv"


def test_the_analyses_take_a_run_folders_path_as_its_points(measured):
    """bench.fit("runs/x"), table1, crossover: the folder's points.csv (issue 46: 7)."""
    folder = measured.attrs["run_dir"]
    assert folder is not None
    for call in (bench.fit, bench.table1, bench.crossover):
        assert call(folder).equals(call(measured)), call.__name__
        assert call(Path(folder)).equals(call(measured)), call.__name__


def test_an_interrupt_inside_measure_is_a_keyboard_interrupt_and_resume_finishes_it(tmp_path, monkeypatch):
    """Ctrl-C after measuring began (issue 46: 2) raises, with nothing returned; measure(resume=D) finishes the run
    without a word about --out or --yes (46: 6)."""
    import bench.run

    real = bench.run.Run._passes
    calls = []

    def interrupted(self, *args, **kwargs):
        calls.append(1)
        raise KeyboardInterrupt

    monkeypatch.setattr(bench.run.Run, "_passes", interrupted)
    run = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt, match="stored in"):
        bench.measure("conv", [16, 32], 8, rounds=2, passes=1, target_time=0.002, progress=False, out=run)
    assert calls  # interrupted inside the passes, before any point was stored
    assert not (run / "points.csv").exists() or pd.read_csv(run / "points.csv").empty
    monkeypatch.setattr(bench.run.Run, "_passes", real)
    points = bench.measure(resume=run, progress=False)
    assert sorted(points["n"]) == [16, 32] and (points["status"] == "ok").all()


def test_crossover_without_inference_points_says_so(tmp_path):
    """On decode points alone it was an empty frame without a word (issue 46: 8)."""
    decoded = bench.measure(
        ["attention", "lstm"], [16, 32], 8, mode="decode", rounds=2, passes=1, target_time=0.002, progress=False
    )
    with pytest.raises(ValueError, match=r"no ok inference points of attention .*\(modes here: decode\)"):
        bench.crossover(decoded)


def test_a_run_without_out_is_kept_under_a_run_id_and_named_where_it_is(capfd, tmp_path, monkeypatch):
    """measure() without `out` (issue 46: 9): the folder it names exists, called as `run` calls its runs."""
    import re
    import shutil
    import tempfile

    points = bench.measure("conv", [16, 32], 8, device="cpu", **QUICK)
    folder = Path(points.attrs["run_dir"])
    try:
        assert (folder / "meta.json").exists() and re.fullmatch(r"\d{8}T\d{6}Z-cpu", folder.name)
        assert f"-> {folder}" in capfd.readouterr().out  # the line's path is the folder kept
        assert json.loads((folder / "meta.json").read_text())["run_id"] == folder.name
    finally:
        shutil.rmtree(folder.parent)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where mkdtemp makes its folders
    with pytest.raises(ValueError, match="nope"):
        bench.measure("nope", [16, 32], 8, device="cpu", **QUICK)  # refused: no folder left behind
    assert list(tmp_path.iterdir()) == []


def test_the_api_refuses_a_plan_beyond_the_memory_as_the_command_line_does(tmp_path):
    """`measure` runs `run --yes`: "do not ask", not "do not check" (issue 56: 5)."""
    with pytest.raises(ValueError, match="more than the .* of memory cpu has"):
        bench.measure(["conv"], [10**18], 16, out=tmp_path / "huge", progress=False)
    assert not (tmp_path / "huge").exists()


def test_the_api_says_what_it_was_given_wrong_as_a_value_error(tmp_path):
    """Issue 56: 11: no KeyError, TypeError or AttributeError out of the API for input of the wrong kind."""
    for call in (
        lambda: bench.fit(pd.DataFrame()),
        lambda: bench.fit(None),
        lambda: bench.crossover(None),
        lambda: bench.cite(None),
        lambda: bench.cite(5),
        lambda: bench.read_points(tmp_path / "nowhere"),
    ):
        with pytest.raises(ValueError):
            call()
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "meta.json").write_text("[]")
    (damaged / "points.csv").write_text("layer,n\n")
    with pytest.raises(ValueError, match="damaged"):
        bench.read_points(damaged)


def test_planned_points_are_not_extended(tmp_path):
    points = bench.measure(["conv"], [32, 64], 8, out=tmp_path / "run", progress=False, no_extend=True, rounds=3)
    assert points["extended"].dtype == bool and not points["extended"].any()
    assert len(points[~points["extended"]]) == 2
    stored = pd.read_csv(tmp_path / "run" / "points.csv")
    assert set(stored["extended"]) == {False}
