"""More points for every sweep whose time fit cannot decide yet, within a stated budget (docs/method.md)."""

from __future__ import annotations

import functools
import itertools
import math
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from . import clock as clocks
from . import estimate, formats
from .errors import BadInput
from .fits import time_row
from .policy import EXTEND_MEMORY_SHARE, WALL
from .preflight import device_memory, format_duration, sizes_text
from .spec import WHERE, PointSpec, device_key, validate
from .sweeps import (
    MIN_FIT_POINTS,
    PER_CALL_SHARE_THRESHOLD,
    PLATEAU_FRACTION,
    TOLERANCE,
    VARIABLES,
    predicted_exponent,
    short_reason,
    sweeps,
    table1_regime_start,
)

MAX_ROUNDS = 12
NEW_PER_ROUND = 2
MIN_RATIO, MAX_RATIO = math.sqrt(2), 2.0
STEP_COST_RATIO = 3.0  # past the end, a size costing over this times the one before waits: this round may settle it
FLOPS_TERM = "does not set the counted FLOPs"
ANSWERABLE = ("not asymptotic yet", "too few points", "straddles", "too wide", FLOPS_TERM)
NARROWABLE = ("straddles", "too wide")


@dataclass(frozen=True)
class Proposal:
    """A sweep's next points or why it stops; `whole`: all or none; `instead`: points to take if none of these fits."""

    sweep: str
    variable: str
    reason: str
    specs: tuple[PointSpec, ...]
    costs_s: tuple[float, ...]
    stopped: str = ""
    whole: bool = False
    instead: Proposal | None = None
    decided_elsewhere: bool = False

    def affordable(self, left_s: float) -> int:
        if self.whole:
            return len(self.specs) if sum(self.costs_s) <= left_s else 0
        spent = itertools.accumulate(self.costs_s)
        return sum(1 for s in spent if s <= left_s)


def answerable(row: Mapping) -> bool:
    return row["verdict"] == "inconclusive" and any(words in row["reason"] for words in ANSWERABLE)


def ladder(x: np.ndarray, target: float) -> list[float]:
    """Sizes past x's end: to `target` (a plateau) in at most two steps, then NEW_PER_ROUND at the sweep's own step."""
    end, step = float(x[-1]), _step(x)
    sizes = []
    if math.isfinite(target) and target > end * step:
        jumps = min(2, math.ceil(math.log(target / end) / math.log(step)))
        sizes = [end * (target / end) ** (i / jumps) for i in range(1, jumps + 1)]
    last = sizes[-1] if sizes else end
    return sizes + [last * step**i for i in range(1, NEW_PER_ROUND + 1)]


def _step(x: np.ndarray) -> float:
    return min(max(float(x[-1] / x[-2]), MIN_RATIO), MAX_RATIO)


def rate_still_moving(sweep: pd.DataFrame, variable: str, low: float, high: float) -> bool:
    """Whether the last 3 rates in [low, high] move one way past the plateau's band (a cache's edge), not noise."""
    sweep = clocks.on_clock(sweep)
    inside = sweep[(sweep[variable] >= low) & (sweep[variable] <= high)].sort_values(variable)
    rate = (inside["flops_counted"] / inside["time_s"]).to_numpy(float)[-3:]
    steps = np.sign(np.diff(rate))
    return len(rate) == 3 and abs(steps.sum()) == 2 and rate.min() < PLATEAU_FRACTION * rate.max()


def midpoints(end: PointSpec, variable: str, x: np.ndarray, low: float, high: float) -> list[float]:
    """The cheapest NEW_PER_ROUND new sizes between neighbours in [low, high]: as much narrowing for less time."""
    inside = x[(x >= low) & (x <= high)]
    mids = [sized(end, variable, math.sqrt(a * b)) for a, b in zip(inside[:-1], inside[1:])]
    sizes = [getattr(m, variable) for m in mids if m is not None]
    return [m for m, a, b in zip(sizes, inside[:-1], inside[1:]) if a < m < b][:NEW_PER_ROUND]


