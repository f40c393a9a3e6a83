"""The matched layers: shapes, fused against transparent references, fused against explicit attention."""

import math
import re

import pytest
import torch

import models
from models import LayerConfig


def _cfg(name, d=24, k=3):
    return LayerConfig(d=d, k=k, heads=3, window=5, dilation=2)


@pytest.mark.parametrize("name", list(models.LAYERS))
@pytest.mark.parametrize("batch,n", [(1, 1), (2, 7), (3, 16)])
def test_output_shape_is_batch_n_d(name, batch, n):
    cfg = _cfg(name)
    if name == "attention_local":
        cfg = LayerConfig(d=24, heads=3, window=min(5, n))
    layer = models.build(name, cfg)
    x = torch.randn(batch, n, cfg.d)
    with torch.inference_mode():
        assert layer(x).shape == (batch, n, cfg.d)


@pytest.mark.parametrize("name", models.stepwise())
@pytest.mark.parametrize("batch,n,d", [(1, 5, 8), (2, 17, 32), (3, 40, 13)])
def test_fused_recurrent_equals_step_by_step_reference(name, batch, n, d):
    layer = models.build(name, LayerConfig(d=d), seed=3)
    with torch.no_grad():
        for p in layer.parameters():  # random weights larger than the default init, so gates saturate too
            p.uniform_(-0.5, 0.5)
    x = torch.randn(batch, n, d)
    with torch.inference_mode():
        diff = (layer(x) - layer.reference(x)).abs().max().item()
    assert diff < 1e-5


@pytest.mark.parametrize("d,heads,n", [(32, 4, 16), (30, 3, 21), (8, 1, 5)])
def test_fused_attention_equals_explicit(d, heads, n):
    cfg = LayerConfig(d=d, heads=heads)
    fused, explicit = models.build("attention", cfg, seed=1), models.build("attention_math", cfg, seed=1)
    x = torch.randn(2, n, d)
    with torch.inference_mode():
        assert (fused(x) - explicit(x)).abs().max().item() < 1e-5


def _dense_masked(layer, x, mask):
    """Dense attention with a boolean mask, written out: the reference for the banded computation."""
    b, n, d = x.shape
    q, k, v = (layer._split(p(x)) for p in (layer.q_proj, layer.k_proj, layer.v_proj))
    scores = q @ k.transpose(-2, -1) / math.sqrt(layer.d_head)
    scores = scores.masked_fill(~mask, float("-inf"))
    mixed = torch.softmax(scores, -1) @ v
    return layer.out_proj(mixed.transpose(1, 2).reshape(b, n, d))


