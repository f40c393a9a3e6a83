"""The encoding as written: the d2l code, the index range, the bounds, each pair's rotation, offsets read linearly."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from models.encoding import PE_BASE, pe_frequencies, sinusoidal_encoding

from .pe_geometry import ROTATION_ATOL_FLOAT64, offset_rotation_blocks
from .record import D2L_SELF_ATTENTION, D_MODEL, PAPER, claim, generator_for, numbers_of, rounded
from .verdict import Outcome, all_met, at_least, at_most, below, equals, some_met

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
    "The d2l PositionalEncoding code computes P[pos, 2j] = sin(pos/10000^(2j/d)) and P[pos, 2j+1] = "
    "cos(pos/10000^(2j/d)), rows indexed by position and columns by encoding dimension.",
    f"{D2L_SELF_ATTENTION} (positional encoding code)",
)
def pe_formula_code(seed: int) -> Outcome:
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
    "In PE(pos, 2i) and PE(pos, 2i+1) the index i runs over the pairs 0 .. d_model/2 − 1.",
    f"{PAPER}, §3.5",
)
def pe_index_range(seed: int) -> Outcome:
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
    "In PE(pos, 2i) = sin(pos/10000^(2i/d_model)), i is the dimension index, running 0 .. d_model − 1.",
    "study notes (not in the paper); cf. " + f"{PAPER}, §3.5",
)
def pe_index_range_full(seed: int) -> Outcome:
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
    "Sinusoidal positional encoding values lie in [−1, 1] (and every encoding has norm √(d/2)).",
    f"{PAPER}, §3.5",
)
def pe_bounded(seed: int) -> Outcome:
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
    "For each (sin, cos) pair of frequency ω_i, the map from position pos to pos + k is the 2×2 rotation "
    "[[cos kω_i, sin kω_i], [−sin kω_i, cos kω_i]].",
    f"{D2L_SELF_ATTENTION} (relative positional information)",
)
def pe_rotation_matrix(seed: int) -> Outcome:
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
    "A linear layer can read the relative offset k (e.g. 'B is 3 positions after A') from the difference "
    "PE(pos_B) − PE(pos_A).",
    "study notes (not in the paper); cf. " + f"{PAPER}, §3.5",
)
def pe_relative_from_difference(seed: int) -> Outcome:
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
