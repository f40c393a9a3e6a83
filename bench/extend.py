"""Points beyond the end of every sweep whose time fit cannot decide yet, within a stated budget (docs/method.md)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from . import clock as clocks
from . import estimate
from .errors import BadInput
from .fits import time_row
from .policy import EXTEND_MEMORY_SHARE
from .preflight import device_memory, format_duration, sizes_text
from .spec import PointSpec, validate
from .sweeps import MIN_FIT_POINTS, VARIABLES, sweeps

MAX_ROUNDS = 4
NEW_PER_ROUND = 2
MIN_RATIO, MAX_RATIO = math.sqrt(2), 2.0
# Reasons (bench.sweeps.time_fit_range, bench.fits.judge) that more points beyond the end can answer.
ANSWERABLE = ("not asymptotic yet", "too few points", "straddles", "too wide", "does not set the counted FLOPs")


@dataclass(frozen=True)
class Proposal:
    """One sweep's next points, or why it stops."""

    sweep: str
    variable: str
    reason: str
    specs: tuple[PointSpec, ...]
    costs_s: tuple[float, ...]
    stopped: str = ""

    def affordable(self, left_s: float) -> int:
        spent = itertools.accumulate(self.costs_s)
        return sum(1 for s in spent if s <= left_s)


def answerable(row: Mapping) -> bool:
    return row["verdict"] == "inconclusive" and any(words in row["reason"] for words in ANSWERABLE)


def ladder(x: np.ndarray, target: float) -> list[float]:
    """Sizes past x's end: to `target` (a plateau) in at most two steps, then NEW_PER_ROUND at the sweep's own step."""
    end = float(x[-1])
    step = min(max(float(x[-1] / x[-2]), MIN_RATIO), MAX_RATIO)
    sizes = []
    if math.isfinite(target) and target > end * step:
        jumps = min(2, math.ceil(math.log(target / end) / math.log(step)))
        sizes = [end * (target / end) ** (i / jumps) for i in range(1, jumps + 1)]
    last = sizes[-1] if sizes else end
    return sizes + [last * step**i for i in range(1, NEW_PER_ROUND + 1)]


def sized(spec: PointSpec, variable: str, value: float) -> PointSpec | None:
    """spec at `value` of its variable, rounded to a size the layer takes (d: a multiple of the heads); None if none."""
    size = max(1, round(value))
    if variable == "d" and spec.heads:
        size = -(-size // spec.heads) * spec.heads
    if variable == "k":
        size |= 1
    try:
        return validate(replace(spec, **{variable: size}))
    except BadInput:
        return None


def _growth(sweep: pd.DataFrame, variable: str) -> float:
    """The steeper of the last step's local exponents of counted FLOPs and time: how a visit's cost grows."""
    sweep = clocks.on_clock(sweep)
    x = sweep[variable].to_numpy(float)
    out = 0.0
    for column in ("flops_counted", "time_s"):
        y = sweep[column].to_numpy(float) if column in sweep else np.full(len(x), np.nan)
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
) -> list[Proposal]:
    """Each undecided time sweep of a run's `points` and its next points (`visit_s`: a stored point's seconds)."""
    proposals = []
    for variable in VARIABLES:
        for fixed, sweep in sweeps(points, variable):
            sweep = sweep.sort_values(variable)
            row = time_row(fixed["layer"], sweep, variable)
            if len(sweep) < MIN_FIT_POINTS or not answerable(row) or sweep["point_id"].iloc[-1] not in specs:
                continue
            end = specs[sweep["point_id"].iloc[-1]]
            x = sweep[variable].to_numpy(float)
            growth, end_s = _growth(sweep, variable), visit_s(end.point_id)
            chosen, costs, stopped = [], [], ""
            for value in ladder(x, row.get("plateau_size", math.nan)):
                spec = sized(end, variable, value)
                if spec is None:
                    stopped = f"{variable} = {round(value)} is no size {end.layer} takes"
                    break
                if spec.point_id in specs or spec in chosen:
                    continue
                need, limit = estimate.point_memory_bytes(spec), memory_limits.get(spec.device, math.inf)
                if need > limit:
                    stopped = (
                        f"{variable} = {getattr(spec, variable)} would hold about {need / 1e9:.2g} GB, over the "
                        f"{limit / 1e9:.2g} GB the extension may use"
                    )
                    break
                chosen.append(spec)
                costs.append(end_s * (getattr(spec, variable) / float(x[-1])) ** growth)
            words = _sweep_words(end, variable)
            proposals.append(Proposal(words, variable, row["reason"], tuple(chosen), tuple(costs), stopped))
    return proposals


def memory_limits(devices) -> dict[str, float]:
    available, _total = device_memory(devices)
    return {device: EXTEND_MEMORY_SHARE * free for device, free in available.items()}


def _why(reason: str) -> str:
    return reason.split(";")[0].split(" (")[0]


def choose(proposals: list[Proposal], left_s: float, told: set[str]) -> tuple[list[PointSpec], list[str], float]:
    """(the cheapest proposals' points that fit in left_s, the lines to log, their cost); a stop is said once."""
    chosen, lines, cost_s = [], [], 0.0
    for p in sorted(proposals, key=lambda p: p.costs_s[:1]):
        taken = p.affordable(left_s)
        if taken:
            left_s -= sum(p.costs_s[:taken])
            cost_s += sum(p.costs_s[:taken])
            chosen += p.specs[:taken]
            sizes = ", ".join(f"{getattr(s, p.variable):,}" for s in p.specs[:taken])
            lines.append(f"extending {p.sweep} to {p.variable} = {sizes}: {_why(p.reason)}")
            continue
        if p.specs:
            stop = (
                f"its next point ({p.variable} = {getattr(p.specs[0], p.variable):,}) would take about "
                f"{format_duration(p.costs_s[0])}, over the {format_duration(max(left_s, 0))} left of the "
                "extension's budget"
            )
        else:
            stop = p.stopped or "no larger size is left to add"
        if p.sweep not in told:
            told.add(p.sweep)
            lines.append(f"not extended: {p.sweep}, {_why(p.reason)}: {stop}")
    return chosen, lines, cost_s
