"""The sweep planner: each round every time sweep without a verdict offers its candidate of most gain (how much nearer
a verdict its exponent's interval gets) per predicted second, and the best are measured within the time and memory
left, one sweep of a layer and variable a round; a sweep stops when it decides, when none narrows it, or at budget."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum

import numpy as np
import pandas as pd

from .cost import analytic_flops
from .errors import BadInput
from .fits import CONFIDENCE, MAX_VERDICT_WIDTH, time_row_and_range
from .footprint import point_memory_bytes
from .spec import PointSpec, kernel_wider_than_sequence, validate
from .sweeps import (
    ASYMPTOTIC_POINTS,
    MIN_FIT_POINTS,
    PLATEAU_FRACTION,
    TOLERANCE,
    VARIABLES,
    Reason,
    all_sweeps,
    by_sweep,
    loglog_slope,
    plateau_start,
    predicted_cost,
    predicted_row,
    regime_start,
    sweep_of,
)
from .units import format_bytes, format_duration, sizes_text

SIGMA_PRIOR = 0.05  # log time's scatter about a sweep's power law before it shows its own (docs/method.md)
RUNGS = (math.sqrt(2), 2.0)
STRUCTURAL = frozenset({Reason.TOO_FEW_POINTS, Reason.NOT_ASYMPTOTIC, Reason.FLOPS_TERM})
WORDS = {
    Reason.TOO_FEW_POINTS: "too few points",
    Reason.NOT_ASYMPTOTIC: "not asymptotic yet",
    Reason.FLOPS_TERM: "Table 1's term does not set the counted FLOPs yet",
    Reason.TOO_WIDE: "interval too wide",
    Reason.STRADDLES: "interval straddles the tolerance edge",
    Reason.NO_INTERVAL: "no interval",
    Reason.NO_PREDICTION: "interval wider than a verdict's band (no cost stated)",
}


class Stop(StrEnum):
    """Why a sweep without a verdict gets no point this round."""

    TOO_SHORT = "too_few_sizes"
    ELSEWHERE = "decided_by_another_sweep"
    MEMORY = "memory_bound_reached"
    NO_SIZE = "no_size_left"
    NO_GAIN = "no_point_narrows_it"
    BUDGET = "budget_spent"


def sized(spec: PointSpec, variable: str, value: float) -> PointSpec | None:
    """spec at `value`, rounded to a size the layer takes and kernels suit, k ≤ n (docs/method.md); None if none."""
    size = max(1, round(value))
    if variable != "k" and size >= 8:
        step = 2 ** (math.floor(math.log2(size)) - 2)
        size = round(size / step) * step
    if variable == "d" and spec.heads:
        size = -(-size // spec.heads) * spec.heads
    if variable == "k":
        size |= 1
        if kernel_wider_than_sequence(spec.layer, spec.n, size):
            return None
    try:
        return validate(replace(spec, **{variable: size}))
    except BadInput:
        return None


def flops_regime_start(end: PointSpec, variable: str, step: float) -> float:
    """The size from end on where the analytic FLOPs grow by `step`s as Table 1's term says; nan if none by 2^20·end."""
    a = end
    if predicted_row(end.layer, end.mode) is None:
        return float(getattr(end, variable))
    while getattr(a, variable) < getattr(end, variable) * 2**20:
        b = sized(end, variable, getattr(a, variable) * step)
        if b is None or getattr(b, variable) <= getattr(a, variable):
            return math.nan
        predicted = np.diff(np.log(spec_cost([a, b])))[0]
        if abs(math.log(analytic_flops(b) / analytic_flops(a)) - predicted) <= TOLERANCE["flops"] * math.log(
            getattr(b, variable) / getattr(a, variable)
        ):
            return float(getattr(a, variable))
        a = b
    return math.nan


def halfwidth(sizes, sigma: float) -> float:
    """The half-width of a time exponent's interval over `sizes` at scatter σ: t(m − 2)·σ/√Sxx (inf below a fit)."""
    u = [math.log(x) for x in set(sizes)]
    if len(u) < ASYMPTOTIC_POINTS:
        return math.inf
    mean = math.fsum(u) / len(u)
    return _t(len(u) - 2) * sigma / math.sqrt(math.fsum((v - mean) ** 2 for v in u))


@functools.cache
def _t(degrees: int) -> float:
    from scipy.special import stdtrit  # noqa: PLC0415 - scipy.stats would cost a dry run a second of import

    return float(stdtrit(degrees, 0.5 + CONFIDENCE / 2))


