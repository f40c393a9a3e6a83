"""Complexity: the FLOPs of each layer, counted on the real layers and set beside the study notes' closed forms."""

from __future__ import annotations

import torch

import models
from bench.sweeps import loglog_slope as fitted_exponent  # p for y = c·x^p, as the fits compute it
from models import LayerConfig

from .measure import counted_flops
from .record import D2L_CNN_RNN_SA, PAPER, TABLE1, claim, generator_for, numbers_of, rounded
from .verdict import Outcome, all_met, below, equals, within

EXPONENT_TOL = 0.05  # |fitted exponent − predicted| for an exact power law (rounding only)
ASYMPTOTIC_EXPONENT_TOL = 0.2  # the same where a lower-order term still weighs


def _layer_flops(name: str, n: int, cfg: LayerConfig, gen: torch.Generator, batch: int = 1) -> int:
    layer = models.build(name, cfg)
    x = torch.randn(batch, n, cfg.d, generator=gen)
    return counted_flops(lambda: layer(x))


def measured_first(layers, measured: str) -> list[str]:
    """The layers' names, `measured` first (its checks open `expected`)."""
    return sorted(layers, key=lambda name: name != measured)


ATTENTION_D = 16
ATTENTION_NS = (16, 32, 64, 128, 256, 512, 1024)
ATTENTION_DS = (8, 16, 32)  # the exponent in d, at the largest n (n ≫ d: linear in d)
ATTENTION_BATCH = 1


@claim(
    "A self-attention layer costs O(n²·d) computation per layer.",
    f"{TABLE1}; {D2L_CNN_RNN_SA}",
)
def attention_complexity(seed: int) -> Outcome:
    gen = generator_for(seed, 121)
    names = (models.ROLES.attention, models.ROLES.attention_explicit)
    b, d = ATTENTION_BATCH, ATTENTION_D
    counts = {name: [_layer_flops(name, n, LayerConfig(d=d), gen, b) for n in ATTENTION_NS] for name in names}
    analytic = {name: [models.analytic_flops(name, b, n, LayerConfig(d=d)) for n in ATTENTION_NS] for name in names}
    formula = analytic[names[0]]
    exact = equals("counted FLOPs", counts, analytic, "8bnd² + 4bn²d")
    # The exponent in n is fitted where the table's term carries the count, as the sweep's fits do.
    n_over_d = models.LAYERS[names[0]].table1.fit_n_over_d
    large = [i for i, n in enumerate(ATTENTION_NS) if n >= n_over_d * d]
    n_exp = fitted_exponent([ATTENTION_NS[i] for i in large], [counts[names[0]][i] for i in large])
    n_big = ATTENTION_NS[-1]
    d_counts = [_layer_flops(names[0], n_big, LayerConfig(d=dd), gen, b) for dd in ATTENTION_DS]
    d_exp = fitted_exponent(ATTENTION_DS, d_counts)
    share = [4 * b * n * n * d / f for n, f in zip(ATTENTION_NS, formula)]
    tol = ASYMPTOTIC_EXPONENT_TOL
    return Outcome(
        measured=rounded(n_exp),
        rule=all_met(
            within(f"exponent in n of the counted FLOPs (d = {d}, n ≥ {n_over_d}d)", n_exp, 2, abs_tol=tol),
            within(f"exponent in d at n = {n_big}", d_exp, 1, abs_tol=tol),
            exact,
        ),
        note="so the whole layer is O(n²·d + n·d²): the note counts QKᵀ only, AV costs as much again, and the "
        "projections dominate below n = 2d",
        details={
            "d": d,
            "batch": b,
            "n": list(ATTENTION_NS),
            "flops_counted": counts,
            "flops_formula": formula,
            "n2d_share": [rounded(s) for s in share],
            "d_values": list(ATTENTION_DS),
            "flops_by_d": d_counts,
            "numbers": numbers_of(
                exponent_d=(d_exp, "1", f"fitted exponent in d at n = {n_big}"),
                n2d_share_smallest_n=(share[0], "1", f"share of 4bn²d in the count at n = {ATTENTION_NS[0]}"),
                counts_exact=("yes" if exact.met else "no", "1", "counted FLOPs equal 8bnd² + 4bn²d"),
            ),
        },
    )


SCORE_N, SCORE_D = 100, 64
SCORE_ATOL = 1e-9  # |explicit sum of products − q @ kᵀ| in float64: the same sums in another order


