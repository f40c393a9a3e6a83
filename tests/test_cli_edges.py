"""Edges of the command line: values that pass a type check but would make every point an error or the run
hang are bad input (exit 2, one line naming the option and what is allowed); --resume refuses the options it
would ignore; a kernel wider than the sequence is warned about; a GPU preset without a GPU is refused with the
preset to use; before a new run the plan's duration and memory are estimated and a long or large plan is
asked about, or refused without a terminal."""

import io
import json
import shlex

import pandas as pd
import psutil
import pytest

from bench import machine, preflight
from bench.cli import MAX_SEED, build_parser, main
from bench.commands import MAX_PATHS_N, RESUME_READS, check_preset_device
from bench.errors import BadInput
from bench.estimate import PlanEstimate, PointEstimate
from bench.folder import RunFolder
from bench.load import Load
from bench.policy import MAX_PASSES, MAX_ROUNDS, MAX_TARGET_TIME_S, TimingPolicy
from bench.preflight import confirm_plan, wide_kernel_warnings
from bench.presets import get_preset
from bench.run import Run
from bench.spec import PointSpec

GRID = ["run", "--layers", "conv", "--n", "64", "--d", "8", "--device", "cpu"]


def _main(capsys, argv):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.err.strip().splitlines()


# ------------------------------------------------------------------------------------------ bounds
@pytest.mark.parametrize(
    "argv,named,allowed",
    [
        (GRID + ["--target-time", "inf"], "--target-time", "up to 60 s"),
        (GRID + ["--target-time", "nan"], "--target-time", "up to 60 s"),
        (GRID + ["--target-time", "0"], "--target-time", "more than 0"),
        (GRID + ["--target-time", "60.5"], "--target-time", "up to 60 s"),
        (GRID + ["--rounds", "1000000000"], "--rounds", f"1 to {MAX_ROUNDS}"),
        (GRID + ["--rounds", "0"], "--rounds", f"1 to {MAX_ROUNDS}"),
        (GRID + ["--passes", str(MAX_PASSES + 1)], "--passes", f"1 to {MAX_PASSES}"),
        (GRID + ["--seed", str(2**70)], "--seed", f"0 to {MAX_SEED}"),
        (GRID + ["--seed", "2**70"], "--seed", f"0 to {MAX_SEED}"),
        (GRID + ["--seed", "-1"], "--seed", f"0 to {MAX_SEED}"),
        (GRID + ["--seed", str(2**32)], "--seed", f"0 to {MAX_SEED}"),
        (["claims", "--seed", str(2**70)], "--seed", f"0 to {MAX_SEED}"),
        (GRID + ["--threads", str((psutil.cpu_count() or 1) + 1)], "--threads", "1 to"),
        (["paths", "--layers", "conv", "--n", "100000"], "--n 100000", f"2 to {MAX_PATHS_N}"),
        (["paths", "--layers", "conv", "--n", "1"], "--n 1", f"2 to {MAX_PATHS_N}"),
        (["paths", "--layers", "conv_dilated", "--n", "16384", "--k", "201"], "--k 201", "allowed up to 4194304"),
    ],
)
def test_values_outside_the_bounds_are_bad_input_naming_the_option_and_the_range(capsys, argv, named, allowed):
    code, err = _main(capsys, argv)
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("error: ") and named in err[0] and allowed in err[0] and "Traceback" not in err[0]


def test_the_bounds_themselves_are_allowed():
    args = build_parser().parse_args(
        GRID
        + ["--target-time", str(MAX_TARGET_TIME_S), "--rounds", str(MAX_ROUNDS), "--passes", str(MAX_PASSES)]
        + ["--seed", str(MAX_SEED), "--threads", "1"]
    )
    assert (args.target_time, args.rounds, args.passes, args.seed) == (60.0, 10_000, 100, 2**32 - 1)
    assert build_parser().parse_args(["claims", "--seed", "0"]).seed == 0


def test_the_seed_bound_is_one_every_seeded_generator_takes():
    """torch's generators and numpy's legacy seeding take MAX_SEED; the claims' seed·1000 + offset too."""
    import numpy as np  # noqa: PLC0415
    import torch  # noqa: PLC0415

    torch.Generator().manual_seed(MAX_SEED * 1000 + 99)
    np.random.RandomState(MAX_SEED)
    with pytest.raises(ValueError):
        np.random.RandomState(MAX_SEED + 1)


