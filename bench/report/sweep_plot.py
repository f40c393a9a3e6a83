"""A layer's sweep of one size, drawn log-log, a panel per source, the predicted slope dashed through its largest point."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from .. import clock, fits, sweeps
from ..policy import WALL
from ..spec import TRAIN_MODE, mode_of
from . import style

AXIS_LABEL = {
    "time": "time per {call}",
    "flops": "FLOPs per {call} (counted)",
    "memory": "peak allocated in a {call}",
}
CALL = {TRAIN_MODE: "training step"}
FORWARD = "forward pass"
SWEEP_STYLES = ("-", ":", "-.", (0, (6, 1.5, 1, 1.5, 1, 1.5)))  # the most drawn sweep solid; dashed: guides
HOLLOW_NOTE = "hollow markers: a time not to be trusted on its clock (bench.clock), left out of the fits"
AXIS_UNIT = {"time": "s", "flops": "FLOP", "memory": "B"}
IQR_NOTE = "error bars: median ± IQR/2 (points.csv stores each point's IQR, not its quartiles)"
CLOCK_NOTE = (
    "time on the clock its fit uses: the wall clock, or where the machine was busy the CPU time of the call's "
    "one thread (bench.clock)"
)
GUIDE_NOTE = {
    "time": "dashed: the slope Table 1 predicts, through each layer's largest point",
    "flops": "dashed: the slope Table 1 predicts, through each layer's largest point",
    "memory": "dashed: the slope of the activation estimate, through each layer's largest point",
}


def axis_label(metric: str, mode: str | None = None) -> str:
    return AXIS_LABEL[metric].format(call=CALL.get(mode, FORWARD))


def panel_mode(part: pd.DataFrame) -> str:
    modes = set(mode_of(part)) if len(part) else set()
    return modes.pop() if len(modes) == 1 else ""


def sweep_styles(data: pd.DataFrame, panel: str = "source") -> dict[str, object]:
    """{sweep label: line style}, the sweep of most lines solid; {} for one sweep: nothing to tell apart."""
    if "sweep" not in data or data["sweep"].nunique() < 2:
        return {}
    lines = data.drop_duplicates([panel, "layer", "sweep"])["sweep"].value_counts()
    order = sorted(lines.index, key=lambda label: (-lines[label], label))
    return {label: SWEEP_STYLES[i % len(SWEEP_STYLES)] for i, label in enumerate(order)}


def draw_layer(ax, xs, ys, color, marker: str, trusted=None, linestyle="-", label: str = ""):
    """A layer's line, its markers filled where `trusted` (default: all), hollow elsewhere ("_hollow <label>")."""
    trusted = np.ones(len(xs), bool) if trusted is None else np.asarray(trusted, bool)
    (line,) = ax.plot(
        xs,
        ys,
        color=color,
        marker=marker,
        markersize=5,
        linewidth=1.6,
        linestyle=linestyle,
        markevery=list(trusted),
        label=label,
        zorder=3,
    )
    if not trusted.all():
        ax.plot(
            np.asarray(xs)[~trusted],
            np.asarray(ys)[~trusted],
            linestyle="none",
            marker=marker,
            markersize=6,
            markerfacecolor="white",
            markeredgecolor=color,
            markeredgewidth=1.3,
            label=f"_hollow {label}",
            zorder=4,
        )
    return line


def hollow_handle() -> Line2D:
    return Line2D([], [], linestyle="none", marker="o", markersize=6, markerfacecolor="white", markeredgecolor="0.3")


def on_sweep_clocks(data: pd.DataFrame) -> pd.DataFrame:
    if data.empty:
        return data
    parts = [clock.for_fit(group) for _, group in data.groupby(["source", "layer"], sort=False)]
    return pd.concat(parts, ignore_index=True)


def trusted_times(points: pd.DataFrame, on: str | None = None) -> tuple[pd.DataFrame, int, str]:
    """(the points whose time on one clock is to be trusted, in `time_s`; how many were left out; the clock)."""
    timed = clock.on_clock(points, on)
    kept = timed[timed["time_ok"].astype(bool) & (timed["time_s"] > 0)]
    return kept, len(timed) - len(kept), timed["clock"].iloc[0] if len(timed) else WALL


def primary_sweeps(points: pd.DataFrame, variable: str) -> pd.DataFrame:
    """Per source and layer, the sweep of `variable` with the most points (ties: the smallest other sizes)."""
    best: dict[tuple, tuple] = {}
    for fixed, group in sweeps.sweeps(points, variable):
        source = group["source"].iloc[0]
        key = (source, fixed["layer"])
        label = ", ".join(f"{k}={int(fixed[k])}" for k in ("batch", "n", "d") if k in fixed and not pd.isna(fixed[k]))
        rank = (-group[variable].nunique(), tuple(0 if pd.isna(v) else v for k, v in fixed.items() if k in ("d", "n")))
        if key not in best or rank < best[key][0]:
            best[key] = (rank, group.assign(sweep=label, fit_fixed=fits.fixed_text(fixed)))
    if not best:
        return pd.DataFrame()
    return pd.concat([g for _, g in best.values()], ignore_index=True)


