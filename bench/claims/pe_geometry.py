"""The sinusoidal positional encoding's geometry: offsets as rotations, distinct positions, wavelengths, variance."""

from __future__ import annotations

import math
from functools import cache

import torch

from models.encoding import PE_BASE, pe_frequencies, sinusoidal_encoding

from .record import D2L_SELF_ATTENTION, D_MODEL, PAPER, claim, numbers_of, rounded
from .verdict import Check, Outcome, Rule, all_met, at_least, at_most, within

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
    "For any fixed offset k, PE(pos + k) is a linear function of PE(pos): the same rotation M_k for every pos.",
    f"{PAPER}, §3.5; {D2L_SELF_ATTENTION} (relative positional information)",
)
def pe_rotation(seed: int) -> Outcome:
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
    "Every position gets a distinct sinusoidal encoding.",
    f"{PAPER}, §3.5; {D2L_SELF_ATTENTION} (absolute positional information)",
)
def pe_distinct(seed: int) -> Outcome:
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
    "The wavelength of the sinusoidal encoding grows exponentially with the pair index i, from 2π at i = 0.",
    f"{PAPER}, §3.5",
)
def pe_wavelength_growth(seed: int) -> Outcome:
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
    "The wavelengths of the sinusoidal encoding form a geometric progression from 2π to 10000·2π.",
    f"{PAPER}, §3.5",
)
def pe_wavelengths(seed: int) -> Outcome:
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
    "Sinusoidal positional encodings have variance about 1/3 (study-note claim used to argue for "
    "the √d_model embedding scale).",
    f"study notes (not in the paper); cf. {PAPER}, §3.4 and §3.5",
)
def pe_variance_one_third(seed: int) -> Outcome:
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
