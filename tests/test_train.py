"""Mode "train": one forward and one backward pass of a layer (bench.point.one_call). Counted FLOPs against
formulas written out by hand, the gradients it computes, what the forward keeps for the backward, and the
mode through the spec, the storage, a run and the report."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import pandas as pd
import pytest
import torch

import models
from bench import schema, storage
from bench.cli import main
from bench.errors import BadInput, RunFailed
from bench.flops import FLOP_FORMULAS, count_flops
from bench.folder import RunFolder
from bench.point import grad_mode, one_call
from bench.presets import get_preset
from bench.probes.memory import saved_bytes
from bench.spec import PointSpec, expand_grid, source_key, validate

aten = torch.ops.aten


def _point(name: str, n: int, d: int = 24, heads: int = 3, batch: int = 2, k: int = 5, window: int = 8) -> PointSpec:
    cls = models.LAYERS[name]
    sizes = {"k": k, "heads": heads, "window": min(window, n), "dilation": 2}
    return PointSpec(name, n, d, batch, **{s: v if s in cls.uses else None for s, v in sizes.items()}, mode="train")


def _train_call(spec: PointSpec):
    layer = models.build(spec.layer, spec.config())
    x = torch.randn(spec.batch, spec.n, spec.d)
    call, forward = one_call(spec, layer, x, seed=0)
    return layer, x, call, forward


def counted_train(spec: PointSpec) -> int:
    _, _, call, _ = _train_call(spec)
    with grad_mode(spec):
        count = count_flops(call)
    assert count.uncounted_ops == ()
    return count.total


def hand_train_flops(name: str, b: int, n: int, d: int, k: int, heads: int) -> int:
    """Written out from the layers' definitions and their gradients, not from models: one per registered layer."""
    dense = 2 * b * n * d * d  # one (b·n, d) × (d, d) product
    scores = 2 * b * n * n * d  # Q·Kᵀ (or P·V) over all heads
    e = d // heads
    h0 = {"rnn": 1, "gru": 3}  # gate blocks whose step-0 product with h_0 ATen's loop skips in backward
    forward = {
        "conv": dense * k,
        "conv_dilated": dense * k,
        "conv_separable": 2 * b * n * d * k + dense,
        "rnn": 2 * dense,
        "gru": 3 * 2 * dense,
        "lstm": 4 * 2 * dense,
        "attention_math": 4 * dense + 2 * scores,
        # r = 8, every computed pair: one dense 37×37 block at n = 37; at n = 300, blocks of 32 queries (320 in
        # all) scoring spans of 32 + 8 − 1 = 39 keys. Its backward: two products for each of the forward's.
        "attention_local": 4 * dense + 2 * 2 * b * {37: 37 * 37, 300: 320 * 39}[n] * d,
        # φ(K)ᵀV and φ(Q)(φ(K)ᵀV), e×e a head, and the normaliser φ(Q)(φ(K)ᵀ1); each product's backward is two.
        "attention_linear": 4 * dense + 2 * (2 * b * n * e * e * heads) + 2 * b * n * d,
        "scan": 2 * dense,  # B x_t and C h_t; the scan's multiply-adds are element-wise
    }
    if name in (
        "attention",
        "attention_split",
    ):  # the projections 3x; the scores: 2 products forward, 5 backward (recomputed)
        return 3 * 4 * dense + (2 + 5) * scores
    if name not in forward:
        pytest.fail(f"layer {name!r}: write its training FLOPs by hand in hand_train_flops, tests/test_train.py")
    return 3 * forward[name] - 2 * b * h0.get(name, 0) * d * d


@pytest.mark.parametrize("n", [37, 300])
@pytest.mark.parametrize("name", list(models.LAYERS))
def test_counted_train_flops_equal_the_hand_formula(name, n):
    spec = _point(name, n)
    total = counted_train(spec)
    assert total == hand_train_flops(name, 2, n, 24, 5, 3)
    forward = models.analytic_flops(name, 2, n, spec.config())
    if name in ("rnn", "gru"):  # 3x less the one product nobody asks for: the gradient of h_0
        assert 3 * forward - total == 2 * 2 * models.LAYERS[name].gates * 24 * 24
    elif name in ("attention", "attention_split"):  # the recomputation: between 3x and 3.5x
        assert 3 * forward < total < 3.5 * forward
    else:
        assert total == 3 * forward


@pytest.mark.parametrize("name", list(models.LAYERS))
def test_every_layer_counted_train_flops_equal_the_analytic_ones(name):
    for n in (37, 300):
        spec = _point(name, n)
        assert counted_train(spec) == models.analytic_flops(name, 2, n, spec.config(), "train", "cpu")


