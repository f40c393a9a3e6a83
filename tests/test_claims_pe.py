"""bench.claims' positional-encoding modules (pe_*): the helpers against hand-written formulas, then each claim's verdict
(each claim takes well under a second)."""

from __future__ import annotations

import math

import pytest
import torch

from bench.claims import (
    CLAIMS,
    CLAIMS_THREADS,
    STATEMENTS,
    catalog,
    pe_extrapolation,
    pe_formula,
    pe_frequency,
    pe_geometry,
)
from bench.threads import pinned_threads
from models.encoding import sinusoidal_encoding

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


# ------------------------------------------------------------------------ helpers
def test_d2l_table_matches_the_formula_written_by_hand():
    table = pe_formula.d2l_positional_table(4, max_len=10)[0].double()
    pos = torch.arange(10, dtype=torch.float64)
    by_hand = torch.stack([pos.sin(), pos.cos(), (pos / 100).sin(), (pos / 100).cos()], -1)
    assert table.shape == (10, 4)
    assert torch.allclose(table, by_hand, atol=1e-6)
    assert torch.allclose(pe_formula.formula_table(10, 4), by_hand, atol=1e-15)


def test_d2l_forward_adds_the_first_rows_and_stops_at_max_len():
    table = pe_formula.d2l_positional_table(6, max_len=5)
    x = torch.ones(1, 3, 6)
    assert torch.equal(pe_formula.d2l_positional_forward(table, x), x + table[:, :3])
    with pytest.raises(RuntimeError):
        pe_formula.d2l_positional_forward(table, torch.ones(1, 6, 6))
    assert pe_formula._error_text(lambda: pe_formula.d2l_positional_table(5)).startswith("RuntimeError")
    assert pe_formula._error_text(lambda: None) == "ok"


def test_column_coverage():
    counts, beyond = pe_formula.column_coverage(4, range(2))  # i = 0, 1: columns 0, 1 and 2, 3
    assert counts.tolist() == [1, 1, 1, 1] and beyond == 0
    counts, beyond = pe_formula.column_coverage(4, range(4))  # i = 2, 3 address columns 4 .. 7
    assert counts.tolist() == [1, 1, 1, 1] and beyond == 4


def test_pair_rotation_error_of_the_notes_matrix_and_its_transpose():
    assert pe_formula.pair_rotation_error(3, 8, 50) < 1e-13
    # The transpose rotates the other way: at k = 1 the fastest pair (ω = 1) is off by |2 sin(1)| in sin.
    assert pe_formula.pair_rotation_error(1, 8, 50, transpose=True) == pytest.approx(2 * math.sin(1.0), rel=1e-2)


def test_difference_features_and_readout_scores():
    a, k = torch.tensor([0.0, 5.0]), torch.tensor([1.0, 3.0])
    feats = pe_formula.difference_features(a, k, 4)
    expected = sinusoidal_encoding(a + k, 4, torch.float64) - sinusoidal_encoding(a, 4, torch.float64)
    assert torch.equal(feats[:, :4], expected) and torch.equal(feats[:, 4], torch.ones(2, dtype=torch.float64))
    y = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    assert pe_formula.readout_scores(y, y) == (1.0, 0.0)
    r2, rmse = pe_formula.readout_scores(torch.full((4,), 2.5, dtype=torch.float64), y)  # predicting the mean
    assert r2 == pytest.approx(0.0) and rmse == pytest.approx(math.sqrt(1.25))


def test_squared_step_is_the_squared_distance_for_every_position():
    d, k = 16, torch.tensor([0, 1, 7])
    table = sinusoidal_encoding(300, d, torch.float64)
    for kk, value in zip(k.tolist(), pe_formula.squared_step(k, d)):
        distance = ((table[kk:] - table[: len(table) - kk]) ** 2).sum(-1)
        assert torch.allclose(distance, torch.full_like(distance, float(value)), atol=1e-12)


def test_wavelengths_exact_and_step_sizes():
    assert torch.allclose(
        pe_frequency.pe_wavelengths_exact(4), torch.tensor([2 * math.pi, 200 * math.pi], dtype=torch.float64)
    )
    d = 8
    omega = 10000 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    steps = pe_frequency.pair_step_sizes(sinusoidal_encoding(100, d, torch.float64))
    assert torch.allclose(steps, 2 * torch.sin(omega / 2), atol=1e-12)
    table = torch.tensor([[0.0, 1.0], [2.0, 1.0], [1.0, 1.0]])
    assert pe_frequency.column_mean_steps(table).tolist() == [1.5, 0.0]


def test_binary_helpers():
    assert pe_frequency.bit_strings(2) == ["0101", "0011"]
    assert pe_frequency.bit_periods(3) == [2, 4, 8]
    assert pe_frequency.pattern_bits(("0101", "0011", "00001111", "0110"), 3) == [0, 1, 2, None]


