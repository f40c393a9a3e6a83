"""bench.claims.training: "the backward pass costs about twice the forward", one claim per layer, against the
ratio written out by hand from the layers' products and their gradients."""

from __future__ import annotations

import pytest

import models
from bench.claims import training as T

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def hand_ratio(name: str) -> float:
    """Backward / forward counted FLOPs at T.SIZE, from the products each pass runs (not from models)."""
    b, n, d = T.SIZE["batch"], T.SIZE["n"], T.SIZE["d"]
    if name in (
        "attention",
        "attention_split",
    ):  # projections 2x; the scores: 5 products in the backward (recomputed), 2 forward
        return (2 * 8 * b * n * d * d + 5 * 2 * b * n * n * d) / (8 * b * n * d * d + 2 * 2 * b * n * n * d)
    if name in ("rnn", "gru"):  # 2x less the step-0 product with the zero initial state, 1 of 2n a gate
        return 2 - 1 / (2 * n)
    return 2.0


@pytest.mark.parametrize("name", list(models.LAYERS))
def test_every_layer_has_its_claim_and_the_hand_ratio(claim_results, name):
    result = claim_results[f"backward_twice_forward_{name}"]
    assert result.measured == pytest.approx(hand_ratio(name), rel=1e-5)
    assert result.verdict == ("holds" if abs(hand_ratio(name) / 2 - 1) <= T.ABOUT_REL_TOL else "fails")
    assert result.seed_ref == "" and result.quote == ""  # the study notes do not make it
    assert result.details["time_forward_s"] > 0 and "time_ratio" in result.details["numbers"]


def test_the_fused_attention_is_the_exception_and_why(claim_results):
    """Its backward recomputes the n×n scores: toward 5/2 of the forward as n grows past d."""
    assert claim_results[f"backward_twice_forward_{models.ROLES.attention}"].verdict == "fails"
    assert hand_ratio(models.ROLES.attention) == pytest.approx(2.4, abs=1e-4)  # 3072 / 1280 at n = 8d
    assert claim_results[f"backward_twice_forward_{models.ROLES.attention_explicit}"].verdict == "holds"
