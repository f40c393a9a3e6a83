"""The matched layers: shapes, fused against transparent references, fused against explicit attention."""

import math
import re
import sys

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
    if "window" in models.LAYERS[name].uses:  # a window r <= n
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


def _window_mask_by_hand(n, window):
    # Query i sees keys i - window//2 .. i - window//2 + window - 1.
    i = torch.arange(n)[:, None]
    j = torch.arange(n)[None, :]
    return (j >= i - window // 2) & (j <= i - window // 2 + window - 1)


@pytest.mark.parametrize("n,window", [(16, 5), (33, 8), (9, 9), (20, 1), (64, 16)])
def test_local_attention_equals_dense_with_window_mask(n, window):
    cfg = LayerConfig(d=12, heads=2, window=window)
    layer = models.build("attention_local", cfg)
    x = torch.randn(2, n, 12)
    mask = _window_mask_by_hand(n, window)
    assert torch.equal(mask, layer.dense_mask(n))
    with torch.inference_mode():
        assert (layer(x) - _dense_masked(layer, x, mask)).abs().max().item() < 1e-5


# attention_local computes in blocks (AttentionLocal.blocks): with the default 32 queries a block, n = 300 is
# blocked for every window up to 250 and n = 37 is one dense block for all of them; "small-blocks" (4 queries
# a block) makes n = 37 blocked too, below r of about 30, and "one-a-chunk" forms the scores of one block at a
# time (AttentionLocal.CHUNK_BYTES). Windows: 1, 2, even, odd, above n/2, n.
LOCAL_SIZES = [(37, r) for r in (1, 2, 5, 8, 20, 29, 37)] + [(300, r) for r in (1, 2, 33, 64, 151, 200, 300)]


@pytest.fixture(params=["default-blocks", "small-blocks", "small-blocks-one-a-chunk"])
def block_sizes(request, monkeypatch):
    if request.param != "default-blocks":
        monkeypatch.setattr(models.LAYERS["attention_local"], "BLOCK", 4)
    if request.param == "small-blocks-one-a-chunk":
        monkeypatch.setattr(models.LAYERS["attention_local"], "CHUNK_BYTES", 1)
    return request.param


@pytest.mark.parametrize("n,window", LOCAL_SIZES)
def test_local_attention_in_blocks_equals_dense_with_window_mask_output_and_gradient(n, window, block_sizes):
    """Batch 2, d = 24, 3 heads (head size 8): the output and the gradient of every input and weight."""
    cfg = LayerConfig(d=24, heads=3, window=window)
    layer = models.build("attention_local", cfg, seed=2)
    x = torch.randn(2, n, 24, requires_grad=True)
    mask = _window_mask_by_hand(n, window)
    upstream = torch.randn(2, n, 24)
    grads = []
    for forward in (layer, lambda x: _dense_masked(layer, x, mask)):
        out = forward(x)
        params = [x, *layer.parameters()]
        grads.append((out, torch.autograd.grad((out * upstream).sum(), params)))
    (local, local_grads), (dense, dense_grads) = grads
    assert (local - dense).abs().max().item() < 1e-5
    for a, b in zip(local_grads, dense_grads):
        assert (a - b).abs().max().item() < 1e-4 * max(1.0, b.abs().max().item())


@pytest.mark.parametrize("n,window", [(37, 5), (37, 8), (300, 33), (300, 64), (300, 300)])
@pytest.mark.parametrize("poisoned", [0, 17, 36])
def test_a_nan_in_the_input_reaches_exactly_the_queries_whose_window_holds_it(n, window, poisoned, block_sizes):
    """Blocked products multiply masked weights (0) by every value of the block, and 0·NaN = NaN; the layer
    keeps the windowed definition anyway (what bench.paths' NaN probe relies on)."""
    layer = models.build("attention_local", LayerConfig(d=24, heads=3, window=window))
    x = torch.randn(1, n, 24)
    x[0, poisoned] = float("nan")
    with torch.inference_mode():
        reached = torch.isnan(layer(x)).any(-1)[0]  # (n,)
    assert torch.equal(reached, _window_mask_by_hand(n, window)[:, poisoned])


@pytest.mark.parametrize(
    "blocks_per_chunk", [1, 3, 10, 40, 60], ids=["1-block", "3-blocks", "1-head", "4-heads-ragged", "all"]
)
def test_local_attention_in_chunks_of_blocks_is_the_same_computation(blocks_per_chunk, monkeypatch):
    """n = 300, r = 33: 10 blocks of 32 queries (spans of 64 keys) a head, 2·3 heads; chunks of 1 or 3 blocks
    run within a head (the last chunk of a head 1 block), of 10 or 40 whole heads (the last chunk 2 heads)."""
    cls = models.LAYERS["attention_local"]
    layer = models.build("attention_local", LayerConfig(d=24, heads=3, window=33))
    x = torch.randn(2, 300, 24, requires_grad=True)
    whole = layer(x)
    monkeypatch.setattr(cls, "CHUNK_BYTES", blocks_per_chunk * 32 * 64 * 4)
    chunked = layer(x)
    assert (chunked - whole).abs().max().item() < 1e-6
    upstream = torch.randn_like(whole)
    (grad_whole,) = torch.autograd.grad((whole * upstream).sum(), x)
    (grad_chunked,) = torch.autograd.grad((chunked * upstream).sum(), x)
    assert (grad_chunked - grad_whole).abs().max().item() < 1e-5


def test_local_attention_chunks_by_hand(monkeypatch):
    """n = 300, r = 33: 10 blocks of 32 queries a head, spans of 64 keys, 32·64·4 = 8 kB of scores a block."""
    cls = models.LAYERS["attention_local"]
    g = cls.blocks(300, 33)
    assert cls.chunk(g, 4) == (4 * 2**20 // 8192 // 10, 10)  # 512 blocks fit: 51 whole heads a chunk
    monkeypatch.setattr(cls, "CHUNK_BYTES", 3 * 8192)
    assert cls.chunk(g, 4) == (1, 3)  # runs of 3 blocks of one head
    assert cls.chunk(g, 2) == (1, 6)  # bfloat16: twice the blocks
    assert cls.chunk(g, 4, "cuda") == (sys.maxsize, 10)  # a GPU forms all the scores at once


def test_local_attention_keeps_the_masks_of_a_few_lengths_and_uses_the_right_one():
    """One layer called at six lengths in turn, twice: each output equal to a fresh layer's, at most
    MASKS_KEPT masks kept."""
    cfg = LayerConfig(d=24, heads=3, window=9)
    layer = models.build("attention_local", cfg, seed=3)
    for n in [40, 300, 64, 41, 300, 500] * 2:
        x = torch.randn(1, n, 24)
        with torch.inference_mode():
            assert torch.equal(layer(x), models.build("attention_local", cfg, seed=3)(x))
    assert len(layer._masked_cache) == models.attention.MASKS_KEPT


@pytest.mark.parametrize("n,window", [(37, 8), (300, 33), (300, 300)])
@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_non_finite_value_alone_reaches_exactly_the_queries_whose_window_holds_it(n, window, bad, block_sizes):
    """Through the layer a NaN input makes the key NaN too; here only one head's value is not finite."""
    layer = models.build("attention_local", LayerConfig(d=24, heads=3, window=window))
    q, k, v = (torch.randn(2, 3, n, 8) for _ in range(3))  # (B, h, n, d_head)
    v[1, 2, 17, 5] = bad
    with torch.inference_mode():
        out = layer._mix(q, k, v)  # (B, h, n, d_head)
    reached = ~torch.isfinite(out).all(-1)  # (B, h, n)
    expected = torch.zeros(2, 3, n, dtype=torch.bool)
    expected[1, 2] = _window_mask_by_hand(n, window)[:, 17]
    assert torch.equal(reached, expected)


@pytest.mark.parametrize(
    "n, window, queries, count, keys",
    [
        (300, 64, 32, 10, 95),  # 10 blocks of 32 cover 320 queries, each a span of 32 + 63 keys
        (300, 5, 32, 10, 36),
        (4096, 256, 32, 128, 287),
        (300, 250, 32, 10, 281),  # 320·281 = 89,920 pairs < 300² = 90,000
        (300, 251, 300, 1, 300),  # 320·282 = 90,240 >= 300²: one dense block
        (37, 5, 37, 1, 37),  # 2 blocks of 32 with spans of 36: 2304 > 37² = 1369
        (37, 37, 37, 1, 37),
        (20, 3, 20, 1, 20),  # one block of n < 32
    ],
)
def test_local_attention_blocks(n, window, queries, count, keys):
    g = models.LAYERS["attention_local"].blocks(n, window)
    assert (g.queries, g.count, g.keys) == (queries, count, keys)
    assert g.offset == (window // 2 if count > 1 else 0)


@pytest.mark.parametrize(
    "n, window, pairs_by_hand",
    [
        (37, 1, 37),
        (37, 2, 37 * 2 - 1),  # left 1, right 0: query 0 loses key -1
        (37, 5, 37 * 5 - 3 - 3),  # left 2, right 2: queries 0, 1 lose 2 + 1 keys, queries 35, 36 too
        (37, 8, 37 * 8 - 10 - 6),  # left 4 (4+3+2+1 lost), right 3 (3+2+1)
        (37, 37, 37 * 37 - 171 - 171),  # left 18, right 18: a centred window of n loses 18·19/2 keys at each end
        (300, 64, 300 * 64 - 528 - 496),  # left 32 (32·33/2), right 31 (31·32/2)
        (300, 300, 300 * 300 - 11325 - 11175),  # left 150 (150·151/2), right 149 (149·150/2)
    ],
)
def test_local_attention_useful_work_by_hand(n, window, pairs_by_hand):
    cls = models.LAYERS["attention_local"]
    cfg = LayerConfig(d=24, heads=3, window=window)
    mask = _window_mask_by_hand(n, window)
    assert int(mask.sum()) == pairs_by_hand
    g = cls.blocks(n, window)
    assert cls.useful_fraction(n, cfg) == pytest.approx(pairs_by_hand / (g.count * g.queries * g.keys))
    projections = 4 * 2 * 2 * n * 24 * 24
    assert cls.useful_flops(2, n, cfg) == projections + 2 * 2 * 2 * pairs_by_hand * 24
    assert cls.useful_flops(2, n, cfg) <= cls.flops(2, n, cfg)


def test_local_attention_does_two_thirds_of_its_work_inside_the_window_at_r_64():
    # n = 4096, r = 64: blocks of 32 queries, spans of 95 keys; the window holds 64 keys but at the two ends.
    fraction = models.LAYERS["attention_local"].useful_fraction(4096, LayerConfig(d=256, heads=4, window=64))
    assert fraction == pytest.approx((4096 * 64 - 528 - 496) / (4096 * 95))
    assert 0.67 < fraction < 0.68


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


@pytest.mark.parametrize("name", ["conv", "conv_dilated", "conv_separable"])
@pytest.mark.parametrize("k, dilation", [(1, 1), (3, 3), (15, 1), (31, 2)])
def test_convolutions_equal_conv1d_on_the_channels_first_layout(name, k, dilation):
    """The layers convolve their (B, n, d) input as a channels-last image (models/conv.py); the same weights
    as nn.Conv1d on the channels-first (B, d, n) transpose, the textbook's layout. k = 15 and 31: oneDNN's
    depthwise kernel is not used channels-first there."""
    layer = models.build(name, LayerConfig(d=24, k=k, dilation=dilation), seed=5)
    x = torch.randn(2, 37, 24)
    with torch.inference_mode():
        if name == "conv_separable":
            expected = layer.pointwise(layer.depthwise(x.transpose(1, 2))).transpose(1, 2)
        else:
            expected = layer.conv(x.transpose(1, 2)).transpose(1, 2)
        out = layer(x)
    assert (out - expected).abs().max().item() < 1e-5


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="the layout is oneDNN's answer")
@pytest.mark.parametrize("name", ["conv", "conv_dilated", "conv_separable"])
def test_convolutions_answer_in_the_layers_layout_without_a_copy(name):
    layer = models.build(name, LayerConfig(d=32, k=5, dilation=3))
    with torch.inference_mode():
        assert layer(torch.randn(4, 64, 32)).is_contiguous()


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
        ("attention_split", "O(n²·d)", "O(1)", "O(1)", 100**2 * 8),
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
    for attribute in ("check", "flops", "activation_bytes", "min_bytes"):
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
    names that happen to be a layer's too (the claims key their results by role: "attention") are roles.
    bench/benchmarks/ is outside the rule: stand-alone timings that name the implementations they compare,
    as presets.toml names the layers of a sweep."""
    import ast  # noqa: PLC0415
    import dataclasses  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    roles = {field.name for field in dataclasses.fields(models.Roles)}
    names = set(models.LAYERS) - roles
    bench = Path(__file__).resolve().parent.parent / "bench"
    found = [
        f"{path.relative_to(bench.parent)}:{node.lineno}: {node.value!r}"
        for path in sorted(bench.rglob("*.py"))
        if "benchmarks" not in path.relative_to(bench).parts
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names
    ]
    assert not found, found
