"""A grid that cannot give a FLOPs or memory fit is warned about before measuring (bench.preflight.plan_warnings),
with sizes that would serve; `run` prints the warnings for a new run and measures anyway."""

import re

import pytest

import models
from bench import preflight
from bench.cli import main
from bench.preflight import plan_warnings
from bench.presets import get_preset
from bench.run import Run
from bench.spec import expand_grid
from bench.sweeps import MIN_FIT_POINTS

ATTENTION = models.ROLES.attention  # a layer whose Table 1 row restricts the fit range to n >= 8·d


def _example(line: str) -> tuple[str, list[int]]:
    """The swept option and sizes of a warning's "e.g. --n 512,1024,2048"."""
    match = re.search(r"e\.g\. --(\w+) ([\d,]+)", line)
    assert match, line
    return match[1], [int(v) for v in match[2].split(",")]


def _grid(layers, **sizes):
    return expand_grid(layers=layers, **{k: v for k, v in sizes.items()})


def test_the_ratio_rule_is_attentions():
    assert models.LAYERS[ATTENTION].table1.fit_n_over_d == 8


def test_readme_custom_grid_warns_about_attention_only():
    """The README's "A custom grid" example: n = 64..256 at d = 32 keeps one attention point (n >= 256)."""
    specs = _grid(["conv", "rnn", "gru", "lstm", ATTENTION], n=[64, 128, 256], d=[32], k=[3])
    (line,) = plan_warnings(specs)
    assert line.startswith(f"{ATTENTION} at d=32, heads=1, batch=1: the n-sweep n=64,128,256 keeps 1 of 3 points")
    assert "n >= 256 (8·d): give at least 3 such n, e.g. --n 256,512,1024" in line


def test_attention_below_8d_is_told_the_sizes_that_serve():
    (line,) = plan_warnings(_grid([ATTENTION], n=[64, 128, 256], d=[64]))
    assert f"{ATTENTION} at d=64" in line and "keeps 0 of 3 points" in line and "O(n²·d)" in line
    assert line.endswith("n >= 512 (8·d): give at least 3 such n, e.g. --n 512,1024,2048")


@pytest.mark.parametrize(
    "layers,sizes",
    [
        ([ATTENTION], dict(n=[64, 128, 256], d=[64])),
        ([ATTENTION], dict(n=[256, 512, 1024], d=[64])),  # two points count already: one more
        ([ATTENTION], dict(n=[128], d=[32, 64, 128], heads=[4])),  # a d-sweep: smaller d, d <= n/8
        (["conv", "lstm", ATTENTION], dict(n=[16, 33], d=[12], heads=[3], batch=[2])),  # two n only
        (["conv", ATTENTION], dict(n=[8], d=[4])),  # one point: no sweep at all
        (["attention_local"], dict(n=[64, 128], d=[32], heads=[4], window=[64])),
    ],
)
def test_the_sizes_suggested_serve(layers, sizes):
    """Each warning's example, put in place of the swept size, gives a grid without a warning for it."""
    lines = plan_warnings(_grid(layers, **sizes))
    assert lines and len(lines) == len({line.split(":")[0] for line in lines})
    for line in lines:
        layer = line.split(" at ")[0]
        variable, values = _example(line)
        assert len(values) >= MIN_FIT_POINTS
        fixed = {k: v for k, v in sizes.items() if k != variable}
        assert plan_warnings(_grid([layer], **{variable: values}, **fixed)) == [], line


def test_a_d_sweep_below_8d_names_the_bound_and_a_longer_sequence():
    (line,) = plan_warnings(_grid([ATTENTION], n=[128], d=[32, 64, 128], heads=[4]))
    assert "the d-sweep d=32,64,128 keeps 0 of 3 points" in line
    assert "d <= 16 (n/8): give at least 3 such d, e.g. --d 4,8,16; or n >= 1024" in line


def test_no_example_where_the_layer_would_refuse_it():
    """heads=3: halving d below 6 gives widths 3 heads do not divide, so only the bounds are given."""
    (line,) = plan_warnings(_grid([ATTENTION], n=[48], d=[12, 24, 48], heads=[3]))
    assert "d <= 6 (n/8)" in line and "e.g." not in line and "n >= 384" in line


