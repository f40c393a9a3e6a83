"""Causal forms and the decode step of every layer: token-by-token decoding equals the causal forward, the state's
bytes and a step's FLOPs against formulas written out by hand, and the operator-level count of both."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

import numpy as np
import pytest
import torch
from torch.testing import assert_close

import models
import models.split_kv
from bench.flops import count_flops
from bench.memory import measure_memory
from models import LayerConfig
from models.split_kv import (
    MIN_SPLIT_KEYS,
    SPLIT_WAVES,
    TRIED_SPLITS,
    chosen_step,
    kv_splits,
    split_kv_attention,
    split_kv_op,
    split_kv_triton,
)

NAMES = list(models.LAYERS)
BATCH, D, HEADS, K, WINDOW, DILATION = 2, 24, 3, 3, 5, 3
PREFIX = 10  # positions read by prefill before stepping

# Decoding against the causal forward, measured over 8 seeds at n = 300: float32 agrees to 3e-6 (the scan, whose
# parallel scan adds in another order), bfloat16 to 1e-2 on outputs and 1.5e-2 on linear attention's summed state
# (10 steps each rounded against one product rounded once). The bfloat16 scan is checked apart (see below).
TOLERANCE = {
    "float32": dict(atol=1e-5, rtol=1e-5),
    "bfloat16": dict(atol=3e-2, rtol=2e-2),
}
CASES = [(dtype, name) for dtype in TOLERANCE for name in NAMES if (dtype, name) != ("bfloat16", "scan")]
CACHED_NAMES = ["attention", "attention_math", "attention_split", "attention_local"]


def _cfg(dtype: str = "float32", causal: bool = True) -> LayerConfig:
    return LayerConfig(d=D, k=K, heads=HEADS, window=WINDOW, dilation=DILATION, dtype=dtype, causal=causal)


def _tokens(n: int, dtype: str = "float32", seed: int = 0) -> torch.Tensor:
    x = torch.randn(BATCH, n, D, generator=torch.Generator().manual_seed(seed))
    return x.to(LayerConfig(d=D, dtype=dtype).torch_dtype)


def _decode(layer, x: torch.Tensor, start: int = 0) -> tuple[torch.Tensor, tuple[torch.Tensor, ...]]:
    """prefill(x[:, :start]) into a static cache with room for x and one more, then one step per position: (the outputs of
    positions start.., the cache as the last step left it)."""
    n = x.shape[1]
    cache = layer.cache(layer.prefill(x[:, :start]), start, n + 1)
    outputs = [layer.step(x[:, t : t + 1], cache, t) for t in range(start, n)]
    return (torch.cat(outputs, dim=1) if outputs else x[:, :0]), cache


@pytest.mark.parametrize("n", [37, 300])
@pytest.mark.parametrize("dtype,name", CASES)
def test_decoding_token_by_token_equals_the_causal_forward(dtype, name, n):
    cfg = _cfg(dtype)
    layer, x = models.build(name, cfg), _tokens(n, dtype)
    with torch.inference_mode():
        forward = layer(x)
        decoded, _ = _decode(layer, x)
        from_prefix, _ = _decode(layer, x, PREFIX)
        _, stepped = _decode(layer, x[:, :PREFIX])
        prefilled = layer.cache(layer.prefill(x[:, :PREFIX]), PREFIX, PREFIX + 1)
    assert decoded.shape == forward.shape == (BATCH, n, D)
    assert_close(decoded, forward, **TOLERANCE[dtype])
    assert_close(from_prefix, forward[:, PREFIX:], **TOLERANCE[dtype])
    assert len(stepped) == len(prefilled)
    for reached, read in zip(stepped, prefilled):  # steps reach the cache prefill lays out
        if name in CACHED:  # but for the slot the next step writes (a ring's: a position past its window)
            reached, read = (c.clone().index_fill_(2, torch.tensor([PREFIX % c.shape[2]]), 0) for c in (reached, read))
        assert_close(reached, read, **TOLERANCE[dtype])
    assert models.state_bytes(layer.prefill(x[:, :PREFIX])) == models.analytic_decode_state_bytes(
        name, BATCH, PREFIX, cfg
    )


@pytest.mark.parametrize("name", CACHED_NAMES)
def test_a_cached_attentions_decode_equals_the_causal_forward_at_1000(name):
    """Past a few of the split-KV step's 256-key chunks; the cache made for all 1000 positions at once."""
    layer, x = models.build(name, _cfg()), _tokens(1000)
    with torch.inference_mode():
        assert_close(_decode(layer, x, PREFIX)[0], layer(x)[:, PREFIX:], **TOLERANCE["float32"])


