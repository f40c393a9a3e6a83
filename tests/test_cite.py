"""`report` writes this machine's report to reports/local/, apart from the shipped reports/reference/; `cite`
reads both (the local first), lists the keys of both with the report each is in, and for a fit with no exponent
says why, from that report's fits.csv."""

import itertools
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from small_report import write_run

from bench.cli import main
from bench.report import numbers

ROOT = Path(__file__).resolve().parent.parent
MACHINE_ID = "test-2c-box"  # small_report.MACHINE as bench.machine.machine_identity names it
ATTENTION = f"{MACHINE_ID}.cpu.attention.time.exponent_n"  # time ∝ n²: exponent 2
REFERENCE_NUMBERS = {
    "runs": {"ref1": {"run_id": "ref1", "finished_utc": "2025-11-21T00:00:00+00:00", "torch": "2.13.0"}},
    "numbers": {
        "reference.xeon-2c-vm.cpu.conv.time.exponent_n": {"value": 1.01, "unit": "1", "run_id": "ref1", "machine": "x"},
        ATTENTION: {"value": 9.99, "unit": "1", "run_id": "ref1", "machine": "x"},  # also in the local report
    },
}


@pytest.fixture(scope="module")
def local_report(tmp_path_factory):
    """The small report of tests/small_report.py, written by `report` without --out to a moved default."""
    root = tmp_path_factory.mktemp("c")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(numbers, "LOCAL_REPORT_DIR", root / "reports" / "local")
        assert main(["report", "--results", str(write_run(root / "results"))]) == 0
    return root / "reports" / "local"


@pytest.fixture
def defaults(local_report, tmp_path, monkeypatch):
    """cite's default reports: the small local report, then a hand-written reference report."""
    reference = tmp_path / "reference"
    reference.mkdir()
    (reference / "numbers.json").write_text(json.dumps(REFERENCE_NUMBERS))
    monkeypatch.setattr(numbers, "LOCAL_REPORT_DIR", local_report)
    monkeypatch.setattr(numbers, "REFERENCE_REPORT_DIR", reference)
    return local_report, reference


def _run(capsys, argv) -> tuple[int, list[str], list[str]]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err.splitlines()


def test_report_and_cite_default_to_reports_local_and_then_the_shipped_report():
    assert numbers.LOCAL_REPORT_DIR == ROOT / "reports" / "local"
    assert numbers.default_reports() == [ROOT / "reports" / "local", ROOT / "reports" / "reference"]


def make_recipe(target: str) -> list[str]:
    """The command lines of a Makefile target, as written (tab-indented under `target:`)."""
    lines = (ROOT / "Makefile").read_text().split(f"\n{target}:", 1)[1].splitlines()[1:]
    return [line.strip() for line in itertools.takewhile(lambda line: line.startswith("\t"), lines)]


@pytest.mark.parametrize("target", ["bench", "report", "compare"])
def test_the_make_targets_of_users_write_the_default_report_only(target):
    reports = [line for line in make_recipe(target) if "-m bench report" in line]
    assert reports and not any("--out" in line for line in reports), reports  # to reports/local/


def test_only_reference_report_writes_the_shipped_report():
    assert make_recipe("reference-report") == [
        "$(PY) -m bench report --results results/reference --out reports/reference"
    ]


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs git and the repo")
def test_git_ignores_the_local_report_and_tracks_the_shipped_one():
    def ignored(path: str) -> bool:
        return subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT).returncode == 0

    assert ignored("reports/local/report.html") and ignored("reports/local/figures/time_vs_n.png")
    assert not ignored("reports/reference/report.html") and not ignored("reports/reference/numbers.json")


def test_report_without_out_writes_the_local_default(local_report):
    for name in ("report.md", "report.html", "fits.csv", "numbers.json"):
        assert (local_report / name).exists(), name


def test_cite_reads_the_local_report_first_then_the_reference(capsys, defaults):
    code, (line,), _ = _run(capsys, ["cite", ATTENTION])
    assert code == 0 and line.startswith(f"{ATTENTION} = 2 (95 % interval")  # the local 2, not the reference 9.99
    code, (line,), _ = _run(capsys, ["cite", "reference.xeon-2c-vm.cpu.conv.time.exponent_n"])
    assert code == 0 and line.startswith("reference.xeon-2c-vm.cpu.conv.time.exponent_n = 1.01, measured on x")


def test_cite_of_a_key_in_neither_report_names_both_files(capsys, defaults):
    local, reference = defaults
    code, _, err = _run(capsys, ["cite", f"{MACHINE_ID}.cpu.conv.time.exponent_n"])
    assert code == 2 and len(err) == 1
    assert str(local / "numbers.json") in err[0] and str(reference / "numbers.json") in err[0]


def test_cite_of_a_key_with_a_one_letter_typo_proposes_the_key(capsys, defaults):
    typo = ATTENTION.replace("exponent", "exponant")  # issue 46: the first keys alphabetically were proposed
    code, _, err = _run(capsys, ["cite", typo])
    assert code == 2 and f"did you mean {ATTENTION}" in err[0]


