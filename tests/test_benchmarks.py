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
    tokens per second for every layer, each a table of a new run folder (meta.json: what a report reads)."""
    from bench.benchmarks import decode

    monkeypatch.setattr(decode, "memory_bandwidth", lambda device: {"bytes_per_s": 1e10})
    out = tmp_path / "checks"
    argv = [
        "--splits",
        "--generate",
        "--device",
        "cpu",
        "--t",
        "600",
        "--d",
        "16",
        "--heads",
        "2",
        "--dtypes",
        "float32",
    ]
    argv += ["--batch", "1", "--window", "8", "--s", "0,2", "--prompt", "16", "--tokens", "4", "--threads", "1"]
    argv += ["--out", str(out)]
    assert decode.main(argv) == 0
    splits = pd.read_csv(out / "decode_splits.csv")
    assert list(splits["layer"]) == ["attention", "attention_math", "attention_split", "attention_split"]
    cache = 2 * 600 * 16 * 4  # keys and values of 600 positions, float32
    weights = models.parameter_bytes("attention", LayerConfig(d=16, heads=2))
    assert (splits["bytes"] == cache + weights + 2 * 16 * 4).all()
    assert splits["bound_s"].tolist() == pytest.approx((splits["bytes"] / 1e10).tolist())
    generated = pd.read_csv(out / "generate.csv")
    assert set(generated["layer"]) == set(models.LAYERS) and (generated["tokens_per_s"] > 0).all()
    # timed as a point is: on the threads asked for, its median on the clock the run's rule picks, with its flags
    assert (generated["threads"] == 1).all() and set(generated["clock"]) <= {"wall", "cpu"}
    on_cpu = generated["clock"] == "cpu"
    assert (generated.loc[on_cpu, "generate_s"] == generated.loc[on_cpu, "generate_cpu_s"]).all()
    assert (generated.loc[~on_cpu, "generate_s"] == generated.loc[~on_cpu, "generate_wall_s"]).all()
    assert (generated["tokens_per_s"] == 4 / generated["generate_s"]).all()
    assert (generated["reliable"] == generated["flag"].isna()).all()
    meta = json.loads((out / "meta.json").read_text())
    assert meta["kind"] == "decode" and meta["status"] == "finished"


def test_the_decode_checks_refuse_what_they_cannot_do_before_measuring(tmp_path, capsys):
    from bench.benchmarks import decode

    run = tmp_path / "run"
    run.mkdir()
    (run / "points.csv").write_text("layer,device,mode,status\nlstm,cpu,decode,ok\n")
    older = tmp_path / "older"  # a run from before the `mode` column: its points are inference
    older.mkdir()
    (older / "points.csv").write_text("layer,device,status\nlstm,cuda,ok\n")
    assert decode.main(["--check", str(older), "--out", str(tmp_path / "e")]) == 2
    assert "no GPU decode points" in capsys.readouterr().err
    quick = ["--device", "cpu", "--prompt", "8", "--tokens", "2", "--d", "16", "--heads", "2"]
    cases = {
        "no GPU decode points": ["--check", str(run), "--out", str(tmp_path / "a")],
        "not a run folder": ["--generate", *quick, "--into", str(run)],
        "allowed float32": ["--generate", *quick, "--dtype", "garbage", "--out", str(tmp_path / "b")],
        "must be at least 1": ["--generate", *quick[:-4], "--tokens", "0", "--out", str(tmp_path / "c")],
        "nothing to measure": ["--out", str(tmp_path / "d")],
    }
    for said, argv in cases.items():
        assert decode.main(argv) == 2 and said in capsys.readouterr().err, said
    (run / "meta.json").write_text(json.dumps({"run_id": "run"}))
    (run / "points.csv").write_text("layer,device,mode,status\nlstm,cpu,inference,ok\n")
    assert decode.main(["--generate", *quick, "--into", str(run)]) == 2
    assert "has no decode points" in capsys.readouterr().err
    (run / "meta.json").write_text("{not json")
    assert decode.main(["--generate", *quick, "--into", str(run)]) == 2
    assert "--into" in capsys.readouterr().err and not (run / "generate.csv").exists()


def test_the_peers_of_the_cached_attention_on_a_cpu():
    """Each peer's step on one cache: its time, its share of the bound of its bytes and its error against float64;
    a backend that cannot run the case is a row with its message, not a failure."""
    from bench.benchmarks import decode_peers

    table = decode_peers.peers(
        "cpu",
        [512],
        32,
        2,
        1,
        ["float32"],
        names=["explicit", "SDPA cuDNN", decode_peers.OURS],
        bandwidth={"bytes_per_s": 1e10},
    )
    assert list(table["peer"]) == ["explicit", "SDPA cuDNN", decode_peers.OURS]
    ok = table[table["status"] == "ok"]
    assert list(ok["peer"]) == ["explicit", decode_peers.OURS] and (ok["max_abs_error"] < 1e-5).all()
    assert (table["bytes"] == 2 * 512 * 32 * 4 + 2 * 32 * 4).all()
    assert ok["share_of_bound"].tolist() == pytest.approx((ok["bytes"] / 1e10 / ok["time_s"]).tolist())
    assert table.loc[table["peer"] == "SDPA cuDNN", "message"].str.len().iloc[0] > 0
    assert decode_peers.ladder(10**9, 4, 512, 2) == [32768, 65536]  # 0.6 GB: 32768 positions, then 65536
    # 140 GB, float32 (16 KB a position): 32768, 8x that, then the longest power-of-two multiple within 84 GB
    assert decode_peers.ladder(140 * 10**9, 4, 512, 4) == [32768, 262144, 4194304]
    assert decode_peers.ladder(10**8, 4, 512, 4) == []  # not even 32768 positions
    with pytest.raises(ValueError, match="unknown peer"):
        decode_peers.peer_kernels(["mine"])


def test_tokens_per_second_go_into_a_decode_run_and_its_report(tmp_path):
    from bench.benchmarks import decode

    run, report = tmp_path / "run", tmp_path / "report"
    grid = ["--layers", "lstm", "--mode", "decode", "--n", "16,64,256", "--d", "16", "--rounds", "3", "--passes", "1"]
    assert main(["run", *grid, "--target-time", "0.005", "--no-progress", "--out", str(run)]) == 0
    argv = ["--generate", "--device", "cpu", "--d", "16", "--heads", "2", "--batch", "1", "--window", "4"]
    assert decode.main([*argv, "--prompt", "8", "--tokens", "4", "--into", str(run)]) == 0
    stored = pd.read_csv(run / "generate.csv")
    assert set(stored["layer"]) == set(models.LAYERS)
    assert main(["report", "--results", str(run), "--out", str(report)]) == 0
    numbers = json.loads((report / "numbers.json").read_text())["numbers"]
    lstm = stored.set_index("layer").loc["lstm", "tokens_per_s"]
    (key,) = [k for k in numbers if k.endswith(".lstm.tokens_per_s.p8.t4")]
    assert numbers[key]["value"] == float(f"{lstm:.4g}")
    assert "Generating as a user sees it" in (report / "report.md").read_text()
