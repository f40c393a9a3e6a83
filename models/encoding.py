"""The sinusoidal positional encoding (Vaswani et al. 2017, §3.5): PE(pos, 2i) = sin(pos·ω_i),
PE(pos, 2i+1) = cos(pos·ω_i), ω_i = 10000^(-2i/d). `sinusoidal_encoding` computes it the way the common
PyTorch recipe does (position times an exp-computed frequency, in the requested dtype), so float32 rounding
is that of real models. Used by the claims (bench.claims)."""

from __future__ import annotations

import math

import torch

PE_BASE = 10000.0  # the paper's base: wavelengths 2π .. 10000·2π


def pe_frequencies(d: int, dtype: torch.dtype = torch.float32, base: float = PE_BASE) -> torch.Tensor:
    """ω_i = base^(-2i/d), i = 0 .. d/2 − 1, as the common recipe computes it: exp(2i · (−ln base / d))."""
    return torch.exp(torch.arange(0, d, 2, dtype=dtype) * (-math.log(base) / d))  # (d/2,)


def sinusoidal_encoding(
    positions: int | torch.Tensor, d: int, dtype: torch.dtype = torch.float32, base: float = PE_BASE
) -> torch.Tensor:
    """PE (len(positions), d): even columns sin(pos·ω_i), odd columns cos(pos·ω_i), all in `dtype`.
    `positions` is a count n (positions 0 .. n−1) or a tensor of positions (rounded to `dtype`)."""
    if d % 2:
        raise ValueError(f"d={d}: sinusoidal encodings pair sin and cos, d must be even")
    pos = torch.arange(positions, dtype=dtype) if isinstance(positions, int) else positions.to(dtype)
    angles = pos[:, None] * pe_frequencies(d, dtype, base)  # (n, d/2)
    pe = torch.empty(len(pos), d, dtype=dtype)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angles), torch.cos(angles)
    return pe
