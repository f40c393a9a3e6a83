"""Positions beyond a trained length: a learned table against the sinusoidal encoding."""

from __future__ import annotations

import torch
from torch import nn

from models.encoding import sinusoidal_encoding

from .pe_geometry import (
    ROTATION_ATOL_FLOAT32,
    distinct_check,
    float32_encoding_error,
    min_pairwise_distance,
    rotation_error,
)
from .record import D_MODEL, PAPER, claim, numbers_of, rounded, seeded
from .verdict import Outcome, all_met, at_most, equals

EXTRAPOLATION_MAX_LEN = 512  # the training length (a learned table's size)
EXTRAPOLATION_CHECK_LEN = 4096
EXTRAPOLATION_OFFSETS = (1, 10, 100, 1000)
# Further out, a window of positions at each power of two, in float32.
EXTRAPOLATION_SCAN = tuple(2**p for p in range(9, 25))
EXTRAPOLATION_WINDOW = 64


def learned_lookup(max_len: int, d: int, position: int) -> str:
    """A learned table of `max_len` positions at `position`: 'finite' or the error's text."""
    table = nn.Embedding(max_len, d)
    try:
        with torch.inference_mode():
            row = table(torch.tensor([position]))
    except IndexError as err:
        return f"IndexError: {err}"
    return "finite" if bool(torch.isfinite(row).all()) else "not finite"


def far_window(start: int, d: int, window: int = EXTRAPOLATION_WINDOW) -> tuple[float, float, float]:
    """float32 at start .. start + window: (rotation error, k = 1; rounding error; |PE(start + 1) − PE(start)|)."""
    pos = torch.arange(start, start + window + 1, dtype=torch.float64)
    table = sinusoidal_encoding(pos, d, torch.float32)
    return (
        rotation_error(table, 1),
        float(float32_encoding_error(pos, d).max()),
        float((table[1].double() - table[0].double()).norm()),
    )


@claim(
    "A learned position table cannot represent positions beyond its length; the sinusoidal function can: "
    "positions beyond the training length stay distinct and keep the offset rotations.",
    f"{PAPER}, §3.5 (sinusoids 'may allow the model to extrapolate to sequence lengths longer than "
    f"the ones encountered during training')",
)
def extrapolation(seed: int) -> Outcome:
    beyond = EXTRAPOLATION_MAX_LEN + 1
    with seeded(seed):
        learned = learned_lookup(EXTRAPOLATION_MAX_LEN, D_MODEL, beyond)
    table = sinusoidal_encoding(EXTRAPOLATION_CHECK_LEN, D_MODEL, torch.float32)
    dmin, i, j = min_pairwise_distance(table)
    trained = table[:EXTRAPOLATION_MAX_LEN].double()
    dmin_trained = float(torch.cdist(table[EXTRAPOLATION_MAX_LEN:].double(), trained).min())
    rounding = float(float32_encoding_error(torch.arange(EXTRAPOLATION_CHECK_LEN, dtype=torch.float64), D_MODEL).max())
    beyond_table = table[EXTRAPOLATION_MAX_LEN:]
    rotation = max(rotation_error(beyond_table, k) for k in EXTRAPOLATION_OFFSETS)
    scan = {start: far_window(start, D_MODEL) for start in EXTRAPOLATION_SCAN}
    rotation_off_from = next((s for s, v in scan.items() if v[0] > ROTATION_ATOL_FLOAT32), None)
    identical_from = next((s for s, v in scan.items() if v[2] == 0.0), None)
    learned_error = learned.split(":")[0]  # the exception's type, or 'finite'
    rotated = f"max |PE(pos+k) − M_k PE(pos)| for pos ≥ {EXTRAPOLATION_MAX_LEN}, k in {list(EXTRAPOLATION_OFFSETS)}"
    return Outcome(
        measured=f"learned: {learned_error} at {beyond}; sinusoidal to {EXTRAPOLATION_CHECK_LEN}: "
        f"smallest distance {dmin:.3g}, rotation error {rotation:.2g}",
        rule=all_met(
            equals(
                f"what nn.Embedding({EXTRAPOLATION_MAX_LEN}, {D_MODEL}) gives at {beyond}", learned_error, "IndexError"
            ),
            distinct_check(
                f"float32 sinusoidal encodings of pos < {EXTRAPOLATION_CHECK_LEN}, smallest distance", dmin, rounding
            ),
            at_most(rotated, rotation, ROTATION_ATOL_FLOAT32),
        ),
        details={
            "max_len": EXTRAPOLATION_MAX_LEN,
            "checked_len": EXTRAPOLATION_CHECK_LEN,
            "learned": learned,
            "scan_start": list(scan),
            "scan_rotation_error": [rounded(v[0], 3) for v in scan.values()],
            "scan_float32_error": [rounded(v[1], 3) for v in scan.values()],
            "scan_neighbour_distance": [rounded(v[2], 4) for v in scan.values()],
            "numbers": numbers_of(
                closest_pair=(
                    f"{i}, {j}",
                    "positions",
                    f"the closest two encodings among pos < {EXTRAPOLATION_CHECK_LEN}",
                ),
                distance_to_trained=(
                    dmin_trained,
                    "1",
                    f"smallest distance from a new position to one of the first {EXTRAPOLATION_MAX_LEN}",
                ),
                float32_error_max=(rounding, "1", f"largest float32 rounding error, pos < {EXTRAPOLATION_CHECK_LEN}"),
                rotation_off_from=(
                    rotation_off_from if rotation_off_from is not None else "never",
                    "positions",
                    f"first scanned power of two where the float32 rotation error (k = 1) > {ROTATION_ATOL_FLOAT32:g}",
                ),
                identical_from=(
                    identical_from if identical_from is not None else "never",
                    "positions",
                    "first scanned power of two whose float32 encoding equals the next position's",
                ),
            ),
        },
    )
