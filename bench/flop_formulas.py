"""bench.flops' tables: formulas FlopCounterMode lacks, ops without matrix work, fused kernels' element-wise work."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from math import prod

import torch
from torch._ops import OpOverload, OpOverloadPacket
from torch.utils.flop_counter import conv_flop_count, sdpa_backward_flop_count

from models.attention import cpu_flash_causal_pairs

aten = torch.ops.aten

Shape = tuple[int, ...]  # a formula's argument (FlopCounterMode's shape_wrapper); 2 FLOPs a multiply-accumulate


def attention_flop(query: Shape, key: Shape, value: Shape) -> int:
    """Q·Kᵀ then weights·V, batch and heads from the query (grouped-query attention counts every query head)."""
    *batch_heads, q_len, head_dim = query
    kv_len, value_dim = key[-2], value[-1]
    return 2 * prod(batch_heads) * q_len * kv_len * (head_dim + value_dim)


def sdpa_flop(query: Shape, key: Shape, value: Shape, *args, out_shape=None, **kwargs) -> int:
    return attention_flop(query, key, value)


def cpu_flash_attention_flop(
    query: Shape, key: Shape, value: Shape, dropout_p=0.0, is_causal=False, *args, out_shape=None, **kwargs
) -> int:
    if not kwargs.get("is_causal", is_causal):
        return attention_flop(query, key, value)
    *batch_heads, q_len, head_dim = query
    return 2 * prod(batch_heads) * cpu_flash_causal_pairs(q_len, key[-2]) * (head_dim + value[-1])


def recurrent_flop(input_shape: Shape, weights: Iterable[Shape]) -> int:
    """2·tokens·Σ numel(W), 1-D biases skipped; tokens: all input positions, (T, B, in), (B, T, in), (ΣT, in)."""
    tokens = prod(input_shape[:-1])
    return 2 * tokens * sum(prod(w) for w in weights if len(w) == 2)


def mkldnn_rnn_layer_flop(input_shape: Shape, w_ih: Shape, w_hh: Shape, *args, out_shape=None, **kwargs) -> int:
    return recurrent_flop(input_shape, (w_ih, w_hh))  # one layer, one direction


def aten_rnn_flop(input_shape: Shape, hx: Shape, params: list[Shape], *args, out_shape=None, **kwargs) -> int:
    return recurrent_flop(input_shape, params)


def cudnn_rnn_flop(input_shape: Shape, weight: list[Shape], *args, out_shape=None, **kwargs) -> int:
    # `weight`: every layer's and direction's [w_ih, w_hh, (b_ih, b_hh), (w_hr)], flattened (RNN.cpp)
    return recurrent_flop(input_shape, weight)


# A recurrence's backward: the input's (or state's) and the weights' gradients, each forward product twice.
def mkldnn_rnn_layer_backward_flop(
    input_shape: Shape, w_ih: Shape, w_hh: Shape, *args, out_shape=None, **kwargs
) -> int:
    return 2 * recurrent_flop(input_shape, (w_ih, w_hh))


def cudnn_rnn_backward_flop(input_shape: Shape, weight: list[Shape], *args, out_shape=None, **kwargs) -> int:
    return 2 * recurrent_flop(input_shape, weight)


def cpu_flash_attention_backward_flop(
    grad_out: Shape, query: Shape, key: Shape, value: Shape, *args, out_shape=None, **kwargs
) -> int:
    return sdpa_backward_flop_count(grad_out, query, key, value)  # torch's formula for the flash kernels


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
    """torch's formula with the weight gradient divided by `groups` (torch 2.13 counts it as a dense convolution)."""
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