def predicted_from_formula(metric: str, variable: str) -> Callable:
    """exponent(source, layer, sweep): the formula's slope over the range fits.fit_table fits (else the sweep)."""

    def exponent(source, layer, sweep):
        try:
            used = (
                fits.time_fit_range(sweep, variable, layer).data
                if metric == "time"
                else fits.asymptotic_range(sweep, variable, layer)
            )
        except (AttributeError, KeyError, ValueError, TypeError):
            used = sweep
        if used[variable].nunique() < 2:
            used = sweep
        try:
            return fits.predicted_exponent(metric, layer, used, variable)
        except (KeyError, ValueError, TypeError):
            return None

    return exponent


def sweep_figure(
    data: pd.DataFrame,
    variable: str,
    column: str,
    metric: str,
    titles: dict,
    panel: str = "source",
    exponent: Callable | None = None,
):
    """A panel per value of `data[panel]`, a line per layer, an untrusted time hollow; `exponent`: a guide per layer."""
    keys = [key for key in titles if (data[panel] == key).any()]
    palette, markers = style.layer_palette(data["layer"].unique()), style.layer_markers(data["layer"].unique())
    styles = sweep_styles(data[data[panel].isin(keys)], panel)
    fig, axes = style.panels(len(keys))
    for ax in axes:
        ax.set_xscale("log")
        ax.set_yscale("log")
    guides: dict[str, list[str]] = {}
    pending, hollow, modes = [], False, []
    for ax, key in zip(axes, keys):
        part = data[data[panel] == key]
        modes.append(panel_mode(part))
        for layer in style.layer_order(part["layer"].unique()):
            mine = part[part["layer"] == layer]
            for label, sweep in mine.groupby("sweep", sort=False) if styles else [("", mine)]:
                sweep = sweep.sort_values(variable)
                sweep = sweep[sweep[column].notna() & (sweep[column] > 0)]
                if sweep.empty:
                    continue
                xs, ys = sweep[variable].to_numpy(float), sweep[column].to_numpy(float)
                color = palette[layer]
                trusted = (
                    sweep["time_ok"].astype(bool).to_numpy() if column == "time_s" and "time_ok" in sweep else None
                )
                hollow |= trusted is not None and not trusted.all()
                draw_layer(ax, xs, ys, color, markers[layer], trusted, styles.get(label, "-"), layer)
                iqr = "time_s_iqr" if column == "time_s" else "time_iqr_s"
                if metric == "time" and iqr in sweep and sweep[iqr].notna().any():
                    half = np.nan_to_num(sweep[iqr].to_numpy(float) / 2, nan=0.0)
                    lower = np.minimum(half, 0.95 * ys)  # a log axis has no room at or below 0
                    ax.errorbar(
                        xs, ys, yerr=[lower, half], fmt="none", ecolor=color, elinewidth=1.0, capsize=2.5, zorder=2
                    )
                if exponent is not None and len(sweep) >= 2:
                    slope = exponent(sweep["source"].iloc[0], layer, sweep)
                    if slope is not None and math.isfinite(slope):
                        pending.append((ax, xs, (xs[-1], ys[-1]), slope, layer))
        ax.set_title(titles[key], fontsize=10)
        ax.set_xlabel(variable)
        style.grid(ax)
    for index, (ax, mode) in enumerate(zip(axes, modes)):
        if index % style.PANELS_PER_ROW == 0 or mode != modes[index - 1]:
            ax.set_ylabel(axis_label(metric, mode))
    style.measured_ticks(axes[0], data[variable], "x")
    style.log_axis(axes[0], "y", style.eng(AXIS_UNIT[metric]))
    for ax, xs, anchor, slope, layer in pending:  # after the limits are fixed, so guides do not move them
        style.slope_guide(ax, xs, anchor, slope, variable, color=palette[layer], label=f"_guide {layer}")
        label = style.slope_label(slope, variable)
        if label not in guides.setdefault(layer, []):
            guides[layer].append(label)
    layers = style.layer_order(data.loc[data[panel].isin(keys), "layer"].unique())
    handles = [
        Line2D([], [], color=palette[layer], marker=markers[layer], markersize=5, linewidth=1.6) for layer in layers
    ]
    labels = [f"{layer}   {' / '.join(guides[layer])}" if layer in guides else layer for layer in layers]
    for label, linestyle in styles.items():
        handles.append(Line2D([], [], color="0.3", linestyle=linestyle, linewidth=1.6))
        labels.append(f"sweep: {label}")
    if hollow:
        handles.append(hollow_handle())
        labels.append("hollow: time not to be trusted")
    style.legend_outside(
        axes[-1], handles, labels, title="layer   (dashed guide: predicted slope)" if guides else "layer"
    )
    return fig
