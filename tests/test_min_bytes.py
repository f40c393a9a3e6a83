"""models' min_bytes, a roofline's memory side: the bytes one forward moves at the least, against formulas written
out by hand. Compulsory: x read, y written, every weight and bias read once; a stored intermediate written and read
back, and a recurrence's W_hh read at every step, only where larger than the cache."""

from collections.abc import Callable

import pytest

import models
from models import LayerConfig

BATCH = 2
CFG = LayerConfig(d=24, k=3, heads=3, window=5, dilation=2)  # head size e = 8
SMALL_CACHE_BYTES = 1024  # below every b·n·d tensor and every W_hh here: they spill

# Compulsory bytes at b = 2, d = 24 (3 heads, k = 3), e bytes an element: x and y (2·2·n·24), then the parameters.
HAND_COMPULSORY_BYTES: dict[str, Callable[[int, int], int]] = {
    "conv": lambda n, e: (2 * 2 * n * 24 + 24 * 24 * 3 + 24) * e,  # taps d·d·k, bias d
    "conv_dilated": lambda n, e: (2 * 2 * n * 24 + 24 * 24 * 3 + 24) * e,  # dilation spreads the taps, adds none
    "conv_separable": lambda n, e: (2 * 2 * n * 24 + 24 * 3 + 24 + 24 * 24 + 24) * e,  # depthwise d·k, pointwise d×d
    "rnn": lambda n, e: (2 * 2 * n * 24 + 2 * 24 * 24 + 2 * 24) * e,  # W_ih, W_hh (d×d), b_ih, b_hh
    "gru": lambda n, e: (2 * 2 * n * 24 + 2 * 72 * 24 + 2 * 72) * e,  # 3 gate blocks: 3d = 72 rows
    "lstm": lambda n, e: (2 * 2 * n * 24 + 2 * 96 * 24 + 2 * 96) * e,  # 4 gate blocks: 4d = 96 rows
    "attention": lambda n, e: (2 * 2 * n * 24 + 4 * (24 * 24 + 24)) * e,  # Q, K, V, output projections
    "attention_split": lambda n, e: (2 * 2 * n * 24 + 4 * (24 * 24 + 24)) * e,
    "attention_math": lambda n, e: (2 * 2 * n * 24 + 4 * (24 * 24 + 24)) * e,
    "attention_local": lambda n, e: (2 * 2 * n * 24 + 4 * (24 * 24 + 24)) * e,
    "attention_linear": lambda n, e: (2 * 2 * n * 24 + 4 * (24 * 24 + 24)) * e,
    "scan": lambda n, e: (2 * 2 * n * 24 + 2 * (24 * 24 + 24) + 24) * e,  # B, C and the 24 decays
}

# Scores a head computes in attention_local at r = 5: at n = 37 one dense 37×37 block; at n = 300, 10 blocks of
# 32 queries × (32 + 5 − 1) keys. Each is one chunk (all 6 heads of the batch: far below its 4 MiB).
LOCAL_PAIRS = {37: 37 * 37, 300: 10 * 32 * 36}

# What SMALL_CACHE_BYTES adds in float32: a stored tensor's write and read (2·), W_hh's n − 1 more reads.
HAND_SPILLED_FLOAT32_BYTES: dict[str, Callable[[int], int]] = {
    "conv": lambda n: 0,
    "conv_dilated": lambda n: 0,
    "conv_separable": lambda n: 2 * (2 * n * 24 * 4),  # the depthwise output
    "rnn": lambda n: (n - 1) * (24 * 24 * 4) + 2 * (2 * n * 24 * 4),  # W_hh; W_ih·x of all steps, (b, n, d)
    "gru": lambda n: (n - 1) * (72 * 24 * 4) + 2 * (2 * n * 72 * 4),
    "lstm": lambda n: (n - 1) * (96 * 24 * 4) + 2 * (2 * n * 96 * 4),
    "attention": lambda n: 4 * 2 * (2 * n * 24 * 4),  # q, k, v and the mixed heads; no scores
    "attention_split": lambda n: 4 * 2 * (2 * n * 24 * 4),
    "attention_math": lambda n: 4 * 2 * (2 * n * 24 * 4) + 2 * 2 * (2 * 3 * n * n * 4),  # + scores, softmax
    "attention_local": lambda n: 4 * 2 * (2 * n * 24 * 4) + 2 * 2 * (2 * 3 * LOCAL_PAIRS[n] * 4),
    # + the state φ(K)ᵀV, 2·3·8·8 elements; the normaliser φ(K)ᵀ1, 2·24·4 = 192 bytes, stays in the cache
    "attention_linear": lambda n: 4 * 2 * (2 * n * 24 * 4) + 2 * (2 * 3 * 8 * 8 * 4),
    "scan": lambda n: 2 * 2 * (2 * n * 24 * 4),  # B·x and h
}


