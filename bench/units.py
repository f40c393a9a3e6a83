"""Durations, byte counts and a point's sizes as messages say them."""

from __future__ import annotations

import math

import models

from .spec import LAYER_SIZES, SIZES, PointSpec


def format_duration(seconds: float) -> str:
    """In the unit that reads best: 45 s, 2.4 min, 30 min, 1.5 h, 12 days."""
    for unit, size, below in (("s", 1, 90), ("min", 60, 90 * 60), ("h", 3600, 48 * 3600), ("days", 86400, math.inf)):
        if seconds < below:
            value = seconds / size
            return f"{value:.1f} {unit}" if value < 10 and unit != "s" else f"{value:.0f} {unit}"
    raise AssertionError("unreachable")


def format_bytes(n: float) -> str:
    """Three significant digits in decimal units: 579 MB, 1.2 GB."""
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 999.5:
            return f"{n:.3g} {unit}"
        n /= 1000
    return f"{n:.3g} TB"


def sizes_text(spec: PointSpec, leave_out: str = "") -> str:
    uses = models.LAYERS[spec.layer].uses
    return " ".join(
        f"{name}={getattr(spec, name)}"
        for name in SIZES
        if name != leave_out and (name not in LAYER_SIZES or name in uses)
    )


def describe_point(spec: PointSpec) -> str:
    dtype = "" if spec.dtype == "float32" else f" {spec.dtype}"
    return f"{spec.layer} {sizes_text(spec)} on {spec.device}{dtype}"
