"""Path lengths and receptive fields: how many layers or steps link two positions, and what one output sees."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from torch import nn

import models
from bench import paths
from models import LayerConfig

from .complexity import ASYMPTOTIC_EXPONENT_TOL, fitted_exponent, measured_first
from .record import D2L_CNN_RNN_SA, TABLE1, claim, generator_for, numbers_of, rounded
from .sequential_ops import RECEPTIVE_D, float64_layer, receptive_field
from .verdict import Outcome, Rule, above, all_met, equals, within

CONSTANT_FACTOR_TOL = 0.25  # a "≈" constant holds if measured/stated lies within 1 ± this


def _dilated_conv() -> str:
    """The registered convolution whose stack grows its dilation (k^l)."""
    return next(name for name, cls in models.LAYERS.items() if "k" in cls.uses and cls.path.dilation is not None)


PATH_ATTENTION_NS = (16, 64, 256, 1024, 4096)
PATH_CONV_NS = (16, 32, 64)  # for the comparison rows (a stack of up to n−1 layers)
PATH_RNN_NS = (16, 32, 128)


@claim(
    "In a self-attention layer any two positions interact through one direct connection: maximum path "
    "length O(1), the shortest of the three layer types.",
    f"{TABLE1}; {D2L_CNN_RNN_SA}",
)
def path_attention(seed: int) -> Outcome:
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
    "In an RNN, information from position 1 reaches position n through n−1 cell computations: path length O(n).",
    f"{TABLE1}; {D2L_CNN_RNN_SA}",
)
def path_rnn(seed: int) -> Outcome:
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
        *(
            float64_layer(name, LayerConfig(d=RECEPTIVE_D, k=k, dilation=dil), seed + i)
            for i, dil in enumerate(dilations)
        )
    )
    return len(receptive_field(stack, n, RECEPTIVE_D, n // 2, gen))


@claim(
    "Stacking stride-1 convolutions with kernel k, one layer sees k positions, two layers 2k−1, L layers L·(k−1)+1.",
    D2L_CNN_RNN_SA,
)
def conv_receptive_field(seed: int) -> Outcome:
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
    "With ordinary (contiguous) convolutions, covering a sequence of length n takes L ≈ n/k layers: path "
    "length O(n/k).",
    f"{TABLE1}; study notes",
)
def path_conv_contiguous(seed: int) -> Outcome:
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
    "The O(log_k n) path length of convolutions comes from dilated convolutions: with dilations 1, 2, 4, … "
    "the receptive field after L layers reaches O(k^L), so L = O(log_k n) layers cover n.",
    f"{TABLE1}; study notes",
)
def path_conv_dilated(seed: int) -> Outcome:
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
    "In one layer, a convolution's receptive field is its fixed kernel, self-attention's is global (every "
    "position attends to all positions), and an RNN's grows step by step.",
    D2L_CNN_RNN_SA,
)
def receptive_field_one_layer(seed: int) -> Outcome:
    gen = generator_for(seed, 133)
    n, cfg = ONE_LAYER_N, LayerConfig(d=ONE_LAYER_D, k=ONE_LAYER_K)
    roles = {
        "convolution": models.ROLES.convolution,
        "attention": models.ROLES.attention,
        "recurrent": models.ROLES.recurrent,
    }
    fields = {}
    for role, name in roles.items():
        layer = float64_layer(name, cfg, seed)
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
                for role in measured_first(roles, "attention")
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
