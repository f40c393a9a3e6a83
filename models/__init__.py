"""The matched layers: every one maps (batch, n, d) to (batch, n, d) and is built from a LayerConfig.

Each layer class carries its analytic cost next to its code:
  - `flops(batch, n, cfg)`: forward FLOPs of the whole batch, 2 per multiply-accumulate of every matrix
    product and convolution (torch.utils.flop_counter's convention); biases, softmax, activations and
    gate arithmetic excluded.
  - `useful_flops(batch, n, cfg)`, only where part of `flops` is work the result does not need: taps in a
    convolution's zero padding (which oneDNN skips), pairs a mask throws away. Fractions of peak use it.
  - `backward_flops(batch, n, cfg, device)`, only where the backward pass is not BACKWARD_PER_FORWARD times
    the forward (see `analytic_flops`): a kernel that recomputes, or a gradient nobody asks for skipped.
  - `activation_bytes(batch, n, cfg, elem_bytes)`: an estimate of the activations the forward pass holds.
  - `uses`: which of the sizes k, heads, window, dilation the layer reads.
  - `table1`: its row of Vaswani et al. 2017, Table 1 (a `Table1Row`: the compute term as a function and as
    text, sequential operations, maximum path length), which fits and the report read from here.
  - `path`: the closed form of the layers a stack needs to link input 0 to output n-1 (a `PathRule`), and
    how `bench.paths` builds the stack it measures.
  - `check(cfg, n=None)`: raises ValueError on a config the layer cannot take (an even k, heads not
    dividing d, a window above n); the spec, the CLI and the layer's own constructor all ask it.
  - `reference(x)`, recurrences only: the same weights as a transparent loop over time steps. A layer with one
    is a nonlinear recurrence (`recurrent()`: its forward must take the n steps in order) unless it also has
    `scan_levels(n)`: then its forward is a parallel scan of that many levels (`scans()`), and the loop is only
    its reference. `stepwise()` lists both.

Adding a layer: write its class with these attributes in a module here, register it in LAYERS, and add
its tests (tests/test_layers.py runs every registered layer; tests/test_toy_layer.py shows the whole flow).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .attention import Attention, AttentionLocal, AttentionMath
from .config import DTYPES, LayerConfig, PathRule, Table1Row
from .conv import Conv, ConvDilated, ConvSeparable
from .linear_attention import AttentionLinear
from .recurrent import GRU, LSTM, RNN
from .scan import Scan

LAYERS: dict[str, type[nn.Module]] = {
    "conv": Conv,
    "conv_dilated": ConvDilated,
    "conv_separable": ConvSeparable,
    "rnn": RNN,
    "gru": GRU,
    "lstm": LSTM,
    "attention": Attention,
    "attention_math": AttentionMath,
    "attention_local": AttentionLocal,
    "attention_linear": AttentionLinear,
    "scan": Scan,
}


@dataclass(frozen=True)
class Roles:
    """The layers the report's and the claims' comparisons name, by role: with LAYERS, the only place that
    spells layer names."""

    attention: str = "attention"  # Table 1's self-attention row, run by the fused kernel
    attention_explicit: str = "attention_math"  # the same computation with the n×n scores stored
    recurrent: str = "lstm"  # the recurrent layer attention is compared with
    convolution: str = "conv"  # the contiguous convolution
    attention_linear: str = "attention_linear"  # kernelized attention, O(n·d²): the crossover with attention


ROLES = Roles()


def stepwise() -> tuple[str, ...]:
    """The registered layers with a step-by-step `reference()`: the recurrences, nonlinear or scanned."""
    return tuple(name for name, cls in LAYERS.items() if hasattr(cls, "reference"))


def scans() -> tuple[str, ...]:
    """The recurrences whose forward is a parallel scan (`scan_levels(n)` levels, Table 1 row O(log n)); their
    `reference()` is the n-step loop of the same recurrence, not what the forward runs."""
    return tuple(name for name in stepwise() if hasattr(LAYERS[name], "scan_levels"))


def recurrent() -> tuple[str, ...]:
    """The nonlinear recurrences (RNN, GRU, LSTM): layers with a step-by-step `reference()` whose forward must
    take the n steps in order too (Table 1's O(n) sequential operations), however a fused kernel hides them.
    A linear recurrence computed by a parallel scan is not one of them (`scans()`)."""
    return tuple(name for name in stepwise() if name not in scans())


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


# The backward pass of a matrix product Y = X·W computes two products of the same size, dX = dY·Wᵀ and
# dW = Xᵀ·dY: a layer made only of matrix products and convolutions costs 2x its forward in backward, 3x in
# a training step (forward and backward). A layer whose backward differs says so in `backward_flops`.
BACKWARD_PER_FORWARD = 2


def analytic_flops(
    name: str, batch: int, n: int, cfg: LayerConfig, mode: str = "inference", device: str = "cpu"
) -> int:
    """FLOPs of one call of layer `name`: its forward pass (mode "inference"), or its forward and backward
    pass (mode "train"). `device` matters to a backward whose kernel differs by device (recurrent layers)."""
    cls = LAYERS[name]
    forward = cls.flops(batch, n, cfg)
    if mode == "inference":
        return forward
    if mode != "train":
        raise ValueError(f"mode {mode!r}: allowed inference, train")
    if hasattr(cls, "backward_flops"):
        return forward + cls.backward_flops(batch, n, cfg, device)
    return forward + BACKWARD_PER_FORWARD * forward


def analytic_useful_flops(
    name: str, batch: int, n: int, cfg: LayerConfig, mode: str = "inference", device: str = "cpu"
) -> int | None:
    """The useful part of `analytic_flops` where the layer states one (`useful_flops`: work its definition needs,
    without what a kernel may skip or what a mask throws away), else None. A training call keeps the forward's
    useful share: its backward products have the forward's structure (the same taps, the same pairs)."""
    cls = LAYERS[name]
    if not hasattr(cls, "useful_flops"):
        return None
    forward, useful = cls.flops(batch, n, cfg), cls.useful_flops(batch, n, cfg)
    return (
        useful if mode == "inference" else round(analytic_flops(name, batch, n, cfg, mode, device) * useful / forward)
    )


def analytic_activation_bytes(name: str, batch: int, n: int, cfg: LayerConfig) -> int:
    elem_bytes = torch.empty((), dtype=cfg.torch_dtype).element_size()
    return LAYERS[name].activation_bytes(batch, n, cfg, elem_bytes)


__all__ = [
    "LAYERS",
    "ROLES",
    "DTYPES",
    "LayerConfig",
    "PathRule",
    "Table1Row",
    "recurrent",
    "scans",
    "stepwise",
    "check",
    "build",
    "analytic_flops",
    "analytic_useful_flops",
    "BACKWARD_PER_FORWARD",
    "analytic_activation_bytes",
]
