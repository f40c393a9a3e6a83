"""The class a fit's points follow best of Google Benchmark's oAuto classes, and those its interval excludes."""

from __future__ import annotations

import math

import numpy as np

COMPLEXITY_CLASSES = {
    "1": lambda u: 0 * u,
    "log {x}": np.log,
    "{x}": lambda u: u,
    "{x} log {x}": lambda u: u + np.log(u),
    "{x}²": lambda u: 2 * u,
    "{x}³": lambda u: 3 * u,
}


def complexity(x, y, ci_low: float, ci_high: float, variable: str) -> dict:
    u, log_y = np.log(np.asarray(x, float)), np.log(np.asarray(y, float))
    shapes = {name.format(x=variable): f(u) for name, f in COMPLEXITY_CLASSES.items()}
    scatter = {name: float(np.std(log_y - shape)) for name, shape in shapes.items()}
    slopes = {name: float(np.polyfit(u, shape, 1)[0]) for name, shape in shapes.items()}
    excluded = [name for name, slope in slopes.items() if not ci_low - 1e-9 <= slope <= ci_high + 1e-9]
    excluded = excluded if math.isfinite(ci_high - ci_low) else []
    return dict(complexity_class=min(scatter, key=scatter.get), complexity_excluded=", ".join(excluded))