# ------------------------------------------------------------------------------------------ --resume
# A valid value for every option of `run`; an option added to `run` without one here fails the test below.
SAMPLE_VALUES = {
    "preset": ["--preset", "quick"],
    "layers": ["--layers", "conv"],
    "n": ["--n", "64"],
    "dilation": ["--dilation", "2"],
    "k": ["--k", "3"],
    "window": ["--window", "8"],
    "d": ["--d", "8"],
    "heads": ["--heads", "2"],
    "batch": ["--batch", "2"],
    "device": ["--device", "cpu"],
    "dtype": ["--dtype", "float32"],
    "mode": ["--mode", "train"],
    "expect": ["--expect", "n*d"],
    "causal": ["--causal"],
    "threads": ["--threads", "1"],
    "rounds": ["--rounds", "3"],
    "target_time": ["--target-time", "0.1"],
    "passes": ["--passes", "2"],
    "clock": ["--clock", "wall"],
    "seed": ["--seed", "0"],
    "no_extend": ["--no-extend"],
    "dry_run": ["--dry-run"],
    "out": ["--out", "/tmp/elsewhere"],
    "yes": ["--yes"],
}


def _run_options() -> list[str]:
    parser = build_parser()
    run = next(a for a in parser._actions if a.dest == "command").choices["run"]
    return [a.dest for a in run._actions if a.dest not in ("help", *RESUME_READS)]


def test_every_option_resume_would_ignore_has_a_sample():
    assert set(_run_options()) == set(SAMPLE_VALUES)


@pytest.mark.parametrize("dest", sorted(SAMPLE_VALUES))
def test_resume_with_an_option_it_would_ignore_is_bad_input_naming_it(capsys, tmp_path, dest):
    """Even an option given at its default value (--seed 0, --device cpu): the plan decides, not the option."""
    code, err = _main(capsys, ["run", "--resume", str(tmp_path / "run"), *SAMPLE_VALUES[dest]])
    flag = SAMPLE_VALUES[dest][0]
    assert code == 2 and len(err) == 1
    assert err[0] == (
        f"error: --resume finishes the run as planned in {tmp_path / 'run' / 'plan.json'}; {flag} would be ignored"
    )


def test_resume_names_every_ignored_option_at_once(capsys, tmp_path):
    argv = ["run", "--resume", str(tmp_path), "--rounds", "3", "--out", "/x", "--dtype", "float32", "--threads", "1"]
    code, err = _main(capsys, argv)
    assert code == 2 and err[0].endswith("; --dtype, --threads, --rounds, --out would be ignored")


def test_resume_with_what_it_reads_goes_ahead(capsys, tmp_path, no_measuring, monkeypatch):
    """--no-progress and --debug beside --resume: the run is resumed (Run.resume stubbed: this tests the CLI)."""
    monkeypatch.setattr(
        Run, "resume", classmethod(lambda cls, run_dir, cluster=None: cls(RunFolder(run_dir), [], TimingPolicy()))
    )
    assert main(["run", "--resume", str(tmp_path / "r"), "--no-progress", "--debug"]) == 0
    assert no_measuring == [tmp_path / "r"]
    assert "plan:" not in capsys.readouterr().err  # a resumed run is not estimated again


# ------------------------------------------------------------------------------------ wide kernels
def test_a_kernel_wider_than_the_sequence_is_warned_about_once_per_k():
    lines = wide_kernel_warnings(
        [("conv", 64, 129), ("conv_separable", 16, 129), ("conv", 256, 129), ("attention", 8, None), ("conv", 8, 3)]
    )
    assert lines == [
        "k=129 is wider than the sequence at n=16,64 (conv, conv_separable): most of each output's taps read the "
        "zero padding, outside Table 1's setting of a kernel narrower than the sequence (k < n); measured anyway"
    ]
    assert wide_kernel_warnings([("conv", 64, 63), ("conv", 64, 65)])[0].startswith("k=65 ")
    assert wide_kernel_warnings([("conv", 64, 63), ("conv_dilated", 129, 129)]) == []


