"""Sweeps: points differing in one size only, what Table 1 predicts over them, the range a fit uses (docs/method.md)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from enum import StrEnum
from statistics import NormalDist

import numpy as np
import pandas as pd

import models

from . import clock as clocks
from . import policy
from .spec import (
    DECODE_MODE,
    DECODE_MODES,
    DEFAULT_MODE,
    LAYER_SIZES,
    RECOMPUTE_MODE,
    SIZES,
    SWEPT_STACK_LAYER,
    WHERE,
    PointSpec,
    mode_of,
)

VARIABLES = ("n", "d", "k")
MIN_FIT_POINTS = 3
METRIC_COLUMN = {"flops": "flops_counted", "time": "time_median_s", "memory": "mem_peak_bytes"}
TOLERANCE = {"flops": 0.15, "time": 0.2, "memory": 0.35}  # the band around a prediction, and Table 1's regime
PLATEAU_FRACTION, ASYMPTOTIC_POINTS = 0.8, 4  # a time fit needs 4 points from its plateau on (3 let a drift decide)
PER_CALL_SHARE_THRESHOLD = 0.2  # a per-call cost above this share of the time explains a time exponent
ELEMENTWISE_SHARE_THRESHOLD = 0.05  # element-wise work above this share of all FLOPs may set the time
PEAK_COLUMNS = {policy.WALL: "peak_flops_per_s", policy.CPU: "peak_cpu_flops_per_s"}
SWEEP_KEYS = ["layer", *WHERE, "batch", *(s for s in SIZES if s != "batch")]
FIXED_SIZES = tuple(s for s in SIZES if s != "batch")  # what fits.csv's `fixed` names; batch has its own column


def sweep_of(spec: PointSpec, variable: str) -> tuple:
    return variable, replace(spec, **{variable: 0})


def by_sweep(specs: Iterable[PointSpec]) -> dict[tuple, list[PointSpec]]:
    """Points, in their order, by each sweep they belong to: sweep_of(point, variable), a variable they have."""
    out: dict[tuple, list[PointSpec]] = {}
    for spec in specs:
        for variable in VARIABLES:
            if getattr(spec, variable) is not None:
                out.setdefault(sweep_of(spec, variable), []).append(spec)
    return out


class Reason(StrEnum):
    """fits.csv's `reason_code`: code reads these, never a reason's words."""

    DECIDED = "decided"
    TOO_FEW_POINTS = "too_few_points"
    NOT_ASYMPTOTIC = "not_asymptotic"
    FLOPS_TERM = "flops_term_not_dominant"
    TOO_WIDE = "interval_too_wide"
    STRADDLES = "straddles_band"
    NO_INTERVAL = "no_interval"
    NO_PREDICTION = "no_prediction"
    UNCOUNTED = "uncounted_operators"


def _g(value: float) -> str:
    return f"{value:.3g}"


def _pct(fraction: float) -> str:
    value = 100 * fraction
    return f"{value:.0f}" if value >= 10 else f"{value:.2g}"


def _dilation_beside_k(points: pd.DataFrame) -> pd.Series:
    def given_by_k(layer, k) -> float:
        cls = models.LAYERS.get(layer)
        if cls is None or "dilation" not in cls.uses or pd.isna(k):
            return math.nan
        return cls.path.stack_dilation(SWEPT_STACK_LAYER, int(k))

    pairs = list(zip(points["layer"], points["k"]))
    known = {pair: given_by_k(*pair) for pair in set(pairs)}
    return points["dilation"].where(points["dilation"].ne([known[pair] for pair in pairs]))


def sweep_keys(points: pd.DataFrame) -> pd.DataFrame:
    """Per point, what a sweep holds fixed: SWEEP_KEYS, any `source`, a dilation only where not k's (NaN: k's)."""
    keys = (["source"] if "source" in points else []) + SWEEP_KEYS
    missing = {c: np.nan for c in (*LAYER_SIZES, "mode", "causal") if c not in points}
    frame = points.assign(**missing)
    return frame.assign(dilation=_dilation_beside_k(frame))[keys]


def sweeps(points: pd.DataFrame, variable: str):
    """(fixed sizes, points) of each group of ok points that differ only in `variable`, over at least 2 values."""
    for _, fixed, group in all_sweeps(points, (variable,)):
        yield fixed, group


def all_sweeps(points: pd.DataFrame, variables=VARIABLES):
    """(variable, fixed, points) of `sweeps` of each variable (a point measured again: its last), in groupby's order."""
    if "mode" not in points:
        points = points.assign(mode=mode_of(points))
    ok = points[points["status"] == "ok"]
    keys = sweep_keys(ok)
    columns = {c: [None if pd.isna(v) else v for v in keys[c].tolist()] for c in keys}
    for variable in variables:
        fixed = [c for c in keys if c != variable]
        groups: dict[tuple, list[int]] = {}
        for row, key in enumerate(zip(*(columns[c] for c in fixed))):
            groups.setdefault(key, []).append(row)
        for key in sorted(groups, key=_nan_last):
            rows = groups[key]
            values = {columns[variable][row] for row in rows}
            if len(values) >= 2 and None not in values:
                group = ok.iloc[rows].drop_duplicates(variable, keep="last")
                yield variable, dict(zip(fixed, keys.iloc[rows[0]][fixed])), group


