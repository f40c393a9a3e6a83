"""Sections on how FLOPs, time and memory scale with n, d and k: figures, fits, attention's two-term time model."""

from __future__ import annotations

import math
from collections.abc import Callable

import pandas as pd

import models

from .. import fits
from ..spec import TRAIN_MODE
from .context import ReportContext
from .numbers import sweep_tag
from .sweep_plot import (
    CALL,
    CLOCK_NOTE,
    FORWARD,
    GUIDE_NOTE,
    HOLLOW_NOTE,
    IQR_NOTE,
    axis_label,
    on_sweep_clocks,
    panel_mode,
    predicted_from_formula,
    primary_sweeps,
    sweep_figure,
    trusted_times,
)


def modes_caption(data: pd.DataFrame, metric: str) -> str:
    """What a figure's panels show, by mode: "Time per forward pass (per training step in the -train panels)"."""
    modes = sorted({panel_mode(part) for _, part in data.groupby("source")}, key=lambda m: m == TRAIN_MODE)
    text = axis_label(metric, modes[0] if modes else None)
    others = [f"per {CALL.get(m, FORWARD)} in the -{m} panels" for m in modes[1:]]
    text += f" ({'; '.join(others)})" if others else ""
    return text[0].upper() + text[1:]


def sweeps_caption(data: pd.DataFrame) -> str:
    """The sweeps drawn, "batch=4, d=32; batch=1, d=64", with how they are told apart where there are several."""
    sweeps = sorted(set(data["sweep"]))
    if len(sweeps) < 2:
        return sweeps[0] if sweeps else ""
    return "; ".join(sweeps) + ": one line style per sweep, named in the legend"


def predicted_from_fits(fit_rows: pd.DataFrame, metric: str, variable: str) -> Callable:
    """exponent(source, layer, sweep): the fits table's `predicted` for that sweep, else the formula's."""
    rows = fit_rows[(fit_rows["metric"] == metric) & (fit_rows["variable"] == variable)]
    table = {
        (r.source, r.layer, r.fixed, float(r.batch)): r.predicted for r in rows.itertuples() if not pd.isna(r.predicted)
    }
    fallback = predicted_from_formula(metric, variable)

    def exponent(source, layer, sweep):
        first = sweep.iloc[0]
        value = None
        if "fit_fixed" in sweep:
            value = table.get((source, layer, first["fit_fixed"], float(first["batch"])))
        return fallback(source, layer, sweep) if value is None else float(value)

    return exponent


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
        predicted_from_formula(metric, variable)
        if fit_rows is None
        else predicted_from_fits(fit_rows, metric, variable)
    )
    fig = sweep_figure(data, variable, column, metric, titles, exponent=exponent)
    return ctx.figure(fig, name, f"{metric} against {variable}, log-log", caption)


def _fit_key(source: str, layer: str, metric: str, variable: str) -> str:
    return f"{source}.{layer}.{metric}.exponent_{variable}"


def _texts_key(row, metric: str) -> tuple:
    return (row.source, row.layer, metric, row.variable, row.fixed, row.batch)