def test_run_warns_about_a_wide_kernel_and_measures(capsys, tmp_path, no_measuring):
    code = main(
        ["run", "--layers", "conv", "--n", "64", "--d", "8", "--k", "129", "--device", "cpu"]
        + ["--out", str(tmp_path / "run"), "--no-progress"]
    )
    err = capsys.readouterr().err
    assert code == 0 and no_measuring == [tmp_path / "run"]
    assert "warning: k=129 is wider than the sequence at n=64 (conv)" in err


def test_paths_warns_about_a_wide_kernel_and_measures(capsys, tmp_path):
    assert main(["paths", "--layers", "conv", "--n", "16", "--k", "33", "--out", str(tmp_path / "p")]) == 0
    assert "warning: k=33 is wider than the sequence at n=16 (conv)" in capsys.readouterr().err
    assert (tmp_path / "p" / "paths.csv").exists()


# --------------------------------------------------------------------------------------- no GPU here
@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(machine, "cuda_available", lambda: False)


@pytest.mark.parametrize("device", [[], ["--device", "auto"], ["--device", "cpu"], ["--device", "cuda"]])
def test_the_gpu_preset_without_a_gpu_is_refused_with_the_presets_for_a_cpu(capsys, tmp_path, no_gpu, device):
    code, err = _main(capsys, ["run", "--preset", "gpu", *device, "--out", str(tmp_path / "run")])
    assert code == 2 and len(err) == 1
    assert "--preset gpu" in err[0] and "no" in err[0] and "--preset quick" in err[0]
    assert not (tmp_path / "run").exists()


def test_the_gpu_preset_with_a_gpu_passes_the_check(monkeypatch):
    monkeypatch.setattr(machine, "cuda_available", lambda: True)
    check_preset_device(get_preset("gpu"))  # no BadInput
    check_preset_device(get_preset("quick"))


def test_device_cuda_without_a_gpu_is_refused(capsys, no_gpu):
    code, err = _main(capsys, [*GRID[:-2], "--device", "cuda"])
    assert code == 2 and len(err) == 1 and "--device cuda" in err[0] and "allowed here: cpu, auto" in err[0]


# ---------------------------------------------------------------------------------- the estimate
def _plan(time_s: float, memory: dict[str, int]) -> PlanEstimate:
    points = tuple(
        PointEstimate(PointSpec("attention_math", n=4096, d=64, heads=4, device=device), 1.0, 0.0, m)
        for device, m in memory.items()
    )
    return PlanEstimate(points, peaks_s=time_s)


GB = 10**9
LONG = 4 * preflight.LONG_RUN_S  # 2 h


def _confirm(plan, *, yes=False, interactive=False, answer=None, available=100 * GB, total=200 * GB):
    asked = []

    def ask(question):
        asked.append(question)
        if answer is None:
            pytest.fail(f"asked: {question}")
        return answer

    devices = {p.spec.device for p in plan.points}
    confirm_plan(
        plan,
        dict.fromkeys(devices, available),
        dict.fromkeys(devices, total),
        yes=yes,
        interactive=interactive,
        ask=ask,
    )
    return asked


def test_a_short_small_plan_goes_ahead_without_a_question():
    assert _confirm(_plan(60, {"cpu": GB})) == []


def test_a_long_plan_without_a_terminal_is_refused_unless_yes():
    with pytest.raises(BadInput, match=r"about 2\.0 h \(estimate\).*not a terminal.*--yes"):
        _confirm(_plan(LONG, {"cpu": GB}))
    assert _confirm(_plan(LONG, {"cpu": GB}), yes=True) == []


@pytest.mark.parametrize("answer", [True, False])
def test_a_long_plan_on_a_terminal_is_asked_about(answer):
    if answer:
        (question,) = _confirm(_plan(LONG, {"cpu": GB}), interactive=True, answer=True)
        assert "about 2.0 h" in question and question.endswith("Measure it? [y/N] ")
    else:
        with pytest.raises(BadInput, match="not confirmed"):
            _confirm(_plan(LONG, {"cpu": GB}), interactive=True, answer=False)


def test_a_cpu_point_above_the_available_memory_is_asked_about():
    with pytest.raises(BadInput, match=r"attention_math n=4096 .* needs about 150 GB, more than the 100 GB available"):
        _confirm(_plan(60, {"cpu": 150 * GB}))
    assert _confirm(_plan(60, {"cpu": 150 * GB}), interactive=True, answer=True)