def _nan_last(key: tuple) -> tuple:
    return tuple((v is None, "" if v is None else v) for v in key)


def fixed_text(fixed: dict) -> str:
    """The sizes a sweep holds fixed, as fits.csv's `fixed` column says them: `d=32, heads=4`."""
    return ", ".join(f"{s}={int(fixed[s])}" for s in FIXED_SIZES if s in fixed and not pd.isna(fixed[s]))


def _require_sizes(layer: str, points: pd.DataFrame, sizes) -> None:
    for size in sizes:
        if size not in points or points[size].isna().any():
            raise ValueError(
                f"{layer}: size {size!r} missing (needed by its formula); a {layer} point must store {size}"
            )


def table1_cost(layer: str, n, d, k=None, window=None) -> np.ndarray:
    return models.LAYERS[layer].table1.cost(n, d, k, window)


UNSTATED = {"compute_text": "no cost stated", "sequential_text": "not stated", "path_text": "measured"}


def table1_cell(layer: str, cell: str = "compute_text") -> str:
    row = predicted_row(layer, DEFAULT_MODE) if cell == "compute_text" else models.LAYERS[layer].table1
    return UNSTATED[cell] if row is None else getattr(row, cell)


def mode_of_sweep(sweep: pd.DataFrame) -> str:
    mode = sweep["mode"].iat[0] if len(sweep) and "mode" in sweep else None
    return mode if isinstance(mode, str) and mode else DEFAULT_MODE


def predicted_row(layer: str, mode: str):
    """What a sweep in `mode` is judged against: the decode row for a decode step, else Table 1's (recompute: at n+1)."""
    cls = models.LAYERS[layer]
    if mode == DECODE_MODE:
        return getattr(cls, "decode", None)
    return cls.table1 if cls.table1 is not None else getattr(cls, "expected", None)  # an outside layer's stated cost


def predicted_text(layer: str, mode: str, metric: str) -> str:
    if metric == "memory":
        return "the state" if mode in DECODE_MODES else "activation estimate"
    row = predicted_row(layer, mode)
    return table1_cell(layer) if mode != DECODE_MODE or row is None else row.compute_text


def metric_column(metric: str, mode: str) -> str:
    return "mem_state_bytes" if metric == "memory" and mode in DECODE_MODES else METRIC_COLUMN[metric]


def row_config(row) -> models.LayerConfig:
    return models.LayerConfig.of(row.d, row.dtype, **{s: getattr(row, s, None) for s in LAYER_SIZES})


def predicted_exponent(metric: str, layer: str, sweep: pd.DataFrame, variable: str) -> float:
    """Slope of Table 1's row (FLOPs, time) or of the activation estimate (memory) over the sweep's x."""
    return loglog_slope(sweep[variable].to_numpy(float), predicted_values(metric, layer, sweep))


def predicted_values(metric: str, layer: str, sweep: pd.DataFrame) -> np.ndarray:
    mode = mode_of_sweep(sweep)
    if metric == "memory":
        _require_sizes(layer, sweep, models.LAYERS[layer].uses)
        return np.asarray([_predicted_bytes(layer, mode, r) for r in sweep.itertuples()], float)
    row = predicted_row(layer, mode)
    if row is not None:
        _require_sizes(layer, sweep, row.sizes)
    return predicted_cost(layer, mode, sweep["n"], sweep["d"], sweep.get("k"), sweep.get("window"))


