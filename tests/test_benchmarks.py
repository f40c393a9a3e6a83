"""bench/benchmarks/restricted.py: the implementations it keeps for the before/after comparison compute what the
registered layers compute (the same weights, the same outputs), their FLOP formulas are what they count, and the
script prints its table (timed for a moment, with a fixed compute peak: no timing decides anything here)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch

import models
from bench.benchmarks import restricted
from bench.cli import main
from bench.flops import count_flops
from models import LayerConfig


@pytest.mark.parametrize("n, window", [(37, 1), (37, 8), (37, 37), (300, 33), (300, 64), (300, 300)])
def test_the_banded_attention_of_before_equals_the_blocked_one(n, window):
    cfg = LayerConfig(d=24, heads=3, window=window)
    x = torch.randn(2, n, 24)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        before = restricted.AttentionLocalUnfold(cfg).eval()
    now = models.build("attention_local", cfg, seed=1)
    with torch.inference_mode():
        assert (before(x) - now(x)).abs().max().item() < 1e-5
        count = count_flops(lambda: before(x))
    # r products per query, the edges' padding included: 8·b·n·d² + 4·b·n·r·d
    assert (
        count.total == restricted.AttentionLocalUnfold.flops(2, n, cfg) == 8 * 2 * n * 24 * 24 + 4 * 2 * n * window * 24
    )
    assert count.uncounted_ops == ()


@pytest.mark.parametrize("name", ["conv", "conv_dilated", "conv_separable"])
@pytest.mark.parametrize("k", [3, 15])
def test_the_channels_first_convolutions_of_before_equal_the_channels_last_ones(name, k):
    cls, registered = restricted.REFERENCES[f"{name}_channels_first"]
    assert registered == name
    cfg = LayerConfig(d=24, k=k, dilation=3)
    x = torch.randn(2, 37, 24)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(2)
        before = cls(cfg).eval()
    now = models.build(name, cfg, seed=2)
    with torch.inference_mode():
        assert (before(x) - now(x)).abs().max().item() < 1e-5
        assert count_flops(lambda: before(x)).total == models.analytic_flops(name, 2, 37, cfg)


def test_the_script_prints_its_table(monkeypatch, capsys):
    monkeypatch.setattr(restricted, "compute_peak", lambda device: {"flops_per_s": 1e11, "kernel": "matmul 512x512"})
    layers = "attention_local,attention_local_unfold,conv_separable_channels_first"
    restricted.main(
        ["--sizes", "64x8", "--layers", layers, "--heads", "2", "--window", "5", "--threads", "1"]
        + ["--min-run-time", "0.01"]
    )
    out = capsys.readouterr().out
    assert "compute peak 100.0 GFLOP/s" in out and "load: before" in out
    rows = [line for line in out.splitlines() if line.startswith("|  64 |")]
    assert [row.split("|")[3].strip() for row in rows] == layers.split(",")


def test_an_unknown_layer_is_refused(capsys):
    with pytest.raises(SystemExit):
        restricted.parse_args(["--layers", "attention_locl"])
    assert "unknown layer(s) attention_locl" in capsys.readouterr().err


def test_the_decode_checks_write_their_tables_on_a_cpu(tmp_path, monkeypatch):
    """bench/benchmarks/decode.py without a GPU: the split sweep against a bandwidth bound of the step's bytes by hand,
    tokens per second for every layer, and a run without GPU decode points leaves an empty check."""
    from bench.benchmarks import decode

    monkeypatch.setattr(decode, "memory_bandwidth", lambda device: {"bytes_per_s": 1e10})
    run = tmp_path / "run"
    run.mkdir()
    (run / "points.csv").write_text("layer,device,mode,status\nlstm,cpu,decode,ok\n")
    argv = ["--check", str(run), "--splits", "--generate", "--device", "cpu", "--t", "600", "--d", "16", "--heads", "2"]
    argv += ["--batch", "1", "--window", "8", "--s", "0,2", "--prompt", "16", "--tokens", "4", "--out", str(tmp_path)]
    assert decode.main(argv) == 0
    splits = pd.read_csv(tmp_path / "splits.csv")
    assert list(splits["layer"]) == ["attention", "attention_math", "attention_split", "attention_split"]
    cache = 2 * 600 * 16 * 4  # keys and values of 600 positions, float32
    weights = models.parameter_bytes("attention", LayerConfig(d=16, heads=2))
    assert (splits["bytes"] == cache + weights + 2 * 16 * 4).all()
    assert splits["bound_s"].tolist() == pytest.approx((splits["bytes"] / 1e10).tolist())
    generated = pd.read_csv(tmp_path / "generate.csv")
    assert set(generated["layer"]) == set(models.LAYERS) and (generated["tokens_per_s"] > 0).all()
    assert decode.check_run(run).empty  # no decode point on a GPU to replay


def test_tokens_per_second_go_into_a_decode_run_and_its_report(tmp_path):
    from bench.benchmarks import decode

    run, report = tmp_path / "run", tmp_path / "report"
    grid = ["--layers", "lstm", "--mode", "decode", "--n", "16,64,256", "--d", "16", "--rounds", "3", "--passes", "1"]
    assert main(["run", *grid, "--target-time", "0.005", "--no-progress", "--out", str(run)]) == 0
    argv = ["--generate", "--device", "cpu", "--d", "16", "--heads", "2", "--batch", "1", "--window", "4"]
    assert decode.main([*argv, "--prompt", "8", "--tokens", "4", "--out", str(tmp_path / "x"), "--into", str(run)]) == 0
    stored = pd.read_csv(run / "generate.csv")
    assert set(stored["layer"]) == set(models.LAYERS)
    assert main(["report", "--results", str(run), "--out", str(report)]) == 0
    numbers = json.loads((report / "numbers.json").read_text())["numbers"]
    lstm = stored.set_index("layer").loc["lstm", "tokens_per_s"]
    (key,) = [k for k in numbers if k.endswith(".lstm.tokens_per_s.p8.t4")]
    assert numbers[key]["value"] == float(f"{lstm:.4g}")
    assert "Generating as a user sees it" in (report / "report.md").read_text()