@dataclass(frozen=True)
class SweepState:
    key: tuple
    variable: str
    end: PointSpec  # its largest point, the template of new ones
    sizes: tuple[float, ...]
    fitted: tuple[float, ...]
    joins_from: float
    code: Reason
    exponent: float
    predicted: float
    sigma: float
    decided: bool
    reliable: float = 1.0  # the chance a new point's time is trusted

    @property
    def needed(self) -> float:
        return _needed(self.exponent, self.predicted)

    def gain(self, new: list[float]) -> float:
        cap = MAX_VERDICT_WIDTH / 2
        joined = [x for x in new if x >= self.joins_from]
        after = halfwidth([*self.fitted, *joined], self.sigma)
        return max(0.0, min(halfwidth(self.fitted, self.sigma), cap) - max(after, self.needed))

    def words(self) -> str:
        spec, dtype = self.end, "" if self.end.dtype == "float32" else f" {self.end.dtype}"
        return f"{spec.layer} against {self.variable} ({sizes_text(spec, self.variable)}, {spec.mode} on {spec.device}{dtype})"


def state_of(key: tuple, variable: str, sweep: pd.DataFrame, end: PointSpec, sigma: float | None = None) -> SweepState:
    """The rule's view of one time sweep (its ok points, sorted)."""
    layer = end.layer
    row, tr = time_row_and_range(layer, sweep, variable)
    sizes = tuple(sweep[variable].astype(float))
    fitted = tuple(tr.data[variable].astype(float)) if len(tr.data) else ()
    code = Reason(row["reason_code"])
    if code == Reason.FLOPS_TERM:
        joins_from = flops_regime_start(end, variable, _step(sizes))
        fitted = tuple(x for x in sizes if x >= joins_from)
    else:
        fitted = tuple(tr.sweep[variable].astype(float)) if code == Reason.TOO_FEW_POINTS else fitted
        joins_from = _joins_from(code, fitted, sizes, tr.data["flops_counted"] / tr.data["time_s"])
    exponent, decided = float(row["exponent"]), row["verdict"] != "inconclusive"
    if code == Reason.NO_PREDICTION:
        decided = (row["ci_high"] - row["ci_low"]) / 2 <= _needed(exponent, math.nan)
    if sigma is None:
        sigma = _fitted_sigma(row, fitted)
    else:
        needed = _needed(exponent, row["predicted"])
        decided = math.isfinite(exponent) and 0 < needed and halfwidth(fitted, sigma) <= needed
    reliable = (len(tr.sweep) + 1) / (len(sweep) + 2)
    return SweepState(
        key, variable, end, sizes, fitted, joins_from, code, exponent, row["predicted"], sigma, decided, reliable
    )


def _joins_from(code: Reason, fitted: tuple[float, ...], sizes, rates) -> float:
    """Where new sizes join the fitted ones: past the end while the rate still moves, else from the range's start."""
    rates = np.asarray(rates, float)
    settled = len(fitted) >= MIN_FIT_POINTS and rates.min() >= PLATEAU_FRACTION * rates.max()
    if code == Reason.NOT_ASYMPTOTIC and not settled:
        return math.nextafter(sizes[-1], math.inf)
    return fitted[0] if fitted else sizes[0]


def _needed(exponent: float, predicted: float) -> float:
    tolerance = TOLERANCE["time"]
    if not math.isfinite(exponent) or not math.isfinite(predicted):
        return tolerance
    return max(abs(tolerance - abs(exponent - predicted)), 1e-3)


def _fitted_sigma(row: Mapping, fitted: tuple[float, ...]) -> float:
    if len(fitted) < ASYMPTOTIC_POINTS or not math.isfinite(row["ci_high"] - row["ci_low"]):
        return SIGMA_PRIOR
    sigma = (row["ci_high"] - row["ci_low"]) / 2 / halfwidth(fitted, 1.0)
    return sigma if len(fitted) > ASYMPTOTIC_POINTS else max(sigma, SIGMA_PRIOR)


def _step(sizes) -> float:
    return min(max(sizes[-1] / sizes[-2], RUNGS[0]), RUNGS[-1]) if len(sizes) >= 2 else RUNGS[-1]