def predicted_cost(layer: str, mode: str, n, d, k=None, window=None) -> np.ndarray:
    row = predicted_row(layer, mode)
    if row is None:
        return np.full(len(n), np.nan)
    return np.asarray(row.cost(n + 1 if mode == RECOMPUTE_MODE else n, d, k, window), float)


def _predicted_bytes(layer: str, mode: str, r) -> int:
    batch, n, cfg = int(r.batch), int(r.n), row_config(r)
    if mode == DECODE_MODE:
        return models.analytic_decode_state_bytes(layer, batch, n, cfg)
    if mode in DECODE_MODES:
        return batch * n * cfg.d * cfg.elem_bytes
    return models.analytic_activation_bytes(layer, batch, n, cfg)


def loglog_slope(x, y) -> float:
    lx, ly = np.log(np.asarray(x, float)), np.log(np.asarray(y, float))
    centred = lx - lx.mean()
    return float(centred @ (ly - ly.mean()) / (centred @ centred))


def asymptotic_range(sweep: pd.DataFrame, variable: str, layer: str) -> pd.DataFrame:
    """The points of one sweep that the fixed rule of FLOPs and memory keeps, sorted by the variable."""
    sweep = sweep.sort_values(variable)
    mode = mode_of_sweep(sweep)
    row = predicted_row(layer, mode)
    n_over_d = getattr(row, "fit_t_over_d" if mode == DECODE_MODE else "fit_n_over_d", None)
    if n_over_d is not None:
        return sweep[sweep["n"] >= n_over_d * sweep["d"]]
    upper = sweep[sweep[variable] >= sweep[variable].median()]
    if len(upper) < MIN_FIT_POINTS:
        upper = sweep.tail(MIN_FIT_POINTS)
    return upper


def table1_regime_start(sweep: pd.DataFrame, variable: str, layer: str) -> int | None:
    """Start of the last ≥ MIN_FIT_POINTS points with local FLOP exponents within TOLERANCE["flops"] of Table 1's."""
    x, flops = sweep[variable].to_numpy(float), sweep["flops_counted"].to_numpy(float)
    return regime_start(x, flops, predicted_values("flops", layer, sweep))


def regime_start(x, flops, predicted) -> int | None:
    if np.isnan(predicted).all():
        return 0 if len(x) >= MIN_FIT_POINTS else None
    lx = np.log(np.asarray(x, float))
    local = np.diff(np.log(np.asarray(flops, float))) / np.diff(lx)
    within = np.abs(local - np.diff(np.log(predicted)) / np.diff(lx)) <= TOLERANCE["flops"]
    start = len(within)
    while start > 0 and within[start - 1]:
        start -= 1
    return start if len(lx) - start >= MIN_FIT_POINTS else None


def plateau_start(rates) -> int:
    """The settled end (≥ MIN_FIT_POINTS last rates within PLATEAU_FRACTION of their best), else the best's start."""
    rates = np.asarray(rates, float)
    start, best, worst = len(rates) - 1, rates[-1], rates[-1]
    while start > 0 and min(worst, rates[start - 1]) >= PLATEAU_FRACTION * max(best, rates[start - 1]):
        start -= 1
        best, worst = max(best, rates[start]), min(worst, rates[start])
    if len(rates) - start >= MIN_FIT_POINTS:
        return start
    return int(np.argmax(rates >= PLATEAU_FRACTION * rates.max()))


def z_of(confidence: float) -> float:
    return NormalDist().inv_cdf(0.5 + confidence / 2)


def log_sigma_from_interval(ci_low, ci_high, confidence: float = policy.CONFIDENCE) -> np.ndarray:
    """σ of a log median implied by its interval: (log high − log low) / (2·z); NaN where there is none."""
    low, high = np.asarray(ci_low, float), np.asarray(ci_high, float)
    with np.errstate(invalid="ignore", divide="ignore"):
        sigma = (np.log(high) - np.log(low)) / (2 * z_of(confidence))
    return np.where((low > 0) & (high >= low), sigma, np.nan)


