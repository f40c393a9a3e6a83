"""Counted FLOPs of one forward pass: torch.utils.flop_counter, extended to the fused kernels it misses.

Convention (the harness's, see the interface's Conventions): forward pass, whole batch, 2 FLOPs per
multiply-accumulate of every matrix product and convolution, the convention of
`torch.utils.flop_counter.FlopCounterMode`; biases, softmax, activations and gate arithmetic are not in
`FlopCount.total`. Causal or other masks are not discounted (as in FlopCounterMode).

Method. `count_flops(fn)` runs `fn()` once under a `FlopCounterMode` (a TorchDispatchMode) whose formula
table is torch's own plus `FLOP_FORMULAS` below. FlopCounterMode decomposes composite operators
(`linear`, `einsum`, `lstm`, `scaled_dot_product_attention`, ...) into the operators that really execute
and applies a formula to those. A second dispatch mode underneath it records every operator that
executes, so nothing that ran goes unseen. Every executed operator falls in exactly one class:

  counted         it has a formula (torch's registry or `FLOP_FORMULAS`): its FLOPs are in `total`;
  no matrix work  it is named in `NO_MATRIX_WORK_OPS` (views, copies, element-wise ops, reductions,
                  softmax, masking, joins, ...): it adds nothing to `total` by the convention;
  uncounted       anything else. It ran, it might multiply matrices and no formula says how much, so it
                  is reported in `FlopCount.uncounted_ops` and `total` is a lower bound. Never silently 0.

Memory: FlopCounterMode decomposes a composite it has no formula for, so a recurrence the CPU runs as a loop
of per-step operators (nn.RNN, nn.GRU; not the fused LSTM) is counted step by step; in bfloat16 or float16
that holds a copy of the gate weights per step until the call ends (g·d² elements a step: 8.6 GB for rnn at
n = 16384, d = 512), where float32 holds nothing that grows with n. bench.estimate.flop_count_bytes counts it,
so `run` warns before such a point; the counts themselves need the decomposition (it is what they count).

An operator joins `NO_MATRIX_WORK_OPS` only when it certainly does no matrix product or convolution.
The rule is applied to the operators that execute, so it counts what the kernels did: `torch.einsum`
computes a contraction over an index of size 1 (a window of one key, a head size of 1) as a broadcast
`mul`, which is element-wise and counts 0, whereas `matmul` keeps such a product a `bmm`.

What torch 2.13's FlopCounterMode misses, and so `FLOP_FORMULAS` adds (found by running every layer of
`models.LAYERS`; tests/test_flops.py checks each against a formula written out by hand):
  - CPU nn.LSTM runs one fused oneDNN kernel per layer and direction, `aten.mkldnn_rnn_layer`: 0 FLOPs.
    (CPU nn.RNN and nn.GRU run ATen's own loop of `addmm`/`mm`, which torch counts.)
  - CPU scaled_dot_product_attention runs `aten._scaled_dot_product_flash_attention_for_cpu`: 0 FLOPs.
  - On a GPU: cuDNN's `aten._cudnn_rnn` (and ROCm's `aten.miopen_rnn`); the flash, memory-efficient and
    cuDNN SDPA kernels are in torch's table, but `_scaled_dot_product_flash_attention` is counted on the
    head size PyTorch padded to a multiple of 8 before the CUDA flash kernel (attention.cpp,
    `pad_last_dim<8>`), so the count would depend on the kernel; our formula counts the unpadded size.
    `_thnn_fused_lstm_cell` / `_thnn_fused_gru_cell` (CUDA without cuDNN) only do gate arithmetic: the
    products before them are `mm`/`addmm`, so they are in `NO_MATRIX_WORK_OPS`.
  - Vector products torch leaves out: `dot`, `mv`, `addmv`, `addbmm` (what `matmul` becomes for 1-D
    operands).
The GPU formulas are written from the operator schemas and PyTorch's call sites; they are checked here
against the CPU's count of the same layer, not on a GPU.

Element-wise work (`FlopCount.elementwise`), a separate and rougher measure: 1 per output element of
every executed operator tagged `torch.Tag.pointwise` (copies such as `clone` excepted) and of every
softmax; a bias added inside a matrix product (`addmm`, convolution) is not seen. Work hidden inside
fused kernels is estimated from their shapes (`ELEMENTWISE_FORMULAS`): attention 2 per score (the
scaling and the softmax, as `attention_math` runs them), a recurrent layer the pointwise operations of
PyTorch's unfused cell (RNN.cpp) plus the input-bias addition, which is what ATen's own loop runs for
the matched one-layer, one-direction layers (stacked or bidirectional ones differ a little). None when a
fused kernel without an estimate ran.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from math import prod
from typing import Any, Literal

import torch
from torch._ops import OpOverload, OpOverloadPacket
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map
from torch.utils.flop_counter import FlopCounterMode, conv_flop_count, sdpa_backward_flop_count
from torch.utils.weak import WeakIdKeyDictionary

aten = torch.ops.aten

Shape = tuple[int, ...]  # what a formula gets for each tensor argument (FlopCounterMode's shape_wrapper)


@dataclass(frozen=True)
class FlopCount:
    total: int  # matrix-product and convolution FLOPs -> column flops_counted
    by_op: dict[str, int]  # FLOPs per counted aten op ("aten.addmm")
    uncounted_ops: tuple[str, ...]  # ops that ran, may do matrix work, and have no formula (sorted, unique)
    elementwise: int | None  # element-wise operations (module docstring); None if not measured


# ---------------------------------------------------------------------------------------------------
# FLOP formulas: one small pure function per operator family, on argument shapes. 2 FLOPs per MAC.


def attention_flop(query: Shape, key: Shape, value: Shape) -> int:
    """Q·Kᵀ then weights·V over every batch and head: (..., L, E) × (..., S, E) -> (..., L, S) -> (..., L, Ev).

    Batch and head dimensions are taken from the query, so grouped-query attention (fewer key/value
    heads, broadcast) counts every query head."""
    *batch_heads, q_len, head_dim = query
    kv_len, value_dim = key[-2], value[-1]
    return 2 * prod(batch_heads) * q_len * kv_len * (head_dim + value_dim)


def sdpa_flop(query: Shape, key: Shape, value: Shape, *args, out_shape=None, **kwargs) -> int:
    """Any fused scaled_dot_product_attention kernel whose first three arguments are q, k, v."""
    return attention_flop(query, key, value)


def recurrent_flop(input_shape: Shape, weights: Iterable[Shape]) -> int:
    """A fused recurrent layer: every token meets every weight matrix once (W_ih·x_t, W_hh·h_{t-1} and, with
    projections, W_hr·h_t), 2·tokens·Σ numel(W). Bias vectors (1-D) are not products and are skipped.

    tokens = all positions of the input but its feature axis: (T, B, in), (B, T, in) or packed (ΣT, in)."""
    tokens = prod(input_shape[:-1])
    return 2 * tokens * sum(prod(w) for w in weights if len(w) == 2)


def mkldnn_rnn_layer_flop(input_shape: Shape, w_ih: Shape, w_hh: Shape, *args, out_shape=None, **kwargs) -> int:
    """aten.mkldnn_rnn_layer: one layer, one direction of a oneDNN RNN/GRU/LSTM (CPU)."""
    return recurrent_flop(input_shape, (w_ih, w_hh))


def cudnn_rnn_flop(input_shape: Shape, weight: list[Shape], *args, out_shape=None, **kwargs) -> int:
    """aten._cudnn_rnn / aten.miopen_rnn: all layers and directions at once. `weight` is the flat list of
    every layer's [w_ih, w_hh, (b_ih, b_hh), (w_hr)] (RNN.cpp passes it with the flattened buffer)."""
    return recurrent_flop(input_shape, weight)


