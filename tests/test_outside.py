"""Layers from outside the project (bench.outside): torch's own by name and a user's file, measured with no formula
through a run, the paths study, the fits, the report and `cite`; each kind of bad input one line (exit 2)."""

import json
import textwrap
from pathlib import Path

import pandas as pd
import pytest
import torch

import bench
import models
from bench import fits, outside
from bench.cli import main
from bench.errors import BadInput
from bench.spec import PointSpec, validate

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "my_layers.py"
# The step interface of docs/adding-a-layer.md on a layer whose output i is the mapped mean of inputs 0..i.
RUNNING_MEAN = """
        import torch
        from torch import nn
        class RunningMean(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.map = nn.Linear(d, d, bias=False)
            def forward(self, x):
                steps = torch.arange(1, x.shape[1] + 1, dtype=x.dtype, device=x.device)[None, :, None]
                return self.map(x.cumsum(1) / steps)
            def prefill(self, x):
                return (x.sum(1, keepdim=True),)
            def cache(self, state, t, capacity):
                return (state[0].clone(),)
            def step(self, x_t, cache, t):
                cache[0].add_(x_t)
                return self.map(cache[0] / (t + 1))
        """


@pytest.fixture
def registry(monkeypatch):
    """models.LAYERS as it was after the test: what a test registers goes with it."""
    monkeypatch.setattr(models, "LAYERS", dict(models.LAYERS))
    return models.LAYERS


def _write(folder: Path, text: str) -> Path:
    path = folder / "layer_file.py"
    path.write_text(textwrap.dedent(text))
    return path


def test_torch_layers_by_name_keep_the_shape_and_take_the_sizes_they_name(registry):
    for source, uses in [("torch:TransformerEncoderLayer", ("heads",)), ("torch:LSTM", ()), ("torch:Conv1d", ("k",))]:
        name = outside.register(source)
        assert name == source.partition(":")[2] and registry[name].uses == uses
        layer = models.build(name, models.LayerConfig(d=16, heads=4, k=3))
        x = torch.randn(2, 32, 16)
        assert layer(x).shape == x.shape


def test_flops_are_counted_on_meta_the_encoders_fused_path_too(registry):
    name = outside.register("torch:TransformerEncoderLayer")
    batch, n, d, heads = 2, 64, 16, 4
    cfg = models.LayerConfig(d=d, heads=heads)
    # q, k, v and the output map (4·2nd²), scores and mix (2·2n²d), the feed-forward d→4d→d (2·2·4nd²), per sequence
    hand = batch * (8 * n * d * d + 4 * n * n * d + 16 * n * d * d)
    assert models.analytic_flops(name, batch, n, cfg) == hand
    point = dict(layer=name, n=n, d=d, heads=heads, batch=batch)
    assert outside.meta_count(PointSpec(**point)).uncounted_ops == ()
    assert models.analytic_flops(name, batch, n, cfg, "train") == pytest.approx(3 * hand, rel=0.01)


def test_an_operator_the_counter_does_not_know_is_named(registry):
    name = outside.register(f"{EXAMPLE}:fft_mix")
    counted = outside.meta_count(PointSpec(layer=name, n=64, d=8))
    assert counted.uncounted_ops == ("aten._fft_c2c",)  # a view of the result is no matrix work
    points = pd.DataFrame(
        [
            dict(layer=name, n=n, d=8, batch=1, device="cpu", dtype="float32", mode="inference", status="ok")
            | dict(k=None, heads=None, window=None, dilation=None, causal=False)
            | dict(flops_counted=0.0, flops_uncounted_ops=";".join(counted.uncounted_ops), mem_peak_bytes=1e6 * n)
            | dict(time_median_s=1e-6 * n, time_reliable=True)
            for n in (64, 128, 256, 512)
        ]
    )
    flops = fits.fit_table(points).query("metric == 'flops'").iloc[0]
    assert flops["reason_code"] == "uncounted_operators" and flops["reason"].endswith("not counted: aten._fft_c2c")
    assert pd.isna(flops["exponent"])


@pytest.mark.parametrize(
    "text, source, message",
    [
        ("import nowhere_such_module\n", "{path}:Layer", "does not import: ModuleNotFoundError"),
        ("X = 1\n", "{path}:Layer", "has no Layer"),
        ("X = 1\n", "{path}:X", "is a int, not an nn.Module or a function"),
        (
            "from torch import nn\nclass Layer(nn.Module):\n    def __init__(self, d, depth):\n        super().__init__()\n",
            "{path}:Layer",
            "parameter 'depth' is no size the harness knows",
        ),
        ("", "nowhere/such.py:Layer", "no file"),
        ("", "torch:Transformer", "torch layers by name: MultiheadAttention"),
    ],
)
def test_bad_layer_sources_are_one_line_each(tmp_path, registry, text, source, message):
    path = _write(tmp_path, text)
    with pytest.raises(BadInput, match=message):
        outside.register(source.format(path=path))