def test_every_layer_has_its_hand_formulas():
    """A new layer fails here until its minimal bytes are written by hand."""
    for table, where in (
        (HAND_COMPULSORY_BYTES, "HAND_COMPULSORY_BYTES"),
        (HAND_SPILLED_FLOAT32_BYTES, "HAND_SPILLED_FLOAT32_BYTES"),
    ):
        missing = [name for name in models.LAYERS if name not in table]
        assert not missing, f"write the minimal bytes of {missing} by hand in {where}, tests/test_min_bytes.py"


@pytest.mark.parametrize("n", [37, 300])
@pytest.mark.parametrize("name", list(models.LAYERS))
def test_min_bytes_equal_the_hand_formula_in_float32(name, n):
    cls = models.LAYERS[name]
    compulsory = HAND_COMPULSORY_BYTES[name](n, 4)
    assert cls.min_bytes(BATCH, n, CFG, 4) == compulsory
    assert cls.min_bytes(BATCH, n, CFG, 4, None) == compulsory
    spilled = compulsory + HAND_SPILLED_FLOAT32_BYTES[name](n)
    assert cls.min_bytes(BATCH, n, CFG, 4, SMALL_CACHE_BYTES) == spilled
    assert models.analytic_min_bytes(name, BATCH, n, CFG, SMALL_CACHE_BYTES) == spilled
    assert cls.min_bytes(BATCH, n, CFG, 4, 10**9) == compulsory  # a cache that holds everything


@pytest.mark.parametrize("name", list(models.LAYERS))
def test_min_bytes_in_bfloat16_are_two_bytes_an_element(name):
    cfg = LayerConfig(d=24, k=3, heads=3, window=5, dilation=2, dtype="bfloat16")
    assert models.analytic_min_bytes(name, BATCH, 37, cfg) == HAND_COMPULSORY_BYTES[name](37, 2)


def test_in_bfloat16_the_linear_attentions_state_fits_a_cache_its_float32_state_leaves():
    # b = 2, n = 37, d = 24: q, k, v and the mixed heads 2·37·24·2 = 3,552 bytes each, over 1,024; the state
    # φ(K)ᵀV 2·3·8·8·2 = 768 bytes, under it (1,536 in float32, over).
    cfg = LayerConfig(d=24, heads=3, dtype="bfloat16")
    compulsory = (2 * 2 * 37 * 24 + 4 * (24 * 24 + 24)) * 2
    assert models.analytic_min_bytes("attention_linear", 2, 37, cfg, SMALL_CACHE_BYTES) == compulsory + 4 * 2 * 3552


def test_in_bfloat16_the_lstm_reads_its_hidden_weights_every_step():
    # W_hh: 96·24·2 = 4,608 bytes, over 1,024: read at each of the 300 steps. W_ih·x of all steps, 2·300·96·2 =
    # 115,200 bytes, stored and read back.
    cfg = LayerConfig(d=24, dtype="bfloat16")
    x_y_w_ih_biases = (2 * 2 * 300 * 24 + 96 * 24 + 2 * 96) * 2
    by_hand = x_y_w_ih_biases + 300 * 4608 + 2 * 115200
    assert models.analytic_min_bytes("lstm", 2, 300, cfg, SMALL_CACHE_BYTES) == by_hand
    just_fits = x_y_w_ih_biases + 4608 + 2 * 115200  # a cache of 4,608 bytes holds W_hh: read once
    assert models.analytic_min_bytes("lstm", 2, 300, cfg, 4608) == just_fits