def test_a_cpu_point_beyond_the_machines_memory_is_refused_on_a_terminal_and_with_yes():
    """--yes means "do not ask", not "do not check": the kernel's OOM killer would end the run with no word."""
    for how in (dict(interactive=True, answer=True), dict(yes=True)):
        with pytest.raises(
            BadInput, match=r"attention_math n=4096 d=64 .* needs about 300 GB, more than the 200 GB of"
        ):
            _confirm(_plan(60, {"cpu": 300 * GB}), **how)


def test_a_gpu_point_beyond_the_gpus_memory_is_left_to_the_run():
    """On a GPU running out of memory is recorded (`oom`): the gpu preset relies on it."""
    assert _confirm(_plan(60, {"cuda": 300 * GB})) == []


# ------------------------------------------------------------------------------ the estimate in `run`
def test_run_prints_the_plan_before_measuring(capsys, tmp_path, no_measuring, monkeypatch):
    printed = []
    stub = Run.execute

    def execute(run, progress=True):
        printed.append(capsys.readouterr().err)
        return stub(run, progress)

    monkeypatch.setattr(Run, "execute", execute)
    quiet = Load(others_busy_cores=0.0, loadavg_1m=0.0, logical_cores=2, wall_s=1.0)
    monkeypatch.setattr(
        "bench.commands.sample_load", lambda since=None: quiet
    )  # the line of a machine alone (busy: test_estimate)
    assert main([*GRID, "--n", "64,128", "--out", str(tmp_path / "run"), "--no-progress"]) == 0
    (err,) = printed
    (line,) = [line for line in err.splitlines() if line.startswith("plan: ")]
    assert line.startswith("plan: 2 points, about ") and "on this machine (estimate, from the command's start: " in line
    assert "of it before this line; " in line and "of it sampling points until their time is known (at most " in line
    assert "), peak memory about " in line
    assert line.endswith("on cpu (conv n=128 d=8 batch=1 k=3)")


def test_run_refuses_a_point_beyond_the_machines_memory_and_creates_nothing(capsys, tmp_path, no_measuring):
    """attention_math at n = 2**20 holds 2·n² float32 scores: 8.8 TB, beyond any machine this runs on."""
    out = tmp_path / "run"
    argv = ["run", "--layers", "attention_math", "--n", str(2**20), "--d", "8", "--device", "cpu", "--out", str(out)]
    code, err = _main(capsys, argv)
    assert code == 2 and len(err) == 1, err  # the refusal alone: no warnings or plan line before it
    assert err[0].startswith("error: run: attention_math n=1048576 d=8 batch=1 heads=1 on cpu needs about 8.8 TB")
    assert "of memory cpu has" in err[0] and "give smaller sizes" in err[0]
    assert not out.exists() and no_measuring == []


@pytest.mark.parametrize(
    "terminal,answer,yes,measured",
    [
        (False, "", False, False),
        (False, "", True, True),
        (True, "y\n", False, True),
        (True, "n\n", False, False),
        (True, "", False, False),  # end of input: no
    ],
)
def test_run_above_the_long_run_threshold(capsys, tmp_path, no_measuring, monkeypatch, terminal, answer, yes, measured):
    """The threshold lowered to 0 s, so a tiny grid is a "long" plan; stdin a terminal or not, as given."""
    monkeypatch.setattr(preflight, "LONG_RUN_S", 0)
    monkeypatch.setattr(preflight, "stdin_is_terminal", lambda: terminal)
    monkeypatch.setattr("sys.stdin", io.StringIO(answer))
    out = tmp_path / "run"
    code, err = _main(capsys, [*GRID, "--out", str(out), "--no-progress", *(["--yes"] if yes else [])])
    assert (code == 0) == measured and (no_measuring == [out]) == measured and out.exists() == measured
    if terminal:  # the plan line, then the question
        question = next(i for i, line in enumerate(err) if "Measure it? [y/N] " in line)
        assert any(line.startswith("plan: 1 points") for line in err[:question])
    if not measured:
        error = err[-1].split("[y/N] ")[-1]  # after the question, which the answer's echo would end on a terminal
        assert code == 2 and error.startswith("error: run: ")
        assert ("not a terminal" in error) == (not terminal) and "--yes" in error
        assert terminal or len(err) == 1