def mkldnn_rnn_layer_backward_flop(
    input_shape: Shape, w_ih: Shape, w_hh: Shape, *args, out_shape=None, **kwargs
) -> int:
    """aten.mkldnn_rnn_layer_backward: oneDNN's backward of one layer and direction forms, at every step, the
    gradients of the input (dG·W_ih), of the previous state (dG·W_hh, the initial state's too) and of both
    weights (dGᵀ·x, dGᵀ·h): each product the forward did, twice."""
    return 2 * recurrent_flop(input_shape, (w_ih, w_hh))


def cudnn_rnn_backward_flop(input_shape: Shape, weight: list[Shape], *args, out_shape=None, **kwargs) -> int:
    """aten._cudnn_rnn_backward / aten.miopen_rnn_backward: the input's, the states' and the weights'
    gradients of every layer and direction, twice the forward's products (as oneDNN's; written from the
    schema and cuDNN's documentation, checked against the CPU's count of the same layer, not on a GPU)."""
    return 2 * recurrent_flop(input_shape, weight)


def cpu_flash_attention_backward_flop(
    grad_out: Shape, query: Shape, key: Shape, value: Shape, *args, out_shape=None, **kwargs
) -> int:
    """aten._scaled_dot_product_flash_attention_for_cpu_backward: torch's formula for the flash kernels'
    backward (the scores recomputed, then dV, dP, dQ and dK: five products of the forward's size)."""
    return sdpa_backward_flop_count(grad_out, query, key, value)