# What torch.utils.flop_counter has no formula for (torch 2.13); FlopCounterMode's custom_mapping.
FLOP_FORMULAS: dict[OpOverloadPacket | OpOverload, Callable[..., int]] = {
    aten.mkldnn_rnn_layer: mkldnn_rnn_layer_flop,  # CPU nn.LSTM (oneDNN)
    aten._cudnn_rnn: cudnn_rnn_flop,  # CUDA nn.RNN / GRU / LSTM (cuDNN)
    aten.miopen_rnn: cudnn_rnn_flop,  # ROCm, same schema bar proj_size
    aten._scaled_dot_product_flash_attention_for_cpu: cpu_flash_attention_flop,  # CPU SDPA, as its causal form runs
    aten._scaled_dot_product_fused_attention_overrideable: sdpa_flop,  # out-of-tree backends (XPU, ...)
    aten._scaled_dot_product_attention_math_for_mps: sdpa_flop,  # Apple GPU
    # Backward (mode "train"): fused kernels' backward, and torch's grouped-convolution formula corrected.
    aten.mkldnn_rnn_layer_backward: mkldnn_rnn_layer_backward_flop,
    aten._cudnn_rnn_backward: cudnn_rnn_backward_flop,
    aten.miopen_rnn_backward: cudnn_rnn_backward_flop,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: cpu_flash_attention_backward_flop,
    aten.convolution_backward: conv_backward_flop,
    aten.dot: dot_flop,
    aten.mv: mv_flop,
    aten.addmv: addmv_flop,
    aten.addbmm: addbmm_flop,
}
# Overloads too, or FlopCounterMode runs torch's Python decomposition step by step (a GRU at n = 2048: 7.5 s, not 0.1)
for _op in (aten.rnn_tanh, aten.rnn_relu, aten.gru):
    FLOP_FORMULAS[_op] = FLOP_FORMULAS[_op.input] = aten_rnn_flop


# Operators that certainly do no matrix product or convolution (a name the installed torch lacks is skipped).


def _qualified(*groups: str) -> tuple[str, ...]:
    return tuple(name if "." in name else f"aten.{name}" for group in groups for name in group.split())


def _resolve(qualified_names: Iterable[str]) -> frozenset[OpOverloadPacket]:
    ops = set()
    for qualified in qualified_names:
        namespace, name = qualified.split(".", 1)
        if hasattr(getattr(torch.ops, namespace), name):
            ops.add(getattr(getattr(torch.ops, namespace), name))
    return frozenset(ops)


NO_MATRIX_WORK_OP_NAMES: tuple[str, ...] = _qualified(
    "view _unsafe_view reshape _reshape_alias view_as as_strided alias detach t transpose transpose_ permute",
    "expand expand_as squeeze squeeze_ unsqueeze unsqueeze_ select slice narrow unfold diagonal unbind split",
    "split_with_sizes unsafe_split unsafe_split_with_sizes chunk unsafe_chunk flatten unflatten movedim",
    "contiguous lift_fresh _local_scalar_dense size stride sym_size sym_stride sym_numel sym_storage_offset",
    "view_as_real view_as_complex real imag _conj conj resolve_conj",
    "storage_offset numel dim is_contiguous prim.device prim.layout",
    "empty empty_like empty_strided new_empty new_empty_strided zeros zeros_like new_zeros ones ones_like",
    "new_ones full full_like new_full arange scalar_tensor eye rand randn randint rand_like randn_like",
    "normal_ uniform_ bernoulli bernoulli_ fill fill_ zero_ clone copy copy_ _to_copy to lift_fresh_copy",
    "_copy_from _copy_from_and_resize",
    "cat stack constant_pad_nd pad flip roll repeat index index_select gather scatter scatter_add index_put",
    "index_put_ masked_fill masked_fill_ masked_select where tril triu nonzero",
    "add add_ sub sub_ rsub mul mul_ div div_ neg reciprocal pow sqrt rsqrt exp exp_ log abs clamp clamp_min",
    "clamp_max nan_to_num nan_to_num_ maximum minimum addcmul addcdiv lerp sign remainder tanh tanh_ sigmoid",
    "sigmoid_ relu relu_ gelu silu hardtanh leaky_relu elu softplus threshold",
    "tanh_backward sigmoid_backward threshold_backward gelu_backward silu_backward elu_backward",
    "softplus_backward hardtanh_backward leaky_relu_backward _softmax_backward_data",
    "_log_softmax_backward_data native_dropout_backward native_layer_norm_backward unfold_backward",
    "select_backward slice_backward embedding_dense_backward",
    "eq ne lt le gt ge logical_and logical_or logical_not logical_xor bitwise_and bitwise_or bitwise_xor",
    "bitwise_not isnan isinf isfinite",
    "sum mean amax amin max min prod var var_mean std std_mean argmax argmin any all cumsum logsumexp",
    "linalg_vector_norm _softmax softmax _log_softmax log_softmax _safe_softmax native_dropout dropout",
    "native_layer_norm layer_norm native_group_norm _native_batch_norm_legit_no_training native_batch_norm",
    "rms_norm _fused_rms_norm",
    # recurrent and attention plumbing: the products happen in mm/addmm or in a counted kernel
    "_thnn_fused_lstm_cell _thnn_fused_gru_cell _cudnn_rnn_flatten_weight _cudnn_init_dropout_state",
    # set_: cuDNN's RNN, where autograd records, points its weights at storage of its own
    "_fused_sdp_choice set_",
)
NO_MATRIX_WORK_OPS: frozenset[OpOverloadPacket] = _resolve(NO_MATRIX_WORK_OP_NAMES)


