"""The comparison report: its question, then the matrix (a row per layer, a column per machine · device · mode),
one figure and the columns' facts; table.tex the matrix in plain LaTeX; `cite` in three formats; combined items
named; the default-process time beside the pinned one. The shipped report is checked as it is committed."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from small_report import write_run

from bench.cli import main
from bench.report.load import combine
from bench.report.matrix import primary_fits

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "reports" / "reference"
WORDS_BEFORE_MATRIX = 150


def _first_table(md: str) -> tuple[str, list[str]]:
    """(the text before the first table, the first table's header cells)."""
    lines = md.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("|"))
    return "\n".join(lines[:first]), [c.strip() for c in lines[first].strip("|").split("|")]


def _matrix_rows(md: str) -> dict[str, str]:
    """The first table's rows by layer."""
    lines = md.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("|"))
    table = [line for line in lines[first + 2 :]][
        : next(i for i, x in enumerate(lines[first:]) if not x.startswith("|")) - 2
    ]
    return {line.split("|")[1].strip().split(" · ")[0]: line for line in table}


def _words(text: str) -> int:
    return len(re.findall(r"[\w'’.-]+", re.sub(r"[#*_`|]", " ", text)))


@pytest.fixture(scope="module")
def comparison(tmp_path_factory):
    root = tmp_path_factory.mktemp("comparison")
    results = root / "results"
    here = write_run(results, "r1")
    pd.DataFrame(
        [
            {"point_id": "attention1024", "layer": "attention", "n": 1024, "d": 32, "batch": 1, "heads": 4}
            | {"device": "cpu", "dtype": "float32", "mode": "inference", "time_median_s": 0.048, "time_min_s": 0.04}
            | {"calls": 20, "faults_per_call": 65536.0, "threads": 1}
        ]
    ).to_csv(here / "default_policy.csv", index=False)
    steps = {"attention": {n: (1e-4 * n / 64, 1e5 * n / 64) for n in (64, 128, 256, 512, 1024)}}  # a step ∝ t
    write_run(results, "r3", steps, mode="decode")
    other = write_run(results, "r2")
    meta = json.loads((other / "meta.json").read_text())
    (other / "meta.json").write_text(json.dumps(meta | {"hostname": "other", "cpu_cores": 8, "git_commit": "abc1234"}))
    out = root / "report"
    assert main(["report", "--results", str(results), "--out", str(out)]) == 0
    return out


def test_a_comparison_opens_with_its_question_then_the_matrix(comparison):
    md = (comparison / "report.md").read_text()
    before, header = _first_table(md)
    assert _words(before) <= WORDS_BEFORE_MATRIX and "Does each layer's time grow with n" in before
    assert header[0] == "layer · Table 1" and len(header) == 1 + 3  # two machines' cpu, one machine's cpu-decode
    assert [h.split(" · ")[-1] for h in header[1:]] == ["cpu", "cpu-decode", "cpu"]
    rows = _matrix_rows(md)
    assert set(rows) == {"attention", "lstm", "gru"} and rows["gru"].count("·") >= 2  # not measured in decode
    assert rows["attention"].count("✓\u00a02") == 2 and "(1)" in rows["attention"]  # the decode step judged against 1
    assert "The columns' runs" in md and "abc1234" in md  # the facts table, the second machine's commit
    assert "combined" not in md.split("**Contents**")[0]  # notes on combined runs: under Provenance
    html = (comparison / "report.html").read_text()
    assert html.index("id='verdicts'") < html.index("id='first-figure'") < html.index("id='facts'")
    assert "figures/matrix.png" in html


def test_table_tex_is_the_matrix_in_plain_latex(comparison):
    tex = (comparison / "table.tex").read_text()
    md_header = _first_table((comparison / "report.md").read_text())[1]
    assert tex.isascii(), "a minimal document (no package) must compile it"
    assert f"\\begin{{tabular}}{{{'l' * len(md_header)}}}" in tex and "\\caption{" in tex
    rows = [line for line in tex.splitlines() if line.endswith("\\\\")]
    assert len(rows) == 1 + 3 and all(re.sub(r"\\&", "", r).count("&") == len(md_header) - 1 for r in rows)
    assert tex.count("{") == tex.count("}") and "$\\surd$~2" in tex


def _cite(out: Path, capsys, *argv) -> str:
    assert main(["cite", *argv, "--reports", str(out)]) == 0
    return capsys.readouterr().out