def _channels_first(shape: Shape) -> list[int]:
    return [shape[1], shape[0], *shape[2:]]


def conv_backward_flop(
    grad_out: Shape,
    x: Shape,
    w: Shape,
    bias_sizes,
    stride,
    padding,
    dilation,
    transposed: bool,
    output_padding,
    groups: int,
    output_mask,
    out_shape=None,
    **kwargs,
) -> int:
    """aten.convolution_backward with groups. torch 2.13's formula counts the weight gradient as a dense
    convolution of every input channel with every output channel, `groups` times what a grouped kernel
    does (a depthwise convolution's weight gradient was counted d times over); the input gradient it
    counts right. Both as torch writes them, the weight gradient divided by `groups`."""
    count = 0
    if output_mask[0]:
        count += conv_flop_count(grad_out, w, out_shape[0], not transposed)
    if output_mask[1]:
        data, kernel = (grad_out, x) if transposed else (x, grad_out)
        dense = conv_flop_count(_channels_first(data), _channels_first(kernel), _channels_first(out_shape[1]), False)
        count += dense // groups
    return count


def dot_flop(a: Shape, b: Shape, *args, out_shape=None, **kwargs) -> int:
    return 2 * a[0]


def mv_flop(matrix: Shape, vector: Shape, *args, out_shape=None, **kwargs) -> int:
    return 2 * matrix[0] * matrix[1]


def addmv_flop(bias: Shape, matrix: Shape, vector: Shape, *args, out_shape=None, **kwargs) -> int:
    return mv_flop(matrix, vector)


def addbmm_flop(bias: Shape, batch1: Shape, batch2: Shape, *args, out_shape=None, **kwargs) -> int:
    b, m, k = batch1
    return 2 * b * m * k * batch2[2]


# What torch.utils.flop_counter has no formula for (torch 2.13). Passed to FlopCounterMode as
# custom_mapping, which wraps each formula so that it receives shapes.
FLOP_FORMULAS: dict[OpOverloadPacket, Callable[..., int]] = {
    aten.mkldnn_rnn_layer: mkldnn_rnn_layer_flop,  # CPU nn.LSTM (oneDNN)
    aten._cudnn_rnn: cudnn_rnn_flop,  # CUDA nn.RNN / GRU / LSTM (cuDNN)
    aten.miopen_rnn: cudnn_rnn_flop,  # ROCm, same schema bar proj_size
    aten._scaled_dot_product_flash_attention_for_cpu: sdpa_flop,  # CPU SDPA
    aten._scaled_dot_product_fused_attention_overrideable: sdpa_flop,  # out-of-tree backends (XPU, ...)
    aten._scaled_dot_product_attention_math_for_mps: sdpa_flop,  # Apple GPU
    # Backward (mode "train"): fused kernels' backward, and torch's grouped-convolution formula corrected.
    aten.mkldnn_rnn_layer_backward: mkldnn_rnn_layer_backward_flop,  # CPU nn.LSTM (oneDNN)
    aten._cudnn_rnn_backward: cudnn_rnn_backward_flop,
    aten.miopen_rnn_backward: cudnn_rnn_backward_flop,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: cpu_flash_attention_backward_flop,
    aten.convolution_backward: conv_backward_flop,
    aten.dot: dot_flop,
    aten.mv: mv_flop,
    aten.addmv: addmv_flop,
    aten.addbmm: addbmm_flop,
}