def test_torch_counts_a_grouped_convolutions_weight_gradient_groups_times_over():
    """torch 2.13's convolution_backward formula, on a depthwise convolution: the weight gradient as if
    dense. bench.flops' formula: 2x the forward, as for a dense convolution."""
    from torch.utils.flop_counter import FlopCounterMode

    d, n, k = 16, 20, 3
    conv = torch.nn.Conv1d(d, d, k, groups=d, padding=1)
    x = torch.randn(2, d, n, requires_grad=True)
    forward = 2 * 2 * d * n * k
    with FlopCounterMode(display=False) as torch_counter:
        conv(x).sum().backward()
    assert torch_counter.get_total_flops() - forward == forward + forward * d  # dx right, dW d times over
    assert count_flops(lambda: conv(x).sum().backward()).total == 3 * forward
    assert aten.convolution_backward in FLOP_FORMULAS


@pytest.mark.parametrize("name", ["conv_separable", "gru", "lstm", "attention", "attention_math"])
def test_a_train_call_computes_every_gradient_afresh(name):
    spec = _point(name, 9, d=12, heads=3, batch=2, k=3, window=4)
    layer, x, call, _ = _train_call(spec)
    leaves = [x, *layer.parameters()]
    with grad_mode(spec):
        call()
        first = [leaf.grad.clone() for leaf in leaves]
        call()
    for leaf, grad in zip(leaves, first):
        assert leaf.grad is not None and torch.isfinite(leaf.grad).all()
        assert torch.equal(leaf.grad, grad)  # the second call replaced the gradients, it did not add to them
    assert layer.training


def _saved(name: str, n: int) -> int:
    spec = _point(name, n, d=64, heads=4, batch=1, k=3)
    _, _, _, forward = _train_call(spec)
    with grad_mode(spec):
        return saved_bytes(forward, spec)


def test_what_the_forward_keeps_for_the_backward_grows_as_the_issue_says():
    growth = {name: _saved(name, 2048) / _saved(name, 512) for name in ("attention_math", "attention", "lstm", "conv")}
    assert growth["attention_math"] >= 10  # the n×n probabilities, kept for the backward
    assert growth["attention"] <= 6  # the fused kernel keeps a row statistic, O(n)
    assert 2.5 <= growth["lstm"] <= 6 and 2.5 <= growth["conv"] <= 6


def test_saved_bytes_are_what_the_forward_left_allocated():
    # tanh(x·W), W learned, x live before: the product saves x (live before: not counted) for W's gradient,
    # and its output is freed once tanh has read it; tanh saves its own output, which is also the result.
    spec = PointSpec("conv", 8, 4, mode="train", k=1)
    w = torch.randn(4, 4, requires_grad=True)
    x = torch.randn(8, 4)
    with torch.enable_grad():
        assert saved_bytes(lambda: torch.tanh(x @ w), spec) == 8 * 4 * 4
        # sin saves its input: the product's output stays too, beside sin's result
        assert saved_bytes(lambda: torch.sin(x @ w), spec) == 2 * 8 * 4 * 4


# ----------------------------------------------------------------------------------- the mode as a size


def test_an_inference_point_keeps_the_id_it_had_before_modes():
    spec = PointSpec("conv", 64, 32, 4, k=3)
    assert "mode" not in spec.key
    before = b"layer=conv|n=64|d=32|batch=4|k=3|heads=None|window=None|dilation=None|device=cpu|dtype=float32"
    assert spec.point_id == hashlib.sha1(before).hexdigest()[:12]
    train = PointSpec("conv", 64, 32, 4, k=3, mode="train")
    assert train.point_id != spec.point_id and "mode=train" in train.key


def test_a_bad_mode_is_a_bad_input(capsys):
    with pytest.raises(BadInput, match="mode 'fit'"):
        validate(PointSpec("conv", 8, 4, k=3, mode="fit"))
    assert main(["run", "--layers", "conv", "--n", "8", "--d", "4", "--mode", "fit"]) == 2
    assert "--mode" in capsys.readouterr().err


def test_modes_in_grids_and_presets():
    specs = expand_grid(["conv"], [8, 16], [4], modes=("inference", "train"))
    assert [(s.mode, s.n) for s in specs] == [("inference", 8), ("inference", 16), ("train", 8), ("train", 16)]
    quick = get_preset("quick")
    modes = {s.mode for s in quick.specs(["cpu"])}
    assert modes == {"inference", "train", "decode", "recompute"}
    assert {s.mode for s in quick.specs(["cpu"], mode="train")} == {"train"}
    decoding = quick.specs(["cpu"], mode="recompute")  # the decode grids alone: their n is a position
    assert {s.mode for s in decoding} == {"recompute"} and {s.layer for s in decoding} == set(models.LAYERS)
    assert {s.n for s in decoding} == {s.n for s in quick.specs(["cpu"]) if s.decodes}
    assert source_key("cuda", "bfloat16", "train") == "cuda-bfloat16-train"
    assert source_key("cpu", "float32", "inference") == "cpu"


