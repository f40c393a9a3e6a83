"""The embeddings: weight sharing, the one-hot lookup, the √d_model scaling against the positional encoding."""

from __future__ import annotations

import math

import torch
from torch import nn

from models.encoding import sinusoidal_encoding

from .record import D_MODEL, PAPER, claim, generator_for, numbers_of, rounded, seeded
from .verdict import Check, Outcome, Rule, all_met, at_least, between, equals, is_true, some_met, within

SECTION = f"{PAPER}, §3.4 (Embeddings and Softmax)"

EMBEDDING_VOCAB = 10_000
EMBEDDING_TOKENS = 10_000
PE_POSITIONS = 512  # the encoding's rows the variances are taken over, as the catalogue does
DOMINATES_RATIO = 10.0  # var(a) / var(b) at least this for a to "dominate" (drown) b; comparable: within 1/10 .. 10
VARIANCE_REL_TOL = 0.1  # a sampled variance "is about" a value when within 10 % of it (sampling error < 1 %)

SHARING_VOCAB = 37_000  # the paper's shared BPE vocabulary (en-de)
TIED_CHECK = {"vocab": 1000, "d": 64, "rows": 16}
LOOKUP_VOCAB, LOOKUP_D = 1000, 64
QK_PAIRS = 10_000  # relative standard error of the sampled variance √(2 / QK_PAIRS)


def embedding_table(vocab: int, d: int, std: float, gen: torch.Generator) -> torch.Tensor:
    """W_e (vocab, d) with independent N(0, std²) entries."""
    return torch.randn(vocab, d, generator=gen) * std


def variance(t: torch.Tensor) -> float:
    return float(t.double().var(correction=0))


def scaled_embedding_ratio(embedding: nn.Embedding, tokens: torch.Tensor, pe: torch.Tensor) -> tuple[float, float]:
    """(var(√d · E[tokens]), var(PE)) over all entries."""
    with torch.inference_mode():
        scaled = embedding(tokens) * math.sqrt(embedding.embedding_dim)
    return variance(scaled), variance(pe)


def unique_parameters(*modules: nn.Module) -> int:
    """Parameters of the modules together, a shared tensor counted once."""
    seen = {id(p): p.numel() for m in modules for p in m.parameters()}
    return sum(seen.values())


def tied_pair(vocab: int, d: int, device: str | torch.device = "meta") -> tuple[nn.Embedding, nn.Linear]:
    """An embedding and a pre-softmax Linear(d, vocab) whose weight IS the embedding's."""
    embedding = nn.Embedding(vocab, d, device=device)
    output = nn.Linear(d, vocab, bias=False, device=device)
    output.weight = embedding.weight  # W_o = W_eᵀ: logits = h @ W_eᵀ
    return embedding, output


