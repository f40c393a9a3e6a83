"""Scaled dot-product attention: q·k's variance and the 1/√d_k scaling, saturation and the gradient it passes back,
dot-product against additive attention, and what attention computes (distributions, shapes, averages, linearity)."""

from __future__ import annotations

import math
from functools import cache

import torch
import torch.nn.functional as F

import models
from models import LayerConfig
from models.attention import AdditiveAttention

from .record import (
    D2L_SELF_ATTENTION,
    D_KS,
    PAPER,
    TIME_THREADS,
    claim,
    counted_flops,
    generator_for,
    interleaved_times_s,
    numbers_of,
    rounded,
    seeded,
)
from .verdict import Check, Outcome, Rule, all_met, at_least, at_most, equals, is_true

D2L_ATTENTION_SCORING = "d2l.ai §11.3 Attention Scoring Functions"

VARIANCE_SAMPLES = 50_000
VARIANCE_REL_TOL = 0.03  # |var/d_k − 1| allowed: several standard errors √(2/N) of near-normal q·k
_VARIANCE_CHUNK = 10_000


def dot_product_variances(q: torch.Tensor, k: torch.Tensor) -> tuple[float, float]:
    """(var(q·k), var(q·k/√d_k)) over the rows of q and k, (N, d_k) each."""
    return _variances((q.double() * k.double()).sum(-1), q.shape[-1])


def _variances(dots: torch.Tensor, d_k: int) -> tuple[float, float]:
    return float(dots.var(correction=0)), float((dots / math.sqrt(d_k)).var(correction=0))


def _sampled_dot_variances(d_k: int, samples: int, gen: torch.Generator) -> tuple[float, float]:
    dots = []
    for start in range(0, samples, _VARIANCE_CHUNK):  # chunks keep memory small at large d_k
        m = min(_VARIANCE_CHUNK, samples - start)
        q = torch.randn(m, d_k, generator=gen)
        k = torch.randn(m, d_k, generator=gen)
        dots.append((q * k).sum(-1).double())
    return _variances(torch.cat(dots), d_k)


@claim(
    "dot_product_variance",
    "For q, k with independent zero-mean unit-variance components, q·k has variance d_k; "
    "dividing by √d_k brings it back to 1.",
    f"{PAPER}, §3.2.1 and footnote 4",
    notes=("dot_product_variance",),
)
def _claim_dot_product_variance(seed: int) -> Outcome:
    gen = generator_for(seed, 1)
    raw, scaled = zip(*(_sampled_dot_variances(d_k, VARIANCE_SAMPLES, gen) for d_k in D_KS))
    deviations = [abs(s - 1) for s in scaled]
    worst = max(deviations)
    return Outcome(
        measured=rounded(worst, 4),
        rule=all_met(at_most(f"largest |var(q·k/√d_k) − 1| over d_k in {list(D_KS)}", worst, VARIANCE_REL_TOL)),
        note=f"{VARIANCE_SAMPLES:,} samples each",
        details={
            "d_k": list(D_KS),
            "var_unscaled": [rounded(v) for v in raw],
            "var_scaled": [rounded(v) for v in scaled],
            "samples": VARIANCE_SAMPLES,
            "rel_std_error": rounded(math.sqrt(2 / VARIANCE_SAMPLES)),
            "numbers": numbers_of(var_unscaled_max_d_k=(raw[-1], "1", f"var(q·k) at d_k = {D_KS[-1]}")),
        },
    )


SATURATION_KEYS = 128
SATURATION_TRIALS = 256
SATURATED_WEIGHT = 0.99  # a row whose largest weight is at least this has its outputs at 0 or 1
SATURATED_ROWS_MIN = 0.5
SMALL_GRAD_RATIO = 0.1  # unscaled / scaled Jacobian norm at most this for "extremely small"
SCALED_FLAT_RATIO = 1.5  # scaled: largest / smallest mean max weight over d_k at most this (no drift)


def softmax_jacobian_norm(logits: torch.Tensor) -> torch.Tensor:
    """Frobenius norm of ∂softmax(s)/∂s for each row s of `logits` (T, n)."""
    jac = torch.func.vmap(torch.func.jacrev(lambda s: torch.softmax(s, dim=-1)))(logits)
    return jac.flatten(1).norm(dim=-1)


