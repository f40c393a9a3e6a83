"""The sinusoidal positional encoding: offsets as rotations, distinct positions, geometric wavelengths,
its variance, and what happens beyond a trained length."""

from __future__ import annotations

import math

import torch
from torch import nn

from models.encoding import PE_BASE, pe_frequencies, sinusoidal_encoding

from .record import D2L_SELF_ATTENTION, D_MODEL, PAPER, ClaimResult, _num, _numbers, _result, claim

# ------------------------------------------------------------------------ 6. relative positions are rotations
ROTATION_POSITIONS = 2048
ROTATION_OFFSETS = (1, 2, 3, 5, 10, 25, 50, 100, 250, 500, 1000)
ROTATION_ATOL_FLOAT32 = 1e-3  # float32 rounding of the angles pos·ω (half an ulp at 2048: 1.2e-4) sets the scale
ROTATION_ATOL_FLOAT64 = 1e-9


def offset_rotation_blocks(k: int, d: int, base: float = PE_BASE) -> torch.Tensor:
    """The d/2 rotations (d/2, 2, 2), float64, that take each (sin, cos) pair from pos to pos + k:
    (sin, cos)(a + kω) = [[cos kω, sin kω], [−sin kω, cos kω]] (sin, cos)(a). They depend on k only."""
    omega = pe_frequencies(d, torch.float64, base)
    c, s = torch.cos(k * omega), torch.sin(k * omega)
    return torch.stack([torch.stack([c, s], -1), torch.stack([-s, c], -1)], -2)


def offset_rotation(k: int, d: int, base: float = PE_BASE) -> torch.Tensor:
    """M_k (d, d), float64, with PE(pos + k) = M_k PE(pos) for every pos: block diagonal, one 2×2 rotation
    per frequency (`offset_rotation_blocks`)."""
    return torch.block_diag(*offset_rotation_blocks(k, d, base))


def rotation_error(pe: torch.Tensor, k: int, base: float = PE_BASE) -> float:
    """max over pos and dimensions of |PE(pos + k) − M_k PE(pos)| on the table `pe` (n, d), in float64.
    M_k is applied pair by pair (the same product as the dense M_k, without its d² − 2d zeros)."""
    table = pe.double()
    blocks = offset_rotation_blocks(k, pe.shape[1], base)  # (d/2, 2, 2)
    sin, cos = table[:-k, 0::2], table[:-k, 1::2]  # (n − k, d/2) each
    moved_sin = blocks[:, 0, 0] * sin + blocks[:, 0, 1] * cos
    moved_cos = blocks[:, 1, 0] * sin + blocks[:, 1, 1] * cos
    return float(torch.maximum((table[k:, 0::2] - moved_sin).abs().max(), (table[k:, 1::2] - moved_cos).abs().max()))


@claim(
    "pe_rotation",
    "For any fixed offset k, PE(pos + k) is a linear function of PE(pos): the same rotation M_k for every pos.",
    f"{PAPER}, §3.5; {D2L_SELF_ATTENTION} (relative positional information)",
    notes=("pe_rotation", "pe_rotation_matrix"),
)
def _claim_pe_rotation(seed: int) -> ClaimResult:
    errors = {}
    for dtype in (torch.float32, torch.float64):
        table = sinusoidal_encoding(ROTATION_POSITIONS, D_MODEL, dtype)
        errors[str(dtype).removeprefix("torch.")] = [_num(rotation_error(table, k)) for k in ROTATION_OFFSETS]
    worst32, worst64 = max(errors["float32"]), max(errors["float64"])
    ok = worst32 <= ROTATION_ATOL_FLOAT32 and worst64 <= ROTATION_ATOL_FLOAT64
    return _result(
        "pe_rotation",
        measured=worst32,
        expected=f"max |PE(pos+k) − M_k PE(pos)| over pos < {ROTATION_POSITIONS}, k in {list(ROTATION_OFFSETS)}, "
        f"d = {D_MODEL}, float32 table: ≤ {ROTATION_ATOL_FLOAT32} "
        f"(float64 table: ≤ {ROTATION_ATOL_FLOAT64})",
        verdict="holds" if ok else "fails",
        details={
            "k": list(ROTATION_OFFSETS),
            "positions": ROTATION_POSITIONS,
            "d": D_MODEL,
            "error_float32": errors["float32"],
            "error_float64": errors["float64"],
            "numbers": _numbers(error_float64=(worst64, "1", "largest error, float64 table")),
        },
    )