# ---------------------------------------------------------------------------------------------------
# Operators known to do no matrix-product or convolution work. Names are resolved against the installed
# torch (a name it does not have is skipped; tests check that torch 2.13 has them all).

NO_MATRIX_WORK_OP_NAMES: tuple[str, ...] = (
    # views and metadata
    "aten.view",
    "aten._unsafe_view",
    "aten.reshape",
    "aten._reshape_alias",
    "aten.view_as",
    "aten.as_strided",
    "aten.alias",
    "aten.detach",
    "aten.t",
    "aten.transpose",
    "aten.transpose_",
    "aten.permute",
    "aten.expand",
    "aten.expand_as",
    "aten.squeeze",
    "aten.squeeze_",
    "aten.unsqueeze",
    "aten.unsqueeze_",
    "aten.select",
    "aten.slice",
    "aten.narrow",
    "aten.unfold",
    "aten.diagonal",
    "aten.unbind",
    "aten.split",
    "aten.split_with_sizes",
    "aten.unsafe_split",
    "aten.unsafe_split_with_sizes",
    "aten.chunk",
    "aten.unsafe_chunk",
    "aten.flatten",
    "aten.unflatten",
    "aten.movedim",
    "aten.contiguous",
    "aten.lift_fresh",
    "aten._local_scalar_dense",
    "aten.size",
    "aten.stride",
    "aten.sym_size",
    "aten.sym_stride",
    "aten.sym_numel",
    "aten.sym_storage_offset",
    "aten.storage_offset",
    "aten.numel",
    "aten.dim",
    "aten.is_contiguous",
    "prim.device",
    "prim.layout",
    # creation, random, copies
    "aten.empty",
    "aten.empty_like",
    "aten.empty_strided",
    "aten.new_empty",
    "aten.new_empty_strided",
    "aten.zeros",
    "aten.zeros_like",
    "aten.new_zeros",
    "aten.ones",
    "aten.ones_like",
    "aten.new_ones",
    "aten.full",
    "aten.full_like",
    "aten.new_full",
    "aten.arange",
    "aten.scalar_tensor",
    "aten.eye",
    "aten.rand",
    "aten.randn",
    "aten.randint",
    "aten.rand_like",
    "aten.randn_like",
    "aten.normal_",
    "aten.uniform_",
    "aten.bernoulli",
    "aten.bernoulli_",
    "aten.fill",
    "aten.fill_",
    "aten.zero_",
    "aten.clone",
    "aten.copy",
    "aten.copy_",
    "aten._to_copy",
    "aten.to",
    "aten.lift_fresh_copy",
    "aten._copy_from",
    "aten._copy_from_and_resize",
    # joins, padding, indexing, masking
    "aten.cat",
    "aten.stack",
    "aten.constant_pad_nd",
    "aten.pad",
    "aten.flip",
    "aten.roll",
    "aten.repeat",
    "aten.index",
    "aten.index_select",
    "aten.gather",
    "aten.scatter",
    "aten.scatter_add",
    "aten.index_put",
    "aten.index_put_",
    "aten.masked_fill",
    "aten.masked_fill_",
    "aten.masked_select",
    "aten.where",
    "aten.tril",
    "aten.triu",
    "aten.nonzero",
    # element-wise arithmetic and activations
    "aten.add",
    "aten.add_",
    "aten.sub",
    "aten.sub_",
    "aten.rsub",
    "aten.mul",
    "aten.mul_",
    "aten.div",
    "aten.div_",
    "aten.neg",
    "aten.reciprocal",
    "aten.pow",
    "aten.sqrt",
    "aten.rsqrt",
    "aten.exp",
    "aten.log",
    "aten.abs",
    "aten.clamp",
    "aten.clamp_min",
    "aten.clamp_max",
    "aten.nan_to_num",
    "aten.nan_to_num_",
    "aten.maximum",
    "aten.minimum",
    "aten.addcmul",
    "aten.addcdiv",
    "aten.lerp",
    "aten.sign",
    "aten.remainder",
    "aten.tanh",
    "aten.tanh_",
    "aten.sigmoid",
    "aten.sigmoid_",
    "aten.relu",
    "aten.relu_",
    "aten.gelu",
    "aten.silu",
    "aten.hardtanh",
    "aten.leaky_relu",
    "aten.elu",
    "aten.softplus",
    "aten.threshold",
    # their gradients (mode "train")
    "aten.tanh_backward",
    "aten.sigmoid_backward",
    "aten.threshold_backward",
    "aten.gelu_backward",
    "aten.silu_backward",
    "aten.elu_backward",
    "aten.softplus_backward",
    "aten.hardtanh_backward",
    "aten.leaky_relu_backward",
    "aten._softmax_backward_data",
    "aten._log_softmax_backward_data",
    "aten.native_dropout_backward",
    "aten.native_layer_norm_backward",
    "aten.unfold_backward",
    "aten.select_backward",
    "aten.slice_backward",
    "aten.embedding_dense_backward",
    # comparisons and logic
    "aten.eq",
    "aten.ne",
    "aten.lt",
    "aten.le",
    "aten.gt",
    "aten.ge",
    "aten.logical_and",
    "aten.logical_or",
    "aten.logical_not",
    "aten.logical_xor",
    "aten.bitwise_and",
    "aten.bitwise_or",
    "aten.bitwise_xor",
    "aten.bitwise_not",
    "aten.isnan",
    "aten.isinf",
    "aten.isfinite",
    # reductions, softmax, normalisation, dropout
    "aten.sum",
    "aten.mean",
    "aten.amax",
    "aten.amin",
    "aten.max",
    "aten.min",
    "aten.prod",
    "aten.var",
    "aten.var_mean",
    "aten.std",
    "aten.std_mean",
    "aten.argmax",
    "aten.argmin",
    "aten.any",
    "aten.all",
    "aten.cumsum",
    "aten.logsumexp",
    "aten.linalg_vector_norm",
    "aten._softmax",
    "aten.softmax",
    "aten._log_softmax",
    "aten.log_softmax",
    "aten._safe_softmax",
    "aten.native_dropout",
    "aten.dropout",
    "aten.native_layer_norm",
    "aten.layer_norm",
    "aten.native_group_norm",
    "aten._native_batch_norm_legit_no_training",
    "aten.native_batch_norm",
    "aten.rms_norm",
    "aten._fused_rms_norm",
    # recurrent and attention plumbing: the products happen in mm/addmm or in a counted kernel
    "aten._thnn_fused_lstm_cell",
    "aten._thnn_fused_gru_cell",
    "aten._cudnn_rnn_flatten_weight",
    "aten._cudnn_init_dropout_state",
    "aten._fused_sdp_choice",
)