@claim(
    "softmax_saturation",
    "Without the 1/√d_k scaling, large d_k makes the scores large and pushes the softmax into saturation "
    "(outputs near 0 or 1) where its gradient is extremely small; dividing by √d_k prevents it.",
    f"{PAPER}, §3.2.1",
    notes=("softmax_saturation",),
)
def _claim_softmax_saturation(seed: int) -> Outcome:
    """Per query, as the notes speak of one softmax; the mean, carried by the few unsaturated rows, is reported."""
    gen = generator_for(seed, 2)
    names = ("max_weight", "saturated_rows", "grad_norm_mean", "grad_norm_median")
    rows = {f"{m}_{v}": [] for m in names for v in ("scaled", "unscaled")}
    for d_k in D_KS:
        q = torch.randn(SATURATION_TRIALS, 1, d_k, generator=gen)
        k = torch.randn(SATURATION_TRIALS, SATURATION_KEYS, d_k, generator=gen)
        unscaled = (q * k).sum(-1)  # (T, n): q·k_j
        for variant, logits in (("unscaled", unscaled), ("scaled", unscaled / math.sqrt(d_k))):
            grad = softmax_jacobian_norm(logits)
            top = torch.softmax(logits, -1).max(-1).values
            rows[f"max_weight_{variant}"].append(rounded(top.mean()))
            rows[f"saturated_rows_{variant}"].append(rounded((top >= SATURATED_WEIGHT).double().mean()))
            rows[f"grad_norm_mean_{variant}"].append(rounded(grad.mean()))
            rows[f"grad_norm_median_{variant}"].append(rounded(grad.median()))
    mean_ratio = rows["grad_norm_mean_unscaled"][-1] / rows["grad_norm_mean_scaled"][-1]
    median_ratio = rows["grad_norm_median_unscaled"][-1] / rows["grad_norm_median_scaled"][-1]
    saturated = rows["saturated_rows_unscaled"][-1]
    scaled_drift = max(rows["max_weight_scaled"]) / min(rows["max_weight_scaled"])
    largest = f"d_k = {D_KS[-1]}"
    return Outcome(
        measured=rounded(median_ratio, 4),
        rule=all_met(
            at_most(
                f"median softmax-Jacobian norm per query, unscaled / scaled, {largest} ({SATURATION_KEYS} keys)",
                median_ratio,
                SMALL_GRAD_RATIO,
            ),
            at_least(
                f"share of queries whose largest weight is ≥ {SATURATED_WEIGHT}, unscaled, {largest}",
                saturated,
                SATURATED_ROWS_MIN,
            ),
            at_most("scaled: mean largest weight, largest / smallest over d_k", scaled_drift, SCALED_FLAT_RATIO),
        ),
        note="the notes' 'unstable' (001) is this: tiny for most queries, large for the few left unsaturated",
        details={
            "d_k": list(D_KS),
            "keys": SATURATION_KEYS,
            "trials": SATURATION_TRIALS,
            **rows,
            "numbers": numbers_of(
                mean_ratio=(mean_ratio, "1", f"mean Jacobian norm over queries, unscaled / scaled, {largest}"),
                saturated_scaled=(
                    rows["saturated_rows_scaled"][-1],
                    "1",
                    f"share of saturated queries, scaled, {largest}",
                ),
                max_weight_unscaled=(rows["max_weight_unscaled"][-1], "1", f"mean largest weight, unscaled, {largest}"),
                max_weight_scaled=(rows["max_weight_scaled"][-1], "1", f"mean largest weight, scaled, {largest}"),
            ),
        },
    )


UPDATE_SIZE = {"batch": 4, "n": 128}
UPDATE_D_KS = (64, D_KS[-1])
TOP_QUERIES = 0.1


