"""What attention computes: weights that are distributions, its shapes, averages of the values, (non)linearity."""

from __future__ import annotations

import math
from functools import cache

import torch
import torch.nn.functional as F

import models
from models import LayerConfig

from .record import D2L_ATTENTION_SCORING, D2L_SELF_ATTENTION, D_KS, PAPER, claim, generator_for, numbers_of, rounded
from .scaled_dot_product import dot_product_attention
from .verdict import Check, Outcome, Rule, all_met, at_most, equals, is_true

DISTRIBUTION_SIZE = {"batch": 4, "n": 32, "m": 128, "d_k": D_KS[-1]}  # queries × keys, float32
ROW_SUM_ATOL = 1e-6  # float32 |Σ_j p_ij − 1|: a few units of rounding over the row
UNDERFLOW_GAPS = tuple(range(1, 257))  # logit gaps probed for an exact 0.0 weight


def softmax_underflow_gap(dtype: torch.dtype) -> int | None:
    """The smallest gap g in UNDERFLOW_GAPS with softmax([0, g]) = [0.0, 1.0] exactly in `dtype`."""
    for gap in UNDERFLOW_GAPS:
        p = torch.softmax(torch.tensor([0.0, float(gap)], dtype=dtype), dim=-1)
        if float(p[0]) == 0.0 and float(p[1]) == 1.0:
            return gap
    return None


@cache
def softmax_rows(seed: int) -> dict[str, tuple[float, bool, float]]:
    """Float32 softmax of random q·k at the largest d_k, scaled and not: (max |row sum − 1|, in [0, 1], share of 0)."""
    s = DISTRIBUTION_SIZE
    gen = generator_for(seed, 21)
    q = torch.randn(s["batch"], s["n"], s["d_k"], generator=gen)
    k = torch.randn(s["batch"], s["m"], s["d_k"], generator=gen)
    unscaled = q @ k.transpose(-2, -1)
    found = {}
    for variant, scores in (("scaled", unscaled / math.sqrt(s["d_k"])), ("unscaled", unscaled)):
        p = torch.softmax(scores, dim=-1)
        found[variant] = (
            float((p.sum(-1) - 1).abs().max()),
            bool(((p >= 0) & (p <= 1)).all()),
            float((p == 0).double().mean()),
        )
    return found


def _distribution_checks(found) -> tuple[Check, Check]:
    return (
        at_most("max |row sum − 1|, scaled and unscaled", max(v[0] for v in found.values()), ROW_SUM_ATOL),
        is_true("every weight in [0, 1], scaled and unscaled", all(v[1] for v in found.values())),
    )


@claim(
    "The softmax makes every attention weight a positive number between 0 and 1, and the weights sum to 1.",
    f"{PAPER}, §3.2.1; {D2L_ATTENTION_SCORING}",
)
def softmax_positive(seed: int) -> Outcome:
    found = softmax_rows(seed)
    s = DISTRIBUTION_SIZE
    zero_text = f"share of weights exactly 0.0, {{}} scores (d_k = {s['d_k']}, {s['m']} keys, float32)"
    gap32, gap16 = softmax_underflow_gap(torch.float32), softmax_underflow_gap(torch.float16)
    return Outcome(
        measured=rounded(found["unscaled"][2], 4),
        rule=Rule(
            holds=(equals(zero_text.format("unscaled"), found["unscaled"][2], 0.0),),
            partly=(equals(zero_text.format("scaled"), found["scaled"][2], 0.0),),
            needs=_distribution_checks(found),
        ),
        details={
            **s,
            "numbers": numbers_of(
                underflow_gap_float32=(gap32, "1", "smallest logit gap giving an exact 0.0 weight, float32"),
                underflow_gap_float16=(gap16, "1", "smallest logit gap giving an exact 0.0 weight, float16"),
            ),
        },
    )


