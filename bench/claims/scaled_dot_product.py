"""Scaled dot-product attention: the variance of q·k and the 1/√d_k scaling, softmax saturation, and
dot-product against additive attention."""

from __future__ import annotations

import math

import torch

from models.attention import AdditiveAttention

from .record import (
    D_KS,
    PAPER,
    TIME_THREADS,
    ClaimResult,
    _generator,
    _num,
    _numbers,
    _result,
    claim,
    counted_flops,
    interleaved_times_s,
)

# ------------------------------------------------------------------------ 1. dot-product variance
VARIANCE_SAMPLES = 50_000  # pairs (q, k) per d_k
VARIANCE_REL_TOL = 0.03  # |var/d_k − 1| allowed: ≥ 4.7 standard errors (√(2/N) ≈ 0.0063 for near-normal q·k)
_VARIANCE_CHUNK = 10_000


def dot_product_variances(q: torch.Tensor, k: torch.Tensor) -> tuple[float, float]:
    """(var(q·k), var(q·k/√d_k)) over the rows of q and k, (N, d_k) each; population variance."""
    return _variances((q.double() * k.double()).sum(-1), q.shape[-1])


def _variances(dots: torch.Tensor, d_k: int) -> tuple[float, float]:
    return float(dots.var(correction=0)), float((dots / math.sqrt(d_k)).var(correction=0))


def _sampled_dot_variances(d_k: int, samples: int, gen: torch.Generator) -> tuple[float, float]:
    dots = []
    for start in range(0, samples, _VARIANCE_CHUNK):  # chunks: all of q and k at d_k = 1024 would be 400 MB
        m = min(_VARIANCE_CHUNK, samples - start)
        q = torch.randn(m, d_k, generator=gen)
        k = torch.randn(m, d_k, generator=gen)
        dots.append((q * k).sum(-1).double())  # (m,)
    return _variances(torch.cat(dots), d_k)


@claim(
    "dot_product_variance",
    "For q, k with independent zero-mean unit-variance components, q·k has variance d_k; "
    "dividing by √d_k brings it back to 1.",
    f"{PAPER}, §3.2.1 and footnote 4",
    notes=("dot_product_variance",),
)
def _claim_dot_product_variance(seed: int) -> ClaimResult:
    gen = _generator(seed, 1)
    raw, scaled = zip(*(_sampled_dot_variances(d_k, VARIANCE_SAMPLES, gen) for d_k in D_KS))
    deviations = [abs(s - 1) for s in scaled]  # = |var(q·k)/d_k − 1|
    worst = max(deviations)
    return _result(
        "dot_product_variance",
        measured=_num(worst, 4),
        expected=f"largest |var(q·k/√d_k) − 1| over d_k in {list(D_KS)}: ≤ {VARIANCE_REL_TOL} "
        f"({VARIANCE_SAMPLES:,} samples each)",
        verdict="holds" if worst <= VARIANCE_REL_TOL else "fails",
        details={
            "d_k": list(D_KS),
            "var_unscaled": [_num(v) for v in raw],
            "var_scaled": [_num(v) for v in scaled],
            "samples": VARIANCE_SAMPLES,
            "rel_std_error": _num(math.sqrt(2 / VARIANCE_SAMPLES)),
            "numbers": _numbers(var_unscaled_max_d_k=(raw[-1], "1", f"var(q·k) at d_k = {D_KS[-1]}")),
        },
    )


# ------------------------------------------------------------------------ 2. softmax saturation
SATURATION_KEYS = 128  # keys per query
SATURATION_TRIALS = 256  # queries per d_k
SATURATED_MAX_WEIGHT = 0.9  # unscaled: mean largest weight at the largest d_k at least this
SMALL_GRAD_RATIO = 0.1  # unscaled / scaled softmax-Jacobian norm at the largest d_k at most this for "extremely small"
SCALED_FLAT_RATIO = 1.5  # scaled: largest / smallest mean max weight over d_k at most this (no drift)


def softmax_jacobian_norm(logits: torch.Tensor) -> torch.Tensor:
    """Frobenius norm of ∂softmax(s)/∂s for each row s of `logits` (T, n), by autograd (torch.func)."""
    jac = torch.func.vmap(torch.func.jacrev(lambda s: torch.softmax(s, dim=-1)))(logits)  # (T, n, n)
    return jac.flatten(1).norm(dim=-1)  # (T,)


