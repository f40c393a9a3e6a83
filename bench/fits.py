"""Scaling exponents from log-log least squares, with confidence intervals, and their verdicts.

Method: for one layer, device, dtype and metric (time, FLOPs, memory), take each sweep of one variable
(n, d or k) with the other sizes fixed, keep its fit range (RANGE below), and fit log y = a + e·log x by
ordinary least squares (scipy.stats.linregress).

INTERVAL: the 95 % interval of e is e ± h with h = sqrt(h_reg² + h_meas²):
- h_reg = t(0.975, m−2)·stderr of the slope, the regression's own (m points; none with m = 2);
- h_meas, the points' own measurement uncertainty, for time only (FLOPs are exact, memory is exact per
  point): each point's log-median is taken as uncertain with σ_i = (log ci_high − log ci_low)/(2·z),
  z = Φ⁻¹(0.975), from its stored 95 % interval of the median (time_ci_low_s, time_ci_high_s). The OLS
  slope is linear in the log times, slope = Σ w_i·log y_i with w_i = (log x_i − mean)/Σ(log x_j − mean)²,
  so perturbing each log y_i by N(0, σ_i²) moves the slope by N(0, Σ w_i²σ_i²) exactly: h_meas =
  z·sqrt(Σ w_i²σ_i²), the limit of the seeded Monte Carlo of refits the issue suggested, without its
  sampling noise. Adding h_reg and h_meas in quadrature is conservative: the residual scatter already
  holds part of the measurement noise. A run stored without those columns has no measurement
  uncertainty; its time fits say so (`measurement_uncertainty` "none stored") and use h_reg alone.

RANGE: FLOPs and memory keep fixed rules: for a layer whose Table 1 row sets `fit_n_over_d` (attention:
8, where its n²·d term carries at least 80 % of the FLOPs, 4·n²·d >= 4 × 8·n·d²) every point with
n >= fit_n_over_d·d; for every other layer the upper half of the sweep (x at or above the median x;
at least MIN_FIT_POINTS points, the largest ones if the upper half has fewer). TIME uses what the data
shows: points whose timing was judged unreliable (time_reliable False) are left out and counted; along
the sweep (sorted by x) the achieved rate is flops_counted / time, and the fit range is the
suffix from the first point whose rate is within PLATEAU_FRACTION of the sweep's best rate and from which
the counted FLOPs follow Table 1's term (`table1_regime_start`: every local FLOP exponent from there on
within the FLOP tolerance of the table's; time can test the table only where its FLOPs do, and attention
at n < 2d is mostly its projections' n·d²). Below
MIN_FIT_POINTS there the fit is "not asymptotic yet": the reason gives the first and last points' rates
as % of the device's compute peak on the fit's clock (of the sweep's best where no peak is stored) and the size that would
reach the plateau, from t = c + f/R fitted over the sweep (non-negative least squares on relative error,
as two_term_fit): the rate f/(c + f/R) reaches PLATEAU_FRACTION·R once f >= c·R·p/(1−p), p =
PLATEAU_FRACTION, and that f becomes a size with the FLOPs' local exponent at the end of the sweep.

PREDICTED: for FLOPs and time, the slope of the layer's row of Table 1 (Vaswani et al. 2017) over the
same x values (an integer for a one-term row, e.g. 2 for n in n²·d; the local slope for the two-term
separable row k·n·d + n·d²); for memory, the slope of the layer's activation estimate (models). A size the
formula needs (k of a convolution, the window r of attention_local) that is missing is an error.

VERDICT: with the band predicted ± TOLERANCE[metric], `consistent` when the whole interval lies inside
the band, `inconsistent` when the whole interval lies outside it, `inconclusive` otherwise: an interval
that straddles an edge of the band, one wider than MAX_VERDICT_WIDTH, one that is missing (NaN), fewer
than MIN_FIT_POINTS points, or a time sweep not asymptotic yet. Every verdict carries a reason. A time
fit that is not consistent also says, from the stored data, what Table 1 leaves out where it matters
(`explanation`): a per-call cost (the c of t = c + f/R) above PER_CALL_SHARE_THRESHOLD of the modelled
time c + f/R at the first fitted point (the sweep's first where there is no fit), or element-wise work
(flops_elementwise: softmax, gates, activations) above ELEMENTWISE_SHARE_THRESHOLD of all work in the fit
range and growing with its own exponent, more than the time tolerance away from the matmul FLOPs' one
(element-wise operations run far below the matmul rate, so a few % of the FLOPs can be a large share of
the time).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import optimize, stats

import models

from . import clock as clocks
from . import timing
from .errors import BadInput
from .spec import expand_grid, mode_of

CONFIDENCE = 0.95  # of every exponent's interval
POINT_CI_CONFIDENCE = timing.CONFIDENCE  # of each point's stored interval of its median time
MIN_FIT_POINTS = 3
TOLERANCE = {"flops": 0.15, "time": 0.2, "memory": 0.35}
MAX_VERDICT_WIDTH = 1.0  # an interval wider than this is never consistent nor inconsistent
PLATEAU_FRACTION = 0.8  # a time sweep is asymptotic from the first point within this share of its best rate
PER_CALL_SHARE_THRESHOLD = 0.2  # a per-call cost above this share of the time explains a time exponent
ELEMENTWISE_SHARE_THRESHOLD = 0.05  # element-wise work above this share of all FLOPs may set the time
METRIC_COLUMN = {"flops": "flops_counted", "time": "time_median_s", "memory": "mem_peak_bytes"}
VARIABLES = ("n", "d", "k")
SOURCE = "Vaswani et al. 2017, Table 1"
VERDICTS = ("consistent", "inconsistent", "inconclusive")
VERDICT_MARK = {"consistent": "✓", "inconsistent": "✗", "inconclusive": "?"}
# per point, the device's compute peak on each clock (bench.peak), where the caller adds it
PEAK_COLUMNS = {timing.WALL: "peak_flops_per_s", timing.CPU: "peak_cpu_flops_per_s"}
CI_COLUMNS = ("time_s_ci_low", "time_s_ci_high")  # a point's interval on the fit's clock (bench.clock.on_clock)


def _g(value: float) -> str:
    return f"{value:.3g}"


def _tolerances_text() -> str:
    return ", ".join(f"± {_g(v)} for {k}" for k, v in TOLERANCE.items())


def _n_over_d_text() -> str:
    """The layers whose Table 1 row restricts the fixed fit range to n >= r·d, in words."""
    by_ratio: dict[int, list[str]] = {}
    for name, layer in models.LAYERS.items():
        if layer.table1.fit_n_over_d is not None:
            by_ratio.setdefault(layer.table1.fit_n_over_d, []).append(name)
    return "".join(f", and for {', '.join(names)} every point with n ≥ {ratio}·d" for ratio, names in by_ratio.items())


RANGE_RULE_TEXT = {
    "flops": (
        f"a fixed range (FLOPs are exact): the upper half of each sweep, at least {MIN_FIT_POINTS} points"
        + _n_over_d_text()
    ),
    "memory": f"a fixed range: the upper half of each sweep, at least {MIN_FIT_POINTS} points" + _n_over_d_text(),
    "time": (
        f"the measured asymptotic range: along each sweep, from the first point that is both on the rate "
        f"plateau (achieved rate, counted FLOPs / median time, within {_g(100 * PLATEAU_FRACTION)} % of the "
        f"sweep's best) and in Table 1's regime (every local exponent of the counted FLOPs from there on "
        f"within ± {_g(TOLERANCE['flops'])} of the table's) to the end; "
        f"points judged unreliable are left out; fewer than {MIN_FIT_POINTS} points there is "
        f'"not asymptotic yet"'
    ),
}


def method_text() -> str:
    """How exponents, intervals, ranges and verdicts are obtained, for the report; every number in it is
    rendered from this module's constants."""
    marks = ", ".join(f"{VERDICT_MARK[v]} {v}" for v in VERDICTS)
    return (
        f"Exponents are least-squares slopes on log-log data. Each has a {_g(100 * CONFIDENCE)} % interval "
        f"e ± sqrt(h_reg² + h_meas²): h_reg from the regression (t distribution, m − 2 degrees of freedom), "
        f"h_meas from the points' own uncertainty, for time only (FLOPs and memory are exact per point): each "
        f"point's stored {_g(100 * POINT_CI_CONFIDENCE)} % interval of its median time gives the spread of its "
        f"log time, propagated exactly through the slope. A time fit uses one clock for all its points, the CPU "
        f"clock where any of them was timed on it (bench.clock), and says which. Verdicts ({marks}): with the band predicted "
        f"{_tolerances_text()}, consistent when the whole interval lies inside the band, inconsistent when it "
        f"lies wholly outside, inconclusive otherwise (an interval straddling an edge, wider than "
        f"{_g(MAX_VERDICT_WIDTH)}, fewer than {MIN_FIT_POINTS} points, or a time sweep not asymptotic yet); "
        f"every verdict has its reason in the tables below and in fits.csv. Fit ranges: time over "
        f"{RANGE_RULE_TEXT['time']}; FLOPs over {RANGE_RULE_TEXT['flops']}; memory over "
        f"{RANGE_RULE_TEXT['memory']}. Where a time fit is not consistent, the reason names what Table 1 "
        f"leaves out when the data shows it: a per-call cost above {_g(100 * PER_CALL_SHARE_THRESHOLD)} % of "
        f"the time, or element-wise work above {_g(100 * ELEMENTWISE_SHARE_THRESHOLD)} % of the FLOPs that "
        f"grows at another rate than the matrix products."
    )


