"""Masks and permutations: equivariance (not invariance), the causal mask, a constant encoding, RNN and conv order."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

import models
from models import LayerConfig
from models.encoding import sinusoidal_encoding

from .record import D2L_SELF_ATTENTION, PAPER, claim, generator_for, numbers_of, rounded
from .verdict import Outcome, Rule, all_met, at_least, at_most, equals, is_true

EQUIVARIANCE_SIZE = {"batch": 2, "n": 64, "d": 64, "heads": 4}
EQUIVARIANT_ATOL = 1e-5  # max |f(Px) − P f(x)| at float32 rounding (outputs are O(1))
BROKEN_MIN = 1e-2  # with positional encodings added, the difference at least this


def permutation_error(layer: nn.Module, x: torch.Tensor, perm: torch.Tensor, pe: torch.Tensor | None = None) -> float:
    """max |f(x[:, perm] (+ PE)) − f(x (+ PE))[:, perm]|, the encoding added after permuting as a model adds it."""
    pe = torch.zeros_like(x[0]) if pe is None else pe
    with torch.inference_mode():
        return float((layer(x[:, perm] + pe) - layer(x + pe)[:, perm]).abs().max())


def permuted_input(gen: torch.Generator, size: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """(x (batch, n, d) ~ N(0, 1), a random permutation of the n positions)."""
    x = torch.randn(size["batch"], size["n"], size["d"], generator=gen)
    return x, torch.randperm(size["n"], generator=gen)


def _equivariance_outcome(
    seed: int, x: torch.Tensor, perm: torch.Tensor, constant: torch.Tensor | None, keys: tuple[str, str], note: str
) -> Outcome:
    """Both attention layers equivariant with `constant` added (None: nothing), not with sinusoids (`keys`)."""
    s = EQUIVARIANCE_SIZE
    sinusoid = sinusoidal_encoding(s["n"], s["d"])
    errors, errors_pe = {}, {}
    for name in (models.ROLES.attention, models.ROLES.attention_explicit):
        layer = models.build(name, LayerConfig(d=s["d"], heads=s["heads"]), seed=seed)
        errors[name] = rounded(permutation_error(layer, x, perm, constant))
        errors_pe[name] = rounded(permutation_error(layer, x, perm, sinusoid))
    added = "" if constant is None else " + c"
    broken = "smallest max |f(Px) − P f(x)| with sinusoidal encodings"
    return Outcome(
        measured=max(errors.values()),
        rule=all_met(
            at_most(
                f"max |f(Px{added}) − P f(x{added})| ({', '.join(errors)})", max(errors.values()), EQUIVARIANT_ATOL
            ),
            at_least(broken, min(errors_pe.values()), BROKEN_MIN),
        ),
        note=note,
        details={
            **s,
            keys[0]: errors,
            keys[1]: errors_pe,
            "numbers": numbers_of(**{keys[1]: (min(errors_pe.values()), "1", broken)}),
        },
    )


@claim(
    "Self-attention without positional information is permutation-equivariant: permuting the input "
    "permutes the output; with sinusoidal encodings added it is not.",
    f"{PAPER}, §3.5; {D2L_SELF_ATTENTION}",
)
def permutation_equivariance(seed: int) -> Outcome:
    x, perm = permuted_input(generator_for(seed, 5), EQUIVARIANCE_SIZE)
    return _equivariance_outcome(seed, x, perm, None, ("error_no_pe", "error_with_pe"), "float32 rounding")


CAUSAL_SIZE = {"batch": 2, "heads": 4, "n": 128, "d_head": 32}
FUTURE_WEIGHT_MAX = 0.0  # exactly zero: exp(−inf) = 0 in IEEE arithmetic


def causal_weights(scores: torch.Tensor) -> torch.Tensor:
    """softmax over keys after setting the scores of future keys (j > i) to −inf."""
    n = scores.shape[-1]
    future = torch.ones(n, n, dtype=torch.bool).triu(1)  # (n, n): True where j > i
    return torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)


def future_weight_max(weights: torch.Tensor) -> float:
    n = weights.shape[-1]
    return float(weights[..., torch.ones(n, n, dtype=torch.bool).triu(1)].abs().max())


@claim(
    "A causal mask (−∞ on future positions before the softmax) gives exactly zero weight to future positions.",
    f"{PAPER}, §3.2.3",
)
def causal_mask(seed: int) -> Outcome:
    s = CAUSAL_SIZE
    gen = generator_for(seed, 11)
    q, k, v = (torch.randn(s["batch"], s["heads"], s["n"], s["d_head"], generator=gen) for _ in range(3))
    weights = causal_weights(q @ k.transpose(-2, -1) / math.sqrt(s["d_head"]))
    explicit = future_weight_max(weights)
    # The fused kernel's weights are hidden: a zero future weight leaves a row unchanged when the future changes.
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
    return Outcome(
        measured=explicit,
        rule=all_met(
            at_most("largest weight on a future position after the softmax", explicit, FUTURE_WEIGHT_MAX),
            at_most(
                "largest change of the fused SDPA(is_causal) outputs when future keys and values change",
                fused,
                FUTURE_WEIGHT_MAX,
            ),
        ),
        details={
            **s,
            "sdpa_change_per_prefix": changes,
            "numbers": numbers_of(sdpa_change=(fused, "1", "largest change of fused outputs")),
        },
    )


SCOPE_SIZE = {"n": 16, "d": 16, "heads": 2}
DEPENDS_ATOL = 0.0  # a Jacobian block exactly zero: the output does not depend on that input


def causal_dependencies(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """(n, n): True where output i of the layer's causal attention on x (n, d) depends on input j."""

    def f(seq: torch.Tensor) -> torch.Tensor:
        x1 = seq[None]
        q, k, v = (layer._split(p(x1)) for p in (layer.q_proj, layer.k_proj, layer.v_proj))
        weights = causal_weights(q @ k.transpose(-2, -1) / math.sqrt(layer.d_head))
        mixed = (weights @ v).transpose(1, 2).reshape(x1.shape)
        return layer.out_proj(mixed)[0]

    jac = torch.autograd.functional.jacobian(f, x)
    return jac.abs().amax(dim=(1, 3)) > DEPENDS_ATOL


