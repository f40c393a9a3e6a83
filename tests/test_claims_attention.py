"""The attention families' claims (scaled_dot_product, attention_weights, multi_head, masks_permutation): each returns the
verdict the catalogue expects, multihead_cost gives the same verdict run after run, and the helpers the new
claims use are right on cases whose answer is known."""

from __future__ import annotations

import json

import pytest
import torch

import models
from bench import claims as C
from bench.claims import attention_weights as AW
from bench.claims import masks_permutation as MP
from bench.claims import multi_head as MH
from bench.claims import scaled_dot_product as SDP
from bench.threads import pinned_threads
from models import LayerConfig

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

EXPECTED = {  # claim id -> verdict (the catalogue's `expected` for the statements each measures)
    "softmax_positive": "partly",  # exact zeros in float32 from unscaled scores at large d_k
    "softmax_distribution": "holds",
    "unscaled_gradient_update": "fails",  # the gradient on W_Q, W_K is larger unscaled, not near zero
    "attention_shapes": "holds",
    "attention_convex_combination": "holds",
    "attention_linearity": "fails",  # the notes: "essentially linear"
    "self_focus": "fails",  # at initialisation: no self-focus in the paper's layer; heads do not fix Q = K = X
    "multihead_dims": "holds",
    "multihead_params": "holds",
    "multihead_fused_projection": "holds",
    "causal_mask_scope": "partly",  # the mask hides j > i, not i itself
    "permutation_invariance": "fails",  # the notes: "invariant"; equivariant is the true word
    "constant_pe_ineffective": "holds",
    "rnn_cnn_order_sensitive": "holds",
}
FUNCTIONS = {
    "softmax_positive": AW.softmax_positive,
    "softmax_distribution": AW.softmax_distribution,
    "unscaled_gradient_update": SDP.unscaled_gradient_update,
    "attention_shapes": AW.attention_shapes,
    "attention_convex_combination": AW.attention_convex_combination,
    "attention_linearity": AW.attention_linearity,
    "self_focus": MH.self_focus,
    "multihead_dims": MH.multihead_dims,
    "multihead_params": MH.multihead_params,
    "multihead_fused_projection": MH.multihead_fused_projection,
    "causal_mask_scope": MP.causal_mask_scope,
    "permutation_invariance": MP.permutation_invariance,
    "constant_pe_ineffective": MP.constant_pe_ineffective,
    "rnn_cnn_order_sensitive": MP.rnn_cnn_order_sensitive,
}


@pytest.mark.parametrize("claim_id", list(EXPECTED))
def test_claim_verdict(claim_results, claim_id):
    r = claim_results[claim_id]
    assert r.claim_id == claim_id and r.verdict == EXPECTED[claim_id], (r.measured, r.details.get("numbers"))
    assert r.seed_ref and r.quote and r.statement and r.expected
    assert C.STATEMENTS[claim_id].notes  # every new claim names catalogue statements
    json.dumps(r.details)
    assert FUNCTIONS[claim_id] in C.CLAIMS


def test_new_claims_measured_numbers(claim_results):
    r = claim_results
    assert r["multihead_dims"].measured == 64
    assert r["multihead_dims"].details["shapes"]["concat"] == [2, 10, 512]
    assert r["multihead_params"].details["numbers"]["params"]["value"] == 4 * 512**2 + 4 * 512
    assert r["causal_mask_scope"].measured == MP.SCOPE_SIZE["n"]  # every position sees itself
    assert r["causal_mask_scope"].details["numbers"]["future_dependencies"]["value"] == 0
    assert r["permutation_invariance"].details["numbers"]["equivariance_error"]["value"] <= MP.EQUIVARIANT_ATOL
    assert r["attention_linearity"].details["numbers"]["homogeneity_error"]["value"] >= AW.NONLINEAR_MIN
    assert r["softmax_positive"].details["numbers"]["underflow_gap_float32"]["value"] > 17
    assert 0.1 < r["softmax_positive"].measured < 0.5  # unscaled d_k = 1024 scores: many weights exactly 0.0
    numbers = {k: v["value"] for k, v in r["attention_linearity"].details["numbers"].items()}
    assert numbers["homogeneity_error_V"] < AW.LINEAR_ATOL < AW.NONLINEAR_MIN < numbers["homogeneity_error_Q"]
    update = r["unscaled_gradient_update"]
    assert update.measured > 1  # ‖∂L/∂W_Q‖ unscaled / scaled: larger, not near zero
    assert (
        update.details["numbers"]["top_share_unscaled"]["value"]
        > update.details["numbers"]["top_share_scaled"]["value"]
    )
    focus = r["self_focus"].details
    assert focus["same_over_uniform"][0] == pytest.approx(focus["n"], rel=1e-3)  # Q = K = X: all weight on itself


@pytest.mark.slow
def test_multihead_cost_verdict_is_stable():
    with pinned_threads(C.CLAIMS_THREADS):
        runs = [MH.multihead_cost(0) for _ in range(3)]
    assert {r.verdict for r in runs} == {"holds"}
    assert {r.measured for r in runs} == {1.0}  # the verdict's number: exact counts, not times
    d = runs[0].details
    assert len(set(d["flops_counted"])) == 1 and len(d["time_median_s_attention_math"]) == len(d["heads"])
    assert all(len(set(row)) == 1 for row in d["flops_counted_by_size"] + d["params_by_size"])
    assert d["softmax_elements"] == [d["batch"] * h * d["n"] ** 2 for h in d["heads"]]


def test_softmax_underflow_gap():
    # float32: exp(−g) drops below the smallest subnormal (1.4e-45 = e^−103.3) from g = 104.
    assert AW.softmax_underflow_gap(torch.float32) == 104
    assert AW.softmax_underflow_gap(torch.float64) is None  # e^−256 is still representable


def test_linearity_errors_of_a_linear_and_a_nonlinear_map():
    x1, x2 = torch.randn(3, 4), torch.randn(3, 4)
    w = torch.randn(4, 4, dtype=torch.float64)
    add, hom = AW._linearity_errors(lambda x: x @ w, x1.double(), x2.double())
    assert add < 1e-12 and hom < 1e-12
    add, hom = AW._linearity_errors(torch.square, x1, x2)
    assert add > 0.1 and hom == pytest.approx(1.0)  # (2x)² − 2x² = 2x², over ‖2x²‖


def test_causal_dependencies_are_lower_triangular_with_the_diagonal():
    layer = models.build(models.ROLES.attention_explicit, LayerConfig(d=8, heads=2))
    deps = MP.causal_dependencies(layer, torch.randn(6, 8))
    assert torch.equal(deps, torch.ones(6, 6, dtype=torch.bool).tril())


def test_order_sensitive_layers_named_by_role(claim_results):
    # The claim compares every recurrent layer and the convolution with attention, all from the registry.
    r = claim_results["rnn_cnn_order_sensitive"]
    assert set(r.details["error"]) == {*models.recurrent(), models.ROLES.convolution}
    assert all(v >= MP.BROKEN_MIN for v in r.details["error"].values())
