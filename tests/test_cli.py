"""The command line: bad input is exit 2 with one line; runs store what the interface says; a run killed
part-way is finished by --resume with every point exactly once."""

import argparse
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
from forked import ForkedBench
from stand_ins import bench_argv, setup

import models
from bench import storage
from bench.cli import DESCRIPTION, build_parser, main
from bench.commands import first_sentence
from bench.folder import read_timing_records
from bench.report import load as report_load
from bench.spec import PointSpec

ROOT = Path(__file__).resolve().parent.parent
FAST = ["--rounds", "6", "--target-time", "0.01", "--passes", "3", "--no-progress"]


def _bad(capsys, argv):
    code = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    return code, err


@pytest.mark.parametrize(
    "argv,named",
    [
        (["run", "--layers", "conv", "--n", "0", "--d", "8"], "0"),
        (["run", "--layers", "conv", "--n", "64,abc", "--d", "8"], "'abc'"),
        (["run", "--layers", "conv", "--n", "-5", "--d", "8"], "-5"),
        (["run", "--layers", "conv", "--n", "64", "--d", "8", "--k", "4"], "k=4"),
        (["run", "--layers", "attention", "--n", "64", "--d", "10", "--heads", "3"], "heads=3"),
        (["run", "--layers", "transformer", "--n", "64", "--d", "8"], "'transformer'"),
        (["run", "--preset", "huge"], "'huge'"),
        (["run", "--layers", "conv", "--n", "64", "--d", "8", "--device", "tpu"], "'tpu'"),
        (["run", "--layers", "conv", "--n", "64", "--d", "8", "--dtype", "float64"], "'float64'"),
        (["run", "--layers", "attention_local", "--n", "64", "--d", "8", "--window", "128"], "window=128"),
        (["run", "--layers", "attention_local", "--n", "64", "--d", "8"], "--window"),
        (["run", "--resume", "/nonexistent/run"], "/nonexistent/run"),
        (["report", "--results", "/nonexistent/results"], "/nonexistent/results"),
        (["paths", "--layers", "conv", "--n", "64", "--k", "4"], "4"),
        (["run", "--layers", "conv", "--d", "8"], "--n"),
        (["run", "--preset", "quick", "--n", "64"], "not both"),
        (["run", "--preset", "quick", "--batch", "8"], "--batch"),
        (["run", "--resume", "/tmp/x", "--layers", "conv"], "--layers"),
        (["run", "--resume", "/tmp/x", "--passes", "3"], "--passes"),
        (["run", "--layers", "conv", "--n", "64", "--d", "8", "--passes", "0"], "0"),
    ],
)
def test_bad_input_exits_2_with_one_line_naming_it(capsys, argv, named):
    code, err = _bad(capsys, argv)
    assert code == 2
    assert len(err) == 1 and named in err[0] and "Traceback" not in err[0]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_cuda_without_gpu_is_bad_input(capsys):
    code, err = _bad(capsys, ["run", "--layers", "conv", "--n", "64", "--d", "8", "--device", "cuda"])
    assert code == 2 and "no CUDA GPU" in err[0]


def test_unknown_cite_key_is_bad_input(capsys, tmp_path):
    (tmp_path / "numbers.json").write_text(json.dumps({"numbers": {"cpu.x": {"value": 1, "unit": "1", "run_id": "r"}}}))
    code, err = _bad(capsys, ["cite", "cpu.nope", "--reports", str(tmp_path)])
    assert code == 2 and "cpu.nope" in err[0] and "cpu.x" in err[0]


def test_out_folder_with_content_is_never_overwritten(capsys, tmp_path):
    (tmp_path / "points.csv").write_text("x\n")
    code, err = _bad(capsys, ["run", "--layers", "conv", "--n", "8", "--d", "4", "--out", str(tmp_path)])
    assert code == 2 and "never overwritten" in err[0]


@pytest.mark.slow
def test_bad_input_from_a_real_process_has_no_traceback():
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "run", "--layers", "conv", "--n", "x", "--d", "8"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr and "'x'" in proc.stderr