@pytest.mark.parametrize("n,window", [(16, 5), (33, 8), (9, 9), (20, 1), (64, 16)])
def test_local_attention_equals_dense_with_window_mask(n, window):
    cfg = LayerConfig(d=12, heads=2, window=window)
    layer = models.build("attention_local", cfg)
    x = torch.randn(2, n, 12)
    # The mask by hand: query i sees keys i - window//2 .. i - window//2 + window - 1.
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    mask = (j >= i - window // 2) & (j <= i - window // 2 + window - 1)
    assert torch.equal(mask, layer.dense_mask(n))
    with torch.inference_mode():
        assert (layer(x) - _dense_masked(layer, x, mask)).abs().max().item() < 1e-5


def test_local_attention_with_full_window_is_dense_attention():
    n = 11  # a window of 2n - 1 centered on any query covers the whole sequence
    local = models.build("attention_local", LayerConfig(d=8, heads=2, window=2 * n - 1), seed=4)
    full = models.build("attention_math", LayerConfig(d=8, heads=2), seed=4)
    x = torch.randn(1, n, 8)
    with torch.inference_mode():
        assert (local(x) - full(x)).abs().max().item() < 1e-5


def test_same_seed_same_weights_and_centered_conv_keeps_n():
    a = models.build("conv", LayerConfig(d=8, k=5), seed=7)
    b = models.build("conv", LayerConfig(d=8, k=5), seed=7)
    assert torch.equal(a.conv.weight, b.conv.weight)
    # Centered: an impulse at position 10 reaches exactly positions 8..12 for k=5.
    with torch.no_grad():
        a.conv.bias.zero_()
    x = torch.zeros(1, 21, 8)
    x[0, 10] = 1.0
    with torch.inference_mode():
        reached = (a(x).abs().sum(-1)[0] > 0).nonzero().flatten().tolist()
    assert reached == [8, 9, 10, 11, 12]


@pytest.mark.parametrize("k", [2, 4, 0])
def test_even_kernel_is_refused(k):
    with pytest.raises(ValueError, match="odd"):
        models.build("conv", LayerConfig(d=8, k=k))


def test_heads_must_divide_d():
    with pytest.raises(ValueError, match="divisible"):
        models.build("attention", LayerConfig(d=10, heads=3))


@pytest.mark.parametrize(
    "name,compute,sequential,path,by_hand",
    [
        ("conv", "O(k·n·d²)", "O(1)", "O(n/k)", 5 * 100 * 8**2),
        ("conv_dilated", "O(k·n·d²)", "O(1)", "O(log_k n)", 5 * 100 * 8**2),
        ("conv_separable", "O(k·n·d + n·d²)", "O(1)", "O(n/k)", 5 * 100 * 8 + 100 * 8**2),
        ("rnn", "O(n·d²)", "O(n)", "O(n)", 100 * 8**2),
        ("gru", "O(n·d²)", "O(n)", "O(n)", 100 * 8**2),
        ("lstm", "O(n·d²)", "O(n)", "O(n)", 100 * 8**2),
        ("attention", "O(n²·d)", "O(1)", "O(1)", 100**2 * 8),
        ("attention_math", "O(n²·d)", "O(1)", "O(1)", 100**2 * 8),
        ("attention_local", "O(r·n·d)", "O(1)", "O(n/r)", 16 * 100 * 8),
        ("attention_linear", "O(n·d²)", "O(1)", "O(1)", 100 * 8**2),  # Katharopoulos et al. 2020
        ("scan", "O(n·d² + n·d)", "O(log n)", "O(log n)", 100 * 8**2 + 100 * 8),  # projections + the scan
    ],
)
def test_each_layer_carries_its_table1_row(name, compute, sequential, path, by_hand):
    """Vaswani et al. 2017, Table 1, row by row, at n = 100, d = 8, k = 5, r = 16."""
    row = models.LAYERS[name].table1
    assert (row.compute_text, row.sequential_text, row.path_text) == (compute, sequential, path)
    assert row.cost(100, 8, 5, 16) == pytest.approx(by_hand)


@pytest.mark.parametrize(
    "name, n, k, r, by_hand",
    [
        ("conv", 100, 5, 16, 50),  # ⌈99 / 2⌉
        ("conv_separable", 100, 3, 16, 99),  # ⌈99 / 1⌉
        ("conv", 100, 1, 16, None),  # a 1-tap kernel never moves information
        ("conv_dilated", 100, 3, 16, 5),  # (3^5 - 1)/2 = 121 >= 99 > (3^4 - 1)/2 = 40
        ("conv_dilated", 41, 3, 16, 4),  # (3^4 - 1)/2 = 40 >= 40: an exact power
        ("attention_local", 100, 3, 16, 13),  # ⌈99 / 8⌉
        ("attention_local", 100, 3, 1, None),  # a window of 1 sees only itself
        ("attention", 100, 3, 16, 1),
        ("lstm", 100, 3, 16, 1),
        ("attention_linear", 100, 3, 16, 1),  # every query sees every key
        ("scan", 100, 3, 16, 1),  # causal: output 99 depends on input 0 within one layer
    ],
)
def test_each_layer_carries_its_path_formula(name, n, k, r, by_hand):
    assert models.LAYERS[name].path.layers(n, k, r) == by_hand


@pytest.mark.parametrize("name", list(models.LAYERS))
def test_each_layer_has_the_whole_descriptor(name):
    cls = models.LAYERS[name]
    assert isinstance(cls.table1, models.Table1Row) and isinstance(cls.path, models.PathRule)
    assert set(cls.uses) <= {"k", "heads", "window", "dilation"}
    assert set(cls.table1.sizes) <= set(cls.uses)
    for attribute in ("check", "flops", "activation_bytes"):
        assert callable(getattr(cls, attribute)), attribute


@pytest.mark.parametrize(
    "name, cfg, n, message",
    [
        ("conv", LayerConfig(d=8, k=4), None, "conv: k=4: the centered convolution needs an odd kernel size"),
        ("conv_separable", LayerConfig(d=8, k=0), None, "conv_separable: k=0"),
        ("attention", LayerConfig(d=8, heads=3), None, "attention: heads=3: d=8 must be divisible"),
        ("attention_local", LayerConfig(d=8, window=None), None, "attention_local: window=None"),
        ("attention_local", LayerConfig(d=8, window=32), 16, "attention_local: window=32: must be at most n=16"),
        ("attention_linear", LayerConfig(d=8, heads=3), None, "attention_linear: heads=3: d=8 must be divisible"),
    ],
)
def test_each_layer_checks_its_own_config(name, cfg, n, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        models.check(name, cfg, n)
    if n is None:  # the constructor asks the same check
        with pytest.raises(ValueError):
            models.build(name, cfg)


# ------------------------------------------------------------------------------ beyond Table 1
def test_recurrences_are_told_apart_from_parallel_scans():
    # A step-by-step reference alone does not make a layer's forward sequential: the scan's is a parallel scan.
    assert models.stepwise() == ("rnn", "gru", "lstm", "scan")
    assert models.recurrent() == ("rnn", "gru", "lstm") and models.scans() == ("scan",)
    assert [models.LAYERS[name].table1.sequential_text for name in models.stepwise()] == ["O(n)"] * 3 + ["O(log n)"]


def test_the_sequential_cell_of_a_log_is_no_power_of_n():
    log_row, rnn_row = models.LAYERS["scan"].table1, models.LAYERS["rnn"].table1
    with pytest.raises(ValueError, match="not a power of n"):
        log_row.sequential_exponent  # noqa: B018 - the property raises
    assert rnn_row.sequential_exponent == 1 and models.LAYERS["attention"].table1.sequential_exponent == 0
    # log2(256)/log2(64) = 8/6 over a factor 4 in n; log2(4096)/log2(64) = 2 over a factor 64.
    assert log_row.sequential_local_exponent(64, 256) == pytest.approx(math.log(8 / 6) / math.log(4))
    assert log_row.sequential_local_exponent(64, 4096) == pytest.approx(math.log(2) / math.log(64))  # 1/6
    assert rnn_row.sequential_local_exponent(64, 4096) == pytest.approx(1.0)
    assert [log_row.sequential_steps(n) for n in (2, 37, 64, 65, 4096)] == [1, 6, 6, 7, 12]
    with pytest.raises(ValueError, match="known O"):
        models.Table1Row(lambda n, d, k, r: n, "O(n)", "O(sqrt n)", "O(1)")


def _linear_attention_explicit(layer, x):
    """Linear attention written out as an n × n weight matrix: w_ij = φ(q_i)·φ(k_j), each row divided by its
    sum, then the weighted sum of the values; the layer's own projections, φ(x) = elu(x) + 1 by hand."""
    b, n, d = x.shape
    q, k, v = (layer._split(p(x)) for p in (layer.q_proj, layer.k_proj, layer.v_proj))  # (B, h, n, e)
    phi_q = torch.where(q > 0, q + 1, torch.exp(q))  # elu(q) + 1: q + 1 above 0, e^q below
    phi_k = torch.where(k > 0, k + 1, torch.exp(k))
    weights = phi_q @ phi_k.transpose(-2, -1)  # (B, h, n, n)
    weights = weights / weights.sum(dim=-1, keepdim=True)
    mixed = weights @ v  # (B, h, n, e)
    return layer.out_proj(mixed.transpose(1, 2).reshape(b, n, d))


@pytest.mark.parametrize("d,heads,n", [(24, 3, 37), (32, 4, 16), (8, 1, 5), (6, 6, 9)])
def test_linear_attention_equals_its_explicit_n_by_n_form(d, heads, n):
    layer = models.build("attention_linear", LayerConfig(d=d, heads=heads), seed=2).double()
    x = torch.randn(2, n, d, dtype=torch.float64)
    with torch.inference_mode():
        assert (layer(x) - _linear_attention_explicit(layer, x)).abs().max().item() < 1e-12


def test_linear_attention_has_attentions_projections_and_its_rows_are_averages():
    cfg = LayerConfig(d=12, heads=3)
    linear, softmax = models.build("attention_linear", cfg, seed=5), models.build("attention", cfg, seed=5)
    assert all(torch.equal(a, b) for a, b in zip(linear.state_dict().values(), softmax.state_dict().values()))
    # Equal values at every position: every row of weights sums to 1, so each output is that value's image.
    with torch.no_grad():
        linear.v_proj.weight.zero_()
    x = torch.randn(1, 9, 12)
    with torch.inference_mode():
        out = linear(x)
        expected = linear.out_proj(linear.v_proj.bias.expand(1, 9, 12))
    assert (out - expected).abs().max().item() < 1e-6


def _scan_by_hand(x, a, w_b, b_b, w_c, b_c, block=None):
    """h_t = a ⊙ h_{t−1} + B x_t, y_t = C h_t, from a zero state at t = 0 (and at every multiple of `block`)."""
    h, out = torch.zeros(x.shape[0], x.shape[2], dtype=x.dtype), []
    for t in range(x.shape[1]):
        if block is not None and t % block == 0:
            h = torch.zeros_like(h)
        h = a * h + x[:, t] @ w_b.T + b_b
        out.append(h @ w_c.T + b_c)
    return torch.stack(out, dim=1)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 8, 37, 300])