def _resolve(qualified_names: Iterable[str]) -> frozenset[OpOverloadPacket]:
    ops = set()
    for qualified in qualified_names:
        namespace, name = qualified.split(".", 1)
        if hasattr(getattr(torch.ops, namespace), name):
            ops.add(getattr(getattr(torch.ops, namespace), name))
    return frozenset(ops)


NO_MATRIX_WORK_OPS: frozenset[OpOverloadPacket] = _resolve(NO_MATRIX_WORK_OP_NAMES)


# ---------------------------------------------------------------------------------------------------
# Element-wise estimates for kernels that hide their element-wise work (module docstring).

# Pointwise operations per hidden unit of PyTorch's unfused cells (aten/src/ATen/native/RNN.cpp), by
# gate count: RNN (1) gates sum + tanh; GRU (3) 2 adds, 2 sigmoids, the reset product, the candidate's
# add and tanh, and (h - n)·z + n; LSTM (4) gates sum, 3 sigmoids + tanh, c = f·c + i·g, h = o·tanh(c).
CELL_POINTWISE_OPS_PER_UNIT: dict[int, int] = {1: 2, 3: 10, 4: 13}
SOFTMAX_OPS = _resolve(("aten._softmax", "aten.softmax", "aten._log_softmax", "aten.log_softmax", "aten._safe_softmax"))
_COPY_OPS = _resolve(("aten.clone",))  # tagged pointwise, but a copy is no arithmetic


def attention_elementwise(query: Shape, key: Shape, value: Shape, *args, **kwargs) -> int:
    """The scaling and the softmax of every score: 2 per element of the (..., L, S) score matrix."""
    return 2 * prod(query[:-1]) * key[-2]