def settled_start(sweep: pd.DataFrame, variable: str, start: int, confidence: float = policy.CONFIDENCE) -> int:
    """start, past each leading point off the power law of the points after it (outside its prediction interval)."""
    from scipy import stats  # noqa: PLC0415 - at import, every `python -m bench` would pay half a second

    lx, ly = np.log(sweep[variable].to_numpy(float)), np.log(sweep["time_s"].to_numpy(float))
    sigma = log_sigma_from_interval(sweep["time_s_ci_low"], sweep["time_s_ci_high"], confidence)
    while len(lx) - start > ASYMPTOTIC_POINTS:
        rest_x, rest_y = lx[start + 1 :], ly[start + 1 :]
        fit, m = stats.linregress(rest_x, rest_y), len(rest_x)
        scatter = np.sqrt(np.sum((rest_y - fit.intercept - fit.slope * rest_x) ** 2) / (m - 2))
        spread = np.sum((rest_x - rest_x.mean()) ** 2)
        leverage = 1 + 1 / m + (lx[start] - rest_x.mean()) ** 2 / spread
        error = math.hypot(scatter * math.sqrt(leverage), np.nan_to_num(sigma[start]))
        off = abs(ly[start] - fit.intercept - fit.slope * lx[start])
        if off <= stats.t.ppf(0.5 + confidence / 2, m - 2) * error:
            break
        start += 1
    return start


@dataclass(frozen=True)
class OverheadFit:
    per_call_s: float
    rate_flops_per_s: float

    def flops_to_plateau(self, fraction: float = PLATEAU_FRACTION) -> float:
        """The FLOPs from which the rate f/(c + f/R) is at least fraction·R: f = c·R·fraction/(1 − fraction)."""
        return self.per_call_s * self.rate_flops_per_s * fraction / (1 - fraction)


def overhead_fit(flops, time_s) -> OverheadFit:
    """t = c + f/R by non-negative least squares on relative error (rows scaled by 1/t), as two_term_fit."""
    f, t = np.asarray(flops, float), np.asarray(time_s, float)
    basis = np.column_stack([np.ones_like(f), f]) / t[:, None]
    from scipy import optimize  # noqa: PLC0415 - as settled_start

    (c, inverse_rate), _ = optimize.nnls(basis, np.ones_like(t))
    return OverheadFit(float(c), math.inf if inverse_rate == 0 else float(1 / inverse_rate))


def size_for_flops(x, flops, target_flops: float) -> float:
    """The size whose FLOPs reach target_flops, by the last two points' local exponent (NaN: no growth)."""
    x, f = np.asarray(x, float), np.asarray(flops, float)
    exponent = math.log(f[-1] / f[-2]) / math.log(x[-1] / x[-2])
    if not exponent > 0 or not math.isfinite(target_flops):
        return math.nan
    return float(x[-1] * (target_flops / f[-1]) ** (1 / exponent))


def useful_flops(points: pd.DataFrame) -> pd.Series:
    """`flops_useful` where the layer states it (work a kernel skips left out), else `flops_counted`."""
    if "flops_useful" not in points:
        return points["flops_counted"]
    return points["flops_useful"].where(points["flops_useful"].notna(), points["flops_counted"])


@dataclass(frozen=True)
class TimeRange:
    data: pd.DataFrame  # the points to fit (may be fewer than MIN_FIT_POINTS), their time on `clock` in time_s
    sweep: pd.DataFrame  # its reliable points with a time, sorted
    rule: str
    left_out: int
    reason: str  # "" when there is a fit
    code: Reason | None
    overhead: OverheadFit | None
    plateau_size: float  # where "not asymptotic yet": the size that would reach the plateau
    clock: str = policy.WALL
    statistic: str = clocks.MEDIAN
    untrusted_medians: int = 0