def test_the_scans_bfloat16_decode_strays_from_float32_no_more_than_its_bfloat16_forward():
    """A bfloat16 recurrence with a memory of up to 100 steps (decay 0.99) accumulates rounding: its parallel scan
    and its step-by-step decode both stray from the float32 result, at n = 300 by up to 10 % of the output's range,
    each its own way; so both are held to the float32 result, not to each other."""
    for seed in range(3):
        low, high = models.build("scan", _cfg("bfloat16"), seed=seed), models.build("scan", _cfg(), seed=seed)
        x = _tokens(300, "bfloat16", seed)
        with torch.inference_mode():
            truth = high(x.float())
            forward_error = (low(x).float() - truth).abs().max().item()
            decode_error = (_decode(low, x)[0].float() - truth).abs().max().item()
        assert decode_error <= 2 * forward_error + 0.05
        assert decode_error <= 0.1 * truth.abs().max().item()


@pytest.mark.parametrize("grad_mode", [torch.no_grad, torch.inference_mode], ids=["no_grad", "inference"])
@pytest.mark.parametrize("name", NAMES)
def test_prefill_and_step_run_under_either_grad_mode(name, grad_mode):
    layer, x = models.build(name, _cfg()), _tokens(12)
    with grad_mode():
        decoded, _ = _decode(layer, x, 3)
        assert_close(decoded, layer(x)[:, 3:], **TOLERANCE["float32"])


@pytest.mark.parametrize("name", NAMES)
def test_the_causal_forward_does_not_look_ahead(name):
    n = 37
    x = _tokens(n)
    causal, centered = models.build(name, _cfg()), models.build(name, _cfg(causal=False))
    for i in (0, 17, n - 2):
        changed = x.clone()
        changed[:, i + 1 :] = torch.randn(BATCH, n - i - 1, D, generator=torch.Generator().manual_seed(i))
        with torch.inference_mode():
            before, after = causal(x), causal(changed)
            assert_close(after[:, : i + 1], before[:, : i + 1], atol=1e-6, rtol=1e-6)
            assert not torch.allclose(after[:, i + 1 :], before[:, i + 1 :])
            if name not in models.stepwise():  # the non-causal form sees ahead: the flag matters
                assert not torch.allclose(centered(changed)[:, : i + 1], centered(x)[:, : i + 1])


# The layers whose state is a cache of positions: a step at t writes slot t, so the same step twice is one step.
CACHED = [name for name in NAMES if name.startswith("attention") and name != "attention_linear"]


@pytest.mark.parametrize("name", NAMES)
def test_a_step_writes_its_cache_in_place(name):
    layer, x = models.build(name, _cfg()), _tokens(PREFIX + 1)
    with torch.inference_mode():
        cache = layer.cache(layer.prefill(x[:, :PREFIX]), PREFIX, 4 * PREFIX)
        where = [(c.data_ptr(), c.shape) for c in cache]
        first = layer.step(x[:, PREFIX:], cache, PREFIX)
        after_first = tuple(c.clone() for c in cache)
        again = layer.step(x[:, PREFIX:], cache, PREFIX)  # as a benchmark calls it: the same step every time
    assert [(c.data_ptr(), c.shape) for c in cache] == where  # the same buffers: nothing reallocated or grown
    if name in CACHED:
        assert torch.equal(first, again)
        assert all(torch.equal(a, c) for a, c in zip(after_first, cache))
    else:  # a recurrence's state moves on with every step, in place
        assert first.shape == again.shape == (BATCH, 1, D)