def test_a_layer_that_changes_the_shape_or_has_no_step_is_refused(tmp_path, registry, capsys):
    path = _write(
        tmp_path,
        """
        from torch import nn
        class Halves(nn.Module):
            def __init__(self, d):
                super().__init__()
                self.map = nn.Linear(d, d // 2)
            def forward(self, x):
                return self.map(x)
        """,
    )
    name = outside.register(f"{path}:Halves")
    with pytest.raises(ValueError, match=r"returned \(1, 8, 4\) for an input of \(1, 8, 8\)"):
        models.build(name, models.LayerConfig(d=8))(torch.randn(1, 8, 8))
    with pytest.raises(BadInput, match="has no step interface"):
        validate(PointSpec(layer=name, n=8, d=8, mode="decode"))
    assert main(["run", "--layers", f"{path}:Nothing", "--n", "8,16", "--d", "8", "--out", str(tmp_path / "r")]) == 2
    assert "has no Nothing" in capsys.readouterr().err and not (tmp_path / "r").exists()
    assert main(["run", "--layers", f"{path}:Halves", "--n", "8,16", "--d", "8", "--out", str(tmp_path / "r")]) == 2
    assert "Halves at n=8, d=8: ValueError:" in capsys.readouterr().err and not (tmp_path / "r").exists()
    fft = ["--layers", f"{EXAMPLE}:fft_mix", "--n", "8,16", "--d", "8", "--mode", "train", "--out", str(tmp_path / "r")]
    assert main(["run", *fft]) == 2
    assert "fft_mix: no parameters, so --mode train trains nothing" in capsys.readouterr().err


@pytest.mark.slow
def test_torch_and_a_users_layer_through_run_paths_report_and_cite(tmp_path, registry, capsys):
    mine = _write(tmp_path, EXAMPLE.read_text())
    layers = f"torch:TransformerEncoderLayer,torch:LSTM,{mine}:GatedConv"
    results, reports = tmp_path / "results", tmp_path / "reports"
    fast = ["--rounds", "6", "--target-time", "0.005", "--passes", "2", "--no-progress"]
    grid = ["--layers", layers, "--n", "64,128,256,512", "--d", "8", "--heads", "2", "--k", "3"]
    assert main(["run", *grid, "--device", "cpu", "--out", str(results / "run"), *fast]) == 0
    paths = ["--layers", f"{layers},{mine}:BlockAttention", "--n", "16,64", "--k", "3"]
    assert main(["paths", *paths, "--out", str(results / "run")]) == 0

    points = pd.read_csv(results / "run" / "points.csv")
    assert set(points["layer"]) == {"TransformerEncoderLayer", "LSTM", "GatedConv"}
    assert set(points["status"]) == {"ok"}
    meta = json.loads((results / "run" / "meta.json").read_text())
    assert meta["outside_layers"]["GatedConv"]["source"] == f"{mine}:GatedConv"

    table = fits.fit_table(points.assign(source="cpu")).query("variable == 'n'").set_index(["layer", "metric"])
    assert table.loc[("TransformerEncoderLayer", "flops"), "complexity_class"] == "n²"
    assert table.loc[("LSTM", "flops"), "complexity_class"] == "n"
    assert table.loc[("GatedConv", "flops"), "complexity_class"] == "n"
    assert table.loc[("LSTM", "flops"), "reason_code"] == "no_prediction"  # no cost stated: nothing to judge
    for layer in ("TransformerEncoderLayer", "LSTM", "GatedConv"):  # fitted as any layer's (tiny here: not decided)
        assert table.loc[(layer, "time"), "reason_code"] in {"no_prediction", "not_asymptotic", "interval_too_wide"}
    assert (points["time_median_s"] > 0).all()

    crossed = pd.read_csv(results / "run" / "paths.csv").set_index(["layer", "n"])
    assert crossed.loc[("TransformerEncoderLayer", 64), "layers_to_cross"] == 1
    assert crossed.loc[("GatedConv", 64), "layers_to_cross"] == 63  # (k − 1)/2 = 1 position a layer
    assert pd.isna(crossed.loc[("BlockAttention", 64), "layers_to_cross"])
    assert "adds no position" in crossed.loc[("BlockAttention", 64), "error"]

    table = bench.table1(results / "run").set_index("layer")  # the API's, as a notebook shows it
    assert table.loc["TransformerEncoderLayer", "flops"].endswith(" · O(n²)")
    assert table.loc["LSTM", "predicted"] == "no cost stated" and table.loc["LSTM", "flops"].startswith("1.00 [")

    registry.pop("GatedConv")  # the report needs none of the layer's code: meta.json names it
    assert main(["report", "--results", str(results), "--out", str(reports)]) == 0
    report = (reports / "report.md").read_text()
    rows = [[cell.strip() for cell in line.split("|")] for line in report.splitlines() if line.startswith("| ")]
    assert {"TransformerEncoderLayer", "LSTM", "GatedConv"} <= {cells[1] for cells in rows}
    capsys.readouterr()
    assert main(["cite", "--list", "GatedConv.flops.exponent_n", "--reports", str(reports)]) == 0
    assert "GatedConv.flops.exponent_n" in capsys.readouterr().out