def test_cite_says_one_number_in_three_formats(comparison, capsys):
    key = "test-2c-box.cpu.attention.time.exponent_n"
    text = _cite(comparison, capsys, key)
    markdown = _cite(comparison, capsys, key, "--format", "markdown")
    latex = _cite(comparison, capsys, key, "--format", "latex")
    assert text.startswith(f"{key} = 2") and "in run r1" in text
    label = re.search(r"\[\^([\w-]+)\]", markdown).group(1)
    assert (
        markdown.startswith("2 [")
        and f"\n[^{label}]: `{key}`: measured on" in markdown
        and ", cpu in run r1" in markdown
    )
    assert latex.startswith("2~[") and "\\footnote{Measured on" in latex and "exponent\\_n" in latex
    listed = _cite(comparison, capsys, "--list", "*.time.exponent_n", "--format", "markdown").splitlines()
    assert listed[0].startswith("- `") and any(line.startswith("[^1]: Measured on") for line in listed)
    assert _cite(comparison, capsys, "--list", "*.time.exponent_n", "--format", "latex").startswith("\\begin{itemize}")


def test_a_cited_number_and_the_table_compile_in_a_minimal_document(comparison, capsys, tmp_path):
    engine = shutil.which("pdflatex") or shutil.which("lualatex")
    if engine is None:
        pytest.skip("no TeX engine here (pdflatex, lualatex): table.tex's structure is checked above")
    shutil.copy(comparison / "table.tex", tmp_path / "table.tex")
    number = _cite(comparison, capsys, "test-2c-box.cpu.attention.time.exponent_n", "--format", "latex")
    document = (
        f"\\documentclass{{article}}\n\\begin{{document}}\nExponent {number}\n\\input{{table.tex}}\n\\end{{document}}\n"
    )
    (tmp_path / "doc.tex").write_text(document)
    done = subprocess.run(
        [engine, "-interaction=nonstopmode", "-halt-on-error", "doc.tex"], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout[-2000:]


def test_the_time_section_gives_the_pinned_and_the_default_time(comparison):
    md = (comparison / "report.md").read_text()
    numbers = json.loads((comparison / "numbers.json").read_text())["numbers"]
    key = "test-2c-box.cpu.attention.time_s"
    assert numbers[f"{key}.default_malloc.n1024"]["value"] == 0.048
    assert numbers[f"{key}.pinned_malloc.n1024"]["value"] == pytest.approx(1e-3 * 16**2)
    assert numbers[f"{key}.default_over_pinned.n1024"]["value"] == pytest.approx(0.048 / 0.256, abs=0.01)
    assert "glibc's malloc pinned" in md and "65,536" in md


def test_a_report_of_one_machine_keeps_its_headline_and_a_one_column_matrix(tmp_path):
    write_run(tmp_path / "results", "r1")
    out = tmp_path / "report"
    assert main(["report", "--results", str(tmp_path / "results"), "--out", str(out)]) == 0
    md = (out / "report.md").read_text()
    before, header = _first_table(md)
    assert "**On Test" in before and "figures/table1_" in before  # the headline and its figure, as before
    assert header == ["layer · Table 1", "Test 2c · cpu"]


def test_combined_claims_are_named_by_their_id():
    claims = pd.DataFrame(
        {"claim_id": ["softmax_saturation", "softmax_saturation"], "run_id": ["old", "new"], "status": ["ok", "ok"]}
    )
    runs = {"old": {"started_utc": "2026-01-01"}, "new": {"started_utc": "2026-01-02"}}
    kept, notes = combine(claims.assign(machine="m"), runs, "machine", ("claim_id",), {}, "claims")
    assert len(kept) == 1 and "(softmax_saturation)" in notes[0]


EMPTY_NAME = re.compile(r"\(\s*,|,\s*,|,\s*\)")  # a list item with no name: "(, , and 3 more)"


def test_the_shipped_report_opens_with_the_matrix_and_names_everything():
    md = (SHIPPED / "report.md").read_text()
    before, header = _first_table(md)
    fits = pd.read_csv(SHIPPED / "fits.csv")
    assert _words(before) <= WORDS_BEFORE_MATRIX
    assert len(header) - 1 == fits["source"].nunique(), "one column per machine · device · mode of the shipped runs"
    assert not EMPTY_NAME.search(md), EMPTY_NAME.search(md)


def test_the_shipped_report_decides_every_layers_time_on_the_intel_cpu_reference():
    fits = pd.read_csv(SHIPPED / "fits.csv")
    intel = fits[fits["source"].str.startswith("reference.intel-xeon-2c-vm.cpu") & (fits["metric"] == "time")]
    decided = primary_fits(intel, "time")
    decided = decided[decided["verdict"].isin(["consistent", "inconsistent"])]
    for mode in ("inference", "train", "decode"):
        layers = set(intel.loc[(intel["mode"] == mode) & (intel["variable"] == "n"), "layer"])
        assert layers and layers == set(decided.loc[decided["mode"] == mode, "layer"]), mode
