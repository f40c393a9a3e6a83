"""The √d_model scaling of the embeddings against the positional encoding."""

from __future__ import annotations

import math

import torch
from torch import nn

from models.encoding import sinusoidal_encoding

from .record import D_MODEL, PAPER, ClaimResult, _generator, _num, _numbers, _result, claim

# ------------------------------------------------------------------------ 10. embedding scale
EMBEDDING_VOCAB = 10_000
EMBEDDING_TOKENS = 10_000
DOMINATES_RATIO = 10.0  # var(√d · embedding) / var(PE) at least this for the embedding to "dominate"


def scaled_embedding_ratio(embedding: nn.Embedding, tokens: torch.Tensor, pe: torch.Tensor) -> tuple[float, float]:
    """(var(√d · E[tokens]), var(PE)) over all entries."""
    with torch.inference_mode():
        scaled = embedding(tokens) * math.sqrt(embedding.embedding_dim)
    return float(scaled.double().var(correction=0)), float(pe.double().var(correction=0))


@claim(
    "embedding_scale",
    "Multiplying the embeddings by √d_model makes the embedding's scale dominate the positional encoding's.",
    f"{PAPER}, §3.4 (Embeddings and Softmax)",
    notes=None,
)
def _claim_embedding_scale(seed: int) -> ClaimResult:
    gen = _generator(seed, 10)
    tokens = torch.randint(EMBEDDING_VOCAB, (EMBEDDING_TOKENS,), generator=gen)
    pe = sinusoidal_encoding(EMBEDDING_TOKENS, D_MODEL)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        default = nn.Embedding(EMBEDDING_VOCAB, D_MODEL)  # PyTorch's default init: N(0, 1)
        small = nn.Embedding(EMBEDDING_VOCAB, D_MODEL)
        nn.init.normal_(small.weight, std=D_MODEL**-0.5)  # N(0, 1/d_model), as with tied output weights
    var_default, var_pe = scaled_embedding_ratio(default, tokens, pe)
    var_small, _ = scaled_embedding_ratio(small, tokens, pe)
    ratios = {"N(0,1)": var_default / var_pe, "N(0,1/d)": var_small / var_pe}
    dominating = sum(r >= DOMINATES_RATIO for r in ratios.values())
    return _result(
        "embedding_scale",
        measured=_num(ratios["N(0,1)"], 4),
        expected=f"var(√d · embedding) / var(PE), d = {D_MODEL}, PyTorch's default N(0,1) init: "
        f"≥ {DOMINATES_RATIO:g}; "
        f"likewise for an N(0,1/d) init",
        verdict={2: "holds", 1: "partly", 0: "fails"}[dominating],
        details={
            "init": list(ratios),
            "ratio": [_num(r) for r in ratios.values()],
            "var_scaled_embedding": [_num(var_default), _num(var_small)],
            "var_pe": _num(var_pe),
            "numbers": _numbers(
                ratio_small_init=(ratios["N(0,1/d)"], "1", "variance ratio with an N(0, 1/d) init"),
                var_pe=(var_pe, "1", "variance of the encoding"),
            ),
        },
    )
