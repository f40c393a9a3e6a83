"""Report sections on how measured quantities scale: compute (FLOPs), time, memory; the crossover of
attention with the LSTM, the convolution and linear attention; the fraction of the device's compute peak.

Every number made of times uses only points whose time is to be trusted, read on one clock (bench.clock),
and names that clock in numbers.json; where too few such points are left, the number is not computed and
the text says why."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

import models

from .. import clock, fits
from ..machine import machine_identity, node_facts
from ..peak import peak_on, stored_peaks
from ..spec import device_keys
from ..timing import CPU, WALL
from . import style
from .context import ReportContext

METRIC_LABEL = {"time": "time per call (s)", "flops": "FLOPs (counted)", "memory": "peak allocated bytes"}
AXIS_LABEL = {"time": "time per call", "flops": "FLOPs per call (counted)", "memory": "peak allocated"}
AXIS_UNIT = {"time": "s", "flops": "FLOP", "memory": "B"}  # the y ticks carry the unit: "300 µs", "1 GB"
CROSSOVER_K = 3  # the kernel size of the convolution attention is compared with
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


def _fixed_text(fixed: dict) -> str:
    """The sizes a sweep holds fixed, as fits.fit_table writes them in its `fixed` column."""
    return ", ".join(
        f"{k}={int(v)}" for k, v in fixed.items() if k in ("n", "d", "k", "heads", "window") and not pd.isna(v)
    )


def on_sweep_clocks(data: pd.DataFrame) -> pd.DataFrame:
    """Each source's and layer's sweep of `data` (primary_sweeps) with its time on the sweep's one clock, as its
    fit reads it (bench.clock.on_clock: `time_s`, `time_s_iqr`, `clock`)."""
    if data.empty:
        return data
    parts = [clock.on_clock(group) for _, group in data.groupby(["source", "layer"], sort=False)]
    return pd.concat(parts, ignore_index=True)


def trusted_times(points: pd.DataFrame, on: str | None = None) -> tuple[pd.DataFrame, int, str]:
    """(the points whose time on one clock is to be trusted, their time in `time_s`; how many were left out;
    the clock): the clock is `on`, or the group's (bench.clock.group_clock)."""
    timed = clock.on_clock(points, on)
    kept = timed[timed["time_ok"].astype(bool) & (timed["time_s"] > 0)]
    return kept, len(timed) - len(kept), timed["clock"].iloc[0] if len(timed) else WALL


def primary_sweeps(points: pd.DataFrame, variable: str) -> pd.DataFrame:
    """For each source and layer, the sweep of `variable` with the most points (ties: the smallest other
    sizes), labelled in a `sweep` column such as 'd=32' and, in `fit_fixed`, as fits.csv's `fixed`."""
    best: dict[tuple, tuple] = {}
    for fixed, group in fits.sweeps(points, variable):
        source = group["source"].iloc[0]
        key = (source, fixed["layer"])
        label = ", ".join(f"{k}={int(v)}" for k, v in fixed.items() if k in ("n", "d", "batch") and not pd.isna(v))
        rank = (-group[variable].nunique(), tuple(0 if pd.isna(v) else v for k, v in fixed.items() if k in ("d", "n")))
        if key not in best or rank < best[key][0]:
            best[key] = (rank, group.assign(sweep=label, fit_fixed=_fixed_text(fixed)))
    if not best:
        return pd.DataFrame()
    return pd.concat([g for _, g in best.values()], ignore_index=True)


def _predicted_from_formula(metric: str, variable: str) -> Callable:
    """exponent(source, layer, sweep) from the formulas (fits.predicted_exponent), over the range of the
    sweep drawn that fits.fit_table would fit (so the slope is the fits table's `predicted`), else over the
    whole sweep; None where the layer's formula cannot be evaluated (a size it needs not stored, an
    unknown layer)."""

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


