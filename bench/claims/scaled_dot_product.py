"""Scaled dot-product attention: q·k's variance, the 1/√d_k scaling against saturation, and additive attention."""

from __future__ import annotations

import math

import torch

from models.attention import AdditiveAttention

from .measure import TIME_THREADS, counted_flops, interleaved_times_s
from .record import D2L_ATTENTION_SCORING, D_KS, PAPER, claim, generator_for, numbers_of, rounded, seeded
from .verdict import Outcome, all_met, at_least, at_most

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
    "For q, k with independent zero-mean unit-variance components, q·k has variance d_k; "
    "dividing by √d_k brings it back to 1.",
    f"{PAPER}, §3.2.1 and footnote 4",
)
def dot_product_variance(seed: int) -> Outcome:
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
    "Without the 1/√d_k scaling, large d_k makes the scores large and pushes the softmax into saturation "
    "(outputs near 0 or 1) where its gradient is extremely small; dividing by √d_k prevents it.",
    f"{PAPER}, §3.2.1",
)
def softmax_saturation(seed: int) -> Outcome:
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
    "Without the scaling, the gradient through the saturated softmax is near zero, so backpropagation cannot "
    "update the parameters (the query and key projections) effectively.",
    f"{PAPER}, §3.2.1",
)
def unscaled_gradient_update(seed: int) -> Outcome:
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
    "Dot-product attention is much faster than additive attention in practice, though the two are "
    "similar in theoretical complexity.",
    f"{PAPER}, §3.2.1; additive attention: Bahdanau et al. 2015; {D2L_ATTENTION_SCORING}",
)
def dot_vs_additive(seed: int) -> Outcome:
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