def score_op_counts(q: torch.Tensor, k: torch.Tensor) -> dict:
    """The multiplications and additions of QKᵀ done one by one, and the counted FLOPs of q @ kᵀ."""
    n, d = q.shape
    products = q[:, None, :] * k[None, :, :]  # (n, n, d): one multiplication per element
    scores = products[..., 0].clone()
    additions = 0
    for c in range(1, d):
        scores = scores + products[..., c]
        additions += scores.numel()
    flops = counted_flops(lambda: q @ k.T)
    return {
        "multiplications": products.numel(),
        "additions": additions,
        "flops_counted": flops,
        "max_abs_diff": float((scores - q @ k.T).abs().max()),
    }


@claim(
    "The dot products of one query with all n keys need n·d multiplications and n·(d−1) additions, i.e. "
    "O(n·d); n queries give O(n²·d).",
    f"{PAPER}, §3.2.1",
)
def attention_score_op_count(seed: int) -> Outcome:
    gen = generator_for(seed, 122)
    n, d = SCORE_N, SCORE_D
    q, k = (torch.randn(n, d, generator=gen, dtype=torch.float64) for _ in range(2))
    c = score_op_counts(q, k)
    return Outcome(
        measured=c["multiplications"],
        rule=all_met(
            equals(f"multiplications of QKᵀ at n = {n}, d = {d} (n·d per query)", c["multiplications"], n * n * d),
            equals("additions, n²·(d−1)", c["additions"], n * n * (d - 1)),
            equals("counted matmul FLOPs, 2·n²·d", c["flops_counted"], 2 * n * n * d),
            below("max |sum of the products − q @ kᵀ|, float64", c["max_abs_diff"], SCORE_ATOL),
        ),
        details={
            "n": n,
            "d": d,
            **c,
            "numbers": numbers_of(
                additions=(c["additions"], "1", "additions of QKᵀ"),
                flops_counted=(c["flops_counted"], "FLOP", "counted FLOPs of q @ kᵀ"),
            ),
        },
    )


RNN_NS = (16, 32, 64, 128)
RNN_D = 16
RNN_DS = (16, 32, 64, 128)
RNN_N = 16


@claim(
    "A recurrent layer h_t = tanh(W_hh h_{t−1} + W_xh x_t) costs O(d²) per step and O(n·d²) per layer.",
    f"{TABLE1}; {D2L_CNN_RNN_SA}",
)
def rnn_complexity(seed: int) -> Outcome:
    gen = generator_for(seed, 123)
    by_n, by_d, exponents, formula = {}, {}, {}, {}
    for name in models.recurrent():
        by_n[name] = [_layer_flops(name, n, LayerConfig(d=RNN_D), gen) for n in RNN_NS]
        by_d[name] = [_layer_flops(name, RNN_N, LayerConfig(d=d), gen) for d in RNN_DS]
        formula[name] = {
            "n": [models.analytic_flops(name, 1, n, LayerConfig(d=RNN_D)) for n in RNN_NS],
            "d": [models.analytic_flops(name, 1, RNN_N, LayerConfig(d=d)) for d in RNN_DS],
        }
        exponents[name] = {
            "n": rounded(fitted_exponent(RNN_NS, by_n[name])),
            "d": rounded(fitted_exponent(RNN_DS, by_d[name])),
        }
    counted = {name: {"n": by_n[name], "d": by_d[name]} for name in by_n}
    exact = equals("counted FLOPs", counted, formula, "2·b·n·g·2d² (g = gate blocks)")
    rec = models.ROLES.recurrent
    return Outcome(
        measured=exponents[rec]["d"],
        rule=all_met(
            *(
                check
                for name in measured_first(exponents, rec)
                for check in (
                    within(
                        f"exponent in d of {name}'s counted FLOPs" if name == rec else f"of {name}'s, in d",
                        exponents[name]["d"],
                        2,
                        abs_tol=EXPONENT_TOL,
                    ),
                    within("in n", exponents[name]["n"], 1, abs_tol=EXPONENT_TOL),
                )
            ),
            exact,
        ),
        details={
            "n": list(RNN_NS),
            "d_at_n": RNN_D,
            "d": list(RNN_DS),
            "n_at_d": RNN_N,
            "flops_by_n": by_n,
            "flops_by_d": by_d,
            "exponents": exponents,
            "numbers": numbers_of(
                exponent_n=(exponents[rec]["n"], "1", f"fitted exponent in n of {rec}"),
                counts_exact=("yes" if exact.met else "no", "1", "counted FLOPs equal 2·b·n·g·2d²"),
            ),
        },
    )


