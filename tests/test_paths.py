"""bench.paths: path length and sequential depth, checked against cases worked out by hand.

Conventions used in the hand reasoning below (models/): a centered conv with odd kernel k lets output i
see inputs i - h .. i + h, h = (k-1)/2; attention_local with window r lets query i see keys
i - r//2 .. i - r//2 + r - 1, so key j reaches queries up to j + r//2.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

import models
from bench.paths import (
    COLUMNS,
    NeverCrosses,
    UnsupportedReference,
    layer_seq_depth,
    layers_to_cross,
    layers_to_cross_formula,
    path_hops,
    paths_table,
    reached_by_poison,
    reached_by_tangent,
    recurrent_path_hops,
    reference_seq_depth,
    scan_path_hops,
    seq_depth,
    stack_layer,
)
from bench.report.context import ReportContext
from bench.report.paths import paths_section

ALL = list(models.LAYERS)
NS, KS, WINDOW = [64, 256], [3, 5], 16  # the quick preset's study


@pytest.fixture(scope="module")
def quick_table() -> pd.DataFrame:
    return paths_table(ALL, NS, KS, window=WINDOW)


def _row(table: pd.DataFrame, layer: str, n: int, k: int | None = None) -> pd.Series:
    rows = table[(table.layer == layer) & (table.n == n)]
    if k is not None:
        rows = rows[rows.k == k]
    assert len(rows) == 1, (layer, n, k)
    return rows.iloc[0]


# ------------------------------------------------------------------------------------- layers_to_cross
@pytest.mark.parametrize("layer", ["conv", "conv_separable"])
@pytest.mark.parametrize(
    ("k", "expected"),
    [
        (3, 7),  # h = 1: after L layers input 0 reaches positions 0..L, so position 7 needs L = 7 = ceil(7/1)
        (5, 4),  # h = 2: reaches 0..2L; 2L >= 7 first at L = 4 = ceil(7/2)
        (7, 3),  # h = 3: reaches 0..3L; 3L >= 7 first at L = 3 = ceil(7/3)
    ],
)
def test_conv_stack_by_hand_n8(layer, k, expected):
    assert layers_to_cross(layer, 8, k) == expected == layers_to_cross_formula(layer, 8, k)


def test_conv_reached_set_grows_one_position_per_layer():
    # n = 8, k = 3: the set that depends on input 0 is {0}, then {0, 1}, {0, 1, 2}, ...: one more per layer.
    x = torch.randn(1, 8, 4)
    reached = torch.zeros(8, dtype=torch.bool)
    reached[0] = True
    for index in range(7):
        x, reached = reached_by_poison(stack_layer("conv", index, d=4, k=3, window=16), x, reached)
        assert reached.tolist() == [p <= index + 1 for p in range(8)]


@pytest.mark.parametrize(
    ("window", "expected"),
    [
        (2, 7),  # r//2 = 1 position further per layer: ceil(7/1)
        (3, 7),  # keys i-1..i+1: still 1 further per layer
        (4, 4),  # keys i-2..i+1: key 0 reaches query 2, so 2 per layer: ceil(7/2)
        (5, 4),  # keys i-2..i+2: 2 per layer
        (8, 2),  # keys i-4..i+3: 4 per layer: ceil(7/4)
    ],
)
def test_attention_local_by_hand_n8(window, expected):
    assert layers_to_cross("attention_local", 8, window=window) == expected
    assert layers_to_cross_formula("attention_local", 8, window=window) == expected


def test_attention_local_one_layer_reach_is_its_window():
    # One layer: input j reaches the queries whose window holds j, column j of the layer's dense mask.
    n, window = 12, 5
    layer = stack_layer("attention_local", 0, d=8, k=3, window=window)
    mask = layer.dense_mask(n)  # (query, key)
    for j in (0, 5, 11):
        reached = torch.zeros(n, dtype=torch.bool)
        reached[j] = True
        _, out = reached_by_poison(layer, torch.randn(1, n, 8), reached)
        assert out.tolist() == mask[:, j].tolist()


def test_attention_local_grows_linearly_in_n(quick_table):
    # r = 16, r//2 = 8 per layer: ceil(63/8) = 8 at n = 64, ceil(255/8) = 32 at n = 256: 4x for 4x n.
    lo, hi = _row(quick_table, "attention_local", 64), _row(quick_table, "attention_local", 256)
    assert (lo.layers_to_cross, hi.layers_to_cross) == (8, 32)
    assert (lo.layers_to_cross_formula, hi.layers_to_cross_formula) == (8, 32)


def test_conv_dilated_by_hand():
    # k = 3, dilation 3^l at layer l: L layers reach (3^L - 1)/2 positions on a line without ends:
    # 1, 4, 13, ... so n - 1 = 7 needs L = 3, and n - 1 = 4 needs L = 2.
    assert layers_to_cross("conv_dilated", 8, 3) == 3 == layers_to_cross_formula("conv_dilated", 8, 3)
    # n = 5 without a margin: 4 = 1 + 3, steps 0 -> 1 -> 4 stay inside 0..4: 2 layers.
    assert layers_to_cross("conv_dilated", 5, 3, margin=0) == 2
    # n = 8 without a margin: the offsets are balanced ternary digits, unique: 7 = 9 - 3 + 1, steps
    # 0 -> 1 -> -2 -> 7, and -2 is padding, so the zero-padded stack never links 0 to 7.
    with pytest.raises(NeverCrosses, match="no further layer"):
        layers_to_cross("conv_dilated", 8, 3, margin=0)


# The layers one of which links every pair of positions, by hand; a new one must be added here.
ONE_LAYER = ["attention", "attention_math", "attention_split", "attention_linear", "rnn", "gru", "lstm", "scan"]


def test_one_layer_lists_every_layer_whose_path_is_one():
    assert sorted(ONE_LAYER) == sorted(name for name, cls in models.LAYERS.items() if cls.path.text == "1")


@pytest.mark.parametrize("layer", ONE_LAYER)
def test_one_layer_crosses(layer):
    assert layers_to_cross(layer, 64) == 1 == layers_to_cross_formula(layer, 64)


@pytest.mark.parametrize(
    ("layer", "kwargs", "message"),
    [
        ("conv", {"k": 1}, "adds no position"),  # a 1-tap kernel never moves information
        ("attention_local", {"window": 1}, "adds no position"),  # each query sees only itself
        ("conv", {"k": 3, "max_layers": 3}, "capped at 3 layers"),
    ],
)
def test_a_stack_that_cannot_cross_says_so(layer, kwargs, message):
    with pytest.raises(NeverCrosses, match=message):
        layers_to_cross(layer, 8, **kwargs)


@pytest.mark.parametrize("layer", ALL)
@pytest.mark.parametrize("start", [0, 5])
def test_poison_probe_agrees_with_forward_mode_structure(layer, start):
    # Forward-mode tangents give the exact Jacobian structure (a mask multiplies a tangent by an exact 0),
    # and at n = 12 nothing underflows: the NaN probe must find the same positions, layer after layer.
    n = 12
    x = torch.randn(1, n, 8, dtype=torch.float64)
    by_poison = torch.zeros(n, dtype=torch.bool)
    by_poison[start] = True
    by_tangent = by_poison.clone()
    for index in range(3):
        layer_l = stack_layer(layer, index, d=8, k=3, window=4, dtype=torch.float64)
        x_next, by_poison = reached_by_poison(layer_l, x, by_poison)
        _, by_tangent = reached_by_tangent(layer_l, x, by_tangent)
        assert by_poison.tolist() == by_tangent.tolist(), (layer, index)
        x = x_next
    if layer in models.stepwise():  # causal: nothing before the start is reached
        assert not by_poison[:start].any() and by_poison[start:].all()


# -------------------------------------------------------------------------------------------- path_hops
@pytest.mark.parametrize("layer", models.stepwise())
def test_recurrent_hops_are_one_step_per_position(layer):
    # Output t is made t cell steps after x_0 enters (step 0), through the hidden (and cell) state; the
    # scan's reference too: the loop its forward does not run.
    n = 8
    built = stack_layer(layer, 0, d=8, k=3, window=16)
    assert recurrent_path_hops(built, torch.randn(1, n, 8)) == list(range(n))


def test_hops_count_cross_step_transfers_not_loop_iterations():
    # A toy recurrence whose state skips a step (h_t from h_{t-2}): x_0 reaches output 6 in 3 transfers,
    # though 6 loop iterations pass; the mode counts the transfers on the dependency path.
    class SkipRecurrence(torch.nn.Module):
        def reference(self, x):
            states = [x.new_zeros(x.shape[0], x.shape[2])] * 2  # reads only x's shape
            for t in range(x.shape[1]):
                states.append(torch.tanh(x[:, t] + states[-2]))
            return torch.stack(states[2:], dim=1)

    hops = recurrent_path_hops(SkipRecurrence(), torch.randn(1, 7, 3))
    assert hops == [0, None, 1, None, 2, None, 3]


def test_hops_need_a_reference_that_reads_position_by_position():
    class Whole(torch.nn.Module):
        def reference(self, x):
            return torch.stack([torch.tanh(x @ torch.eye(x.shape[-1]))[:, t] for t in range(x.shape[1])], dim=1)

    with pytest.raises(UnsupportedReference, match="position by position"):
        recurrent_path_hops(Whole(), torch.randn(1, 4, 3))


@pytest.mark.parametrize(
    ("layer", "n", "k", "expected"),
    [
        ("lstm", 64, 3, 63),
        ("lstm", 256, 3, 255),
        ("rnn", 8, 3, 7),  # one cell step per position
        ("attention", 64, 3, 1),  # one layer, one hop
        ("conv", 8, 3, 7),  # 7 layers crossed, one hop each
    ],
)
def test_path_hops(layer, n, k, expected):
    assert path_hops(layer, n, k)[0] == expected


# -------------------------------------------------------------------------------------------- seq_depth
def test_depth_of_a_chain_of_adds():
    def chain(x):
        for _ in range(5):
            x = x + 1
        return x

    assert seq_depth(chain, torch.randn(3)) == 5


def test_depth_of_parallel_branches_is_the_longer_one_plus_the_join():
    # a = x + 1 (depth 1); b = exp(x * 2) (depth 2); a * b joins them: 1 + max(1, 2) = 3.
    assert seq_depth(lambda x: (x + 1) * torch.exp(x * 2), torch.randn(3)) == 3
    # Two inputs, both depth 0: x + y is 1; (x + y) - y is 2 (y enters again at depth 0).
    assert seq_depth(lambda x, y: (x + y) - y, torch.randn(3), torch.randn(3)) == 2


def test_views_and_parameters_add_no_depth():
    linear = torch.nn.Linear(4, 4)
    # transpose and view alias their input; the parameters are depth 0; addmm is the one operator.
    assert seq_depth(lambda x: linear(x.t().contiguous().view(2, 4)), torch.randn(4, 2)) == 2  # copy + addmm
    assert seq_depth(lambda x: x.t()[1:].unsqueeze(0), torch.randn(4, 2)) == 0


@pytest.mark.parametrize(
    ("layer", "per_step"),
    [
        # Along the critical path (views free; the initial state x.new_zeros is depth 1):
        # rnn:  h_t = tanh(gi + (h_{t-1} @ W_hh^T + b_hh)): mm, add, add, tanh = 4 per step.
        ("rnn", 4),
        # gru:  h_{t-1} -> mm, add b_hh, add i_r, sigmoid (r), mul h_n, add i_n, tanh (cand), mul (1-z),
        #       add z*h = 9 per step.
        ("gru", 9),
        # lstm: c_t = sigmoid(f)*c_{t-1} + ...: h_{t-1} -> mm, add b_hh, add gi, sigmoid, mul, add = c_t
        #       (6), then tanh(c_t), mul by sigmoid(o) = h_t (2 more): 8 per step.
        ("lstm", 8),
    ],
)
@pytest.mark.parametrize("n", [2, 5, 16])
def test_reference_depth_by_hand(layer, per_step, n):
    # Each loop step adds per_step; the first step starts from the depth-1 zero state so it also adds
    # per_step; the final stack adds 1: depth = 1 (zeros) + per_step·n + 1 (stack) = per_step·n + 2.
    depth, measured_on = layer_seq_depth(layer, n)
    assert measured_on == "reference"
    assert depth == per_step * n + 2


@pytest.mark.parametrize(
    "layer", ["attention", "attention_math", "attention_local", "attention_linear", "conv", "conv_separable"]
)
def test_parallel_layers_have_constant_depth(layer):
    assert layer_seq_depth(layer, 16, window=4)[0] == layer_seq_depth(layer, 64, window=4)[0]


# ------------------------------------------------------------------------------------ the parallel scan
@pytest.mark.parametrize(("n", "levels"), [(2, 1), (3, 2), (5, 3), (8, 3), (9, 4), (37, 6), (64, 6), (65, 7)])
def test_scan_hops_are_the_levels_of_its_tree(n, levels):
    # A tree of L levels scans blocks of 2^L positions apart: output n-1 sees input 0 once 2^L >= n.
    assert path_hops("scan", n) == (levels, "scan levels")
    layer, x = stack_layer("scan", 0, d=8, k=3, window=16), torch.randn(1, n, 8, dtype=torch.float64)
    assert scan_path_hops(layer.double(), x, probe=reached_by_tangent) == levels  # the exact Jacobian agrees


@pytest.mark.parametrize("n", [2, 3, 5, 37, 64, 4096])
def test_scan_depth_by_hand(n):
    # Forward, batch 1 (views free): B x (addmm) 1, the padding 2; each of the L = ⌈log₂ n⌉ up-sweep levels
    # one addcmul, each down-sweep level a pad, an addcmul and a stack (3); C h (addmm) 1: 3 + 4·L.
    # Reference: the zero state 1; h_0 = a·0 + B x_0 at 3 (mul after sigmoid; mm then the bias for B x_t);
    # each step a mul and an add (2); y_t = C h_t a mm and an add (2); the stack 1: 3 + 2(n−1) + 2 + 1.
    levels = math.ceil(math.log2(n))
    assert layer_seq_depth("scan", n) == (3 + 4 * levels, "forward")
    assert reference_seq_depth("scan", n) == 2 * n + 4


def test_scan_depth_grows_as_log_n_and_its_reference_as_n():
    """The issue's numbers: from n = 64 to 4096 (64x) the scan's forward depth grows by at most 2.5x (its
    levels 6 -> 12), its step-by-step reference's by at least 50x."""
    rows = paths_table(["scan"], [64, 4096], [3]).set_index("n")
    assert (rows["seq_depth_of"] == "forward").all()
    assert rows.loc[4096, "seq_depth"] / rows.loc[64, "seq_depth"] <= 2.5
    assert rows.loc[4096, "seq_depth_reference"] / rows.loc[64, "seq_depth_reference"] >= 50
    assert list(rows["path_hops"]) == [6, 12] and list(rows["layers_to_cross"]) == [1, 1]
    assert reference_seq_depth("conv", 64) is None


