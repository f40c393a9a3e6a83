"""Scaling exponents: log-log fits with intervals, verdicts against Table 1, fits.csv, crossovers (docs/method.md)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

import models

from . import clock as clocks
from . import policy
from .complexity import complexity as complexity
from .spec import DECODE_MODE, DEFAULT_MODE, flag_of
from .sweeps import (
    ELEMENTWISE_SHARE_THRESHOLD,
    MIN_FIT_POINTS,
    PER_CALL_SHARE_THRESHOLD,
    PLATEAU_FRACTION,
    TOLERANCE,
    Reason,
    TimeRange,
    all_sweeps,
    asymptotic_range,
    fixed_text,
    log_sigma_from_interval,
    metric_column,
    mode_of_sweep,
    predicted_exponent,
    time_explanation,
    time_fit_range,
    z_of,
)
from .sweeps import METRIC_COLUMN as METRIC_COLUMN
from .sweeps import PEAK_COLUMNS as PEAK_COLUMNS  # these and the above: what the report reads from here
from .sweeps import VARIABLES as VARIABLES
from .sweeps import predicted_text as predicted_text
from .sweeps import table1_cell as table1_cell
from .sweeps import useful_flops as useful_flops

CONFIDENCE = 0.95  # of every exponent's interval
MAX_VERDICT_WIDTH = 1.0  # an interval wider than this is never consistent nor inconsistent
SOURCE = "Vaswani et al. 2017, Table 1"
VERDICTS = ("consistent", "inconsistent", "inconclusive")
DECIDED = VERDICTS[:2]
VERDICT_MARK = {"consistent": "✓", "inconsistent": "✗", "inconclusive": "?"}
CI_COLUMNS = ("time_s_ci_low", "time_s_ci_high")  # a point's interval on the fit's clock (bench.clock.on_clock)


def _g(value: float) -> str:
    return f"{value:.3g}"


def _n_over_d_text() -> str:
    by_ratio: dict[int, list[str]] = {}
    for name, layer in models.LAYERS.items():
        if layer.table1 is not None and layer.table1.fit_n_over_d is not None:
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
        f"points without a trusted time are left out; fewer than {MIN_FIT_POINTS} points there is "
        f'"not asymptotic yet"'
    ),
}


def method_text() -> str:
    """How exponents, intervals, ranges and verdicts are obtained, for the report, from this module's constants."""
    marks = ", ".join(f"{VERDICT_MARK[v]} {v}" for v in VERDICTS)
    tolerances = ", ".join(f"± {_g(v)} for {k}" for k, v in TOLERANCE.items())
    return (
        f"Exponents are least-squares slopes on log-log data. Each has a {_g(100 * CONFIDENCE)} % interval "
        f"e ± sqrt(h_reg² + h_meas²): h_reg from the regression (t distribution, m − 2 degrees of freedom), "
        f"h_meas from the points' own uncertainty, for time only (FLOPs and memory are exact per point): each "
        f"point's stored {_g(100 * policy.CONFIDENCE)} % interval of its median time gives the spread of its "
        f"log time, propagated exactly through the slope. A time fit uses one clock for all its points, the CPU "
        f"clock where any of them was timed on it (bench.clock), and one statistic, each point's median or, where "
        f"any point's median is not to be trusted, each point's fastest round (no interval: the scatter carries "
        f"the noise), and says which. Verdicts ({marks}): with the band "
        f"predicted {tolerances}, consistent when the whole interval lies inside the band, inconsistent when it "
        f"lies wholly outside, inconclusive otherwise (an interval straddling an edge, wider than "
        f"{_g(MAX_VERDICT_WIDTH)}, fewer than {MIN_FIT_POINTS} points, or a time sweep not asymptotic yet); "
        f"every verdict has its reason in the tables below and in fits.csv. Fit ranges: time over "
        f"{RANGE_RULE_TEXT['time']}; FLOPs over {RANGE_RULE_TEXT['flops']}; memory over "
        f"{RANGE_RULE_TEXT['memory']}. Where a time fit is not consistent, the reason names what Table 1 "
        f"leaves out when the data shows it: a per-call cost above {_g(100 * PER_CALL_SHARE_THRESHOLD)} % of "
        f"the time, or element-wise work above {_g(100 * ELEMENTWISE_SHARE_THRESHOLD)} % of the FLOPs that "
        f"grows at another rate than the matrix products."
    )


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