@claim(
    "With the decoder's mask, the output at position i cannot see position i and later, so it depends only on "
    "positions 1 to i−1.",
    f"{PAPER}, §3.2.3 and §3.1 (outputs shifted right)",
)
def causal_mask_scope(seed: int) -> Outcome:
    """The mask alone lets output i see itself; the right shift does the rest: "partly"."""
    s = SCOPE_SIZE
    gen = generator_for(seed, 41)
    layer = models.build(models.ROLES.attention_explicit, LayerConfig(d=s["d"], heads=s["heads"]), seed=seed)
    words = torch.randn(s["n"], s["d"], generator=gen)
    deps = causal_dependencies(layer, words)
    future = int(deps.triu(1).sum())
    self_deps = int(deps.diagonal().sum())
    past_missing = int((~deps).tril(-1).sum())
    start = torch.zeros(1, s["d"])
    shifted_deps = causal_dependencies(layer, torch.cat([start, words[:-1]]))  # [i, p]: on position p
    on_words = shifted_deps[:, 1:]  # [i, j]: output i on word j (at position j + 1)
    shifted_ok = not bool(on_words.triu(0).any()) and bool(on_words.tril(-1)[1:].any())
    return Outcome(
        measured=self_deps,
        rule=Rule(
            holds=(equals(f"positions i (of {s['n']}) whose masked output depends on input i itself", self_deps, 0),),
            partly=(is_true("after a right shift, output i depends on words < i only", shifted_ok),),
            needs=(equals("pairs (i, j > i) with output i depending on input j", future, 0),),
        ),
        note=f"the mask alone gives {s['n']} positions that see themselves",
        details={
            **s,
            "dependencies": deps.int().tolist(),
            "numbers": numbers_of(
                future_dependencies=(future, "1", "pairs (i, j > i) with output i depending on input j"),
                past_missing=(past_missing, "1", "pairs (i, j < i) with no dependency"),
                shifted_only_earlier=(
                    int(shifted_ok),
                    "1",
                    "after the right shift, output i depends on words < i only",
                ),
            ),
        },
        unit="positions",
    )


