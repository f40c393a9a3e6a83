"""The report from stored runs: files of the interface, every cited number resolvable, damaged runs
named, --skip-bad reporting the others."""

import json
import shutil

import pandas as pd
import pytest

from bench.cli import main
from bench.machine import machine_identity
from bench.report import sections
from bench.report.numbers import cite_sentence
from bench.report.publish import OWN_FILES
from bench.sweeps import Reason

FAST = ["--rounds", "6", "--target-time", "0.01", "--passes", "3", "--no-progress"]


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("results")
    assert (
        main(
            [
                "run",
                "--layers",
                "conv,lstm,attention,attention_math",
                "--n",
                "32,64,128,256",
                "--d",
                "8,16",
                "--heads",
                "2",
                "--device",
                "cpu",
                "--out",
                str(root / "a"),
                *FAST,
            ]
        )
        == 0
    )
    assert main(["paths", "--layers", "conv,lstm,attention", "--n", "16,32", "--k", "3", "--out", str(root / "a")]) == 0
    assert (
        main(
            [
                "run",
                "--layers",
                "conv",
                "--n",
                "32,64,128",
                "--d",
                "8",
                "--device",
                "cpu",
                "--out",
                str(root / "b"),
                *FAST,
            ]
        )
        == 0
    )
    meta = json.loads((root / "b" / "meta.json").read_text())  # b: as if measured on another machine
    (root / "b" / "meta.json").write_text(json.dumps(meta | {"hostname": "other-host", "cpu_cores": 64}))
    return root


@pytest.mark.slow
def test_report_writes_the_interface_files(two_runs, tmp_path, capsys):
    out = tmp_path / "reports"
    assert main(["report", "--results", str(two_runs), "--out", str(out)]) == 0
    for name in ("report.md", "report.html", "fits.csv", "numbers.json", "table.tex", "roofline.csv"):
        assert (out / name).exists(), name
    # every file it writes is its own, so the next report replaces it (a user's files are kept: bench/report/publish)
    written = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    figures = {name for name in written if name.startswith("figures/")}
    assert written - figures <= set(OWN_FILES) | sections.written()
    assert all(name in (out / "report.md").read_text() for name in figures)
    roofline = pd.read_csv(out / "roofline.csv")
    assert (roofline["mode"] == "inference").all() and roofline["fraction"].notna().any()
    fits = pd.read_csv(out / "fits.csv")
    assert list(fits.columns[:9]) == [
        "layer",
        "device",
        "metric",
        "variable",
        "exponent",
        "ci_low",
        "ci_high",
        "predicted",
        "verdict",
    ]
    html = (out / "report.html").read_text()
    assert html.count("<img") >= 6
    for img in (out / "figures").iterdir():
        assert f"figures/{img.name}" in html
    numbers = json.loads((out / "numbers.json").read_text())["numbers"]
    assert numbers and all({"value", "unit", "run_id", "machine"} <= set(v) for v in numbers.values())
    # two machines, each under its own keys and its own name, side by side
    for run in ("a", "b"):
        mid, words = machine_identity(json.loads((two_runs / run / "meta.json").read_text()))
        assert any(key.startswith(f"{mid}.cpu.conv.") for key in numbers), mid
        assert words in html
    assert html.count("<details") >= 5 and "id='first-screen'" in html and "id='verdicts'" in html
    key = next(k for k in numbers if k.endswith("flops.exponent_n"))
    sentence = cite_sentence(key, out)
    assert key in sentence and numbers[key]["run_id"] in sentence


@pytest.mark.slow
def test_every_cited_number_appears_in_the_report(two_runs, tmp_path):
    out = tmp_path / "reports"
    assert main(["report", "--results", str(two_runs / "a"), "--out", str(out)]) == 0
    md = (out / "report.md").read_text()
    numbers = json.loads((out / "numbers.json").read_text())["numbers"]
    missing = [k for k, v in numbers.items() if v["text"] not in md]
    assert not missing, missing[:5]