def measurement_halfwidth(x, sigma_log, confidence: float = CONFIDENCE) -> float:
    """z·sqrt(Σ w_i²σ_i²), w_i the slope's OLS weights: the half-width from the points' own σ_i alone."""
    lx = np.log(np.asarray(x, float))
    centred = lx - lx.mean()
    weights = centred / (centred @ centred)
    return z_of(confidence) * float(np.sqrt(np.sum((weights * np.asarray(sigma_log, float)) ** 2)))


def power_law_fit(x, y, sigma_log=None, confidence: float = CONFIDENCE) -> PowerFit:
    """y ≈ C·x^e on (log x, log y); the t interval, widened in quadrature by the points' own σ where given."""
    lx, ly = np.log(np.asarray(x, float)), np.log(np.asarray(y, float))
    if len(lx) < 2 or np.ptp(lx) == 0:
        raise ValueError("a power-law fit needs at least two distinct x values")
    from scipy import stats  # noqa: PLC0415 - as bench.sweeps.z_of

    res = stats.linregress(lx, ly)
    m = len(lx)
    stderr = 0.0 if np.ptp(ly) == 0 else res.stderr  # a constant: linregress gives NaN, the slope is exactly 0
    h_reg = stats.t.ppf(0.5 + confidence / 2, m - 2) * stderr if m > 2 else math.nan
    h_meas = 0.0 if sigma_log is None else measurement_halfwidth(np.exp(lx), sigma_log, confidence)
    half = math.hypot(h_reg, h_meas) if not math.isnan(h_reg) else math.nan
    slope = float(res.slope)
    return PowerFit(
        slope, slope - half, slope + half, float(res.intercept), m, float(res.rvalue**2), float(h_reg), float(h_meas)
    )


def judge(ci_low: float, ci_high: float, predicted: float, tolerance: float) -> tuple[str, Reason, str]:
    if math.isnan(ci_low) or math.isnan(ci_high):
        return "inconclusive", Reason.NO_INTERVAL, "no interval (the fit gives none)"
    if math.isnan(predicted):
        return "inconclusive", Reason.NO_PREDICTION, "no cost stated to judge it against"
    width = ci_high - ci_low
    if width > MAX_VERDICT_WIDTH:
        return "inconclusive", Reason.TOO_WIDE, f"interval too wide (width {_g(width)} > {_g(MAX_VERDICT_WIDTH)})"
    low, high = predicted - tolerance, predicted + tolerance
    band = f"{_g(predicted)} ± {_g(tolerance)}"
    if low <= ci_low and ci_high <= high:
        return "consistent", Reason.DECIDED, f"interval within {band}"
    if ci_high < low or ci_low > high:
        return "inconsistent", Reason.DECIDED, f"interval outside {band}"
    return "inconclusive", Reason.STRADDLES, f"interval straddles the tolerance edge ({band})"


INTERFACE_COLUMNS = ("layer", "device", "metric", "variable", "exponent", "ci_low", "ci_high", "predicted", "verdict")
FIT_COLUMNS = [
    *INTERFACE_COLUMNS,
    *(
        "reason",
        "reason_code",
        "clock",
        "statistic",
        "complexity_class",
        "complexity_excluded",
        "explanation",
        "tolerance",
        "range_rule",
        "x_min",
        "x_max",
        "points",
        "sweep_x_min",
    ),
    *("sweep_x_max", "sweep_points", "unreliable_left_out", "measurement_uncertainty", "halfwidth_regression"),
    *("halfwidth_measurement", "plateau_size", "per_call_s", "per_call_share", "elementwise_share"),
    *("elementwise_exponent", "source", "run_id", "dtype", "mode", "batch", "fixed", "r2"),
]


