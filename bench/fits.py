"""Scaling exponents from log-log least squares, with confidence intervals, and their verdicts.

Method: for one layer, device, dtype and metric (time, FLOPs, memory), take each sweep of one variable
(n, d or k) with the other sizes fixed, keep its asymptotic range (ASYMPTOTIC RULE below), and fit
log y = a + e·log x by ordinary least squares (scipy.stats.linregress). The 95 % interval of e is the
regression's own: e ± t(0.975, m-2)·stderr, m points. With m = 2 there is no interval.

ASYMPTOTIC RULE: for attention and attention_math, every point with n >= ATTENTION_N_OVER_D · d, where
the table's n²·d term carries at least 80 % of the FLOPs (4·n²·d >= 4 × 8·n·d²); for every other layer, the
upper half of the sweep (x at or above the median x; at least MIN_FIT_POINTS points, taking the largest
ones if the upper half has fewer).

PREDICTED: for FLOPs and time, the slope of the layer's row of Table 1 (Vaswani et al. 2017) over the
same x values (an integer for a one-term row, e.g. 2 for n in n²·d; the local slope for the two-term
separable row k·n·d + n·d²); for memory, the slope of the layer's activation estimate (models).
VERDICT: `consistent` when |exponent − predicted| <= the metric's tolerance (TOLERANCE), else
`inconsistent`; `too few points` below MIN_FIT_POINTS.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import optimize, stats

import models

CONFIDENCE = 0.95
MIN_FIT_POINTS = 3
ATTENTION_N_OVER_D = 8  # from n = 8d on, 4·n²·d is at least 4x the projections' 8·n·d²: 80 % of the FLOPs
TOLERANCE = {"flops": 0.15, "time": 0.35, "memory": 0.35}
METRIC_COLUMN = {"flops": "flops_counted", "time": "time_median_s", "memory": "mem_peak_bytes"}
VARIABLES = ("n", "d", "k")
SOURCE = "Vaswani et al. 2017, Table 1"
ASYMPTOTIC_RULE_TEXT = (f"least squares on log-log data over the upper half of each sweep, at least {MIN_FIT_POINTS} points, "
                        f"and for attention every point with n >= {ATTENTION_N_OVER_D}·d; 95 % intervals from the regression")


def table1_cost(layer: str, n, d, k, window) -> np.ndarray:
    """The complexity-per-layer column of Table 1 (constants dropped), evaluated at the given sizes."""
    n, d = np.asarray(n, float), np.asarray(d, float)
    if layer in ("conv", "conv_dilated"):
        return np.asarray(k, float) * n * d**2
    if layer == "conv_separable":
        return np.asarray(k, float) * n * d + n * d**2
    if layer in models.RECURRENT:
        return n * d**2
    if layer in ("attention", "attention_math"):
        return n**2 * d
    if layer == "attention_local":
        return np.asarray(window, float) * n * d
    raise KeyError(layer)


TABLE1_TEXT = {
    "conv": "O(k·n·d²)", "conv_dilated": "O(k·n·d²)", "conv_separable": "O(k·n·d + n·d²)",
    "rnn": "O(n·d²)", "gru": "O(n·d²)", "lstm": "O(n·d²)",
    "attention": "O(n²·d)", "attention_math": "O(n²·d)", "attention_local": "O(r·n·d)",
}


@dataclass(frozen=True)
class PowerFit:
    exponent: float
    ci_low: float
    ci_high: float
    intercept: float
    points: int
    r2: float


def power_law_fit(x, y, confidence: float = CONFIDENCE) -> PowerFit:
    """y ≈ C·x^e by least squares on (log x, log y); interval from the t distribution."""
    lx, ly = np.log(np.asarray(x, float)), np.log(np.asarray(y, float))
    if len(lx) < 2 or np.ptp(lx) == 0:
        raise ValueError("a power-law fit needs at least two distinct x values")
    res = stats.linregress(lx, ly)
    m = len(lx)
    if m > 2:
        half = stats.t.ppf(0.5 + confidence / 2, m - 2) * res.stderr
    else:
        half = math.nan
    slope = float(res.slope)
    return PowerFit(slope, slope - half, slope + half, float(res.intercept), m, float(res.rvalue**2))


def asymptotic_range(sweep: pd.DataFrame, variable: str, layer: str) -> pd.DataFrame:
    """The points of one sweep that the ASYMPTOTIC RULE keeps (sorted by the variable)."""
    sweep = sweep.sort_values(variable)
    if layer in ("attention", "attention_math"):
        return sweep[sweep["n"] >= ATTENTION_N_OVER_D * sweep["d"]]
    upper = sweep[sweep[variable] >= sweep[variable].median()]
    if len(upper) < MIN_FIT_POINTS:
        upper = sweep.tail(MIN_FIT_POINTS)
    return upper


def predicted_exponent(metric: str, layer: str, sweep: pd.DataFrame, variable: str) -> float:
    x = sweep[variable].to_numpy(float)
    if metric == "memory":
        y = [models.analytic_activation_bytes(layer, int(r.batch), int(r.n), _cfg(r)) for r in sweep.itertuples()]
    else:
        y = table1_cost(layer, sweep["n"], sweep["d"], sweep["k"].fillna(1), sweep["window"].fillna(1))
    return float(stats.linregress(np.log(x), np.log(np.asarray(y, float))).slope)


def _cfg(row) -> models.LayerConfig:
    kwargs = {"d": int(row.d), "dtype": row.dtype}
    for name in ("k", "heads", "window", "dilation"):
        value = getattr(row, name, None)
        if value is not None and not pd.isna(value):
            kwargs[name] = int(value)
    return models.LayerConfig(**kwargs)


SWEEP_KEYS = ["layer", "device", "dtype", "batch", "n", "d", "k", "heads", "window"]


def sweeps(points: pd.DataFrame, variable: str):
    """Groups of ok points that vary only in `variable` (at least 2 distinct values); one source (a run's
    device and dtype, see bench.report.build.label_sources) at a time when the column is there."""
    keys = (["source"] if "source" in points else []) + SWEEP_KEYS
    fixed = [c for c in keys if c != variable]
    ok = points[points["status"] == "ok"]
    for key, group in ok.groupby(fixed, dropna=False):
        if group[variable].nunique() >= 2 and group[variable].notna().all():
            yield dict(zip(fixed, key)), group.drop_duplicates(variable, keep="last")


def fit_table(points: pd.DataFrame) -> pd.DataFrame:
    """One row per (layer, device, dtype, metric, variable, sweep) with the interface's fits.csv columns
    first: layer, device, metric, variable, exponent, ci_low, ci_high, predicted, verdict."""
    rows = []
    for variable in VARIABLES:
        for fixed, sweep in sweeps(points, variable):
            layer = fixed["layer"]
            fit_range = asymptotic_range(sweep, variable, layer)
            for metric, column in METRIC_COLUMN.items():
                data = fit_range[fit_range[column].notna() & (fit_range[column] > 0)]
                row = {
                    "layer": layer, "device": fixed["device"], "metric": metric, "variable": variable,
                    "source": fixed.get("source", fixed["device"]), "run_id": sweep["run_id"].iloc[-1] if "run_id" in sweep else "",
                    "dtype": fixed["dtype"], "batch": fixed["batch"],
                    "fixed": ", ".join(f"{k}={int(v)}" for k, v in fixed.items()
                                       if k in ("n", "d", "k", "heads", "window") and not pd.isna(v)),
                    "x_min": data[variable].min() if len(data) else math.nan,
                    "x_max": data[variable].max() if len(data) else math.nan,
                    "points": len(data),
                }
                if len(data) < MIN_FIT_POINTS:
                    row.update(exponent=math.nan, ci_low=math.nan, ci_high=math.nan, r2=math.nan,
                               predicted=math.nan, verdict="too few points")
                else:
                    fit = power_law_fit(data[variable], data[column])
                    predicted = predicted_exponent(metric, layer, data, variable)
                    verdict = ("consistent" if abs(fit.exponent - predicted) <= TOLERANCE[metric]
                               else "inconsistent")
                    row.update(exponent=fit.exponent, ci_low=fit.ci_low, ci_high=fit.ci_high, r2=fit.r2,
                               predicted=predicted, verdict=verdict)
                row["tolerance"] = TOLERANCE[metric]
                rows.append(row)
    columns = ["layer", "device", "metric", "variable", "exponent", "ci_low", "ci_high", "predicted", "verdict",
               "tolerance", "source", "run_id", "dtype", "batch", "fixed", "x_min", "x_max", "points", "r2"]
    return pd.DataFrame(rows, columns=columns)


def two_term_fit(points: pd.DataFrame) -> tuple[float, float, float, float]:
    """time ≈ c + a·n·d² + b·n²·d for attention points (non-negative least squares on relative error):
    a fixed per-call cost c, the projections' term and the scores' term; both terms matter near n ~ d.
    Returns (c, a, b, rms relative error)."""
    n, d, t = (points[c].to_numpy(float) for c in ("n", "d", "time_median_s"))
    basis = np.column_stack([np.ones_like(n), n * d**2, n**2 * d]) / t[:, None]  # rows scaled by 1/t
    coef, _ = optimize.nnls(basis, np.ones_like(t))
    rel = basis @ coef - 1
    return float(coef[0]), float(coef[1]), float(coef[2]), float(np.sqrt(np.mean(rel**2)))


def crossover_n(ns, time_a, time_b) -> float | None:
    """The n where series a (e.g. attention) overtakes series b: the first measured n where a >= b, by
    log-log interpolation from the point before it; exactly the first n if they are equal there; None if
    a is below b everywhere, or above it from the first point on."""
    ns, ratio = np.asarray(ns, float), np.log(np.asarray(time_a, float) / np.asarray(time_b, float))
    for i in range(len(ns)):
        if ratio[i] >= 0:
            if i == 0:
                return float(ns[0]) if ratio[0] == 0 else None
            frac = -ratio[i - 1] / (ratio[i] - ratio[i - 1])
            return float(np.exp(np.log(ns[i - 1]) + frac * (np.log(ns[i]) - np.log(ns[i - 1]))))
    return None
