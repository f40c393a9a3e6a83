"""Fits: exponents and intervals on data whose answer is known, the fixed range rule of FLOPs and memory,
crossovers. Verdicts, the measured range of time and the points' own uncertainty: test_verdicts.py."""

import math

import numpy as np
import pandas as pd
import pytest

from bench import fits


@pytest.mark.parametrize("exponent", [0.5, 1.0, 2.0, 3.0])
def test_exact_power_law_gives_its_exponent(exponent):
    x = np.array([64, 128, 256, 512, 1024])
    fit = fits.power_law_fit(x, 3e-6 * x**exponent)
    assert fit.exponent == pytest.approx(exponent, abs=1e-9)
    assert fit.ci_low == pytest.approx(exponent, abs=1e-6) and fit.r2 == pytest.approx(1.0)


def test_interval_matches_the_t_distribution_by_hand():
    # log2-spaced x, y = x² · (1, 1.1, 1, 1.1): residuals known, so the slope's stderr is computable.
    x = np.array([1.0, 2.0, 4.0, 8.0])
    y = x**2 * np.array([1.0, 1.1, 1.0, 1.1])
    lx, ly = np.log(x), np.log(y)
    slope = np.polyfit(lx, ly, 1)[0]
    resid = ly - np.polyval(np.polyfit(lx, ly, 1), lx)
    stderr = math.sqrt(resid @ resid / (4 - 2) / ((lx - lx.mean()) @ (lx - lx.mean())))
    t975_df2 = 4.302652729911275
    fit = fits.power_law_fit(x, y)
    assert fit.exponent == pytest.approx(slope)
    assert fit.ci_high - fit.exponent == pytest.approx(t975_df2 * stderr, rel=1e-6)


def test_two_points_have_no_interval():
    fit = fits.power_law_fit([1, 2], [1, 4])
    assert fit.exponent == pytest.approx(2) and math.isnan(fit.ci_low)


def _sweep(layer, ns, d, t):
    return pd.DataFrame(
        {
            "layer": layer,
            "device": "cpu",
            "dtype": "float32",
            "batch": 1,
            "n": ns,
            "d": d,
            "k": np.nan,
            "heads": 4,
            "window": np.nan,
            "status": "ok",
            "time_median_s": t,
            "flops_counted": t,
            "mem_peak_bytes": t,
            "run_id": "r",
        }
    )


def test_fixed_rule_of_flops_and_memory_keeps_upper_half_and_n_over_8d_for_attention():
    ns = [64, 128, 256, 512, 1024, 2048]
    df = _sweep("attention", ns, 128, [1.0] * 6)
    kept = fits.asymptotic_range(df, "n", "attention")
    assert list(kept["n"]) == [1024, 2048]  # n >= 8·128 = 1024
    kept = fits.asymptotic_range(_sweep("attention", ns, 32, [1.0] * 6), "n", "attention")
    assert list(kept["n"]) == [256, 512, 1024, 2048]  # n >= 8·32, no further halving
    kept = fits.asymptotic_range(_sweep("lstm", ns, 128, [1.0] * 6), "n", "lstm")
    assert list(kept["n"]) == [512, 1024, 2048]  # n at or above the median, (256 + 512) / 2 = 384


def test_fit_table_verdicts_against_table1():
    ns = np.array([256, 512, 1024, 2048, 4096])
    quadratic = _sweep("attention", ns, 32, 1e-9 * ns.astype(float) ** 2)
    linear_lstm = _sweep("lstm", ns, 32, 1e-6 * ns.astype(float) ** 1.5)  # wrong on purpose: 1.5, not 1
    linear_lstm["flops_counted"] = 16 * ns * 32**2  # the FLOPs do follow Table 1's n·d²
    table = fits.fit_table(pd.concat([quadratic, linear_lstm]))
    att = table[(table.layer == "attention") & (table.metric == "time")].iloc[0]
    assert att.exponent == pytest.approx(2) and att.predicted == pytest.approx(2) and att.verdict == "consistent"
    lstm = table[(table.layer == "lstm") & (table.metric == "time")].iloc[0]
    assert lstm.predicted == pytest.approx(1) and lstm.verdict == "inconsistent"
    assert lstm.reason == "interval outside 1 ± 0.2"  # an exact power law: an interval of width 0
    assert list(table.columns[:9]) == [
        "layer",
        "device",
        "metric",
        "variable",
        "exponent",
        "ci_low",
        "ci_high",
        "predicted",
        "verdict",
    ]