@pytest.mark.slow
def test_run_writes_the_interface_files(tmp_path, capsys):
    out = tmp_path / "run"
    assert (
        main(
            [
                "run",
                "--layers",
                "conv,lstm,attention",
                "--n",
                "16,33",
                "--d",
                "12",
                "--heads",
                "3",
                "--batch",
                "2",
                "--device",
                "cpu",
                "--threads",  # the CPU clock's peak is of one thread's calls (with several, `process`: none)
                "1",
                "--out",
                str(out),
                *FAST,
            ]
        )
        == 0
    )
    assert str(out) in capsys.readouterr().out
    meta = json.loads((out / "meta.json").read_text())
    for key in (
        "run_id",
        "started_utc",
        "finished_utc",
        "status",
        "command",
        "preset",
        "git_commit",
        "git_dirty",
        "python",
        "torch",
        "cpu_model",
        "cpu_cores",
        "threads",
        "devices",
    ):
        assert key in meta, key
    assert meta["status"] == "finished" and meta["compute_peak"]["cpu"]["flops_per_s"] > 0
    peak = meta["compute_peak"]["cpu"]  # measured at the start and at the end of the run, the better one kept
    assert set(peak["measured"]) == {"start", "end"}
    assert peak["flops_per_s"] == max(m["flops_per_s"] for m in peak["measured"].values())
    assert peak["flops_per_s_cpu"] == max(m["flops_per_s_cpu"] for m in peak["measured"].values())
    # the best of the kernels on each clock, over each kernel's fastest round
    kernels = peak["kernels"]
    assert {"matmul 512x512", "conv batch=4 n=2048 d=128 k=3"} <= set(kernels)
    assert peak["flops_per_s"] == pytest.approx(max(k["flops"] / k["wall_min_s"] for k in kernels.values()))
    assert peak["matmul_flops_per_s"] <= peak["flops_per_s"]
    bandwidth = meta["memory_bandwidth"]["cpu"]  # the triad, likewise
    assert set(bandwidth["measured"]) == {"start", "end"} and bandwidth["bytes_per_s"] > 0
    df = pd.read_csv(out / "points.csv")
    for column in (
        "layer",
        "device",
        "dtype",
        "batch",
        "n",
        "d",
        "k",
        "heads",
        "window",
        "time_median_s",
        "time_iqr_s",
        "rounds",
        "flops_analytic",
        "flops_counted",
        "mem_peak_bytes",
        "mem_rss_peak_bytes",
        "status",
        "error",
    ):
        assert column in df.columns, column
    assert len(df) == 6 and (df["status"] == "ok").all() and (df["rounds"] >= 6).all() and (df["passes"] >= 3).all()
    assert meta["points_sampled_further"] == (df["passes"] > 3).sum()  # a noisy point is given more passes
    assert (df["time_ci_low_s"] <= df["time_median_s"]).all() and (df["time_median_s"] <= df["time_ci_high_s"]).all()
    for key in ("threads_reason", "load_before", "load_passes", "timing_policy", "timing_method"):
        assert key in meta, key
    assert len(meta["load_passes"]) >= 3 and meta["timing_policy"]["passes"] == 3
    # every pass of every point is kept raw in timings.jsonl
    records = read_timing_records(out)
    assert sorted({(r["point_id"], r["pass"]) for r in records if r["attempt"] == 0}) == sorted(
        (pid, p) for pid in df["point_id"] for p in range(3)
    )
    assert (df["flops_counted"] == df["flops_analytic"]).all()
    assert (df["mem_peak_bytes"] > 0).all() and (df["mem_rss_peak_bytes"] > 0).all()
    bench_json = json.loads((out / "pytest-benchmark.json").read_text())
    assert {"machine_info", "commit_info", "benchmarks"} <= set(bench_json)
    assert len(bench_json["benchmarks"]) == 6