def test_a_restricted_cache_is_a_ring_of_its_window():
    layer = models.build("attention_local", _cfg())
    with torch.inference_mode():
        cache = layer.cache(layer.prefill(_tokens(50)), 50, 1000)
    assert cache[0].shape == (BATCH, HEADS, WINDOW, D // HEADS)
    with pytest.raises(ValueError, match="no room for position t = 8"):
        models.build("attention", _cfg()).cache(layer.prefill(_tokens(8)), 8, 8)


@pytest.mark.parametrize("name", ["attention", "attention_local"])
@pytest.mark.parametrize("t", [0, 3, WINDOW - 1, WINDOW, WINDOW + 2, 3 * WINDOW + 1])
def test_a_cache_holds_position_p_in_slot_p_mod_slots_and_zeros_elsewhere(name, t):
    """Against the rule written as one index per position: the slices (a ring's two runs) and the zeroed rest."""
    layer = models.build(name, _cfg())
    with torch.inference_mode():
        state = layer.prefill(_tokens(t))
        cache = layer.cache(state, t, t + 4)
    slots = cache[0].shape[2]
    for part, buffer in zip(state, cache):
        expected = torch.zeros_like(buffer)
        for i, p in enumerate(range(t - part.shape[2], t)):
            expected[:, :, p % slots] = part[:, :, i]
        assert torch.equal(buffer, expected)


@pytest.mark.parametrize("t", [1, 37, 300, 1001])
@pytest.mark.parametrize("splits", [1, 2, 3, 7, 16])
def test_split_kv_attention_equals_the_fused_step(t, splits):
    g = torch.Generator().manual_seed(t * 31 + splits)
    q = torch.randn(2, 3, 1, 16, generator=g)
    keys, values = (torch.randn(2, 3, t, 16, generator=g) for _ in range(2))
    fused = torch.nn.functional.scaled_dot_product_attention(q, keys, values)
    assert_close(split_kv_attention(q, keys, values, splits), fused, atol=1e-5, rtol=1e-5)
    padded = [torch.cat((c, torch.randn(2, 3, 2 * splits + 5, 16, generator=g)), 2) for c in (keys, values)]
    assert_close(split_kv_attention(q, *padded, splits, seen=t), fused, atol=1e-5, rtol=1e-5)  # the rest masked
    counted = count_flops(lambda: split_kv_attention(q, keys, values, splits))
    assert counted.total == 2 * (2 * 2 * 3 * t * 16) and counted.uncounted_ops == ()  # q·K and p·V, as fused
    as_op = count_flops(lambda: split_kv_op(q, *padded, splits, t))  # the op's formula: every slot, masked too
    assert as_op.total == 2 * (2 * 2 * 3 * padded[0].shape[2] * 16) and as_op.uncounted_ops == ()


@pytest.mark.cuda
@pytest.mark.skipif(split_kv_triton is None, reason="Triton is not installed")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("t", [1, 37, 300, 5000])
@pytest.mark.parametrize("splits", [1, 3, 16])
def test_the_triton_split_kv_kernel_equals_the_fused_step(t, splits, dtype):
    g = torch.Generator().manual_seed(t + splits)
    width = 64 if t < 5000 else 24  # 24: a head width that is no power of two
    q, keys, values = (torch.randn(2, 3, m, width, generator=g).cuda() for m in (1, t + 300, t + 300))
    q, keys, values = (x.to(getattr(torch, dtype)) for x in (q, keys, values))
    fused = torch.nn.functional.scaled_dot_product_attention(q, keys[:, :, :t], values[:, :, :t])
    assert_close(split_kv_op(q, keys, values, splits, t), fused, **TOLERANCE[dtype])  # the op runs the kernel
    assert_close(split_kv_triton(q, keys, values, splits, t), fused, **TOLERANCE[dtype])


def test_splits_0_is_the_devices_s():
    g = torch.Generator().manual_seed(5)
    q, keys, values = (torch.randn(2, 3, m, 16, generator=g) for m in (1, 1024, 1024))
    rule = kv_splits("cpu", 6, 1024)
    assert chosen_step(keys.shape, keys.dtype, "cpu") == (rule, None)  # nothing timed on a CPU: the rule's S
    assert torch.equal(split_kv_op(q, keys, values, 0, 1000), split_kv_attention(q, keys, values, rule, 1000))


@pytest.mark.cuda
@pytest.mark.skipif(split_kv_triton is None, reason="Triton is not installed")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_on_cuda_the_device_times_its_step_once_per_cache_shape(dtype):
    g = torch.Generator().manual_seed(3)
    q, keys, values = (torch.randn(4, 8, m, 64, generator=g).cuda().to(getattr(torch, dtype)) for m in (1, 8192, 8192))
    fused = torch.nn.functional.scaled_dot_product_attention(q, keys[:, :, :8000], values[:, :, :8000])
    assert_close(split_kv_op(q, keys, values, 0, 8000), fused, **TOLERANCE[dtype])
    rule = kv_splits(keys.device, 32, 8192)
    tried = {min(8192 // MIN_SPLIT_KEYS, max(1, int(rule * f))) for f in TRIED_SPLITS}
    splits, launches = chosen_step(keys.shape, keys.dtype, keys.device)
    assert splits in tried and launches in (1, 2)
    chosen = dict(models.split_kv._CHOSEN)
    split_kv_op(q, keys, values, 0, 100)  # another step on the same cache: no new timing
    assert models.split_kv._CHOSEN == chosen


@pytest.mark.cuda
@pytest.mark.skipif(split_kv_triton is None, reason="Triton is not installed")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("splits", [1, 5, 64])
def test_the_one_launch_kernel_equals_the_fused_step_call_after_call(splits, dtype):
    """The merge by the row's last program: each call's own partials, never the call before's (queries change)."""
    from models import split_kv_kernel

    g = torch.Generator().manual_seed(splits)
    keys, values = (torch.randn(2, 4, 20000, 64, generator=g).cuda().to(getattr(torch, dtype)) for _ in range(2))
    split_kv_triton(keys[:, :, :1], keys, values, splits, 19000)  # two launches first: the tile one launch takes
    for step in range(6):
        q = torch.randn(2, 4, 1, 64, generator=g).cuda().to(keys.dtype) * (1 + step)
        fused = torch.nn.functional.scaled_dot_product_attention(q, keys[:, :, :19000], values[:, :, :19000])
        assert_close(split_kv_triton(q, keys, values, splits, 19000, True), fused, **TOLERANCE[dtype])
    assert int(split_kv_kernel._COUNTS[keys.device].abs().sum()) == 0  # every row's count left at 0


@pytest.mark.skipif(split_kv_triton is None, reason="Triton is not installed")
@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("one_launch", [False, True])
def test_the_triton_kernel_builds_for_a_hopper_gpu_with_16_byte_loads(dtype, one_launch):
    """Triton compiles for sm_90 without a GPU: a kernel that does not build, or streams its cache by narrow loads
    (16-bit loads held bfloat16 to 72 % of the bound on an H200), shows before a GPU session."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from models import split_kv_kernel

    names = split_kv_kernel._chunk_kernel.arg_names
    ints = dict(seen=32768, chunk=1024, chunk_log2=11, heads=8, sq_b=512, sq_h=64, sk_b=2**24, sk_h=2**21, sk_t=64)
    ints |= dict(sv_b=2**24, sv_h=2**21, sv_t=64)
    signature = {name: f"*{dtype}" if name.endswith("_ptr") else "i32" for name in names}
    signature |= dict(acc_ptr="*fp32", top_ptr="*fp32", sum_ptr="*fp32", count_ptr="*i32", scale="fp32")
    sizes = dict(WIDTH=64, WIDTH_P2=64, ON_CORES=dtype == "bf16", MERGE=one_launch, PARTS_P2=32, ROWS=128)
    signature |= {name: "constexpr" for name in sizes}
    # Triton's own hints at launch: pointers 16-byte aligned, integers that are multiples of 16
    aligned = [i for i, name in enumerate(names) if "_ptr" in name or ints.get(name, 1) % 16 == 0]
    aligned = {(i,): [["tt.divisibility", 16]] for i in aligned}
    source = ASTSource(fn=split_kv_kernel._chunk_kernel, signature=signature, constexprs=sizes, attrs=aligned)
    ptx = triton.compile(source, target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4, num_stages=3)).asm["ptx"]
    streamed = (
        r"cp\.async\.cg\.shared\.global \[[^]]*\], \[[^]]*\], 0x10" if dtype == "bf16" else r"ld\.global\.v4\.b32"
    )
    assert re.search(streamed, ptx)  # 16 bytes a thread
    assert ("atom.global.gpu.acq_rel.add" in ptx) == one_launch


def test_the_number_of_splits_follows_the_cores_and_keeps_chunks_long():
    wanted = SPLIT_WAVES * torch.get_num_threads()
    power = 1 << (wanted - 1).bit_length()  # the power of two at or above it
    assert kv_splits("cpu", 1, 2**20) == power
    assert kv_splits("cpu", 10**6, 2**20) == 1  # batch × heads already fill the cores
    assert kv_splits("cpu", 1, 3 * MIN_SPLIT_KEYS) == min(2, power)  # a power of two dividing 3·256 slots
    assert kv_splits("cpu", 1, 10) == 1


def test_a_split_kv_cache_is_whole_chunks():
    layer = models.build("attention_split", _cfg())
    with torch.inference_mode():
        cache = layer.cache(layer.prefill(_tokens(7)), 7, 300)
    assert cache[0].shape[2] == 512 and 512 % kv_splits("cpu", BATCH * HEADS, 512) == 0


def test_an_attention_step_at_4096_adds_under_half_its_cache_to_the_peak():
    """No copy of the cache: the step's own memory is its projections and one row of scores."""
    cfg = LayerConfig(d=64, heads=4, causal=True)
    t = 4096
    for name in CACHED:
        layer = models.build(name, dataclasses.replace(cfg, window=64))
        with torch.inference_mode():
            cache = layer.cache(layer.prefill(torch.randn(2, t, 64)), t, t + 1)
            token = torch.randn(2, 1, 64)
            memory = measure_memory(lambda: layer.step(token, cache, t), "cpu")
        cache_bytes = models.state_bytes(cache)
        assert memory.peak_bytes < cache_bytes / 2, (name, memory.peak_bytes, cache_bytes)


# The state after t positions, bytes per batch element, written out from what each layer must remember.
HAND_STATE_BYTES: dict[str, Callable[[int, LayerConfig, int], int]] = {
    "conv": lambda t, c, e: (c.k - 1) * c.d * e,  # the last k − 1 inputs (zeros before position 0)
    "conv_dilated": lambda t, c, e: (c.k - 1) * c.dilation * c.d * e,  # the span of its k taps
    "conv_separable": lambda t, c, e: (c.k - 1) * c.d * e,  # the depthwise kernel's inputs
    "rnn": lambda t, c, e: c.d * e,  # h
    "gru": lambda t, c, e: c.d * e,  # h
    "lstm": lambda t, c, e: 2 * c.d * e,  # h and the cell c
    "attention": lambda t, c, e: 2 * t * c.d * e,  # every key and value
    "attention_math": lambda t, c, e: 2 * t * c.d * e,
    "attention_split": lambda t, c, e: 2 * t * c.d * e,
    "attention_local": lambda t, c, e: 2 * min(t, c.window - 1) * c.d * e,  # those the next r − 1 queries see
    "attention_linear": lambda t, c, e: (c.heads * (c.d // c.heads) ** 2 + c.d) * e,  # Σ φ(k)vᵀ and Σ φ(k), a head
    "scan": lambda t, c, e: c.d * e,  # h
}

# One step's FLOPs at position t (the state holds t positions), whole batch: 2 per multiply-accumulate.
HAND_DECODE_FLOPS: dict[str, Callable[[int, int, LayerConfig], int]] = {
    "conv": lambda b, t, c: 2 * b * c.k * c.d * c.d,  # one output: k taps of a d×d matrix
    "conv_dilated": lambda b, t, c: 2 * b * c.k * c.d * c.d,
    "conv_separable": lambda b, t, c: 2 * b * c.k * c.d + 2 * b * c.d * c.d,  # k taps a channel, then d×d
    "rnn": lambda b, t, c: 2 * b * (c.d * c.d + c.d * c.d),  # W_ih x_t and W_hh h_{t−1}
    "gru": lambda b, t, c: 3 * 2 * b * (c.d * c.d + c.d * c.d),
    "lstm": lambda b, t, c: 4 * 2 * b * (c.d * c.d + c.d * c.d),
    "attention": lambda b, t, c: 4 * 2 * b * c.d * c.d + 2 * (2 * b * (t + 1) * c.d),  # q·K and p·V over t + 1
    "attention_math": lambda b, t, c: 4 * 2 * b * c.d * c.d + 2 * (2 * b * (t + 1) * c.d),
    # every slot of a cache of whole 256-key chunks, those past t masked
    "attention_split": lambda b, t, c: 4 * 2 * b * c.d * c.d + 2 * (2 * b * 256 * -(-(t + 1) // 256) * c.d),
    "attention_local": lambda b, t, c: 4 * 2 * b * c.d * c.d + 2 * (2 * b * min(t + 1, c.window) * c.d),
    # φ(k)vᵀ added to the state, φ(q)·S and φ(q)·z, per head of size e = d / h
    "attention_linear": lambda b, t, c: 4 * 2 * b * c.d * c.d + 2 * 2 * b * c.d * (c.d // c.heads) + 2 * b * c.d,
    "scan": lambda b, t, c: 2 * 2 * b * c.d * c.d,  # B x_t and C h_t; the decay is element-wise
}


def test_every_layer_has_its_hand_formulas():
    assert set(HAND_STATE_BYTES) == set(HAND_DECODE_FLOPS) == set(NAMES)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("t", [0, 1, 4, 37, 300])
@pytest.mark.parametrize("name", NAMES)
def test_the_states_bytes_equal_the_hand_formula(name, t, dtype):
    cfg = _cfg(dtype)
    layer = models.build(name, cfg)
    with torch.inference_mode():
        state = layer.prefill(_tokens(t, dtype))
    by_hand = BATCH * HAND_STATE_BYTES[name](t, cfg, cfg.elem_bytes)
    assert isinstance(state, tuple) and all(isinstance(s, torch.Tensor) for s in state)
    assert models.state_bytes(state) == by_hand
    assert models.analytic_decode_state_bytes(name, BATCH, t, cfg) == by_hand
    assert models.LAYERS[name].decode_state_bytes(BATCH, t, cfg, cfg.elem_bytes) == by_hand


@pytest.mark.parametrize("t", [0, 5, 37])
@pytest.mark.parametrize("name", NAMES)
def test_a_steps_counted_flops_equal_the_hand_formula(name, t):
    cfg = _cfg()
    layer, x = models.build(name, cfg), _tokens(t + 1)
    with torch.inference_mode():
        state = layer.prefill(x[:, :t])
        cache = layer.cache(state, t, t + 1)

    def one_step():
        with torch.inference_mode():
            layer.step(x[:, t:], cache, t)

    counted = count_flops(one_step)
    assert counted.uncounted_ops == ()
    assert counted.total == HAND_DECODE_FLOPS[name](BATCH, t, cfg)
    assert models.analytic_decode_flops(name, BATCH, t, cfg) == counted.total


def test_a_decode_step_in_plain_numbers():
    cfg = _cfg()  # b = 2, d = 24, h = 3 (e = 8), r = 5, t = 5
    assert models.analytic_decode_flops("attention", 2, 5, cfg) == 8 * 2 * 576 + 4 * 2 * 6 * 24 == 10_368
    assert models.analytic_decode_flops("attention_local", 2, 5, cfg) == 9216 + 4 * 2 * 5 * 24 == 10_176
    assert models.analytic_decode_flops("attention_linear", 2, 5, cfg) == 9216 + 4 * 2 * 24 * 8 + 4 * 24 == 10_848
    assert models.analytic_decode_state_bytes("attention", 2, 5, cfg) == 2 * 2 * 5 * 24 * 4 == 1920


@pytest.mark.parametrize("n", [37, 300])
@pytest.mark.parametrize("name", NAMES)
def test_the_causal_forwards_counted_flops_equal_flops(name, n):
    cfg = _cfg()
    layer, x = models.build(name, cfg), _tokens(n)

    def forward():
        with torch.inference_mode():
            layer(x)

    counted = count_flops(forward)
    assert counted.uncounted_ops == ()
    assert counted.total == models.analytic_flops(name, BATCH, n, cfg) == models.analytic_flops(name, BATCH, n, _cfg())


@pytest.mark.parametrize("n", [37, 300])
def test_useful_flops_of_the_causal_forms_by_hand(n):
    cfg, b, d, k, r, dil = _cfg(), BATCH, D, K, WINDOW, DILATION
    projections = 4 * 2 * b * n * d * d
    taps = sum(1 for i in range(n) for j in range(k) if i - j >= 0)  # output i's tap j reads i − j·dilation
    dilated_taps = sum(1 for i in range(n) for j in range(k) if i - j * dil >= 0)
    window = sum(1 for i in range(n) for j in range(i - r + 1, i + 1) if j >= 0)  # keys i − r + 1 .. i
    assert window == n * r - r * (r - 1) // 2
    useful = {
        "conv": 2 * b * d * d * taps,
        "conv_dilated": 2 * b * d * d * dilated_taps,
        "conv_separable": 2 * b * d * (taps + n * d),
        "attention": projections + 2 * 2 * b * (n * (n + 1) // 2) * d,  # the pairs j <= i
        "attention_split": projections + 2 * 2 * b * (n * (n + 1) // 2) * d,
        "attention_math": projections + 2 * 2 * b * (n * (n + 1) // 2) * d,
        "attention_local": projections + 2 * 2 * b * window * d,
    }
    for name, by_hand in useful.items():
        assert models.analytic_useful_flops(name, b, n, cfg) == by_hand, name
    for name in ("attention", "attention_math"):  # non-causal: nothing skipped, no useful FLOPs of their own
        assert models.analytic_useful_flops(name, b, n, _cfg(causal=False)) is None


@pytest.mark.parametrize(
    "name, compute, state, sizes, cost, state_size",
    [  # at t = 100, d = 8, k = 5, r = 16, dilation 3
        ("conv", "O(k·d²)", "O(k·d)", ("k",), 5 * 64, 5 * 8),
        ("conv_dilated", "O(k·d²)", "O(k·δ·d)", ("k", "dilation"), 5 * 64, 5 * 3 * 8),
        ("conv_separable", "O(k·d + d²)", "O(k·d)", ("k",), 5 * 8 + 64, 5 * 8),
        ("rnn", "O(d²)", "O(d)", (), 64, 8),
        ("gru", "O(d²)", "O(d)", (), 64, 8),
        ("lstm", "O(d²)", "O(d)", (), 64, 8),
        ("attention", "O(t·d)", "O(t·d)", (), 800, 800),
        ("attention_math", "O(t·d)", "O(t·d)", (), 800, 800),
        ("attention_split", "O(t·d)", "O(t·d)", (), 800, 800),
        ("attention_local", "O(r·d)", "O(r·d)", ("window",), 128, 128),
        ("attention_linear", "O(d²)", "O(d²)", (), 64, 64),
        ("scan", "O(d²)", "O(d)", (), 64, 8),
    ],
)
def test_each_layer_carries_its_decode_row(name, compute, state, sizes, cost, state_size):
    row = models.LAYERS[name].decode
    assert isinstance(row, models.DecodeRow) and row.source
    assert (row.compute_text, row.state_text, row.sizes) == (compute, state, sizes)
    assert set(row.sizes) <= set(models.LAYERS[name].uses)
    assert row.cost(100, 8, 5, 16, 3) == pytest.approx(cost)
    assert row.state_size(100, 8, 5, 16, 3) == pytest.approx(state_size)
    assert row.cost(np.array([100, 200]), 8, 5, 16, 3).shape == (2,)
    assert row.fit_t_over_d == (8 if name in ("attention", "attention_math", "attention_split") else None)


def test_a_stored_causal_flag_reads_back_as_a_bool():
    for stored, causal in [(True, True), (np.True_, True), ("True", True), (1.0, True), (False, False)]:
        assert LayerConfig.of(8, causal=stored, k=5.0).causal is causal
    for missing in (None, float("nan")):
        assert LayerConfig.of(8, causal=missing).causal is False
    assert LayerConfig.of(8, k=5.0) == LayerConfig(d=8, k=5) and LayerConfig(d=8).causal is False


def test_a_decode_points_prefix_is_a_drawn_block_repeated(monkeypatch):
    """bench.point.decode_call prefills n positions from DRAWN_POSITIONS drawn tokens, repeated: drawing all of 2^21
    positions took a second of each visit, and a step's time does not depend on the values."""
    from bench import point
    from bench.spec import PointSpec

    monkeypatch.setattr(point, "DRAWN_POSITIONS", 16)
    spec = PointSpec("lstm", n=40, d=D, batch=BATCH, mode="decode")
    layer = models.build("lstm", spec.config())
    seen = []
    monkeypatch.setattr(layer, "prefill", lambda x: seen.append(x) or type(layer).prefill(layer, x))
    call, _ = point.decode_call(spec, layer, seed=0)
    (x,) = seen
    assert x.shape == (BATCH, 40, D) and torch.equal(x[:, 16:32], x[:, :16]) and torch.equal(x[:, 32:], x[:, :8])
    assert not torch.equal(x[:, :8], x[:, 8:16])  # drawn, not constant
    with torch.inference_mode():
        assert call().shape == (BATCH, 1, D)
