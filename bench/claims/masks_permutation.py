"""Masks and permutations: self-attention's permutation equivariance, the causal mask's zero weights."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

import models
from models import LayerConfig
from models.encoding import sinusoidal_encoding

from .record import D2L_SELF_ATTENTION, PAPER, ClaimResult, _generator, _num, _numbers, _result, claim

# ------------------------------------------------------------------------ 5. permutation equivariance
EQUIVARIANCE_SIZE = {"batch": 2, "n": 64, "d": 64, "heads": 4}
EQUIVARIANT_ATOL = 1e-5  # max |f(Px) − P f(x)| at float32 rounding (outputs are O(1))
BROKEN_MIN = 1e-2  # with positional encodings added the difference must be at least this


def permutation_error(layer: nn.Module, x: torch.Tensor, perm: torch.Tensor, pe: torch.Tensor | None = None) -> float:
    """max |f(x[:, perm] (+ PE)) − f(x (+ PE))[:, perm]|: zero for a permutation-equivariant f. The encoding
    is added after permuting, as a model adds it to whatever token sits at each position."""
    pe = torch.zeros_like(x[0]) if pe is None else pe
    with torch.inference_mode():
        return float((layer(x[:, perm] + pe) - layer(x + pe)[:, perm]).abs().max())


@claim(
    "permutation_equivariance",
    "Self-attention without positional information is permutation-equivariant: permuting the input "
    "permutes the output; with sinusoidal encodings added it is not.",
    f"{PAPER}, §3.5; {D2L_SELF_ATTENTION}",
    notes=("permutation_equivariance",),
)
def _claim_permutation_equivariance(seed: int) -> ClaimResult:
    s = EQUIVARIANCE_SIZE
    gen = _generator(seed, 5)
    x = torch.randn(s["batch"], s["n"], s["d"], generator=gen)
    perm = torch.randperm(s["n"], generator=gen)
    pe = sinusoidal_encoding(s["n"], s["d"])
    errors, errors_pe = {}, {}
    names = (models.ROLES.attention, models.ROLES.attention_explicit)
    for name in names:
        layer = models.build(name, LayerConfig(d=s["d"], heads=s["heads"]), seed=seed)
        errors[name] = _num(permutation_error(layer, x, perm))
        errors_pe[name] = _num(permutation_error(layer, x, perm, pe))
    worst, least_broken = max(errors.values()), min(errors_pe.values())
    ok = worst <= EQUIVARIANT_ATOL and least_broken >= BROKEN_MIN
    return _result(
        "permutation_equivariance",
        measured=worst,
        expected=f"max |f(Px) − P f(x)| ({', '.join(names)}): ≤ {EQUIVARIANT_ATOL} (float32 rounding); "
        f"with encodings added ≥ {BROKEN_MIN}",
        verdict="holds" if ok else "fails",
        details={
            **s,
            "error_no_pe": errors,
            "error_with_pe": errors_pe,
            "numbers": _numbers(error_with_pe=(least_broken, "1", "smallest max |f(Px) − P f(x)| with encodings")),
        },
    )


# ------------------------------------------------------------------------ 11. causal mask
CAUSAL_SIZE = {"batch": 2, "heads": 4, "n": 128, "d_head": 32}
FUTURE_WEIGHT_MAX = 0.0  # exactly zero: exp(−inf) = 0 in IEEE arithmetic


def causal_weights(scores: torch.Tensor) -> torch.Tensor:
    """softmax over keys after setting the scores of future keys (j > i) to −inf (§3.2.3)."""
    n = scores.shape[-1]
    future = torch.ones(n, n, dtype=torch.bool).triu(1)  # (n, n): True where j > i
    return torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)


def future_weight_max(weights: torch.Tensor) -> float:
    n = weights.shape[-1]
    return float(weights[..., torch.ones(n, n, dtype=torch.bool).triu(1)].abs().max())


@claim(
    "causal_mask",
    "A causal mask (−∞ on future positions before the softmax) gives exactly zero weight to future positions.",
    f"{PAPER}, §3.2.3",
    notes=("causal_mask",),
)
def _claim_causal_mask(seed: int) -> ClaimResult:
    s = CAUSAL_SIZE
    gen = _generator(seed, 11)
    q, k, v = (torch.randn(s["batch"], s["heads"], s["n"], s["d_head"], generator=gen) for _ in range(3))
    weights = causal_weights(q @ k.transpose(-2, -1) / math.sqrt(s["d_head"]))
    explicit = future_weight_max(weights)
    # The fused kernel's weights are not exposed: change every future key and value, and compare the
    # outputs of each query's row with them: a zero future weight leaves the row bit for bit unchanged.
    with torch.inference_mode():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        changes = []
        for i in range(0, s["n"] - 1, 16):
            k2, v2 = k.clone(), v.clone()
            k2[:, :, i + 1 :] = torch.randn(k2[:, :, i + 1 :].shape, generator=gen) * 100
            v2[:, :, i + 1 :] = torch.randn(v2[:, :, i + 1 :].shape, generator=gen) * 100
            out2 = F.scaled_dot_product_attention(q, k2, v2, is_causal=True)
            changes.append(float((out2[:, :, : i + 1] - out[:, :, : i + 1]).abs().max()))
    fused = max(changes)
    ok = explicit <= FUTURE_WEIGHT_MAX and fused <= FUTURE_WEIGHT_MAX
    return _result(
        "causal_mask",
        measured=explicit,
        expected=f"largest weight on a future position after the softmax: {FUTURE_WEIGHT_MAX} exactly; "
        f"fused SDPA(is_causal) outputs unchanged when future keys and values change",
        verdict="holds" if ok else "fails",
        details={
            **s,
            "sdpa_change_per_prefix": changes,
            "numbers": _numbers(sdpa_change=(fused, "1", "largest change of fused outputs")),
        },
    )
