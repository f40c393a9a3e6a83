"""bench.flops: counted FLOPs against formulas written out by hand (2 FLOPs per multiply-accumulate,
biases and softmax excluded), for every matched layer, and the rules for operators without a formula."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

import models
from bench import flop_formulas, flops
from bench.flops import classify_op, count_flops
from models import LayerConfig

aten = torch.ops.aten


def counted(
    name: str, cfg: LayerConfig, batch: int, n: int, grad_mode=torch.inference_mode, device: str = "cpu"
) -> flops.FlopCount:
    layer = models.build(name, cfg, device=device)
    x = torch.randn(batch, n, cfg.d, device=device, dtype=cfg.torch_dtype)

    def forward():
        with grad_mode():
            layer(x)

    return count_flops(forward)


def local_pairs_by_hand(n: int, r: int) -> int:
    """(query, key) scores attention_local computes per head and batch element (models.attention.Blocks):
    blocks of w = 32 queries (at most n), each scoring the w + r − 1 keys its windows cover, n rounded up to
    whole blocks; one dense n×n block where that would be as many."""
    w = min(32, n)
    blocks = -(-n // w)
    blocked = blocks * w * (w + r - 1)
    return blocked if blocked < n * n else n * n


def _projections(b: int, n: int, d: int) -> int:
    return 4 * (2 * b * n * d * d)  # Q, K, V and output: (b·n, d) × (d, d) each


# Written out from the layers' definitions, not from models' flops(): one formula per registered layer, checked
# by test_every_layer_has_its_hand_formulas.
HAND_FLOPS: dict[str, Callable[[int, int, LayerConfig], int]] = {
    "conv": lambda b, n, c: 2 * b * n * c.d * c.d * c.k,  # each of b·n·d outputs sums d inputs × k taps
    "conv_dilated": lambda b, n, c: 2 * b * n * c.d * c.d * c.k,  # dilation spreads the k taps, adds none
    "conv_separable": lambda b, n, c: 2 * b * n * c.d * c.k + 2 * b * n * c.d * c.d,  # depthwise, then d×d
    "rnn": lambda b, n, c: 2 * b * n * (c.d * c.d + c.d * c.d),  # W_ih x_t and W_hh h_{t-1}, d×d each
    "gru": lambda b, n, c: 2 * b * n * 3 * (c.d * c.d + c.d * c.d),  # 3 gate blocks
    "lstm": lambda b, n, c: 2 * b * n * 4 * (c.d * c.d + c.d * c.d),  # 4 gate blocks
    "attention": lambda b, n, c: _projections(b, n, c.d) + 2 * (2 * b * n * n * c.d),  # Q·Kᵀ and P·V, all heads
    "attention_split": lambda b, n, c: _projections(b, n, c.d) + 2 * (2 * b * n * n * c.d),
    "attention_math": lambda b, n, c: _projections(b, n, c.d) + 2 * (2 * b * n * n * c.d),
    # Every computed pair, masked ones too: d MACs for its score and d for its share of the mix.
    "attention_local": lambda b, n, c: _projections(b, n, c.d) + 2 * (2 * b * local_pairs_by_hand(n, c.window) * c.d),
    # per head of e = d/h: (e × n)·(n × e) for φ(K)ᵀV, (n × e)·(e × e) for φ(Q)(φ(K)ᵀV), (n × e)·(e × 1) for
    # the normaliser φ(Q)(φ(K)ᵀ1)
    "attention_linear": lambda b, n, c: (
        _projections(b, n, c.d) + 2 * 2 * b * n * (c.d // c.heads) ** 2 * c.heads + 2 * b * n * c.d
    ),
    "scan": lambda b, n, c: 2 * (2 * b * n * c.d * c.d),  # B x_t and C h_t; the diagonal scan is element-wise
}


def hand_flops(name: str, b: int, n: int, cfg: LayerConfig) -> int:
    if name not in HAND_FLOPS:
        pytest.fail(f"layer {name!r}: write its forward FLOPs by hand in HAND_FLOPS, tests/test_flops.py")
    return HAND_FLOPS[name](b, n, cfg)


# (batch, n, d, heads, k, window, dilation): odd n, n = 1, heads 3 and 5 with odd head sizes, odd k.
# window >= 2 and head size >= 2: see test_local_attention_with_a_window_of_one_is_partly_element_wise.
SIZES = [
    (2, 7, 30, 3, 3, 5, 2),
    (2, 13, 45, 5, 5, 3, 3),
    (2, 1, 12, 3, 1, 2, 1),
    (2, 16, 24, 3, 7, 4, 4),
    (1, 9, 20, 5, 9, 9, 1),
]


@pytest.mark.parametrize("size", SIZES, ids=lambda s: "b{}-n{}-d{}-h{}-k{}-r{}-dil{}".format(*s))
@pytest.mark.parametrize("name", list(models.LAYERS))
def test_counted_flops_equal_the_hand_formula_and_the_analytic_count(name, size):
    batch, n, d, heads, k, window, dilation = size
    cfg = LayerConfig(d=d, k=k, heads=heads, window=window, dilation=dilation)
    count = counted(name, cfg, batch, n)
    assert count.uncounted_ops == ()
    assert count.total == hand_flops(name, batch, n, cfg)
    assert count.total == models.analytic_flops(name, batch, n, cfg)
    assert count.total == sum(count.by_op.values())


# b=2, n=7, d=30, heads=3, k=3, r=5: e.g. conv 2·2·7·30·30·3 = 75,600; attention 100,800 + 11,760; the
# restricted attention scores all 7×7 pairs at n = 7 (one block), masked ones included: as attention.
ONE_POINT_FLOPS = {
    "conv": 75_600,
    "conv_dilated": 75_600,
    "conv_separable": 27_720,
    "rnn": 50_400,
    "gru": 151_200,
    "lstm": 201_600,
    "attention": 112_560,
    "attention_split": 112_560,
    "attention_math": 112_560,
    "attention_local": 112_560,
    "attention_linear": 118_440,  # 100,800 + 2·(2·2·7·30·10) + 2·2·7·30
    "scan": 50_400,  # 2·(2·2·7·30·30)
}


def test_every_layer_has_its_hand_formulas():
    """A new layer fails here until its FLOPs are written by hand: a formula and one point in plain numbers."""
    for table, where in ((HAND_FLOPS, "HAND_FLOPS"), (ONE_POINT_FLOPS, "ONE_POINT_FLOPS")):
        missing = [name for name in models.LAYERS if name not in table]
        unknown = [name for name in table if name not in models.LAYERS]
        assert not missing and not unknown, f"tests/test_flops.py {where}: add {missing}, remove {unknown}"


def test_one_point_in_plain_numbers():
    cfg = LayerConfig(d=30, k=3, heads=3, window=5, dilation=2)
    for name in models.LAYERS:
        if name not in ONE_POINT_FLOPS:
            pytest.fail(f"layer {name!r}: add its FLOPs at this point, worked by hand, to ONE_POINT_FLOPS")
        assert counted(name, cfg, 2, 7).total == ONE_POINT_FLOPS[name], name


@pytest.mark.parametrize("name", list(models.LAYERS))
def test_the_count_does_not_depend_on_the_grad_mode(name):
    # Under no_grad the composites (linear, lstm, sdpa) decompose before the counter sees them and other
    # kernels run (mm instead of bmm; the fused kernels themselves); the count is the same.
    cfg = LayerConfig(d=30, k=3, heads=3, window=5, dilation=2)
    with_inference = counted(name, cfg, 2, 7, torch.inference_mode)
    with_no_grad = counted(name, cfg, 2, 7, torch.no_grad)
    assert with_no_grad.total == with_inference.total
    assert with_no_grad.uncounted_ops == ()
    assert with_no_grad.elementwise == with_inference.elementwise


@pytest.mark.parametrize("window, d, heads", [(1, 12, 3), (3, 6, 6)], ids=["window-1", "head-size-1"])
def test_local_attention_with_an_index_of_size_one_is_still_counted_whole(window, d, heads):
    """A contraction over an index of size 1 (one key per query, or a head size of 1) is still a matrix
    product: attention_local uses matmul there, since torch.einsum would run it as a broadcast multiply
    that the convention does not count."""
    b, n = 2, 7
    cfg = LayerConfig(d=d, heads=heads, window=window)
    count = counted("attention_local", cfg, b, n)
    assert count.total == hand_flops("attention_local", b, n, cfg)
    assert count.uncounted_ops == ()


@pytest.mark.parametrize("name", ["attention", "attention_math"])
def test_attention_flops_quadruple_when_n_doubles_at_n_much_larger_than_d(name):
    cfg = LayerConfig(d=8, heads=1)
    small, large = (counted(name, cfg, 1, n).total for n in (512, 1024))
    # 8·n·d² + 4·n²·d: the n² term is 4·512·8 = 64 times the n term at n = 512, so the ratio is 3.94.
    assert large / small == pytest.approx(4, rel=0.03)


@pytest.mark.parametrize(
    "name",
    ["lstm", "gru", "rnn", "conv", "conv_dilated", "conv_separable", "attention_linear", "scan"],
)
def test_linear_in_n_layers_exactly_double_when_n_doubles(name):
    cfg = LayerConfig(d=30, k=3, heads=3, window=5, dilation=2)
    assert counted(name, cfg, 2, 14).total == 2 * counted(name, cfg, 2, 7).total


@pytest.mark.parametrize("n", [37, 300])
@pytest.mark.parametrize("name", ["attention_linear", "scan"])
def test_the_layers_beyond_table1_are_counted_exactly_at_odd_sizes(name, n):
    """The issue's sizes: d = 24, 3 heads of 8, batch 2, n = 37 and 300 (the scan pads 37 to 64 and 300 to
    512 inside; its count must still be the n positions' projections)."""
    cfg = LayerConfig(d=24, heads=3)
    count = counted(name, cfg, 2, n)
    assert count.uncounted_ops == ()
    by_hand = {
        "attention_linear": 8 * 2 * n * 24 * 24 + 2 * 2 * 2 * n * 24 * 8 + 2 * 2 * n * 24,
        "scan": 2 * 2 * 2 * n * 24 * 24,
    }[name]
    assert count.total == by_hand == models.analytic_flops(name, 2, n, cfg)