def test_scan_is_the_recurrence_written_by_hand(n):
    layer = models.build("scan", LayerConfig(d=24), seed=1).double()
    x = torch.randn(2, n, 24, dtype=torch.float64)
    a = torch.sigmoid(layer.decay_logit)
    assert ((a > 0) & (a < 1)).all()
    weights = (a, layer.in_proj.weight, layer.in_proj.bias, layer.out_proj.weight, layer.out_proj.bias)
    with torch.no_grad():
        by_hand = _scan_by_hand(x, *weights)
        assert (layer(x) - by_hand).abs().max().item() < 1e-12
        assert (layer.reference(x) - by_hand).abs().max().item() < 1e-12


@pytest.mark.parametrize("n,levels", [(8, 0), (8, 2), (37, 3), (37, 6), (37, 9)])
def test_a_lower_scan_tree_scans_blocks_of_two_to_the_levels_apart(n, levels):
    layer = models.build("scan", LayerConfig(d=6), seed=3).double()
    x = torch.randn(2, n, 6, dtype=torch.float64)
    weights = (
        torch.sigmoid(layer.decay_logit),
        *(p for m in (layer.in_proj, layer.out_proj) for p in (m.weight, m.bias)),
    )
    with torch.no_grad():
        assert (layer(x, levels=levels) - _scan_by_hand(x, *weights, block=2**levels)).abs().max().item() < 1e-12
    assert layer.scan_levels(n) == math.ceil(math.log2(n))