def test_cite_without_either_report_names_both_and_the_command(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(numbers, "LOCAL_REPORT_DIR", tmp_path / "local")
    monkeypatch.setattr(numbers, "REFERENCE_REPORT_DIR", tmp_path / "reference")
    code, _, err = _run(capsys, ["cite", "--list"])
    assert code == 2 and len(err) == 1 and "python -m bench report" in err[0]
    assert str(tmp_path / "local" / "numbers.json") in err[0] and str(tmp_path / "reference" / "numbers.json") in err[0]


def test_cite_list_names_the_report_each_key_is_read_from(capsys, defaults):
    local, reference = defaults
    code, lines, _ = _run(capsys, ["cite", "--list", "time.exponent_n"])
    rows = {line.split()[0]: line.split()[1:] for line in lines}
    assert code == 0 and len(rows) == len(lines)  # a key in both reports is listed once
    assert rows[ATTENTION] == ["2", str(local)]  # read from the local report, as `cite` reads it
    assert rows["reference.xeon-2c-vm.cpu.conv.time.exponent_n"] == ["1.01", str(reference)]
    assert rows[f"{ATTENTION}.d32.heads4.b1"] == ["2", str(local)]


@pytest.mark.parametrize(
    "key", [f"{MACHINE_ID}.cpu.gru.time.exponent_n", f"{MACHINE_ID}.cpu.gru.flops.exponent_n.d32.b1"]
)
def test_cite_of_a_fit_without_exponent_gives_its_verdict_and_reason(capsys, defaults, key):
    local, _ = defaults
    code, out, err = _run(capsys, ["cite", key])
    assert code == 2 and out == [] and len(err) == 1
    metric = key.split(".")[3]
    assert f"the fit of gru {metric} in n on {MACHINE_ID}.cpu has no exponent to cite ({local / 'fits.csv'})" in err[0]
    assert err[0].endswith("d=32, batch 1: inconclusive (no exponent), too few points (2 < 3)")  # gru: n = 64, 128


def test_an_inconclusive_fit_with_an_exponent_is_cited_with_its_interval_and_verdict(capsys, defaults):
    """lstm's FLOPs, log2 of them over log2 n: 0, 2, 2 at 0, 1, 2: slope 1, residuals −1/3, 2/3, −1/3, standard
    error √((2/3) / 1 / 2) = 0.577, t(0.975, 1 dof) = 12.71: interval 1 ± 7.34, wider than any verdict allows."""
    code, (line,), _ = _run(capsys, ["cite", f"{MACHINE_ID}.cpu.lstm.flops.exponent_n"])
    assert code == 0 and " = 1 (95 % interval -6.34 to 8.34)" in line
    assert "verdict inconclusive" in line and "interval too wide (width 14.7 > 1)" in line


def test_a_listing_cut_short_by_its_reader_is_no_error():
    """`cite --list | head -1`: the reader closes the pipe after one line; the listing (the shipped report's keys,
    far more than a pipe holds) stops there, exit 0, nothing on stderr."""
    child = subprocess.Popen(
        [sys.executable, "-m", "bench", "cite", "--list", "--reports", "reports/reference"],
        cwd=Path(__file__).resolve().parent.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdout.readline().startswith(b"reference.")
    child.stdout.close()
    assert child.wait(timeout=60) == 0
    assert child.stderr.read() == b""


def _numbers_json(folder: Path, doc) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "numbers.json").write_text(json.dumps(doc))
    return folder


@pytest.mark.parametrize("doc", [[1, 2], {"numbers": [1]}, {"numbers": {}, "runs": "r1"}])
def test_a_numbers_json_of_the_wrong_shape_is_named(capsys, tmp_path, doc):
    reports = _numbers_json(tmp_path / "rep", doc)
    for argv in (["cite", "a.b", "--reports", str(reports)], ["cite", "--list", "--reports", str(reports)]):
        code, out, err = _run(capsys, argv)
        assert code == 1 and out == [] and len(err) == 1, (argv, err)
        assert str(reports / "numbers.json") in err[0] and "damaged" in err[0]


def test_damaged_entries_are_named_and_left_out_of_the_listing(capsys, tmp_path):
    good = {"value": 2.0, "unit": "1", "run_id": "r1"}
    reports = _numbers_json(
        tmp_path / "rep",
        {"numbers": {"x.good": good, "x.text": "2.0", "x.no_value": {"run_id": "r1"}, "x.no_run": {"value": 1}}},
    )
    code, out, err = _run(capsys, ["cite", "--list", "--reports", str(reports)])
    assert code == 0 and [line.split()[0] for line in out] == ["x.good"]
    assert err == [
        f"warning: {reports / 'numbers.json'}: 3 damaged entries left out (not an object with `value` and "
        "`run_id`): x.no_run, x.no_value, x.text"
    ]
    code, out, err = _run(capsys, ["cite", "x.text", "--reports", str(reports)])
    assert code == 1 and err == [
        f"error: {reports / 'numbers.json'}: damaged entry 'x.text': expected an object with `value` and `run_id`"
    ]
    code, out, err = _run(capsys, ["cite", "x.good", "--reports", str(reports)])
    assert code == 0 and out[0].startswith("x.good = 2, measured on an unknown machine in run r1")