def test_grids_that_fit_give_no_warning():
    # three n per layer above 8·d; two widths, each with an n-sweep that fits (a d-sweep of two is no sweep)
    assert plan_warnings(_grid(["conv", "lstm", ATTENTION], n=[512, 1024, 2048], d=[32, 64], k=[3])) == []
    # a k-sweep of three at one n fits the convolutions
    assert plan_warnings(_grid(["conv", "conv_dilated"], n=[64], d=[8], k=[3, 5, 7])) == []
    assert plan_warnings([]) == []


def test_one_line_for_every_device():
    specs = _grid([ATTENTION], n=[64, 128, 256], d=[64], devices=["cpu", "cuda"], dtypes=["float32", "bfloat16"])
    assert plan_warnings(specs) == plan_warnings(_grid([ATTENTION], n=[64, 128, 256], d=[64]))
    assert len(plan_warnings(specs)) == 1


def test_quick_preset_gives_no_warning_but_its_crossover_sweep_alone_would():
    """The quick preset's FLOP n-sweeps all fit: attention's at d = 32 (n >= 8·d from 256 on), every other
    layer's at d = 128, and its d- and k-sweeps. Attention's n-sweep at d = 128, measured beside the others for
    the crossover, reaches 8·d = 1024 only at its last two n: alone it is warned about; beside the sweep that
    gives attention's exponent in n, it is not."""
    specs = get_preset("quick").specs(["cpu"])
    assert plan_warnings(specs) == []
    crossover = [s for s in specs if s.layer == ATTENTION and (s.d, s.heads, s.batch) == (128, 4, 4)]
    (line,) = plan_warnings(crossover)
    assert line.startswith(f"{ATTENTION} at d=128, heads=4, batch=4: the n-sweep n=128,256,512,1024,2048")
    assert "keeps 2 of 5 points" in line and "e.g. --n 1024,2048,4096" in line


# ---------------------------------------------------------------------------------------- in `bench run`
def test_run_prints_the_warnings_before_measuring_and_measures(capsys, tmp_path, no_measuring, monkeypatch):
    printed_before = []
    real = Run.execute

    def execute(run, progress=True):
        printed_before.append(capsys.readouterr().err)
        return real(run, progress)

    monkeypatch.setattr(Run, "execute", execute)
    argv = [
        "run",
        "--layers",
        ATTENTION,
        "--n",
        "64,128,256",
        "--d",
        "64",
        "--device",
        "cpu",
        "--out",
        str(tmp_path / "run"),
        "--no-progress",
    ]
    assert main(argv) == 0
    assert no_measuring == [tmp_path / "run"]  # measuring went ahead
    (err,) = printed_before
    # the plan's warnings (the load check may warn too, about a busy machine)
    warnings = [line for line in err.splitlines() if line.startswith("warning: ") and "fits" in line]
    assert len(warnings) == 1 and warnings[0].startswith(f"warning: {ATTENTION} at d=64")
    assert "n >= 512 (8·d)" in warnings[0] and "e.g. --n 512,1024,2048" in warnings[0]


def test_resume_warns_about_nothing(capsys, tmp_path, no_measuring, monkeypatch):
    specs = _grid([ATTENTION], n=[64, 128, 256], d=[64])
    assert plan_warnings(specs)
    run = Run.create(specs, get_preset("quick").timing, out=tmp_path / "run", command=["x"], preset=None)
    run.lock.release()  # created, never executed: let the resume below hold the folder
    capsys.readouterr()
    monkeypatch.setattr(preflight, "plan_warnings", lambda specs: pytest.fail("a resumed run is not warned about"))
    assert main(["run", "--resume", str(run.dir), "--no-progress"]) == 0
    assert no_measuring == [run.dir] and "fits" not in capsys.readouterr().err


def test_a_decode_sweeps_warning_names_the_decode_row_not_table_1():
    """The decode plan's warning cited "Table 1's O(n²·d) term" (issue 46, also seen)."""
    (line,) = plan_warnings(_grid([ATTENTION], n=[64, 128, 256], d=[64], modes=["decode"]))
    assert "the decode row's O(t·d) term" in line and "only t >= 8·d = 512 count" in line and "Table 1" not in line