# Pointwise operations per hidden unit of PyTorch's unfused cells (RNN.cpp), by gate count: RNN sum, tanh; GRU 2 adds,
# 2 sigmoids, reset product, add, tanh, (h - n)·z + n; LSTM sum, 3 sigmoids, tanh, c = f·c + i·g, h = o·tanh(c).
CELL_POINTWISE_OPS_PER_UNIT: dict[int, int] = {1: 2, 3: 10, 4: 13}
SOFTMAX_OPS = _resolve(_qualified("_softmax softmax _log_softmax log_softmax _safe_softmax"))
COPY_OPS = _resolve(("aten.clone",))  # tagged pointwise, but a copy is no arithmetic


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


def aten_rnn_elementwise(input_shape: Shape, hx: Shape, params: list[Shape], has_biases: bool, *args, **kwargs) -> int:
    per_layer = 4 if has_biases else 2
    tokens, hidden = prod(input_shape[:-1]), hx[-1]
    return sum(_cell_elementwise(tokens, params[i][0], hidden, has_biases) for i in range(0, len(params), per_layer))


def cudnn_rnn_elementwise(input_shape: Shape, weight: list[Shape], weight_stride0: int, *args, **kwargs) -> int:
    # weight_stride0 tensors per layer and direction: w_ih (g·h, in), w_hh (g·h, h or proj), b_ih, b_hh, w_hr (proj, h)
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
    # one step of _thnn_fused_lstm_cell (state: cx) or _thnn_fused_gru_cell (state: hx), (batch, hidden)
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
    aten.rnn_tanh: aten_rnn_elementwise,
    aten.rnn_relu: aten_rnn_elementwise,
    aten.gru: aten_rnn_elementwise,
    aten.miopen_rnn: cudnn_rnn_elementwise,
    aten._thnn_fused_lstm_cell: fused_cell_elementwise,
    aten._thnn_fused_gru_cell: fused_cell_elementwise,
}
# Counted kernels that hide element-wise work we have no estimate for: their presence makes it None.
ELEMENTWISE_UNKNOWN_OPS = _resolve(
    _qualified(
        "_flash_attention_forward _efficient_attention_forward",
        "_scaled_dot_product_flash_attention_for_cpu_backward _scaled_dot_product_flash_attention_backward",
        "_scaled_dot_product_efficient_attention_backward _scaled_dot_product_cudnn_attention_backward",
        "mkldnn_rnn_layer_backward _cudnn_rnn_backward miopen_rnn_backward",
    )
)
