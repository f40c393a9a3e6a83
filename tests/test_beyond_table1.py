"""The two layers beyond Vaswani et al.'s Table 1, linear attention and the parallel scan, through a run, the
paths study, the fits and the report, as any layer: their rows in the tables, what they change, and linear
attention's crossover with softmax attention solved from the FLOP formulas."""

import json

import pandas as pd
import pytest

import models
from bench import fits
from bench.cli import main
from models import LayerConfig

pytestmark = pytest.mark.slow  # a run, a paths study and a report

LINEAR, SCAN, ATTENTION = models.ROLES.attention_linear, models.scans()[0], models.ROLES.attention
D, HEADS, NS = 8, 2, [64, 128, 256, 512]
FAST = ["--rounds", "6", "--target-time", "0.005", "--passes", "2", "--no-progress"]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("beyond")
    run, out = root / "results" / "run", root / "reports"
    grid = ["--layers", f"{ATTENTION},{LINEAR},{SCAN}", "--n", ",".join(map(str, NS)), "--d", str(D)]
    assert main(["run", *grid, "--heads", str(HEADS), "--device", "cpu", "--out", str(run), *FAST]) == 0
    assert main(["paths", "--layers", f"{LINEAR},{SCAN}", "--n", "16,64,256", "--out", str(run)]) == 0
    assert main(["report", "--results", str(root / "results"), "--out", str(out)]) == 0
    return run, out


def test_counted_flops_are_the_formulas_and_the_paths_are_measured(report):
    run, _ = report
    points = pd.read_csv(run / "points.csv")
    assert (points["status"] == "ok").all() and (points["flops_counted"] == points["flops_analytic"]).all()
    scan = points[points["layer"] == SCAN].sort_values("n")
    assert list(scan["flops_counted"]) == [2 * 2 * n * D * D for n in NS]  # batch 1: B x and C h
    paths = pd.read_csv(run / "paths.csv").set_index(["layer", "n"])
    assert [paths.loc[(SCAN, n), "path_hops"] for n in (16, 64, 256)] == [4, 6, 8]  # ⌈log₂ n⌉ levels
    assert [paths.loc[(SCAN, n), "seq_depth"] for n in (16, 64, 256)] == [3 + 4 * lv for lv in (4, 6, 8)]
    assert [paths.loc[(SCAN, n), "seq_depth_reference"] for n in (16, 64, 256)] == [2 * n + 4 for n in (16, 64, 256)]
    assert (paths.loc[LINEAR, "layers_to_cross"] == 1).all() and paths.loc[LINEAR, "seq_depth_reference"].isna().all()


def test_their_rows_are_in_the_tables_with_what_they_change(report):
    _, out = report
    text = (out / "report.md").read_text()
    rows = [[cell.strip() for cell in line.split("|")] for line in text.splitlines() if line.startswith("| ")]
    whole = {cells[2]: cells for cells in rows if len(cells) > 12 and cells[1].endswith(".cpu")}
    assert whole[LINEAR][3] == "O(n·d²)" and whole[LINEAR][9] == "O(1)" and whole[LINEAR][11] == "O(1)"
    assert whole[SCAN][3] == "O(n·d² + n·d)" and whole[SCAN][9] == "O(log n)" and whole[SCAN][11] == "O(log n)"
    assert whole[SCAN][10] == "19 ops → 35 ops"  # 3 + 4·⌈log₂ n⌉ at n = 16 and 256, the header's lengths
    beyond = text.split("Rows beyond Table 1")[1].split("## ")[0]
    for layer in (LINEAR, SCAN):
        row = models.LAYERS[layer].table1
        assert f"**{layer}** ({row.source})" in beyond and row.note[1:40] in beyond
    assert "FLOPs ∝ n^1 ✓" in beyond  # both count exactly n·(...) FLOPs
    assert r"scan $O(n \cdot d^2 + n \cdot d)$" in (out / "table.tex").read_text()  # the matrix's row head


def test_the_crossover_with_linear_attention_is_solved_from_the_formulas(report):
    _, out = report
    numbers = json.loads((out / "numbers.json").read_text())["numbers"]
    (key,) = [
        k for k in numbers if k.endswith(f"crossover.{ATTENTION}_vs_{LINEAR}.d{D}.batch1.heads{HEADS}.predicted_n")
    ]
    # 8·n·d² + 4·n²·d against 8·n·d² + 4·n·d·e + 2·n·d (e = d/heads = 4): equal work at n = e + 1/2, so the
    # first integer n where softmax attention costs at least as much is e + 1 = 5.
    assert (
        numbers[key]["value"] == 5 == fits.closed_form_crossover_n(ATTENTION, LINEAR, 1, LayerConfig(d=D, heads=HEADS))
    )
    section = (out / "report.md").read_text().split("### Crossover")[1].split("### Fraction of peak")[0]
    assert f"| {LINEAR} |" in section and "Katharopoulos et al. 2020" in section