def _predicted_from_fits(fit_rows: pd.DataFrame, metric: str, variable: str) -> Callable:
    """exponent(source, layer, sweep): the `predicted` of the fit row of that very sweep (what the fits
    table shows), else the formula's slope over the sweep drawn."""
    rows = fit_rows[(fit_rows["metric"] == metric) & (fit_rows["variable"] == variable)]
    table = {
        (r.source, r.layer, r.fixed, float(r.batch)): r.predicted for r in rows.itertuples() if not pd.isna(r.predicted)
    }
    fallback = _predicted_from_formula(metric, variable)

    def exponent(source, layer, sweep):
        first = sweep.iloc[0]
        value = None
        if "fit_fixed" in sweep:
            value = table.get((source, layer, first["fit_fixed"], float(first["batch"])))
        return fallback(source, layer, sweep) if value is None else float(value)

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
    """One panel per value of `data[panel]` (titled `titles[value]`; in that order), axes shared, so
    panels of two machines read against one scale; in each, one line per layer in its colour and marker,
    never pooled across sources. Time gets error bars of ± IQR/2 per point; `exponent(source, layer,
    sweep)`, where given, a dashed guide per layer with that slope through its largest point, the slope
    named in the legend. Log-log, x ticks at the measured sizes, legend right of the last panel."""
    keys = [key for key in titles if (data[panel] == key).any()]
    palette, markers = style.layer_palette(data["layer"].unique()), style.layer_markers(data["layer"].unique())
    fig, axes = style.panels(len(keys))
    for ax in axes:
        ax.set_xscale("log")
        ax.set_yscale("log")
    guides: dict[str, list[str]] = {}
    pending = []
    for ax, key in zip(axes, keys):
        part = data[data[panel] == key]
        for layer in style.layer_order(part["layer"].unique()):
            sweep = part[part["layer"] == layer].sort_values(variable)
            sweep = sweep[sweep[column].notna() & (sweep[column] > 0)]
            if sweep.empty:
                continue
            xs, ys = sweep[variable].to_numpy(float), sweep[column].to_numpy(float)
            color = palette[layer]
            ax.plot(xs, ys, color=color, marker=markers[layer], markersize=5, linewidth=1.6, label=layer, zorder=3)
            iqr = "time_s_iqr" if column == "time_s" else "time_iqr_s"
            if metric == "time" and iqr in sweep and sweep[iqr].notna().any():
                half = np.nan_to_num(sweep[iqr].to_numpy(float) / 2, nan=0.0)
                lower = np.minimum(half, 0.95 * ys)  # a log axis has no room at or below 0
                ax.errorbar(xs, ys, yerr=[lower, half], fmt="none", ecolor=color, elinewidth=1.0, capsize=2.5, zorder=2)
            if exponent is not None and len(sweep) >= 2:
                slope = exponent(sweep["source"].iloc[0], layer, sweep)
                if slope is not None and math.isfinite(slope):
                    pending.append((ax, xs, (xs[-1], ys[-1]), slope, layer))
        ax.set_title(titles[key], fontsize=10)
        ax.set_xlabel(variable)
        style.grid(ax)
    axes[0].set_ylabel(AXIS_LABEL[metric])
    style.measured_ticks(axes[0], data[variable], "x")  # the axes are shared: every panel
    style.log_axis(axes[0], "y", style.eng(AXIS_UNIT[metric]))
    for ax, xs, anchor, slope, layer in pending:
        style.slope_guide(ax, xs, anchor, slope, variable, color=palette[layer], label=f"_guide {layer}")
        label = style.slope_label(slope, variable)
        if label not in guides.setdefault(layer, []):
            guides[layer].append(label)
    layers = style.layer_order(data.loc[data[panel].isin(keys), "layer"].unique())
    handles = [
        Line2D([], [], color=palette[layer], marker=markers[layer], markersize=5, linewidth=1.6) for layer in layers
    ]
    labels = [f"{layer}   {' / '.join(guides[layer])}" if layer in guides else layer for layer in layers]
    style.legend_outside(
        axes[-1], handles, labels, title="layer   (dashed guide: predicted slope)" if guides else "layer"
    )
    return fig


def _loglog_plot(
    ctx: ReportContext,
    data: pd.DataFrame,
    variable: str,
    column: str,
    metric: str,
    name: str,
    caption: str,
    fit_rows: pd.DataFrame | None = None,
) -> str:
    titles = {source: ctx.source_label(source) for source in sorted(data["source"].unique())}
    exponent = (
        _predicted_from_formula(metric, variable)
        if fit_rows is None
        else _predicted_from_fits(fit_rows, metric, variable)
    )
    fig = sweep_figure(data, variable, column, metric, titles, exponent=exponent)
    return ctx.figure(fig, name, caption)


def _fit_key(source: str, layer: str, metric: str, variable: str) -> str:
    return f"{source}.{layer}.{metric}.exponent_{variable}"


def _texts_key(row, metric: str) -> tuple:
    return (row.source, row.layer, metric, row.variable, row.fixed, row.batch)


def _sweep_tag(row) -> str:
    """A fit row's sweep in a cite key: its fixed sizes and its batch ("d64.heads4.b4"); two sweeps at the same
    sizes and different batches (the full preset's batch 1 and 8) are two keys."""
    return f"{row.fixed.replace(', ', '.').replace('=', '')}.b{int(row.batch)}"


