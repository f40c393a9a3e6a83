"""Complexity: FLOPs, sequential steps and path lengths of the layers, measured on the real layers and set beside the
study notes' closed forms; one verdict rests on times, where a note says "slow"."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

import models
from bench import fits, paths
from bench.memory import measure_memory
from models import LayerConfig

from .record import (
    D2L_SELF_ATTENTION,
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
from .verdict import Outcome, Rule, above, all_met, at_least, below, equals, is_true, within

TABLE1 = f"{PAPER}, §4 and Table 1"
D2L_CNN_RNN_SA = f"{D2L_SELF_ATTENTION} (§11.6.2 Comparing CNNs, RNNs, and Self-Attention)"
EXPONENT_TOL = 0.05  # |fitted exponent − predicted| for an exact power law (rounding only)
ASYMPTOTIC_EXPONENT_TOL = 0.2  # the same where a lower-order term still weighs
CONSTANT_FACTOR_TOL = 0.25  # a "≈" constant holds if measured/stated lies within 1 ± this


def fitted_exponent(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Slope of the least-squares line through (log x, log y): p for y = c·x^p."""
    slope, _ = np.polyfit(np.log(np.asarray(xs, float)), np.log(np.asarray(ys, float)), 1)
    return float(slope)


def _layer_flops(name: str, n: int, cfg: LayerConfig, gen: torch.Generator, batch: int = 1) -> int:
    layer = models.build(name, cfg)
    x = torch.randn(batch, n, cfg.d, generator=gen)
    return counted_flops(lambda: layer(x))


def _measured_first(layers, measured: str) -> list[str]:
    """The layers' names, `measured` first (its checks open `expected`)."""
    return sorted(layers, key=lambda name: name != measured)


def _dilated_conv() -> str:
    """The registered convolution whose stack grows its dilation (k^l)."""
    return next(name for name, cls in models.LAYERS.items() if "k" in cls.uses and cls.path.dilation is not None)


ATTENTION_D = 16
ATTENTION_NS = (16, 32, 64, 128, 256, 512, 1024)
ATTENTION_DS = (8, 16, 32)  # the exponent in d, at the largest n (n ≫ d: linear in d)
ATTENTION_BATCH = 1


@claim(
    "attention_complexity",
    "A self-attention layer costs O(n²·d) computation per layer.",
    f"{TABLE1}; {D2L_CNN_RNN_SA}",
    notes=("attention_complexity",),
)
def _claim_attention_complexity(seed: int) -> Outcome:
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
    "attention_score_op_count",
    "The dot products of one query with all n keys need n·d multiplications and n·(d−1) additions, i.e. "
    "O(n·d); n queries give O(n²·d).",
    f"{PAPER}, §3.2.1",
    notes=("attention_score_op_count",),
)
def _claim_attention_score_op_count(seed: int) -> Outcome:
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
    "rnn_complexity",
    "A recurrent layer h_t = tanh(W_hh h_{t−1} + W_xh x_t) costs O(d²) per step and O(n·d²) per layer.",
    f"{TABLE1}; {D2L_CNN_RNN_SA}",
    notes=("rnn_complexity",),
)
def _claim_rnn_complexity(seed: int) -> Outcome:
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
                for name in _measured_first(exponents, rec)
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
    "dxd_matmul_cost",
    "Multiplying two d×d matrices costs O(d²).",
    "study notes",
    notes=("dxd_matmul_cost",),
)
def _claim_dxd_matmul_cost(seed: int) -> Outcome:
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
    "conv_complexity",
    "A 1-D convolution with kernel k and d channels costs O(k·d²) per position (a k×d×d kernel) and "
    "O(k·n·d²) per layer.",
    f"{TABLE1}; {D2L_CNN_RNN_SA}",
    notes=("conv_complexity",),
)
def _claim_conv_complexity(seed: int) -> Outcome:
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


SEQ_PARALLEL_NS = (16, 64, 256, 1024, 4096)
SEQ_RNN_NS = (8, 16, 32, 64)
RECEPTIVE_D = 4  # channels of the receptive-field probes (the structure does not depend on d)
LOCALITY_K, LOCALITY_N, LOCALITY_POSITION = 3, 32, 16  # the conv whose output window is probed


