"""The textbook claims about attention and positional encodings, checked by measurement: a package with
one module per family (`scaled_dot_product`, `multi_head`, `masks_permutation`, `positional_encoding`,
`embedding_scale`, `feed_forward`, `complexity`, `training`), `record` for what they share and `verdict` for how a
verdict is reached; the layers they use live in `models/`.

Each claim is one function in `CLAIMS` (`_claim_...(seed)`), declared with `@claim(...)` (`record`): it
measures, states each bound once, a named constant in a `Check`, combines its checks by a verdict rule
(`all_met`, `some_met`, `Rule`; see `verdict`) and returns an `Outcome`, which the decorator turns into a
`ClaimResult`.

The small measuring functions (`dot_product_variances`, `softmax_jacobian_norm`, `sinusoidal_encoding`,
`offset_rotation`, `wavelengths_from_phase`, `min_pairwise_distance`, ...) are public so the tests can
check each against a case whose answer is known exactly.

The sinusoidal encoding the claims measure is `models.encoding.sinusoidal_encoding`.

Everything here is pure: values are returned; nothing is written or printed. Times are medians from the
sweep's own engine, interleaved passes over the variants on one thread, on that thread's CPU clock
(`interleaved_times_s`, method at TIME_POLICY); FLOPs from
bench.flops.count_flops (the interface's convention: 2 FLOPs per multiply-accumulate of matrix products;
softmax, tanh, additions not counted).
"""

from __future__ import annotations

from collections.abc import Callable

from bench.threads import pinned_threads
from models.attention import AdditiveAttention  # noqa: F401
from models.encoding import PE_BASE, pe_frequencies, sinusoidal_encoding  # noqa: F401

from . import complexity, feed_forward, training  # noqa: F401 - their claims register themselves
from .embedding_scale import (  # noqa: F401
    DOMINATES_RATIO,
    EMBEDDING_TOKENS,
    EMBEDDING_VOCAB,
    _claim_embedding_scale,
    scaled_embedding_ratio,
)
from .masks_permutation import (  # noqa: F401
    BROKEN_MIN,
    CAUSAL_SIZE,
    EQUIVARIANCE_SIZE,
    EQUIVARIANT_ATOL,
    FUTURE_WEIGHT_MAX,
    _claim_causal_mask,
    _claim_permutation_equivariance,
    causal_weights,
    future_weight_max,
    permutation_error,
)
from .multi_head import (  # noqa: F401
    MULTIHEAD_HEADS,
    MULTIHEAD_SIZE,
    TIME_SIMILAR_RATIO,
    _claim_multihead_cost,
)
from .positional_encoding import (  # noqa: F401
    _DISTANCE_CHUNK,
    DISTINCT_MARGIN,
    DISTINCT_POSITIONS,
    EXTRAPOLATION_MAX_LEN,
    GEOMETRIC_TOL,
    NEARLY_EQUAL_FRACTION,
    NEARLY_EQUAL_SCAN,
    ONE_THIRD_REL_TOL,
    PE_VARIANCE_POSITIONS,
    ROTATION_ATOL_FLOAT32,
    ROTATION_ATOL_FLOAT64,
    ROTATION_OFFSETS,
    ROTATION_POSITIONS,
    WAVELENGTH_POSITIONS,
    WAVELENGTH_REL_TOL,
    _claim_extrapolation,
    _claim_pe_distinct,
    _claim_pe_rotation,
    _claim_pe_variance,
    _claim_pe_wavelengths,
    encoding_variances,
    float32_encoding_error,
    geometric_fit,
    learned_lookup,
    min_pairwise_distance,
    offset_rotation,
    offset_rotation_blocks,
    rotation_error,
    wavelengths_from_phase,
)
from .record import (  # noqa: F401
    CATALOG_PATH,
    CLAIMS_THREADS,
    COLUMNS,
    D2L_SELF_ATTENTION,
    D_KS,
    D_MODEL,
    MEASURES,
    PAPER,
    STATEMENTS,
    TIME_POLICY,
    TIME_THREADS,
    VERDICTS,
    ClaimResult,
    Statement,
    _generator,
    _num,
    _numbers,
    catalog,
    claim,
    claims_frame,
    counted_flops,
    interleaved_times_s,
    note_refs,
)
from .scaled_dot_product import (  # noqa: F401
    _VARIANCE_CHUNK,
    ADDITIVE_D,
    ADDITIVE_NS,
    DOT_FASTER_RATIO,
    SATURATED_MAX_WEIGHT,
    SATURATION_KEYS,
    SATURATION_TRIALS,
    SCALED_FLAT_RATIO,
    SMALL_GRAD_RATIO,
    VARIANCE_REL_TOL,
    VARIANCE_SAMPLES,
    _claim_dot_product_variance,
    _claim_dot_vs_additive,
    _claim_softmax_saturation,
    _sampled_dot_variances,
    _variances,
    dot_product_attention,
    dot_product_variances,
    softmax_jacobian_norm,
)

# The families in the order the paper takes them up; within a family, the order its claims are declared.
FAMILIES = (
    "scaled_dot_product",
    "multi_head",
    "masks_permutation",
    "positional_encoding",
    "embedding_scale",
    "feed_forward",
    "complexity",
    "training",
)
CLAIMS: tuple[Callable[[int], ClaimResult], ...] = tuple(  # every family's claims, declared with @claim
    sorted(MEASURES, key=lambda measure: FAMILIES.index(measure.__module__.rsplit(".", 1)[-1]))
)


def measure_claims(seed: int = 0) -> list[ClaimResult]:
    """Measure every claim in CLAIMS, in order; `seed` fixes all random inputs and weights.

    Runs on CLAIMS_THREADS thread(s), restored afterwards: the claims are many small operations, and on a
    machine shared with other processes, intra-op threads spinning at every operation's barrier made them
    three times slower (27 s against 9 s on a loaded 2-core machine), while one thread loses little on the
    few large ones."""
    with pinned_threads(CLAIMS_THREADS):
        return [claim(seed) for claim in CLAIMS]