def sized(spec: PointSpec, variable: str, value: float) -> PointSpec | None:
    """spec at `value`, rounded to a size the layer takes and kernels suit (docs/method.md); None if none."""
    size = max(1, round(value))
    if variable != "k" and size >= 8:
        step = 2 ** (math.floor(math.log2(size)) - 2)
        size = round(size / step) * step
    if variable == "d" and spec.heads:
        size = -(-size // spec.heads) * spec.heads
    if variable == "k":
        size |= 1
    try:
        return validate(replace(spec, **{variable: size}))
    except BadInput:
        return None


def flops_regime_start(end: PointSpec, variable: str, step: float) -> float:
    """The size past end from which analytic FLOPs grow by `step`s as Table 1's term says; nan if none by 2^20·end."""
    x = float(getattr(end, variable))
    while x < getattr(end, variable) * 2**20:
        a, b = sized(end, variable, x), sized(end, variable, x * step)
        if a is None or b is None:
            return math.nan
        pair = pd.DataFrame([a.as_row(), b.as_row()])
        local = math.log(estimate.analytic_flops(b) / estimate.analytic_flops(a)) / math.log(step)
        if abs(local - predicted_exponent("flops", end.layer, pair, variable)) <= TOLERANCE["flops"]:
            return x
        x *= step
    return math.nan


def regime_prefix(sweep: pd.DataFrame, end: PointSpec, variable: str, sizes: list[float]) -> int | None:
    """How many of `sizes` put MIN_FIT_POINTS of the sweep's FLOPs in Table 1's regime (sweeps.table1_regime_start)."""
    rows = sweep
    for taken, value in enumerate(sizes, 1):
        spec = sized(end, variable, value)
        if spec is None:
            return None
        rows = pd.concat([rows, pd.DataFrame([spec.as_row() | {"flops_counted": estimate.analytic_flops(spec)}])])
        if table1_regime_start(rows, variable, end.layer) is not None:
            return taken
    return None


def _growth(sweep: pd.DataFrame, variable: str, visits_s: list[float]) -> float:
    """The steepest of the last step's local exponents of counted FLOPs, time and visits: how a visit's cost grows."""
    sweep = clocks.on_clock(sweep)
    x = sweep[variable].to_numpy(float)
    out, nothing = 0.0, np.full(len(x), np.nan)
    for y in (*(sweep[c].to_numpy(float) if c in sweep else nothing for c in ("flops_counted", "time_s")), visits_s):
        y = np.asarray(y, float)
        if len(x) >= 2 and np.isfinite(y[-2:]).all() and (y[-2:] > 0).all():
            out = max(out, math.log(y[-1] / y[-2]) / math.log(x[-1] / x[-2]))
    return out


def _sweep_words(spec: PointSpec, variable: str) -> str:
    dtype = "" if spec.dtype == "float32" else f" {spec.dtype}"
    return f"{spec.layer} against {variable} ({sizes_text(spec, variable)}, {spec.mode} on {spec.device}{dtype})"


def propose(
    points: pd.DataFrame,
    specs: Mapping[str, PointSpec],
    visit_s: Callable[[str], float],
    memory_limits: Mapping[str, float],
    fit: Callable[[str, pd.DataFrame, str], dict] = time_row,
) -> list[Proposal]:
    """Each undecided time sweep of a run's `points` and its next points (`visit_s`: a stored point's seconds)."""
    fitted = []
    for variable in VARIABLES:
        for fixed, sweep in sweeps(points, variable):
            sweep = sweep.sort_values(variable)
            key = (fixed["layer"], *(fixed.get(k) for k in WHERE), variable)
            fitted.append((variable, key, sweep, fit(fixed["layer"], sweep, variable)))
    decided = {key for _, key, _, row in fitted if row["verdict"] != "inconclusive"}
    proposals = []
    for variable, key, sweep, row in fitted:
        short = len(sweep) < MIN_FIT_POINTS and variable == VARIABLES[0] and len(sweep) > 1
        if short and sweep["point_id"].iloc[-1] in specs:
            end = specs[sweep["point_id"].iloc[-1]]  # said, not skipped in silence (`--n 64,128`)
            stop = f"a sweep needs {MIN_FIT_POINTS} sizes to fit before it is extended: give more (e.g. --{variable})"
            proposals.append(Proposal(_sweep_words(end, variable), variable, f"{len(sweep)} sizes", (), (), stop))
            continue
        if len(sweep) < MIN_FIT_POINTS or not answerable(row) or sweep["point_id"].iloc[-1] not in specs:
            continue
        end = specs[sweep["point_id"].iloc[-1]]
        x = sweep[variable].to_numpy(float)
        growth = _growth(sweep, variable, [visit_s(pid) if pid in specs else math.nan for pid in sweep["point_id"]])
        whole = FLOPS_TERM in row["reason"]
        sizes, instead = _sizes(sweep, variable, row, end, whole)
        end_s = visit_s(end.point_id)
        place = functools.partial(_place, end, variable, specs, memory_limits, end_s, x[-1], growth, whole)
        chosen, costs, stopped = place(sizes)
        if whole and (stopped or not sizes):
            chosen, costs = (), ()
            stopped = stopped or f"Table 1's term carries no {variable} within 2^20 times {x[-1]:g}"
        words, why = _sweep_words(end, variable), row["reason"]
        between = Proposal(words, variable, why, *place(instead)[:2]) if instead else None
        proposals.append(Proposal(words, variable, why, chosen, costs, stopped, whole, between, key in decided))
    return proposals


def _sizes(sweep: pd.DataFrame, variable: str, row: Mapping, end: PointSpec, whole: bool) -> tuple[list, list]:
    """(sizes, else these): midpoints in the fitted range, or larger sizes where a per-call cost or a cache bends it."""
    x = sweep[variable].to_numpy(float)
    if whole:
        sizes = ladder(x, flops_regime_start(end, variable, _step(x)))
        return sizes[: regime_prefix(sweep, end, variable, sizes) or 0], []
    beyond = ladder(x, row.get("plateau_size", math.nan))
    narrowable = any(words in row["reason"] for words in NARROWABLE)
    if not (narrowable or row["points"] >= MIN_FIT_POINTS):
        return beyond, []
    between = midpoints(end, variable, x, row["x_min"], row["x_max"])
    bent = narrowable and row.get("per_call_share", 0.0) > PER_CALL_SHARE_THRESHOLD
    if not between or bent or rate_still_moving(sweep, variable, row["x_min"], row["x_max"]):
        return beyond, between
    return between, []


def _place(end, variable, known, memory_limits, end_s, x_end, growth, whole, sizes) -> tuple[tuple, tuple, str]:
    chosen, costs = [], []
    for value in sizes:
        spec = sized(end, variable, value)
        if spec is None:
            return tuple(chosen), tuple(costs), f"{variable} = {round(value)} is no size {end.layer} takes"
        if spec.point_id in known or spec in chosen:
            continue
        need, limit = estimate.point_memory_bytes(spec), memory_limits.get(spec.device, math.inf)
        if need > limit:
            size = getattr(spec, variable)
            why = f"{variable} = {size} would hold about {need / 1e9:.2g} GB, over the {limit / 1e9:.2g} GB"
            return tuple(chosen), tuple(costs), why + " the extension may use"
        cost_s = end_s * (getattr(spec, variable) / x_end) ** growth
        if not whole and costs and getattr(spec, variable) > x_end and cost_s > STEP_COST_RATIO * costs[-1]:
            break
        chosen.append(spec)
        costs.append(cost_s)
    return tuple(chosen), tuple(costs), ""


def modelled(specs: list[PointSpec], call_s: Callable[[PointSpec], float]) -> pd.DataFrame:
    wall = clocks.TIME_COLUMNS[WALL][0]
    rows = [
        s.as_row() | dict(status="ok", point_id=s.point_id, flops_counted=estimate.analytic_flops(s)) for s in specs
    ]
    return pd.DataFrame(rows).assign(**{wall: [call_s(s) for s in specs]})


def drifted(call_s: Callable[[PointSpec], float], drift: float, seed: int) -> Callable[[PointSpec], float]:
    """call_s off by the model's error: a seeded random walk of `drift` per doubling of n, d and k (docs/method.md)."""
    factor = functools.cache(lambda s: math.exp(sum(_walk(s, variable, drift, seed) for variable in VARIABLES)))
    return lambda s: call_s(s) * factor(s)


def _walk(spec: PointSpec, variable: str, drift: float, seed: int) -> float:
    size = getattr(spec, variable)
    if not size:
        return 0.0
    sweep = zlib.crc32(f"{replace(spec, n=0, d=0, k=0).key} {variable}".encode())
    x = math.log2(size)
    walk = np.concatenate([[0.0], np.cumsum(np.random.default_rng([seed, sweep]).normal(0.0, drift, int(x) + 1))])
    return float(np.interp(x, np.arange(len(walk)), walk))


def forecast_s(specs, call_s, visit_s, budget_s: float, limits, drift: float = 0.0, realizations: int = 1) -> float:
    """Seconds the extension's rounds take on calls `call_s`, visits `visit_s`; with a drift, the mean of walks."""
    if drift:
        return float(
            np.mean(
                [forecast_s(specs, drifted(call_s, drift, i), visit_s, budget_s, limits) for i in range(realizations)]
            )
        )
    known, spent_s, told, fitted = list(specs), 0.0, set(), {}

    def fit(layer: str, sweep: pd.DataFrame, variable: str) -> dict:
        key = (variable, *sweep["point_id"])
        if key not in fitted:
            fitted[key] = time_row(layer, sweep, variable)
        return fitted[key]

    for _ in range(MAX_ROUNDS):
        ids = {s.point_id: s for s in known}
        proposals = propose(modelled(known, call_s), ids, lambda pid: visit_s(ids[pid]), limits, fit)
        chosen = choose(proposals, budget_s - spent_s, told)[0]
        if not chosen:
            break
        known += chosen
        spent_s += sum(map(visit_s, chosen))
    return min(spent_s, budget_s)


def first_pass_forecast_s(calls_s: Mapping[PointSpec, float], policy, meta: dict, budget_s: float) -> float | None:
    """forecast_s from a first pass's calls; an added point's: the model's times its layer's measured/modelled ratio."""
    rates = estimate.rates_from_meta(meta)
    if not {device_key(s.device, s.dtype) for s in calls_s} <= set(rates):
        return None
    memory = {device: estimate.memory_of(entry) for device, entry in meta.get("memory_bandwidth", {}).items()}

    def modelled_s(s: PointSpec) -> float:
        return estimate.call_time_s(s, estimate.rate_of(rates, s), memory.get(s.device))

    def layer(s: PointSpec) -> tuple:
        return s.layer, s.mode, s.device, s.dtype

    ratios: dict[tuple, list[float]] = {}
    for s, t in calls_s.items():
        ratios.setdefault(layer(s), []).append(t / modelled_s(s))

    def call_s(s: PointSpec) -> float:
        return calls_s[s] if s in calls_s else modelled_s(s) * float(np.median(ratios.get(layer(s), [1.0])))

    def visit_s(s: PointSpec) -> float:
        return estimate.point_time_s(s, policy, estimate.rate_of(rates, s), call_s(s))

    return forecast_s(list(calls_s), call_s, visit_s, budget_s, memory_limits({s.device for s in calls_s}))


def first_pass_line(records: Mapping[PointSpec, dict], policy, meta: dict) -> str:
    """The estimate said again from what the first pass took: later passes time the points without the probes."""
    first_s = sum(formats.visit_s(r) for r in records.values())
    probes_s = sum(r.get("probes_s", 0.0) for r in records.values())
    rest_s = (policy.passes - 1) * (first_s - probes_s)
    extra_s = policy.extra_budget_s(first_s + rest_s) if policy.extra_passes else 0.0
    extend_s = policy.extend_budget_s(first_s + rest_s)
    calls_s = {s: r["stats"]["median"] for s, r in records.items()}
    foreseen_s = first_pass_forecast_s(calls_s, policy, meta, extend_s) if extend_s else None
    if foreseen_s is not None:
        extending = f", about {format_duration(foreseen_s)} (at most {format_duration(extend_s)}) extending sweeps"
        extending += f" that do not decide: about {format_duration(rest_s + foreseen_s)} more in all"
    else:
        extending = f" and at most {format_duration(extend_s)} extending sweeps that do not decide" if extend_s else ""
    return (
        f"the first pass took {format_duration(first_s)} ({format_duration(probes_s)} of it counting FLOPs and "
        f"memory): about {format_duration(rest_s)} more for {policy.passes - 1} more passes, at most "
        f"{format_duration(extra_s)} sampling points further{extending}"
    )


def memory_limits(devices) -> dict[str, float]:
    available, _total = device_memory(devices)
    return {device: EXTEND_MEMORY_SHARE * free for device, free in available.items()}


def _first_cost_s(p: Proposal) -> float:
    own = sum(p.costs_s[: None if p.whole else 1]) if p.specs else math.inf
    return min(own, _first_cost_s(p.instead)) if p.instead is not None else own


def _tier(p: Proposal) -> tuple[int, bool]:
    return VARIABLES.index(p.variable), p.decided_elsewhere


def choose(proposals: list[Proposal], left_s: float, told: set[str]) -> tuple[list[PointSpec], list[str], float]:
    """(points within left_s, cheapest first, waiting while n or a layer without a verdict takes any; lines; cost)."""
    chosen, lines, cost_s = [], [], 0.0
    affordable = [_tier(p) for p in proposals if p.affordable(left_s) or (p.instead and p.instead.affordable(left_s))]
    for p in sorted(proposals, key=lambda p: (_tier(p), _first_cost_s(p))):
        if affordable and _tier(p) > min(affordable):
            first = "the sweeps against n" if p.variable != VARIABLES[0] else "layers without a verdict yet"
            if f"waiting {p.sweep}" not in told:
                told.add(f"waiting {p.sweep}")
                lines.append(f"waiting: {p.sweep}, {short_reason(p.reason)}: {first} are extended first")
            continue
        taken = p.affordable(left_s)
        if not taken and p.instead is not None and p.instead.affordable(left_s):
            p = p.instead
            taken = p.affordable(left_s)
        if taken:
            left_s -= sum(p.costs_s[:taken])
            cost_s += sum(p.costs_s[:taken])
            chosen += p.specs[:taken]
            sizes = ", ".join(f"{getattr(s, p.variable):,}" for s in p.specs[:taken])
            lines.append(f"extending {p.sweep} to {p.variable} = {sizes}: {short_reason(p.reason)}")
            continue
        if p.specs:
            needed = p.specs if p.whole else p.specs[:1]
            sizes = ", ".join(f"{getattr(s, p.variable):,}" for s in needed)
            what = f"the {len(needed)} points it needs" if len(needed) > 1 else "its next point"
            stop = (
                f"{what} ({p.variable} = {sizes}) would take about {format_duration(sum(p.costs_s[: len(needed)]))}, "
                f"over the {format_duration(max(left_s, 0))} left of the extension's budget"
            )
        else:
            stop = p.stopped or "no larger size is left to add"
        if p.sweep not in told:
            told.add(p.sweep)
            lines.append(f"not extended: {p.sweep}, {short_reason(p.reason)}: {stop}")
    return chosen, lines, cost_s