def one_hot_lookup(table: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    return nn.functional.one_hot(tokens, table.shape[0]).to(table.dtype) @ table


def sampled_dot_variance(var_component: float, d_k: int, pairs: int, gen: torch.Generator) -> float:
    """Sampled var(q·k) of q, k with independent N(0, var_component) components."""
    std = math.sqrt(var_component)
    q = torch.randn(pairs, d_k, generator=gen, dtype=torch.float64) * std
    k = torch.randn(pairs, d_k, generator=gen, dtype=torch.float64) * std
    return variance((q * k).sum(-1))


def about(label: str, value: float, target: float, target_text: str | None = None) -> Check:
    return within(label, value, target, rel_tol=VARIANCE_REL_TOL, bound_text=target_text)


@claim(
    "Sharing one weight matrix between the embedding and the pre-softmax linear layer (W_o = W_eᵀ) reduces the "
    "number of parameters (by vocab · d_model).",
    SECTION,
)
def weight_sharing_params(seed: int) -> Outcome:
    vocab, d = SHARING_VOCAB, D_MODEL
    separate = unique_parameters(nn.Embedding(vocab, d, device="meta"), nn.Linear(d, vocab, bias=False, device="meta"))
    shared = unique_parameters(*tied_pair(vocab, d))
    saved = separate - shared
    # Meta tensors hold no values: the logits are checked on a real, smaller table.
    small = TIED_CHECK
    with seeded(seed):
        embedding, output = tied_pair(small["vocab"], small["d"], device="cpu")
    h = torch.randn(small["rows"], small["d"], generator=generator_for(seed, 101))
    with torch.inference_mode():
        logits_error = float((output(h) - h @ embedding.weight.T).abs().max())
    return Outcome(
        measured=saved,
        rule=all_met(
            equals(
                f"parameters saved by tying, vocab = {vocab:,}, d = {d}", saved, vocab * d, f"vocab · d = {vocab * d:,}"
            ),
            equals("max |tied logits − h @ W_eᵀ|", logits_error, 0.0),
        ),
        details={
            "numbers": numbers_of(
                separate=(separate, "parameters", "embedding + pre-softmax layer, separate"),
                shared=(shared, "parameters", "embedding + pre-softmax layer, tied"),
                logits_error=(logits_error, "1", "max |tied logits − h @ W_eᵀ|"),
            ),
        },
        unit="parameters",
    )


@claim(
    "Each component of an embedding vector is the dot product of a row of W_e with a one-hot vector.",
    SECTION,
)
def embedding_lookup_onehot(seed: int) -> Outcome:
    gen = generator_for(seed, 102)
    table = embedding_table(LOOKUP_VOCAB, LOOKUP_D, LOOKUP_D**-0.5, gen)
    tokens = torch.randint(LOOKUP_VOCAB, (LOOKUP_VOCAB,), generator=gen)
    lookup_error = float((one_hot_lookup(table, tokens) - table[tokens]).abs().max())
    hot = nn.functional.one_hot(tokens[0], LOOKUP_VOCAB).to(table.dtype)
    column_error = max(abs(float(hot @ table[:, j] - table[tokens[0], j])) for j in range(LOOKUP_D))
    try:  # a row of W_e has d entries, the one-hot vector vocab: no dot product between them
        torch.dot(table[0], hot)
        row_dot = "defined"
    except RuntimeError as err:
        row_dot = f"{type(err).__name__}: a row has {table.shape[1]} entries, the one-hot vector {len(hot)}"
    lookup = f"max |one_hot(t) @ W_e − W_e[t]|, vocab = {LOOKUP_VOCAB}, d = {LOOKUP_D}"
    return Outcome(
        measured=lookup_error,
        measured_is=f"{lookup} (the lookup as a one-hot product)",
        rule=Rule(
            holds=(
                is_true(
                    f"a row of W_e (length {LOOKUP_D}) can be dotted with a one-hot vector (length {LOOKUP_VOCAB})",
                    row_dot == "defined",
                ),
            ),
            needs=(
                equals("the lookup error", lookup_error, 0.0),
                equals("max |one_hot(t) · W_e[:, j] − W_e[t, j]| (component j from column j)", column_error, 0.0),
            ),
        ),
        details={
            "row_dot": row_dot,
            "numbers": numbers_of(
                column_error=(column_error, "1", "max |one_hot(t) · W_e[:, j] − e_j| over components j"),
                row_dot=(row_dot, "1", "one-hot vector dotted with a row of W_e"),
            ),
        },
    )


@claim(
    "With W_e ~ N(0, 1/d_model) an embedding vector has variance about 1, and multiplying by √d_model raises it "
    "to about d_model.",
    SECTION,
    notes=("embedding_init_variance", "embedding_scaled_variance"),
)
def embedding_init_variance(seed: int) -> Outcome:
    gen = generator_for(seed, 103)
    d = D_MODEL
    table = embedding_table(EMBEDDING_VOCAB, d, d**-0.5, gen)
    e = table[torch.randint(EMBEDDING_VOCAB, (EMBEDDING_TOKENS,), generator=gen)]
    var_e, var_scaled = variance(e), variance(e * math.sqrt(d))
    norm_sq = float(e.double().pow(2).sum(-1).mean())
    unit_table = embedding_table(EMBEDDING_VOCAB, d, 1.0, gen)  # N(0, 1): where "1 → d_model" would be true
    var_unit_scaled = variance(unit_table * math.sqrt(d))
    return Outcome(
        measured=rounded(var_e, 4),
        rule=some_met(
            about(f"variance of the components of e, W_e ~ N(0, 1/{d}) (the note)", var_e, 1.0),
            about("after × √d (the note)", var_scaled, d),
        ),
        note=f"1/d = {1 / d:.5f} by the init",
        details={
            "numbers": numbers_of(
                var_scaled=(var_scaled, "1", "variance of √d · e (the note: about d_model)"),
                norm_sq=(norm_sq, "1", "mean squared length ‖e‖² (what is about 1)"),
                var_unit_scaled=(var_unit_scaled, "1", "variance of √d · e with an N(0, 1) init"),
            ),
        },
    )


@claim(
    "Multiplying W_e by √d_model is equivalent to raising its initialisation variance from 1/d_model to 1.",
    SECTION,
)
def embedding_scale_init_variance(seed: int) -> Outcome:
    d = D_MODEL
    table = embedding_table(EMBEDDING_VOCAB, d, d**-0.5, generator_for(seed, 104))
    var_table, var_scaled = variance(table), variance(table * math.sqrt(d))
    return Outcome(
        measured=rounded(var_scaled, 4),
        rule=all_met(
            about(f"variance of √d · W_e, W_e ~ N(0, 1/{d}), {EMBEDDING_VOCAB:,} × {d}", var_scaled, 1.0),
            about("variance of W_e", var_table, 1 / d, f"1/{d}"),
        ),
        details={"numbers": numbers_of(var_table=(var_table, "1", "variance of W_e (1/d_model)"))},
    )


@claim(
    "Without scaling, the embedding's variance (about 1) is far larger than the positional encoding's (about 1/3), "
    "so adding them would drown the position signal.",
    SECTION,
)
def unscaled_embedding_drowns_pe(seed: int) -> Outcome:
    gen = generator_for(seed, 105)
    d = D_MODEL
    var_pe = variance(sinusoidal_encoding(PE_POSITIONS, d))
    tokens = torch.randint(EMBEDDING_VOCAB, (EMBEDDING_TOKENS,), generator=gen)
    ratios = {}
    for name, std in (("N(0,1/d)", d**-0.5), ("N(0,1)", 1.0)):
        ratios[name] = variance(embedding_table(EMBEDDING_VOCAB, d, std, gen)[tokens]) / var_pe
    ratio = f"var(e) / var(PE), unscaled, d = {d}, pos < {PE_POSITIONS}"
    return Outcome(
        measured=rounded(ratios["N(0,1/d)"], 4),
        rule=some_met(
            at_least(
                f"{ratio}, the note's N(0, 1/d) init (to drown the encoding)", ratios["N(0,1/d)"], DOMINATES_RATIO
            ),
            at_least("likewise, an N(0, 1) init", ratios["N(0,1)"], DOMINATES_RATIO),
        ),
        details={
            "init": list(ratios),
            "ratio": [rounded(r) for r in ratios.values()],
            "numbers": numbers_of(
                ratio_unit_init=(ratios["N(0,1)"], "1", "var(e) / var(PE) with an N(0, 1) init"),
                var_pe=(var_pe, "1", f"variance of the encoding, pos < {PE_POSITIONS} (the note: about 1/3)"),
            ),
        },
    )


@claim(
    "Multiplying the embedding by √d_model makes the embedding and the positional encoding comparable in scale, "
    "preventing the position information from being drowned by the embedding.",
    SECTION,
    notes=("embedding_scale_balances_pe",),
)
def embedding_scale(seed: int) -> Outcome:
    gen = generator_for(seed, 10)
    tokens = torch.randint(EMBEDDING_VOCAB, (EMBEDDING_TOKENS,), generator=gen)
    pe = sinusoidal_encoding(PE_POSITIONS, D_MODEL)
    scaled, unscaled = {}, {}
    var_pe = variance(pe)
    for name, std in (("N(0,1/d)", D_MODEL**-0.5), ("N(0,1)", 1.0)):
        embedding = nn.Embedding.from_pretrained(embedding_table(EMBEDDING_VOCAB, D_MODEL, std, gen))
        var_scaled, _ = scaled_embedding_ratio(embedding, tokens, pe)
        scaled[name] = var_scaled / var_pe
        unscaled[name] = var_scaled / D_MODEL / var_pe
    ratio = f"var(√d · e) / var(PE), d = {D_MODEL}, pos < {PE_POSITIONS}"
    comparable = f"1/{DOMINATES_RATIO:g} and {DOMINATES_RATIO:g} (comparable)"
    return Outcome(
        measured=rounded(scaled["N(0,1)"], 4),
        rule=some_met(
            between(
                f"{ratio}, PyTorch's default N(0,1) init",
                scaled["N(0,1)"],
                1 / DOMINATES_RATIO,
                DOMINATES_RATIO,
                comparable,
            ),
            between("likewise, an N(0,1/d) init", scaled["N(0,1/d)"], 1 / DOMINATES_RATIO, DOMINATES_RATIO, comparable),
        ),
        details={
            "init": list(scaled),
            "ratio": [rounded(r) for r in scaled.values()],
            "ratio_unscaled": [rounded(r) for r in unscaled.values()],
            "var_pe": rounded(var_pe),
            "numbers": numbers_of(
                ratio_small_init=(scaled["N(0,1/d)"], "1", "variance ratio, scaled, with an N(0, 1/d) init"),
                ratio_small_unscaled=(unscaled["N(0,1/d)"], "1", "variance ratio, unscaled, N(0, 1/d) init"),
                ratio_unit_unscaled=(unscaled["N(0,1)"], "1", "variance ratio, unscaled, N(0, 1) init"),
                var_pe=(var_pe, "1", "variance of the encoding"),
            ),
        },
    )


@claim(
    "With d_k = d_model and Q, K components of variance about d_model, the dot products QKᵀ have variance about "
    "d_model², and dividing by √d_model brings it back to about d_model.",
    SECTION,
    notes=("embed_qk_variance", "embed_scaled_qk_variance"),
)
def embed_qk_variance(seed: int) -> Outcome:
    d = D_MODEL
    var_qk = sampled_dot_variance(d, d, QK_PAIRS, generator_for(seed, 106))
    var_scaled = var_qk / d
    return Outcome(
        measured=rounded(var_qk, 4),
        rule=some_met(
            about(
                f"var(q·k), components N(0, {d}), d_k = {d}, {QK_PAIRS:,} pairs (the note)",
                var_qk,
                d**2,
                f"d² = {d**2:,}",
            ),
            about("var(q·k / √d) (the note)", var_scaled, d),
        ),
        note=f"d_k·σ⁴ = d³ = {d**3:,} by theory",
        details={
            "numbers": numbers_of(
                theory=(d**3, "1", "d_k · var(q_i) · var(k_i) = d_model³"),
                var_scaled=(var_scaled, "1", "var(q·k / √d_model) (the note: about d_model)"),
                theory_ratio=(var_qk / d**3, "1", "sampled / d_model³"),
            ),
        },
    )