# ------------------------------------------------------------------------ 7. distinct encodings
DISTINCT_POSITIONS = 10_000
DISTINCT_MARGIN = 10.0  # smallest distance ≥ this × the largest float32 rounding error of an encoding
# "Nearly equal" in float32: the float32 encoding of pos lies at least half the smallest distance between two
# exact encodings away from its exact value, so rounding alone can put it as close to another position's
# encoding as to its own (nearest-neighbour decoding is no longer guaranteed).
NEARLY_EQUAL_FRACTION = 0.5
NEARLY_EQUAL_SCAN = (1e3, 2.0**25, 600)  # positions scanned: log-spaced from, to, count
_DISTANCE_CHUNK = 2048


def min_pairwise_distance(points: torch.Tensor, chunk: int = _DISTANCE_CHUNK) -> tuple[float, int, int]:
    """(smallest Euclidean distance between two distinct rows, i, j). The n×n squared distances
    |a|² + |b|² − 2a·b are formed in float32 (fast; at d = 512, |a|² = 256, they are off by ~1e-4) in row
    chunks against the rows after them, so memory stays chunk × n; the closest pair's distance is then
    recomputed directly in float64."""
    x = points.float()
    sq = (x * x).sum(-1)  # (n,)
    best, where = math.inf, (0, 1)
    n = len(x)
    for start in range(0, n - 1, chunk):
        stop = min(start + chunk, n)
        d2 = sq[start:stop, None] + sq[None, start:] - 2 * x[start:stop] @ x[start:].T  # (c, n − start)
        rows = torch.arange(start, stop)[:, None]
        d2.masked_fill_(torch.arange(start, n)[None, :] <= rows, math.inf)  # each pair once, no self-pairs
        value, flat = float(d2.min()), int(d2.argmin())
        if value < best:
            best, where = value, (start + flat // d2.shape[1], start + flat % d2.shape[1])
    i, j = where
    return float((points[i].double() - points[j].double()).norm()), i, j


def float32_encoding_error(positions: torch.Tensor, d: int) -> torch.Tensor:
    """‖PE_float32(pos) − PE_exact(pos)‖ per position; exact = float64 of the true integer position."""
    exact = sinusoidal_encoding(positions.double(), d, torch.float64)
    return (sinusoidal_encoding(positions.float(), d, torch.float32).double() - exact).norm(dim=-1)


@claim(
    "pe_distinct",
    "Every position gets a distinct sinusoidal encoding.",
    f"{PAPER}, §3.5; {D2L_SELF_ATTENTION} (absolute positional information)",
    notes=("pe_distinct",),
)
def _claim_pe_distinct(seed: int) -> ClaimResult:
    table64 = sinusoidal_encoding(DISTINCT_POSITIONS, D_MODEL, torch.float64)
    dmin, i, j = min_pairwise_distance(table64)
    rounding = float(float32_encoding_error(torch.arange(DISTINCT_POSITIONS, dtype=torch.float64), D_MODEL).max())
    lo, hi, count = NEARLY_EQUAL_SCAN
    scan = torch.unique(torch.logspace(math.log10(lo), math.log10(hi), int(count), dtype=torch.float64).round())
    scan_error = float32_encoding_error(scan, D_MODEL)
    over = (scan_error >= NEARLY_EQUAL_FRACTION * dmin).nonzero()
    nearly_equal_from = int(scan[over[0, 0]]) if len(over) else None
    # Bitwise identical encodings: float32 spacing reaches 2 at 2/eps = 2^24, so pos + 1 rounds to pos.
    identical_from = round(2 / torch.finfo(torch.float32).eps)  # 2^24
    p = torch.tensor([identical_from - 1, identical_from, identical_from + 1], dtype=torch.float64)
    pe = sinusoidal_encoding(p, D_MODEL, torch.float32)
    identical_confirmed = bool(torch.equal(pe[1], pe[2]) and not torch.equal(pe[0], pe[1]))
    ok = dmin >= DISTINCT_MARGIN * rounding
    return _result(
        "pe_distinct",
        measured=_num(dmin, 4),
        expected=f"smallest distance between two of the first {DISTINCT_POSITIONS:,} encodings (d = {D_MODEL}): "
        f"≥ {DISTINCT_MARGIN:g} × the largest float32 rounding error among them",
        verdict="holds" if ok else "fails",
        details={
            "positions": DISTINCT_POSITIONS,
            "d": D_MODEL,
            "closest_offset": abs(j - i),
            "scan_positions": [int(v) for v in scan],
            "scan_float32_error": [_num(v) for v in scan_error],
            "nearly_equal_threshold": _num(NEARLY_EQUAL_FRACTION * dmin),
            "numbers": _numbers(
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


# ------------------------------------------------------------------------ 8. geometric wavelengths
WAVELENGTH_POSITIONS = 10_000
WAVELENGTH_REL_TOL = 0.01  # λ_0 vs 2π, and the progression's end λ(d/2) vs 10000·2π
GEOMETRIC_TOL = 1e-3  # largest |log λ_i − fitted line| (natural log) for "geometric"


def wavelengths_from_phase(pe: torch.Tensor) -> torch.Tensor:
    """Each sin/cos pair's wavelength in positions, estimated from the table alone: the phase
    atan2(sin, cos), unwrapped along the positions, is fitted by a line; λ = 2π / slope. Needs each pair to
    turn by less than π per position (true for ω ≤ 1)."""
    table = pe.double()
    phase = torch.atan2(table[:, 0::2], table[:, 1::2])  # (n, d/2)
    step = torch.diff(phase, dim=0)
    step = (step + math.pi) % (2 * math.pi) - math.pi  # unwrap: each step into [−π, π)
    unwrapped = torch.cat([phase[:1], phase[:1] + torch.cumsum(step, 0)])
    pos = torch.arange(len(table), dtype=torch.float64)
    centred = pos - pos.mean()
    slope = (centred[:, None] * (unwrapped - unwrapped.mean(0))).sum(0) / (centred * centred).sum()  # least squares
    return 2 * math.pi / slope


def geometric_fit(wavelengths: torch.Tensor) -> tuple[float, float, float]:
    """(λ_0, ratio, largest log residual) of the least-squares line log λ_i = log λ_0 + i log ratio."""
    i = torch.arange(len(wavelengths), dtype=torch.float64)
    design = torch.stack([torch.ones_like(i), i], -1)
    coef = torch.linalg.lstsq(design, wavelengths.double().log()[:, None]).solution[:, 0]
    residual = (design @ coef - wavelengths.double().log()).abs().max()
    return float(coef[0].exp()), float(coef[1].exp()), float(residual)


@claim(
    "pe_wavelengths",
    "The wavelengths of the sinusoidal encoding form a geometric progression from 2π to 10000·2π.",
    f"{PAPER}, §3.5",
    notes=("pe_wavelengths",),
)
def _claim_pe_wavelengths(seed: int) -> ClaimResult:
    lam = wavelengths_from_phase(sinusoidal_encoding(WAVELENGTH_POSITIONS, D_MODEL, torch.float32))
    lam0, ratio, residual = geometric_fit(lam)
    end = lam0 * ratio ** (D_MODEL // 2)  # the progression continued to i = d/2, where 10000^(2i/d) = 10000
    span = end / lam0
    ok = (
        abs(lam0 / (2 * math.pi) - 1) <= WAVELENGTH_REL_TOL
        and abs(end / (PE_BASE * 2 * math.pi) - 1) <= WAVELENGTH_REL_TOL
        and residual <= GEOMETRIC_TOL
    )
    return _result(
        "pe_wavelengths",
        measured=_num(span, 5),
        expected=f"fitted λ(d/2) / λ(0) = {PE_BASE:g} (each within {WAVELENGTH_REL_TOL:.0%} of 2π and 10000·2π), "
        f"log λ linear in i (residual ≤ {GEOMETRIC_TOL})",
        verdict="holds" if ok else "fails",
        details={
            "i": list(range(len(lam))),
            "wavelength": [_num(v) for v in lam],
            "d": D_MODEL,
            "positions": WAVELENGTH_POSITIONS,
            "numbers": _numbers(
                first_over_2pi=(lam0 / (2 * math.pi), "1", "fitted λ_0 / 2π"),
                ratio=(ratio, "1", "ratio of consecutive wavelengths"),
                largest_present_over_2pi=(
                    float(lam[-1]) / (2 * math.pi),
                    "1",
                    "largest wavelength present / 2π (i = d/2 − 1: 10000^(1 − 2/d))",
                ),
                log_residual=(residual, "1", "largest |log λ − fitted line|"),
            ),
        },
    )


# ------------------------------------------------------------------------ 9. variance 1/3
PE_VARIANCE_POSITIONS = 10_000
ONE_THIRD_REL_TOL = 0.10  # overall variance within 10 % of 1/3 for the claim to hold


def encoding_variances(pe: torch.Tensor) -> tuple[torch.Tensor, float, float]:
    """(variance of each column over the rows (d,), variance of all entries, mean of the squares);
    population variances, in float64."""
    table = pe.double()
    return table.var(dim=0, correction=0), float(table.var(correction=0)), float((table * table).mean())


@claim(
    "pe_variance_one_third",
    "Sinusoidal positional encodings have variance about 1/3 (study-note claim used to argue for "
    "the √d_model embedding scale).",
    f"study notes (not in the paper); cf. {PAPER}, §3.4 and §3.5",
    notes=("pe_variance_one_third",),
)
def _claim_pe_variance(seed: int) -> ClaimResult:
    pe = sinusoidal_encoding(PE_VARIANCE_POSITIONS, D_MODEL, torch.float64)
    per_dim, overall, second_moment = encoding_variances(pe)
    near = float(((per_dim - 1 / 3).abs() <= ONE_THIRD_REL_TOL / 3).double().mean())
    return _result(
        "pe_variance_one_third",
        measured=_num(overall, 4),
        expected=f"variance of all entries, pos < {PE_VARIANCE_POSITIONS:,}, d = {D_MODEL}: within "
        f"{ONE_THIRD_REL_TOL:.0%} of 1/3",
        verdict="holds" if abs(overall * 3 - 1) <= ONE_THIRD_REL_TOL else "fails",
        details={
            "dim": list(range(D_MODEL)),
            "variance_per_dim": [_num(v, 4) for v in per_dim],
            "numbers": _numbers(
                second_moment=(second_moment, "1", "mean of PE² (sin² + cos² = 1 per pair: exactly 1/2)"),
                high_freq_variance=(float(per_dim[:2].mean()), "1", "variance of the fastest pair (i = 0)"),
                fraction_dims_near_third=(near, "1", f"fraction of dimensions within {ONE_THIRD_REL_TOL:.0%} of 1/3"),
            ),
        },
    )


# ------------------------------------------------------------------------ 12. extrapolation
EXTRAPOLATION_MAX_LEN = 512


def learned_lookup(max_len: int, d: int, position: int) -> str:
    """What a learned table of `max_len` positions returns at `position`: 'finite' or the error's text."""
    table = nn.Embedding(max_len, d)
    try:
        with torch.inference_mode():
            row = table(torch.tensor([position]))
    except IndexError as err:
        return f"IndexError: {err}"
    return "finite" if bool(torch.isfinite(row).all()) else "not finite"


@claim(
    "extrapolation",
    "A learned position table cannot represent positions beyond its length; the sinusoidal function can.",
    f"{PAPER}, §3.5 (sinusoids 'may allow the model to extrapolate to sequence lengths longer than "
    f"the ones encountered during training')",
    notes=("extrapolation",),
)
def _claim_extrapolation(seed: int) -> ClaimResult:
    beyond = EXTRAPOLATION_MAX_LEN + 1
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        learned = learned_lookup(EXTRAPOLATION_MAX_LEN, D_MODEL, beyond)
    pe = sinusoidal_encoding(torch.tensor([float(beyond)]), D_MODEL)[0]
    finite = bool(torch.isfinite(pe).all())
    ok = learned.startswith("IndexError") and finite
    return _result(
        "extrapolation",
        measured=f"learned: {learned}; sinusoidal: {'finite' if finite else 'not finite'} vector",
        expected=f"at position max_len + 1 = {beyond}: the learned nn.Embedding({EXTRAPOLATION_MAX_LEN}, {D_MODEL}) "
        f"raises IndexError, the sinusoid gives a finite vector",
        verdict="holds" if ok else "fails",
        details={
            "max_len": EXTRAPOLATION_MAX_LEN,
            "position": beyond,
            "numbers": _numbers(
                sinusoid_norm=(float(pe.double().norm()), "1", "norm of the sinusoidal encoding there (√(d/2))")
            ),
        },
    )
