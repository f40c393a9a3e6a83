"""bench.claims, the embedding-scale and feed-forward families: each helper against a hand formula or a case
whose answer is known exactly, then each claim's verdict and measured value at seed 0."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from bench.claims import embedding_scale as E
from bench.claims import feed_forward as F

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

D = 512


# ------------------------------------------------------------------------ embedding helpers
def test_unique_parameters_counts_a_tied_matrix_once():
    embedding, output = E.tied_pair(37_000, D)
    assert output.weight is embedding.weight
    assert E.unique_parameters(embedding, output) == 37_000 * D
    separate = E.unique_parameters(nn.Embedding(37_000, D, device="meta"), nn.Linear(D, 37_000, device="meta"))
    assert separate == 2 * 37_000 * D + 37_000  # with the output bias


def test_one_hot_lookup_is_the_row():
    table = torch.arange(12.0).reshape(4, 3)
    assert torch.equal(E.one_hot_lookup(table, torch.tensor([2, 0])), torch.tensor([[6.0, 7, 8], [0, 1, 2]]))


def test_variance_is_the_population_variance():
    assert E.variance(torch.tensor([1.0, -1.0, 1.0, -1.0])) == 1.0
    assert E.variance(torch.tensor([[0.0, 2.0], [4.0, 6.0]])) == pytest.approx(5.0)


def test_embedding_table_has_the_asked_variance():
    table = E.embedding_table(2000, 256, 0.5, torch.Generator().manual_seed(0))
    assert table.shape == (2000, 256)
    assert E.variance(table) == pytest.approx(0.25, rel=0.01)  # 512,000 samples: rel. s.e. 0.2 %


def test_sampled_dot_variance_matches_d_k_sigma_to_the_fourth():
    # var(q·k) = d_k · σ² · σ² for independent zero-mean components.
    var = E.sampled_dot_variance(4.0, 8, 40_000, torch.Generator().manual_seed(1))
    assert var == pytest.approx(8 * 4.0 * 4.0, rel=0.05)


def test_sinusoidal_variance_below_512_positions():
    # Mean square is exactly 1/2; the slow cos columns' mean near 1 pulls the variance under it.
    var_pe = E.variance(E.sinusoidal_encoding(E.PE_POSITIONS, D))
    assert 0.4 < var_pe < 0.5


# ------------------------------------------------------------------------ feed-forward helpers
def test_ffn_parameter_count_hand_formula():
    for d, d_ff in [(512, 2048), (64, 256), (3, 5)]:
        assert F.parameter_count(F.ffn(d, d_ff)) == 2 * d * d_ff + d_ff + d


def test_ffn_counted_flops_hand_formula():
    net = F.ffn(64, 256)
    x = torch.randn(2, 5, 64)
    assert F.counted_flops(lambda: net(x)) == 2 * 2 * 2 * 5 * 64 * 256  # two matmuls, 2 FLOPs per MAC


def test_conv1x1_ffn_matches_the_linear_ffn():
    torch.manual_seed(0)
    net = F.ffn(8, 16, torch.float64)
    x = torch.randn(3, 7, 8, dtype=torch.float64)
    conv = F.conv1x1_ffn(net)
    assert F.parameter_count(conv) == F.parameter_count(net)
    with torch.no_grad():
        assert torch.allclose(conv(x.transpose(1, 2)).transpose(1, 2), net(x), atol=1e-12)


def test_cross_position_jacobian_sees_mixing():
    torch.manual_seed(0)
    net = F.ffn(4, 8)
    x = torch.randn(5, 4)
    cross, own = F.cross_position_jacobian(net, x)
    assert cross == 0.0 and own > 0
    assert F.cross_position_jacobian(lambda t: t.cumsum(0), x) == (1.0, 1.0)  # a prefix sum mixes positions


def test_additivity_defect_of_known_maps():
    x1, x2 = torch.randn(6, 3, dtype=torch.float64), torch.randn(6, 3, dtype=torch.float64)
    assert F.additivity_defect(lambda x: 2 * x + 1, x1, x2) < 1e-14
    # x ↦ x² at x1 = x2 = 1: ‖4 − 1 − 1 + 0‖ / ‖4‖ = 1/2.
    ones = torch.ones(4, dtype=torch.float64)
    assert F.additivity_defect(lambda x: x**2, ones, ones) == pytest.approx(0.5)


def test_collapse_affine_two_layers_by_hand():
    a, b = nn.Linear(2, 2, dtype=torch.float64), nn.Linear(2, 2, dtype=torch.float64)
    with torch.no_grad():
        a.weight.copy_(torch.tensor([[1.0, 2.0], [3.0, 4.0]]))
        a.bias.copy_(torch.tensor([1.0, 0.0]))
        b.weight.copy_(torch.tensor([[0.0, 1.0], [1.0, 0.0]]))  # swap
        b.bias.copy_(torch.tensor([0.0, 5.0]))
    w, c = F.collapse_affine([a, b])
    # x = (1, 1): a → (3 + 1, 7) = (4, 7); b → (7, 4 + 5) = (7, 9)
    x = torch.tensor([1.0, 1.0], dtype=torch.float64)
    assert torch.allclose(x @ w + c, torch.tensor([7.0, 9.0], dtype=torch.float64))


# ------------------------------------------------------------------------ the claims, seed 0
def test_weight_sharing_params(claim_results):
    r = claim_results["weight_sharing_params"]
    assert r.verdict == "holds" and r.measured == 37_000 * D == 18_944_000
    assert r.seed_ref and r.quote


def test_embedding_lookup_onehot(claim_results):
    r = claim_results["embedding_lookup_onehot"]
    assert r.verdict == "partly" and r.measured == 0.0
    assert r.details["row_dot"].startswith("RuntimeError")


def test_embedding_init_variance(claim_results):
    r = claim_results["embedding_init_variance"]
    assert r.verdict == "fails"
    assert r.measured == pytest.approx(1 / D, rel=E.VARIANCE_REL_TOL)
    numbers = r.details["numbers"]
    assert numbers["var_scaled"]["value"] == pytest.approx(1.0, rel=0.02)  # 1, not d_model
    assert numbers["norm_sq"]["value"] == pytest.approx(1.0, rel=0.02)  # the squared length is about 1
    assert numbers["var_unit_scaled"]["value"] == pytest.approx(D, rel=0.02)


def test_embedding_scale_init_variance(claim_results):
    r = claim_results["embedding_scale_init_variance"]
    assert r.verdict == "holds" and r.measured == pytest.approx(1.0, rel=0.01)


def test_unscaled_embedding_drowns_pe(claim_results):
    r = claim_results["unscaled_embedding_drowns_pe"]
    assert r.verdict == "fails"
    assert r.measured == pytest.approx((1 / D) / 0.4286, rel=0.05)  # the encoding is ~220× larger
    assert 1 < r.details["numbers"]["ratio_unit_init"]["value"] < E.DOMINATES_RATIO  # ~2.3, not "far larger"


def test_embedding_scale_balances_pe(claim_results):
    r = claim_results["embedding_scale"]
    assert r.verdict == "partly"
    assert r.measured == pytest.approx(D / 0.4286, rel=0.05)  # N(0, 1): the embedding dominates
    assert 1 / E.DOMINATES_RATIO < r.details["numbers"]["ratio_small_init"]["value"] < E.DOMINATES_RATIO
    assert r.seed_ref  # now a statement the notes make


def test_embed_qk_variance(claim_results):
    r = claim_results["embed_qk_variance"]
    assert r.verdict == "fails"
    assert r.measured == pytest.approx(D**3, rel=E.VARIANCE_REL_TOL)
    assert r.details["numbers"]["var_scaled"]["value"] == pytest.approx(D**2, rel=E.VARIANCE_REL_TOL)


def test_ffn_params(claim_results):
    r = claim_results["ffn_params"]
    assert r.verdict == "holds" and r.measured == 2_099_712
    assert r.details["numbers"]["flops_per_position"]["value"] == 4 * 512 * 2048


def test_ffn_vs_mha_params(claim_results):
    r = claim_results["ffn_vs_mha_params"]
    assert r.verdict == "holds"
    assert r.measured == pytest.approx(2_099_712 / (4 * D * D + 4 * D), rel=1e-3)


@pytest.mark.parametrize("claim_id", ["ffn_conv1x1", "ffn_position_wise", "ffn_nonlinear"])
def test_ffn_structure_claims_hold(claim_results, claim_id):
    assert claim_results[claim_id].verdict == "holds"


def test_ffn_nonlinear_numbers(claim_results):
    numbers = claim_results["ffn_nonlinear"].details["numbers"]
    assert numbers["without_relu"]["value"] < F.LINEAR_MAX and numbers["stack_error"]["value"] < F.LINEAR_MAX


def test_claims_are_deterministic():
    assert E.embed_qk_variance(3).measured == E.embed_qk_variance(3).measured
    assert E.embed_qk_variance(3).measured != E.embed_qk_variance(4).measured
    assert math.isfinite(F.ffn_nonlinear(3).measured)


def test_residual_gradient_path(claim_results):
    r = claim_results["residual_gradient_path"]
    assert r.verdict == "partly"  # plain blocks: the residual keeps the gradient; post-LN: LayerNorm already does
    grads = r.details["grad_norm"]
    assert grads["plain, no residual"][-1] < 1e-10 < grads["plain, residual"][-1]  # 96 plain blocks: vanished
    assert r.measured > F.VANISHED_RATIO  # post-LN without the residual keeps a gradient of the same order