INVARIANT_ATOL = EQUIVARIANT_ATOL  # max |f(Px) − f(x)| for "unchanged"


@claim(
    "Self-attention is permutation-invariant: shuffling the input words leaves its output unchanged.",
    f"{PAPER}, §3.5; {D2L_SELF_ATTENTION}",
    notes=("permutation_invariance_wording",),
)
def permutation_invariance(seed: int) -> Outcome:
    """The output rows move with the input; equivariance and the mean's invariance are reported beside it."""
    s = EQUIVARIANCE_SIZE
    x, perm = permuted_input(generator_for(seed, 42), s)
    names = (models.ROLES.attention, models.ROLES.attention_explicit)
    invariance, equivariance, pooled = {}, {}, {}
    for name in names:
        layer = models.build(name, LayerConfig(d=s["d"], heads=s["heads"]), seed=seed)
        with torch.inference_mode():
            y, y_perm = layer(x), layer(x[:, perm])
        invariance[name] = rounded(float((y_perm - y).abs().max()))
        equivariance[name] = rounded(float((y_perm - y[:, perm]).abs().max()))
        pooled[name] = rounded(float((y_perm.mean(1) - y.mean(1)).abs().max()))
    least = min(invariance.values())
    return Outcome(
        measured=least,
        rule=all_met(at_most(f"smallest max |f(Px) − f(x)| over {', '.join(names)}", least, INVARIANT_ATOL)),
        note="the outputs move with the inputs: equivariant, see permutation_equivariance",
        details={
            **s,
            "invariance_error": invariance,
            "equivariance_error": equivariance,
            "mean_pooled_invariance_error": pooled,
            "numbers": numbers_of(
                equivariance_error=(max(equivariance.values()), "1", "max |f(Px) − P f(x)|: equivariant"),
                pooled_error=(max(pooled.values()), "1", "max |mean f(Px) − mean f(x)|: invariant after pooling"),
            ),
        },
    )


CONSTANT_PE_SCALE = 1.0  # the constant vector c ~ N(0, I), the size of a token embedding


@claim(
    "A positional embedding that is the same vector at every position carries no position information: "
    "self-attention stays permutation-equivariant.",
    f"{PAPER}, §3.5",
)
def constant_pe_ineffective(seed: int) -> Outcome:
    s = EQUIVARIANCE_SIZE
    gen = generator_for(seed, 43)
    x, perm = permuted_input(gen, s)
    constant = (torch.randn(1, s["d"], generator=gen) * CONSTANT_PE_SCALE).expand(s["n"], s["d"])
    keys = ("error_constant", "error_sinusoidal")
    return _equivariance_outcome(seed, x, perm, constant, keys, "c: one vector at every position")


ORDER_SIZE = {"batch": 2, "n": 64, "d": 32, "heads": 4, "k": 3}


@claim(
    "A recurrent layer keeps word order through its recurrence and a convolution's sliding kernel sees local "
    "order, unlike self-attention: neither is permutation-equivariant.",
    f"{PAPER}, §4; {D2L_SELF_ATTENTION}",
)
def rnn_cnn_order_sensitive(seed: int) -> Outcome:
    s = ORDER_SIZE
    x, perm = permuted_input(generator_for(seed, 44), s)
    cfg = LayerConfig(d=s["d"], heads=s["heads"], k=s["k"])
    ordered = (*models.recurrent(), models.ROLES.convolution)
    errors = {name: rounded(permutation_error(models.build(name, cfg, seed=seed), x, perm)) for name in ordered}
    attention = rounded(permutation_error(models.build(models.ROLES.attention, cfg, seed=seed), x, perm))
    least = min(errors.values())
    return Outcome(
        measured=least,
        rule=all_met(
            at_least(f"smallest max |f(Px) − P f(x)| over {', '.join(ordered)}", least, BROKEN_MIN),
            at_most(f"that of {models.ROLES.attention}", attention, EQUIVARIANT_ATOL),
        ),
        details={
            **s,
            "error": errors,
            f"error_{models.ROLES.attention}": attention,
            "numbers": numbers_of(error_attention=(attention, "1", f"max |f(Px) − P f(x)|, {models.ROLES.attention}")),
        },
    )