def _require_sizes(layer: str, points: pd.DataFrame, sizes) -> None:
    for size in sizes:
        if size not in points or points[size].isna().any():
            raise ValueError(
                f"{layer}: size {size!r} missing (needed by its formula); a {layer} point must store {size}"
            )


def table1_cost(layer: str, n, d, k=None, window=None) -> np.ndarray:
    """The complexity-per-layer column of Table 1 (constants dropped) at the given sizes: the layer's own
    row (models.LAYERS[layer].table1)."""
    return models.LAYERS[layer].table1.cost(n, d, k, window)


def table1_text(layer: str) -> str:
    return models.LAYERS[layer].table1.compute_text


# ------------------------------------------------------------------------------------ the fit and interval
@dataclass(frozen=True)
class PowerFit:
    exponent: float
    ci_low: float
    ci_high: float
    intercept: float
    points: int
    r2: float
    halfwidth_regression: float = math.nan
    halfwidth_measurement: float = 0.0


def _z(confidence: float) -> float:
    return float(stats.norm.ppf(0.5 + confidence / 2))


def log_sigma_from_interval(ci_low, ci_high, confidence: float = POINT_CI_CONFIDENCE) -> np.ndarray:
    """σ of a log median implied by its interval: (log high − log low) / (2·z); NaN where there is none."""
    low, high = np.asarray(ci_low, float), np.asarray(ci_high, float)
    with np.errstate(invalid="ignore", divide="ignore"):
        sigma = (np.log(high) - np.log(low)) / (2 * _z(confidence))
    return np.where((low > 0) & (high >= low), sigma, np.nan)