def cite_fits(ctx: ReportContext, fit_rows: pd.DataFrame) -> dict[tuple, tuple]:
    """Register every fitted exponent; the key without suffix is the widest sweep of that variable that has
    a fit (the primary one). Returns {(source, layer, metric, variable): (text, verdict)} for the primary
    fits and {(source, layer, metric, variable, fixed, batch): (text, verdict, is_primary)} for every row;
    the text is "–" for a row without a fit (too few points, not asymptotic yet)."""
    texts = {}
    for (source, layer, metric, variable), group in fit_rows.groupby(["source", "layer", "metric", "variable"]):
        group = group.assign(
            span=group["sweep_x_max"] / group["sweep_x_min"], has_fit=group["exponent"].notna()
        ).sort_values(["has_fit", "span", "sweep_points"], ascending=False)
        for i, row in enumerate(group.itertuples()):
            text = "–"
            if row.has_fit:
                on = row.clock if metric == "time" and isinstance(row.clock, str) else ""
                note = (
                    f"{metric} ∝ {variable}^e over {variable} = {int(row.x_min)}..{int(row.x_max)} ({row.fixed}, "
                    f"batch {int(row.batch)}{f'; {on} clock' if on else ''}); predicted {row.predicted:.2f} "
                    f"({fits.table1_text(layer) if metric != 'memory' else 'activation estimate'}); "
                    f"verdict {row.verdict} (tolerance ±{row.tolerance:g}): {row.reason}"
                )
                interval = None if math.isnan(row.ci_low) else (round(row.ci_low, 3), round(row.ci_high, 3))
                base = _fit_key(source, layer, metric, variable)
                tag = _sweep_tag(row)
                exponent = round(row.exponent, 3)
                text = ctx.cite(f"{base}.{tag}", exponent, "1", row.run_id, interval=interval, note=note, clock=on)
                if i == 0:
                    ctx.cite(base, exponent, "1", row.run_id, interval=interval, note=note, clock=on)
            texts[_texts_key(row, metric)] = (text, row.verdict, i == 0)
            if i == 0:
                texts[(source, layer, metric, variable)] = (text, row.verdict)
    return texts


def _range_text(row) -> str:
    """The fit range actually used, beside the sweep it came from."""
    swept = f"{int(row.sweep_x_min)}–{int(row.sweep_x_max)}"
    if row.points == 0:
        used = "none"
    elif row.x_min == row.x_max:
        used = f"{row.variable} {int(row.x_min)}"
    else:
        used = f"{row.variable} {int(row.x_min)}–{int(row.x_max)}"
    on = f", {row.clock} clock" if row.metric == "time" and isinstance(row.clock, str) and row.clock else ""
    return (
        f"{used} ({int(row.points)} of {int(row.sweep_points)} points of {row.variable} {swept}; "
        f"{row.range_rule}), {row.fixed}, batch {int(row.batch)}{on}"
    )