@pytest.mark.slow
def test_damaged_run_is_named_and_skip_bad_reports_the_others(two_runs, tmp_path, capsys):
    results = tmp_path / "results"
    shutil.copytree(two_runs, results)
    (results / "b" / "points.csv").write_text('layer,n\n"conv,1\n1,2,3,4\n')
    code = main(["report", "--results", str(results), "--out", str(tmp_path / "r1")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1 and str(results / "b") in err[0] and "--skip-bad" in err[0]
    assert main(["report", "--results", str(results), "--out", str(tmp_path / "r2"), "--skip-bad"]) == 0
    assert "skipping damaged run" in capsys.readouterr().err
    assert (tmp_path / "r2" / "report.md").exists()
    (results / "a" / "meta.json").write_text("{not json")
    assert main(["report", "--results", str(results / "a"), "--out", str(tmp_path / "r3")]) == 1
    assert "meta.json: damaged" in capsys.readouterr().err


# ------------------------------------------------------------------- the report from hand-made run folders
def _write_run(root, run_id, new_format: bool):
    """A run folder written by hand: lstm (t ∝ n, consistent) and attention (t ∝ n², one point stalled)
    over n = 64..1024 at d = 32; the new format adds each point's interval, reliability and flag."""
    rows = []
    for layer, exponent in (("lstm", 1), ("attention", 2)):
        for n in (64, 128, 256, 512, 1024):
            t = 1e-3 * (n / 64) ** exponent
            flops = 1e9 * t  # a constant rate: every point is on the plateau
            row = {
                "layer": layer,
                "device": "cpu",
                "dtype": "float32",
                "batch": 1,
                "n": n,
                "d": 32,
                "k": None,
                "heads": 4 if layer == "attention" else None,
                "window": None,
                "time_median_s": t,
                "time_iqr_s": 0.01 * t,
                "rounds": 10,
                "time_noisy": False,
                "flops_analytic": flops,
                "flops_counted": flops,
                "flops_uncounted_ops": None,
                "flops_elementwise": 0.01 * flops,
                "mem_peak_bytes": 1000 * n,
                "mem_rss_peak_bytes": 2e8,
                "mem_rss_base_bytes": 1e8,
                "status": "ok",
                "error": None,
                "point_id": f"{layer}{n}",
            }
            if new_format:
                stalled = layer == "attention" and n == 256
                row.update(
                    time_ci_low_s=0.99 * t,
                    time_ci_high_s=1.01 * t,
                    passes=3,
                    time_reliable=not stalled,
                    time_flag="stalled: median 3.1x the minimum" if stalled else "",
                )
                if stalled:
                    row["time_median_s"] = 3.1 * t
            rows.append(row)
    run = root / run_id
    run.mkdir(parents=True)
    pd.DataFrame(rows).to_csv(run / "points.csv", index=False)
    meta = {
        "run_id": run_id,
        "kind": "run",
        "status": "finished",
        "started_utc": "2026-01-01T00:00:00+00:00",
        "compute_peak": {"cpu": {"flops_per_s": 2e9, "size": 512, "dtype": "float32"}},
        "timing_policy": {"min_rounds": 6, "target_s": 0.25},
    }
    (run / "meta.json").write_text(json.dumps(meta))
    return run


@pytest.mark.parametrize("new_format", [True, False])
def test_report_of_hand_made_runs_shows_verdicts_reasons_and_flags(tmp_path, new_format):
    from bench.report.build import build_report

    run = _write_run(tmp_path / "results", "r1", new_format)
    out = tmp_path / "reports"
    build_report([run], out)
    md = (out / "report.md").read_text()
    fits = pd.read_csv(out / "fits.csv")
    assert list(fits.columns[:10]) == [
        "layer",
        "device",
        "metric",
        "variable",
        "exponent",
        "ci_low",
        "ci_high",
        "predicted",
        "verdict",
        "reason",
    ]
    assert set(fits["verdict"]) <= {"consistent", "inconsistent", "inconclusive"} and fits["reason"].notna().all()
    assert fits.columns[10] == "reason_code" and set(fits["reason_code"]) <= {code.value for code in Reason}
    assert (fits["reason_code"] == "decided").eq(fits["verdict"] != "inconclusive").all()
    time = fits[fits.metric == "time"].set_index("layer")
    assert time.loc["lstm", "verdict"] == "consistent"
    assert "✓" in md and "± 0.2 for time" in md and "IQR above 10 % of the median" in md
    assert "0.3 s" not in md and "about 0.25 s of them" in md  # the timing policy from meta.json, not a typed claim
    if new_format:
        assert time.loc["attention", "unreliable_left_out"] == 1
        assert time.loc["attention", "reason"].endswith("1 unreliable point left out, 4 left")
        assert time.loc["attention", "measurement_uncertainty"] == "per-point 95 % intervals"
        assert "stalled: median 3.1x the minimum" in md  # the flag, listed with the point
        numbers = json.loads((out / "numbers.json").read_text())["numbers"]
        (unreliable,) = [v for k, v in numbers.items() if k.endswith(".cpu.points.unreliable")]
        assert unreliable["value"] == 1
    else:
        assert set(time["measurement_uncertainty"]) == {"none stored"}
        assert "older format" in md and "r1" in md
    numbers = json.loads((out / "numbers.json").read_text())["numbers"]
    missing = [k for k, v in numbers.items() if v["text"] not in md]
    assert not missing, missing[:5]


def test_two_batches_at_the_same_sizes_are_two_sweeps_with_their_own_keys(tmp_path):
    """The full preset sweeps n at batch 1 and 8 at the same d: two fits per layer, never one key cited twice."""
    from bench.report.build import build_report

    run = _write_run(tmp_path / "results", "r1", new_format=True)
    points = pd.read_csv(run / "points.csv")
    again = points.assign(batch=8, point_id=points["point_id"] + "b8")
    again[["time_median_s", "time_ci_low_s", "time_ci_high_s"]] *= 6  # batch 8: a different time, same exponents
    pd.concat([points, again]).to_csv(run / "points.csv", index=False)
    out = tmp_path / "reports"
    build_report([run], out)
    fits = pd.read_csv(out / "fits.csv")
    sweeps = fits[(fits["layer"] == "lstm") & (fits["metric"] == "time") & (fits["variable"] == "n")]
    assert sorted(sweeps["batch"]) == [1, 8]
    numbers = json.loads((out / "numbers.json").read_text())["numbers"]
    keys = [k for k in numbers if ".lstm.time.exponent_n.d32" in k]
    assert any(k.endswith(".b1") for k in keys) and any(k.endswith(".b8") for k in keys), keys


# ------------------------------------------------------- verdict cells judged against what they show
@pytest.mark.parametrize(
    ("layer", "hops", "follows"),
    [
        ("rnn", (63, 255), True),  # n − 1 steps inside one layer: slope 1.009, Table 1's O(n)
        ("rnn", (1, 1), False),  # one layer crossed is no O(n) path
        ("conv", (63, 255), True),  # O(n/k) at a fixed k grows as n
        ("conv_dilated", (5, 6), True),  # slope 0.132, log₂'s 0.208 from 64 to 256: within 0.1, nearer than 0
        ("attention_local", (8, 32), True),  # O(n/r): slope 1
        ("attention", (1, 1), True),
        ("attention", (63, 255), False),
    ],
)
def test_the_path_cell_judges_hops_against_the_table1_path_cell(layer, hops, follows):
    from bench.report.headline import hops_follow_table1

    rows = pd.DataFrame({"n": [64, 256], "path_hops": hops})
    assert hops_follow_table1(rows, layer) is follows


def _paths_context(tmp_path):
    from bench.report.context import ReportContext

    rows = [
        ("rnn", 64, 1, 63, "reference cell steps"),
        ("rnn", 256, 1, 255, "reference cell steps"),
        ("conv", 64, 63, 63, "layers crossed"),
        ("conv", 256, 255, 255, "layers crossed"),
    ]
    paths = pd.DataFrame(rows, columns=["layer", "n", "layers_to_cross", "path_hops", "path_hops_of"]).assign(
        k=3, layers_to_cross_formula=lambda t: t["layers_to_cross"], run_id="p1", machine="box"
    )
    points = pd.DataFrame({"source": ["box.cpu"], "layer": ["rnn"], "run_id": ["r1"]})
    return ReportContext(points=points, runs={}, out_dir=tmp_path, paths=paths, machines={"box.cpu": "box"})


def test_a_recurrence_path_shows_its_steps_inside_one_layer_beside_table1s_cell(tmp_path):
    from bench.report.headline import path_cell

    ctx = _paths_context(tmp_path)
    assert path_cell(ctx, "box.cpu", "rnn") == "O(n) · ✓ 63 → 255 steps inside 1 layer"
    assert path_cell(ctx, "box.cpu", "conv") == "O(n/k) · ✓ 63 → 255 layers"
    assert path_cell(ctx, "box.cpu", "attention") == "O(1) · –"  # no paths study of it
    assert ctx.numbers["box.paths.rnn.path_hops.n256"].value == 255


def test_an_exponent_cell_shows_the_prediction_it_was_judged_against():
    from bench.report.headline import verdict_cell

    texts = {("s", "attention_local", "memory", "n"): ("0.458 [0.423, 0.494]", "consistent", 0.4761)}
    assert verdict_cell(texts, "s", "attention_local", "memory") == "✓\u00a00.458\u00a0[0.423,\u00a00.494] (0.48)"
    texts = {("s", "lstm", "time", "n"): ("–", "inconclusive", float("nan"))}
    assert verdict_cell(texts, "s", "lstm", "time") == "?\u00a0–"
    assert verdict_cell(texts, "s", "conv", "time") == "–"