def measurement_halfwidth(x, sigma_log, confidence: float = CONFIDENCE) -> float:
    """Half-width of the slope's interval from the points' own log-scale σ_i alone: z·sqrt(Σ w_i²σ_i²),
    w_i the OLS weights of the slope (module docstring)."""
    lx = np.log(np.asarray(x, float))
    centred = lx - lx.mean()
    weights = centred / (centred @ centred)
    return _z(confidence) * float(np.sqrt(np.sum((weights * np.asarray(sigma_log, float)) ** 2)))


def power_law_fit(x, y, sigma_log=None, confidence: float = CONFIDENCE) -> PowerFit:
    """y ≈ C·x^e by least squares on (log x, log y); interval from the t distribution, widened in
    quadrature by the points' own log-scale σ where given (module docstring, INTERVAL)."""
    lx, ly = np.log(np.asarray(x, float)), np.log(np.asarray(y, float))
    if len(lx) < 2 or np.ptp(lx) == 0:
        raise ValueError("a power-law fit needs at least two distinct x values")
    res = stats.linregress(lx, ly)
    m = len(lx)
    h_reg = stats.t.ppf(0.5 + confidence / 2, m - 2) * res.stderr if m > 2 else math.nan
    h_meas = 0.0 if sigma_log is None else measurement_halfwidth(np.exp(lx), sigma_log, confidence)
    half = math.hypot(h_reg, h_meas) if not math.isnan(h_reg) else math.nan
    slope = float(res.slope)
    return PowerFit(
        slope, slope - half, slope + half, float(res.intercept), m, float(res.rvalue**2), float(h_reg), float(h_meas)
    )


def judge(ci_low: float, ci_high: float, predicted: float, tolerance: float) -> tuple[str, str]:
    """(verdict, reason) of an interval against the band predicted ± tolerance (module docstring)."""
    if any(math.isnan(v) for v in (ci_low, ci_high, predicted)):
        return "inconclusive", "no interval (the fit gives none)"
    width = ci_high - ci_low
    if width > MAX_VERDICT_WIDTH:
        return "inconclusive", f"interval too wide (width {_g(width)} > {_g(MAX_VERDICT_WIDTH)})"
    low, high = predicted - tolerance, predicted + tolerance
    band = f"{_g(predicted)} ± {_g(tolerance)}"
    if low <= ci_low and ci_high <= high:
        return "consistent", f"interval within {band}"
    if ci_high < low or ci_low > high:
        return "inconsistent", f"interval outside {band}"
    return "inconclusive", f"interval straddles the tolerance edge ({band})"


# -------------------------------------------------------------------------------------------- fit ranges
def asymptotic_range(sweep: pd.DataFrame, variable: str, layer: str) -> pd.DataFrame:
    """The points of one sweep that the fixed rule for FLOPs and memory keeps (sorted by the variable)."""
    sweep = sweep.sort_values(variable)
    n_over_d = models.LAYERS[layer].table1.fit_n_over_d
    if n_over_d is not None:
        return sweep[sweep["n"] >= n_over_d * sweep["d"]]
    upper = sweep[sweep[variable] >= sweep[variable].median()]
    if len(upper) < MIN_FIT_POINTS:
        upper = sweep.tail(MIN_FIT_POINTS)
    return upper


# ----------------------------------------------------------------------------- a plan's sweeps, before measuring
PLAN_SIZES = ("n", "d", "k", "heads", "window", "batch")  # the sizes a warning names (device and dtype change nothing)


def plan_warnings(specs) -> list[str]:
    """Before measuring: the sweeps of a plan (a list of bench.spec.PointSpec) that cannot give a FLOPs or
    memory fit, one line each, naming the layer, the fixed sizes, how many points the fixed fit range
    (`asymptotic_range`) keeps and why, and sizes that would serve. Sweeps are grouped as the fits group
    them (`sweeps`). Warned about: a sweep of n, d or k of at least MIN_FIT_POINTS values whose range keeps
    fewer (attention's n >= 8·d); and the points in no sweep of MIN_FIT_POINTS values, grouped as the
    n-sweeps they are (of fewer values, or a single n). A sweep of fewer values whose points another sweep
    fits (the two widths the n-sweeps are repeated at, say) is not warned about, nor a sweep of a layer
    whose exponent in the same variable another sweep of the plan fits (a sweep measured for the crossover
    beside the one that gives the exponent). The rule is the same on every device and dtype, so each line is
    given once."""
    if not specs:
        return []
    points = pd.DataFrame([spec.as_row() for spec in specs]).assign(status="ok")
    pending, fitted, covered = [], set(), set()
    for variable in VARIABLES:
        for fixed, sweep in sweeps(points, variable):
            if sweep[variable].nunique() >= MIN_FIT_POINTS:
                covered.update(_sweep_keys(sweep))
                warning = _plan_warning(fixed, sweep, variable)
                pending += [((fixed["layer"], variable), line) for line in warning]
                if not warning:
                    fitted.add((fixed["layer"], variable))
    alone = points[[key not in covered for key in _sweep_keys(points)]]
    fixed_keys = [c for c in SWEEP_KEYS if c != "n"]
    for key, group in alone.groupby(fixed_keys, dropna=False):
        fixed = dict(zip(fixed_keys, key))
        pending += [((fixed["layer"], "n"), line) for line in _plan_warning(fixed, group.drop_duplicates("n"), "n")]
    return list(dict.fromkeys(line for what, line in pending if what not in fitted))