def states(
    points: pd.DataFrame, specs: Mapping[str, PointSpec], sigma: float | None = None, memo: dict | None = None
) -> list[SweepState]:
    """Every time sweep's state; `memo` keeps them by their points (a stored row is final) from one round to the next."""
    out, memo = [], {} if memo is None else memo
    for variable, fixed, sweep in all_sweeps(points):
        sweep = sweep.sort_values(variable)
        end = specs.get(sweep["point_id"].iloc[-1])
        if end is None or (len(sweep) < MIN_FIT_POINTS and variable != VARIABLES[0]):
            continue
        key = sweep_key(fixed, variable)
        seen = (key, tuple(sweep["point_id"]), sigma)
        if seen not in memo:
            enough = len(sweep) >= MIN_FIT_POINTS
            memo[seen] = state_of(key, variable, sweep, end, sigma) if enough else _too_short(key, variable, sweep, end)
        out.append(memo[seen])
    return out


def _too_short(key: tuple, variable: str, sweep: pd.DataFrame, end: PointSpec) -> SweepState:
    x, short = tuple(sweep[variable].astype(float)), Reason.TOO_FEW_POINTS
    return SweepState(key, variable, end, x, (), math.inf, short, math.nan, math.nan, SIGMA_PRIOR, False)


def sweep_key(fixed: Mapping, variable: str) -> tuple:
    return (variable, *((k, None if pd.isna(v) else v) for k, v in fixed.items()))


@dataclass(frozen=True)
class Candidate:
    state: SweepState
    specs: tuple[PointSpec, ...]
    cost_s: float
    gain: float

    @property
    def worth(self) -> float:
        return self.gain / max(self.cost_s, 1e-9)


def best(
    state: SweepState, known: set[str], cost_s: Callable[[PointSpec], float], memory_limit: float
) -> Candidate | tuple[Stop, str]:
    if len(state.sizes) < MIN_FIT_POINTS:
        return Stop.TOO_SHORT, (
            f"a sweep needs {MIN_FIT_POINTS} sizes to fit before it is extended: give more (e.g. --{state.variable})"
        )
    options, why = [], (Stop.NO_SIZE, "no larger size is left to add")
    end = state.sizes[-1]
    start = state.joins_from if end < state.joins_from < math.inf else end * RUNGS[0]
    for ratio in RUNGS:
        ladder: list[PointSpec] = []
        for i in range(ASYMPTOTIC_POINTS):
            spec = sized(state.end, state.variable, max(start, end * ratio) * ratio**i)
            if spec is None or spec.point_id in known or spec in ladder:
                break
            need = point_memory_bytes(spec)
            if need > memory_limit:
                size = getattr(spec, state.variable)
                why = (
                    Stop.MEMORY,
                    f"{state.variable} = {size:,} would hold about {format_bytes(need)}, over the "
                    f"{format_bytes(memory_limit)} the extension may use",
                )
                break
            ladder.append(spec)
            options.append(tuple(ladder))
    for a, b in zip(state.fitted[:-1], state.fitted[1:]):
        spec = sized(state.end, state.variable, math.sqrt(a * b))
        joins = a >= state.joins_from and spec is not None and a < getattr(spec, state.variable) < b
        if joins and spec.point_id not in known:
            options.append((spec,))
    scored = [
        Candidate(
            state,
            specs,
            sum(map(cost_s, specs)),
            state.reliable * state.gain([getattr(s, state.variable) for s in specs]),
        )
        for specs in options
    ]
    scored = [c for c in scored if c.gain > 0 and math.isfinite(c.cost_s)]
    if not scored:
        return why if why[0] == Stop.MEMORY or not options else (Stop.NO_GAIN, "no affordable size narrows it")
    return max(scored, key=lambda c: (c.worth, -c.cost_s))


def choose(
    sweeps_now: list[SweepState],
    known: set[str],
    cost_s: Callable[[PointSpec], float],
    memory_limits: Mapping[str, float],
    left_s: float,
) -> tuple[list[Candidate], dict[tuple, tuple[SweepState, Stop, str]]]:
    """This round's candidates within left_s, best first; and why each other undecided sweep waits."""
    offers, stopped = [], {}
    decided = {_family(state) for state in sweeps_now if state.decided}
    for state in sweeps_now:
        if state.decided:
            continue
        if _family(state) in decided:
            stopped[state.key] = (
                state,
                Stop.ELSEWHERE,
                f"another sweep of {state.end.layer} against {state.variable} decides",
            )
            continue
        found = best(state, known, cost_s, memory_limits.get(state.end.device, math.inf))
        if isinstance(found, Candidate):
            offers.append(found)
        else:
            stopped[state.key] = (state, *found)
    chosen = []
    for offer in sorted(offers, key=lambda c: (-c.worth, c.cost_s)):
        ok = offer.cost_s <= left_s and not set(s.point_id for s in offer.specs) & known
        if ok and _family(offer.state) in {_family(c.state) for c in chosen}:
            continue
        if ok:
            chosen.append(offer)
            left_s -= offer.cost_s
            known = known | {s.point_id for s in offer.specs}
        else:
            what = f"{offer.state.variable} = {', '.join(f'{getattr(s, offer.state.variable):,}' for s in offer.specs)}"
            stopped[offer.state.key] = (
                offer.state,
                Stop.BUDGET,
                f"its next points ({what}) would take about {format_duration(offer.cost_s)}, over the "
                f"{format_duration(max(left_s, 0.0))} left of the extension's budget",
            )
    return chosen, stopped