def _measurement_sigma(data: pd.DataFrame) -> tuple[np.ndarray | None, str]:
    if not all(c in data for c in CI_COLUMNS):
        return None, "none stored"
    sigma = log_sigma_from_interval(data[CI_COLUMNS[0]], data[CI_COLUMNS[1]])
    stored = int(np.isfinite(sigma).sum())
    if stored == 0:
        return None, "none stored"
    text = f"per-point {_g(100 * policy.CONFIDENCE)} % intervals"
    if stored < len(sigma):
        text += f", stored for {stored} of {len(sigma)} points"
    return np.nan_to_num(sigma, nan=0.0), text


_NO_FIT = PowerFit(math.nan, math.nan, math.nan, math.nan, 0, math.nan, math.nan, math.nan)


def _row(fit: PowerFit, predicted: float, verdict: str, code: Reason, reason: str, uncertainty: str) -> dict:
    return dict(
        reason_code=code.value,
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


def _fit_row(metric: str, layer: str, data: pd.DataFrame, variable: str, column: str) -> dict:
    sigma, uncertainty = _measurement_sigma(data) if metric == "time" else (None, "exact")
    fit = power_law_fit(data[variable], data[column], sigma_log=sigma)
    predicted = predicted_exponent(metric, layer, data, variable)
    row = _row(fit, predicted, *judge(fit.ci_low, fit.ci_high, predicted, TOLERANCE[metric]), uncertainty)
    return row | complexity(data[variable], data[column], fit.ci_low, fit.ci_high, variable)


def _no_fit(metric: str, layer: str, sweep: pd.DataFrame, variable: str, code: Reason, reason: str) -> dict:
    predicted = predicted_exponent(metric, layer, sweep, variable) if sweep[variable].nunique() >= 2 else math.nan
    uncertainty = "exact" if metric != "time" else _measurement_sigma(sweep)[1]
    return _row(_NO_FIT, predicted, "inconclusive", code, reason, uncertainty)


def _fitted_range(data: pd.DataFrame, variable: str) -> dict:
    x = data[variable]
    return dict(x_min=x.min() if len(data) else math.nan, x_max=x.max() if len(data) else math.nan, points=len(data))


def _unusable_text(points: pd.DataFrame, column: str, what: str) -> str:
    count = int((~(points[column].notna() & (points[column] > 0))).sum())
    return f"; {count} point{'s' if count != 1 else ''} without a positive {what} left out" if count else ""


def time_row(layer: str, sweep: pd.DataFrame, variable: str) -> dict:
    return time_row_and_range(layer, sweep, variable)[0]


def time_row_and_range(layer: str, sweep: pd.DataFrame, variable: str) -> tuple[dict, TimeRange]:
    tr = time_fit_range(sweep, variable, layer)
    if tr.code is not None:
        row = _no_fit(
            "time", layer, tr.sweep if len(tr.sweep) else clocks.on_clock(sweep), variable, tr.code, tr.reason
        )
    else:
        row = _fit_row("time", layer, tr.data, variable, "time_s")
    if tr.left_out:
        row["reason"] += (
            f"; {tr.left_out} unreliable point{'s' if tr.left_out != 1 else ''} left out, {len(tr.sweep)} left"
        )
    if tr.untrusted_medians:
        row["reason"] += (
            f"; on each point's fastest round (medians not to be trusted: {tr.untrusted_medians} of {len(sweep)}, "
            "their rounds slowed by other programs or the host)"
        )
    row["reason"] += _unusable_text(clocks.on_clock(sweep, tr.clock), "time_s", f"time on the {tr.clock} clock")
    row["explanation"] = ""
    if row["verdict"] != "consistent" and len(tr.sweep) >= MIN_FIT_POINTS:
        row["explanation"], numbers = time_explanation(tr, variable)
        row.update(numbers)
        if row["explanation"]:
            row["reason"] += f"; {row['explanation']}"
    row.update(clock=tr.clock, statistic=tr.statistic, range_rule=tr.rule, unreliable_left_out=tr.left_out)
    row.update(plateau_size=tr.plateau_size)
    return row | _fitted_range(tr.data, variable), tr


def _fixed_row(metric: str, layer: str, sweep: pd.DataFrame, variable: str) -> dict:
    column = metric_column(metric, mode_of_sweep(sweep))
    fit_range = asymptotic_range(sweep, variable, layer)
    data = fit_range[fit_range[column].notna() & (fit_range[column] > 0)]
    uncounted = _uncounted_ops(fit_range) if metric == "flops" else ""
    if uncounted:
        reason = f"operators the FLOP counter does not know ran, their FLOPs not counted: {uncounted}"
        row = _no_fit(metric, layer, sweep, variable, Reason.UNCOUNTED, reason)
    elif len(data) < MIN_FIT_POINTS:
        reason = f"too few points ({len(data)} < {MIN_FIT_POINTS})"
        row = _no_fit(metric, layer, sweep, variable, Reason.TOO_FEW_POINTS, reason)
    else:
        row = _fit_row(metric, layer, data, variable, column)
    row["reason"] += "" if uncounted else _unusable_text(fit_range, column, column)
    row.update(explanation="", range_rule="fixed", unreliable_left_out=0)
    return row | _fitted_range(data, variable)


def _uncounted_ops(points: pd.DataFrame) -> str:
    if "flops_uncounted_ops" not in points:
        return ""
    ops = {op for text in points["flops_uncounted_ops"].dropna().astype(str) for op in text.split(";") if op}
    return ", ".join(sorted(ops))


def fit_table(points: pd.DataFrame) -> pd.DataFrame:
    """One row per sweep and metric; "not asymptotic yet" quotes rates as % of peak where there are PEAK_COLUMNS."""
    rows = []
    for variable, fixed, sweep in all_sweeps(points):
        layer = fixed["layer"]
        sweep = sweep.sort_values(variable)
        for metric in METRIC_COLUMN:
            if metric == "time":
                row = time_row(layer, sweep, variable)
            else:
                row = _fixed_row(metric, layer, sweep, variable)
            row.update(
                layer=layer,
                device=fixed["device"],
                metric=metric,
                variable=variable,
                tolerance=TOLERANCE[metric],
                source=fixed.get("source", fixed["device"]),
                run_id=newest_run_of(sweep),
                dtype=fixed["dtype"],
                mode=fixed["mode"],
                batch=fixed["batch"],
                fixed=fixed_text(fixed),
                sweep_x_min=sweep[variable].min(),
                sweep_x_max=sweep[variable].max(),
                sweep_points=len(sweep),
            )
            row["reason"] += runs_text(sweep) + extended_text(sweep, variable)
            rows.append(row)
    return pd.DataFrame(rows, columns=FIT_COLUMNS)


RUN_STARTED = "run_started_utc"


def _runs_oldest_first(sweep: pd.DataFrame) -> list[str]:
    if "run_id" not in sweep:
        return []
    if RUN_STARTED not in sweep:
        return list(dict.fromkeys(sweep["run_id"]))
    return sorted(set(sweep["run_id"]), key=lambda r: (sweep.loc[sweep["run_id"] == r, RUN_STARTED].iloc[0], r))


def newest_run_of(sweep: pd.DataFrame) -> str:
    """A fit's run: the newest run among its sweep's points (its last point's where age is unknown)."""
    if RUN_STARTED not in sweep:
        return sweep["run_id"].iloc[-1] if "run_id" in sweep else ""
    return _runs_oldest_first(sweep)[-1]


def runs_text(sweep: pd.DataFrame) -> str:
    runs = _runs_oldest_first(sweep)
    if len(runs) < 2:
        return ""
    counts = sweep["run_id"].value_counts()
    return f"; points of {len(runs)} runs: " + ", ".join(f"{r} ({counts[r]})" for r in runs)


def extended_text(sweep: pd.DataFrame, variable: str) -> str:
    added = sweep[flag_of(sweep, "extended")]
    if not len(added):
        return ""
    count = f"{len(added)} point{'s' if len(added) != 1 else ''}"
    if added[variable].max() < sweep[variable].max():
        return f"; {count} added within {variable} = {int(added[variable].min()):,}–{int(added[variable].max()):,}"
    return f"; extended to {variable} = {int(added[variable].max()):,} ({count} beyond the plan)"


def two_term_fit(points: pd.DataFrame) -> tuple[float, float, float, float]:
    """(c, a, b, rms relative error): attention's `time_s` ≈ c + a·n·d² + b·n²·d, non-negative least squares."""
    n, d, t = (points[c].to_numpy(float) for c in ("n", "d", "time_s"))
    basis = np.column_stack([np.ones_like(n), n * d**2, n**2 * d]) / t[:, None]
    from scipy import optimize  # noqa: PLC0415 - as bench.sweeps.z_of

    coef, _ = optimize.nnls(basis, np.ones_like(t))
    rel = basis @ coef - 1
    return float(coef[0]), float(coef[1]), float(coef[2]), float(np.sqrt(np.mean(rel**2)))


def crossover_n(ns, time_a, time_b) -> float | None:
    """n where series a overtakes b, log-log interpolated; None if a stays below b, or is above from the start."""
    ns, ratio = np.asarray(ns, float), np.log(np.asarray(time_a, float) / np.asarray(time_b, float))
    for i in range(len(ns)):
        if ratio[i] >= 0:
            if i == 0:
                return float(ns[0]) if ratio[0] == 0 else None
            frac = -ratio[i - 1] / (ratio[i] - ratio[i - 1])
            return float(np.exp(np.log(ns[i - 1]) + frac * (np.log(ns[i]) - np.log(ns[i - 1]))))
    return None


def time_crossing(a: pd.DataFrame, b: pd.DataFrame, min_points: int = 2):
    """(n* by time, the lengths both time reliably, the clock, a and b on it) of two layers' points indexed by n."""
    common = sorted(set(a.index) & set(b.index))
    on = clocks.group_clock(pd.concat([a.loc[common], b.loc[common]]))
    a_t, b_t = clocks.on_clock(a.loc[common], on), clocks.on_clock(b.loc[common], on)
    timed = [n for n in common if a_t.loc[n, "time_ok"] and b_t.loc[n, "time_ok"]]
    enough = len(timed) >= min_points
    return (
        (crossover_n(timed, a_t.loc[timed, "time_s"], b_t.loc[timed, "time_s"]) if enough else None),
        timed,
        on,
        a_t,
        b_t,
    )


CLOSED_FORM_MAX_N = 2**40  # the search for a closed-form crossover stops here: "no crossover"


def closed_form_crossover_n(
    layer_a: str, layer_b: str, batch: int, cfg: models.LayerConfig, mode: str = DEFAULT_MODE
) -> int | None:
    """The first n where a's FLOP formula in `mode` reaches b's (None: not by CLOSED_FORM_MAX_N), by bisection."""

    def a_reaches_b(n: int) -> bool:
        return models.analytic_flops(layer_a, batch, n, cfg, mode) >= models.analytic_flops(
            layer_b, batch, n, cfg, mode
        )

    low = 0 if mode == DECODE_MODE else 1
    if a_reaches_b(low):
        return low
    high = max(1, 2 * low)
    while not a_reaches_b(high):
        if high >= CLOSED_FORM_MAX_N:
            return None
        low, high = high, high * 2
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if a_reaches_b(mid) else (mid, high)
    return high
