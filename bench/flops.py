"""One call's FLOPs by FlopCounterMode and bench.flop_formulas; an op without a formula is reported, never counted 0."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch._ops import OpOverload, OpOverloadPacket
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map
from torch.utils.flop_counter import FlopCounterMode
from torch.utils.weak import WeakIdKeyDictionary

from models.recurrent import onednn_takes

from .flop_formulas import (
    COPY_OPS,
    ELEMENTWISE_FORMULAS,
    ELEMENTWISE_UNKNOWN_OPS,
    FLOP_FORMULAS,
    NO_MATRIX_WORK_OP_NAMES,
    NO_MATRIX_WORK_OPS,
    SOFTMAX_OPS,
    attention_flop,
    cudnn_rnn_flop,
)

aten = torch.ops.aten

# The tables are read here too: bench.flops is the FLOP counter's one entry point.
__all__ = [
    "FLOP_FORMULAS",
    "NO_MATRIX_WORK_OPS",
    "NO_MATRIX_WORK_OP_NAMES",
    "FlopCount",
    "OpClass",
    "classify_op",
    "count_flops",
    "cudnn_rnn_flop",
]


@dataclass(frozen=True)
class FlopCount:
    total: int  # matrix-product and convolution FLOPs -> column flops_counted
    by_op: dict[str, int]  # FLOPs per counted aten op ("aten.addmm")
    uncounted_ops: tuple[str, ...]  # ops that ran, may do matrix work, and have no formula (sorted, unique)
    elementwise: int | None  # element-wise operations; None where a fused kernel without an estimate ran


OpClass = Literal["counted", "no_matrix_work", "uncounted"]


def classify_op(op: OpOverload | OpOverloadPacket, formulas: Iterable[Any] | None = None) -> OpClass:
    """`formulas`: the operators with a FLOP formula, by default torch's registry plus FLOP_FORMULAS."""
    packet = op.overloadpacket if isinstance(op, OpOverload) else op
    if formulas is None:
        formulas = _new_counter(_OpRecorder()).flop_registry
    if packet in formulas:
        return "counted"
    if packet in NO_MATRIX_WORK_OPS:
        return "no_matrix_work"
    return "uncounted"


def count_flops(fn: Callable[[], object]) -> FlopCount:
    """Run `fn()` once and count it. `fn` sets its own grad mode; the counts do not depend on it."""
    recorder = _OpRecorder()
    counter = _new_counter(recorder)
    # The recorder first, beneath FlopCounterMode: it sees exactly the operators the counter counts or not.
    with recorder, counter, _LstmAsATenRunsIt():
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
    """The CUDA flash kernel counted on the head size before PyTorch's padding (attention.cpp, pad_last_dim<8>)."""

    def flop(query, key, value, *args, out_val=None, **kwargs) -> int:
        shapes = [tuple(t.shape[:-1]) + (unpadded_size.get(t, t.shape[-1]),) for t in (query, key, value)]
        return attention_flop(*shapes)

    flop._get_raw = True  # FlopCounterMode passes such formulas the tensors, not their shapes
    return flop


def _shapes(tree):
    return tree_map(lambda a: tuple(a.shape) if isinstance(a, torch.Tensor) else a, tree)


class _LstmAsATenRunsIt(TorchDispatchMode):
    """aten.lstm decomposed as ATen runs it (torch's decomposition takes oneDNN for bfloat16 on CPUs without it)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        x = args[0]
        if func.overloadpacket is aten.lstm and x.device.type == "cpu" and x.dtype == torch.bfloat16:
            if not onednn_takes("bfloat16"):
                was, torch.backends.mkldnn.enabled = torch.backends.mkldnn.enabled, False
                try:
                    return func(*args, **kwargs)
                finally:
                    torch.backends.mkldnn.enabled = was
        return func(*args, **kwargs)


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
        elif packet in SOFTMAX_OPS or (torch.Tag.pointwise in func.tags and packet not in COPY_OPS):
            self.elementwise += sum(t.numel() for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor))


def _pads_end_of_last_dim(pad: list[int]) -> bool:
    return len(pad) == 2 and pad[0] == 0 and pad[1] > 0
