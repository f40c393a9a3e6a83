"""Sinusoidal positional encoding (Vaswani et al. 2017, §3.5) as PyTorch's recipe: float32 rounds as in real models."""

from __future__ import annotations

import math

import torch

PE_BASE = 10000.0  # the paper's base: wavelengths 2π .. 10000·2π


def pe_frequencies(d: int, dtype: torch.dtype = torch.float32, base: float = PE_BASE) -> torch.Tensor:
    """ω_i = base^(-2i/d), i = 0 .. d/2 − 1, computed as exp(2i · (−ln base / d))."""
    return torch.exp(torch.arange(0, d, 2, dtype=dtype) * (-math.log(base) / d))


def sinusoidal_encoding(
    positions: int | torch.Tensor, d: int, dtype: torch.dtype = torch.float32, base: float = PE_BASE
) -> torch.Tensor:
    """PE (len(positions), d) in `dtype`; `positions` a count n (0 .. n−1) or a tensor of positions."""
    if d % 2:
        raise ValueError(f"d={d}: sinusoidal encodings pair sin and cos, d must be even")
    pos = torch.arange(positions, dtype=dtype) if isinstance(positions, int) else positions.to(dtype)
    angles = pos[:, None] * pe_frequencies(d, dtype, base)
    pe = torch.empty(len(pos), d, dtype=dtype)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angles), torch.cos(angles)
    return pe
