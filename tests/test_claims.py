"""bench.claims: each measurement on a small case whose answer is known exactly, then the whole set of
claims (the session's `claim_results`, conftest.py: measured once) and the report section built from its
stored form."""

from __future__ import annotations

import itertools
import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch import nn

import models
from bench import claims as C
from bench.errors import RunFailed
from bench.policy import TimingPolicy
from bench.report.claims import VERDICT_WORDS, _cell, claims_section, parse_details, parse_measured
from bench.report.context import ReportContext
from bench.timing import Clocks
from models import LayerConfig

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


# ------------------------------------------------------------------------ 1. dot-product variance
@pytest.mark.parametrize("d_k", [1, 2, 4])
def test_dot_product_variance_exact_over_all_sign_vectors(d_k):
    # q, k ∈ {±1}^d_k, every pair once: components are zero-mean, unit-variance and independent, so the
    # population variance of q·k is exactly d_k (a sum of d_k independent ±1), and 1 after 1/√d_k.
    signs = torch.tensor(list(itertools.product([-1.0, 1.0], repeat=d_k)))  # (2^d_k, d_k)
    q = signs.repeat_interleave(len(signs), dim=0)
    k = signs.repeat(len(signs), 1)
    var, var_scaled = C.dot_product_variances(q, k)
    assert var == pytest.approx(d_k, abs=1e-12)
    assert var_scaled == pytest.approx(1.0, abs=1e-12)


def test_dot_product_variance_tolerance_covers_the_sampling_error():
    # The stated tolerance must be several standard errors of the estimate (√(2/N) for near-normal q·k).
    assert C.VARIANCE_REL_TOL >= 4 * math.sqrt(2 / C.VARIANCE_SAMPLES)


# ------------------------------------------------------------------------ 2. softmax saturation
@pytest.mark.parametrize("n", [2, 5, 16])
def test_softmax_jacobian_norm_of_uniform_weights(n):
    # Equal logits: p = 1/n, J = I/n − 11ᵀ/n², so ‖J‖_F² = n (1/n − 1/n²)² + (n² − n) / n⁴.
    expected = math.sqrt(n * (1 / n - 1 / n**2) ** 2 + (n * n - n) / n**4)
    norm = C.softmax_jacobian_norm(torch.zeros(3, n, dtype=torch.float64))
    assert torch.allclose(norm, torch.full((3,), expected, dtype=torch.float64), rtol=1e-12)