MATMUL_DS = (32, 64, 128, 256, 512)


def matmul_flops(d: int, gen: torch.Generator) -> tuple[int, int]:
    """(counted FLOPs of d×d by d×d, of d×d by a d-vector)."""
    a, b, v = torch.randn(d, d, generator=gen), torch.randn(d, d, generator=gen), torch.randn(d, generator=gen)
    return counted_flops(lambda: torch.mm(a, b)), counted_flops(lambda: torch.mv(a, v))


@claim(
    "Multiplying two d×d matrices costs O(d²).",
    "study notes",
)
def dxd_matmul_cost(seed: int) -> Outcome:
    gen = generator_for(seed, 124)
    mm, mv = zip(*(matmul_flops(d, gen) for d in MATMUL_DS))
    mm_exp, mv_exp = fitted_exponent(MATMUL_DS, mm), fitted_exponent(MATMUL_DS, mv)
    exact = list(mm) == [2 * d**3 for d in MATMUL_DS] and list(mv) == [2 * d**2 for d in MATMUL_DS]
    return Outcome(
        measured=rounded(mm_exp),
        rule=all_met(
            within(
                "exponent in d of the counted FLOPs of a d×d by d×d product (the note)", mm_exp, 2, abs_tol=EXPONENT_TOL
            )
        ),
        note=f"counted 2·d³, exponent 3. The RNN step is a matrix-vector product, 2·d² (exponent {rounded(mv_exp)}), "
        "so the note's O(n·d²) is right for the wrong reason",
        details={
            "d": list(MATMUL_DS),
            "mm_flops": list(mm),
            "mv_flops": list(mv),
            "numbers": numbers_of(
                mv_exponent=(mv_exp, "1", "fitted exponent in d of d×d times a d-vector"),
                counts_exact=("yes" if exact else "no", "1", "mm counts 2·d³ and mv 2·d² exactly"),
            ),
        },
    )


CONV_NS = (64, 128, 256, 512, 1024)
CONV_D = 32
CONV_DS = (16, 32, 64, 128)
CONV_N = 64
CONV_KS = (3, 5, 9)


@claim(
    "A 1-D convolution with kernel k and d channels costs O(k·d²) per position (a k×d×d kernel) and "
    "O(k·n·d²) per layer.",
    f"{TABLE1}; {D2L_CNN_RNN_SA}",
)
def conv_complexity(seed: int) -> Outcome:
    gen = generator_for(seed, 125)
    name = models.ROLES.convolution
    by_n = [_layer_flops(name, n, LayerConfig(d=CONV_D), gen) for n in CONV_NS]
    by_d = [_layer_flops(name, CONV_N, LayerConfig(d=d), gen) for d in CONV_DS]
    by_k = [_layer_flops(name, CONV_N, LayerConfig(d=CONV_D, k=k), gen) for k in CONV_KS]
    formula = {
        "n": [models.analytic_flops(name, 1, n, LayerConfig(d=CONV_D)) for n in CONV_NS],
        "d": [models.analytic_flops(name, 1, CONV_N, LayerConfig(d=d)) for d in CONV_DS],
        "k": [models.analytic_flops(name, 1, CONV_N, LayerConfig(d=CONV_D, k=k)) for k in CONV_KS],
    }
    exact = equals("counted FLOPs", {"n": by_n, "d": by_d, "k": by_k}, formula, "2·b·n·k·d²")
    exps = {
        "n": fitted_exponent(CONV_NS, by_n),
        "d": fitted_exponent(CONV_DS, by_d),
        "k": fitted_exponent(CONV_KS, by_k),
    }
    return Outcome(
        measured=rounded(exps["d"]),
        rule=all_met(
            within("exponent in d of the counted FLOPs", exps["d"], 2, abs_tol=EXPONENT_TOL),
            within("in n", exps["n"], 1, abs_tol=EXPONENT_TOL),
            within("in k", exps["k"], 1, abs_tol=EXPONENT_TOL),
            exact,
        ),
        details={
            "n": list(CONV_NS),
            "d": list(CONV_DS),
            "k": list(CONV_KS),
            "flops_by_n": by_n,
            "flops_by_d": by_d,
            "flops_by_k": by_k,
            "numbers": numbers_of(
                exponent_n=(exps["n"], "1", "fitted exponent in n"),
                exponent_k=(exps["k"], "1", "fitted exponent in k"),
                counts_exact=("yes" if exact.met else "no", "1", "counted FLOPs equal 2·b·n·k·d²"),
            ),
        },
    )