@pytest.mark.parametrize("window", [5, 64])
def test_local_attention_flops_double_when_n_doubles_in_whole_blocks(window):
    # Blocks of 32 queries: n = 256 and 512 are whole blocks, so the blocks double.
    cfg = LayerConfig(d=12, heads=3, window=window)
    assert counted("attention_local", cfg, 1, 512).total == 2 * counted("attention_local", cfg, 1, 256).total


# The odd sizes of restricted attention: n = 37 (one dense block for every window) and n = 300 (blocked up to
# r = 250), windows 1, 2, even, odd, above n/2 and n.
LOCAL_SIZES = [(37, r) for r in (1, 2, 5, 8, 20, 29, 37)] + [(300, r) for r in (1, 2, 33, 64, 151, 200, 300)]


@pytest.mark.parametrize("n, window", LOCAL_SIZES)
def test_local_attention_counted_flops_equal_the_analytic_count_at_odd_sizes(n, window):
    cfg = LayerConfig(d=24, heads=3, window=window)
    count = counted("attention_local", cfg, 2, n)
    assert count.uncounted_ops == ()
    assert (
        count.total == models.analytic_flops("attention_local", 2, n, cfg) == hand_flops("attention_local", 2, n, cfg)
    )


@pytest.mark.parametrize(
    "n, window, pairs",
    [
        (37, 5, 37 * 37),
        (37, 37, 37 * 37),
        (300, 64, 320 * 95),
        (300, 33, 320 * 64),
        (300, 1, 320 * 32),
        (300, 300, 300 * 300),
    ],
    ids=["37-r5-dense", "37-r37-dense", "300-r64", "300-r33", "300-r1", "300-r300-dense"],
)
def test_local_attention_flops_in_plain_numbers(n, window, pairs):
    # b = 2, d = 24: projections 4·2·2·n·24·24; scores and mix 2·2·2·pairs·24, pairs = n_padded·(w + r − 1)
    # (n = 300: 10 blocks of w = 32 queries, 320 in all, spans of 31 + r keys) or n² (one dense block).
    cfg = LayerConfig(d=24, heads=3, window=window)
    assert counted("attention_local", cfg, 2, n).total == 8 * 2 * n * 24 * 24 + 4 * 2 * pairs * 24