def test_crossover_interpolates_log_log():
    # a = n², b = 64·n: equal at n = 64, between the measured 32 and 128.
    ns = [16, 32, 128, 256]
    a = [n**2 for n in ns]
    b = [64 * n for n in ns]
    assert fits.crossover_n(ns, a, b) == pytest.approx(64)
    assert fits.crossover_n(ns, b, a) is None  # b never overtakes a from below
    # equal at the first measured n (attention 8nd² + 4n²d against lstm 16nd² at n = 2d): that n itself
    d = 32
    ns = [64, 128, 256]
    att = [8 * n * d**2 + 4 * n**2 * d for n in ns]
    lstm = [16 * n * d**2 for n in ns]
    assert fits.crossover_n(ns, att, lstm) == 64


def test_two_term_fit_recovers_both_terms():
    rows = [(n, d) for n in (64, 256, 1024) for d in (16, 64)]
    df = pd.DataFrame(rows, columns=["n", "d"])
    df["time_s"] = 3e-5 + 2e-9 * df.n * df.d**2 + 5e-10 * df.n**2 * df.d
    c, a, b, rms = fits.two_term_fit(df)
    assert c == pytest.approx(3e-5, rel=1e-5) and rms < 1e-6
    assert a == pytest.approx(2e-9, rel=1e-5) and b == pytest.approx(5e-10, rel=1e-5)


def _conv_dilated(ns, ks, dilation):
    """conv_dilated points, d = 8, with FLOPs 2·k·n·d² (Table 1's k·n·d²), time and memory proportional to them."""
    rows = [(n, k, k if dilation is None else dilation) for n in ns for k in ks]
    df = pd.DataFrame(rows, columns=["n", "k", "dilation"]).assign(
        layer="conv_dilated", device="cpu", dtype="float32", batch=1, d=8, heads=np.nan, window=np.nan, status="ok"
    )
    flops = 2.0 * df["k"] * df["n"] * 8**2
    return df.assign(flops_counted=flops, time_median_s=1e-9 * flops, mem_peak_bytes=4.0 * df["n"] * 8, run_id="r")


def test_two_dilations_at_the_same_sizes_are_two_sweeps_none_dropped():
    ns = [64, 128, 256, 512]
    table = fits.fit_table(pd.concat([_conv_dilated(ns, [3], 1), _conv_dilated(ns, [3], 4)], ignore_index=True))
    flops = table[(table.metric == "flops") & (table.variable == "n")]
    assert sorted(flops["fixed"]) == ["d=8, k=3, dilation=1", "d=8, k=3, dilation=4"]
    assert list(flops["sweep_points"]) == [4, 4]  # each sweep keeps its own 4 points
    assert flops["exponent"].to_numpy() == pytest.approx([1.0, 1.0])
    assert len(table) == 2 * len(fits.METRIC_COLUMN)  # no k- or d-sweep: one k, one d


def test_a_k_sweep_moves_the_dilation_with_k_and_keeps_another_dilation_apart():
    """The default dilation of conv_dilated is k itself (bench.spec.expand_grid): k = 3, 5, 7 at their own
    dilations are one k-sweep; the same k at dilation 2 are another."""
    ks = [3, 5, 7]
    table = fits.fit_table(pd.concat([_conv_dilated([64], ks, None), _conv_dilated([64], ks, 2)], ignore_index=True))
    flops = table[(table.metric == "flops") & (table.variable == "k")]
    assert sorted(flops["fixed"]) == ["n=64, d=8", "n=64, d=8, dilation=2"]
    assert list(flops["sweep_points"]) == [3, 3]
    assert flops["exponent"].to_numpy() == pytest.approx([1.0, 1.0])  # k·n·d²: 1 in k
