"""The report from stored runs: files of the interface, every cited number resolvable, damaged runs
named, --skip-bad reporting the others."""
import json
import shutil

import pandas as pd
import pytest

from bench.cli import main
from bench.report.context import format_value
from bench.report.numbers import cite_sentence

FAST = ["--rounds", "3", "--target-time", "0.01", "--no-progress"]


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("results")
    assert main(["run", "--layers", "conv,lstm,attention,attention_math", "--n", "32,64,128,256", "--d", "8,16",
                 "--heads", "2", "--device", "cpu", "--out", str(root / "a"), *FAST]) == 0
    assert main(["paths", "--layers", "conv,lstm,attention", "--n", "16,32", "--k", "3", "--out", str(root / "a")]) == 0
    assert main(["run", "--layers", "conv", "--n", "32,64,128", "--d", "8", "--device", "cpu",
                 "--out", str(root / "b"), *FAST]) == 0
    return root


def test_report_writes_the_interface_files(two_runs, tmp_path, capsys):
    out = tmp_path / "reports"
    assert main(["report", "--results", str(two_runs), "--out", str(out)]) == 0
    for name in ("report.md", "report.html", "fits.csv", "numbers.json", "table.tex"):
        assert (out / name).exists(), name
    fits = pd.read_csv(out / "fits.csv")
    assert list(fits.columns[:9]) == ["layer", "device", "metric", "variable", "exponent", "ci_low", "ci_high",
                                      "predicted", "verdict"]
    html = (out / "report.html").read_text()
    assert html.count("<img") >= 6
    for img in (out / "figures").iterdir():
        assert f"figures/{img.name}" in html
    numbers = json.loads((out / "numbers.json").read_text())["numbers"]
    assert numbers and all({"value", "unit", "run_id", "machine"} <= set(v) for v in numbers.values())
    # both runs measured the CPU: the newer keeps `cpu`, the older is named by its run id
    assert any(key.startswith("cpu@") for key in numbers) and any(key.startswith("cpu.") for key in numbers)
    key = next(k for k in numbers if k.endswith("flops.exponent_n"))
    sentence = cite_sentence(key, out)
    assert key in sentence and numbers[key]["run_id"] in sentence


def test_every_cited_number_appears_in_the_report(two_runs, tmp_path):
    out = tmp_path / "reports"
    assert main(["report", "--results", str(two_runs / "a"), "--out", str(out)]) == 0
    md = (out / "report.md").read_text()
    numbers = json.loads((out / "numbers.json").read_text())["numbers"]
    missing = [k for k, v in numbers.items() if format_value(v["value"], v["unit"]) not in md]
    assert not missing, missing[:5]


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