def projection_gradients(d: int, scale: float, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """Gradients of ⟨G, softmax(QKᵀ·scale)V⟩ on W_Q, W_K, W_V (N(0, 1/d): unit-variance q, k) and each query's norm."""
    b, n = UPDATE_SIZE["batch"], UPDATE_SIZE["n"]
    x = torch.randn(b, n, d, generator=gen)
    w = [(torch.randn(d, d, generator=gen) / math.sqrt(d)).requires_grad_() for _ in range(3)]
    cotangent = torch.randn(b, n, d, generator=gen)
    q = x @ w[0]
    q.retain_grad()
    weights = torch.softmax(q @ (x @ w[1]).transpose(-2, -1) * scale, dim=-1)
    (weights @ (x @ w[2]) * cotangent).sum().backward()
    return {"W_Q": w[0].grad, "W_K": w[1].grad, "W_V": w[2].grad, "dq": q.grad.norm(dim=-1).flatten()}


def top_share(norms: torch.Tensor, share: float = TOP_QUERIES) -> float:
    """The part of Σ norms² that the largest `share` of the norms carry."""
    squares = norms.double().square().sort(descending=True).values
    return float(squares[: max(1, int(len(squares) * share))].sum() / squares.sum())


@claim(
    "unscaled_gradient_update",
    "Without the scaling, the gradient through the saturated softmax is near zero, so backpropagation cannot "
    "update the parameters (the query and key projections) effectively.",
    f"{PAPER}, §3.2.1",
    notes=("unscaled_gradient_update",),
)
def _claim_unscaled_gradient_update(seed: int) -> Outcome:
    ratios, shares, median_q = {}, {}, {}
    for d in UPDATE_D_KS:
        grads = {}
        for variant, scale in (("scaled", 1 / math.sqrt(d)), ("unscaled", 1.0)):
            with torch.enable_grad():
                grads[variant] = projection_gradients(d, scale, generator_for(seed, 26))
        ratios[d] = {p: float(grads["unscaled"][p].norm() / grads["scaled"][p].norm()) for p in ("W_Q", "W_K", "W_V")}
        shares[d] = {v: top_share(grads[v]["dq"]) for v in grads}
        median_q[d] = float(grads["unscaled"]["dq"].median() / grads["scaled"]["dq"].median())
    d = UPDATE_D_KS[-1]
    ratio = f"‖∂L/∂W_{{}}‖ unscaled / scaled at d_k = {d}, initialisation"
    return Outcome(
        measured=rounded(ratios[d]["W_Q"], 4),
        rule=all_met(
            at_most(ratio.format("Q"), ratios[d]["W_Q"], SMALL_GRAD_RATIO, "0.1 (near zero)"),
            at_most(ratio.format("K"), ratios[d]["W_K"], SMALL_GRAD_RATIO, "0.1 (near zero)"),
        ),
        note=f"loss ⟨G, attention output⟩ with random G, {UPDATE_SIZE['batch']}×{UPDATE_SIZE['n']} tokens; "
        "training itself not run",
        details={
            **UPDATE_SIZE,
            "d_k": list(UPDATE_D_KS),
            "ratios": {str(k): {p: rounded(v) for p, v in r.items()} for k, r in ratios.items()},
            "numbers": numbers_of(
                w_v_ratio=(ratios[d]["W_V"], "1", f"‖∂L/∂W_V‖ unscaled / scaled at d_k = {d}"),
                median_query_ratio=(median_q[d], "1", f"median ‖∂L/∂q_i‖ over queries, unscaled / scaled, d_k = {d}"),
                top_share_unscaled=(
                    shares[d]["unscaled"],
                    "1",
                    f"share of Σ‖∂L/∂q_i‖² carried by the top {TOP_QUERIES:.0%} of queries, unscaled, d_k = {d}",
                ),
                top_share_scaled=(shares[d]["scaled"], "1", f"the same, scaled, d_k = {d}"),
                w_q_ratio_64=(ratios[64]["W_Q"], "1", "‖∂L/∂W_Q‖ unscaled / scaled at d_k = 64"),
            ),
        },
    )


ADDITIVE_NS = (64, 128, 256, 512)
ADDITIVE_D = 64  # d_k = d_v = d_att, one head, batch 1
DOT_FASTER_RATIO = 1.2  # additive / dot time at least this at every n for "faster in practice"


def dot_product_attention(q, k, v):
    """softmax(Q Kᵀ/√d_k) V, written out."""
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v


@claim(
    "dot_vs_additive",
    "Dot-product attention is much faster than additive attention in practice, though the two are "
    "similar in theoretical complexity.",
    f"{PAPER}, §3.2.1; additive attention: Bahdanau et al. 2015; d2l.ai §11.3 Attention Scoring Functions",
    notes=("dot_vs_additive",),
)
def _claim_dot_vs_additive(seed: int) -> Outcome:
    gen = generator_for(seed, 4)
    with seeded(seed):
        additive = AdditiveAttention(ADDITIVE_D, ADDITIVE_D).eval()
    rows = {"time_median_s_dot": [], "time_median_s_additive": [], "flops_dot": [], "flops_additive": []}
    for n in ADDITIVE_NS:
        q, k, v = (torch.randn(1, n, ADDITIVE_D, generator=gen) for _ in range(3))
        fns = {"dot": lambda: dot_product_attention(q, k, v), "additive": lambda: additive(q, k, v)}
        times = interleaved_times_s(fns)
        for name, fn in fns.items():
            rows[f"flops_{name}"].append(counted_flops(fn))
            rows[f"time_median_s_{name}"].append(rounded(times[name]))
    ratios = [rounded(a / t) for a, t in zip(rows["time_median_s_additive"], rows["time_median_s_dot"])]
    flop_ratios = [rounded(a / t) for a, t in zip(rows["flops_additive"], rows["flops_dot"])]
    slowest = f"smallest additive / dot-product time over n in {list(ADDITIVE_NS)} (d = {ADDITIVE_D})"
    return Outcome(
        measured=rounded(min(ratios), 3),
        rule=all_met(at_least(slowest, min(ratios), DOT_FASTER_RATIO)),
        details={
            "n": list(ADDITIVE_NS),
            "d": ADDITIVE_D,
            **rows,
            "time_threads": TIME_THREADS,
            "time_ratio": ratios,
            "flops_ratio": flop_ratios,
            "numbers": numbers_of(
                time_ratio_largest_n=(ratios[-1], "1", f"additive / dot time at n = {ADDITIVE_NS[-1]}"),
                flops_ratio_largest_n=(flop_ratios[-1], "1", f"additive / dot counted FLOPs at n = {ADDITIVE_NS[-1]}"),
            ),
        },
    )


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
    "softmax_positive",
    "The softmax makes every attention weight a positive number between 0 and 1, and the weights sum to 1.",
    f"{PAPER}, §3.2.1; {D2L_ATTENTION_SCORING}",
    notes=("softmax_positive",),
)
def _claim_softmax_positive(seed: int) -> Outcome:
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
    "softmax_distribution",
    "After the softmax over each row of scores the weights sum to 1: each row is a probability distribution over "
    "the keys.",
    f"{PAPER}, §3.2.1; {D2L_ATTENTION_SCORING}",
    notes=("softmax_distribution",),
)
def _claim_softmax_distribution(seed: int) -> Outcome:
    found = softmax_rows(seed)
    sums, in_range = _distribution_checks(found)
    return Outcome(measured=rounded(sums.value, 4), rule=all_met(sums, in_range), details=dict(DISTRIBUTION_SIZE))


