"""Convolutional layers: centered 'same' convolution, its dilated form, and the separable one.

Cost (Vaswani et al. 2017, Table 1): convolution O(k·n·d²) per layer, O(1) sequential operations,
maximum path length O(n/k) for contiguous kernels and O(log_k n) for dilated ones; separable
convolution O(k·n·d + n·d²).
FLOPs follow torch.utils.flop_counter: 2 per multiply-accumulate, biases excluded.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from .config import LayerConfig, PathRule, Table1Row


def _same_padding(k: int, dilation: int) -> int:
    # An odd kernel with this padding keeps all n positions and centres the receptive field.
    return (k - 1) // 2 * dilation


def _check_odd_k(cfg: LayerConfig, n: int | None = None) -> None:
    if cfg.k < 1 or cfg.k % 2 == 0:
        raise ValueError(f"k={cfg.k}: the centered convolution needs an odd kernel size (1, 3, 5, ...)")


def _contiguous_layers(n: int, k: int, window: int) -> int | None:
    # Centered: each layer moves information (k-1)/2 positions each way; k = 1 never moves it.
    half = (k - 1) // 2
    return None if half == 0 else math.ceil((n - 1) / half)


def _dilated_layers(n: int, k: int, window: int) -> int | None:
    # Dilation k^l at layer l: L layers reach sum_l (k-1)/2·k^l = (k^L - 1)/2 positions, so the fewest L
    # with (k^L - 1)/2 >= n-1, i.e. ceil(log_k(2(n-1) + 1)): O(log_k n).
    if k < 3:
        return None
    layers = 0
    while (k**layers - 1) // 2 < n - 1:  # integers: no floating-point log at exact powers
        layers += 1
    return layers


CONTIGUOUS_PATH = PathRule(_contiguous_layers, "⌈(n−1)/((k−1)/2)⌉")
# Centered k^l stacks have one path from 0 to n-1, which for most n leaves 0..n-1, where zero padding cuts
# it; measured inside k·n more positions each side, beyond the stack's reach (bench/paths.py explains).
DILATED_PATH = PathRule(
    _dilated_layers, "⌈log_k(2(n−1)+1)⌉", dilation=lambda index, k: k**index, margin=lambda n, k: k * n
)


class Conv(nn.Module):
    """Conv1d d -> d with an odd kernel k, centered: output i sees inputs i-(k-1)/2 .. i+(k-1)/2."""

    uses = ("k",)
    table1 = Table1Row(lambda n, d, k, r: k * n * d**2, "O(k·n·d²)", "O(1)", "O(n/k)", sizes=("k",))
    path = CONTIGUOUS_PATH
    check = staticmethod(_check_odd_k)

    def __init__(self, cfg: LayerConfig, dilation: int = 1):
        super().__init__()
        self.check(cfg)
        self.cfg = cfg
        self.dilation = dilation
        self.conv = nn.Conv1d(cfg.d, cfg.d, cfg.k, padding=_same_padding(cfg.k, dilation), dilation=dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # (B, n, d) -> (B, d, n): Conv1d wants channels first.
        return self.conv(x.transpose(1, 2)).transpose(1, 2)  # (B, n, d)

    @staticmethod
    def flops(batch: int, n: int, cfg: LayerConfig) -> int:
        # Each of the b·n·d outputs is a dot product over d inputs × k taps: O(k·n·d²).
        return 2 * batch * n * cfg.d * cfg.d * cfg.k

    @staticmethod
    def activation_bytes(batch: int, n: int, cfg: LayerConfig, elem_bytes: int) -> int:
        # The channels-first copy of the input and the output: O(n·d).
        return 2 * batch * n * cfg.d * elem_bytes


class ConvDilated(Conv):
    """One centered convolution layer at a stated dilation (cfg.dilation; `paths` stacks k^l). In a sweep
    it is the stack's second layer: dilation k unless stated."""

    uses = ("k", "dilation")
    table1 = Table1Row(lambda n, d, k, r: k * n * d**2, "O(k·n·d²)", "O(1)", "O(log_k n)", sizes=("k",))
    path = DILATED_PATH

    def __init__(self, cfg: LayerConfig):
        super().__init__(cfg, dilation=cfg.dilation)


class ConvSeparable(nn.Module):
    """Depthwise Conv1d (k taps, groups=d), then pointwise Conv1d d -> d; centered.

    Cost: 2·b·n·d·k (depthwise) + 2·b·n·d² (pointwise) = 2·b·n·d·(k + d).
    """

    uses = ("k",)
    table1 = Table1Row(lambda n, d, k, r: k * n * d + n * d**2, "O(k·n·d + n·d²)", "O(1)", "O(n/k)", sizes=("k",))
    path = CONTIGUOUS_PATH
    check = staticmethod(_check_odd_k)

    def __init__(self, cfg: LayerConfig):
        super().__init__()
        self.check(cfg)
        self.cfg = cfg
        self.depthwise = nn.Conv1d(cfg.d, cfg.d, cfg.k, padding=_same_padding(cfg.k, 1), groups=cfg.d)
        self.pointwise = nn.Conv1d(cfg.d, cfg.d, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.depthwise(x.transpose(1, 2))  # (B, d, n)
        return self.pointwise(h).transpose(1, 2)  # (B, n, d)

    @staticmethod
    def flops(batch: int, n: int, cfg: LayerConfig) -> int:
        return 2 * batch * n * cfg.d * (cfg.k + cfg.d)

    @staticmethod
    def activation_bytes(batch: int, n: int, cfg: LayerConfig, elem_bytes: int) -> int:
        return 3 * batch * n * cfg.d * elem_bytes