@claim(
    "After the softmax over each row of scores the weights sum to 1: each row is a probability distribution over "
    "the keys.",
    f"{PAPER}, §3.2.1; {D2L_ATTENTION_SCORING}",
)
def softmax_distribution(seed: int) -> Outcome:
    found = softmax_rows(seed)
    sums, in_range = _distribution_checks(found)
    return Outcome(measured=rounded(sums.value, 4), rule=all_met(sums, in_range), details=dict(DISTRIBUTION_SIZE))


SHAPE_CASE = {"n": 7, "m": 11, "d_k": 5, "d_v": 3}
LAYER_SHAPE = (2, 64, 64)  # (batch, n, d) for the layers
LAYER_SHAPE_HEADS = 4


@claim(
    "With Q (n×d_k), K (m×d_k), V (m×d_v), QKᵀ is n×m and softmax(QKᵀ/√d_k)V is n×d_v; a self-attention "
    "layer maps (batch, n, d) to (batch, n, d).",
    f"{PAPER}, §3.2.1; {D2L_SELF_ATTENTION}",
)
def attention_shapes(seed: int) -> Outcome:
    c = SHAPE_CASE
    gen = generator_for(seed, 22)
    q = torch.randn(c["n"], c["d_k"], generator=gen)
    k = torch.randn(c["m"], c["d_k"], generator=gen)
    v = torch.randn(c["m"], c["d_v"], generator=gen)
    got = {"scores": tuple((q @ k.T).shape), "output": tuple(dot_product_attention(q, k, v).shape)}
    want = {"scores": (c["n"], c["m"]), "output": (c["n"], c["d_v"])}
    x = torch.randn(*LAYER_SHAPE, generator=gen)
    for name in (models.ROLES.attention, models.ROLES.attention_explicit):
        layer = models.build(name, LayerConfig(d=LAYER_SHAPE[-1], heads=LAYER_SHAPE_HEADS), seed=seed)
        with torch.inference_mode():
            got[name] = tuple(layer(x).shape)
        want[name] = LAYER_SHAPE
    wrong = [key for key in want if got[key] != want[key]]
    return Outcome(
        measured=len(wrong),
        rule=all_met(
            equals(
                f"shapes differing from QKᵀ {want['scores']}, output {want['output']} (n = {c['n']}, m = {c['m']}, "
                f"d_k = {c['d_k']}, d_v = {c['d_v']}) and layer output {LAYER_SHAPE}",
                len(wrong),
                0,
            )
        ),
        details={**c, "shapes": {key: list(v) for key, v in got.items()}, "wrong": wrong, "numbers": {}},
        unit="shapes",
    )


CONVEX_SIZE = {"n": 64, "d": 32}
HULL_ATOL = 1e-6  # float32: how far an output coordinate may stray outside [min_j V_jc, max_j V_jc]
WEIGHTED_SUM_ATOL = 1e-5  # |fused output − Σ_j A_ij V_j| at float32 rounding


@claim(
    "The attention output is a weighted average of the values, with the attention weights as coefficients.",
    f"{PAPER}, §3.2; {D2L_ATTENTION_SCORING}",
)
def attention_convex_combination(seed: int) -> Outcome:
    """The fused kernel's output against Σ_j A_ij V_j, and inside the values' range per coordinate."""
    c = CONVEX_SIZE
    gen = generator_for(seed, 23)
    q, k, v = (torch.randn(1, c["n"], c["d"], generator=gen) * 2 for _ in range(3))
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(c["d"]), dim=-1)
    with torch.inference_mode():
        fused = F.scaled_dot_product_attention(q, k, v)
    weighted = (weights[..., None] * v[:, None, :, :]).sum(-2)  # Σ_j A_ij V_j, (1, n, d)
    sum_error = float((fused - weighted).abs().max())
    above = (fused - v.max(dim=1, keepdim=True).values).clamp(min=0)
    below = (v.min(dim=1, keepdim=True).values - fused).clamp(min=0)
    outside = float(torch.maximum(above, below).max())
    hull = f"largest distance of an output coordinate outside [min_j V_jc, max_j V_jc] (n = {c['n']}, d = {c['d']})"
    return Outcome(
        measured=rounded(outside, 4),
        rule=all_met(
            at_most(hull, outside, HULL_ATOL),
            at_most("max |fused output − Σ_j A_ij V_j|", sum_error, WEIGHTED_SUM_ATOL),
        ),
        details={
            **c,
            "numbers": numbers_of(
                weighted_sum_error=(sum_error, "1", "max |SDPA output − Σ_j A_ij V_j|"),
                weight_min=(float(weights.min()), "1", "smallest attention weight"),
            ),
        },
    )


