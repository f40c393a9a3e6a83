"""bench.claims' complexity modules: the helpers against hand-written formulas, and every claim's verdict."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import models
from bench.claims import CLAIMS, CLAIMS_THREADS, STATEMENTS, catalog, path_length, sequential_ops, slow_attention
from bench.claims import complexity as X
from bench.threads import pinned_threads
from models import LayerConfig

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


# ------------------------------------------------------------------------ helpers
@pytest.mark.parametrize("power", [0.5, 1.0, 2.0, 3.0])
def test_fitted_exponent_of_exact_power_laws(power):
    xs = [2, 4, 8, 16, 32]
    assert X.fitted_exponent(xs, [7 * x**power for x in xs]) == pytest.approx(power, abs=1e-12)


def test_fitted_exponent_sees_a_lower_order_term():
    xs = [10, 20, 40]
    assert X.fitted_exponent(xs, [x**2 + 100 * x for x in xs]) < 1.9


@pytest.mark.parametrize(("batch", "n", "d"), [(1, 16, 8), (2, 64, 32)])
def test_attention_counted_flops_match_hand_formula(batch, n, d):
    # What attention_complexity sets beside the count: the layer's own analytic FLOPs.
    layer = models.build(models.ROLES.attention, LayerConfig(d=d))
    x = torch.randn(batch, n, d)
    hand = 2 * 4 * batch * n * d * d + 2 * 2 * batch * n * n * d  # 4 projections; QKᵀ and AV
    assert models.analytic_flops(models.ROLES.attention, batch, n, LayerConfig(d=d)) == hand
    assert X.counted_flops(lambda: layer(x)) == hand


@pytest.mark.parametrize(("gates", "name"), [(1, "rnn"), (3, "gru"), (4, "lstm")])
def test_recurrent_formula(gates, name):
    # n steps × g blocks × (W_ih x_t + W_hh h) × d² MACs × 2 FLOPs, what rnn_complexity sets beside the count.
    assert models.analytic_flops(name, 2, 5, LayerConfig(d=8)) == 2 * 2 * 5 * gates * (8 * 8 + 8 * 8)
    assert name in models.recurrent()


def test_conv_formula():
    assert models.analytic_flops(models.ROLES.convolution, 2, 10, LayerConfig(d=4, k=3)) == 2 * 2 * 10 * 3 * 16


@pytest.mark.parametrize("d", [2, 7, 16])
def test_matmul_flops_are_2d3_and_2d2(d):
    assert X.matmul_flops(d, torch.Generator().manual_seed(0)) == (2 * d**3, 2 * d**2)


@pytest.mark.parametrize(("n", "d"), [(1, 1), (3, 4), (5, 2)])
def test_score_op_counts(n, d):
    q, k = torch.randn(n, d, dtype=torch.float64), torch.randn(n, d, dtype=torch.float64)
    c = X.score_op_counts(q, k)
    assert (c["multiplications"], c["additions"], c["flops_counted"]) == (n * n * d, n * n * (d - 1), 2 * n * n * d)
    assert c["max_abs_diff"] < 1e-12


def test_receptive_field_of_a_hand_made_window():
    # y_t = x_{t-1} + 2 x_{t+2} (zero outside): output t depends on inputs t-1 and t+2 only.
    def fn(x):
        padded = nn.functional.pad(x, (0, 0, 1, 2))  # (1, n + 3, d)
        return padded[:, :-3] + 2 * padded[:, 3:]

    gen = torch.Generator().manual_seed(0)
    assert sequential_ops.receptive_field(fn, 10, 2, 5, gen) == [4, 7]
    assert sequential_ops.receptive_field(fn, 10, 2, 0, gen) == [2]
    assert sequential_ops.receptive_field(fn, 10, 2, 9, gen) == [8]


@pytest.mark.parametrize(("k", "dilations"), [(3, [1]), (3, [1, 1, 1]), (5, [1, 1]), (3, [1, 2, 4]), (3, [1, 3, 9])])
def test_stacked_receptive_field_is_one_plus_k_minus_1_times_dilations(k, dilations):
    gen = torch.Generator().manual_seed(1)
    field = path_length.stacked_receptive_field(path_length._dilated_conv(), k, dilations, 101, gen)
    assert field == 1 + (k - 1) * sum(dilations)


def test_dilated_conv_is_the_registered_k_power_stack():
    name = path_length._dilated_conv()
    assert name in models.LAYERS and models.LAYERS[name].path.stack_dilation(2, 3) == 9


# ------------------------------------------------------------------------ the claims
EXPECTED = {
    "attention_complexity": "holds",
    "attention_score_op_count": "holds",
    "rnn_complexity": "holds",
    "dxd_matmul_cost": "fails",
    "conv_complexity": "holds",
    "seq_ops_parallel": "holds",
    "seq_ops_rnn": "holds",
    "path_attention": "holds",
    "path_rnn": "holds",
    "conv_receptive_field": "holds",
    "path_conv_contiguous": "partly",
    "path_conv_dilated": "partly",
    "receptive_field_one_layer": "holds",
    "attention_slow_long_sequences": "holds",
}
MODULES = (X, sequential_ops, path_length, slow_attention)
FUNCTIONS = {claim_id: getattr(m, claim_id) for m in MODULES for claim_id in EXPECTED if hasattr(m, claim_id)}


def test_every_complexity_statement_of_the_catalogue_is_measured():
    wanted = {e["id"] for e in catalog()["statement"] if e.get("family") == "complexity" and e.get("checkable")}
    covered = {note for claim_id in EXPECTED for note in STATEMENTS[claim_id].notes}
    assert wanted <= covered


@pytest.mark.parametrize("claim_id", list(EXPECTED))
def test_claim_verdict(claim_results, claim_id):
    r = claim_results[claim_id]
    assert r.claim_id == claim_id and FUNCTIONS[claim_id] in CLAIMS  # declared in this family's module
    assert r.verdict == EXPECTED[claim_id], (r.measured, r.expected)
    assert r.measured is not None and r.measured != ""
    assert "numbers" in r.details


def test_claims_are_deterministic(claim_results):
    with pinned_threads(CLAIMS_THREADS):  # measured again, as measure_claims measures
        again = path_length.path_conv_contiguous(0)
    assert again.measured == claim_results["path_conv_contiguous"].measured


def test_known_measurements(claim_results):
    assert claim_results["attention_score_op_count"].measured == 100 * 100 * 64
    assert claim_results["dxd_matmul_cost"].measured == pytest.approx(3, abs=1e-6)
    assert claim_results["rnn_complexity"].measured == pytest.approx(2, abs=1e-6)
    assert claim_results["conv_complexity"].measured == pytest.approx(2, abs=1e-6)
    assert claim_results["path_attention"].measured == 1
    assert claim_results["path_rnn"].measured == path_length.PATH_RNN_NS[-1] - 1
    assert claim_results["conv_receptive_field"].measured == path_length.RF_LAYERS[-1] * (path_length.RF_KS[0] - 1) + 1
    assert claim_results["receptive_field_one_layer"].measured == path_length.ONE_LAYER_N
    # Doubling dilations, k = 3, L = 5: 1 + 2·(2^5 − 1) = 63, not 3^5 = 243.
    assert claim_results["path_conv_dilated"].measured == 63
    contiguous = claim_results["path_conv_contiguous"]
    n, k = path_length.PATH_CONV_RANGE[-1], path_length.PATH_CONV_KS[0]
    assert contiguous.measured == pytest.approx(math.ceil((n - 1) / ((k - 1) // 2)) / (n / k), rel=1e-5)
    assert claim_results["path_conv_dilated"].details["layers_to_cross_k_power"] == [2 + i for i in range(1, 6)]