def test_a_train_row_is_refused_by_a_folder_stored_without_the_mode_column(tmp_path):
    old_columns = [c for c in schema.names() if c not in ("mode", "mem_saved_bytes")]
    (tmp_path / "points.csv").write_text(",".join(old_columns) + "\n")
    row = {c: None for c in schema.names()} | {
        "layer": "conv",
        "n": 8,
        "d": 4,
        "status": "ok",
        "point_id": "a",
        "finished_utc": storage.utc_now(),
    }
    RunFolder(tmp_path).append_point(row)  # an inference row: stored in the folder's own columns
    header = (tmp_path / "points.csv").read_text().splitlines()[0].split(",")
    assert header == old_columns and len(pd.read_csv(tmp_path / "points.csv")) == 1
    with pytest.raises(RunFailed, match="mode"):
        RunFolder(tmp_path).append_point(row | {"point_id": "b", "mode": "train"})
    assert len(pd.read_csv(tmp_path / "points.csv")) == 1


@pytest.mark.slow
def test_a_train_run_and_its_report(tmp_path):
    grid = ["--layers", "conv,attention_math", "--n", "16,32,64", "--d", "8", "--heads", "2", "--no-progress"]
    grid += ["--rounds", "3", "--target-time", "0.005", "--passes", "1", "--yes"]
    assert main(["run", *grid, "--out", str(tmp_path / "inference")]) == 0
    assert main(["run", *grid, "--mode", "train", "--out", str(tmp_path / "train")]) == 0
    train = pd.read_csv(tmp_path / "train" / "points.csv")
    assert (train["mode"] == "train").all() and (train["status"] == "ok").all()
    assert (train["flops_counted"] == train["flops_analytic"]).all()
    assert (train["mem_saved_bytes"] > 0).all() and train["mem_analytic_bytes"].isna().all()
    inference = pd.read_csv(tmp_path / "inference" / "points.csv")
    assert inference["mem_saved_bytes"].isna().all()
    both = train.merge(inference, on=["layer", "n"], suffixes=("_train", "_inference"))
    assert (both["flops_counted_train"] == 3 * both["flops_counted_inference"]).all()
    reports = tmp_path / "reports"
    assert (
        main(["report", "--results", str(tmp_path / "inference"), str(tmp_path / "train"), "--out", str(reports)]) == 0
    )
    text = (reports / "report.md").read_text()
    assert "## Training: forward and backward" in text
    numbers = json.loads((reports / "numbers.json").read_text())["numbers"]
    ratio = [k for k in numbers if ".cpu-train.training.attention_math.flops_counted_ratio" in k]
    assert ratio and numbers[ratio[0]]["value"] == 3
    fits = pd.read_csv(reports / "fits.csv")
    assert set(fits["mode"]) == {"inference", "train"}
    assert all(source.endswith("-train") == (mode == "train") for source, mode in zip(fits["source"], fits["mode"]))


@pytest.mark.cuda
@pytest.mark.parametrize("name", list(models.LAYERS))
def test_gpu_train_flops_equal_the_analytic_ones(name):
    """cuDNN runs every recurrence fused (no skipped h_0 product); the fused attention's backward is
    torch's own formula on a GPU."""
    spec = _point(name, 37)
    layer = models.build(name, spec.config(), device="cuda")
    x = torch.randn(spec.batch, spec.n, spec.d, device="cuda")
    call, _ = one_call(spec, layer, x, seed=0)
    with grad_mode(spec):
        count = count_flops(call)
    assert count.uncounted_ops == ()
    assert count.total == models.analytic_flops(name, spec.batch, spec.n, spec.config(), "train", "cuda")


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_a_points_inputs_are_drawn_on_its_device_in_order_from_its_seed(device):
    from bench.point import draws  # noqa: PLC0415

    draw, again = draws(7, device), draws(7, device)
    first, token = draw(2, 3, 4, dtype=torch.bfloat16), draw(1, 1, 4)  # a decode's prefix, then its token
    assert first.device.type == device and first.dtype == torch.bfloat16 and token.dtype == torch.float32
    assert torch.equal(again(2, 3, 4, dtype=torch.bfloat16), first) and torch.equal(again(1, 1, 4), token)
    if device == "cpu":  # the CPU's inputs are the ones earlier runs drew: a CPU generator's float32, then the dtype
        g = torch.Generator().manual_seed(7)
        assert torch.equal(first, torch.randn(2, 3, 4, generator=g).to(torch.bfloat16))
        assert torch.equal(token, torch.randn(1, 1, 4, generator=g))


def test_a_train_calls_upstream_gradient_is_drawn_where_its_input_lies():
    # The cuda tests call a CPU-labelled spec's step on a GPU's input: the gradient follows the input, not the label
    # (drawn on the spec's device, it failed there: "invalid gradient - expected device cuda:0 but got cpu").
    spec = dataclasses.replace(_point("conv", 16), device="cuda")
    layer = models.build("conv", spec.config(), device="cpu")
    call, _ = one_call(spec, layer, torch.randn(spec.batch, spec.n, spec.d), seed=0)
    with grad_mode(spec):
        call()
    assert layer.conv.weight.grad is not None and layer.conv.weight.grad.device.type == "cpu"