def time_fit_range(sweep: pd.DataFrame, variable: str, layer: str) -> TimeRange:
    """The measured asymptotic range of one time sweep, on one clock for all its points."""
    sweep = clocks.for_fit(sweep.sort_values(variable))
    on = sweep["clock"].iloc[0] if len(sweep) else policy.WALL
    statistic = sweep["statistic"].iloc[0] if len(sweep) else clocks.MEDIAN
    untrusted = int((~clocks.reliable_on(sweep, on)).sum()) if statistic == clocks.MIN else 0
    timed = sweep[sweep["time_s"].notna() & (sweep["time_s"] > 0)]
    keep = timed["time_ok"].astype(bool)
    reliable = timed[keep]
    left_out = int((~keep).sum())

    def result(data, rule, reason, overhead=None, size=math.nan, code=Reason.TOO_FEW_POINTS) -> TimeRange:
        code = code if reason else None
        return TimeRange(data, reliable, rule, left_out, reason, code, overhead, size, on, statistic, untrusted)

    if len(reliable) < MIN_FIT_POINTS:
        return result(reliable, "plateau", f"too few points ({len(reliable)} < {MIN_FIT_POINTS})")
    flops, t = reliable["flops_counted"].to_numpy(float), reliable["time_s"].to_numpy(float)
    if not (np.isfinite(flops).all() and (flops > 0).all()):
        data = asymptotic_range(reliable, variable, layer)
        reason = f"too few points ({len(data)} < {MIN_FIT_POINTS})" if len(data) < MIN_FIT_POINTS else ""
        return result(data, "fixed (no FLOP counts)", reason)
    rates = flops / t
    overhead = overhead_fit(flops, t)
    regime = table1_regime_start(reliable, variable, layer)
    if regime is None:
        exponent = loglog_slope(reliable[variable], flops)
        predicted = predicted_exponent("flops", layer, reliable, variable)
        row = "the decode row" if mode_of_sweep(reliable) == DECODE_MODE else "Table 1"
        reason = (
            f"{row}'s term does not set the counted FLOPs here (their exponent {exponent:.2f} "
            f"against {predicted:.2f} over {variable} = {int(reliable[variable].iloc[0])}–"
            f"{int(reliable[variable].iloc[-1])}), so time cannot test it"
        )
        return result(reliable.iloc[0:0], "plateau", reason, overhead, code=Reason.FLOPS_TERM)
    data = reliable.iloc[settled_start(reliable, variable, max(plateau_start(rates), regime)) :]
    if len(data) >= ASYMPTOTIC_POINTS:
        return result(data, "plateau", "", overhead)
    peak_column = PEAK_COLUMNS.get(on, PEAK_COLUMNS[policy.WALL])  # a GPU's ceilings are timed synchronised
    peak = reliable[peak_column].to_numpy(float) if peak_column in reliable else np.full(len(rates), np.nan)
    if np.isfinite(peak).all():
        shares, of = useful_flops(reliable).to_numpy(float) / t / peak, "peak"
    else:
        shares, of = rates / rates.max(), "the sweep's best"
    target = overhead.flops_to_plateau()
    size = size_for_flops(reliable[variable], flops, target) if target > flops[-1] else math.nan
    if math.isfinite(size):
        reach = f"{variable} ≥ {math.ceil(round(size, 6))} would reach the plateau"  # round: float noise
    elif rates[-1] < PLATEAU_FRACTION * rates.max():
        reach = (
            "the rate falls as the data outgrows a cache, so no size is predicted: larger ones find where it settles"
        )
    elif target <= flops[-1]:
        reach = "the rate rises more than a per-call cost explains (t = c + f/R), so no size is predicted"
    else:
        reach = "t = c + f/R gives no size that reaches the plateau"
    reason = f"not asymptotic yet ({_pct(shares[0])} % → {_pct(shares[-1])} % of {of}; {reach})"
    return result(data, "plateau", reason, overhead, size, Reason.NOT_ASYMPTOTIC)


def time_explanation(tr: TimeRange, variable: str) -> tuple[str, dict]:
    """(text, numbers) of what Table 1 leaves out that the data shows to matter: a per-call cost, element-wise work."""
    data = tr.sweep if tr.code is not None or tr.data[variable].nunique() < 2 else tr.data
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
            elem_exp = loglog_slope(x, elem)
            matmul_exp = loglog_slope(x, matmul)
            numbers.update(elementwise_share=float(shares.max()), elementwise_exponent=elem_exp)
            if shares.max() > ELEMENTWISE_SHARE_THRESHOLD and abs(elem_exp - matmul_exp) > TOLERANCE["time"]:
                out.append(
                    f"element-wise work (softmax, gates; not in Table 1) is {_pct(shares[0])} % → "
                    f"{_pct(shares[-1])} % of the FLOPs over {variable} = {int(x[0])}–{int(x[-1])} and grows "
                    f"as {variable}^{elem_exp:.2f}, the matrix products as {variable}^{matmul_exp:.2f}"
                )
    return "; ".join(out), numbers
