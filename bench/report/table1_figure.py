"""The first figure, Table 1 measured: time and counted FLOPs against n per source, log-log, predicted slopes dashed."""

from __future__ import annotations

import math
import warnings

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.lines import Line2D

import models

from .. import fits
from ..spec import TRAIN_MODE
from . import style
from .context import ReportContext
from .scaling import predicted_from_fits, sweeps_caption
from .sweep_plot import (
    AXIS_UNIT,
    axis_label,
    draw_layer,
    hollow_handle,
    on_sweep_clocks,
    panel_mode,
    primary_sweeps,
    sweep_styles,
)

# Table 1's rows: convolution, recurrence (each of the three built), self-attention, restricted self-attention
TABLE1_LAYERS = (
    models.ROLES.convolution,
    *models.recurrent(),
    models.ROLES.attention,
    models.ROLES.attention_restricted,
)
PANELS = {"time": "time_s", "flops": "flops_counted"}
PANEL_SIZE_IN = (3.3, 2.9)
FONT_SIZE = 9


def table1_layers(present) -> list[str]:
    """The layers of Table 1's rows among those measured, in the registry's order; else every layer measured."""
    present = set(present)
    chosen = [name for name in TABLE1_LAYERS if name in present]
    return chosen or style.layer_order(present)


def _guide(ax, xs, ys, slope, color) -> None:
    if slope is not None and math.isfinite(slope) and len(xs) >= 2:
        style.slope_guide(ax, xs, (xs[-1], ys[-1]), slope, "n", color=color, label="_guide")


def table1_figure(data: pd.DataFrame, exponents: dict, title: str):
    """Time (left) and FLOPs (right) of one source; `exponents[metric](source, layer, sweep)`: a guide's slope."""
    layers = table1_layers(data["layer"].unique())
    palette, markers = style.layer_palette(data["layer"].unique()), style.layer_markers(data["layer"].unique())
    styles = sweep_styles(data)
    mode = panel_mode(data)
    with plt.rc_context({"font.size": FONT_SIZE}):
        fig, axes = style.panels(len(PANELS), sharey=False)
        fig.set_size_inches(PANEL_SIZE_IN[0] * len(PANELS), PANEL_SIZE_IN[1])
        pending, hollow = [], False
        for ax, (metric, column) in zip(axes, PANELS.items()):
            ax.set_xscale("log")
            ax.set_yscale("log")
            for layer in layers:
                sweep = data[(data["layer"] == layer) & data[column].notna() & (data[column] > 0)].sort_values("n")
                if sweep.empty:
                    continue
                xs, ys = sweep["n"].to_numpy(float), sweep[column].to_numpy(float)
                trusted = sweep["time_ok"].astype(bool).to_numpy() if metric == "time" else None
                hollow |= trusted is not None and not trusted.all()
                linestyle = styles.get(sweep["sweep"].iloc[0], "-") if styles else "-"
                draw_layer(ax, xs, ys, palette[layer], markers[layer], trusted, linestyle, layer)
                slope = exponents[metric](sweep["source"].iloc[0], layer, sweep) if len(sweep) >= 2 else None
                pending.append((ax, xs, ys, slope, palette[layer]))
            ax.set_ylabel(axis_label(metric, mode))
            ax.set_xlabel("n")
            style.grid(ax)
            style.measured_ticks(ax, data["n"], "x")
            style.log_axis(ax, "y", style.eng(AXIS_UNIT[metric]))
        for ax, xs, ys, slope, color in pending:
            _guide(ax, xs, ys, slope, color)
        fig.suptitle(title, fontsize=FONT_SIZE + 1)
        handles = [
            Line2D([], [], color=palette[layer], marker=markers[layer], markersize=5, linewidth=1.6) for layer in layers
        ]
        labels = [f"{layer}  {fits.table1_cell(layer)}" if layer in models.LAYERS else layer for layer in layers]
        for label, linestyle in styles.items():
            handles.append(Line2D([], [], color="0.3", linestyle=linestyle, linewidth=1.6))
            labels.append(f"sweep: {label}")
        handles.append(Line2D([], [], color="0.3", **style.GUIDE_STYLE))
        labels.append("Table 1's slope")
        if hollow:
            handles.append(hollow_handle())
            labels.append("time not to be trusted")
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "This figure includes Axes that are not compatible", UserWarning)
            fig.tight_layout()
        fig.legend(
            handles,
            labels,
            loc="upper center",
            bbox_to_anchor=(0.5, 0.0),
            ncol=3,
            fontsize=FONT_SIZE - 1,
            frameon=False,
        )
    return fig


def table1_section(ctx: ReportContext, fit_rows: pd.DataFrame, mode: str | None = None) -> str:
    """The first figure of each source in `mode` (None: the sources not training), embedded with its caption."""
    ok = ctx.points[(ctx.points["status"] == "ok") & ctx.points["time_median_s"].notna()]
    data = primary_sweeps(ok, "n")
    if data.empty:
        return ""
    data = on_sweep_clocks(data)
    exponents = {metric: predicted_from_fits(fit_rows, metric, "n") for metric in PANELS}
    parts = []
    for source in ctx.sources():
        mine = data[data["source"] == source]
        mine = mine[mine["layer"].isin(table1_layers(mine["layer"].unique()))]
        own = panel_mode(mine)
        if mine.empty or (own == TRAIN_MODE) != (mode == TRAIN_MODE):
            continue
        call = axis_label("time", own).removeprefix("time ")
        caption = (
            f"Table 1, measured on {ctx.source_label(source)}: time (left) and counted FLOPs (right) {call} "
            f"against n, log-log, one line per layer of Table 1's rows, each on its widest n-sweep "
            f"({sweeps_caption(mine)}); dashed: the slope Table 1 predicts over the fitted range, through each "
            "line's largest point; hollow: a time not to be trusted on its clock (bench.clock), left out of the "
            "fits. The other layers and sweeps: under Compute and Time."
        )
        fig = table1_figure(mine, exponents, ctx.source_label(source))
        parts.append(
            ctx.figure(fig, f"table1_{source}", f"Time and FLOPs against n, {ctx.source_tag(source)}", caption)
        )
    return "\n".join(parts)