def fits_markdown(ctx: ReportContext, fit_rows: pd.DataFrame, metric: str, texts: dict) -> str:
    """Every sweep of `metric`, fitted or not, with its verdict, the reason and the range used; the primary
    one of each layer and variable (the one in the summary table) marked with *."""
    rows = fit_rows[fit_rows["metric"] == metric]
    short = rows[rows["sweep_points"] < fits.MIN_FIT_POINTS]
    rows = rows[rows["sweep_points"] >= fits.MIN_FIT_POINTS]
    note = ""
    if len(short):
        count = ", ".join(
            f"{ctx.cite(f'{source}.{metric}.sweeps_too_short', len(part), 'sweeps', part['run_id'].iloc[-1])} "
            f"on {ctx.source_label(source)}"
            for source, part in short.groupby("source")
        )
        note = (
            f"Sweeps of fewer than {fits.MIN_FIT_POINTS} points, not fitted and not listed here "
            f"(in fits.csv, verdict inconclusive): {count}.\n"
        )
    if rows.empty:
        return "_No sweep with enough points to fit._\n\n" + note
    lines = [
        "| source | layer | variable | measured exponent [95 % CI] | predicted | verdict | reason | "
        "measurement uncertainty | range used |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows.sort_values(["source", "variable", "layer", "fixed", "batch"]).itertuples():
        text, verdict, primary = texts[_texts_key(row, metric)]
        tag = _sweep_tag(row)
        predicted = "–"
        if not math.isnan(row.predicted) and not math.isnan(row.exponent):
            predicted = ctx.cite(
                f"{_fit_key(row.source, row.layer, metric, row.variable)}.{tag}.predicted",
                round(row.predicted, 2),
                "1",
                row.run_id,
                digits=3,
            )
        elif not math.isnan(row.predicted):
            predicted = f"{row.predicted:.3g}"
        lines.append(
            f"| {row.source} | {row.layer}{' *' if primary else ''} | {row.variable} | {text} | {predicted} | "
            f"{fits.VERDICT_MARK[verdict]} {verdict} | {row.reason} | {row.measurement_uncertainty} | "
            f"{_range_text(row)} |"
        )
    return "\n".join(lines) + "\n\n\\* the sweep shown in the summary table (the widest one with a fit).\n\n" + note


def scaling_section(
    ctx: ReportContext, fit_rows: pd.DataFrame, texts: dict, metric: str, title: str, intro: str
) -> str:
    column = fits.METRIC_COLUMN[metric]
    ok = ctx.points[(ctx.points["status"] == "ok") & ctx.points[column].notna()]
    parts = [f"## {title}\n", intro + "\n"]
    for variable in fits.VARIABLES:
        data = primary_sweeps(ok, variable)
        if data.empty:
            continue
        if metric == "time":
            data, column = on_sweep_clocks(data), "time_s"
        parts.append(
            _loglog_plot(
                ctx,
                data,
                variable,
                column,
                metric,
                f"{metric}_vs_{variable}",
                f"{METRIC_LABEL[metric].capitalize()} against {variable}, log-log, per layer "
                f"({', '.join(sorted(set(data['sweep'])))}); {GUIDE_NOTE[metric]}"
                + (f"; {CLOCK_NOTE}; {IQR_NOTE}" if metric == "time" else ""),
                fit_rows,
            )
        )
    parts.append(
        f"Fitted exponents, over {fits.RANGE_RULE_TEXT[metric]}; verdicts as stated under the summary "
        f"table (tolerance ± {fits.TOLERANCE[metric]:g}):\n"
    )
    parts.append(fits_markdown(ctx, fit_rows, metric, texts))
    return "\n".join(parts)


def flops_check(ctx: ReportContext) -> str:
    """Counted against analytic FLOPs, point by point, for each source."""
    ok = ctx.points[ctx.points["status"] == "ok"]
    if ok.empty or ok["flops_counted"].isna().all():
        return "_No counted FLOPs stored._\n"
    both = ok[ok["flops_counted"].notna()]
    lines = []
    for source, part in both.groupby("source"):
        equal = int((part["flops_counted"] == part["flops_analytic"]).sum())
        uncounted = int((part["flops_uncounted_ops"].astype(object).fillna("").astype(str) != "").sum())
        run_id = part["run_id"].iloc[-1]
        lines.append(
            f"- {ctx.source_label(source)}: counted FLOPs equal the closed form at "
            f"{ctx.cite(f'{source}.flops.points_equal', equal, 'points', run_id)} out of "
            f"{ctx.cite(f'{source}.flops.points_counted', len(part), 'points', run_id)} measured; points with "
            f"operators that ran uncounted: {ctx.cite(f'{source}.flops.points_with_uncounted_ops', uncounted, 'points', run_id)}."
        )
    text = "\n".join(lines)
    bad = both[both["flops_counted"] != both["flops_analytic"]]
    if len(bad):
        text += (
            "\n\nPoints where they differ:\n\n"
            + bad[
                ["source", "layer", "n", "d", "k", "flops_counted", "flops_analytic", "flops_uncounted_ops"]
            ].to_markdown(index=False)
            + "\n"
        )
    if "flops_elementwise" in both and both["flops_elementwise"].notna().any():
        share = (
            (both["flops_elementwise"] / (both["flops_counted"] + both["flops_elementwise"]))
            .groupby([both["source"], both["layer"]])
            .median()
            .dropna()
        )
        run_of = both.groupby("source")["run_id"].last()
        items = ", ".join(
            f"{layer} {ctx.cite(f'{source}.{layer}.flops.elementwise_share_median', round(100 * v, 2), '%', run_of[source])}"
            + (f" ({ctx.source_tag(source)})" if both["source"].nunique() > 1 else "")
            for (source, layer), v in share.items()
        )
        text += f"\n\nElement-wise work (softmax, gates, activations; not in the counts above) as a share of all work, median over points: {items}.\n"
    return text + "\n"


def two_term_section(ctx: ReportContext) -> str:
    ok = ctx.points[(ctx.points["status"] == "ok")]
    out = []
    pair = [models.ROLES.attention, models.ROLES.attention_explicit]
    for (source, layer), group in ok[ok["layer"].isin(pair)].groupby(["source", "layer"]):
        timed, left_out, on = trusted_times(group)
        if len(timed) < 4:
            if len(group) >= 4:
                out.append(
                    f"| {source} | {layer} | not fitted: {len(timed)} points whose time is to be trusted, "
                    f"{left_out} unreliable left out | | | | | {len(timed)} |"
                )
            continue
        c, a, b, rms = fits.two_term_fit(timed)
        run_id = group["run_id"].iloc[-1]
        key = f"{source}.{layer}.time.two_term"

        def cite(name, value, unit):
            return ctx.cite(f"{key}.{name}", value, unit, run_id, clock=on)

        ratio = cite("n_equal_over_d", round(a / b, 2), "1") if b > 0 else "–"
        used = f"{len(timed)}" + (f" ({left_out} unreliable left out)" if left_out else "") + f", {on} clock"
        out.append(
            f"| {source} | {layer} | {cite('c', float(f'{c:.3g}'), 's')} | {cite('a', float(f'{a:.3g}'), 's')} | "
            f"{cite('b', float(f'{b:.3g}'), 's')} | {ratio} | {cite('rms_relative_error', round(100 * rms, 1), '%')} "
            f"| {used} |"
        )
    if not out:
        return ""
    return (
        "Two-term fit of attention's time over all its sizes, t ≈ c + a·n·d² + b·n²·d (non-negative least "
        "squares on relative error), over the points whose time is to be trusted, on one clock: a fixed per-call "
        "cost, the projections' term and the scores' term. The n²·d term is the larger one from n/d = a/b on.\n\n"
        "| source | layer | c (s) | a (s per n·d²) | b (s per n²·d) | a/b | rms error | points |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- |\n" + "\n".join(out) + "\n"
    )


CROSSOVER_KINDS = {"time, measured": "X", "FLOPs, counted": "s", "closed form": "o"}  # kind -> marker
CROSSOVER_MARKER_SIZE = {"time, measured": 7, "FLOPs, counted": 5, "closed form": 11}  # a hollow ring around
BATCH_LINESTYLES = ("-", "--", "-.", (0, (1, 1.5)))


def crossover_figure(ctx: ReportContext, data: pd.DataFrame, attention: str):
    """n* against d, one panel per source (two machines are never one line), axes shared: colour = the
    layer compared with (its colour in every figure), marker = how n* was found, line style = the batch."""
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
    """The published rule of thumb for where attention is the cheaper of the two, "-" where none is stated."""
    if other in models.recurrent():
        return "n < d (paper)"
    if other == models.ROLES.attention_linear:
        return "n < d/heads (Katharopoulos et al. 2020)"
    return "-"


def crossover_section(ctx: ReportContext) -> str:
    """Where attention's time and FLOPs overtake the recurrent layer's, the convolution's and linear
    attention's, for each d (the layers by role: models.ROLES); a layer with heads is compared at attention's."""
    ok = ctx.points[ctx.points["status"] == "ok"]
    attention = models.ROLES.attention
    others = [models.ROLES.recurrent, models.ROLES.convolution, models.ROLES.attention_linear]
    rows, lines = [], []
    for (source, d, batch, heads), att in ok[ok["layer"] == attention].groupby(["source", "d", "batch", "heads"]):
        group = ok[(ok["source"] == source) & (ok["d"] == d) & (ok["batch"] == batch)]
        att = att.set_index("n")
        for other in others:
            with_heads = other in models.LAYERS and "heads" in models.LAYERS[other].uses
            oth = group[(group["layer"] == other) & ((group["k"] == CROSSOVER_K) | group["k"].isna())]
            if with_heads:
                oth = oth[oth["heads"] == heads]
            oth = oth.set_index("n")
            common = sorted(set(att.index) & set(oth.index))
            if len(common) < 3:
                continue
            run_id = att["run_id"].iloc[-1]
            on = clock.group_clock(pd.concat([att.loc[common], oth.loc[common]]))
            att_t, oth_t = clock.on_clock(att.loc[common], on), clock.on_clock(oth.loc[common], on)
            timed = [n for n in common if att_t.loc[n, "time_ok"] and oth_t.loc[n, "time_ok"]]
            measured = (
                fits.crossover_n(timed, att_t.loc[timed, "time_s"], oth_t.loc[timed, "time_s"])
                if len(timed) >= 3
                else None
            )
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
                    return (
                        f"none in n = {ns[0]}..{ns[-1]} ({attention} {'costlier' if below else 'cheaper'} throughout)"
                    )
                on_clock = on if what == "time" else ""
                return ctx.cite(f"{base}.{what}_n", int(round(value)), "positions", run_id, clock=on_clock)

            if predicted is None:
                closed = f"none: {attention} costs fewer FLOPs at every n"
            elif predicted == 1:
                closed = f"none: {attention} costs more FLOPs at every n"
            else:
                closed = ctx.cite(base + ".predicted_n", predicted, "positions", run_id)
            lines.append(
                f"| {source} | {int(d)} | {int(batch)} | {other} | {fmt(measured, 'time')} | {fmt(counted, 'flops')} | "
                f"{_crossover_rule(other)} | {closed} |"
            )
            for value, kind in ((measured, "time, measured"), (counted, "FLOPs, counted")):
                if value is not None:
                    rows.append(
                        {"source": source, "d": d, "other": other, "batch": int(batch), "n*": value, "kind": kind}
                    )
            if predicted is not None and predicted > 1:
                rows.append(
                    {
                        "source": source,
                        "d": d,
                        "other": other,
                        "batch": int(batch),
                        "n*": predicted,
                        "kind": "closed form",
                    }
                )
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
            "Crossover n* against d, one panel per machine and device: measured (time), counted (FLOPs) and "
            "solved from the formulas; colour: the layer attention is compared with, line style: the batch.",
        )
    return text


