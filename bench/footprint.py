"""The bytes a point holds at its peak, estimated before it runs: what `run` checks against the memory there is."""

from __future__ import annotations

import functools

import torch

import models
from models.recurrent import onednn_takes

from .cost import activation_bytes, input_elements
from .spec import DECODE_MODE, PointSpec

TRAIN_HELD_COPIES = 2  # counted from bench.point (docs/method.md)
PREFILL_COPIES = 3


@functools.lru_cache(maxsize=4096)
def _parameters(layer_cls: type, cfg: models.LayerConfig) -> int:
    with torch.device("meta"):
        module = layer_cls(cfg)
    return sum(p.numel() for p in module.parameters())


def flop_count_bytes(spec: PointSpec) -> int:
    """Bytes counting FLOPs adds: an ATen-loop recurrence's gate weights per step where oneDNN takes its dtype."""
    cls = models.LAYERS[spec.layer]
    if (
        spec.mode == DECODE_MODE
        or spec.device != "cpu"
        or spec.dtype == "float32"
        or spec.layer not in models.recurrent()
    ):
        return 0
    if cls.cpu_fused or not onednn_takes(spec.dtype, spec.trains):
        return 0
    return spec.n * cls.gates * spec.d * spec.d * spec.config().elem_bytes


def point_memory_bytes(spec: PointSpec) -> int:
    """Bytes a point holds at its peak: weights, input, and the larger of its activations and flop_count_bytes."""
    cfg = spec.config()
    elem = cfg.elem_bytes
    copies = TRAIN_HELD_COPIES if spec.trains else 1
    weights = _parameters(models.LAYERS[spec.layer], cfg) * elem * copies
    inputs = input_elements(spec) * elem * copies
    forward = (PREFILL_COPIES if spec.mode == DECODE_MODE else copies) * activation_bytes(spec)
    return weights + inputs + max(forward, flop_count_bytes(spec))