LINEARITY_SIZE = {"n": 16, "d": 32, "heads": 1}
NONLINEAR_MIN = 0.1  # relative error of additivity or homogeneity at least this: not linear, not rounding
LINEAR_ATOL = 1e-5  # relative error of V ↦ AV's additivity and homogeneity at float32 rounding


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def _linearity_errors(f, x1: torch.Tensor, x2: torch.Tensor) -> tuple[float, float]:
    """(additivity, homogeneity) relative errors of f, both 0 for a linear f."""
    with torch.inference_mode():
        return _relative(f(x1 + x2), f(x1) + f(x2)), _relative(f(2 * x1), 2 * f(x1))


def _linearity_inputs(seed: int, offset: int):
    s = LINEARITY_SIZE
    gen = generator_for(seed, offset)
    layer = models.build(models.ROLES.attention_explicit, LayerConfig(d=s["d"], heads=s["heads"]), seed=seed)
    x1, x2 = (torch.randn(1, s["n"], s["d"], generator=gen) for _ in range(2))
    return layer, x1, x2


@claim(
    "Self-attention processes its inputs Q, K, V essentially linearly (it is just several matrices doing linear "
    "transformations).",
    f"{PAPER}, §3.2; {D2L_SELF_ATTENTION}",
)
def attention_linearity(seed: int) -> Outcome:
    """Both readings: the core in each of Q, K, V, the others fixed; the layer (biases 0: affine) in its input X."""
    layer, x1, x2 = _linearity_inputs(seed, 24)
    for proj in (layer.q_proj, layer.k_proj, layer.v_proj, layer.out_proj):
        proj.bias.data.zero_()
    with torch.inference_mode():
        qkv = [[layer._split(p(x)) for p in (layer.q_proj, layer.k_proj, layer.v_proj)] for x in (x1, x2)]
    errors = {}
    for i, name in enumerate("QKV"):

        def core(t, i=i):
            args = list(qkv[0])
            args[i] = t
            return dot_product_attention(*args)

        errors[name] = _linearity_errors(core, qkv[0][i], qkv[1][i])
    errors["X"] = _linearity_errors(layer, x1, x2)
    return Outcome(
        measured=rounded(errors["X"][0], 4),
        measured_is="the layer's relative additivity error in X",
        rule=all_met(
            *(at_most(f"additivity error in {name}, the others fixed", errors[name][0], LINEAR_ATOL) for name in "QKV"),
            at_most("additivity error of the layer in its input X", errors["X"][0], LINEAR_ATOL),
        ),
        note="only V ↦ AV, with the weights A held fixed, is linear",
        details={
            **LINEARITY_SIZE,
            "numbers": numbers_of(
                additivity_error=(errors["X"][0], "1", "‖f(X1+X2) − f(X1) − f(X2)‖ / ‖f(X1) + f(X2)‖"),
                homogeneity_error=(errors["X"][1], "1", "‖f(2X) − 2f(X)‖ / ‖2f(X)‖"),
                **{
                    f"homogeneity_error_{name}": (errors[name][1], "1", f"‖f(2{name}) − 2f({name})‖ / ‖2f({name})‖")
                    for name in "QKV"
                },
            ),
        },
    )