def _stored_peaks(runs: dict[str, dict]) -> dict[tuple[str, str, str], dict]:
    """The compute peaks stored with the runs, by (run id, machine, device key): machine "" for the run's own
    process (meta.json `compute_peak`, bench.peak.stored_peaks); in a cluster sweep (bench.cluster) each
    machine that took part, the best of its nodes' peaks (meta.json `nodes`): one machine's ceiling."""
    out: dict[tuple[str, str, str], dict] = {}
    for run_id, meta in runs.items():
        for key, peak in stored_peaks(meta).items():
            out[(run_id, "", key)] = peak
        for facts in (meta.get("nodes") or {}).values():
            mid = machine_identity(facts)[0]
            for key, peak in stored_peaks(facts).items():
                kept = out.get((run_id, mid, key))
                if kept is None or peak["flops_per_s"] > kept["flops_per_s"]:
                    out[(run_id, mid, key)] = peak
    return out


def _peak_machines(points: pd.DataFrame, runs: dict[str, dict]) -> list[str]:
    """Each row's machine as `_stored_peaks` keys it: its node's in a cluster sweep, "" for the run's own."""
    nodes = points["node"] if "node" in points else [None] * len(points)
    out = []
    for run_id, node in zip(points["run_id"], nodes):
        facts = node_facts(runs.get(run_id, {}), node)
        out.append(machine_identity(facts)[0] if facts else "")
    return out