def test_paths_refuses_a_preset_with_a_grid_and_measures_a_size_given_twice_once(capsys, tmp_path):
    """`paths --preset quick --n 64` ignored --n; `--layers conv,conv --n 8,8 --k 3,3` wrote 8 rows (issue 46: 15)."""
    code, err = _main(capsys, ["paths", "--preset", "quick", "--n", "64"])
    assert code == 2 and err == ["error: --preset quick and --n: give a preset or a grid, not both"]
    out = tmp_path / "p"
    assert main(["paths", "--layers", "conv,conv", "--n", "8,8", "--k", "3,3", "--out", str(out)]) == 0
    assert len(pd.read_csv(out / "paths.csv")) == 1


@pytest.mark.parametrize("kind", ["claims", "paths"])
def test_a_side_tables_out_is_checked_before_measuring(capsys, tmp_path, monkeypatch, kind):
    """`claims --out D` found D unusable only after its measuring, and named a --resume it has not (issue 46: 14)."""
    import bench.claims
    import bench.paths

    monkeypatch.setattr(bench.claims, "measure_claims", lambda **kw: pytest.fail("measured before checking --out"))
    monkeypatch.setattr(bench.paths, "paths_table", lambda *a, **kw: pytest.fail("measured before checking --out"))
    a_file, busy = tmp_path / "file", tmp_path / "busy"
    a_file.write_text("x")
    busy.mkdir()
    (busy / "notes.txt").write_text("x")
    grid = ["--layers", "conv", "--n", "16"] if kind == "paths" else []
    for out, said in [(a_file, "exists and is not a folder"), (busy, "exists and is not empty nor a run folder")]:
        code, err = _main(capsys, [kind, *grid, "--out", str(out)])
        assert code == 2 and said in err[0] and "--resume" not in err[0]


def test_a_report_is_not_written_into_a_run_folder(capsys, tmp_path):
    """`report --out <a run folder>` wrote its files among the run's (issue 46, also seen)."""
    run = tmp_path / "run"
    grid = [
        "--layers",
        "conv",
        "--n",
        "8,16,32",
        "--d",
        "4",
        "--rounds",
        "2",
        "--passes",
        "1",
        "--target-time",
        "0.002",
    ]
    assert main(["run", *grid, "--no-progress", "--out", str(run)]) == 0
    capsys.readouterr()
    code, err = _main(capsys, ["report", "--results", str(run), "--out", str(run)])
    assert code == 2 and err == [
        f"error: --out {run}: a run folder; a report goes to a folder of its own, e.g. {run}-report"
    ]
    assert not (run / "report.md").exists()


def test_yes_does_not_skip_the_memory_check(tmp_path, capsys):
    out = tmp_path / "big"
    assert main(["run", "--layers", "conv", "--n", str(4 * 10**11), "--d", "16", "--yes", "--out", str(out)]) == 2
    assert "more than the" in capsys.readouterr().err and not out.exists()


def test_lines_that_used_to_mislead(tmp_path, capsys, monkeypatch):
    """Issue 56: 10: an empty SEQBENCH_EXTEND_BUDGET is unset; auto in a mode it does not plan says so; a command
    stored with a path of spaces pastes back."""
    from bench import commands

    monkeypatch.setenv("SEQBENCH_EXTEND_BUDGET", "")
    assert commands._extend_budget(0.5) == 0.5
    monkeypatch.setenv("SEQBENCH_EXTEND_BUDGET", "0")
    assert main(["run", "--preset", "auto", "--mode", "recompute", "--out", str(tmp_path / "a")]) == 2
    err = capsys.readouterr().err
    assert "the auto preset plans" in err and "()" not in err
    out = tmp_path / "a folder with spaces"
    grid = ["--layers", "conv", "--n", "32,64", "--d", "8", "--rounds", "3", "--passes", "1", "--no-progress"]
    assert main(["run", *grid, "--target-time", "0.005", "--out", str(out)]) == 0
    stored = json.loads((out / "meta.json").read_text())["command"]
    assert shlex.split(stored)[-1] == str(out)
