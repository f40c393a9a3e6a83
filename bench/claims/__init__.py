"""The textbook claims, measured: modules by family; `record`, `measure`, `verdict` shared. docs/method.md."""

from __future__ import annotations

from collections.abc import Callable

from bench.threads import pinned_threads
from models.attention import AdditiveAttention
from models.encoding import pe_frequencies, sinusoidal_encoding

from . import (  # noqa: F401 - their claims register
    attention_weights,
    complexity,
    embedding_scale,
    feed_forward,
    masks_permutation,
    multi_head,
    path_length,
    pe_extrapolation,
    pe_formula,
    pe_frequency,
    pe_geometry,
    scaled_dot_product,
    sequential_ops,
    slow_attention,
    training,
)
from .embedding_scale import scaled_embedding_ratio
from .masks_permutation import EQUIVARIANT_ATOL, causal_weights, future_weight_max, permutation_error
from .measure import CLAIMS_THREADS, counted_flops, interleaved_times_s
from .pe_extrapolation import learned_lookup
from .pe_geometry import (
    encoding_variances,
    float32_encoding_error,
    geometric_fit,
    min_pairwise_distance,
    offset_rotation,
    rotation_error,
    wavelengths_from_phase,
)
from .record import COLUMNS, MEASURES, STATEMENTS, VERDICTS, ClaimResult, catalog, claims_frame
from .scaled_dot_product import (
    VARIANCE_REL_TOL,
    VARIANCE_SAMPLES,
    dot_product_attention,
    dot_product_variances,
    softmax_jacobian_norm,
)

# The claims' modules in the order the paper takes up their families; within one, the order its claims are declared.
MODULES = (
    "scaled_dot_product",
    "attention_weights",
    "multi_head",
    "masks_permutation",
    "pe_geometry",
    "pe_formula",
    "pe_frequency",
    "pe_extrapolation",
    "embedding_scale",
    "feed_forward",
    "complexity",
    "sequential_ops",
    "path_length",
    "slow_attention",
    "training",
)
CLAIMS: tuple[Callable[[int], ClaimResult], ...] = tuple(
    sorted(MEASURES, key=lambda measure: MODULES.index(measure.__module__.rsplit(".", 1)[-1]))
)


def measure_claims(seed: int = 0, on_claim: Callable[[], object] | None = None) -> list[ClaimResult]:
    """Every claim in CLAIMS, in order; `seed` fixes all random inputs and weights; `on_claim` runs after each."""
    # One thread: the claims are many small operations, and on a shared machine intra-op threads spinning at
    # every operator's barrier slowed them far more than one thread loses on the few large ones.
    with pinned_threads(CLAIMS_THREADS):
        results = []
        for claim in CLAIMS:
            results.append(claim(seed))
            if on_claim is not None:
                on_claim()
        return results


__all__ = [
    "AdditiveAttention",
    "CLAIMS",
    "CLAIMS_THREADS",
    "COLUMNS",
    "EQUIVARIANT_ATOL",
    "MODULES",
    "STATEMENTS",
    "VARIANCE_REL_TOL",
    "VARIANCE_SAMPLES",
    "VERDICTS",
    "ClaimResult",
    "catalog",
    "causal_weights",
    "claims_frame",
    "counted_flops",
    "dot_product_attention",
    "dot_product_variances",
    "encoding_variances",
    "float32_encoding_error",
    "future_weight_max",
    "geometric_fit",
    "interleaved_times_s",
    "learned_lookup",
    "measure_claims",
    "min_pairwise_distance",
    "offset_rotation",
    "pe_frequencies",
    "permutation_error",
    "rotation_error",
    "scaled_embedding_ratio",
    "sinusoidal_encoding",
    "softmax_jacobian_norm",
    "wavelengths_from_phase",
]