def point_peaks(points: pd.DataFrame, runs: dict[str, dict], on: str | pd.Series = WALL) -> pd.Series:
    """Each point's device compute peak (FLOP/s) on clock `on` (one clock, or each point's), from its run's
    meta.json, of the machine it ran on (its node's, in a cluster sweep); NaN where none is stored."""
    peaks = _stored_peaks(runs)
    keys = zip(points["run_id"], _peak_machines(points, runs), device_keys(points))
    ons = [on] * len(points) if isinstance(on, str) else list(on)
    values = [peak_on(peaks[key], c) if key in peaks else None for key, c in zip(keys, ons)]
    return pd.Series([math.nan if v is None else v for v in values], index=points.index, dtype=float)


def fraction_of_peak_figure(ctx: ReportContext, ok: pd.DataFrame):
    """Achieved / peak against FLOPs, every point, one panel per source (axes shared), layer colours."""
    titles = {source: ctx.source_label(source) for source in sorted(ok["source"].unique())}
    palette, markers = style.layer_palette(ok["layer"].unique()), style.layer_markers(ok["layer"].unique())
    fig, axes = style.panels(len(titles))
    for ax, (source, title) in zip(axes, titles.items()):
        ax.set_xscale("log")
        ax.set_yscale("log")
        part = ok[ok["source"] == source]
        for layer in style.layer_order(part["layer"].unique()):
            points = part[part["layer"] == layer]
            ax.scatter(
                points["flops_counted"],
                points["fraction"],
                color=palette[layer],
                marker=markers[layer],
                s=26,
                alpha=0.85,
                linewidths=0.4,
                edgecolors="white",
                zorder=3,
            )
        ax.axhline(1.0, color="0.25", linestyle=":", linewidth=1)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("FLOPs per call (counted)")
        style.grid(ax)
    axes[0].set_ylabel("achieved useful FLOP/s / compute peak")
    style.log_axis(axes[0], "x", style.eng("FLOP"))
    style.log_axis(axes[0], "y", style.percent)
    layers = style.layer_order(ok["layer"].unique())
    handles = [
        Line2D([], [], color=palette[layer], marker=markers[layer], linestyle="none", markersize=6) for layer in layers
    ]
    handles.append(Line2D([], [], color="0.25", linestyle=":", linewidth=1))
    style.legend_outside(axes[-1], handles, [*layers, "compute peak"], title="layer")
    return fig


def _peak_line(ctx: ReportContext, source: str, run_id: str, peak: dict) -> str:
    """One device's compute peak, cited on each clock it was measured on."""
    wall = ctx.cite(f"{source}.compute_peak", float(f"{peak['flops_per_s']:.4g}"), "FLOP/s", run_id, clock=WALL)
    cpu = peak_on(peak, CPU) if peak.get("flops_per_s_cpu") else None
    on_cpu = (
        f", {ctx.cite(f'{source}.compute_peak_cpu', float(f'{cpu:.4g}'), 'FLOP/s', run_id, clock=CPU)} on the "
        "CPU clock of its one thread"
        if cpu
        else ""
    )
    if "kernel" not in peak:  # a run from before the compute peak stored its square matmul's median rate
        return (
            f"- {source}: matmul peak {wall} ({peak.get('size')}×{peak.get('size')} {peak.get('dtype', '')} matmul, "
            "median): a run from before the compute peak; a convolution can outrun this rate, so its fractions "
            "may exceed 100 %."
        )
    return (
        f"- {source}: compute peak {wall} on the wall clock{on_cpu} (best: {peak['kernel']}, {peak.get('dtype', '')})."
    )


