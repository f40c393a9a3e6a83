"""Layers of your own, measured with no formula: `python -m bench run --layers examples/my_layers.py:GatedConv ...`.

Each is an nn.Module class (or a function) that takes the sizes it names among d, n, k, heads, window, dilation, and
maps (batch, n, d) to (batch, n, d). tests/test_outside.py measures them."""

import torch
from torch import nn


class GatedConv(nn.Module):
    """A gated depthwise convolution of width k, then a d×d map: O(k·n·d + n·d²), one layer sees k positions."""

    def __init__(self, d: int, k: int):
        super().__init__()
        self.mix = nn.Conv1d(d, 2 * d, k, padding=k // 2, groups=d)
        self.out = nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        value, gate = self.mix(x.transpose(1, 2)).transpose(1, 2).chunk(2, dim=-1)
        return self.out(value * torch.sigmoid(gate))


class BlockAttention(nn.Module):
    """Softmax attention inside blocks of 16 positions, never across: a stack of it never links the ends."""

    def __init__(self, d: int, block: int = 16):
        super().__init__()
        self.block, self.qkv, self.out = block, nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n // self.block, self.block, 3 * d).chunk(3, dim=-1)
        mixed = torch.softmax(q @ k.transpose(-1, -2) / d**0.5, dim=-1) @ v
        return self.out(mixed.reshape(b, n, d))


def fft_mix(x: torch.Tensor) -> torch.Tensor:
    """FNet's token mixing (Lee-Thorp et al. 2022): the real part of a 2-D FFT, O(n·d·log(n·d)), no weights."""
    return torch.fft.fft2(x.float()).real.to(x.dtype)
