"""Where attention becomes costlier than another layer: n* by time, counted FLOPs, closed form (docs/method.md)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

import models

from .. import fits
from . import style
from .context import ReportContext

CROSSOVER_K = 3  # the kernel size of the convolution attention is compared with
CROSSOVER_KINDS = {"time, measured": "X", "FLOPs, counted": "s", "closed form": "o"}  # how n* was found: marker
CROSSOVER_MARKER_SIZE = {"time, measured": 7, "FLOPs, counted": 5, "closed form": 11}  # a hollow ring around
BATCH_LINESTYLES = ("-", "--", "-.", (0, (1, 1.5)))


def crossover_figure(ctx: ReportContext, data: pd.DataFrame, attention: str):
    """n* against d, one panel per source: colour = the layer compared with, line style = the batch."""
    titles = {source: ctx.source_label(source) for source in sorted(data["source"].unique())}
    palette = style.layer_palette(data["other"].unique())
    batches = sorted(data["batch"].unique())
    linestyle = {b: BATCH_LINESTYLES[i % len(BATCH_LINESTYLES)] for i, b in enumerate(batches)}
    fig, axes = style.panels(len(titles))
    paper_lines = []
    for ax, (source, title) in zip(axes, titles.items()):
        ax.set_xscale("log")
        ax.set_yscale("log")
        part = data[data["source"] == source]
        for (other, batch, kind), line in part.groupby(["other", "batch", "kind"], sort=False):
            line = line.sort_values("d")
            ax.plot(
                line["d"].to_numpy(float),
                line["n*"].to_numpy(float),
                color=palette[other],
                linestyle=linestyle[batch],
                marker=CROSSOVER_KINDS.get(kind, "o"),
                markersize=CROSSOVER_MARKER_SIZE.get(kind, 6),
                markerfacecolor="none" if kind == "closed form" else palette[other],
                linewidth=1.4,
            )
        ds = np.array(sorted(data["d"].unique()), float)
        paper_lines.append(ax.plot(ds, ds, color="0.25", linewidth=1.0, linestyle=(0, (1, 2)))[0])
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("d")
        style.grid(ax)
    axes[0].set_ylabel(f"crossover n* ({attention} costlier above)")
    style.measured_ticks(axes[0], data["d"], "x")
    x_lo, x_hi = axes[0].get_xlim()
    axes[0].set_xlim(x_lo / 1.1, x_hi * 1.1)  # room for the markers at the ends
    y_lo, y_hi = axes[0].get_ylim()
    axes[0].set_ylim(y_lo / 1.25, y_hi * 1.25)
    style.log_axis(axes[0], "y", style.plain)
    x_lo, x_hi = axes[0].get_xlim()
    for line in paper_lines:  # n = d across the whole panel, also where a single d was measured
        line.set_data([x_lo, x_hi], [x_lo, x_hi])
    others = style.layer_order(data["other"].unique())
    handles = [Line2D([], [], color=palette[o], linewidth=2) for o in others]
    labels = [f"vs {o}" for o in others]
    for kind, marker in CROSSOVER_KINDS.items():
        if kind in set(data["kind"]):
            handles.append(
                Line2D(
                    [],
                    [],
                    color="0.3",
                    marker=marker,
                    markersize=min(CROSSOVER_MARKER_SIZE[kind], 8),
                    linestyle="none",
                    markerfacecolor="none" if kind == "closed form" else "0.3",
                )
            )
            labels.append(kind)
    handles += [Line2D([], [], color="0.3", linestyle=linestyle[b]) for b in batches]
    labels += [f"batch {b}" for b in batches]
    handles.append(Line2D([], [], color="0.25", linewidth=1.0, linestyle=(0, (1, 2))))
    labels.append("n = d (paper)")
    style.legend_outside(axes[-1], handles, labels, title=f"where {attention} overtakes")
    return fig


def _crossover_rule(other: str) -> str:
    if other in models.recurrent():
        return "n < d (paper)"
    if other == models.ROLES.attention_linear:
        return "n < d/heads (Katharopoulos et al. 2020)"
    return "-"


def _crossing(ctx: ReportContext, group: pd.DataFrame, att: pd.DataFrame, other: str, at: tuple) -> tuple[str, list]:
    source, d, batch, heads = at
    attention = models.ROLES.attention
    with_heads = other in models.LAYERS and "heads" in models.LAYERS[other].uses
    oth = group[(group["layer"] == other) & ((group["k"] == CROSSOVER_K) | group["k"].isna())]
    if with_heads:
        oth = oth[oth["heads"] == heads]
    oth = oth.set_index("n")
    common = sorted(set(att.index) & set(oth.index))
    if len(common) < 3:
        return "", []
    run_id = att["run_id"].iloc[-1]
    measured, timed, on, att_t, oth_t = fits.time_crossing(att, oth, min_points=3)
    counted = fits.crossover_n(common, att.loc[common, "flops_counted"], oth.loc[common, "flops_counted"])
    cfg = models.LayerConfig(d=int(d), k=CROSSOVER_K, heads=int(heads))
    predicted = fits.closed_form_crossover_n(attention, other, int(batch), cfg)
    base = f"{source}.crossover.{attention}_vs_{other}.d{int(d)}.batch{int(batch)}"
    if with_heads:  # compared at the same heads: the heads are part of what the number means
        base += f".heads{int(heads)}"

    def fmt(value, what):
        if what == "time" and len(timed) < 3:
            return f"not computed: {len(common) - len(timed)} of {len(common)} lengths with an unreliable time"
        if value is None:
            ns, a, b = (timed, att_t, oth_t) if what == "time" else (common, att, oth)
            column = "time_s" if what == "time" else "flops_counted"
            below = a.loc[ns[0], column] >= b.loc[ns[0], column]
            return f"none in n = {ns[0]}..{ns[-1]} ({attention} {'costlier' if below else 'cheaper'} throughout)"
        on_clock = on if what == "time" else ""
        return ctx.cite(f"{base}.{what}_n", int(round(value)), "positions", run_id, clock=on_clock)

    if predicted is None:
        closed = f"none: {attention} costs fewer FLOPs at every n"
    elif predicted == 1:
        closed = f"none: {attention} costs more FLOPs at every n"
    else:
        closed = ctx.cite(base + ".predicted_n", predicted, "positions", run_id)
    line = (
        f"| {source} | {int(d)} | {int(batch)} | {other} | {fmt(measured, 'time')} | {fmt(counted, 'flops')} | "
        f"{_crossover_rule(other)} | {closed} |"
    )
    solved = predicted if predicted is not None and predicted > 1 else None
    found = ((measured, "time, measured"), (counted, "FLOPs, counted"), (solved, "closed form"))
    rows = [
        {"source": source, "d": d, "other": other, "batch": int(batch), "n*": value, "kind": kind}
        for value, kind in found
        if value is not None
    ]
    return line, rows


def crossover_section(ctx: ReportContext) -> str:
    ok = ctx.points[ctx.points["status"] == "ok"]
    attention = models.ROLES.attention
    others = [models.ROLES.recurrent, models.ROLES.convolution, models.ROLES.attention_linear]
    rows, lines = [], []
    for (source, d, batch, heads), att in ok[ok["layer"] == attention].groupby(["source", "d", "batch", "heads"]):
        group = ok[(ok["source"] == source) & (ok["d"] == d) & (ok["batch"] == batch)]
        for other in others:
            line, found = _crossing(ctx, group, att.set_index("n"), other, (source, d, batch, heads))
            if line:
                lines.append(line)
                rows += found
    if not lines:
        return f"_No n-sweep with {attention} beside {', '.join(others)} at the same d._\n"
    text = (
        f"Sequence length n* where {attention} becomes costlier than the other layer (log-log interpolation "
        "between measured points; by time, over the lengths where both times are to be trusted, on one clock). "
        "The paper's rule of thumb: self-attention is cheaper than a recurrent "
        "layer when n < d (it compares only n²·d with n·d²). The closed-form n* is the smallest n at which the "
        f"FLOP formulas of the two layers (models/; {attention}'s includes its four projections, which Table 1 "
        f"leaves out) cross, solved at each point's d, batch and heads (k = {CROSSOVER_K}). Against "
        f"{models.ROLES.attention_linear} (Katharopoulos et al. 2020: the same projections, and φ(K)ᵀV formed "
        "once, so its other term grows as n·d² where attention's grows as n²·d) the closed form falls at about "
        "the head size d/heads, where n²·d overtakes n·d·(d/heads): in FLOPs linear attention is the cheaper "
        "one from short lengths on, while n* by time says where the fused softmax kernel stops being the "
        "faster one on this device.\n\n"
        "| source | d | batch | against | n* by time | n* by counted FLOPs | paper | n* by closed form |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- |\n" + "\n".join(lines) + "\n"
    )
    if rows:
        fig = crossover_figure(ctx, pd.DataFrame(rows), attention)
        text += "\n" + ctx.figure(
            fig,
            "crossover",
            "Crossover n* against d",
            "Crossover n* against d, one panel per machine and device: measured (time), counted (FLOPs) and "
            "solved from the formulas; colour: the layer attention is compared with, line style: the batch.",
        )
    return text