def _cell_elementwise(rows: int, gate_rows: int, hidden: int, has_bias: bool) -> int:
    gates = gate_rows // hidden
    return rows * hidden * (CELL_POINTWISE_OPS_PER_UNIT[gates] + (gates if has_bias else 0))


def mkldnn_rnn_layer_elementwise(
    input_shape: Shape,
    w_ih: Shape,
    w_hh: Shape,
    b_ih: Shape,
    b_hh: Shape,
    hx: Shape,
    cx: Shape,
    reverse,
    batch_sizes,
    mode,
    hidden_size,
    num_layers,
    has_biases,
    *args,
    **kwargs,
) -> int:
    return _cell_elementwise(prod(input_shape[:-1]), w_ih[0], hidden_size, has_biases)


def cudnn_rnn_elementwise(input_shape: Shape, weight: list[Shape], weight_stride0: int, *args, **kwargs) -> int:
    # One group of weight_stride0 tensors per layer and direction: w_ih (g·h, in), w_hh (g·h, h or proj),
    # then b_ih, b_hh if weight_stride0 is 4 or 5, then w_hr (proj, h) if it is 3 or 5 (projections).
    has_bias, has_proj = weight_stride0 in (4, 5), weight_stride0 in (3, 5)
    total = 0
    for first in range(0, len(weight), weight_stride0):
        w_ih, w_hh, last = weight[first], weight[first + 1], weight[first + weight_stride0 - 1]
        hidden = last[1] if has_proj else w_hh[1]
        total += _cell_elementwise(prod(input_shape[:-1]), w_ih[0], hidden, has_bias)
    return total


def fused_cell_elementwise(
    input_gates: Shape,
    hidden_gates: Shape,
    state: Shape,
    input_bias: Shape | None = None,
    hidden_bias: Shape | None = None,
    **kwargs,
) -> int:
    """aten._thnn_fused_lstm_cell (state: cx) and aten._thnn_fused_gru_cell (state: hx): one step's gate
    arithmetic on (batch, hidden) states."""
    return _cell_elementwise(state[0], input_gates[1], state[1], input_bias is not None)


ELEMENTWISE_FORMULAS: dict[OpOverloadPacket, Callable[..., int]] = {
    aten._scaled_dot_product_flash_attention_for_cpu: attention_elementwise,
    aten._scaled_dot_product_flash_attention: attention_elementwise,
    aten._scaled_dot_product_efficient_attention: attention_elementwise,
    aten._scaled_dot_product_cudnn_attention: attention_elementwise,
    aten._scaled_dot_product_fused_attention_overrideable: attention_elementwise,
    aten._scaled_dot_product_attention_math_for_mps: attention_elementwise,
    aten.mkldnn_rnn_layer: mkldnn_rnn_layer_elementwise,
    aten._cudnn_rnn: cudnn_rnn_elementwise,
    aten.miopen_rnn: cudnn_rnn_elementwise,
    aten._thnn_fused_lstm_cell: fused_cell_elementwise,
    aten._thnn_fused_gru_cell: fused_cell_elementwise,
}
# Counted kernels that hide element-wise work we have no estimate for: their presence makes it None.
ELEMENTWISE_UNKNOWN_OPS = _resolve(
    (
        "aten._flash_attention_forward",
        "aten._efficient_attention_forward",
        # the fused backward kernels (mode "train")
        "aten._scaled_dot_product_flash_attention_for_cpu_backward",
        "aten._scaled_dot_product_flash_attention_backward",
        "aten._scaled_dot_product_efficient_attention_backward",
        "aten._scaled_dot_product_cudnn_attention_backward",
        "aten.mkldnn_rnn_layer_backward",
        "aten._cudnn_rnn_backward",
        "aten.miopen_rnn_backward",
    )
)


# ---------------------------------------------------------------------------------------------------
# Classification and the counter.

OpClass = Literal["counted", "no_matrix_work", "uncounted"]


