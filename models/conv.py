"""Convolutional layers: centered 'same', dilated and separable (Vaswani et al. 2017, Table 1), convolving a
channels-last view of the (batch, n, d) tensor, as oneDNN convolves it without copies (method: docs/method.md)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .config import LayerConfig, PathRule, Table1Row, spill_bytes


def _same_padding(k: int, dilation: int) -> int:
    return (k - 1) // 2 * dilation


def _as_image(x: torch.Tensor) -> torch.Tensor:
    """(B, n, d) -> (B, d, 1, n), a channels-last view of the same memory."""
    return x.transpose(1, 2).unsqueeze(2)


def _from_image(h: torch.Tensor) -> torch.Tensor:  # a view where the convolution answered channels-last
    return h.squeeze(2).transpose(1, 2)


def _conv(x: torch.Tensor, conv: nn.Conv1d) -> torch.Tensor:
    """A centered Conv1d's weights, padding, dilation and groups applied to (B, n, d) x, channels-last."""
    weight = conv.weight.unsqueeze(2)  # (d_out, d_in / groups, 1, k)
    padding, dilation = (0, conv.padding[0]), (1, conv.dilation[0])
    return _from_image(
        F.conv2d(_as_image(x), weight, conv.bias, padding=padding, dilation=dilation, groups=conv.groups)
    )


def _taps_inside(n: int, k: int, dilation: int) -> int:
    """The (output, tap) pairs of a centered kernel that read inside the sequence: n − |offset| per tap."""
    return sum(max(0, n - abs((j - (k - 1) // 2) * dilation)) for j in range(k))


def _check_odd_k(cfg: LayerConfig, n: int | None = None) -> None:
    if cfg.k < 1 or cfg.k % 2 == 0:
        raise ValueError(f"k={cfg.k}: the centered convolution needs an odd kernel size (1, 3, 5, ...)")


def _contiguous_layers(n: int, k: int, window: int) -> int | None:
    # Each layer moves information (k-1)/2 positions each way; k = 1 never moves it.
    half = (k - 1) // 2
    return None if half == 0 else math.ceil((n - 1) / half)


def _dilated_layers(n: int, k: int, window: int) -> int | None:
    # Dilation k^l at layer l: L layers reach (k^L - 1)/2 positions, so L = ceil(log_k(2(n-1) + 1)).
    if k < 3:
        return None
    layers = 0
    while (k**layers - 1) // 2 < n - 1:  # integers: no floating-point log at exact powers
        layers += 1
    return layers


CONTIGUOUS_PATH = PathRule(_contiguous_layers, "⌈(n−1)/((k−1)/2)⌉")
# A centered k^l stack's one path from 0 to n-1 mostly leaves 0..n-1, where zero padding would cut it.
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
        # The weight channels-last too, (d_out, k, d_in) in memory, or every call would copy it so.
        weight = self.conv.weight.detach()
        self.conv.weight = nn.Parameter(weight.permute(0, 2, 1).contiguous().permute(0, 2, 1))  # (d, d, k)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _conv(x, self.conv)  # (B, n, d)

    @staticmethod
    def flops(batch: int, n: int, cfg: LayerConfig) -> int:
        return 2 * batch * n * cfg.d * cfg.d * cfg.k

    @classmethod
    def useful_flops(cls, batch: int, n: int, cfg: LayerConfig) -> int:
        """The taps inside the sequence alone (`flops` counts the zero padding's too; oneDNN skips them)."""
        dilation = cfg.dilation if "dilation" in cls.uses and cfg.dilation else 1
        return 2 * batch * cfg.d * cfg.d * _taps_inside(n, cfg.k, dilation)

    @classmethod
    def min_bytes(cls, batch: int, n: int, cfg: LayerConfig, elem_bytes: int, cache_bytes: int | None = None) -> int:
        return (2 * batch * n * cfg.d + cfg.d * cfg.d * cfg.k + cfg.d) * elem_bytes

    @staticmethod
    def activation_bytes(batch: int, n: int, cfg: LayerConfig, elem_bytes: int) -> int:
        # The output and the weights' copy that oneDNN reorders into its blocked layout at every CPU call.
        return (batch * n * cfg.d + cfg.d * cfg.d * cfg.k) * elem_bytes


class ConvDilated(Conv):
    """One centered convolution at cfg.dilation, else k (the second layer of the stack `paths` builds, k^l)."""

    uses = ("k", "dilation")
    table1 = Table1Row(lambda n, d, k, r: k * n * d**2, "O(k·n·d²)", "O(1)", "O(log_k n)", sizes=("k",))
    path = DILATED_PATH

    def __init__(self, cfg: LayerConfig):
        super().__init__(cfg, dilation=cfg.dilation)


class ConvSeparable(nn.Module):
    """Depthwise Conv1d (k taps, groups=d), then pointwise d -> d; centered. FLOPs: 2·b·n·d·(k + d)."""

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
        h = _conv(x, self.depthwise)  # (B, n, d)
        return F.linear(h, self.pointwise.weight.squeeze(-1), self.pointwise.bias)  # (B, n, d)

    @staticmethod
    def flops(batch: int, n: int, cfg: LayerConfig) -> int:
        return 2 * batch * n * cfg.d * (cfg.k + cfg.d)

    @staticmethod
    def useful_flops(batch: int, n: int, cfg: LayerConfig) -> int:
        return 2 * batch * cfg.d * (_taps_inside(n, cfg.k, 1) + n * cfg.d)

    @classmethod
    def min_bytes(cls, batch: int, n: int, cfg: LayerConfig, elem_bytes: int, cache_bytes: int | None = None) -> int:
        # The depthwise output is stored and read back by the pointwise product.
        d = cfg.d
        compulsory = (2 * batch * n * d + d * cfg.k + d + d * d + d) * elem_bytes
        return compulsory + spill_bytes(batch * n * d * elem_bytes, cache_bytes)

    @staticmethod
    def activation_bytes(batch: int, n: int, cfg: LayerConfig, elem_bytes: int) -> int:
        # The depthwise output and the output.
        return 2 * batch * n * cfg.d * elem_bytes