@pytest.mark.parametrize("name", list(models.LAYERS))
def test_min_bytes_count_the_input_the_output_and_every_parameter(name):
    parameters = sum(p.numel() for p in models.build(name, CFG).parameters())
    for n in (37, 300):
        assert models.LAYERS[name].min_bytes(BATCH, n, CFG, 4) >= (2 * BATCH * n * 24 + parameters) * 4


def test_the_explicit_attention_moves_more_than_the_fused_where_its_scores_spill():
    # n = 4096: the scores are 2·3·4096·4096·4 bytes = 384 MiB, far over a 1 MiB cache; fused SDPA stores none.
    n, cache_bytes = 4096, 2**20
    fused = models.analytic_min_bytes("attention", BATCH, n, CFG, cache_bytes)
    explicit = models.analytic_min_bytes("attention_math", BATCH, n, CFG, cache_bytes)
    assert explicit - fused == 2 * 2 * (2 * 3 * 4096 * 4096 * 4)  # scores and softmax, each written and read
    fused_unknown = models.analytic_min_bytes("attention", BATCH, n, CFG)
    assert (
        models.analytic_min_bytes("attention_math", BATCH, n, CFG) == fused_unknown
    )  # an unknown cache counts no stored tensor


def test_local_attention_counts_each_chunk_of_scores_that_spills():
    # n = 4096, r = 256, d = 256, 4 heads, b = 1: 128 blocks of 32 queries × 287 keys, 36,736 bytes a block. A 4 MiB
    # chunk holds 114 blocks: each head is chunks of 114 blocks (4,187,904 bytes, over a 1 MiB cache) and of 14
    # (514,304 bytes, under it). q, k, v and the mixed heads: 4096·256·4 = 4 MiB each, over it.
    cfg = LayerConfig(d=256, heads=4, window=256)
    compulsory = (2 * 4096 * 256 + 4 * (256 * 256 + 256)) * 4
    by_hand = compulsory + 4 * 2 * (4096 * 256 * 4) + 4 * 2 * 2 * (114 * 32 * 287 * 4)
    assert models.analytic_min_bytes("attention_local", 1, 4096, cfg, 2**20) == by_hand


def _weights_bytes(name: str, e: int) -> int:
    """The weights of HAND_COMPULSORY_BYTES: its bytes at n = 0 (x and y vanish)."""
    return HAND_COMPULSORY_BYTES[name](0, e)


@pytest.mark.parametrize("name", list(models.LAYERS))
def test_a_layers_weights_by_hand(name):
    assert models.parameter_bytes(name, CFG) == _weights_bytes(name, 4)


@pytest.mark.parametrize("name", ["conv", "lstm", "attention", "attention_math"])
def test_a_training_call_moves_its_forward_its_gradients_and_its_weights_gradients(name):
    n = 37  # b·n·d = 1776 elements: upstream gradient read, input gradient written
    by_hand = HAND_COMPULSORY_BYTES[name](n, 4) + 2 * (2 * n * 24) * 4 + _weights_bytes(name, 4)
    assert models.analytic_train_min_bytes(name, BATCH, n, CFG) == by_hand


@pytest.mark.parametrize(
    "name, state",  # the state's bytes of t = 37 positions, float32 (tests/test_decode.py HAND_STATE_BYTES)
    [("lstm", 2 * 2 * 24 * 4), ("attention", 2 * 2 * 37 * 24 * 4), ("conv", 2 * 2 * 24 * 4)],
)
def test_a_decode_step_moves_its_state_its_weights_and_one_token(name, state):
    cfg = LayerConfig(d=24, k=3, heads=3, window=5, dilation=2, causal=True)
    by_hand = state + _weights_bytes(name, 4) + 2 * 2 * 24 * 4  # the token in and its output
    assert models.analytic_decode_min_bytes(name, BATCH, 37, cfg) == by_hand