def classify_op(op: OpOverload | OpOverloadPacket, formulas: Iterable[Any] | None = None) -> OpClass:
    """The class of an executed operator (module docstring). `formulas`: the operators with a FLOP formula,
    by default torch's registry plus FLOP_FORMULAS."""
    packet = op.overloadpacket if isinstance(op, OpOverload) else op
    if formulas is None:
        formulas = _new_counter(_OpRecorder()).flop_registry
    if packet in formulas:
        return "counted"
    if packet in NO_MATRIX_WORK_OPS:
        return "no_matrix_work"
    return "uncounted"


def count_flops(fn: Callable[[], object]) -> FlopCount:
    """Run `fn()` once under the extended FlopCounterMode and return its counts (module docstring).

    `fn` sets its own grad mode (inference_mode or no_grad); the counts do not depend on it. Prints
    nothing; the FLOP counter's state lives and dies inside the call."""
    recorder = _OpRecorder()
    counter = _new_counter(recorder)
    # The recorder is entered first so that it sits beneath FlopCounterMode: it sees each operator that
    # FlopCounterMode executes after decomposing composites, i.e. exactly the operators it counts or not.
    with recorder, counter:
        fn()
    by_op = {str(op): int(flops) for op, flops in counter.get_flop_counts().get("Global", {}).items()}
    uncounted = sorted({str(op) for op in recorder.ops if classify_op(op, counter.flop_registry) == "uncounted"})
    return FlopCount(
        total=sum(by_op.values()),
        by_op=by_op,
        uncounted_ops=tuple(uncounted),
        elementwise=None if recorder.elementwise_unknown else recorder.elementwise,
    )


def _new_counter(recorder: _OpRecorder) -> FlopCounterMode:
    mapping: dict[Any, Callable[..., int]] = dict(FLOP_FORMULAS)
    mapping[aten._scaled_dot_product_flash_attention] = _unpadded_flash_attention_flop(recorder.unpadded_size)
    return FlopCounterMode(display=False, custom_mapping=mapping)


def _unpadded_flash_attention_flop(unpadded_size: WeakIdKeyDictionary) -> Callable[..., int]:
    """aten._scaled_dot_product_flash_attention on the head size before PyTorch's padding.

    On CUDA, scaled_dot_product_attention pads q, k and v with zeros to a head size that is a multiple of
    8 before calling the flash kernel (aten/src/ATen/native/transformers/attention.cpp,
    `pad_last_dim<8, false>`); torch's formula would count the padded size, so the count would depend on
    the kernel. The recorder remembers each tensor that `constant_pad_nd` padded at the end of its last
    dimension, with its size before; the formula counts that size."""

    def flop(query, key, value, *args, out_val=None, **kwargs) -> int:
        shapes = [tuple(t.shape[:-1]) + (unpadded_size.get(t, t.shape[-1]),) for t in (query, key, value)]
        return attention_flop(*shapes)

    flop._get_raw = True  # FlopCounterMode passes such formulas the tensors, not their shapes
    return flop


def _shapes(tree):
    return tree_map(lambda a: tuple(a.shape) if isinstance(a, torch.Tensor) else a, tree)


class _OpRecorder(TorchDispatchMode):
    """Records every operator that executes beneath FlopCounterMode, and its element-wise work."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: set[OpOverloadPacket] = set()
        self.elementwise = 0
        self.elementwise_unknown = False
        self.unpadded_size = WeakIdKeyDictionary()  # padded tensor -> its last dimension before padding

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet = func.overloadpacket
        self.ops.add(packet)
        if packet is aten.constant_pad_nd and _pads_end_of_last_dim(args[1]):
            self.unpadded_size[out] = self.unpadded_size.get(args[0], args[0].shape[-1])
        self._add_elementwise(func, packet, args, kwargs, out)
        return out

    def _add_elementwise(self, func, packet, args, kwargs, out) -> None:
        if packet in ELEMENTWISE_FORMULAS:
            self.elementwise += ELEMENTWISE_FORMULAS[packet](*_shapes(args), **_shapes(kwargs))
        elif packet in ELEMENTWISE_UNKNOWN_OPS:
            self.elementwise_unknown = True
        elif packet in SOFTMAX_OPS or (torch.Tag.pointwise in func.tags and packet not in _COPY_OPS):
            self.elementwise += sum(t.numel() for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor))


def _pads_end_of_last_dim(pad: list[int]) -> bool:
    return len(pad) == 2 and pad[0] == 0 and pad[1] > 0