def test_far_window_near_and_at_the_float32_limit():
    rotation, rounding, neighbour = pe_extrapolation.far_window(512, 64)
    assert rotation < 1e-3 and rounding < 1e-3 and neighbour > 1
    assert pe_extrapolation.far_window(2**24, 64)[2] == 0.0  # pos + 1 rounds to pos in float32


# ------------------------------------------------------------------------ the claims
EXPECTED = {
    "pe_formula_code": "holds",
    "pe_index_range": "holds",
    "pe_index_range_full": "fails",
    "pe_bounded": "holds",
    "pe_rotation_matrix": "holds",
    "pe_relative_from_difference": "partly",
    "pe_wavelength_growth": "holds",
    "pe_wavelengths": "partly",  # the largest wavelength present is 3.5 % short of 10000·2π
    "pe_max_wavelength": "partly",  # the same fact, the same bound
    "pe_frequency_decreasing": "holds",
    "pe_binary_periods": "holds",
    "pe_binary_analogy_exact": "fails",
    "extrapolation": "holds",
}
MEASURES = {
    "pe_formula_code": pe_formula.pe_formula_code,
    "pe_index_range": pe_formula.pe_index_range,
    "pe_index_range_full": pe_formula.pe_index_range_full,
    "pe_bounded": pe_formula.pe_bounded,
    "pe_rotation_matrix": pe_formula.pe_rotation_matrix,
    "pe_relative_from_difference": pe_formula.pe_relative_from_difference,
    "pe_wavelength_growth": pe_geometry.pe_wavelength_growth,
    "pe_wavelengths": pe_geometry.pe_wavelengths,
    "pe_max_wavelength": pe_frequency.pe_max_wavelength,
    "pe_frequency_decreasing": pe_frequency.pe_frequency_decreasing,
    "pe_binary_periods": pe_frequency.pe_binary_periods,
    "pe_binary_analogy_exact": pe_frequency.pe_binary_analogy_exact,
    "extrapolation": pe_extrapolation.extrapolation,
}


@pytest.mark.parametrize("claim_id", list(EXPECTED))
def test_claim_verdict(claim_results, claim_id):
    result = claim_results[claim_id]
    assert result.claim_id == claim_id and MEASURES[claim_id] in CLAIMS  # declared in this family's module
    assert result.verdict == EXPECTED[claim_id], (result.measured, result.details.get("numbers"))
    assert result.seed_ref and result.quote  # every one of these is in the notes


def test_claim_measurements(claim_results):
    assert claim_results["pe_formula_code"].measured <= pe_formula.FORMULA_ATOL
    assert claim_results["pe_formula_code"].details["longer_input_outcome"].startswith("RuntimeError")
    assert claim_results["pe_index_range"].measured == 512
    assert claim_results["pe_index_range_full"].measured == 0.5
    assert claim_results["pe_bounded"].measured <= 1.0
    assert claim_results["pe_max_wavelength"].measured == pytest.approx(10000 ** (-2 / 512), rel=1e-4)
    assert claim_results["pe_binary_analogy_exact"].measured == pytest.approx(10000 ** (2 / 512), rel=1e-4)
    assert claim_results["pe_binary_analogy_exact"].details["note_pattern_bits"] == [0, 2, 3]
    assert claim_results["pe_binary_periods"].measured == "1, 2, 4, 8"
    # one fact, two claims: the largest wavelength present, from the table and from the formula, agree
    top = claim_results["pe_wavelengths"].measured / 10000
    assert top == pytest.approx(claim_results["pe_max_wavelength"].measured, rel=1e-4)
    assert claim_results["pe_wavelength_growth"].measured == pytest.approx(10000 ** (2 / 512), rel=1e-4)
    relative = claim_results["pe_relative_from_difference"]
    assert relative.measured > pe_formula.READOUT_RMSE_MAX  # beyond the fitted positions the readout is lost
    assert relative.details["numbers"]["rmse_same_range"]["value"] < pe_formula.READOUT_RMSE_MAX
    assert relative.details["numbers"]["quadratic_spread"]["value"] < pe_formula.QUADRATIC_SPREAD_ATOL
    extrapolation = claim_results["extrapolation"]
    assert extrapolation.measured.startswith("learned: IndexError")
    assert extrapolation.details["numbers"]["identical_from"]["value"] == 2**24
    assert extrapolation.details["numbers"]["rotation_off_from"]["value"] > pe_extrapolation.EXTRAPOLATION_CHECK_LEN


def test_claims_are_deterministic(claim_results):
    # measured again, on measure_claims's threads: the least-squares fit's last digits depend on the thread count
    with pinned_threads(CLAIMS_THREADS):
        again = pe_formula.pe_relative_from_difference(0)
    assert again.measured == claim_results["pe_relative_from_difference"].measured
    assert again.details == claim_results["pe_relative_from_difference"].details


def test_every_checkable_pe_statement_is_measured():
    covered = {note for said in STATEMENTS.values() for note in (said.notes or ())}
    family = [
        entry["id"]
        for entry in catalog()["statement"]
        if entry["family"] == "positional_encoding" and entry["checkable"]
    ]
    assert set(family) <= covered, set(family) - covered