@pytest.mark.slow
def test_oom_is_recorded_and_the_sweep_goes_on(tmp_path, monkeypatch):
    """attention_math at n = 131072 needs a 64 GiB score matrix: more than any CI machine has. The plan would refuse
    it (a point whose estimate is too low is what reaches the run): the refusal is taken out to reach the run."""
    from bench import preflight

    monkeypatch.setattr(preflight, "too_large", lambda plan, total: [])
    out = tmp_path / "run"
    assert (
        main(
            [
                "run",
                "--layers",
                "attention_math,conv",
                "--n",
                "128,131072,262144",
                "--d",
                "16",
                "--heads",
                "1",
                "--device",
                "cpu",
                "--out",
                str(out),
                "--yes",
                *FAST,
            ]
        )
        == 0
    )
    df = pd.read_csv(out / "points.csv").set_index(["layer", "n"])
    assert df.loc[("attention_math", 131072), "status"] == "oom"
    assert "allocate" in df.loc[("attention_math", 131072), "error"]
    # a larger point of the same layer is not tried, and says why
    assert df.loc[("attention_math", 262144), "status"] == "skipped"
    assert "n=131072" in df.loc[("attention_math", 262144), "error"]
    assert "Traceback" in (out / "errors.log").read_text()  # the whole traceback, beside the row's first line
    assert (df.drop([("attention_math", 131072), ("attention_math", 262144)])["status"] == "ok").all()


@pytest.mark.slow
def test_killed_run_resumes_with_every_point_exactly_once(tmp_path, capsys):
    out = tmp_path / "run"
    argv = [
        "run",
        "--layers",
        "conv,rnn,lstm,attention,attention_math",
        "--n",
        "8,16,24",
        "--d",
        "4,8",
        "--heads",
        "2",
        "--device",
        "cpu",
        "--out",
        str(out),
        *FAST,
    ]
    proc = ForkedBench(*argv, setup=setup())  # a process of its own, killed: its start-up is not the question
    timings = out / "timings.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # kill it in its second pass: some passes of each point stored
        if timings.exists() and timings.read_text().count("\n") >= 40:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    passes_before = timings.read_text()
    passes_before = passes_before[: passes_before.rfind("\n") + 1]  # a line cut off by the kill is measured again
    assert 40 <= passes_before.count("\n") < 90
    assert json.loads((out / "meta.json").read_text())["status"] == "running"  # killed: no chance to say so
    assert main(["run", "--resume", str(out), "--no-progress"]) == 0, capsys.readouterr().err
    df = pd.read_csv(out / "points.csv")
    plan = [PointSpec(**s) for s in json.loads((out / "plan.json").read_text())["specs"]]
    assert len(plan) == 30
    assert sorted(df["point_id"]) == sorted(s.point_id for s in plan)  # each point exactly once
    assert json.loads((out / "meta.json").read_text())["status"] == "finished"
    # nothing lost, nothing measured twice: the passes stored before the kill are kept as they were, and
    # each (point, attempt, pass) is stored once
    assert timings.read_text().startswith(passes_before)
    records = read_timing_records(out)
    keys = [(r["point_id"], r["attempt"], r["pass"]) for r in records]
    assert len(keys) == len(set(keys)) and len([k for k in keys if k[1] == 0]) == 30 * 3


