"""Convolutional layers: centered 'same' convolution, its dilated form, and the separable one.

Cost (Vaswani et al. 2017, Table 1): convolution O(k·n·d²) per layer, O(1) sequential operations,
maximum path length O(n/k) for contiguous kernels and O(log_k n) for dilated ones; separable
convolution O(k·n·d + n·d²).
FLOPs follow torch.utils.flop_counter: 2 per multiply-accumulate, biases excluded.

Layout. The layers' (batch, n, d) tensor is, read as a 1-D image, already channels-last (NWC): each position's
d channels side by side. So the convolutions run as 2-D convolutions of a (batch, d, 1, n) channels-last view
(`_as_image`), which oneDNN (the CPU backend) convolves as it lies, only the weights reordered, with its
BRGEMM kernels (brg_conv_fwd, brdgmm_dw for the depthwise one; ONEDNN_VERBOSE=1 names them), and answers
channels-last, i.e. in (batch, n, d) memory again. Conv1d on the transposed view would make it channels-first: a copy in, oneDNN's
reorders to and from its blocked layout, and, for a depthwise kernel of 15 taps or more, a fallback from
oneDNN's depthwise kernel to an im2col product. Timed on a 2-core Xeon VM, 2 threads, batch 4 (python -m
bench.benchmarks.restricted, the channels-first versions beside them): at n = 2048, d = 128, k = 3, conv 2.3 ms
instead of 3.4 ms, conv_separable 1.25 ms instead of 2.6 ms; at n = 512, d = 128, k = 31, conv_separable 0.42 ms
instead of 3.4 ms, conv_dilated (dilation 31) 4.3 ms instead of 8.5 ms; at n = 128, d = 1024 alike (the product
dominates). The pointwise convolution is a matrix product on (batch·n, d) rows, F.linear (the same weights).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .config import LayerConfig, PathRule, Table1Row


def _same_padding(k: int, dilation: int) -> int:
    # An odd kernel with this padding keeps all n positions and centres the receptive field.
    return (k - 1) // 2 * dilation


def _as_image(x: torch.Tensor) -> torch.Tensor:
    """(B, n, d) -> (B, d, 1, n), a channels-last view of the same memory (module docstring)."""
    return x.transpose(1, 2).unsqueeze(2)


def _from_image(h: torch.Tensor) -> torch.Tensor:
    """(B, d, 1, n) -> (B, n, d): a view where the convolution answered channels-last."""
    return h.squeeze(2).transpose(1, 2)


def _conv(x: torch.Tensor, conv: nn.Conv1d) -> torch.Tensor:
    """`conv` (a centered Conv1d's weights, padding, dilation and groups) applied to (B, n, d) x, channels-last."""
    weight = conv.weight.unsqueeze(2)  # (d_out, d_in / groups, 1, k)
    padding, dilation = (0, conv.padding[0]), (1, conv.dilation[0])
    return _from_image(
        F.conv2d(_as_image(x), weight, conv.bias, padding=padding, dilation=dilation, groups=conv.groups)
    )


def _taps_inside(n: int, k: int, dilation: int) -> int:
    """Of the n·k (output, tap) pairs of a centered kernel, those that read a position inside the sequence: tap j
    of output i reads i + (j − (k−1)/2)·dilation, so tap j is inside for n − |offset| outputs."""
    return sum(max(0, n - abs((j - (k - 1) // 2) * dilation)) for j in range(k))


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
        # The weight laid out channels-last too, (d_out, k, d_in) in memory: a channels-last convolution
        # would otherwise copy it into that layout at every call (besides oneDNN's own blocked copy).
        weight = self.conv.weight.detach()
        self.conv.weight = nn.Parameter(weight.permute(0, 2, 1).contiguous().permute(0, 2, 1))  # (d, d, k)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _conv(x, self.conv)  # (B, n, d)

    @staticmethod
    def flops(batch: int, n: int, cfg: LayerConfig) -> int:
        # Each of the b·n·d outputs is a dot product over d inputs × k taps: O(k·n·d²).
        return 2 * batch * n * cfg.d * cfg.d * cfg.k

    @classmethod
    def useful_flops(cls, batch: int, n: int, cfg: LayerConfig) -> int:
        """The taps inside the sequence alone (`flops` counts the zero padding's too, as the FLOP counter does,
        and oneDNN skips them): at dilation 31 and k = 31, n = 512, about half of the taps."""
        dilation = cfg.dilation if "dilation" in cls.uses and cfg.dilation else 1
        return 2 * batch * cfg.d * cfg.d * _taps_inside(n, cfg.k, dilation)

    @staticmethod
    def activation_bytes(batch: int, n: int, cfg: LayerConfig, elem_bytes: int) -> int:
        # The output, O(n·d) (channels-last, no copy of the input), and the copy of the weights, d·d·k, that
        # oneDNN reorders into its blocked layout at every call on the CPU (eager PyTorch keeps none).
        return (batch * n * cfg.d + cfg.d * cfg.d * cfg.k) * elem_bytes


class ConvDilated(Conv):
    """One centered convolution layer at a stated dilation (cfg.dilation; `paths` stacks k^l). In a sweep
    it is the stack's second layer: dilation k unless stated."""

    uses = ("k", "dilation")
    table1 = Table1Row(lambda n, d, k, r: k * n * d**2, "O(k·n·d²)", "O(1)", "O(log_k n)", sizes=("k",))
    path = DILATED_PATH

    def __init__(self, cfg: LayerConfig):
        super().__init__(cfg, dilation=cfg.dilation)


class ConvSeparable(nn.Module):
    """Depthwise Conv1d (k taps, groups=d), then pointwise Conv1d d -> d (a matrix product); centered.

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
        h = _conv(x, self.depthwise)  # (B, n, d)
        return F.linear(h, self.pointwise.weight.squeeze(-1), self.pointwise.bias)  # (B, n, d)

    @staticmethod
    def flops(batch: int, n: int, cfg: LayerConfig) -> int:
        return 2 * batch * n * cfg.d * (cfg.k + cfg.d)

    @staticmethod
    def useful_flops(batch: int, n: int, cfg: LayerConfig) -> int:
        """The depthwise taps inside the sequence alone (see Conv.useful_flops), and the pointwise product."""
        return 2 * batch * cfg.d * (_taps_inside(n, cfg.k, 1) + n * cfg.d)

    @staticmethod
    def activation_bytes(batch: int, n: int, cfg: LayerConfig, elem_bytes: int) -> int:
        # The depthwise output and the output: O(n·d).
        return 2 * batch * n * cfg.d * elem_bytes