def _sweep_keys(frame: pd.DataFrame) -> list[tuple]:
    return list(frame[SWEEP_KEYS].astype(object).fillna(-1).itertuples(index=False, name=None))


def _plan_warning(fixed: dict, sweep: pd.DataFrame, variable: str) -> list[str]:
    """The warning about one sweep of a plan ([] when its fixed fit range keeps enough points)."""
    layer = fixed["layer"]
    kept = asymptotic_range(sweep, variable, layer)
    if len(kept) >= MIN_FIT_POINTS:
        return []
    row = models.LAYERS[layer].table1
    values = sorted(int(v) for v in sweep[variable])
    sizes = ", ".join(f"{k}={int(fixed[k])}" for k in PLAN_SIZES if k in fixed and not pd.isna(fixed[k]))
    listed = f"{variable}={','.join(map(str, values))}"
    what = f"the {variable}-sweep {listed}" if len(values) > 1 else f"the single point {listed}"
    why = f"fewer than the {MIN_FIT_POINTS} a fit needs"
    if row.fit_n_over_d is not None and len(kept) < len(sweep):
        bound = f" = {row.fit_n_over_d * int(fixed['d'])}" if variable == "n" else ""
        why = (
            f"only n >= {row.fit_n_over_d}·d{bound} count, where Table 1's {row.compute_text} term carries the "
            f"counted FLOPs; {why}"
        )
    return [
        f"{layer} at {sizes}: {what} keeps {len(kept)} of {len(values)} point{'s' if len(values) != 1 else ''} "
        f"for the FLOPs and memory fits ({why}); {_sizes_that_serve(layer, sweep, kept, variable)}"
    ]


