"""Table 1's convolutions (centered 'same', dilated, separable) on a channels-last view: oneDNN copies nothing."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .config import DecodeRow, LayerConfig, PathRule, Table1Row, fixed_cache, spill_bytes

WAVENET = "causal convolution (van den Oord et al. 2016, WaveNet)"


def _same_padding(k: int, dilation: int) -> int:
    return (k - 1) // 2 * dilation


def _as_image(x: torch.Tensor) -> torch.Tensor:
    """(B, n, d) -> (B, d, 1, n), a channels-last view of the same memory."""
    return x.transpose(1, 2).unsqueeze(2)


def _from_image(h: torch.Tensor) -> torch.Tensor:  # a view where the convolution answered channels-last
    return h.squeeze(2).transpose(1, 2)


def _conv(x: torch.Tensor, conv: nn.Conv1d, left: int | None = None) -> torch.Tensor:
    """A Conv1d's weights, dilation and groups on (B, n, d) x, channels-last: centered, or after `left` zeros."""
    weight = conv.weight.unsqueeze(2)
    padding, dilation = (0, conv.padding[0] if left is None else 0), (1, conv.dilation[0])
    x = x if left is None else F.pad(x, (0, 0, left, 0))
    return _from_image(
        F.conv2d(_as_image(x), weight, conv.bias, padding=padding, dilation=dilation, groups=conv.groups)
    )


def _taps_inside(n: int, k: int, dilation: int, causal: bool = False) -> int:
    """The (output, tap) pairs of a centered kernel that read inside the sequence: n − |offset| per tap."""
    center = k - 1 if causal else (k - 1) // 2
    return sum(max(0, n - abs((j - center) * dilation)) for j in range(k))


class _Convolution(nn.Module):
    past: int
    cudnn_on_gpu = True  # its products, the step's too, are cuDNN's convolutions (models.cudnn_products)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._convolve(x, self.past if self.cfg.causal else None)

    def prefill(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        kept = x[:, max(0, x.shape[1] - self.past) :]
        return (F.pad(kept, (0, 0, self.past - kept.shape[1], 0)),)

    cache = staticmethod(fixed_cache)

    def step(self, x_t: torch.Tensor, cache: tuple[torch.Tensor, ...], t: int) -> torch.Tensor:
        """The output at position t; the past inputs shifted in place (k − 1 of them: no cache that grows)."""
        window = torch.cat((cache[0], x_t), 1)
        cache[0].copy_(window[:, 1:])
        return self._convolve(window, 0)

    @classmethod
    def decode_state_bytes(cls, batch: int, t: int, cfg: LayerConfig, elem_bytes: int) -> int:
        return cls.past_inputs(cfg) * batch * cfg.d * elem_bytes


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


class Conv(_Convolution):
    """Conv1d d -> d with an odd kernel k, centered: output i sees inputs i-(k-1)/2 .. i+(k-1)/2."""

    uses = ("k",)
    convolves = True
    table1 = Table1Row(lambda n, d, k, r: k * n * d**2, "O(k·n·d²)", "O(1)", "O(n/k)", sizes=("k",))
    decode = DecodeRow(
        lambda t, d, k, r, dil: k * d**2, "O(k·d²)", lambda t, d, k, r, dil: k * d, "O(k·d)", ("k",), source=WAVENET
    )
    path = CONTIGUOUS_PATH
    check = staticmethod(_check_odd_k)

    def __init__(self, cfg: LayerConfig, dilation: int = 1):
        super().__init__()
        self.check(cfg)
        self.cfg = cfg
        self.dilation = dilation
        self.past = (cfg.k - 1) * dilation
        self.conv = nn.Conv1d(cfg.d, cfg.d, cfg.k, padding=_same_padding(cfg.k, dilation), dilation=dilation)
        # The weight channels-last too, (d_out, k, d_in) in memory, or every call would copy it so.
        weight = self.conv.weight.detach()
        self.conv.weight = nn.Parameter(weight.permute(0, 2, 1).contiguous().permute(0, 2, 1))

    def _convolve(self, x: torch.Tensor, left: int | None) -> torch.Tensor:
        return _conv(x, self.conv, left)

    @staticmethod
    def flops(batch: int, n: int, cfg: LayerConfig) -> int:
        return 2 * batch * n * cfg.d * cfg.d * cfg.k

    @classmethod
    def _dilation(cls, cfg: LayerConfig) -> int:
        return cfg.dilation if "dilation" in cls.uses and cfg.dilation else 1

    @classmethod
    def useful_flops(cls, batch: int, n: int, cfg: LayerConfig) -> int:
        """The taps inside the sequence alone (`flops` counts the zero padding's too; oneDNN skips them)."""
        return 2 * batch * cfg.d * cfg.d * _taps_inside(n, cfg.k, cls._dilation(cfg), cfg.causal)

    @classmethod
    def past_inputs(cls, cfg: LayerConfig) -> int:
        return (cfg.k - 1) * cls._dilation(cfg)

    @staticmethod
    def decode_flops(batch: int, t: int, cfg: LayerConfig) -> int:
        return 2 * batch * cfg.d * cfg.d * cfg.k

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
    decode = DecodeRow(
        lambda t, d, k, r, dil: k * d**2,
        "O(k·d²)",
        lambda t, d, k, r, dil: k * dil * d,
        "O(k·δ·d)",
        ("k", "dilation"),
        source=WAVENET,
    )
    path = DILATED_PATH

    def __init__(self, cfg: LayerConfig):
        super().__init__(cfg, dilation=cfg.dilation)


class ConvSeparable(_Convolution):
    """Depthwise Conv1d (k taps, groups=d), then pointwise d -> d; centered. FLOPs: 2·b·n·d·(k + d)."""

    uses = ("k",)
    table1 = Table1Row(lambda n, d, k, r: k * n * d + n * d**2, "O(k·n·d + n·d²)", "O(1)", "O(n/k)", sizes=("k",))
    decode = DecodeRow(
        lambda t, d, k, r, dil: k * d + d**2,
        "O(k·d + d²)",
        lambda t, d, k, r, dil: k * d,
        "O(k·d)",
        ("k",),
        source=WAVENET,
    )
    path = CONTIGUOUS_PATH
    check = staticmethod(_check_odd_k)

    def __init__(self, cfg: LayerConfig):
        super().__init__()
        self.check(cfg)
        self.cfg = cfg
        self.past = cfg.k - 1
        self.depthwise = nn.Conv1d(cfg.d, cfg.d, cfg.k, padding=_same_padding(cfg.k, 1), groups=cfg.d)
        self.pointwise = nn.Conv1d(cfg.d, cfg.d, 1)

    def _convolve(self, x: torch.Tensor, left: int | None) -> torch.Tensor:
        h = _conv(x, self.depthwise, left)
        return F.linear(h, self.pointwise.weight.squeeze(-1), self.pointwise.bias)

    @staticmethod
    def flops(batch: int, n: int, cfg: LayerConfig) -> int:
        return 2 * batch * n * cfg.d * (cfg.k + cfg.d)

    @staticmethod
    def useful_flops(batch: int, n: int, cfg: LayerConfig) -> int:
        return 2 * batch * cfg.d * (_taps_inside(n, cfg.k, 1, cfg.causal) + n * cfg.d)

    @staticmethod
    def past_inputs(cfg: LayerConfig) -> int:
        return cfg.k - 1

    @staticmethod
    def decode_flops(batch: int, t: int, cfg: LayerConfig) -> int:
        return 2 * batch * cfg.d * (cfg.k + cfg.d)

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