def test_softmax_jacobian_norm_vanishes_when_saturated():
    # One logit far above the rest: p ≈ one-hot and J ≈ 0 (entries of order e^−60).
    logits = torch.tensor([[60.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    assert float(C.softmax_jacobian_norm(logits)[0]) < 1e-24


def test_softmax_jacobian_norm_matches_closed_form_on_random_logits():
    logits = torch.randn(6, 7, dtype=torch.float64) * 3
    p = torch.softmax(logits, -1)
    s2, s3 = (p**2).sum(-1), (p**3).sum(-1)
    closed = (s2 - 2 * s3 + s2 * s2).sqrt()  # ‖diag(p) − ppᵀ‖_F² = Σp² − 2Σp³ + (Σp²)²
    assert torch.allclose(C.softmax_jacobian_norm(logits), closed, rtol=1e-10)


# ------------------------------------------------------------------------ 3. multi-head FLOPs
@pytest.mark.parametrize("heads", [1, 2, 4, 8])
@pytest.mark.parametrize("name", ["attention_math", "attention"])
def test_multihead_counted_flops_do_not_depend_on_heads(name, heads):
    b, n, d = 2, 16, 32
    layer = models.build(name, LayerConfig(d=d, heads=heads))
    x = torch.randn(b, n, d)
    # 4 projections of b·n·d² MACs, and QKᵀ and PV of b·n²·d MACs over all heads; 2 FLOPs per MAC.
    assert C.counted_flops(lambda: layer(x)) == 2 * (4 * b * n * d * d) + 2 * (2 * b * n * n * d)


# ------------------------------------------------------------------------ 4. additive attention
def test_additive_attention_counted_flops_match_hand_formula():
    b, n, d, a = 2, 8, 6, 5
    layer = C.AdditiveAttention(d, a)
    q, k, v = torch.randn(b, n, d), torch.randn(b, n, d), torch.randn(b, n, d)
    by_hand = 2 * b * n * d * a + 2 * b * n * d * a + 2 * b * n * n * a + 2 * b * n * n * d
    assert C.counted_flops(lambda: layer(q, k, v)) == by_hand == C.AdditiveAttention.flops(b, n, d, a, d)


def test_additive_attention_matches_a_loop_over_pairs():
    n, d, a = 4, 3, 5
    layer = C.AdditiveAttention(d, a).double()
    q, k, v = (torch.randn(1, n, d, dtype=torch.float64) for _ in range(3))
    scores = torch.empty(n, n, dtype=torch.float64)
    for i in range(n):
        for j in range(n):
            scores[i, j] = layer.v @ torch.tanh(layer.w_q.weight @ q[0, i] + layer.w_k.weight @ k[0, j])
    expected = torch.softmax(scores, -1) @ v[0]
    with torch.no_grad():
        assert torch.allclose(layer(q, k, v)[0], expected, atol=1e-12)


def test_dot_product_attention_matches_sdpa():
    q, k, v = (torch.randn(2, 9, 8, dtype=torch.float64) for _ in range(3))
    expected = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    assert torch.allclose(C.dot_product_attention(q, k, v), expected, atol=1e-12)


def test_interleaved_times_with_a_fake_clock():
    # Each call advances a fake clock by a known amount, so every block's per-call time is exact.
    now = [0.0]

    def costs(seconds):
        def fn():
            now[0] += seconds

        return fn

    threads = torch.get_num_threads()
    policy = TimingPolicy(min_rounds=6, max_rounds=6, min_round_s=0.01, passes=3)
    clocks = Clocks(wall=lambda: now[0], cpu=lambda: now[0])
    times = C.interleaved_times_s({"a": costs(0.002), "b": costs(0.005)}, policy, clocks=clocks)
    assert times == {"a": pytest.approx(0.002), "b": pytest.approx(0.005)}
    assert torch.get_num_threads() == threads  # restored


# ------------------------------------------------------------------------ 5. permutation equivariance
@pytest.mark.parametrize("name", ["attention", "attention_math"])
def test_attention_is_permutation_equivariant_without_positions(name):
    layer = models.build(name, LayerConfig(d=16, heads=2))
    x = torch.randn(2, 10, 16)
    perm = torch.randperm(10)
    assert C.permutation_error(layer, x, perm) <= C.EQUIVARIANT_ATOL
    assert C.permutation_error(layer, x, torch.arange(10)) == 0.0  # identity: the same computation
    assert C.permutation_error(layer, x, perm, C.sinusoidal_encoding(10, 16)) > 1e-3


def test_permutation_error_detects_an_order_dependent_function():
    class CumSum(nn.Module):
        def forward(self, x):
            return x.cumsum(dim=1)

    x = torch.ones(1, 3, 1)
    # cumsum of (1, 1, 1) is (1, 2, 3) whatever the order, but permuting that output is not (1, 2, 3).
    assert C.permutation_error(CumSum(), x, torch.tensor([2, 0, 1])) == pytest.approx(2.0)


# ------------------------------------------------------------------------ positional encodings
def test_sinusoidal_encoding_matches_the_formula():
    d, n = 8, 50
    pe = C.sinusoidal_encoding(n, d, torch.float64)
    for pos, i in [(0, 0), (1, 0), (7, 1), (49, 3)]:
        omega = 10000 ** (-2 * i / d)
        assert pe[pos, 2 * i].item() == pytest.approx(math.sin(pos * omega), abs=1e-12)
        assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(pos * omega), abs=1e-12)


@pytest.mark.parametrize("k", [1, 5, 37])
def test_offset_rotation_is_exact_and_orthogonal(k):
    d = 16
    m = C.offset_rotation(k, d)
    pe = C.sinusoidal_encoding(100, d, torch.float64)
    assert torch.allclose(pe[:-k] @ m.T, pe[k:], atol=1e-12)  # the same M_k for every pos
    assert torch.allclose(m.T @ m, torch.eye(d, dtype=torch.float64), atol=1e-14)
    assert torch.linalg.det(m).item() == pytest.approx(1.0, abs=1e-12)
    assert C.rotation_error(pe, k) < 1e-12


def test_rotation_error_is_large_for_a_table_that_is_not_sinusoidal():
    assert C.rotation_error(torch.randn(50, 8, dtype=torch.float64), 3) > 0.1


def test_min_pairwise_distance_across_chunks():
    points = torch.tensor([[0.0, 0.0], [10.0, 0.0], [3.0, 4.0], [7.5, 0.0], [20.0, 1.0]])
    assert C.min_pairwise_distance(points, chunk=2) == (pytest.approx(2.5), 1, 3)


def test_min_pairwise_distance_matches_cdist():
    points = torch.randn(37, 5, dtype=torch.float64)
    dist = torch.cdist(points, points) + torch.eye(37, dtype=torch.float64) * 1e9
    value, i, j = C.min_pairwise_distance(points, chunk=8)
    assert value == pytest.approx(float(dist.min()), rel=1e-9)
    assert float(dist[i, j]) == pytest.approx(value, rel=1e-12)


def test_sinusoidal_neighbour_distance_formula():
    # ‖PE(p+1) − PE(p)‖² = Σ_i (2 sin(ω_i/2))², the same for every p.
    d = 32
    pe = C.sinusoidal_encoding(200, d, torch.float64)
    omega = C.pe_frequencies(d, torch.float64)
    expected = float((4 * torch.sin(omega / 2) ** 2).sum().sqrt())
    assert torch.allclose((pe[1:] - pe[:-1]).norm(dim=-1), torch.full((199,), expected, dtype=torch.float64))


def test_float32_encoding_error_and_identical_positions():
    err = C.float32_encoding_error(torch.tensor([0.0, 1.0, 2.0**24]), 64)
    assert err[0] == 0.0  # sin 0 and cos 0 are exact
    assert err[1] < 1e-6
    p = 2.0**24  # float32 cannot tell p + 1 from p: the encodings are equal bit for bit
    pe = C.sinusoidal_encoding(torch.tensor([p - 1, p, p + 1], dtype=torch.float64), 64)
    assert torch.equal(pe[1], pe[2]) and not torch.equal(pe[0], pe[1])


def test_wavelengths_from_phase_of_a_known_period():
    pos = torch.arange(100, dtype=torch.float64)
    table = torch.stack([torch.sin(2 * math.pi * pos / 10), torch.cos(2 * math.pi * pos / 10)], -1)
    assert C.wavelengths_from_phase(table).item() == pytest.approx(10.0, rel=1e-12)


def test_wavelengths_are_geometric_from_the_table():
    d = 8
    lam = C.wavelengths_from_phase(C.sinusoidal_encoding(2000, d, torch.float64))
    expected = 2 * math.pi * 10000 ** (torch.arange(d // 2, dtype=torch.float64) * 2 / d)
    assert torch.allclose(lam, expected, rtol=1e-9)
    lam0, ratio, residual = C.geometric_fit(lam)
    assert lam0 == pytest.approx(2 * math.pi, rel=1e-9)
    assert ratio == pytest.approx(10000 ** (2 / d), rel=1e-9)
    assert residual < 1e-9


def test_encoding_variances_on_known_columns():
    n = 401
    pos = torch.arange(n, dtype=torch.float64)
    uniform = torch.linspace(-1, 1, n, dtype=torch.float64)  # variance (n + 1) / (3 (n − 1)) ≈ 1/3
    square_wave = torch.sin(math.pi / 2 * pos[:400])  # 0, 1, 0, −1, ... over whole periods: variance 1/2
    per_dim, overall, second = C.encoding_variances(torch.stack([uniform[:400], square_wave], -1))
    assert per_dim[1].item() == pytest.approx(0.5, abs=1e-12)
    per_dim_u, _, _ = C.encoding_variances(uniform[:, None])
    assert per_dim_u[0].item() == pytest.approx((n + 1) / (3 * (n - 1)), rel=1e-12)
    # Any sinusoidal row has mean square exactly 1/2: sin² + cos² = 1 for each pair.
    assert C.encoding_variances(C.sinusoidal_encoding(300, 16, torch.float64))[2] == pytest.approx(0.5, abs=1e-12)


def test_scaled_embedding_ratio_on_a_constructed_table():
    d = 16
    emb = nn.Embedding(4, d)
    with torch.no_grad():
        emb.weight.copy_(torch.tensor([1.0, -1.0]).repeat(4, d // 2))  # entries ±1: variance 1
    pe = torch.tensor([1.0, -1.0]).repeat(10, d // 2) * 0.5  # entries ±1/2: variance 1/4
    var_emb, var_pe = C.scaled_embedding_ratio(emb, torch.tensor([0, 1, 2, 3]), pe)
    assert var_emb == pytest.approx(d)  # (√d)² · 1
    assert var_pe == pytest.approx(0.25)


# ------------------------------------------------------------------------ 11, 12
def test_causal_weights_are_exactly_zero_in_the_future():
    scores = torch.randn(2, 3, 12, 12) * 50  # large scores: still exactly 0 after −inf
    weights = C.causal_weights(scores)
    assert C.future_weight_max(weights) == 0.0
    assert torch.equal(weights[..., 0, 0], torch.ones(2, 3))  # the first query sees only itself
    assert torch.allclose(weights.sum(-1), torch.ones(2, 3, 12))


def test_future_weight_max_sees_a_future_weight():
    weights = torch.zeros(3, 3)
    weights[0, 2] = 0.25
    assert C.future_weight_max(weights) == 0.25


def test_learned_table_raises_beyond_its_length():
    assert C.learned_lookup(4, 8, 3) == "finite"
    assert C.learned_lookup(4, 8, 4).startswith("IndexError")


# ------------------------------------------------------------------------ all claims, and the section
@pytest.fixture
def measured(claim_results):
    """Every claim's result, in CLAIMS order (the session's measurement)."""
    return list(claim_results.values())


@pytest.mark.slow
def test_measure_claims_fills_every_field(measured):
    assert len(measured) == len(C.CLAIMS) == len(C.STATEMENTS)
    ids = [r.claim_id for r in measured]
    assert set(ids) == set(C.STATEMENTS)  # every declared claim, each once
    assert ids[0] == "dot_product_variance"  # the families in the paper's order, the training claims last
    last = [i for i, claim_id in enumerate(ids) if not claim_id.startswith("backward_twice_forward_")][-1]
    assert ids[last] == "attention_slow_long_sequences" and last == len(ids) - len(models.LAYERS) - 1
    for r in measured:
        for name in ("claim_id", "statement", "expected", "source", "unit"):
            assert isinstance(getattr(r, name), str) and getattr(r, name), (r.claim_id, name)
        assert r.measured is not None and r.measured != "", r.claim_id
        assert r.verdict in C.VERDICTS, r.claim_id
        json.dumps(r.details)  # storable


@pytest.mark.slow
def test_measure_claims_known_outcomes(measured):
    by_id = {r.claim_id: r for r in measured}
    assert by_id["pe_variance_one_third"].verdict == "fails"  # sin² averages 1/2, not 1/3
    assert by_id["pe_variance_one_third"].measured == pytest.approx(0.5, abs=0.02)
    assert by_id["causal_mask"].measured == 0.0 and by_id["causal_mask"].verdict == "holds"
    assert by_id["extrapolation"].measured.startswith("learned: IndexError")
    assert by_id["permutation_equivariance"].verdict == "holds"
    assert by_id["pe_rotation"].verdict == "holds"
    assert by_id["pe_wavelengths"].measured == pytest.approx(10000 ** (1 - 2 / 512), rel=1e-4)
    assert len(set(by_id["multihead_cost"].details["flops_counted"])) == 1
    assert by_id["dot_product_variance"].verdict == "holds"


@pytest.mark.slow
def test_claims_frame_columns(measured):
    frame = C.claims_frame(measured)
    assert list(frame.columns[: len(C.COLUMNS)]) == list(C.COLUMNS)
    assert len(frame) == len(measured)
    assert all(isinstance(json.loads(d), dict) for d in frame["details"])


def _context_from_csv(frame: pd.DataFrame, tmp_path, run_id="claims-run") -> ReportContext:
    # As the report reads it: claims.csv through pandas, with the run id added.
    frame.to_csv(tmp_path / "claims.csv", index=False)
    stored = pd.read_csv(tmp_path / "claims.csv").assign(run_id=run_id)
    return ReportContext(
        points=pd.DataFrame(), runs={run_id: {"cpu_model": "test cpu"}}, out_dir=tmp_path / "reports", claims=stored
    )


@pytest.mark.slow
def test_claims_section_from_stored_csv(measured, tmp_path):
    ctx = _context_from_csv(C.claims_frame(measured), tmp_path)
    text = claims_section(ctx)
    for r in measured:
        assert r.claim_id in text
        assert f"claims.{r.claim_id}.measured" in ctx.numbers
    names = {p.name for p in ctx.figures}
    for claim_id in ("dot_product_variance", "softmax_saturation", "multihead_cost", "dot_vs_additive"):
        assert f"claims_{claim_id}.png" in names
    assert all(ctx.files[str(p)][:4] == b"\x89PNG" for p in ctx.figures)  # drawn; build writes them
    assert ctx.numbers["claims.causal_mask.measured"].value == 0
    # note by note: every catalogue statement in the note's words with its gloss, each under every note it cites
    for entry in C.catalog()["statement"]:
        for quote, gloss in zip(entry.get("quotes", [entry["quote"]]), entry.get("glosses", [entry["gloss"]])):
            assert f"“{_cell(quote)}” — *{_cell(gloss)}*" in text, (entry["id"], quote)
    notes = C.catalog()["meta"]["notes"]
    parts = text.split("### Note ")[1:]
    assert [part[:3] for part in parts] == [note["file"][:3] for note in notes]
    for entry in C.catalog()["statement"]:
        for ref in entry["seed_ref"]:
            part = parts[[note["file"] for note in notes].index(ref.split(":")[0])]
            assert f"line {ref.split(':')[1]}: “" in part, (entry["id"], ref)
        if not entry["checkable"]:
            assert _cell(entry["how"]) in text  # why it needs training
    # each checkable statement's verdict in words, from the claim that measures it, and its checks as sentences
    verdict_of = {s: r.verdict for r in measured for s in (C.STATEMENTS[r.claim_id].notes or ())}
    for entry in (e for e in C.catalog()["statement"] if e["checkable"]):
        quote = _cell(entry.get("quotes", [entry["quote"]])[0])
        line = next(line for line in text.splitlines() if f"“{quote}”" in line and line.startswith("- **"))
        assert line.startswith(f"- **{VERDICT_WORDS[verdict_of[entry['id']]]}.**"), entry["id"]
    # the headline counts the notes' statements apart from the harness's own claims
    own = [r for r in measured if not C.STATEMENTS[r.claim_id].notes]
    checkable = sum(e["checkable"] for e in C.catalog()["statement"])
    assert f"make {checkable} statements" in text and f"checks {len(own)} claims of its own" in text
    assert "expected at most" in text


def test_claims_section_without_details_or_claims(tmp_path):
    frame = pd.DataFrame(
        [{"claim_id": "toy", "statement": "s", "measured": "1.5", "expected": "e", "verdict": "holds", "source": "src"}]
    )
    ctx = _context_from_csv(frame, tmp_path)
    text = claims_section(ctx)
    assert "toy" in text and ctx.numbers["claims.toy.measured"].value == 1.5 and not ctx.figures
    empty = ReportContext(points=pd.DataFrame(), runs={}, out_dir=tmp_path / "r2", claims=None)
    assert "No claims" in claims_section(empty)


def test_parse_helpers():
    assert parse_measured("3") == 3 and parse_measured("0.25") == 0.25 and parse_measured("1e-05") == 1e-05
    assert parse_measured("learned: IndexError") == "learned: IndexError"
    assert parse_details({"details": float("nan")}) == {}
    assert parse_details({"details": '{"a": 1}'}) == {"a": 1}
    with pytest.raises(RunFailed, match="claim 'x'.*not valid JSON"):  # damaged, never read as {}
        parse_details({"claim_id": "x", "details": '{"a": 1'})
    with pytest.raises(RunFailed, match="not a JSON object"):
        parse_details({"claim_id": "x", "details": "[1, 2]"})


SEEDS = Path(__file__).resolve().parent.parent.parent / "shared" / "seeds"


def test_every_claim_is_in_the_catalogue_and_its_note_lines_say_it():
    """Every claim names the catalog.toml statements it measures (or None: the notes do not make it); each
    catalogue seed_ref's line exists and the quote stands on it or within 3 lines after."""
    catalogue = C.catalog()
    ids = [entry["id"] for entry in catalogue["statement"]]
    assert len(ids) == len(set(ids))
    for claim_id, said in C.STATEMENTS.items():
        assert set(said.notes or ()) <= set(ids), claim_id  # each claim's notes are catalogue statements
    assert len(C.CLAIMS) == len(C.STATEMENTS) and C.CLAIMS[0].__module__.endswith("scaled_dot_product")
    if not SEEDS.exists():
        pytest.skip(f"no study notes beside this checkout ({SEEDS})")
    for entry in catalogue["statement"]:
        for ref, quote in zip(entry["seed_ref"], entry.get("quotes", [entry["quote"]])):
            name, line = ref.split(":")
            lines = (SEEDS / name).read_text().splitlines()
            near = " ".join(lines[int(line) - 1 : int(line) + 3])
            assert quote in near, (entry["id"], ref, quote)


def test_every_claims_random_stream_is_its_own():
    """record.generator_for promises one independent stream per claim: no offset is used in two places."""
    offsets = [
        int(m)
        for path in sorted(Path(C.__file__).parent.glob("*.py"))
        for m in re.findall(r"generator_for\(seed, (\d+)\)", path.read_text())
    ]
    assert offsets and len(offsets) == len(set(offsets))


@pytest.mark.slow
def test_every_claim_gives_the_verdict_the_catalogue_expects(measured):
    """The catalogue's `expected` was worked out apart from the code (by hand, from the notes' own numbers):
    each claim's verdict agrees with it for every statement the claim measures, and no statement is measured twice."""
    expected = {e["id"]: e["expected"] for e in C.catalog()["statement"]}
    seen = []
    for r in measured:
        for statement_id in C.STATEMENTS[r.claim_id].notes or ():
            assert r.verdict == expected[statement_id], (r.claim_id, statement_id, r.measured)
            seen.append(statement_id)
    assert len(seen) == len(set(seen))  # one claim per fact
    checkable = {e["id"] for e in C.catalog()["statement"] if e["checkable"]}
    assert set(seen) == checkable  # every checkable statement measured


def test_an_older_claims_run_is_placed_by_its_claim_ids_and_note_lines(tmp_path):
    """A run stored before claims named their statements: a claim this version still has is placed by its id, one
    since split or renamed by its note lines; a claim without note lines is the harness's own."""
    binary = next(e for e in C.catalog()["statement"] if e["id"] == "pe_binary_analogy_exact")
    periods = next(e for e in C.catalog()["statement"] if e["id"] == "pe_binary_periods")
    rows = [
        {"claim_id": "pe_binary_analogy", "seed_ref": "; ".join(periods["seed_ref"] + binary["seed_ref"])},
        {"claim_id": "causal_mask", "seed_ref": ""},
        {"claim_id": "an_old_harness_claim", "seed_ref": ""},
    ]
    frame = pd.DataFrame(
        [{"statement": "s", "measured": "1", "expected": "e", "verdict": "holds", "source": "src", **r} for r in rows]
    )
    text = claims_section(_context_from_csv(frame, tmp_path))
    own = text[text.index("### The harness's own claims") : text.index("### Each claim in detail")]
    assert "an_old_harness_claim" in own and "causal_mask" not in own and "pe_binary_analogy" not in own
    assert "Measured (`pe_binary_analogy`, holds)" in text and "Measured (`causal_mask`, holds)" in text
    assert "Not measured in this run" in text  # the statements no claim of that run measured