def _sizes_that_serve(layer: str, sweep: pd.DataFrame, kept: pd.DataFrame, variable: str) -> str:
    """What to give instead: the condition the fixed range puts on the swept size (attention: n >= 8·d) and
    an example of MIN_FIT_POINTS sizes, each checked by the layer (bench.spec.expand_grid) and kept by
    `asymptotic_range`; no example where a check fails."""
    ratio = models.LAYERS[layer].table1.fit_n_over_d
    first = sweep.iloc[0]
    values = sorted(int(v) for v in sweep[variable])
    chosen = sorted(int(v) for v in kept[variable])  # the sizes the rule keeps already
    alternative = ""
    if ratio is not None and variable == "d":  # d <= n / ratio: smaller widths, or a longer sequence
        limit = int(first["n"]) // ratio
        chosen = chosen or ([limit] if limit >= 1 else [])
        while chosen and len(chosen) < MIN_FIT_POINTS and chosen[0] // 2 >= 1:
            chosen.insert(0, chosen[0] // 2)
        condition = f"d <= {limit} (n/{ratio}): give at least {MIN_FIT_POINTS} such d"
        alternative = f"; or n >= {ratio * values[-1]} ({ratio}·d for d up to {values[-1]})"
    elif ratio is not None and variable == "n":
        bound = ratio * int(first["d"])
        chosen = chosen or [bound]
        while len(chosen) < MIN_FIT_POINTS:
            chosen.append(chosen[-1] * 2)
        condition = f"n >= {bound} ({ratio}·d): give at least {MIN_FIT_POINTS} such n"
    elif ratio is not None and not len(kept):  # another size swept at an n below ratio·d
        return f"give n >= {ratio * int(first['d'])} ({ratio}·d)"
    else:
        step = values[-1] - values[0] if variable == "k" and len(values) > 1 else 2
        while len(chosen) < MIN_FIT_POINTS:
            chosen.append(chosen[-1] + step if variable == "k" else chosen[-1] * 2)
        condition = f"give at least {MIN_FIT_POINTS} values of {variable}"
    if len(chosen) >= MIN_FIT_POINTS and _plan_keeps(layer, first, variable, chosen):
        condition += f", e.g. --{variable} {','.join(map(str, chosen))}"
    return condition + alternative


def _plan_keeps(layer: str, first: pd.Series, variable: str, values: list[int]) -> bool:
    """Whether the sweep of `values` at the other sizes of `first` is valid and keeps MIN_FIT_POINTS points."""

    def given(name: str) -> list:
        return [None] if pd.isna(first[name]) else [int(first[name])]

    sizes = {name: given(name) for name in PLAN_SIZES}
    sizes[variable] = values
    try:
        specs = expand_grid(
            layers=[layer],
            **sizes,
            devices=[first["device"]],
            dtypes=[first["dtype"]],
            dilation=[None] if variable == "k" else given("dilation"),
        )
    except BadInput:
        return False
    frame = pd.DataFrame([spec.as_row() for spec in specs])
    return len(asymptotic_range(frame, variable, layer)) >= MIN_FIT_POINTS


def table1_regime_start(sweep: pd.DataFrame, variable: str, layer: str) -> int | None:
    """Index of the first point (sweep sorted by x) from which the counted FLOPs follow Table 1's term:
    every local FLOP exponent from there on (between neighbouring points) is within TOLERANCE["flops"] of
    Table 1's local exponent there, over at least MIN_FIT_POINTS points; None where no such suffix exists
    (e.g. attention at n < 2d, whose four projections, n·d², outweigh the n²·d of Table 1). Time can test
    Table 1 only where its FLOPs do."""
    x = sweep[variable].to_numpy(float)
    flops = sweep["flops_counted"].to_numpy(float)
    within = []
    for i in range(len(sweep) - 1):
        local = math.log(flops[i + 1] / flops[i]) / math.log(x[i + 1] / x[i])
        predicted = predicted_exponent("flops", layer, sweep.iloc[i : i + 2], variable)
        within.append(abs(local - predicted) <= TOLERANCE["flops"])
    start = len(within)  # the last pair that fails, plus one
    while start > 0 and within[start - 1]:
        start -= 1
    return start if len(sweep) - start >= MIN_FIT_POINTS else None


def plateau_start(rates) -> int:
    """Index of the first rate within PLATEAU_FRACTION of the best one (rates in sweep order)."""
    rates = np.asarray(rates, float)
    return int(np.argmax(rates >= PLATEAU_FRACTION * rates.max()))


@dataclass(frozen=True)
class OverheadFit:
    """time ≈ per_call_s + flops / rate_flops_per_s: a fixed cost per call and an asymptotic rate R."""

    per_call_s: float
    rate_flops_per_s: float  # inf when time does not grow with the FLOPs

    def flops_to_plateau(self, fraction: float = PLATEAU_FRACTION) -> float:
        """The FLOPs from which the rate f/(c + f/R) is at least fraction·R: f = c·R·fraction/(1 − fraction)."""
        return self.per_call_s * self.rate_flops_per_s * fraction / (1 - fraction)


def overhead_fit(flops, time_s) -> OverheadFit:
    """t = c + f/R by non-negative least squares on relative error (rows scaled by 1/t), as two_term_fit."""
    f, t = np.asarray(flops, float), np.asarray(time_s, float)
    basis = np.column_stack([np.ones_like(f), f]) / t[:, None]
    (c, inverse_rate), _ = optimize.nnls(basis, np.ones_like(t))
    return OverheadFit(float(c), math.inf if inverse_rate == 0 else float(1 / inverse_rate))


def size_for_flops(x, flops, target_flops: float) -> float:
    """The size of the swept variable whose FLOPs reach target_flops, extrapolated from the last point with
    the FLOPs' local exponent between the last two points; NaN where the FLOPs do not grow."""
    x, f = np.asarray(x, float), np.asarray(flops, float)
    exponent = math.log(f[-1] / f[-2]) / math.log(x[-1] / x[-2])
    if not exponent > 0 or not math.isfinite(target_flops):
        return math.nan
    return float(x[-1] * (target_flops / f[-1]) ** (1 / exponent))


def useful_flops(points: pd.DataFrame) -> pd.Series:
    """Each point's useful FLOPs (`flops_useful`, where its layer states them: work a kernel skips left out),
    else its counted FLOPs: what a rate against the compute peak divides."""
    if "flops_useful" not in points:
        return points["flops_counted"]
    return points["flops_useful"].where(points["flops_useful"].notna(), points["flops_counted"])


def _pct(fraction: float) -> str:
    value = 100 * fraction
    return f"{value:.0f}" if value >= 10 else f"{value:.2g}"


@dataclass(frozen=True)
class TimeRange:
    """The time fit range of one sweep and what was learnt choosing it."""

    data: pd.DataFrame  # the points to fit (may be fewer than MIN_FIT_POINTS), their time on `clock` in time_s
    sweep: pd.DataFrame  # the sweep's reliable points with a time, sorted
    rule: str
    left_out: int  # unreliable points left out
    reason: str  # why there is no fit ("" when there is one)
    overhead: OverheadFit | None
    plateau_size: float  # where "not asymptotic yet": the size that would reach the plateau
    clock: str = timing.WALL  # the clock of every time in it (bench.clock.group_clock)


def time_fit_range(sweep: pd.DataFrame, variable: str, layer: str) -> TimeRange:
    """The measured asymptotic range of one time sweep (module docstring, RANGE), on one clock for all its points
    (bench.clock.group_clock)."""
    sweep = clocks.on_clock(sweep.sort_values(variable))
    on = sweep["clock"].iloc[0] if len(sweep) else timing.WALL
    timed = sweep[sweep["time_s"].notna() & (sweep["time_s"] > 0)]
    keep = timed["time_ok"].astype(bool)
    reliable = timed[keep]
    left_out = int((~keep).sum())
    if len(reliable) < MIN_FIT_POINTS:
        return TimeRange(
            reliable,
            reliable,
            "plateau",
            left_out,
            f"too few points ({len(reliable)} < {MIN_FIT_POINTS})",
            None,
            math.nan,
            on,
        )
    flops, t = reliable["flops_counted"].to_numpy(float), reliable["time_s"].to_numpy(float)
    if not (np.isfinite(flops).all() and (flops > 0).all()):
        data = asymptotic_range(reliable, variable, layer)
        reason = f"too few points ({len(data)} < {MIN_FIT_POINTS})" if len(data) < MIN_FIT_POINTS else ""
        return TimeRange(data, reliable, "fixed (no FLOP counts)", left_out, reason, None, math.nan, on)
    rates = flops / t
    overhead = overhead_fit(flops, t)
    regime = table1_regime_start(reliable, variable, layer)
    if regime is None:
        exponent = float(stats.linregress(np.log(reliable[variable].to_numpy(float)), np.log(flops)).slope)
        predicted = predicted_exponent("flops", layer, reliable, variable)
        return TimeRange(
            reliable.iloc[0:0],
            reliable,
            "plateau",
            left_out,
            f"Table 1's term does not set the counted FLOPs here (their exponent {exponent:.2f} "
            f"against {predicted:.2f} over {variable} = {int(reliable[variable].iloc[0])}–"
            f"{int(reliable[variable].iloc[-1])}), so time cannot test it",
            overhead,
            math.nan,
            on,
        )
    data = reliable.iloc[max(plateau_start(rates), regime) :]
    if len(data) >= MIN_FIT_POINTS:
        return TimeRange(data, reliable, "plateau", left_out, "", overhead, math.nan, on)
    peak_column = PEAK_COLUMNS[on]
    peak = reliable[peak_column].to_numpy(float) if peak_column in reliable else np.full(len(rates), np.nan)
    if np.isfinite(peak).all():
        shares, of = useful_flops(reliable).to_numpy(float) / t / peak, "peak"
    else:
        shares, of = rates / rates.max(), "the sweep's best"
    target = overhead.flops_to_plateau()
    size = math.nan
    if target > flops[-1]:
        size = size_for_flops(reliable[variable], flops, target)
    if math.isfinite(size):
        reach = f"{variable} ≥ {math.ceil(round(size, 6))} would reach the plateau"  # round: float noise
    elif target <= flops[-1]:
        reach = "the rate rises more than a per-call cost explains (t = c + f/R), so no size is predicted"
    else:
        reach = "t = c + f/R gives no size that reaches the plateau"
    reason = f"not asymptotic yet ({_pct(shares[0])} % → {_pct(shares[-1])} % of {of}; {reach})"
    return TimeRange(data, reliable, "plateau", left_out, reason, overhead, size, on)


def time_explanation(tr: TimeRange, variable: str) -> tuple[str, dict]:
    """What Table 1 leaves out that the stored data shows to matter (module docstring, VERDICT):
    (text, numbers), text "" where neither the per-call cost nor element-wise work stands out."""
    data = tr.sweep if tr.reason or tr.data[variable].nunique() < 2 else tr.data
    out, numbers = [], {}
    if tr.overhead is not None and len(data):
        c, rate = tr.overhead.per_call_s, tr.overhead.rate_flops_per_s
        share = c / (c + float(data["flops_counted"].iloc[0]) / rate) if c > 0 else 0.0  # of the modelled time
        numbers["per_call_s"], numbers["per_call_share"] = c, share
        if share > PER_CALL_SHARE_THRESHOLD:
            out.append(
                f"a per-call cost c = {_g(c)} s is {_pct(share)} % of the time at {variable} = "
                f"{int(data[variable].iloc[0])} (t = c + f/R over the sweep)"
            )
    if "flops_elementwise" in data and data[variable].nunique() >= 2:
        elem, matmul = data["flops_elementwise"].to_numpy(float), data["flops_counted"].to_numpy(float)
        if np.isfinite(elem).all() and (elem > 0).all() and (matmul > 0).all():
            shares = elem / (elem + matmul)
            x = data[variable].to_numpy(float)
            elem_exp = float(stats.linregress(np.log(x), np.log(elem)).slope)
            matmul_exp = float(stats.linregress(np.log(x), np.log(matmul)).slope)
            numbers.update(elementwise_share=float(shares.max()), elementwise_exponent=elem_exp)
            if shares.max() > ELEMENTWISE_SHARE_THRESHOLD and abs(elem_exp - matmul_exp) > TOLERANCE["time"]:
                out.append(
                    f"element-wise work (softmax, gates; not in Table 1) is {_pct(shares[0])} % → "
                    f"{_pct(shares[-1])} % of the FLOPs over {variable} = {int(x[0])}–{int(x[-1])} and grows "
                    f"as {variable}^{elem_exp:.2f}, the matrix products as {variable}^{matmul_exp:.2f}"
                )
    return "; ".join(out), numbers


# -------------------------------------------------------------------------------------------- prediction
def predicted_exponent(metric: str, layer: str, sweep: pd.DataFrame, variable: str) -> float:
    """Slope of Table 1's row (FLOPs, time) or of the activation estimate (memory) over the sweep's x."""
    x = sweep[variable].to_numpy(float)
    if metric == "memory":
        _require_sizes(layer, sweep, models.LAYERS[layer].uses)
        y = [models.analytic_activation_bytes(layer, int(r.batch), int(r.n), _cfg(r)) for r in sweep.itertuples()]
    else:
        _require_sizes(layer, sweep, models.LAYERS[layer].table1.sizes)
        y = table1_cost(layer, sweep["n"], sweep["d"], sweep.get("k"), sweep.get("window"))
    return float(stats.linregress(np.log(x), np.log(np.asarray(y, float))).slope)


def _cfg(row) -> models.LayerConfig:
    return models.LayerConfig.of(
        row.d, row.dtype, **{s: getattr(row, s, None) for s in ("k", "heads", "window", "dilation")}
    )


SWEEP_KEYS = ["layer", "device", "dtype", "mode", "batch", "n", "d", "k", "heads", "window"]


def sweeps(points: pd.DataFrame, variable: str):
    """Groups of ok points that vary only in `variable` (at least 2 distinct values); one source (a run's
    machine, device, dtype and mode, see bench.report.build.assign_sources) at a time when the column is
    there. Points stored before the `mode` column are inference points."""
    if "mode" not in points:
        points = points.assign(mode=mode_of(points))
    keys = (["source"] if "source" in points else []) + SWEEP_KEYS
    fixed = [c for c in keys if c != variable]
    ok = points[points["status"] == "ok"]
    for key, group in ok.groupby(fixed, dropna=False):
        if group[variable].nunique() >= 2 and group[variable].notna().all():
            yield dict(zip(fixed, key)), group.drop_duplicates(variable, keep="last")


# -------------------------------------------------------------------------------------------- the table
FIT_COLUMNS = [
    # the interface's columns first (bench/interface.md)
    "layer",
    "device",
    "metric",
    "variable",
    "exponent",
    "ci_low",
    "ci_high",
    "predicted",
    "verdict",
    "reason",
    "clock",
    "explanation",
    "tolerance",
    "range_rule",
    "x_min",
    "x_max",
    "points",
    "sweep_x_min",
    "sweep_x_max",
    "sweep_points",
    "unreliable_left_out",
    "measurement_uncertainty",
    "halfwidth_regression",
    "halfwidth_measurement",
    "plateau_size",
    "per_call_s",
    "per_call_share",
    "elementwise_share",
    "elementwise_exponent",
    "source",
    "run_id",
    "dtype",
    "mode",
    "batch",
    "fixed",
    "r2",
]


def _measurement_sigma(data: pd.DataFrame) -> tuple[np.ndarray | None, str]:
    """Each time point's log-scale σ from its stored interval, and the text for `measurement_uncertainty`."""
    if not all(c in data for c in CI_COLUMNS):
        return None, "none stored"
    sigma = log_sigma_from_interval(data[CI_COLUMNS[0]], data[CI_COLUMNS[1]])
    stored = int(np.isfinite(sigma).sum())
    if stored == 0:
        return None, "none stored"
    text = f"per-point {_g(100 * POINT_CI_CONFIDENCE)} % intervals"
    if stored < len(sigma):
        text += f", stored for {stored} of {len(sigma)} points"
    return np.nan_to_num(sigma, nan=0.0), text


def _fit_row(metric: str, layer: str, data: pd.DataFrame, variable: str, column: str) -> dict:
    """exponent, interval, predicted and verdict of one fit range with enough points."""
    sigma, uncertainty = _measurement_sigma(data) if metric == "time" else (None, "exact")
    fit = power_law_fit(data[variable], data[column], sigma_log=sigma)
    predicted = predicted_exponent(metric, layer, data, variable)
    verdict, reason = judge(fit.ci_low, fit.ci_high, predicted, TOLERANCE[metric])
    return dict(
        exponent=fit.exponent,
        ci_low=fit.ci_low,
        ci_high=fit.ci_high,
        r2=fit.r2,
        predicted=predicted,
        verdict=verdict,
        reason=reason,
        measurement_uncertainty=uncertainty,
        halfwidth_regression=fit.halfwidth_regression,
        halfwidth_measurement=fit.halfwidth_measurement,
    )


def _no_fit(metric: str, layer: str, sweep: pd.DataFrame, variable: str, reason: str) -> dict:
    predicted = predicted_exponent(metric, layer, sweep, variable) if sweep[variable].nunique() >= 2 else math.nan
    return dict(
        exponent=math.nan,
        ci_low=math.nan,
        ci_high=math.nan,
        r2=math.nan,
        predicted=predicted,
        verdict="inconclusive",
        reason=reason,
        measurement_uncertainty="exact" if metric != "time" else _measurement_sigma(sweep)[1],
        halfwidth_regression=math.nan,
        halfwidth_measurement=math.nan,
    )


def _time_row(layer: str, sweep: pd.DataFrame, variable: str) -> dict:
    tr = time_fit_range(sweep, variable, layer)
    data = tr.data
    if tr.reason:
        row = _no_fit("time", layer, tr.sweep if len(tr.sweep) else clocks.on_clock(sweep), variable, tr.reason)
    else:
        row = _fit_row("time", layer, data, variable, "time_s")
    if tr.left_out:
        row["reason"] += (
            f"; {tr.left_out} unreliable point{'s' if tr.left_out != 1 else ''} left out, {len(tr.sweep)} left"
        )
    timed = clocks.on_clock(sweep, tr.clock)
    row["reason"] += _unusable_text(_unusable(timed, "time_s"), f"time on the {tr.clock} clock")
    row["explanation"] = ""
    if row["verdict"] != "consistent" and len(tr.sweep) >= MIN_FIT_POINTS:
        row["explanation"], numbers = time_explanation(tr, variable)
        row.update(numbers)
        if row["explanation"]:
            row["reason"] += f"; {row['explanation']}"
    row.update(
        clock=tr.clock,
        range_rule=tr.rule,
        unreliable_left_out=tr.left_out,
        plateau_size=tr.plateau_size,
        x_min=data[variable].min() if len(data) else math.nan,
        x_max=data[variable].max() if len(data) else math.nan,
        points=len(data),
    )
    return row


def _unusable(points: pd.DataFrame, column: str) -> int:
    """Points whose value is missing or not positive (no logarithm): left out of a fit, and counted."""
    return int((~(points[column].notna() & (points[column] > 0))).sum())


def _unusable_text(count: int, column: str) -> str:
    return f"; {count} point{'s' if count != 1 else ''} without a positive {column} left out" if count else ""


def _fixed_row(metric: str, layer: str, sweep: pd.DataFrame, variable: str) -> dict:
    column = METRIC_COLUMN[metric]
    fit_range = asymptotic_range(sweep, variable, layer)
    data = fit_range[fit_range[column].notna() & (fit_range[column] > 0)]
    if len(data) < MIN_FIT_POINTS:
        row = _no_fit(metric, layer, sweep, variable, f"too few points ({len(data)} < {MIN_FIT_POINTS})")
    else:
        row = _fit_row(metric, layer, data, variable, column)
    row["reason"] += _unusable_text(_unusable(fit_range, column), column)
    row.update(
        explanation="",
        range_rule="fixed",
        unreliable_left_out=0,
        x_min=data[variable].min() if len(data) else math.nan,
        x_max=data[variable].max() if len(data) else math.nan,
        points=len(data),
    )
    return row


def fit_table(points: pd.DataFrame) -> pd.DataFrame:
    """One row per (layer, device, dtype, metric, variable, sweep), columns FIT_COLUMNS, the interface's
    fits.csv columns first: layer, device, metric, variable, exponent, ci_low, ci_high, predicted, verdict.
    The "not asymptotic yet" reason quotes rates as % of peak where `points` has PEAK_COLUMNS."""
    rows = []
    for variable in VARIABLES:
        for fixed, sweep in sweeps(points, variable):
            layer = fixed["layer"]
            sweep = sweep.sort_values(variable)
            for metric in METRIC_COLUMN:
                row = (
                    _time_row(layer, sweep, variable)
                    if metric == "time"
                    else _fixed_row(metric, layer, sweep, variable)
                )
                row.update(
                    {
                        "layer": layer,
                        "device": fixed["device"],
                        "metric": metric,
                        "variable": variable,
                        "tolerance": TOLERANCE[metric],
                        "source": fixed.get("source", fixed["device"]),
                        "run_id": sweep["run_id"].iloc[-1] if "run_id" in sweep else "",
                        "dtype": fixed["dtype"],
                        "mode": fixed["mode"],
                        "batch": fixed["batch"],
                        "fixed": ", ".join(
                            f"{k}={int(v)}"
                            for k, v in fixed.items()
                            if k in ("n", "d", "k", "heads", "window") and not pd.isna(v)
                        ),
                        "sweep_x_min": sweep[variable].min(),
                        "sweep_x_max": sweep[variable].max(),
                        "sweep_points": len(sweep),
                    }
                )
                rows.append(row)
    return pd.DataFrame(rows, columns=FIT_COLUMNS)


# ------------------------------------------------------------------------------------ other time models
def two_term_fit(points: pd.DataFrame) -> tuple[float, float, float, float]:
    """time ≈ c + a·n·d² + b·n²·d for attention points, their time on one clock in `time_s`
    (bench.clock.on_clock), by non-negative least squares on relative error: a fixed per-call cost c, the
    projections' term and the scores' term; both terms matter near n ~ d. Returns (c, a, b, rms relative
    error)."""
    n, d, t = (points[c].to_numpy(float) for c in ("n", "d", "time_s"))
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


CLOSED_FORM_MAX_N = 2**40  # the search for a closed-form crossover stops here: "no crossover"


def closed_form_crossover_n(layer_a: str, layer_b: str, batch: int, cfg: models.LayerConfig) -> int | None:
    """The smallest n >= 1 at which layer a's FLOP formula (models/) reaches layer b's at the same batch and
    config; 1 means a costs at least as much at every n, None that it costs less up to CLOSED_FORM_MAX_N.
    Solved exactly on integers (doubling, then bisection), which assumes the difference a - b changes sign
    at most once in n: true of the layers' costs, polynomials in n of degree at most 2."""

    def a_reaches_b(n: int) -> bool:
        return models.analytic_flops(layer_a, batch, n, cfg) >= models.analytic_flops(layer_b, batch, n, cfg)

    if a_reaches_b(1):
        return 1
    low, high = 1, 2  # a < b at low
    while not a_reaches_b(high):
        if high >= CLOSED_FORM_MAX_N:
            return None
        low, high = high, high * 2
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if a_reaches_b(mid) else (mid, high)
    return high