@claim(
    "softmax_saturation",
    "Without the 1/√d_k scaling, large d_k pushes the softmax into saturation (one weight near 1) "
    "where its gradients are extremely small.",
    f"{PAPER}, §3.2.1",
    notes=("softmax_saturation",),
)
def _claim_softmax_saturation(seed: int) -> ClaimResult:
    """The gradient is measured as the norm of the softmax's Jacobian with respect to its input (the
    logits), per query: its mean over queries is what reaches the weights in training, its median is the
    typical query's. Verdict: saturation (unscaled mean max weight ≥ SATURATED_MAX_WEIGHT at the largest d_k,
    scaled flat) and mean gradient ratio ≤ SMALL_GRAD_RATIO: holds; saturation and only the median ratio
    ≤ SMALL_GRAD_RATIO: partly (the typical query's gradient vanishes, the average one does not); else fails."""
    gen = _generator(seed, 2)
    names = ("max_weight", "grad_norm_mean", "grad_norm_median")
    rows = {f"{m}_{v}": [] for m in names for v in ("scaled", "unscaled")}
    for d_k in D_KS:
        q = torch.randn(SATURATION_TRIALS, 1, d_k, generator=gen)
        k = torch.randn(SATURATION_TRIALS, SATURATION_KEYS, d_k, generator=gen)
        unscaled = (q * k).sum(-1)  # (T, n): q·k_j
        for variant, logits in (("unscaled", unscaled), ("scaled", unscaled / math.sqrt(d_k))):
            grad = softmax_jacobian_norm(logits)
            rows[f"max_weight_{variant}"].append(_num(torch.softmax(logits, -1).max(-1).values.mean()))
            rows[f"grad_norm_mean_{variant}"].append(_num(grad.mean()))
            rows[f"grad_norm_median_{variant}"].append(_num(grad.median()))
    mean_ratio = rows["grad_norm_mean_unscaled"][-1] / rows["grad_norm_mean_scaled"][-1]
    median_ratio = rows["grad_norm_median_unscaled"][-1] / rows["grad_norm_median_scaled"][-1]
    top_unscaled = rows["max_weight_unscaled"][-1]
    scaled_drift = max(rows["max_weight_scaled"]) / min(rows["max_weight_scaled"])
    saturates = top_unscaled >= SATURATED_MAX_WEIGHT and scaled_drift <= SCALED_FLAT_RATIO
    if saturates and mean_ratio <= SMALL_GRAD_RATIO:
        verdict = "holds"
    elif saturates and median_ratio <= SMALL_GRAD_RATIO:
        verdict = "partly"
    else:
        verdict = "fails"
    return _result(
        "softmax_saturation",
        measured=_num(mean_ratio, 4),
        expected=f"mean softmax-Jacobian norm over queries, unscaled / scaled, at d_k = {D_KS[-1]} "
        f"({SATURATION_KEYS} keys): ≤ {SMALL_GRAD_RATIO}; with unscaled mean max weight ≥ "
        f"{SATURATED_MAX_WEIGHT} and scaled max weight flat over d_k (ratio ≤ {SCALED_FLAT_RATIO})",
        verdict=verdict,
        details={
            "d_k": list(D_KS),
            "keys": SATURATION_KEYS,
            "trials": SATURATION_TRIALS,
            **rows,
            "numbers": _numbers(
                median_ratio=(median_ratio, "1", f"median Jacobian norm, unscaled / scaled, d_k = {D_KS[-1]}"),
                max_weight_unscaled=(top_unscaled, "1", f"mean largest weight, unscaled, d_k = {D_KS[-1]}"),
                max_weight_scaled=(
                    rows["max_weight_scaled"][-1],
                    "1",
                    f"mean largest weight, scaled, d_k = {D_KS[-1]}",
                ),
            ),
        },
    )


# ------------------------------------------------------------------------ 4. dot-product vs additive
ADDITIVE_NS = (64, 128, 256, 512)
ADDITIVE_D = 64  # d_k = d_v = d_att, one head, batch 1
DOT_FASTER_RATIO = 1.2  # additive / dot time at least this at every n for "faster in practice"


def dot_product_attention(q, k, v):
    """softmax(Q Kᵀ/√d_k) V, written out. FLOPs: 2·b·n²·d_k + 2·b·n²·d_v."""
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v  # (B, n, d_v)


@claim(
    "dot_vs_additive",
    "Dot-product attention is much faster than additive attention in practice, though the two are "
    "similar in theoretical complexity.",
    f"{PAPER}, §3.2.1; additive attention: Bahdanau et al. 2015; d2l.ai §11.3 Attention Scoring Functions",
    notes=("dot_vs_additive",),
)
def _claim_dot_vs_additive(seed: int) -> ClaimResult:
    gen = _generator(seed, 4)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        additive = AdditiveAttention(ADDITIVE_D, ADDITIVE_D).eval()
    rows = {"time_median_s_dot": [], "time_median_s_additive": [], "flops_dot": [], "flops_additive": []}
    for n in ADDITIVE_NS:
        q, k, v = (torch.randn(1, n, ADDITIVE_D, generator=gen) for _ in range(3))
        fns = {"dot": lambda: dot_product_attention(q, k, v), "additive": lambda: additive(q, k, v)}
        times = interleaved_times_s(fns)
        for name, fn in fns.items():
            rows[f"flops_{name}"].append(counted_flops(fn))
            rows[f"time_median_s_{name}"].append(_num(times[name]))
    ratios = [_num(a / t) for a, t in zip(rows["time_median_s_additive"], rows["time_median_s_dot"])]
    flop_ratios = [_num(a / t) for a, t in zip(rows["flops_additive"], rows["flops_dot"])]
    return _result(
        "dot_vs_additive",
        measured=_num(min(ratios), 3),
        expected=f"smallest additive / dot-product time over n in {list(ADDITIVE_NS)} (d = {ADDITIVE_D}): "
        f"≥ {DOT_FASTER_RATIO}",
        verdict="holds" if min(ratios) >= DOT_FASTER_RATIO else "fails",
        details={
            "n": list(ADDITIVE_NS),
            "d": ADDITIVE_D,
            **rows,
            "time_threads": TIME_THREADS,
            "time_ratio": ratios,
            "flops_ratio": flop_ratios,
            "numbers": _numbers(
                time_ratio_largest_n=(ratios[-1], "1", f"additive / dot time at n = {ADDITIVE_NS[-1]}"),
                flops_ratio_largest_n=(flop_ratios[-1], "1", f"additive / dot counted FLOPs at n = {ADDITIVE_NS[-1]}"),
            ),
        },
    )