def test_a_stated_cost_judges_the_fits_as_table_1s_rows(tmp_path, registry):
    path = _write(
        tmp_path,
        """
        from torch import nn
        class Mixer(nn.Module):
            cost = "n^2·d"
            def __init__(self, d):
                super().__init__()
                self.map = nn.Linear(d, d)
            def forward(self, x):
                return self.map(x @ x.transpose(1, 2) @ x)
        """,
    )
    name = outside.register(f"{path}:Mixer")
    assert fits.predicted_text(name, "inference", "flops") == "O(n^2·d)"
    row = lambda n: dict(layer=name, n=n, d=8, batch=1, device="cpu", dtype="float32", mode="inference", status="ok")  # noqa: E731
    points = pd.DataFrame(
        [
            row(n)
            | dict(k=None, heads=None, window=None, dilation=None, causal=False, flops_uncounted_ops="")
            | dict(flops_counted=4.0 * n * n * 8, mem_peak_bytes=1e3 * n, time_median_s=1e-9 * n**3, time_reliable=True)
            for n in (64, 128, 256, 512)
        ]
    )
    flops = fits.fit_table(points).query("metric == 'flops'").iloc[0]
    assert flops["predicted"] == pytest.approx(2.0) and flops["verdict"] == "consistent"
    time = fits.fit_table(points).query("metric == 'time'").iloc[0]
    assert time["verdict"] == "inconsistent"  # n³ against the stated n²·d


@pytest.mark.parametrize("text", ["n**2 + import_os", "__import__('os')", "n.real", "'n'", "open(n)", "n +"])
def test_an_expected_cost_is_arithmetic_in_the_sizes_only(text):
    with pytest.raises(BadInput, match="an expression in n, d, k, window"):
        outside.Expected.parse(text)


def test_expect_names_its_layer_or_every_outside_one(registry):
    lstm, gru = outside.register("torch:LSTM"), outside.register("torch:GRU")
    outside.expect(["conv", lstm, gru], ["n*d**2", "GRU=n*d*d*3"])
    assert registry[lstm].expected.text == "n*d**2" and registry[gru].expected.text == "n*d*d*3"
    assert outside.sources([lstm])[lstm]["expect"] == "n*d**2"
    with pytest.raises(BadInput, match="names no layer from outside"):
        outside.expect(["conv"], ["conv=n"])


def test_a_layer_with_the_step_interface_decodes_through_it(tmp_path, registry):
    path = _write(tmp_path, RUNNING_MEAN)
    name = outside.register(f"{path}:RunningMean")
    spec = validate(PointSpec(layer=name, n=16, d=8, batch=2, mode="decode"))
    cfg = spec.config()
    assert models.analytic_decode_flops(name, 2, 16, cfg) == 2 * 2 * 8 * 8  # the step's d×d map
    assert models.analytic_decode_state_bytes(name, 2, 16, cfg) == 2 * 8 * 4  # the running sum, float32
    layer, x = models.build(name, cfg), torch.randn(2, 17, 8)
    cache = layer.cache(layer.prefill(x[:, :16]), 16, 17)
    assert torch.allclose(layer.step(x[:, 16:], cache, 16), layer(x)[:, 16:], atol=1e-6)


@pytest.mark.slow
def test_a_layers_decode_steps_run_and_report(tmp_path, registry):
    path = _write(tmp_path, RUNNING_MEAN)
    fast = ["--rounds", "4", "--target-time", "0.002", "--passes", "1", "--no-progress", "--no-extend"]
    decode = ["--layers", f"{path}:RunningMean", "--n", "16,32,64,128", "--d", "8", "--mode", "decode"]
    assert main(["run", *decode, "--out", str(tmp_path / "results" / "run"), *fast]) == 0
    assert set(pd.read_csv(tmp_path / "results" / "run" / "points.csv")["flops_counted"]) == {128}  # batch 1
    assert main(["report", "--results", str(tmp_path / "results"), "--out", str(tmp_path / "report")]) == 0