def cite_fits(ctx: ReportContext, fit_rows: pd.DataFrame) -> dict[tuple, tuple]:
    """Cite every fitted exponent, the primary one (the widest sweep that decides, else with a fit) also unsuffixed:
    {(source, layer, metric, variable): (text, verdict, predicted, reason, class)}, {(.., fixed, batch): (.., primary)}."""
    texts = {}
    for (source, layer, metric, variable), group in fit_rows.groupby(["source", "layer", "metric", "variable"]):
        group = group.assign(
            span=group["sweep_x_max"] / group["sweep_x_min"],
            has_fit=group["exponent"].notna(),
            decided=group["verdict"].isin(fits.DECIDED),
        ).sort_values(["decided", "has_fit", "span", "sweep_points"], ascending=False)
        for i, row in enumerate(group.itertuples()):
            text = "–"
            if row.has_fit:
                on = row.clock if metric == "time" and isinstance(row.clock, str) else ""
                fastest = on and getattr(row, "statistic", "") == "min"
                note = (
                    f"{metric} ∝ {variable}^e over {variable} = {int(row.x_min)}..{int(row.x_max)} ({row.fixed}, "
                    f"batch {int(row.batch)}{f'; {on} clock' if on else ''}"
                    f"{', the fastest round of each point' if fastest else ''}); "
                    f"{f'predicted {row.predicted:.2f} ' if math.isfinite(row.predicted) else ''}"
                    f"({fits.predicted_text(layer, row.mode, metric)}); "
                    f"verdict {row.verdict} (tolerance ±{row.tolerance:g}): {row.reason}"
                )
                interval = None if math.isnan(row.ci_low) else (round(row.ci_low, 3), round(row.ci_high, 3))
                base = _fit_key(source, layer, metric, variable)
                tag = sweep_tag(row.fixed, row.batch)
                exponent = round(row.exponent, 3)
                text = ctx.cite(f"{base}.{tag}", exponent, "1", row.run_id, interval=interval, note=note, clock=on)
                if i == 0:
                    ctx.cite(base, exponent, "1", row.run_id, interval=interval, note=note, clock=on)
            texts[_texts_key(row, metric)] = (text, row.verdict, i == 0)
            if i == 0:
                best = row.complexity_class if row.has_fit and isinstance(row.complexity_class, str) else None
                texts[(source, layer, metric, variable)] = (text, row.verdict, float(row.predicted), row.reason, best)
    return texts


def _range_text(row) -> str:
    swept = f"{int(row.sweep_x_min)}–{int(row.sweep_x_max)}"
    if row.points == 0:
        used = "none"
    elif row.x_min == row.x_max:
        used = f"{row.variable} {int(row.x_min)}"
    else:
        used = f"{row.variable} {int(row.x_min)}–{int(row.x_max)}"
    on = f", {row.clock} clock" if row.metric == "time" and isinstance(row.clock, str) and row.clock else ""
    on += ", fastest rounds" if on and getattr(row, "statistic", "") == "min" else ""
    return (
        f"{used} ({int(row.points)} of {int(row.sweep_points)} points of {row.variable} {swept}; "
        f"{row.range_rule}), {row.fixed}, batch {int(row.batch)}{on}"
    )


def fits_markdown(ctx: ReportContext, fit_rows: pd.DataFrame, metric: str, texts: dict) -> str:
    """Every sweep of `metric` with its verdict, reason and range used; the primary one marked with *."""
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
        tag = sweep_tag(row.fixed, row.batch)
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
                f"{modes_caption(data, metric)} against {variable}, log-log, per layer "
                f"({sweeps_caption(data)}); {GUIDE_NOTE[metric]}"
                + (f"; {CLOCK_NOTE}; {IQR_NOTE}; {HOLLOW_NOTE}" if metric == "time" else ""),
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


def memory_pair_plot(ctx: ReportContext) -> str:
    fused, explicit = models.ROLES.attention, models.ROLES.attention_explicit
    ok = ctx.points[(ctx.points["status"] == "ok") & ctx.points["layer"].isin([fused, explicit])]
    data = primary_sweeps(ok, "n")
    if data.empty:
        return ""
    titles = {source: ctx.source_label(source) for source in sorted(data["source"].unique())}
    fig = sweep_figure(data, "n", "mem_peak_bytes", "memory", titles, exponent=predicted_from_formula("memory", "n"))
    fig.suptitle("Fused against explicit attention", fontsize=11)
    return ctx.figure(
        fig,
        "memory_attention_pair",
        "Peak memory against n, fused and explicit attention",
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
    """Parallelism seen in time (smallest batch and d, an n-sweep): recurrences against a scan, attention, conv."""
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
    fig = sweep_figure(data, "n", "time_s", "time", titles, panel="panel", exponent=predicted_from_formula("time", "n"))
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
            "Time against n, sequential and parallel layers",
            "Time against n at the smallest batch and width swept: the "
            "recurrent layers' sequential steps against a parallel scan's levels and attention's and "
            "convolution's parallel pass; "
            f"{GUIDE_NOTE['time']}; {CLOCK_NOTE}; {IQR_NOTE}.",
        )
    )