# ------------------------------------------------------------------------------------ the quick study
def test_table_shape(quick_table):
    assert (
        list(quick_table.columns[:7])
        == COLUMNS[:7]
        == ["layer", "n", "k", "layers_to_cross", "layers_to_cross_formula", "path_hops", "seq_depth"]
    )
    for layer in ALL:
        rows = quick_table[quick_table.layer == layer]
        if "k" in models.LAYERS[layer].uses:
            assert sorted(zip(rows.n, rows.k)) == sorted((n, k) for n in NS for k in KS)
        else:  # one row per n, k empty
            assert sorted(rows.n) == NS and rows.k.isna().all()
    assert (quick_table.error == "").all()


def test_probe_threads_are_restored_even_when_the_stack_never_crosses():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert layers_to_cross("conv", 8, 3) == 7
        assert torch.get_num_threads() == 2
        with pytest.raises(NeverCrosses):
            layers_to_cross("conv", 8, 1)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("k", KS)
def test_conv_measured_equals_centered_formula(quick_table, n, k):
    row = _row(quick_table, "conv", n, k)
    assert row.layers_to_cross == row.layers_to_cross_formula == math.ceil((n - 1) / ((k - 1) // 2))
    assert row.path_hops == row.layers_to_cross  # one hop per layer crossed


def test_conv_dilated_grows_logarithmically(quick_table):
    lo, hi = _row(quick_table, "conv_dilated", 64, 3), _row(quick_table, "conv_dilated", 256, 3)
    assert 0 <= hi.layers_to_cross - lo.layers_to_cross <= 2
    assert (lo.layers_to_cross, hi.layers_to_cross) == (5, 6)  # ceil(log_3 127) = 5, ceil(log_3 511) = 6


@pytest.mark.parametrize("layer", ONE_LAYER)
def test_quick_one_layer_and_hops(quick_table, layer):
    for n in NS:
        row = _row(quick_table, layer, n)
        assert row.layers_to_cross == 1
        hops = {"rnn": n - 1, "gru": n - 1, "lstm": n - 1, "scan": math.ceil(math.log2(n))}.get(layer, 1)
        assert row.path_hops == hops


def test_depth_lstm_reference_grows_attention_does_not(quick_table):
    lstm_lo, lstm_hi = _row(quick_table, "lstm", 64), _row(quick_table, "lstm", 256)
    assert lstm_lo.seq_depth_of == lstm_hi.seq_depth_of == "reference"
    assert lstm_hi.seq_depth / lstm_lo.seq_depth >= 3.5
    att_lo, att_hi = _row(quick_table, "attention", 64), _row(quick_table, "attention", 256)
    assert att_lo.seq_depth == att_hi.seq_depth and att_lo.seq_depth_of == "forward"


# ------------------------------------------------------------------------------------------- the report
def _context(table: pd.DataFrame, out_dir) -> ReportContext:
    runs = {"r1": {"run_id": "r1", "started_utc": "2025-01-01T00:00:00Z", "cpu_model": "test cpu"}}
    return ReportContext(points=pd.DataFrame(), runs=runs, out_dir=out_dir, paths=table.assign(run_id="r1"))


def test_paths_section(quick_table, tmp_path):
    # As the report reads it: through a CSV, so the integer columns come back as floats.
    quick_table.to_csv(tmp_path / "paths.csv", index=False)
    ctx = _context(pd.read_csv(tmp_path / "paths.csv"), tmp_path / "reports")
    text = paths_section(ctx)
    assert text.startswith("## Maximum path length and sequential operations")
    assert ctx.files["figures/paths_layers_to_cross.png"][:4] == b"\x89PNG"  # drawn; build writes it
    numbers = {key: number.value for key, number in ctx.numbers.items()}
    assert numbers["paths.conv.k3.n256.layers_to_cross"] == 255
    assert numbers["paths.conv.k3.n256.layers_to_cross_formula"] == 255
    assert numbers["paths.conv_dilated.k3.n64.layers_to_cross"] == 5
    assert numbers["paths.attention_local.r16.n256.layers_to_cross"] == 32
    assert numbers["paths.lstm.n256.path_hops"] == 255
    assert ctx.numbers["paths.lstm.n256.seq_depth"].unit == "ops"
    assert "reference" in text and "fused" in text
    assert "255 layers" in text


def test_paths_section_without_paths(tmp_path):
    ctx = ReportContext(points=pd.DataFrame(), runs={}, out_dir=tmp_path, paths=None)
    assert "No paths were stored" in paths_section(ctx)
    assert not ctx.numbers and not ctx.figures


@pytest.mark.parametrize(
    ("layer", "depths", "follows"),
    [
        ("scan", (27, 35, 43, 51), True),  # 3 + 4·log2 n: slope 0.153 from 64 to 4096, the cell's 1/6
        ("scan", (27, 27, 27, 27), False),  # constant: O(1), not O(log n)
        ("scan", (132, 516, 2052, 8196), False),  # its reference's 2n + 4: O(n)
        ("rnn", (258, 1026, 4098, 16386), True),  # 4n + 2
        ("rnn", (27, 35, 43, 51), False),  # a log is no O(n)
        ("attention", (9, 9, 9, 9), True),
        ("attention", (9, 10, 11, 12), True),  # slope 0.069: within 0.1 of 0 and nearer it than 1/6
        ("attention", (9, 10, 12, 13), False),  # slope 0.088: within 0.1 of 0, but nearer O(log n)'s 1/6
    ],
)
def test_the_headline_judges_depth_growth_against_the_cells_own_shape(layer, depths, follows):
    """A depth is "as Table 1 says" when its log-log slope between the smallest and largest n lies within
    SEQUENTIAL_TOLERANCE of the slope the layer's cell has there and nearer to it than to another cell's:
    O(log n) is judged against log's own slope over those n, never against a power of n."""
    from bench.report.headline import depth_follows_table1  # noqa: PLC0415

    rows = pd.DataFrame({"n": [64, 256, 1024, 4096], "seq_depth": depths})
    assert depth_follows_table1(rows, layer) is follows


def test_paths_section_sets_the_scans_depth_beside_its_references(tmp_path):
    table = paths_table(["scan", "attention_linear"], [64, 4096], [3])
    table.to_csv(tmp_path / "paths.csv", index=False)
    ctx = _context(pd.read_csv(tmp_path / "paths.csv"), tmp_path / "reports")
    text = paths_section(ctx)
    numbers = {key: number.value for key, number in ctx.numbers.items()}
    assert numbers["paths.scan.n64.seq_depth"] == 27 and numbers["paths.scan.n4096.seq_depth"] == 51
    assert numbers["paths.scan.n4096.seq_depth_reference"] == 2 * 4096 + 4
    assert numbers["paths.scan.seq_depth.ratio_n4096_n64"] == round(51 / 27, 2)
    assert numbers["paths.scan.seq_depth_reference.ratio_n4096_n64"] == round(8196 / 132, 2)
    assert numbers["paths.scan.n4096.path_hops"] == 12
    assert "⌈log₂ n⌉ = 6 → 12 levels" in text and "(dependent steps: scan levels)" in text
    assert "attention_linear 9 ops at n = 64, 9 ops at n = 4096" in text  # constant in n