def peak_section(ctx: ReportContext) -> str:
    """Achieved useful FLOP/s as a fraction of the device's measured compute peak, each point on its own clock,
    points whose time is to be trusted only."""
    ok = ctx.points[(ctx.points["status"] == "ok") & ctx.points["flops_counted"].notna()]
    peaks = _stored_peaks(ctx.runs)
    if ok.empty or not peaks:
        return "_No compute peak stored with the runs._\n"
    ok = clock.each_on_own_clock(ok)
    ok = ok.assign(
        peak=point_peaks(ok, ctx.runs, ok["clock"]), peak_key=device_keys(ok), peak_machine=_peak_machines(ok, ctx.runs)
    )
    ok = ok[ok["peak"].notna()]
    left_out = ok[~ok["time_ok"].astype(bool)]
    ok = ok[ok["time_ok"].astype(bool)]
    ok = ok.assign(achieved=fits.useful_flops(ok) / ok["time_s"])
    ok = ok.assign(fraction=ok["achieved"] / ok["peak"])
    lines = []
    for (run_id, mid, key), peak in sorted(peaks.items()):
        mine = (ok["run_id"] == run_id) & (ok["peak_key"] == key) & (ok["peak_machine"] == mid)
        if mine.any():
            lines.append(_peak_line(ctx, ok.loc[mine, "source"].iloc[0], run_id, peak))
    rows = []
    for (source, layer), group in ok.groupby(["source", "layer"]):
        top = group.sort_values(["flops_counted", "n"]).iloc[-1]
        key = f"{source}.{layer}"
        fraction = ctx.cite(
            f"{key}.fraction_of_peak.largest", round(100 * top.fraction, 1), "%", top.run_id, clock=top.clock
        )
        achieved = ctx.cite(
            f"{key}.achieved_flops_per_s.largest", float(f"{top.achieved:.4g}"), "FLOP/s", top.run_id, clock=top.clock
        )
        rows.append(
            f"| {source} | {layer} | n={int(top.n)}, d={int(top.d)}, batch={int(top.batch)} | {fraction} | "
            f"{achieved} | {top.clock} |"
        )
    text = (
        "Each device's compute peak is the best rate of a few dense kernels (square matmuls, and convolutions, "
        "whose oneDNN kernels outrun the BLAS matmul on some CPUs) over their fastest rounds, measured at the "
        "start and at the end of each run on both clocks, the better kept (bench.peak). Achieved FLOP/s = useful "
        "FLOPs (the counted ones, less the work a kernel skips where the layer states it: a dilated "
        "convolution's taps in the zero padding, bench's `flops_useful`) / median time, each point on its own "
        "clock against the peak on the same clock; points whose time is not to be trusted are left out. Small "
        "problems are dominated by fixed per-call overhead; recurrent layers at a small batch multiply a few "
        "d-vectors by d×d matrices one step after another, matrix-vector work that keeps each weight in use "
        "for one multiply-add per load, so they run far below the peak however long the sequence.\n\n"
        + "\n".join(lines)
        + "\n\n| source | layer | largest point | fraction of peak | achieved | clock |\n"
        "| --- | --- | --- | --- | --- | --- |\n" + "\n".join(rows) + "\n\n"
    )
    above = ", ".join(
        f"{ctx.cite(f'{source}.fraction_of_peak.points_above_peak', int((part['fraction'] > 1).sum()), 'points', part['run_id'].iloc[-1])} "
        f"on {ctx.source_label(source)}"
        for source, part in ok.groupby("source")
    )
    text += f"Points above the peak: {above or 'none'}."
    if len(left_out):
        text += f" Left out, their time not to be trusted: {len(left_out)} points."
    if ok.empty:
        return text + "\n"
    fig = fraction_of_peak_figure(ctx, ok)
    return (
        text
        + "\n\n"
        + ctx.figure(fig, "fraction_of_peak", "Achieved useful FLOP/s over the measured compute peak, every point.")
    )


def memory_pair_plot(ctx: ReportContext) -> str:
    """Fused attention against the explicit form that stores the scores, side by side (models.ROLES)."""
    fused, explicit = models.ROLES.attention, models.ROLES.attention_explicit
    ok = ctx.points[(ctx.points["status"] == "ok") & ctx.points["layer"].isin([fused, explicit])]
    data = primary_sweeps(ok, "n")
    if data.empty:
        return ""
    titles = {source: ctx.source_label(source) for source in sorted(data["source"].unique())}
    fig = sweep_figure(data, "n", "mem_peak_bytes", "memory", titles, exponent=_predicted_from_formula("memory", "n"))
    fig.suptitle("Fused against explicit attention", fontsize=11)
    return ctx.figure(
        fig,
        "memory_attention_pair",
        f"Peak memory of {fused} (fused kernel) and {explicit} (explicit n×n scores) against n; "
        f"{GUIDE_NOTE['memory']}.",
    )


