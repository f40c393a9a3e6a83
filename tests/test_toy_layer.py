"""The README's recipe for adding a layer, proven: a layer written here, registered in models.LAYERS and in
nothing else, flows through the spec, a run, the paths study, the fits and the report."""

import pandas as pd
import pytest
import torch
from torch import nn

import models
from bench import fits
from bench.cli import main
from bench.errors import BadInput
from bench.spec import PointSpec, expand_grid, validate
from models import LayerConfig, PathRule, Table1Row
from models.config import spill_bytes

TOY = "toy_prefix"
D = 8
NS = [32, 64, 128, 256]


class ToyPrefix(nn.Module):
    """A position-wise d×d map, then a running sum over positions: output i sees inputs 0..i, in one layer.

    Cost: 2·b·n·d² FLOPs (the map; the running sum is element-wise). Its k must be odd, to show a layer's
    own check reaching the CLI."""

    uses = ("k",)
    table1 = Table1Row(lambda n, d, k, r: n * d**2, "O(n·d²)", "O(1)", "O(1)", sizes=())
    path = PathRule(lambda n, k, window: 1, "1")

    @staticmethod
    def check(cfg: LayerConfig, n: int | None = None) -> None:
        if cfg.k % 2 == 0:
            raise ValueError(f"k={cfg.k}: the toy wants an odd k")

    def __init__(self, cfg: LayerConfig):
        super().__init__()
        self.check(cfg)
        self.proj = nn.Linear(cfg.d, cfg.d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).cumsum(dim=1)  # (B, n, d)

    @staticmethod
    def flops(batch: int, n: int, cfg: LayerConfig) -> int:
        return 2 * batch * n * cfg.d * cfg.d

    @staticmethod
    def activation_bytes(batch: int, n: int, cfg: LayerConfig, elem_bytes: int) -> int:
        return 2 * batch * n * cfg.d * elem_bytes

    @staticmethod
    def min_bytes(batch: int, n: int, cfg: LayerConfig, elem_bytes: int, cache_bytes: int | None = None) -> int:
        # x, y, the map's weight and bias; its output, stored and read back by the running sum.
        compulsory = (2 * batch * n * cfg.d + cfg.d * cfg.d + cfg.d) * elem_bytes
        return compulsory + spill_bytes(batch * n * cfg.d * elem_bytes, cache_bytes)


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(models.LAYERS, TOY, ToyPrefix)
    return TOY


def test_the_toys_own_check_is_the_specs(toy):
    assert [s.k for s in expand_grid([toy], n=[8], d=[D], k=[3])] == [3]
    with pytest.raises(BadInput, match=rf"{TOY}: k=4: the toy wants an odd k"):
        validate(PointSpec(layer=toy, n=8, d=D, k=4))
    with pytest.raises(BadInput, match=rf"{TOY} needs k"):
        validate(PointSpec(layer=toy, n=8, d=D))


@pytest.mark.slow
def test_a_registered_layer_flows_through_run_paths_fits_and_report(toy, tmp_path):
    results, reports = tmp_path / "results", tmp_path / "reports"
    grid = ["--layers", toy, "--n", ",".join(map(str, NS)), "--d", str(D), "--k", "3"]
    fast = ["--rounds", "6", "--target-time", "0.005", "--passes", "2", "--no-progress"]
    assert main(["run", *grid, "--device", "cpu", "--out", str(results / "run"), *fast]) == 0
    assert main(["paths", "--layers", toy, "--n", "4,16", "--k", "3", "--out", str(results / "run")]) == 0

    points = pd.read_csv(results / "run" / "points.csv")
    assert list(points["n"]) == NS and set(points["status"]) == {"ok"}
    assert list(points["flops_counted"]) == [2 * 1 * n * D * D for n in NS]  # batch 1
    assert (points["flops_counted"] == points["flops_analytic"]).all()

    paths = pd.read_csv(results / "run" / "paths.csv")
    assert list(paths["layers_to_cross"]) == [1, 1] and list(paths["layers_to_cross_formula"]) == [1, 1]

    table = fits.fit_table(points.assign(source="cpu"))
    flops_n = table[(table["layer"] == toy) & (table["metric"] == "flops") & (table["variable"] == "n")]
    assert len(flops_n) == 1
    assert flops_n["exponent"].iloc[0] == pytest.approx(1.0, abs=1e-9)
    assert flops_n["predicted"].iloc[0] == pytest.approx(1.0, abs=1e-9)  # from the toy's Table 1 row
    assert flops_n["verdict"].iloc[0] == "consistent"

    assert main(["report", "--results", str(results), "--out", str(reports)]) == 0
    report = (reports / "report.md").read_text()
    rows = [[cell.strip() for cell in line.split("|")] for line in report.splitlines() if line.startswith("| ")]
    matrix = [cells for cells in rows if cells[1] == f"{toy} · O(n·d²)"]  # the first screen's, its Table 1 text
    flops = matrix[1]  # then the FLOPs matrix, the first section
    assert matrix[0][2].replace("\xa0", " ").startswith(("✓ ", "✗ ", "? ", "–"))  # time ∝ n^e: the data's to say
    assert flops[2].replace("\xa0", " ") == "✓ 1 [1, 1]"  # the FLOPs matrix: ∝ n^1
    whole = [cells for cells in rows if cells[1].endswith(".cpu") and cells[2] == toy]  # the whole table
    assert whole[0][3] == "O(n·d²)" and whole[0][4] == "1 ✓"
    assert f"**{toy}**" in report  # its path finding
