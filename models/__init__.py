"""The matched layers, (batch, n, d) -> (batch, n, d), each with its analytic cost, Table 1 row and path rule beside its
code (docs/adding-a-layer.md). FLOPs: forward, whole batch, 2 per multiply-accumulate of products and convolutions."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .attention import Attention, AttentionLocal, AttentionMath
from .config import DTYPES, DecodeRow, LayerConfig, PathRule, Table1Row
from .conv import Conv, ConvDilated, ConvSeparable
from .linear_attention import AttentionLinear
from .recurrent import GRU, LSTM, RNN
from .scan import Scan
from .split_kv import AttentionSplit

LAYERS: dict[str, type[nn.Module]] = {
    "conv": Conv,
    "conv_dilated": ConvDilated,
    "conv_separable": ConvSeparable,
    "rnn": RNN,
    "gru": GRU,
    "lstm": LSTM,
    "attention": Attention,
    "attention_math": AttentionMath,
    "attention_split": AttentionSplit,
    "attention_local": AttentionLocal,
    "attention_linear": AttentionLinear,
    "scan": Scan,
}


@dataclass(frozen=True)
class Roles:
    """The layers the report's and the claims' comparisons name, by role (the only other place names are spelt)."""

    attention: str = "attention"
    attention_explicit: str = "attention_math"
    recurrent: str = "lstm"
    convolution: str = "conv"
    attention_linear: str = "attention_linear"  # kernelized attention, O(n·d²): the crossover with attention
    attention_restricted: str = "attention_local"


ROLES = Roles()


def stepwise() -> tuple[str, ...]:
    """The registered layers with a step-by-step `reference()`: the recurrences, nonlinear or scanned."""
    return tuple(name for name, cls in LAYERS.items() if hasattr(cls, "reference"))


def scans() -> tuple[str, ...]:
    """The recurrences whose forward is a parallel scan of `scan_levels(n)` levels; `reference()` is their n-step loop."""
    return tuple(name for name in stepwise() if hasattr(LAYERS[name], "scan_levels"))


def recurrent() -> tuple[str, ...]:
    """The nonlinear recurrences: their forward takes the n steps in order, however a fused kernel hides them."""
    return tuple(name for name in stepwise() if name not in scans())


def cudnn_products(name: str, mode: str = "inference") -> bool:
    """Whether its products run in cuDNN on a GPU (TF32 by torch's default): convolutions, fused recurrences."""
    return getattr(LAYERS[name], "cudnn_on_gpu", False) or (name in recurrent() and mode != "decode")


def check(name: str, cfg: LayerConfig, n: int | None = None) -> None:
    """ValueError naming the layer and the bad size if layer `name` cannot take `cfg` (at length n)."""
    if name not in LAYERS:
        raise ValueError(f"unknown layer {name!r}; built: {', '.join(LAYERS)}")
    try:
        LAYERS[name].check(cfg, n)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None


def build(name: str, cfg: LayerConfig, device: str | torch.device = "cpu", seed: int = 0) -> nn.Module:
    """The layer `name`, seeded so that equal (name, cfg, seed) give equal weights, in eval mode."""
    if name not in LAYERS:
        raise KeyError(f"unknown layer {name!r}; built: {', '.join(LAYERS)}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        layer = LAYERS[name](cfg)
    return layer.to(device=device, dtype=cfg.torch_dtype).eval()


# Y = X·W's backward is two products of its size (dX = dY·Wᵀ, dW = Xᵀ·dY); other layers say so in `backward_flops`.
BACKWARD_PER_FORWARD = 2


def analytic_flops(
    name: str, batch: int, n: int, cfg: LayerConfig, mode: str = "inference", device: str = "cpu"
) -> int:
    """FLOPs of one call (bench.spec.MODES; "train": kernels differ by device)."""
    cls = LAYERS[name]
    if mode == "decode":
        return cls.decode_flops(batch, n, cfg)
    n = n + 1 if mode == "recompute" else n
    forward = cls.flops_on(device, batch, n, cfg) if hasattr(cls, "flops_on") else cls.flops(batch, n, cfg)
    if mode == "recompute":
        return forward
    if mode == "inference":
        return forward
    if mode != "train":
        raise ValueError(f"mode {mode!r}: allowed inference, train, decode, recompute")
    if hasattr(cls, "backward_flops"):
        return forward + cls.backward_flops(batch, n, cfg, device)
    return forward + BACKWARD_PER_FORWARD * forward


def analytic_useful_flops(
    name: str, batch: int, n: int, cfg: LayerConfig, mode: str = "inference", device: str = "cpu"
) -> int | None:
    """The part of `analytic_flops` the layer's definition needs (`useful_flops`), else None; train: same share."""
    cls = LAYERS[name]
    if mode == "decode" or not hasattr(cls, "useful_flops"):
        return None
    n = n + 1 if mode == "recompute" else n
    forward, useful = cls.flops(batch, n, cfg), cls.useful_flops(batch, n, cfg)
    if useful is None or mode == "recompute":
        return useful
    return (
        useful if mode == "inference" else round(analytic_flops(name, batch, n, cfg, mode, device) * useful / forward)
    )


def analytic_activation_bytes(name: str, batch: int, n: int, cfg: LayerConfig) -> int:
    return LAYERS[name].activation_bytes(batch, n, cfg, cfg.elem_bytes)


def analytic_min_bytes(name: str, batch: int, n: int, cfg: LayerConfig, cache_bytes: int | None = None) -> int:
    """The bytes one forward must move at the least (a roofline's denominator; the rule: docs/adding-a-layer.md)."""
    return LAYERS[name].min_bytes(batch, n, cfg, cfg.elem_bytes, cache_bytes)


def parameter_bytes(name: str, cfg: LayerConfig) -> int:
    with torch.device("meta"):
        layer = LAYERS[name](cfg)
    return sum(p.numel() for p in layer.parameters()) * cfg.elem_bytes


def analytic_train_min_bytes(name: str, batch: int, n: int, cfg: LayerConfig, cache_bytes: int | None = None) -> int:
    """A training call's least traffic: its forward's, gradients of its output and input, one per weight."""
    gradients = 2 * batch * n * cfg.d * cfg.elem_bytes + parameter_bytes(name, cfg)
    return analytic_min_bytes(name, batch, n, cfg, cache_bytes) + gradients


def analytic_decode_min_bytes(name: str, batch: int, t: int, cfg: LayerConfig) -> int:
    """A decode step's least traffic: the state of t positions it reads, its weights, the token in and out."""
    token = 2 * batch * cfg.d * cfg.elem_bytes
    return analytic_decode_state_bytes(name, batch, t, cfg) + parameter_bytes(name, cfg) + token


def state_bytes(state: tuple[torch.Tensor, ...]) -> int:
    return sum(t.nbytes for t in state)


def analytic_decode_flops(name: str, batch: int, t: int, cfg: LayerConfig) -> int:
    return LAYERS[name].decode_flops(batch, t, cfg)


def analytic_decode_state_bytes(name: str, batch: int, t: int, cfg: LayerConfig) -> int:
    return LAYERS[name].decode_state_bytes(batch, t, cfg, cfg.elem_bytes)


__all__ = [
    "LAYERS",
    "ROLES",
    "DTYPES",
    "LayerConfig",
    "PathRule",
    "Table1Row",
    "DecodeRow",
    "recurrent",
    "scans",
    "stepwise",
    "check",
    "cudnn_products",
    "build",
    "analytic_flops",
    "analytic_useful_flops",
    "BACKWARD_PER_FORWARD",
    "analytic_activation_bytes",
    "analytic_min_bytes",
    "state_bytes",
    "analytic_decode_flops",
    "analytic_decode_state_bytes",
    "analytic_decode_min_bytes",
    "analytic_train_min_bytes",
    "parameter_bytes",
]