def test_flop_counter_mode_alone_counts_zero_for_the_cpu_lstm_and_sdpa():
    """Why bench.flops extends FlopCounterMode: on the CPU, nn.LSTM runs aten.mkldnn_rnn_layer and
    scaled_dot_product_attention runs aten._scaled_dot_product_flash_attention_for_cpu, which torch's
    formula table (2.13) does not know."""
    lstm = models.build("lstm", LayerConfig(d=30))
    x = torch.randn(2, 7, 30)
    with torch.inference_mode(), FlopCounterMode(display=False) as counter:
        lstm(x)
    assert counter.get_total_flops() == 0
    assert counted("lstm", LayerConfig(d=30), 2, 7).by_op == {"aten.mkldnn_rnn_layer": 2 * 2 * 7 * 4 * 1800}

    q = torch.randn(2, 3, 7, 10)  # (B, h, n, d_head)
    with torch.inference_mode(), FlopCounterMode(display=False) as counter:
        F.scaled_dot_product_attention(q, q, q)
    assert counter.get_total_flops() == 0
    with torch.inference_mode():
        count = count_flops(lambda: F.scaled_dot_product_attention(q, q, q))
    assert count.total == 2 * (2 * 2 * 3 * 7 * 7 * 10)


def test_oneDNN_and_ATen_lstm_kernels_count_the_same():
    # With oneDNN off the CPU runs ATen's own loop (addmm, sigmoid, tanh, ...) instead of one fused kernel.
    cfg = LayerConfig(d=30)
    fused = counted("lstm", cfg, 2, 7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # oneDNN's TF32 notice on CPU-only builds
        with torch.backends.mkldnn.flags(enabled=False):
            unfused = counted("lstm", cfg, 2, 7)
    assert "aten.mkldnn_rnn_layer" in fused.by_op and "aten.mkldnn_rnn_layer" not in unfused.by_op
    assert unfused.total == fused.total
    assert unfused.elementwise == fused.elementwise
    assert unfused.uncounted_ops == ()


# The GPU formulas, checked on the CPU: the same nn.RNN layers counted op by op on the CPU.


@pytest.mark.parametrize(
    "kind, proj_size, batch_first", [("LSTM", 3, True), ("LSTM", 0, False), ("GRU", 0, False), ("RNN", 0, True)]
)
def test_cudnn_rnn_formula_matches_the_cpu_count_of_the_same_layer(kind, proj_size, batch_first):
    extra = {"proj_size": proj_size} if proj_size else {}
    layer = getattr(torch.nn, kind)(8, 6, num_layers=2, bidirectional=True, batch_first=batch_first, **extra).eval()
    x = torch.randn(2, 5, 8)  # 10 tokens either way round
    with torch.no_grad():  # with autograd on, ATen takes the layers apart before the counter sees them
        cpu = count_flops(lambda: layer(x))
    weight_shapes = [tuple(w.shape) for w in layer._flat_weights]  # what RNN.cpp passes to _cudnn_rnn
    # Per token and direction: layer 1 (in 8), layer 2 (in 2·out): g·h·in + g·h·out (+ out·h projection).
    g, h, out = {"LSTM": 4, "GRU": 3, "RNN": 1}[kind], 6, proj_size or 6
    per_token = 2 * sum(g * h * in_size + g * h * out + (out * h if proj_size else 0) for in_size in (8, 2 * out))
    assert cpu.total == flops.cudnn_rnn_flop((2, 5, 8), weight_shapes) == 2 * 10 * per_token
    assert cpu.uncounted_ops == ()


def test_flash_attention_is_counted_on_the_head_size_before_cuda_padding():
    # On CUDA, scaled_dot_product_attention pads a head size of 10 to 16 (pad_last_dim<8>) before the
    # flash kernel; the count must be that of size 10, as on the CPU.
    recorder = flops._OpRecorder()
    counter = flops._new_counter(recorder)
    q = torch.randn(2, 3, 7, 10)
    with torch.inference_mode(), recorder, counter:
        q_padded = F.pad(q, (0, 6))  # what attention.cpp does
    formula = counter.flop_registry[aten._scaled_dot_product_flash_attention]
    unpadded = 2 * (2 * 2 * 3 * 7 * 7 * 10)
    assert formula(q_padded, q_padded, q_padded) == unpadded
    assert formula(q, q, q) == unpadded
    assert formula(q_padded.clone(), q_padded, q_padded) == 2 * 2 * 3 * 7 * 7 * (16 + 10)  # a real 16


@pytest.mark.parametrize(
    "fn, expected",
    [
        (lambda: torch.dot(torch.randn(6), torch.randn(6)), 2 * 6),
        (lambda: torch.mv(torch.randn(5, 6), torch.randn(6)), 2 * 5 * 6),
        (lambda: torch.randn(5, 6) @ torch.randn(6), 2 * 5 * 6),
        (lambda: torch.addmv(torch.randn(5), torch.randn(5, 6), torch.randn(6)), 2 * 5 * 6),
        (lambda: torch.addbmm(torch.randn(3, 5), torch.randn(2, 3, 4), torch.randn(2, 4, 5)), 2 * 2 * 3 * 4 * 5),
    ],
    ids=["dot", "mv", "matmul-2d-1d", "addmv", "addbmm"],
)
def test_vector_products_torch_leaves_out(fn, expected):
    count = count_flops(fn)
    assert count.total == expected
    assert count.uncounted_ops == ()


# Operators without a formula.


def test_an_operator_that_may_multiply_matrices_without_a_formula_is_reported_not_zeroed():
    a, b = torch.randn(40, 30), torch.randn(50, 30)
    w = torch.randn(30, 20)
    # cdist of 40 × 50 points runs aten._euclidean_dist, which uses a matrix product inside.
    count = count_flops(lambda: (torch.cdist(a, b), a @ w))
    assert count.uncounted_ops == ("aten._euclidean_dist",)
    assert count.total == 2 * 40 * 30 * 20  # the mm is still counted; total is a lower bound


def test_classification_of_operators():
    assert classify_op(aten.mm) == "counted"  # torch's own formula
    assert classify_op(aten.mkldnn_rnn_layer.default) == "counted"  # ours
    assert classify_op(aten._cudnn_rnn) == "counted"
    for op in (
        aten.view,
        aten.softmax,
        aten._softmax,
        aten.masked_fill,
        aten.cat,
        aten.stack,
        aten.add,
        aten.sum,
        aten._thnn_fused_lstm_cell,
    ):
        assert classify_op(op) == "no_matrix_work", op
    for op in (aten._euclidean_dist, aten._int_mm, aten._trilinear, aten._linalg_solve_ex):
        assert classify_op(op) == "uncounted", op


def test_the_named_no_matrix_ops_exist_and_none_has_a_formula():
    namespaces = {name: getattr(torch.ops, name.split(".")[0]) for name in flops.NO_MATRIX_WORK_OP_NAMES}
    missing = [name for name, ns in namespaces.items() if not hasattr(ns, name.split(".", 1)[1])]
    assert missing == []
    with_formula = flops._new_counter(flops._OpRecorder()).flop_registry
    assert [op for op in flops.NO_MATRIX_WORK_OPS if op in with_formula] == []


# Element-wise work: 1 per output element of pointwise ops and softmax; fused kernels estimated.


@pytest.mark.parametrize(
    "kind, extra", [("GRU", {}), ("RNN", {}), ("RNN", {"nonlinearity": "relu"}), ("GRU", {"bias": False})]
)
def test_aten_recurrences_counted_whole_count_what_their_steps_count(kind, extra, monkeypatch):
    # Without autograd the counter sees aten.gru / rnn_tanh / rnn_relu whole and counts them by formula; without their
    # overloads in the table it runs torch's decomposition and counts each step's operators, as it used to. One layer,
    # batch first, as the layers run: elsewhere the decomposition adds some input biases inside a product, uncounted.
    packet = (
        torch.ops.aten.gru if kind == "GRU" else getattr(torch.ops.aten, f"rnn_{extra.get('nonlinearity', 'tanh')}")
    )
    one = getattr(torch.nn, kind)(8, 6, batch_first=True, **extra).eval()
    deep = getattr(torch.nn, kind)(8, 6, num_layers=2, bidirectional=True, **extra).eval()
    x = torch.randn(2, 5, 8)
    with torch.inference_mode():
        whole, deep_whole = count_flops(lambda: one(x)), count_flops(lambda: deep(x))
        monkeypatch.delitem(flop_formulas.FLOP_FORMULAS, packet.input)
        steps, deep_steps = count_flops(lambda: one(x)), count_flops(lambda: deep(x))
    assert list(whole.by_op) == [str(packet)] and str(packet) not in steps.by_op
    assert whole.total == steps.total > 0 and whole.elementwise == steps.elementwise > 0
    assert deep_whole.total == deep_steps.total == 2 * 10 * 2 * (8 + 6 + 12 + 6) * 6 * {"GRU": 3, "RNN": 1}[kind]
    assert whole.uncounted_ops == steps.uncounted_ops == deep_whole.uncounted_ops == ()


def test_elementwise_counts():
    b, n, d, heads = 2, 7, 30, 3
    cfg = LayerConfig(d=d, k=3, heads=heads, window=5)
    scores = b * heads * n * n
    assert counted("attention", cfg, b, n).elementwise == 2 * scores  # fused: scale + softmax per score
    assert counted("attention_math", cfg, b, n).elementwise == 2 * scores  # the division and the softmax
    # Per token and unit: the unfused cell's pointwise ops (2, 10, 13) + the input-bias add (g = 1, 3, 4).
    assert counted("rnn", cfg, b, n).elementwise == (2 + 1) * b * n * d
    assert counted("gru", cfg, b, n).elementwise == (10 + 3) * b * n * d
    assert counted("lstm", cfg, b, n).elementwise == (13 + 4) * b * n * d
    assert counted("conv", cfg, b, n).elementwise == 0  # the bias is inside the convolution
    x = torch.randn(3, 4)
    assert count_flops(lambda: torch.tanh(x).clone()).elementwise == 12  # a copy is no arithmetic


def test_count_flops_prints_nothing(capsys):
    counted("attention", LayerConfig(d=30, heads=3), 2, 7)
    assert capsys.readouterr() == ("", "")


@pytest.mark.cuda
@pytest.mark.parametrize("grad_mode", [torch.inference_mode, torch.no_grad], ids=["inference", "no_grad"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("name", list(models.LAYERS))
def test_gpu_counts_the_same_point_as_the_cpu(name, dtype, grad_mode):
    # Head size 10: in bfloat16 the CUDA flash kernel runs on it padded to 16. cuDNN runs the RNNs.
    cfg = LayerConfig(d=30, k=3, heads=3, window=5, dilation=2, dtype=dtype)
    cpu = counted(name, cfg, 2, 13, grad_mode)
    gpu = counted(name, cfg, 2, 13, grad_mode, device="cuda")
    assert gpu.uncounted_ops == ()
    assert gpu.total == cpu.total == hand_flops(name, 2, 13, cfg)


@pytest.mark.parametrize("layer,dilation", [("conv", None), ("conv_dilated", 5), ("conv_dilated", 11)])
def test_useful_flops_leave_out_the_taps_in_the_zero_padding(layer, dilation):
    """Output i's tap j reads i + (j − 2)·dilation (k = 5, centered); a tap outside 0..n−1 reads the zero padding,
    which oneDNN skips: the useful FLOPs count the taps inside, 2·d² each (per batch row)."""
    n, d, k, batch = 37, 24, 5, 2
    cfg = LayerConfig.of(d, k=k, dilation=dilation)
    step = dilation or 1
    inside = sum(1 for i in range(n) for j in range(k) if 0 <= i + (j - 2) * step < n)
    assert models.analytic_useful_flops(layer, batch, n, cfg) == 2 * batch * d * d * inside
    assert inside < n * k  # some taps fall in the padding at n = 37
    train = models.analytic_useful_flops(layer, batch, n, cfg, "train")
    assert train == round(models.analytic_flops(layer, batch, n, cfg, "train") * inside / (n * k))


def test_useful_flops_of_the_separable_convolution_and_of_layers_without_them():
    n, d, k, batch = 37, 24, 7, 2
    inside = sum(1 for i in range(n) for j in range(k) if 0 <= i + j - 3 < n)
    cfg = LayerConfig.of(d, k=k)
    assert models.analytic_useful_flops("conv_separable", batch, n, cfg) == 2 * batch * d * (inside + n * d)
    assert models.analytic_useful_flops("lstm", batch, n, LayerConfig(d=d)) is None