@pytest.mark.slow
def test_ctrl_c_ends_the_run_as_interrupted(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen(
        bench_argv(  # `python -m bench run ...`, its ceilings stand-ins
            "run",
            "--layers",
            "conv,lstm",
            "--n",
            "8,16,32,64,128,256,512",
            "--d",
            "4,8,16,32",
            "--device",
            "cpu",
            "--out",
            str(out),
            *FAST,
        ),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (
        (out / "timings.jsonl").exists() and (out / "timings.jsonl").read_text().count("\n") >= 3
    ):
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "--resume" in err and "Traceback" not in err  # 128 + SIGINT
    assert json.loads((out / "meta.json").read_text())["status"] == "interrupted"
    assert (out / "timings.jsonl").read_text().endswith("\n")


@pytest.mark.cuda
@pytest.mark.slow
def test_a_gpu_run_counts_the_same_flops_as_the_cpu(tmp_path):
    """On a GPU: timing synchronized, memory from the CUDA allocator, cuDNN and fused attention counted,
    and each point's count equal to the CPU's for the same point."""
    grid = [
        "--layers",
        "conv,lstm,gru,rnn,attention,attention_math,attention_local",
        "--n",
        "64,129",
        "--d",
        "30",
        "--heads",
        "3",
        "--window",
        "16",
        "--batch",
        "2",
        *FAST,
    ]
    assert main(["run", *grid, "--device", "cuda", "--dtype", "bfloat16", "--out", str(tmp_path / "gpu16")]) == 0
    assert main(["run", *grid, "--device", "cuda", "--out", str(tmp_path / "gpu")]) == 0
    assert main(["run", *grid, "--device", "cpu", "--out", str(tmp_path / "cpu")]) == 0
    frames = {name: pd.read_csv(tmp_path / name / "points.csv") for name in ("gpu", "gpu16", "cpu")}
    for name, df in frames.items():
        assert (df["status"] == "ok").all(), df[df["status"] != "ok"][["layer", "error"]]
        assert (df["flops_counted"] == df["flops_analytic"]).all(), name
        assert (df["mem_peak_bytes"] > 0).all()
    key = ["layer", "n"]
    merged = frames["gpu"].merge(frames["cpu"], on=key, suffixes=("_gpu", "_cpu"))
    assert (merged["flops_counted_gpu"] == merged["flops_counted_cpu"]).all()
    meta = json.loads((tmp_path / "gpu16" / "meta.json").read_text())
    assert "cuda-bfloat16" in meta["compute_peak"] and any(d["device"].startswith("cuda") for d in meta["devices"])


# ------------------------------------------------------------------------------------------------ --help
def _subparsers(parser):
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def test_every_option_of_every_command_has_help():
    parser = build_parser()
    commands = _subparsers(parser).choices
    assert set(commands) == {"run", "paths", "claims", "report", "cite", "list"}
    for name, command in [("python -m bench", parser), *commands.items()]:
        for action in command._actions:
            what = f"{name} {'/'.join(action.option_strings) or action.dest}"
            assert action.help and action.help.strip() and action.help != argparse.SUPPRESS, what
    # the subcommands' one-line summaries in the top-level --help, and their descriptions
    for action in _subparsers(parser)._choices_actions:
        assert action.help.strip(), action.dest
    for name, command in commands.items():
        assert command.description and command.description.strip().endswith("."), name


def test_help_of_every_command_is_whole(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert DESCRIPTION.endswith(".") and DESCRIPTION in text  # a whole sentence, not cut at a line end
    for name in ("run", "paths", "claims", "report", "cite", "list"):
        with pytest.raises(SystemExit) as done:
            main([name, "--help"])
        assert done.value.code == 0 and "usage: python -m bench " + name in capsys.readouterr().out


# --------------------------------------------------------------------------------------------- cite --list
NUMBERS = {
    "runs": {"r1": {"run_id": "r1", "finished_utc": "2026-01-02T03:04:05+00:00", "torch": "2.13.0"}},
    "numbers": {
        "cpu.attention.time.exponent_n": {"value": 1.96, "unit": "1", "run_id": "r1", "machine": "m"},
        "cpu.conv.time.exponent_n": {"value": 0.951, "unit": "1", "run_id": "r1", "machine": "m"},
        "cpu.attention.crossover_n": {"value": 812.5, "unit": "positions", "run_id": "r1", "machine": "m"},
        "all.attention.flops.elementwise_share_median": {"value": 1.49, "unit": "%", "run_id": "r1", "machine": "m"},
    },
}


@pytest.fixture
def reports(tmp_path):
    (tmp_path / "numbers.json").write_text(json.dumps(NUMBERS))
    return tmp_path


def _out(capsys, argv) -> list[str]:
    assert main(argv) == 0
    return capsys.readouterr().out.splitlines()


def test_cite_list_lists_every_key_with_value_and_unit(capsys, reports):
    lines = _out(capsys, ["cite", "--list", "--reports", str(reports)])
    assert [line.split()[0] for line in lines] == sorted(NUMBERS["numbers"])
    by_key = {line.split()[0]: line.split()[1:] for line in lines}
    assert by_key["cpu.attention.crossover_n"] == ["812", "positions"]  # 3 significant digits, then the unit
    assert by_key["all.attention.flops.elementwise_share_median"] == ["1.49", "%"]
    assert by_key["cpu.conv.time.exponent_n"] == ["0.951"]  # a pure number has no unit


def test_cite_list_filters_by_substring_or_glob(capsys, reports):
    substring = _out(capsys, ["cite", "--list", "attention", "--reports", str(reports)])
    assert [line.split()[0] for line in substring] == [
        "all.attention.flops.elementwise_share_median",
        "cpu.attention.crossover_n",
        "cpu.attention.time.exponent_n",
    ]
    glob = _out(capsys, ["cite", "--list", "cpu.*.exponent_n", "--reports", str(reports)])
    assert [line.split()[0] for line in glob] == ["cpu.attention.time.exponent_n", "cpu.conv.time.exponent_n"]
    # a glob matches the whole key: "*.time" is no key's end here, while "time" is in two keys
    code, err = _bad(capsys, ["cite", "--list", "*.time", "--reports", str(reports)])
    assert code == 2 and "*.time" in err[0] and "glob" in err[0]


def test_cite_key_still_works_beside_list(capsys, reports):
    (line,) = _out(capsys, ["cite", "cpu.attention.time.exponent_n", "--reports", str(reports)])
    assert line.startswith("cpu.attention.time.exponent_n = 1.96, measured on m in run r1 (2026-01-02")


@pytest.mark.parametrize(
    "argv,named",
    [
        (["cite"], "--list"),
        (["cite", "cpu.conv.time.exponent_n", "--list"], "not both"),
    ],
)
def test_cite_without_key_or_list_is_bad_input(capsys, reports, argv, named):
    code, err = _bad(capsys, [*argv, "--reports", str(reports)])
    assert code == 2 and len(err) == 1 and named in err[0]


@pytest.mark.parametrize("argv", [["cite", "--list"], ["cite", "--list", "cpu"], ["cite", "cpu.x"]])
def test_cite_without_numbers_json_names_the_path_and_the_command(capsys, tmp_path, argv):
    code, err = _bad(capsys, [*argv, "--reports", str(tmp_path / "empty")])
    assert code == 2 and len(err) == 1
    assert str(tmp_path / "empty" / "numbers.json") in err[0] and "python -m bench report" in err[0]


# --------------------------------------------------------------------------------------------------- list
def test_first_sentence_joins_lines_until_a_period_ends_it():
    doc = """Each query i attends to a window of r
    positions (keys outside 0..n-1 are masked; see cfg.window). Computed banded.

    More."""
    assert first_sentence(doc) == (
        "Each query i attends to a window of r positions (keys outside 0..n-1 are masked; see cfg.window)."
    )
    assert (
        first_sentence("Output i sees inputs i-(k-1)/2 .. i+(k-1)/2.") == "Output i sees inputs i-(k-1)/2 .. i+(k-1)/2."
    )
    assert first_sentence("No period here\n\n    Second paragraph.") == "No period here"
    assert first_sentence(None) == ""


def _meta(run_dir: Path, **fields) -> None:
    run_dir.mkdir(parents=True)
    meta = {
        "run_id": run_dir.name,
        "started_utc": "2026-03-04T05:06:07+00:00",
        "cpu_model": "AMD EPYC 7763 64-Core Processor",
        "cpu_cores": 16,
        "hostname": "box",
        **fields,
    }
    (run_dir / "meta.json").write_text(json.dumps(meta))


def test_list_shows_whole_layer_sentences_and_each_runs_machine_date_kind_status(capsys, tmp_path, monkeypatch):
    results = tmp_path / "results"
    monkeypatch.setattr(storage, "RESULTS_ROOT", results)
    monkeypatch.setattr(report_load, "REFERENCE_DIR", results / "reference")
    _meta(results / "20260304T050607Z-cpu", kind="run", status="interrupted", preset="quick")
    (results / "20260304T050607Z-cpu" / "points.csv").write_text("layer\n")
    _meta(
        results / "reference" / "intel-xeon-2c-vm" / "20251121T163411Z-paths",
        kind="paths",
        status="finished",
        started_utc="2025-11-21T16:34:11+00:00",
        cpu_model="Intel(R) Xeon(R) Processor",
        cpu_cores=2,
        hostname="vm",
    )
    (results / "damaged").mkdir()
    (results / "damaged" / "meta.json").write_text("{not json")
    out = "\n".join(_out(capsys, ["list"]))
    for name, cls in models.LAYERS.items():
        sentence = first_sentence(cls.__doc__)
        assert f"\n      {sentence}\n" in out, name  # whole, on its own line
    spanning = 0  # layers whose first sentence goes on past the docstring's first line: shown whole
    for cls in models.LAYERS.values():
        first_line, sentence = cls.__doc__.strip().splitlines()[0].strip(), first_sentence(cls.__doc__)
        assert " ".join(cls.__doc__.split()).startswith(sentence) and sentence.endswith(".")
        spanning += len(sentence) > len(first_line)
    assert spanning >= 1
    stored, reference = out.split("stored runs:\n")[1].split("reference runs:\n")
    (own,) = [line for line in stored.splitlines() if "20260304T050607Z-cpu" in line]
    for field in ("AMD EPYC 7763, 16 cores (box)", "2026-03-04", " run ", "interrupted", "quick"):
        assert field in own, field
    assert any(line.split()[:2] == ["damaged", "damaged:"] for line in stored.splitlines())
    assert reference.splitlines()[0] == "  intel-xeon-2c-vm/"
    (ref,) = [line for line in reference.splitlines() if "20251121T163411Z-paths" in line]
    for field in ("Intel Xeon, 2 cores (vm)", "2025-11-21", "paths", "finished"):
        assert field in ref, field
    assert "20251121T163411Z-paths" not in stored


def test_list_without_runs_says_none_and_has_no_reference_heading(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(storage, "RESULTS_ROOT", tmp_path / "results")
    monkeypatch.setattr(report_load, "REFERENCE_DIR", tmp_path / "results" / "reference")
    out = _out(capsys, ["list"])
    assert out[out.index("stored runs:") + 1] == "  (none)" and "reference runs:" not in out
    assert any(line.startswith("  auto ") and "planned per machine" in line for line in out)  # no count: per machine


def test_cite_list_of_a_report_without_numbers_prints_nothing(capsys, tmp_path):
    (tmp_path / "numbers.json").write_text(json.dumps({"runs": {}, "numbers": {}}))
    assert _out(capsys, ["cite", "--list", "--reports", str(tmp_path)]) == []


@pytest.mark.slow
def test_a_run_of_conv_dilated_at_two_dilations_has_two_sweeps_in_fits(tmp_path):
    grid = ["--layers", "conv_dilated", "--n", "32,64,128,256", "--d", "4", "--k", "3", "--dilation", "1,4"]
    assert main(["run", *grid, "--device", "cpu", "--out", str(tmp_path / "run"), *FAST]) == 0
    assert sorted(pd.read_csv(tmp_path / "run" / "points.csv")["dilation"].unique()) == [1, 4]
    assert main(["report", "--results", str(tmp_path / "run"), "--out", str(tmp_path / "report")]) == 0
    table = pd.read_csv(tmp_path / "report" / "fits.csv")
    flops = table[(table["layer"] == "conv_dilated") & (table["metric"] == "flops") & (table["variable"] == "n")]
    assert sorted(flops["fixed"]) == ["d=4, k=3, dilation=1", "d=4, k=3, dilation=4"]
    assert list(flops["sweep_points"]) == [4, 4]