SHAPE_CASE = {"n": 7, "m": 11, "d_k": 5, "d_v": 3}
LAYER_SHAPE = (2, 64, 64)  # (batch, n, d) for the layers
LAYER_SHAPE_HEADS = 4


@claim(
    "attention_shapes",
    "With Q (n×d_k), K (m×d_k), V (m×d_v), QKᵀ is n×m and softmax(QKᵀ/√d_k)V is n×d_v; a self-attention "
    "layer maps (batch, n, d) to (batch, n, d).",
    f"{PAPER}, §3.2.1; {D2L_SELF_ATTENTION}",
    notes=("attention_shapes",),
)
def _claim_attention_shapes(seed: int) -> Outcome:
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
    "attention_convex_combination",
    "The attention output is a weighted average of the values, with the attention weights as coefficients.",
    f"{PAPER}, §3.2; {D2L_ATTENTION_SCORING}",
    notes=("attention_convex_combination",),
)
def _claim_attention_convex_combination(seed: int) -> Outcome:
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
    "attention_linearity",
    "Self-attention processes its inputs Q, K, V essentially linearly (it is just several matrices doing linear "
    "transformations).",
    f"{PAPER}, §3.2; {D2L_SELF_ATTENTION}",
    notes=("attention_linearity",),
)
def _claim_attention_linearity(seed: int) -> Outcome:
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