def receptive_field(fn, n: int, d: int, position: int, gen: torch.Generator) -> list[int]:
    """The inputs output `position` of fn depends on: a nonzero gradient, in float64 (a structural zero exact)."""
    x = torch.randn(1, n, d, generator=gen, dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(fn(x)[0, position].sum(), x)
    return torch.nonzero((grad[0] != 0).any(dim=-1)).flatten().tolist()


def _float64(name: str, cfg: LayerConfig, seed: int = 0) -> nn.Module:
    return models.build(name, cfg, seed=seed).double()


@claim(
    "seq_ops_parallel",
    "Self-attention and convolution compute all n positions at once: O(1) sequential operations; each "
    "convolution output depends only on its local window.",
    f"{TABLE1}; {D2L_CNN_RNN_SA}",
    notes=("seq_ops_attention", "seq_ops_conv"),
)
def _claim_seq_ops_parallel(seed: int) -> Outcome:
    gen = generator_for(seed, 126)
    names = (models.ROLES.attention, models.ROLES.attention_explicit, models.ROLES.convolution)
    depths = {name: [paths.layer_seq_depth(name, n)[0] for n in SEQ_PARALLEL_NS] for name in names}
    k, n, j = LOCALITY_K, LOCALITY_N, LOCALITY_POSITION
    conv = _float64(models.ROLES.convolution, LayerConfig(d=RECEPTIVE_D, k=k), seed)
    window = receptive_field(conv, n, RECEPTIVE_D, j, gen)
    worst = max(max(v) for v in depths.values())
    over = f"n = {SEQ_PARALLEL_NS[0]}..{SEQ_PARALLEL_NS[-1]}"
    return Outcome(
        measured=worst,
        measured_is=f"largest operator depth of one forward pass of {', '.join(names)} over {over}",
        rule=all_met(
            *(
                equals(f"distinct operator depths of {name} over {over}" if i == 0 else f"of {name}", len(set(v)), 1)
                for i, (name, v) in enumerate(depths.items())
            ),
            equals(
                f"inputs conv output {j} sees (k = {k})", window, list(range(j - (k - 1) // 2, j + (k - 1) // 2 + 1))
            ),
        ),
        details={
            "n": list(SEQ_PARALLEL_NS),
            "seq_depth": depths,
            "conv_window": window,
            "numbers": numbers_of(
                conv_depth=(depths[models.ROLES.convolution][0], "1", "operator depth of the convolution"),
                conv_window=(len(window), "1", f"inputs conv output {j} depends on (k = {k})"),
            ),
        },
    )


@claim(
    "seq_ops_rnn",
    "A recurrent layer needs at least n sequential steps: h_t cannot be computed before h_{t−1} (O(n) "
    "sequential operations).",
    f"{TABLE1}; {D2L_CNN_RNN_SA}",
    notes=("seq_ops_rnn",),
)
def _claim_seq_ops_rnn(seed: int) -> Outcome:
    per_step, steps, depths, fused = {}, {}, {}, {}
    for name in models.recurrent():
        depths[name] = [paths.layer_seq_depth(name, n)[0] for n in SEQ_RNN_NS]
        steps[name] = np.diff(depths[name]) / np.diff(SEQ_RNN_NS)
        per_step[name] = rounded(steps[name][0])
        fused[name] = [paths.layer_seq_depth(name, n, reference=False)[0] for n in (SEQ_RNN_NS[0], SEQ_RNN_NS[-1])]
    rec = models.ROLES.recurrent
    return Outcome(
        measured=per_step[rec],
        rule=all_met(  # depth = a·n + c exactly, a ≥ 1; the measured layer's checks first
            *(
                check
                for name in _measured_first(steps, rec)
                for check in (
                    at_least(
                        f"operators added to {name}'s longest dependent chain per step"
                        if name == rec
                        else f"to {name}'s",
                        steps[name][0],
                        1,
                    ),
                    is_true(
                        f"the same at every n in {list(SEQ_RNN_NS)}" if name == rec else "the same at every n",
                        bool(np.all(steps[name] == steps[name][0])),
                    ),
                )
            )
        ),
        note="so depth = a·n + c exactly (O(n)); a fused kernel (the CPU's oneDNN LSTM) hides the loop in one "
        "operator, not the dependence",
        details={
            "n": list(SEQ_RNN_NS),
            "seq_depth_reference": depths,
            "depth_per_step": per_step,
            "seq_depth_forward_first_last_n": fused,
            "numbers": numbers_of(
                depth_largest_n=(depths[rec][-1], "1", f"operator depth of {rec} at n = {SEQ_RNN_NS[-1]}"),
            ),
        },
    )


PATH_ATTENTION_NS = (16, 64, 256, 1024, 4096)
PATH_CONV_NS = (16, 32, 64)  # for the comparison rows (a stack of up to n−1 layers)
PATH_RNN_NS = (16, 32, 128)


@claim(
    "path_attention",
    "In a self-attention layer any two positions interact through one direct connection: maximum path "
    "length O(1), the shortest of the three layer types.",
    f"{TABLE1}; {D2L_CNN_RNN_SA}",
    notes=("path_attention",),
)
def _claim_path_attention(seed: int) -> Outcome:
    att, conv = models.ROLES.attention, models.ROLES.convolution
    att_layers = [paths.layers_to_cross(att, n, seed=seed) for n in PATH_ATTENTION_NS]
    conv_layers = [paths.layers_to_cross(conv, n, 3, seed=seed) for n in PATH_CONV_NS]
    rnn_hops = [paths.path_hops(models.ROLES.recurrent, n)[0] for n in PATH_CONV_NS]
    over = f"n = {PATH_CONV_NS[0]}..{PATH_CONV_NS[-1]}"
    return Outcome(
        measured=max(att_layers),
        rule=all_met(
            equals(
                f"layers after which output n−1 depends on input 0 in {att}, n = {PATH_ATTENTION_NS[0]}.."
                f"{PATH_ATTENTION_NS[-1]}",
                att_layers,
                [1] * len(att_layers),
                "1 at every n",
            ),
            above(f"fewest layers of {conv} (k = 3), {over}", min(conv_layers), 1),
            above(f"fewest cell steps of {models.ROLES.recurrent}, {over}", min(rnn_hops), 1),
        ),
        note="they need n−1",
        details={
            "n": list(PATH_ATTENTION_NS),
            "attention_layers": att_layers,
            "n_compared": list(PATH_CONV_NS),
            "conv_layers_k3": conv_layers,
            "conv_formula": [paths.layers_to_cross_formula(conv, n, 3) for n in PATH_CONV_NS],
            "recurrent_hops": rnn_hops,
            "numbers": numbers_of(
                conv_layers_largest_n=(conv_layers[-1], "1", f"conv layers at n = {PATH_CONV_NS[-1]}")
            ),
        },
    )


@claim(
    "path_rnn",
    "In an RNN, information from position 1 reaches position n through n−1 cell computations: path length O(n).",
    f"{TABLE1}; {D2L_CNN_RNN_SA}",
    notes=("path_rnn",),
)
def _claim_path_rnn(seed: int) -> Outcome:
    hops = {name: [paths.path_hops(name, n)[0] for n in PATH_RNN_NS] for name in models.recurrent()}
    layers = {name: paths.layers_to_cross(name, PATH_RNN_NS[-1], seed=seed) for name in models.recurrent()}
    rec = models.ROLES.recurrent
    return Outcome(
        measured=hops[rec][-1],
        measured_is=f"cell steps from input 0 to output n−1 of {rec} at n = {PATH_RNN_NS[-1]}",
        rule=all_met(
            equals(
                f"the same for every recurrent layer and n in {list(PATH_RNN_NS)}",
                hops,
                {name: [n - 1 for n in PATH_RNN_NS] for name in hops},
                "n−1",
            ),
            equals(
                f"layers to cross at n = {PATH_RNN_NS[-1]} (one layer connects them), every recurrent layer",
                set(layers.values()),
                {1},
                "1",
            ),
        ),
        details={
            "n": list(PATH_RNN_NS),
            "path_hops": hops,
            "layers_to_cross": layers,
            "numbers": numbers_of(layers_to_cross=(layers[rec], "1", f"layers of {rec} to link input 0 to output n−1")),
        },
    )


RF_N = 128
RF_LAYERS = tuple(range(1, 11))
RF_KS = (3, 5)


def stacked_receptive_field(
    name: str, k: int, dilations: Sequence[int], n: int, gen: torch.Generator, seed: int = 0
) -> int:
    """Inputs the middle output of a stack of `name` layers (layer l at dilations[l]) depends on."""
    stack = nn.Sequential(
        *(_float64(name, LayerConfig(d=RECEPTIVE_D, k=k, dilation=dil), seed + i) for i, dil in enumerate(dilations))
    )
    return len(receptive_field(stack, n, RECEPTIVE_D, n // 2, gen))


@claim(
    "conv_receptive_field",
    "Stacking stride-1 convolutions with kernel k, one layer sees k positions, two layers 2k−1, L layers L·(k−1)+1.",
    D2L_CNN_RNN_SA,
    notes=("conv_receptive_field",),
)
def _claim_conv_receptive_field(seed: int) -> Outcome:
    gen = generator_for(seed, 110)
    conv = models.ROLES.convolution
    fields = {k: [stacked_receptive_field(conv, k, [1] * depth, RF_N, gen, seed) for depth in RF_LAYERS] for k in RF_KS}
    formula = {k: [depth * (k - 1) + 1 for depth in RF_LAYERS] for k in RF_KS}
    return Outcome(
        measured=fields[RF_KS[0]][-1],
        measured_is=f"inputs the middle output of {RF_LAYERS[-1]} stacked k = {RF_KS[0]} convolutions depends on",
        rule=all_met(
            equals(
                f"the same for L = 1..{RF_LAYERS[-1]} layers, k in {RF_KS}",
                fields,
                formula,
                f"L·(k−1)+1 ({formula[RF_KS[0]][-1]} for the measured; not 'about')",
            )
        ),
        details={
            "layers": list(RF_LAYERS),
            "n": RF_N,
            "receptive_field": {str(k): v for k, v in fields.items()},
            "formula": {str(k): v for k, v in formula.items()},
            "numbers": numbers_of(two_layers_k5=(fields[5][1], "1", "receptive field of 2 layers, k = 5 (2k−1 = 9)")),
        },
    )


PATH_CONV_KS = (3, 5, 9)
PATH_CONV_RANGE = (16, 32, 64, 128)


@claim(
    "path_conv_contiguous",
    "With ordinary (contiguous) convolutions, covering a sequence of length n takes L ≈ n/k layers: path "
    "length O(n/k).",
    f"{TABLE1}; study notes",
    notes=("path_conv_contiguous",),
)
def _claim_path_conv_contiguous(seed: int) -> Outcome:
    conv = models.ROLES.convolution
    layers = {k: [paths.layers_to_cross(conv, n, k, seed=seed) for n in PATH_CONV_RANGE] for k in PATH_CONV_KS}
    formula = {k: [paths.layers_to_cross_formula(conv, n, k) for n in PATH_CONV_RANGE] for k in PATH_CONV_KS}
    one_sided = {k: [math.ceil((n - 1) / (k - 1)) for n in PATH_CONV_RANGE] for k in PATH_CONV_KS}
    n_exp = {k: fitted_exponent(PATH_CONV_RANGE, v) for k, v in layers.items()}
    ratio = {k: [lay / (n / k) for lay, n in zip(v, PATH_CONV_RANGE)] for k, v in layers.items()}
    big_k, big_n = PATH_CONV_KS[0], PATH_CONV_RANGE[-1]
    return Outcome(
        measured=rounded(ratio[big_k][-1]),
        rule=Rule(
            holds=tuple(  # the note's 'L ≈ n/k'
                within(
                    f"measured layers / (n/k) at n = {big_n}, k = {k}" if k == big_k else f"k = {k}",
                    r[-1],
                    1,
                    abs_tol=CONSTANT_FACTOR_TOL,
                )
                for k, r in ratio.items()
            ),
            needs=tuple(  # layers grow linearly in n: O(n/k)
                within(
                    f"fitted exponent in n of the layers, k = {k}" if k == big_k else f"k = {k}",
                    e,
                    1,
                    abs_tol=ASYMPTOTIC_EXPONENT_TOL,
                )
                for k, e in n_exp.items()
            ),
        ),
        note="centered kernels need ⌈(n−1)/((k−1)/2)⌉ ≈ 2n/(k−1), and even one-sided growth L·(k−1)+1 ≥ n "
        "needs n/(k−1)",
        details={
            "n": list(PATH_CONV_RANGE),
            "layers": {str(k): v for k, v in layers.items()},
            "formula": {str(k): v for k, v in formula.items()},
            "one_sided": {str(k): v for k, v in one_sided.items()},
            "ratio_to_n_over_k": {str(k): [rounded(x) for x in v] for k, v in ratio.items()},
            "exponent_n": {str(k): rounded(v) for k, v in n_exp.items()},
            "numbers": numbers_of(
                layers=(layers[big_k][-1], "1", f"layers to cross, n = {big_n}, k = {big_k}"),
                n_over_k=(big_n / big_k, "1", "n/k"),
                exponent_n=(n_exp[big_k], "1", f"fitted exponent in n of the layers, k = {big_k}"),
            ),
        },
    )


DILATED_K = 3
DILATED_LAYERS = (1, 2, 3, 4, 5)
DILATED_RF_N = 2 * DILATED_K ** DILATED_LAYERS[-1] + 1  # the widest k^l stack's field fits around the middle
# Powers of k: the ceiling ⌈log_k(2(n−1)+1)⌉ then steps by exactly 1 per factor k.
DILATED_NS = tuple(DILATED_K**j for j in range(2, 7))
LOG_FIT_TOL = 0.1  # |fitted slope of layers against log_k n − 1|


@claim(
    "path_conv_dilated",
    "The O(log_k n) path length of convolutions comes from dilated convolutions: with dilations 1, 2, 4, … "
    "the receptive field after L layers reaches O(k^L), so L = O(log_k n) layers cover n.",
    f"{TABLE1}; study notes",
    notes=("path_conv_dilated",),
)
def _claim_path_conv_dilated(seed: int) -> Outcome:
    gen = generator_for(seed, 132)
    k, dilated = DILATED_K, _dilated_conv()
    doubling = [
        stacked_receptive_field(dilated, k, [2**i for i in range(depth)], DILATED_RF_N, gen, seed)
        for depth in DILATED_LAYERS
    ]
    powers = [
        stacked_receptive_field(dilated, k, [k**i for i in range(depth)], DILATED_RF_N, gen, seed)
        for depth in DILATED_LAYERS
    ]
    doubling_formula = [1 + (k - 1) * (2**depth - 1) for depth in DILATED_LAYERS]
    k_power = [k**depth for depth in DILATED_LAYERS]
    layers = [paths.layers_to_cross(dilated, n, k, seed=seed) for n in DILATED_NS]
    formula = [paths.layers_to_cross_formula(dilated, n, k) for n in DILATED_NS]
    logs = np.log(np.asarray(DILATED_NS, float)) / math.log(k)
    slope = float(np.polyfit(logs, np.asarray(layers, float), 1)[0])
    return Outcome(
        measured=doubling[-1],
        measured_is=f"receptive field of {DILATED_LAYERS[-1]} k = {k} layers with the note's doubling dilations",
        rule=Rule(
            holds=(
                equals(
                    f"with L = {DILATED_LAYERS[0]}..{DILATED_LAYERS[-1]} layers",
                    doubling,
                    k_power,
                    "k^L (the note's O(k^L))",
                ),
            ),
            needs=(
                equals(
                    f"layers to cross with dilations k^l, n = {DILATED_NS[0]}..{DILATED_NS[-1]}",
                    layers,
                    formula,
                    "⌈log_k(2(n−1)+1)⌉",
                ),
                within("their fitted slope in log_k n", slope, 1, abs_tol=LOG_FIT_TOL),
            ),
        ),
        note=f"doubling dilations give 1 + (k−1)(2^L − 1) = {doubling_formula[-1]} (O(k·2^L), L ≈ log₂ n); "
        "O(log n) holds, base k only for k^l dilations",
        details={
            "k": k,
            "layers": list(DILATED_LAYERS),
            "field_doubling": doubling,
            "field_doubling_formula": doubling_formula,
            "field_k_power": powers,
            "k_power": k_power,
            "n": list(DILATED_NS),
            "layers_to_cross_k_power": layers,
            "layers_to_cross_formula": formula,
            "numbers": numbers_of(
                slope_log_k=(slope, "1", "fitted layers per unit of log_k n, dilations k^l"),
                field_k_power=(powers[-1], "1", f"receptive field of {DILATED_LAYERS[-1]} layers, dilations k^l"),
            ),
        },
    )


ONE_LAYER_N, ONE_LAYER_D, ONE_LAYER_K = 64, 16, 3
ONE_LAYER_TS = (0, 15, 31, 63)


@claim(
    "receptive_field_one_layer",
    "In one layer, a convolution's receptive field is its fixed kernel, self-attention's is global (every "
    "position attends to all positions), and an RNN's grows step by step.",
    D2L_CNN_RNN_SA,
    notes=("receptive_field_one_layer",),
)
def _claim_receptive_field_one_layer(seed: int) -> Outcome:
    gen = generator_for(seed, 133)
    n, cfg = ONE_LAYER_N, LayerConfig(d=ONE_LAYER_D, k=ONE_LAYER_K)
    roles = {
        "convolution": models.ROLES.convolution,
        "attention": models.ROLES.attention,
        "recurrent": models.ROLES.recurrent,
    }
    fields = {}
    for role, name in roles.items():
        layer = _float64(name, cfg, seed)
        fields[role] = [len(receptive_field(layer, n, ONE_LAYER_D, t, gen)) for t in ONE_LAYER_TS]
    half = (ONE_LAYER_K - 1) // 2
    expected = {
        "convolution": [min(n - 1, t + half) - max(0, t - half) + 1 for t in ONE_LAYER_TS],
        "attention": [n] * len(ONE_LAYER_TS),
        "recurrent": [t + 1 for t in ONE_LAYER_TS],
    }
    seen = {
        "attention": f"all {n}",
        "convolution": f"its kernel's k = {ONE_LAYER_K}, fewer at the ends",
        "recurrent": "0..t (unidirectional)",
    }
    return Outcome(
        measured=fields["attention"][0],
        measured_is=f"inputs output 0 of one attention layer depends on at n = {n}",
        rule=all_met(
            *(
                equals(
                    f"inputs outputs t in {list(ONE_LAYER_TS)} of one {role} layer see"
                    if role == "attention"
                    else f"of one {role} layer",
                    fields[role],
                    expected[role],
                    seen[role],
                )
                for role in _measured_first(roles, "attention")
            )
        ),
        details={
            "n": n,
            "positions": list(ONE_LAYER_TS),
            "layers": roles,
            "receptive_field": fields,
            "numbers": numbers_of(
                conv_field=(fields["convolution"][1], "1", f"conv receptive field at t = {ONE_LAYER_TS[1]}"),
                rnn_field_last=(fields["recurrent"][-1], "1", f"RNN receptive field at t = {ONE_LAYER_TS[-1]}"),
            ),
        },
    )


SLOW_D = 64
SLOW_NS = (512, 1024, 2048, 4096)
SLOW_TIME_EXPONENT_MIN = 1.5  # local time exponent of attention between the two largest n: quadratic is 2
SLOW_FLOP_EXPONENT_MIN = 1.8  # the same of its counted FLOPs (the note's "because")
SLOWER_RATIO_MIN = 2.0  # attention's time / the other layer's at the largest n, for "very slow"
MEMORY_NS = (256, 512, 1024)  # peak memory of the explicit n×n scores, d = MEMORY_D
MEMORY_D = 32


def _crossing_text(n_star: float | None, slower_from_the_first: bool) -> float | str:
    if n_star is not None:
        return n_star
    return f"below n = {SLOW_NS[0]}" if slower_from_the_first else "none"


def _local_exponent(ns: Sequence[int], ys: Sequence[float]) -> float:
    return math.log(ys[-1] / ys[-2]) / math.log(ns[-1] / ns[-2])


@claim(
    "attention_slow_long_sequences",
    "Because its cost is quadratic in sequence length, self-attention becomes very slow on very long sequences.",
    D2L_CNN_RNN_SA,
    notes=("attention_slow_long_sequences",),
)
def _claim_attention_slow_long_sequences(seed: int) -> Outcome:
    gen = generator_for(seed, 134)
    names = (models.ROLES.attention, models.ROLES.recurrent, models.ROLES.convolution)
    with seeded(seed):
        layers = {name: models.build(name, LayerConfig(d=SLOW_D)) for name in names}
    inputs = {n: torch.randn(1, n, SLOW_D, generator=gen) for n in SLOW_NS}
    # Every length in one interleaved round, so a slow spell of the machine falls on all of them alike.
    fns = {(name, n): (lambda layer=layer, x=x: layer(x)) for name, layer in layers.items() for n, x in inputs.items()}
    measured_s = interleaved_times_s(fns)
    times = {name: [rounded(measured_s[name, n]) for n in SLOW_NS] for name in names}
    flops = {name: [counted_flops(fns[name, n]) for n in SLOW_NS] for name in names}
    attention, others = names[0], names[1:]
    time_exp = _local_exponent(SLOW_NS, times[attention])
    flop_exp = _local_exponent(SLOW_NS, flops[attention])
    slower = {other: times[attention][-1] / times[other][-1] for other in others}
    crossover = {other: fits.crossover_n(SLOW_NS, times[attention], times[other]) for other in others}
    explicit = models.build(models.ROLES.attention_explicit, LayerConfig(d=MEMORY_D))
    peaks = []
    for n in MEMORY_NS:
        x = torch.randn(1, n, MEMORY_D, generator=gen)
        with torch.inference_mode():
            peaks.append(measure_memory(lambda x=x: explicit(x), "cpu").peak_bytes)
    between = f"between n = {SLOW_NS[-2]} and {SLOW_NS[-1]} (d = {SLOW_D})"
    return Outcome(
        measured=rounded(time_exp, 3),
        rule=all_met(
            at_least(f"local exponent in n of attention's time {between}", time_exp, SLOW_TIME_EXPONENT_MIN),
            *(
                at_least(f"attention's time / {other}'s at n = {SLOW_NS[-1]}", ratio, SLOWER_RATIO_MIN)
                for other, ratio in slower.items()
            ),
            at_least(
                f"local exponent of its counted FLOPs {between} (the cause: quadratic)",
                flop_exp,
                SLOW_FLOP_EXPONENT_MIN,
            ),
        ),
        note="at short n attention is not the slow one: the projections' n·d² and the RNN's sequential steps weigh more",
        details={
            "d": SLOW_D,
            "n": list(SLOW_NS),
            "time_median_s": times,
            "flops_counted": flops,
            "crossover_n": crossover,
            "time_threads": TIME_THREADS,
            "memory_n": list(MEMORY_NS),
            "memory_d": MEMORY_D,
            "peak_bytes_explicit": peaks,
            "numbers": numbers_of(
                time_attention_largest_n=(times[attention][-1], "s", f"attention's median time at n = {SLOW_NS[-1]}"),
                **{
                    f"crossover_{other}": (
                        _crossing_text(crossover[other], times[attention][0] >= times[other][0]),
                        "1",
                        f"n* where attention's time overtakes {other}'s (log-log interpolated, as the report's n*)",
                    )
                    for other in others
                },
                memory_exponent=(
                    _local_exponent(MEMORY_NS, peaks),
                    "1",
                    "local exponent in n of the explicit scores' peak bytes",
                ),
            ),
        },
    )