@pytest.mark.parametrize("n", [5, 37, 64])
def test_scan_gradients_equal_the_references(n):
    layer = models.build("scan", LayerConfig(d=16), seed=4).double()
    x = torch.randn(2, n, 16, dtype=torch.float64)
    target = torch.randn(2, n, 16, dtype=torch.float64)
    grads = []
    for run in (layer, layer.reference):
        x_run = x.clone().requires_grad_(True)
        layer.zero_grad()
        ((run(x_run) - target) ** 2).sum().backward()
        grads.append([x_run.grad, *(p.grad.clone() for p in layer.parameters())])
    assert len(grads[0]) == 1 + 5  # x, the decay, B and C with their biases
    for scanned, stepped in zip(*grads):
        assert (scanned - stepped).abs().max().item() < 1e-9 * (1 + stepped.abs().max().item())


def test_bench_spells_no_layer_name():
    """bench/ reads layers from models (LAYERS, ROLES, the layers' attributes) and never names one: a string
    literal equal to a registered layer's name is a comparison that a new layer would silently miss. Role
    names that happen to be a layer's too (the claims key their results by role: "attention") are roles."""
    import ast  # noqa: PLC0415
    import dataclasses  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    roles = {field.name for field in dataclasses.fields(models.Roles)}
    names = set(models.LAYERS) - roles
    bench = Path(__file__).resolve().parent.parent / "bench"
    found = [
        f"{path.relative_to(bench.parent)}:{node.lineno}: {node.value!r}"
        for path in sorted(bench.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names
    ]
    assert not found, found