def rss_table(ctx: ReportContext) -> str:
    ok = ctx.points[(ctx.points["status"] == "ok") & ctx.points["mem_rss_peak_bytes"].notna()]
    if ok.empty:
        return ""
    top = ok.sort_values("mem_peak_bytes").groupby(["source", "layer"]).tail(1)
    lines = [
        "| source | layer | point | allocator peak | RSS growth (peak − before) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in top.itertuples():
        key = f"{row.source}.{row.layer}.memory.largest_n{int(row.n)}_d{int(row.d)}_b{int(row.batch)}"
        growth = (
            "–"
            if pd.isna(row.mem_rss_base_bytes)
            else ctx.cite(
                key + ".rss_growth_bytes", int(row.mem_rss_peak_bytes - row.mem_rss_base_bytes), "B", row.run_id
            )
        )
        lines.append(
            f"| {row.source} | {row.layer} | n={int(row.n)}, d={int(row.d)}, batch={int(row.batch)} | "
            f"{ctx.cite(key + '.peak_bytes', int(row.mem_peak_bytes), 'B', row.run_id)} | {growth} |"
        )
    return (
        "The allocator's figure against what the operating system saw (resident set, VmHWM): the allocator "
        "reuses freed blocks and the OS counts pages touched, so they differ (an RSS growth of 0 B means the "
        "allocation was served from memory the process already held); largest point per layer:\n\n"
        + "\n".join(lines)
        + "\n"
    )


def sequential_time_section(ctx: ReportContext) -> str:
    """Parallelism seen in time: at the smallest batch and d with an n-sweep, the recurrent layers' n
    dependent steps against a parallel scan's log₂ n levels and attention's and convolution's one parallel
    pass. On a GPU, attention and convolution stay nearly flat until the device fills while the recurrence
    grows ~linearly in n."""
    ok = ctx.points[ctx.points["status"] == "ok"]
    wanted = [*models.recurrent(), *models.scans(), models.ROLES.convolution, models.ROLES.attention]
    parts, frames = [], []
    for source, part in ok.groupby("source"):
        part = part[part["layer"].isin(wanted) & ((part["k"] == 3) | part["k"].isna())]
        sizes = part.groupby(["batch", "d"]).filter(lambda g: g.groupby("layer")["n"].nunique().ge(3).sum() >= 2)
        if sizes.empty:
            continue
        batch, d = sizes.sort_values(["batch", "d"]).iloc[0][["batch", "d"]]
        sweep = sizes[(sizes["batch"] == batch) & (sizes["d"] == d)]
        title = f"{ctx.source_label(source)}\nbatch {int(batch)}, d={int(d)}"
        # one line per layer and source, nothing averaged
        shown = sweep.drop_duplicates(["layer", "n"], keep="last")
        frames.append(on_sweep_clocks(shown).assign(panel=source, title=title))
        growth = []
        for layer, g in shown.groupby("layer"):
            g, left_out, on = trusted_times(g.sort_values("n"))
            if len(g) < 3:
                if left_out:
                    growth.append(f"{layer} not computed ({left_out} of its lengths with an unreliable time)")
                continue
            n_lo, n_hi = int(g.n.iloc[0]), int(g.n.iloc[-1])
            factor = g["time_s"].iloc[-1] / g["time_s"].iloc[0]
            key = f"{source}.{layer}.time.growth_n{n_lo}_to_n{n_hi}_b{int(batch)}_d{int(d)}"
            growth.append(
                f"{layer} {ctx.cite(key, round(factor, 2), 'x', g.run_id.iloc[-1], clock=on)} "
                f"(n = {n_lo} to {n_hi}, {n_hi // n_lo}x longer, {on} clock"
                + (f"; {left_out} unreliable lengths left out)" if left_out else ")")
            )
        parts.append(f"- {source} (batch {int(batch)}, d = {int(d)}), time grows by: " + "; ".join(growth) + ".")
    if not frames:
        return ""
    data = pd.concat(frames, ignore_index=True)
    titles = dict(sorted(zip(data["panel"], data["title"])))
    fig = sweep_figure(
        data, "n", "time_s", "time", titles, panel="panel", exponent=_predicted_from_formula("time", "n")
    )
    return (
        "### Sequential operations seen in time\n\nA recurrent layer must take its n steps one after "
        "another; a linear recurrence computed by a parallel scan takes log₂ n levels; attention and "
        "convolution process all positions at once. Where the device has "
        "parallel capacity to spare (a GPU at small batch and width), attention's and convolution's time "
        "stays nearly flat in n until the device fills, while the recurrence's grows about linearly; "
        "a CPU with few cores is already full, so there every layer's time grows with its work.\n\n"
        + "\n".join(parts)
        + "\n\n"
        + ctx.figure(
            fig,
            "time_sequential",
            "Time against n at the smallest batch and width swept: the "
            "recurrent layers' sequential steps against a parallel scan's levels and attention's and "
            "convolution's parallel pass; "
            f"{GUIDE_NOTE['time']}; {CLOCK_NOTE}; {IQR_NOTE}.",
        )
    )