def _family(state: SweepState) -> tuple:
    spec = state.end
    return spec.layer, spec.mode, spec.device, spec.dtype, state.variable


def lines(chosen: list[Candidate], stopped: Mapping, told: set) -> list[str]:
    out = []
    for c in chosen:
        sizes = ", ".join(f"{getattr(s, c.state.variable):,}" for s in c.specs)
        out.append(f"extending {c.state.words()} to {c.state.variable} = {sizes}: {WORDS[c.state.code]}")
    for key, (state, stop, why) in stopped.items():
        if (key, stop) not in told:
            told.add((key, stop))
            out.append(f"not extended: {state.words()}, {WORDS[state.code]}: {why}")
    return out


def spec_cost(specs: list[PointSpec]) -> np.ndarray:
    n, d, k, window = (np.asarray([getattr(s, size) for s in specs], float) for size in ("n", "d", "k", "window"))
    return predicted_cost(specs[-1].layer, specs[-1].mode, n, d, k, window)


def modelled_state(variable: str, members: list[PointSpec], call_s: Callable[[PointSpec], float]) -> SweepState:
    """A sweep of modelled calls as the rule sees it, its range by bench.sweeps' rules."""
    end = members[-1]
    x = np.asarray([getattr(s, variable) for s in members], float)
    t = np.asarray([call_s(s) for s in members], float)
    flops = np.asarray([analytic_flops(s) for s in members], float)
    predicted = spec_cost(members)
    regime = regime_start(x, flops, predicted)
    start = max(regime or 0, plateau_start(flops / t))
    fitted, exponent, code, decided = tuple(x[start:]), math.nan, Reason.NOT_ASYMPTOTIC, False
    if regime is None:
        code, joins_from = Reason.FLOPS_TERM, flops_regime_start(end, variable, _step(x))
        fitted = tuple(v for v in x if v >= joins_from)
    else:
        if len(fitted) >= ASYMPTOTIC_POINTS:
            exponent = loglog_slope(x[start:], t[start:])
            needed = abs(TOLERANCE["time"] - abs(exponent - loglog_slope(x[start:], predicted[start:])))
            decided = halfwidth(fitted, SIGMA_PRIOR) <= needed
            code = Reason.DECIDED if decided else Reason.STRADDLES
        joins_from = _joins_from(code, fitted, x, flops[start:] / t[start:])
    return SweepState(
        sweep_of(end, variable),
        variable,
        end,
        tuple(x),
        fitted,
        joins_from,
        code,
        exponent,
        loglog_slope(x, predicted),
        SIGMA_PRIOR,
        decided,
    )


def extension_s(
    specs: list[PointSpec],
    call_s: Callable[[PointSpec], float],
    visit_s: Callable[[PointSpec], float],
    budget_s: float,
    memory_limits: Mapping[str, float],
) -> tuple[float, list[PointSpec], list[PointSpec]]:
    """(seconds, points, those for STRUCTURAL reasons) the rule adds on calls of `call_s`: deterministic."""
    groups = by_sweep(specs)
    known, spent_s, added, structural, states_now = {s.point_id for s in specs}, 0.0, [], [], {}
    changed = {key for key, members in groups.items() if len(set(members)) >= MIN_FIT_POINTS}
    while True:
        for key in changed:
            members = sorted(set(groups[key]), key=lambda s: getattr(s, key[0]))
            states_now[key] = modelled_state(key[0], members, call_s)
        chosen, _ = choose(list(states_now.values()), known, visit_s, memory_limits, budget_s - spent_s)
        if not chosen:
            return spent_s, added, structural
        changed = set()
        for c in chosen:
            groups[c.state.key] += c.specs
            changed.add(c.state.key)
            known |= {s.point_id for s in c.specs}
            spent_s += c.cost_s
            added += c.specs
            structural += c.specs if c.state.code in STRUCTURAL else ()
