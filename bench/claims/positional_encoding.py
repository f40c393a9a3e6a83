"""The sinusoidal positional encoding: offsets as rotations, distinct positions, wavelengths, variance, the d2l code
and index range, a linear readout of differences, the binary analogy, and what happens beyond a trained length."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cache

import torch
from torch import nn

from models.encoding import PE_BASE, pe_frequencies, sinusoidal_encoding

from .record import D2L_SELF_ATTENTION, D_MODEL, PAPER, claim, generator_for, numbers_of, rounded, seeded
from .verdict import Check, Outcome, Rule, above, all_met, at_least, at_most, below, equals, is_true, some_met, within

ROTATION_POSITIONS = 2048
ROTATION_OFFSETS = (1, 2, 3, 5, 10, 25, 50, 100, 250, 500, 1000)
ROTATION_ATOL_FLOAT32 = 1e-3  # float32 rounding of the angles pos·ω sets the scale
ROTATION_ATOL_FLOAT64 = 1e-9


def offset_rotation_blocks(k: int, d: int, base: float = PE_BASE) -> torch.Tensor:
    """The rotations [[cos kω, sin kω], [−sin kω, cos kω]] (d/2, 2, 2) taking each pair from pos to pos + k."""
    omega = pe_frequencies(d, torch.float64, base)
    c, s = torch.cos(k * omega), torch.sin(k * omega)
    return torch.stack([torch.stack([c, s], -1), torch.stack([-s, c], -1)], -2)


def offset_rotation(k: int, d: int, base: float = PE_BASE) -> torch.Tensor:
    """M_k (d, d), float64, block diagonal, with PE(pos + k) = M_k PE(pos) for every pos."""
    return torch.block_diag(*offset_rotation_blocks(k, d, base))


def rotation_error(pe: torch.Tensor, k: int, base: float = PE_BASE) -> float:
    """max |PE(pos + k) − M_k PE(pos)| over the table `pe` (n, d), in float64, M_k applied pair by pair."""
    table = pe.double()
    blocks = offset_rotation_blocks(k, pe.shape[1], base)
    sin, cos = table[:-k, 0::2], table[:-k, 1::2]  # (n − k, d/2) each
    moved_sin = blocks[:, 0, 0] * sin + blocks[:, 0, 1] * cos
    moved_cos = blocks[:, 1, 0] * sin + blocks[:, 1, 1] * cos
    return float(torch.maximum((table[k:, 0::2] - moved_sin).abs().max(), (table[k:, 1::2] - moved_cos).abs().max()))


@claim(
    "pe_rotation",
    "For any fixed offset k, PE(pos + k) is a linear function of PE(pos): the same rotation M_k for every pos.",
    f"{PAPER}, §3.5; {D2L_SELF_ATTENTION} (relative positional information)",
    notes=("pe_rotation",),
)
def _claim_pe_rotation(seed: int) -> Outcome:
    errors = {}
    for dtype in (torch.float32, torch.float64):
        table = sinusoidal_encoding(ROTATION_POSITIONS, D_MODEL, dtype)
        errors[str(dtype).removeprefix("torch.")] = [rounded(rotation_error(table, k)) for k in ROTATION_OFFSETS]
    worst32, worst64 = max(errors["float32"]), max(errors["float64"])
    rotated = f"max |PE(pos+k) − M_k PE(pos)| over pos < {ROTATION_POSITIONS}, k in {list(ROTATION_OFFSETS)}"
    return Outcome(
        measured=worst32,
        rule=all_met(
            at_most(f"{rotated}, d = {D_MODEL}, float32 table", worst32, ROTATION_ATOL_FLOAT32),
            at_most("float64 table", worst64, ROTATION_ATOL_FLOAT64),
        ),
        details={
            "k": list(ROTATION_OFFSETS),
            "positions": ROTATION_POSITIONS,
            "d": D_MODEL,
            "error_float32": errors["float32"],
            "error_float64": errors["float64"],
            "numbers": numbers_of(error_float64=(worst64, "1", "largest error, float64 table")),
        },
    )


DISTINCT_POSITIONS = 10_000
DISTINCT_MARGIN = 10.0  # smallest distance ≥ this × the largest float32 rounding error of an encoding
# "Nearly equal" in float32: rounding moves an encoding by this fraction of the smallest distance between two.
NEARLY_EQUAL_FRACTION = 0.5
NEARLY_EQUAL_SCAN = (1e3, 2.0**25, 600)  # positions scanned: log-spaced from, to, count
_DISTANCE_CHUNK = 2048


def min_pairwise_distance(points: torch.Tensor, chunk: int = _DISTANCE_CHUNK) -> tuple[float, int, int]:
    """(smallest distance between two rows, i, j): float32 in row chunks, the closest pair's in float64."""
    x = points.float()
    sq = (x * x).sum(-1)
    best, where = math.inf, (0, 1)
    n = len(x)
    for start in range(0, n - 1, chunk):
        stop = min(start + chunk, n)
        d2 = sq[start:stop, None] + sq[None, start:] - 2 * x[start:stop] @ x[start:].T
        rows = torch.arange(start, stop)[:, None]
        d2.masked_fill_(torch.arange(start, n)[None, :] <= rows, math.inf)  # each pair once, no self-pairs
        value, flat = float(d2.min()), int(d2.argmin())
        if value < best:
            best, where = value, (start + flat // d2.shape[1], start + flat % d2.shape[1])
    i, j = where
    return float((points[i].double() - points[j].double()).norm()), i, j


def distinct_check(label: str, distance: float, rounding: float) -> Check:
    """Encodings are told apart at DISTINCT_MARGIN × the largest float32 rounding error among them."""
    return at_least(
        label,
        distance,
        DISTINCT_MARGIN * rounding,
        f"{DISTINCT_MARGIN:g} × the largest float32 rounding error among them",
    )


def float32_encoding_error(positions: torch.Tensor, d: int) -> torch.Tensor:
    """‖PE_float32(pos) − PE_float64(pos)‖ per position."""
    exact = sinusoidal_encoding(positions.double(), d, torch.float64)
    return (sinusoidal_encoding(positions.float(), d, torch.float32).double() - exact).norm(dim=-1)


@claim(
    "pe_distinct",
    "Every position gets a distinct sinusoidal encoding.",
    f"{PAPER}, §3.5; {D2L_SELF_ATTENTION} (absolute positional information)",
    notes=("pe_distinct",),
)
def _claim_pe_distinct(seed: int) -> Outcome:
    table64 = sinusoidal_encoding(DISTINCT_POSITIONS, D_MODEL, torch.float64)
    dmin, i, j = min_pairwise_distance(table64)
    rounding = float(float32_encoding_error(torch.arange(DISTINCT_POSITIONS, dtype=torch.float64), D_MODEL).max())
    lo, hi, count = NEARLY_EQUAL_SCAN
    scan = torch.unique(torch.logspace(math.log10(lo), math.log10(hi), int(count), dtype=torch.float64).round())
    scan_error = float32_encoding_error(scan, D_MODEL)
    over = (scan_error >= NEARLY_EQUAL_FRACTION * dmin).nonzero()
    nearly_equal_from = int(scan[over[0, 0]]) if len(over) else None
    # float32 spacing reaches 2 at 2/eps = 2^24: pos + 1 rounds to pos, identical encodings.
    identical_from = round(2 / torch.finfo(torch.float32).eps)
    p = torch.tensor([identical_from - 1, identical_from, identical_from + 1], dtype=torch.float64)
    pe = sinusoidal_encoding(p, D_MODEL, torch.float32)
    identical_confirmed = bool(torch.equal(pe[1], pe[2]) and not torch.equal(pe[0], pe[1]))
    closest = f"smallest distance between two of the first {DISTINCT_POSITIONS:,} encodings (d = {D_MODEL})"
    return Outcome(
        measured=rounded(dmin, 4),
        rule=all_met(distinct_check(closest, dmin, rounding)),
        details={
            "positions": DISTINCT_POSITIONS,
            "d": D_MODEL,
            "closest_offset": abs(j - i),
            "scan_positions": [int(v) for v in scan],
            "scan_float32_error": [rounded(v) for v in scan_error],
            "nearly_equal_threshold": rounded(NEARLY_EQUAL_FRACTION * dmin),
            "numbers": numbers_of(
                closest_offset=(abs(j - i), "1", "offset between the closest two positions"),
                float32_error_max=(rounding, "1", f"largest float32 rounding error, pos < {DISTINCT_POSITIONS:,}"),
                nearly_equal_from=(
                    nearly_equal_from if nearly_equal_from is not None else f"beyond {int(hi):,}",
                    "positions",
                    f"first scanned position whose float32 rounding error ≥ {NEARLY_EQUAL_FRACTION:g}"
                    " × the smallest distance",
                ),
                identical_from=(
                    identical_from if identical_confirmed else "not confirmed",
                    "positions",
                    "first position whose float32 encoding equals the next one's bit for bit",
                ),
            ),
        },
    )


WAVELENGTH_POSITIONS = 10_000
WAVELENGTH_REL_TOL = 0.01  # λ_0 vs 2π, and the progression's end λ(d/2) vs 10000·2π
GEOMETRIC_TOL = 1e-3  # largest |log λ_i − fitted line| (natural log) for "geometric"


def wavelengths_from_phase(pe: torch.Tensor) -> torch.Tensor:
    """Each pair's wavelength, 2π / the slope of its unwrapped phase (turning by less than π per position)."""
    table = pe.double()
    phase = torch.atan2(table[:, 0::2], table[:, 1::2])
    step = torch.diff(phase, dim=0)
    step = (step + math.pi) % (2 * math.pi) - math.pi  # unwrap: each step into [−π, π)
    unwrapped = torch.cat([phase[:1], phase[:1] + torch.cumsum(step, 0)])
    pos = torch.arange(len(table), dtype=torch.float64)
    centred = pos - pos.mean()
    slope = (centred[:, None] * (unwrapped - unwrapped.mean(0))).sum(0) / (centred * centred).sum()
    return 2 * math.pi / slope


def geometric_fit(wavelengths: torch.Tensor) -> tuple[float, float, float]:
    """(λ_0, ratio, largest log residual) of the line log λ_i = log λ_0 + i log ratio."""
    i = torch.arange(len(wavelengths), dtype=torch.float64)
    design = torch.stack([torch.ones_like(i), i], -1)
    coef = torch.linalg.lstsq(design, wavelengths.double().log()[:, None]).solution[:, 0]
    residual = (design @ coef - wavelengths.double().log()).abs().max()
    return float(coef[0].exp()), float(coef[1].exp()), float(residual)


def top_wavelength_check(largest: float, d: int) -> Check:
    """The one bound on "up to about 10000·2π", shared by pe_wavelengths and pe_max_wavelength."""
    return within(
        f"largest wavelength present (i = d/2 − 1, d = {d}) / (10000·2π)",
        largest / (PE_BASE * 2 * math.pi),
        1,
        rel_tol=WAVELENGTH_REL_TOL,
    )


@cache
def measured_wavelengths() -> tuple[torch.Tensor, float, float, float]:
    """(λ_i, fitted λ_0, ratio, largest log residual) from the float32 table (d = D_MODEL) over the positions."""
    lam = wavelengths_from_phase(sinusoidal_encoding(WAVELENGTH_POSITIONS, D_MODEL, torch.float32))
    return (lam, *geometric_fit(lam))


def _growth_checks(lam0: float, residual: float) -> tuple[Check, Check]:
    return (
        at_most("largest |log λ_i − fitted line in i| (geometric)", residual, GEOMETRIC_TOL),
        within("fitted λ(0) / 2π", lam0 / (2 * math.pi), 1, rel_tol=WAVELENGTH_REL_TOL),
    )


@claim(
    "pe_wavelength_growth",
    "The wavelength of the sinusoidal encoding grows exponentially with the pair index i, from 2π at i = 0.",
    f"{PAPER}, §3.5",
    notes=("pe_wavelength_growth",),
)
def _claim_pe_wavelength_growth(seed: int) -> Outcome:
    lam, lam0, ratio, residual = measured_wavelengths()
    return Outcome(
        measured=rounded(ratio, 5),
        measured_is="the ratio of consecutive wavelengths, fitted",
        rule=all_met(*_growth_checks(lam0, residual)),
        note=f"exactly 10000^(2/d) = {PE_BASE ** (2 / D_MODEL):.5f}",
        details={
            "i": list(range(len(lam))),
            "wavelength": [rounded(v) for v in lam],
            "d": D_MODEL,
            "positions": WAVELENGTH_POSITIONS,
            "numbers": numbers_of(first_over_2pi=(lam0 / (2 * math.pi), "1", "fitted λ_0 / 2π")),
        },
    )


@claim(
    "pe_wavelengths",
    "The wavelengths of the sinusoidal encoding form a geometric progression from 2π to 10000·2π.",
    f"{PAPER}, §3.5",
    notes=("pe_wavelengths",),
)
def _claim_pe_wavelengths(seed: int) -> Outcome:
    lam, lam0, ratio, residual = measured_wavelengths()
    largest = float(lam.max())
    return Outcome(
        measured=rounded(largest / (2 * math.pi), 5),
        measured_is="the largest wavelength present / 2π, from the table",
        rule=Rule(holds=(top_wavelength_check(largest, D_MODEL),), needs=_growth_checks(lam0, residual)),
        note="the progression's next term, i = d/2, would be 10000·2π; the last present is 10000^(1 − 2/d)·2π",
        details={
            "d": D_MODEL,
            "numbers": numbers_of(
                fitted_end_over_2pi=(
                    lam0 * ratio ** (D_MODEL // 2) / (2 * math.pi),
                    "1",
                    "the fitted line at i = d/2, / 2π",
                ),
            ),
        },
    )


PE_VARIANCE_POSITIONS = 10_000
ONE_THIRD_REL_TOL = 0.10  # the overall variance's relative tolerance around 1/3


def encoding_variances(pe: torch.Tensor) -> tuple[torch.Tensor, float, float]:
    """(variance of each column (d,), variance of all entries, mean of the squares), in float64."""
    table = pe.double()
    return table.var(dim=0, correction=0), float(table.var(correction=0)), float((table * table).mean())


@claim(
    "pe_variance_one_third",
    "Sinusoidal positional encodings have variance about 1/3 (study-note claim used to argue for "
    "the √d_model embedding scale).",
    f"study notes (not in the paper); cf. {PAPER}, §3.4 and §3.5",
    notes=("pe_variance_one_third",),
)
def _claim_pe_variance(seed: int) -> Outcome:
    pe = sinusoidal_encoding(PE_VARIANCE_POSITIONS, D_MODEL, torch.float64)
    per_dim, overall, second_moment = encoding_variances(pe)
    near = float(((per_dim - 1 / 3).abs() <= ONE_THIRD_REL_TOL / 3).double().mean())
    entries = f"variance of all entries, pos < {PE_VARIANCE_POSITIONS:,}, d = {D_MODEL}"
    return Outcome(
        measured=rounded(overall, 4),
        rule=all_met(within(entries, overall, 1 / 3, rel_tol=ONE_THIRD_REL_TOL, bound_text="1/3")),
        details={
            "dim": list(range(D_MODEL)),
            "variance_per_dim": [rounded(v, 4) for v in per_dim],
            "numbers": numbers_of(
                second_moment=(second_moment, "1", "mean of PE² (sin² + cos² = 1 per pair: exactly 1/2)"),
                high_freq_variance=(float(per_dim[:2].mean()), "1", "variance of the fastest pair (i = 0)"),
                fraction_dims_near_third=(near, "1", f"fraction of dimensions within {ONE_THIRD_REL_TOL:.0%} of 1/3"),
            ),
        },
    )


FORMULA_POSITIONS = 1000  # the d2l class's max_len
FORMULA_ATOL = 1.25e-4  # two float32 spacings at the largest angle: the code is float32
FORMULA_ODD_D = 5  # an odd width: 3 sin columns for 2 cos slots


def d2l_positional_table(num_hiddens: int, max_len: int = FORMULA_POSITIONS) -> torch.Tensor:
    """P (1, max_len, num_hiddens) as the d2l PositionalEncoding class of the notes builds it."""
    P = torch.zeros((1, max_len, num_hiddens))
    X = torch.arange(max_len, dtype=torch.float32).reshape(-1, 1) / torch.pow(
        10000, torch.arange(0, num_hiddens, 2, dtype=torch.float32) / num_hiddens
    )
    P[:, :, 0::2] = torch.sin(X)
    P[:, :, 1::2] = torch.cos(X)
    return P


def d2l_positional_forward(P: torch.Tensor, X: torch.Tensor) -> torch.Tensor:
    """The class's forward with dropout 0: X + P[:, :X.shape[1], :]."""
    return X + P[:, : X.shape[1], :]


def formula_table(n: int, d: int, base: float = PE_BASE) -> torch.Tensor:
    """sin and cos(pos / base^(2j/d)) written from the formula in float64 (a power, not the exp recipe)."""
    pos = torch.arange(n, dtype=torch.float64)[:, None]
    denom = torch.tensor(base, dtype=torch.float64) ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    table = torch.empty(n, d, dtype=torch.float64)
    table[:, 0::2], table[:, 1::2] = torch.sin(pos / denom), torch.cos(pos / denom)
    return table


def _error_text(fn: Callable[[], object]) -> str:
    try:
        fn()
    except Exception as err:  # noqa: BLE001 - the exception is the measurement
        return f"{type(err).__name__}: {str(err).splitlines()[0]}"
    return "ok"


@claim(
    "pe_formula_code",
    "The d2l PositionalEncoding code computes P[pos, 2j] = sin(pos/10000^(2j/d)) and P[pos, 2j+1] = "
    "cos(pos/10000^(2j/d)), rows indexed by position and columns by encoding dimension.",
    f"{D2L_SELF_ATTENTION} (positional encoding code)",
    notes=("pe_formula_code",),
)
def _claim_pe_formula_code(seed: int) -> Outcome:
    P = d2l_positional_table(D_MODEL)
    error = float((P[0].double() - formula_table(FORMULA_POSITIONS, D_MODEL)).abs().max())
    odd = _error_text(lambda: d2l_positional_table(FORMULA_ODD_D))
    longer = _error_text(lambda: d2l_positional_forward(P, torch.zeros(1, FORMULA_POSITIONS + 1, D_MODEL)))
    return Outcome(
        measured=rounded(error, 3),
        rule=all_met(
            at_most(f"max |P − formula (float64)| over pos < {FORMULA_POSITIONS}, d = {D_MODEL}", error, FORMULA_ATOL)
        ),
        note="float32 rounding of the angle",
        details={
            "d": D_MODEL,
            "max_len": FORMULA_POSITIONS,
            "odd_d": FORMULA_ODD_D,
            "odd_d_outcome": odd,
            "longer_input_outcome": longer,
            "numbers": numbers_of(
                odd_d=(odd, "1", f"the class at odd d = {FORMULA_ODD_D} (even d only)"),
                longer_input=(
                    longer,
                    "1",
                    f"forward on {FORMULA_POSITIONS + 1} positions (rows cached: {FORMULA_POSITIONS})",
                ),
            ),
        },
    )


def column_coverage(d: int, pair_indices: range) -> tuple[torch.Tensor, int]:
    """(times each of the d columns is addressed as 2i or 2i+1, addresses beyond the last) over `pair_indices`."""
    counts = torch.zeros(d, dtype=torch.int64)
    beyond = 0
    for i in pair_indices:
        for column in (2 * i, 2 * i + 1):
            if column < d:
                counts[column] += 1
            else:
                beyond += 1
    return counts, beyond


INDEX_TABLE_POSITIONS = 100
INDEX_ATOL = 1e-12


@claim(
    "pe_index_range",
    "In PE(pos, 2i) and PE(pos, 2i+1) the index i runs over the pairs 0 .. d_model/2 − 1.",
    f"{PAPER}, §3.5",
    notes=("pe_index_range",),
)
def _claim_pe_index_range(seed: int) -> Outcome:
    counts, beyond = column_coverage(D_MODEL, range(D_MODEL // 2))
    once = int((counts == 1).sum())
    table = sinusoidal_encoding(INDEX_TABLE_POSITIONS, D_MODEL, torch.float64)
    angles = torch.arange(INDEX_TABLE_POSITIONS, dtype=torch.float64)[:, None] * PE_BASE ** (
        -2 * torch.arange(D_MODEL // 2, dtype=torch.float64) / D_MODEL
    )
    column_error = float(
        torch.maximum((table[:, 0::2] - angles.sin()).abs().max(), (table[:, 1::2] - angles.cos()).abs().max())
    )
    return Outcome(
        measured=once,
        rule=all_met(
            equals(f"columns addressed exactly once by 2i, 2i+1 for i = 0 .. {D_MODEL // 2 - 1}", once, D_MODEL),
            equals("addresses beyond the last column", beyond, 0),
            at_most("largest |table columns 2i, 2i+1 − sin, cos(pos·10000^(−2i/d))|", column_error, INDEX_ATOL),
        ),
        details={
            "d": D_MODEL,
            "numbers": numbers_of(
                beyond=(beyond, "1", "addresses beyond the last column"),
                column_error=(column_error, "1", "largest |table − sin/cos(pos·ω_i)|, float64"),
            ),
        },
    )


@claim(
    "pe_index_range_full",
    "In PE(pos, 2i) = sin(pos/10000^(2i/d_model)), i is the dimension index, running 0 .. d_model − 1.",
    "study notes (not in the paper); cf. " + f"{PAPER}, §3.5",
    notes=("pe_index_range_full",),
)
def _claim_pe_index_range_full(seed: int) -> Outcome:
    counts, beyond = column_coverage(D_MODEL, range(D_MODEL))
    addressing = sum(1 for i in range(D_MODEL) if 2 * i + 1 < D_MODEL) / D_MODEL
    exist = f"fraction of i = 0 .. {D_MODEL - 1} whose columns 2i, 2i+1 exist in a d = {D_MODEL} encoding"
    return Outcome(
        measured=addressing,
        rule=all_met(equals(exist, addressing, 1)),
        details={
            "d": D_MODEL,
            "numbers": numbers_of(
                highest_column=(2 * (D_MODEL - 1) + 1, "1", "column 2i+1 at i = d − 1 (the table has 0 .. d − 1)"),
                beyond=(beyond, "1", "addresses beyond the last column"),
                pairs=(D_MODEL // 2, "1", "values of i that fill the table (0 .. d/2 − 1): i indexes pairs"),
            ),
        },
    )


BOUNDED_POSITIONS = 10_000
NORM_ATOL = 1e-4  # ‖PE(pos)‖ against √(d/2): float32 rounding of d squares summed


@claim(
    "pe_bounded",
    "Sinusoidal positional encoding values lie in [−1, 1] (and every encoding has norm √(d/2)).",
    f"{PAPER}, §3.5",
    notes=("pe_bounded",),
)
def _claim_pe_bounded(seed: int) -> Outcome:
    table = sinusoidal_encoding(BOUNDED_POSITIONS, D_MODEL, torch.float32)
    largest = float(table.abs().max())
    norm_error = float((table.double().norm(dim=-1) - math.sqrt(D_MODEL / 2)).abs().max())
    return Outcome(
        measured=largest,
        rule=all_met(
            at_most(f"max |PE| over pos < {BOUNDED_POSITIONS:,}, d = {D_MODEL}, float32", largest, 1.0),
            at_most(f"largest |‖PE(pos)‖ − √(d/2)| (√(d/2) = {math.sqrt(D_MODEL / 2):g})", norm_error, NORM_ATOL),
        ),
        details={
            "d": D_MODEL,
            "positions": BOUNDED_POSITIONS,
            "numbers": numbers_of(
                minimum=(float(table.min()), "1", "smallest entry"),
                norm_error=(norm_error, "1", "largest |‖PE(pos)‖ − √(d/2)|"),
            ),
        },
    )


ROTATION_MATRIX_OFFSETS = (1, 7, 100)
ROTATION_MATRIX_POSITIONS = 1000
ORTHOGONAL_ATOL = 1e-12  # |RᵀR − I| and |det R − 1| in float64
WRONG_SIGN_MIN = 0.5  # the transposed matrix (other sign convention) must miss by at least this much


def pair_rotation_error(k: int, d: int, positions: int, transpose: bool = False) -> float:
    """max |[sin, cos]((pos + k)ω_i) − R_i [sin, cos](pos ω_i)| over pos and pairs i, float64."""
    omega = pe_frequencies(d, torch.float64)
    blocks = offset_rotation_blocks(k, d)
    if transpose:
        blocks = blocks.transpose(-1, -2)
    pos = torch.arange(positions, dtype=torch.float64)[:, None]
    now = torch.stack([torch.sin(pos * omega), torch.cos(pos * omega)], -1)
    later = torch.stack([torch.sin((pos + k) * omega), torch.cos((pos + k) * omega)], -1)
    moved = (blocks @ now[..., None])[..., 0]
    return float((later - moved).abs().max())


@claim(
    "pe_rotation_matrix",
    "For each (sin, cos) pair of frequency ω_i, the map from position pos to pos + k is the 2×2 rotation "
    "[[cos kω_i, sin kω_i], [−sin kω_i, cos kω_i]].",
    f"{D2L_SELF_ATTENTION} (relative positional information)",
    notes=("pe_rotation_matrix",),
)
def _claim_pe_rotation_matrix(seed: int) -> Outcome:
    errors = [pair_rotation_error(k, D_MODEL, ROTATION_MATRIX_POSITIONS) for k in ROTATION_MATRIX_OFFSETS]
    wrong = [pair_rotation_error(k, D_MODEL, ROTATION_MATRIX_POSITIONS, True) for k in ROTATION_MATRIX_OFFSETS]
    blocks = torch.cat([offset_rotation_blocks(k, D_MODEL) for k in ROTATION_MATRIX_OFFSETS])
    orthogonal = float((blocks.transpose(-1, -2) @ blocks - torch.eye(2, dtype=torch.float64)).abs().max())
    det = float((torch.linalg.det(blocks) - 1).abs().max())
    distinct = len(torch.unique(offset_rotation_blocks(1, D_MODEL)[:, 0, 1]))
    worst = max(errors)
    over = f"pos < {ROTATION_MATRIX_POSITIONS}, k in {list(ROTATION_MATRIX_OFFSETS)}, every pair of d = {D_MODEL}"
    return Outcome(
        measured=rounded(worst, 3),
        rule=all_met(
            at_most(f"max error of the note's matrix over {over}, float64", worst, ROTATION_ATOL_FLOAT64),
            at_most("largest |RᵀR − I|", orthogonal, ORTHOGONAL_ATOL),
            at_most("largest |det R − 1|", det, ORTHOGONAL_ATOL),
            at_least("smallest error of its transpose (the other sign convention)", min(wrong), WRONG_SIGN_MIN),
        ),
        details={
            "k": list(ROTATION_MATRIX_OFFSETS),
            "error": [rounded(v, 3) for v in errors],
            "error_transposed": [rounded(v, 3) for v in wrong],
            "numbers": numbers_of(
                orthogonality=(orthogonal, "1", "largest |RᵀR − I|"),
                determinant=(det, "1", "largest |det R − 1|"),
                transposed=(min(wrong), "1", "smallest error of the transposed matrix (wrong sign convention)"),
                distinct_rotations=(distinct, "1", "different 2×2 rotations in M_1 (one per pair, not one fixed)"),
            ),
        },
    )


READOUT_PAIRS = 5000  # (A, k) pairs in each of the fitting and the two held-out sets
READOUT_FIT_A = (0, 1000)  # positions A of the fitting pairs, [from, to)
READOUT_SHIFTED_A = (1000, 1900)  # held-out positions beyond the fitted range
READOUT_MAX_K = 50
READOUT_RMSE_MAX = 0.5  # below half a position, to tell "3 after" from 2 or 4
QUADRATIC_SPREAD_ATOL = 1e-9  # ‖PE(A+k) − PE(A)‖² is the same for every A (float64)


def difference_features(a: torch.Tensor, k: torch.Tensor, d: int) -> torch.Tensor:
    """[PE(a + k) − PE(a), 1] (n, d + 1) in float64."""
    diff = sinusoidal_encoding(a + k, d, torch.float64) - sinusoidal_encoding(a, d, torch.float64)
    return torch.cat([diff, torch.ones(len(a), 1, dtype=torch.float64)], 1)


def readout_scores(pred: torch.Tensor, target: torch.Tensor) -> tuple[float, float]:
    residual = ((target - pred) ** 2).sum()
    return float(1 - residual / ((target - target.mean()) ** 2).sum()), float((residual / len(target)).sqrt())


def squared_step(k: torch.Tensor, d: int) -> torch.Tensor:
    """‖PE(A + k) − PE(A)‖² = Σ_i (2 − 2 cos kω_i), whatever A."""
    return (2 - 2 * torch.cos(k.double()[:, None] * pe_frequencies(d, torch.float64))).sum(-1)


@claim(
    "pe_relative_from_difference",
    "A linear layer can read the relative offset k (e.g. 'B is 3 positions after A') from the difference "
    "PE(pos_B) − PE(pos_A).",
    "study notes (not in the paper); cf. " + f"{PAPER}, §3.5",
    notes=("pe_relative_from_difference",),
)
def _claim_pe_relative_from_difference(seed: int) -> Outcome:
    gen = generator_for(seed, 40)

    def pairs(a_range: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
        a = torch.randint(*a_range, (READOUT_PAIRS,), generator=gen).double()
        return a, torch.randint(0, READOUT_MAX_K, (READOUT_PAIRS,), generator=gen).double()

    sets = {"fit": pairs(READOUT_FIT_A), "same_range": pairs(READOUT_FIT_A), "shifted": pairs(READOUT_SHIFTED_A)}
    features = {name: difference_features(a, k, D_MODEL) for name, (a, k) in sets.items()}
    coef = torch.linalg.lstsq(features["fit"], sets["fit"][1][:, None], driver="gelsd").solution[:, 0]
    scores = {name: readout_scores(features[name] @ coef, sets[name][1]) for name in sets}
    # What depends on k only: the squared distance, quadratic in PE.
    a, k = sets["shifted"]
    quadratic = (features["shifted"][:, :-1] ** 2).sum(-1)
    spread = float((quadratic - squared_step(k, D_MODEL)).abs().max())
    table = squared_step(torch.arange(READOUT_MAX_K), D_MODEL)
    separable = bool(len(torch.unique(table.round(decimals=6))) == READOUT_MAX_K)
    # The fitted map applied to float32 differences, as a model would see them.
    a, k = sets["same_range"]
    diff32 = (sinusoidal_encoding(a + k, D_MODEL) - sinusoidal_encoding(a, D_MODEL)).double()
    rmse_float32 = readout_scores(diff32 @ coef[:-1] + coef[-1], k)[1]
    r2_shifted, rmse_shifted = scores["shifted"]
    readout = f"RMS error (positions) of a least-squares linear readout of k < {READOUT_MAX_K} from PE(A+k) − PE(A)"
    return Outcome(
        measured=rounded(rmse_shifted, 4),
        rule=some_met(
            below(
                f"{readout}, d = {D_MODEL}, fitted on A in {list(READOUT_FIT_A)}, on held-out A in "
                f"{list(READOUT_SHIFTED_A)}",
                rmse_shifted,
                READOUT_RMSE_MAX,
            ),
            below("on held-out A in the fitted range", scores["same_range"][1], READOUT_RMSE_MAX),
        ),
        details={
            "d": D_MODEL,
            "pairs": READOUT_PAIRS,
            "r2": {name: rounded(v[0], 4) for name, v in scores.items()},
            "rmse": {name: rounded(v[1], 4) for name, v in scores.items()},
            "numbers": numbers_of(
                r2_shifted=(r2_shifted, "1", "R² on held-out A beyond the fitted range"),
                rmse_same_range=(
                    scores["same_range"][1],
                    "positions",
                    "RMS error on held-out pairs, A in the fitted range",
                ),
                rmse_same_range_float32=(
                    rmse_float32,
                    "positions",
                    "the same, the fitted map applied to float32 differences",
                ),
                quadratic_spread=(spread, "1", "largest |‖PE(A+k) − PE(A)‖² − Σ(2 − 2cos kω_i)| (depends on k only)"),
                quadratic_separates=(
                    "yes" if separable and spread <= QUADRATIC_SPREAD_ATOL else "no",
                    "1",
                    f"‖PE(A+k) − PE(A)‖² the same for every A (within {QUADRATIC_SPREAD_ATOL:g}) and distinct for every "
                    f"k < {READOUT_MAX_K} (k readable by lookup)",
                ),
            ),
        },
    )


MAX_WAVELENGTH_DS = (4, 64, 512)


def pe_wavelengths_exact(d: int, base: float = PE_BASE) -> torch.Tensor:
    return 2 * math.pi / pe_frequencies(d, torch.float64, base)


@claim(
    "pe_max_wavelength",
    "The largest wavelength occurs at i = d_model/2 − 1 and is about 10000·2π.",
    "study notes (not in the paper); cf. " + f"{PAPER}, §3.5",
    notes=("pe_max_wavelength",),
)
def _claim_pe_max_wavelength(seed: int) -> Outcome:
    ratios, places = {}, {}
    for d in MAX_WAVELENGTH_DS:
        lam = pe_wavelengths_exact(d)
        places[d] = int(lam.argmax()) == d // 2 - 1
        ratios[d] = float(lam.max()) / (PE_BASE * 2 * math.pi)
    ratio = ratios[D_MODEL]
    return Outcome(
        measured=rounded(ratio, 5),
        rule=some_met(
            top_wavelength_check(ratio * PE_BASE * 2 * math.pi, D_MODEL),
            is_true("it sits at i = d/2 − 1", places[D_MODEL]),
        ),
        note=f"exactly 10000^(−2/d) = {PE_BASE ** (-2 / D_MODEL):.5f}",
        details={
            "d": list(MAX_WAVELENGTH_DS),
            "max_over_10000_2pi": [rounded(ratios[d], 5) for d in MAX_WAVELENGTH_DS],
            "at_last_pair": [places[d] for d in MAX_WAVELENGTH_DS],
            "numbers": numbers_of(
                at_last_pair=("yes" if places[D_MODEL] else "no", "1", f"largest at i = d/2 − 1 (d = {D_MODEL})"),
                d64=(ratios[64], "1", "largest wavelength / (10000·2π) at d = 64"),
                d4_over_2pi=(ratios[4] * PE_BASE, "1", "largest wavelength / 2π at d = 4 (the notes' example)"),
            ),
        },
    )


FREQUENCY_POSITIONS = 1000
D4_ATOL = 1e-12  # d = 4 float64 table against (sin pos, cos pos, sin(pos/100), cos(pos/100))


def pair_step_sizes(pe: torch.Tensor) -> torch.Tensor:
    """Mean step per position of each (sin, cos) pair (d/2,), 2 sin(ω_i / 2) for a sinusoid."""
    step = torch.diff(pe.double(), dim=0)
    return (step[:, 0::2] ** 2 + step[:, 1::2] ** 2).sqrt().mean(0)


def column_mean_steps(pe: torch.Tensor) -> torch.Tensor:
    return torch.diff(pe.double(), dim=0).abs().mean(0)


@claim(
    "pe_frequency_decreasing",
    "The frequency of the sinusoids decreases along the encoding dimension: low dimensions change at every "
    "position, high ones very slowly (for d_model = 4: sin pos, cos pos, sin(pos/100), cos(pos/100)).",
    f"{D2L_SELF_ATTENTION} (absolute positional information); {PAPER}, §3.5",
    notes=("pe_frequency_decreasing", "pe_dmodel4_example"),
)
def _claim_pe_frequency_decreasing(seed: int) -> Outcome:
    omega = pe_frequencies(D_MODEL)
    table = sinusoidal_encoding(FREQUENCY_POSITIONS + 1, D_MODEL, torch.float64)
    steps = pair_step_sizes(table)
    not_smaller = int((torch.diff(steps) >= 0).sum())
    omega_ok = bool((torch.diff(omega) < 0).all())
    columns = column_mean_steps(table)
    pos = torch.arange(FREQUENCY_POSITIONS + 1, dtype=torch.float64)
    d4 = sinusoidal_encoding(FREQUENCY_POSITIONS + 1, 4, torch.float64)
    written = torch.stack([pos.sin(), pos.cos(), (pos / 100).sin(), (pos / 100).cos()], -1)
    d4_error = float((d4 - written).abs().max())
    d4_steps = column_mean_steps(d4)
    fast, slow = float(d4_steps[:2].mean()), float(d4_steps[2:].mean())
    steps_up = (
        f"pairs whose step per position (pos < {FREQUENCY_POSITIONS}, d = {D_MODEL}) is not smaller than the last"
    )
    return Outcome(
        measured=not_smaller,
        rule=all_met(
            equals(steps_up, not_smaller, 0),
            is_true("ω_i strictly decreasing", omega_ok),
            at_most("d = 4: largest |PE − (sin pos, cos pos, sin(pos/100), cos(pos/100))|", d4_error, D4_ATOL),
            above("d = 4: mean |ΔPE| per position, columns 0–1", fast, slow, "that of columns 2–3"),
        ),
        details={
            "pair": list(range(D_MODEL // 2)),
            "step": [rounded(v, 4) for v in steps],
            "numbers": numbers_of(
                omega_last=(float(omega[-1]), "rad/position", "slowest frequency ω_(d/2 − 1)"),
                first_pair_column_step=(float(columns[:2].mean()), "1", "mean |ΔPE| per position, first pair"),
                last_column_steps=(
                    f"{rounded(columns[-2], 3):g}, {rounded(columns[-1], 3):g}",
                    "1",
                    "mean |ΔPE| per position, last two columns",
                ),
                d4_error=(d4_error, "1", "d = 4: largest |PE − (sin p, cos p, sin p/100, cos p/100)|"),
                d4_fast=(fast, "1", "d = 4: mean |ΔPE| per position, columns 0–1"),
                d4_slow=(slow, "1", "d = 4: mean |ΔPE| per position, columns 2–3"),
            ),
        },
    )


BINARY_BITS = 4
NOTE_PATTERNS = ("01010101", "00001111", "0000000011111111")  # the patterns the notes list, lowest first
BINARY_RATIO = 2.0
RATIO_REL_TOL = 0.01  # "exact" correspondence: PE's period ratio per pair this close to BINARY_RATIO


def bit_strings(bits: int) -> list[str]:
    """Bit b of 0 .. 2^bits − 1 as a string, b = 0 the lowest."""
    return ["".join(str((n >> b) & 1) for n in range(2**bits)) for b in range(bits)]


def bit_periods(bits: int) -> list[int]:
    periods = []
    for s in bit_strings(bits):
        periods.append(next(p for p in range(1, len(s) + 1) if all(s[j] == s[j % p] for j in range(len(s)))))
    return periods


def pattern_bits(patterns: tuple[str, ...], bits: int) -> list[int | None]:
    """Which bit each pattern is, or None."""
    strings = bit_strings(bits)
    return [next((b for b, s in enumerate(strings) if s.startswith(p)), None) for p in patterns]


def flip_intervals(bits: int) -> list[int]:
    """How many numbers apart bit b changes when counting 0 .. 2^(bits+1) − 1, for each b (-1: not one interval)."""
    intervals = []
    for s in bit_strings(bits + 1)[:bits]:
        flips = [j for j in range(1, len(s)) if s[j] != s[j - 1]]
        gaps = {j - i for i, j in zip(flips, flips[1:])}
        intervals.append(gaps.pop() if len(gaps) == 1 else -1)
    return intervals


@claim(
    "pe_binary_periods",
    "Counting in binary, the lowest bit changes at every number, the next every two numbers, the next every "
    "four: higher bits alternate at lower frequency.",
    f"{D2L_SELF_ATTENTION} (absolute positional information)",
    notes=("pe_binary_periods",),
)
def _claim_pe_binary_periods(seed: int) -> Outcome:
    intervals = flip_intervals(BINARY_BITS)
    return Outcome(
        measured=", ".join(map(str, intervals)),
        rule=all_met(
            equals(
                f"numbers between changes of bits 0 .. {BINARY_BITS - 1}", intervals, [2**b for b in range(BINARY_BITS)]
            ),
            is_true("each higher bit alternates less often", all(a < b for a, b in zip(intervals, intervals[1:]))),
        ),
        details={"bit_strings": bit_strings(BINARY_BITS), "bit_periods": bit_periods(BINARY_BITS)},
    )


@claim(
    "pe_binary_analogy_exact",
    "The sinusoidal encoding corresponds exactly to binary counting: each higher pattern alternates as the next "
    "bit does (01010101, 00001111, 0000000011111111).",
    f"{D2L_SELF_ATTENTION} (absolute positional information)",
    notes=("pe_binary_analogy_exact",),
)
def _claim_pe_binary_analogy_exact(seed: int) -> Outcome:
    found = pattern_bits(NOTE_PATTERNS, BINARY_BITS)
    lam = pe_wavelengths_exact(D_MODEL)
    ratios = lam[1:] / lam[:-1]
    ratio = float(ratios.mean())
    return Outcome(
        measured=rounded(ratio, 5),
        rule=all_met(
            within(
                f"mean ratio of consecutive PE periods (d = {D_MODEL}), binary's per bit",
                ratio,
                BINARY_RATIO,
                rel_tol=RATIO_REL_TOL,
            ),
        ),
        note="the qualitative reading, slower and slower alternation, is pe_binary_periods and pe_frequency_decreasing",
        details={
            "note_patterns": list(NOTE_PATTERNS),
            "note_pattern_bits": found,
            "numbers": numbers_of(
                pattern_bits=(
                    ", ".join("none" if b is None else str(b) for b in found),
                    "1",
                    "which bit each listed pattern is (bit 1, 00110011, is not listed)",
                ),
                pairs_per_doubling=(math.log(2) / math.log(ratio), "pairs", "PE pairs per doubling of the period"),
                increasing=("yes" if bool((ratios > 1).all()) else "no", "1", "PE periods increasing along the pairs"),
            ),
        },
    )


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
    "extrapolation",
    "A learned position table cannot represent positions beyond its length; the sinusoidal function can: "
    "positions beyond the training length stay distinct and keep the offset rotations.",
    f"{PAPER}, §3.5 (sinusoids 'may allow the model to extrapolate to sequence lengths longer than "
    f"the ones encountered during training')",
    notes=("extrapolation",),
)
def _claim_extrapolation(seed: int) -> Outcome:
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
