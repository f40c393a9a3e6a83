"""Report section: maximum path length and sequential operations, from paths.csv (measured by bench.paths)."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import pandas as pd

import models

from .. import outside
from . import style
from .context import ReportContext

TITLE = "## Maximum path length and sequential operations\n"
SIZE_SYMBOL = {"k": "k", "window": "r"}  # what a path depends on besides n, as the formulas write it


def _path_size(layer: str) -> str | None:
    sizes = [s for s in getattr(models.LAYERS[layer].table1, "sizes", ()) if s in SIZE_SYMBOL]
    return sizes[0] if sizes else None


def _plot_layers() -> dict[str, list[str]]:
    """{first layer: every layer with its path rule}: one line per rule (conv and conv_separable share one)."""
    by_rule: dict[int, list[str]] = {}
    for name, cls in models.LAYERS.items():
        by_rule.setdefault(id(cls.path), []).append(name)
    return {names[0]: names for names in by_rule.values()}


def _int(value) -> int | None:
    return None if value is None or pd.isna(value) else int(value)


def _latest(ctx: ReportContext) -> pd.DataFrame:
    """The newest row per layer and sizes of the primary machine's paths study (exact: the same on every machine)."""
    rows = ctx.paths.copy()
    if "machine" in rows:
        machines = list(dict.fromkeys(rows["machine"]))
        rows = rows[rows["machine"] == (ctx.primary if ctx.primary in machines else machines[0])]
    for column in SIZE_SYMBOL:
        if column not in rows:
            rows[column] = pd.NA
    rows["_started"] = rows["run_id"].map(lambda r: ctx.runs.get(r, {}).get("started_utc") or "")
    rows = rows.sort_values("_started", kind="stable").drop_duplicates(["layer", "n", *SIZE_SYMBOL], keep="last")
    order = {name: i for i, name in enumerate(models.LAYERS)}
    rows["_order"] = rows["layer"].map(lambda name: order.get(name, len(order)))
    return rows.sort_values(["_order", "k", "window", "n"]).drop(columns=["_started", "_order"])


def _prefix(row) -> str:
    return f"{row.machine}.paths" if "machine" in row.index else "paths"


def _key(row, what: str) -> str:
    """<machine>.paths.<layer>[.k<k>][.r<window>].n<n>.<what>"""
    parts = [_prefix(row), row.layer]
    if _int(row.k) is not None:
        parts.append(f"k{_int(row.k)}")
    if _path_size(row.layer) == "window" and _int(row.window) is not None:
        parts.append(f"r{_int(row.window)}")
    return ".".join(parts + [f"n{int(row.n)}", what])


def _cite(ctx: ReportContext, row, column: str, unit: str, absent: str = "never") -> str:
    if column not in row.index:  # a paths.csv from before the column existed
        return "–"
    value = _int(row[column])
    return absent if value is None else ctx.cite(_key(row, column), value, unit, row.run_id)


def _at_ends(ctx: ReportContext, lo, hi, column: str, unit: str, join: str = ", ", at_n: bool = True) -> str:
    """A column cited at both ends of the study: "63 layers at n = 64, 255 layers at n = 256"."""
    return join.join(_cite(ctx, row, column, unit) + (f" at n = {int(row.n)}" if at_n else "") for row in (lo, hi))


def _label(row, names: list[str] | None = None) -> str:
    name = ", ".join(names or [row.layer])
    size = _path_size(row.layer)
    return name if size is None else f"{name} {SIZE_SYMBOL[size]}={_int(row[size])}"


def _table(ctx: ReportContext, rows: pd.DataFrame) -> str:
    lines = [
        "| layer | k | r | n | layers to cross (measured) | closed form | path hops | sequential depth "
        "(ops) | depth measured on | forward depth (ops) | reference depth (ops) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for _, row in rows.iterrows():
        k, r = _int(row.k), _int(row.window)
        lines.append(
            f"| {row.layer} | {'' if k is None else k} | {'' if r is None else r} | {int(row.n)} | "
            f"{_cite(ctx, row, 'layers_to_cross', 'layers')} | "
            f"{_cite(ctx, row, 'layers_to_cross_formula', 'layers', '–' if outside.is_outside(row.layer) else 'never')} | "
            f"{_cite(ctx, row, 'path_hops', 'steps')} | {_cite(ctx, row, 'seq_depth', 'ops', 'not measured')} | "
            f"{row.get('seq_depth_of', '')} | {_cite(ctx, row, 'seq_depth_forward', 'ops', 'not measured')} | "
            f"{_reference_depth(ctx, row)} |"
        )
    return "\n".join(lines) + "\n"


def _reference_depth(ctx: ReportContext, row) -> str:
    if "seq_depth_reference" not in row.index or pd.isna(row["seq_depth_reference"]):
        return ""
    return _cite(ctx, row, "seq_depth_reference", "ops")


def _ends(rows: pd.DataFrame, layer: str) -> list[tuple[object, pd.Series, pd.Series]]:
    """(k or window, row at the smallest n, row at the largest n) for each k or window of `layer`."""
    out = []
    part = rows[rows["layer"] == layer]
    group_by = _path_size(layer) or "k"
    for size, group in part.groupby(part[group_by].astype("Float64").fillna(-1), sort=True):
        group = group.sort_values("n")
        if len(group) >= 1:
            out.append((None if size == -1 else int(size), group.iloc[0], group.iloc[-1]))
    return out


def _findings(ctx: ReportContext, rows: pd.DataFrame) -> list[str]:
    items = []
    growing = [name for name in models.LAYERS if _path_size(name) is not None]
    for layer in growing:
        rule = models.LAYERS[layer].path
        for size, lo, hi in _ends(rows, layer):
            text = (
                f"- **{layer}** ({SIZE_SYMBOL[_path_size(layer)]} = {size}): "
                f"{_at_ends(ctx, lo, hi, 'layers_to_cross', 'layers')}; the closed form "
                f"{rule.text} gives {_at_ends(ctx, lo, hi, 'layers_to_cross_formula', 'layers', ' and ', False)}."
            )
            if rule.margin is not None:
                text += (
                    f" Measured with the two positions inside a longer sequence ({_cite(ctx, hi, 'margin', 'positions')} "
                    f"more each side at n = {int(hi.n)}): the centered k^l stack has one path from 0 to "
                    f"n−1, and for most n it runs outside 0..n−1, where zero padding cuts it. The same stack "
                    f"zero-padded at length n itself: {_at_ends(ctx, lo, hi, 'layers_to_cross_no_margin', 'layers')} "
                    f"(never: position n−1 is unreachable at any depth)."
                )
            items.append(text)
    for layer in [name for name in models.LAYERS if name not in growing]:
        for _, lo, hi in _ends(rows, layer):
            items.append(
                f"- **{layer}**: {_at_ends(ctx, lo, hi, 'layers_to_cross', 'layers', ' and ')}; on its way to position n−1 "
                f"information from position 0 passes {_at_ends(ctx, lo, hi, 'path_hops', 'steps', ' and ', False)} "
                f"(dependent steps: {_hops_of(lo)})."
            )
    return items


def _hops_of(row) -> str:
    what = row.get("path_hops_of", "")
    return what if isinstance(what, str) and what else "layers crossed"


def _ratio(ctx: ReportContext, lo, hi, layer: str, column: str) -> str:
    ratio = hi[column] / lo[column] if lo[column] else math.nan
    return (
        f"×{ctx.cite(f'{_prefix(hi)}.{layer}.{column}.ratio_n{int(hi.n)}_n{int(lo.n)}', round(ratio, 2), '1', hi.run_id)} "
        f"for ×{ctx.cite(f'{_prefix(hi)}.{layer}.n_ratio_n{int(hi.n)}_n{int(lo.n)}', round(hi.n / lo.n, 2), '1', hi.run_id)} "
        "in n"
    )


def _scan_depth_text(ctx: ReportContext, rows: pd.DataFrame) -> str:
    parts = []
    for layer in models.scans():
        for _, lo, hi in _ends(rows, layer):
            levels = " → ".join(str(models.LAYERS[layer].scan_levels(int(row.n))) for row in (lo, hi))
            text = (
                f"{layer}'s forward goes from {_at_ends(ctx, lo, hi, 'seq_depth', 'ops', ' to ')} "
                f"({_ratio(ctx, lo, hi, layer, 'seq_depth')}; ⌈log₂ n⌉ = {levels} levels)"
            )
            if "seq_depth_reference" in hi.index and not pd.isna(hi.seq_depth_reference):
                text += (
                    f", while its step-by-step reference, the same recurrence as a loop over time, goes from "
                    f"{_at_ends(ctx, lo, hi, 'seq_depth_reference', 'ops', ' to ', False)} "
                    f"({_ratio(ctx, lo, hi, layer, 'seq_depth_reference')})"
                )
            parts.append(text)
    if not parts:
        return ""
    return (
        "A recurrence that is linear in its state is associative, so a parallel scan computes it in ⌈log₂ n⌉ "
        "levels of shifted multiply-adds, and the probe sees them in its forward: " + "; ".join(parts) + ". "
    )


def _depth_text(ctx: ReportContext, rows: pd.DataFrame) -> str:
    text = (
        "Sequential depth is the longest chain of dependent operators in one forward pass of one layer, "
        "recorded at the operator level (each operator's outputs get 1 + the deepest of its inputs; views "
        "count nothing). The recurrent layers' depth is measured on their transparent step-by-step "
        "reference (`.reference()`, the same weights), because a fused library kernel hides its loop over "
        "time: "
    )
    parts = []
    for layer in models.recurrent():
        for _, lo, hi in _ends(rows, layer):
            parts.append(
                f"{layer}'s reference goes from {_at_ends(ctx, lo, hi, 'seq_depth', 'ops', ' to ')} "
                f"({_ratio(ctx, lo, hi, layer, 'seq_depth')}), while its forward pass measures "
                f"{_at_ends(ctx, lo, hi, 'seq_depth_forward', 'ops', ' and ', False)}"
            )
    text += "; ".join(parts) + ". " if parts else ""
    text += (
        "(The paths study runs on the CPU in float32, where PyTorch runs nn.LSTM as one oneDNN operator, "
        "whose depth does not see n, but nn.RNN and nn.GRU as a loop of per-step operators that the probe "
        "does see.) "
    )
    text += _scan_depth_text(ctx, rows)
    consts = []
    for layer in [name for name in models.LAYERS if name not in models.stepwise()]:
        for _, lo, hi in _ends(rows, layer)[:1]:  # the depth of one layer does not depend on k or r
            consts.append(f"{layer} {_at_ends(ctx, lo, hi, 'seq_depth', 'ops')}")
    if consts:
        text += "The layers without a step loop stay constant in n: " + "; ".join(consts) + ".\n"
    return text


def _figure(ctx: ReportContext, rows: pd.DataFrame) -> str:
    lines = _plot_layers()
    data = rows[rows["layer"].isin(list(lines)) & rows["layers_to_cross"].notna()].copy()
    if data.empty:
        return ""
    data["series"] = [_label(row, lines[row.layer]) for _, row in data.iterrows()]
    data["layers_to_cross"] = data["layers_to_cross"].astype(float)
    series = list(dict.fromkeys(data["series"]))
    # each line in its (first) layer's colour; a layer's further sizes (k=5 after k=3) lighter, other markers
    palette = style.layer_palette(data["layer"].unique())
    first = {name: group["layer"].iloc[0] for name, group in data.groupby("series", sort=False)}
    rank = {name: [s for s in series if first[s] == first[name]].index(name) for name in series}
    colors = {
        name: tuple(c + (1 - c) * min(0.45, 0.3 * rank[name]) for c in palette[first[name]][:3]) for name in series
    }
    markers = {name: style.MARKERS[rank[name] % len(style.MARKERS)] for name in series}
    fig, ax = plt.subplots(figsize=(6.0, 4.2))
    handles = []
    for name in series:
        group = data[data["series"] == name].sort_values("n")
        (line,) = ax.plot(
            group["n"].to_numpy(float),
            group["layers_to_cross"].to_numpy(float),
            color=colors[name],
            marker=markers[name],
            markersize=6,
            linewidth=1.6,
            zorder=3,
        )
        handles.append(line)
        formula = group.dropna(subset=["layers_to_cross_formula"])
        ax.plot(
            formula["n"].to_numpy(float),
            formula["layers_to_cross_formula"].astype(float).to_numpy(),
            linestyle="--",
            linewidth=1,
            marker="x",
            markersize=9,
            color=colors[name],
            zorder=2,
        )
    ax.set(xscale="log", yscale="log", xlabel="n (positions)", ylabel="layers for position 0 to reach n−1")
    style.measured_ticks(ax, data["n"], "x")
    low, high = ax.get_ylim()
    ax.set_ylim(low / 1.3, high * 1.3)  # room for the markers at the ends
    style.log_axis(ax, "y", style.plain)
    style.grid(ax)
    style.legend_outside(ax, handles, series, title="measured (dashed, ×: closed form)")
    return ctx.figure(
        fig,
        "paths_layers_to_cross",
        "Layers to cross against n",
        "Layers stacked until output n−1 depends on input 0, measured on the real layers (solid) "
        "against the closed form (dashed, crosses), log-log.",
    )


def paths_section(ctx: ReportContext) -> str:
    if ctx.paths is None or len(ctx.paths) == 0:
        return TITLE + "\nNo paths were stored: no run has a paths.csv (`python -m bench paths`).\n"
    rows = _latest(ctx)
    machine = rows["machine"].iloc[0] if "machine" in rows and len(rows) else None
    where = f"On {ctx.machine_words(machine)}: m" if machine else "M"
    parts = [
        TITLE,
        f"{where}easured on the real layers (batch 1, small width, float32), never taken from the formula. "
        "*Layers to cross*: fresh layers of one kind are stacked until output position n−1 depends on input "
        "position 0; after each layer, the positions that depend on input 0 are found by setting them to NaN "
        "and seeing which outputs turn NaN (exact where no layer masks by multiplying with zero, which none "
        "here does; the tests check it against forward-mode derivatives). *Path hops*: the dependent steps "
        "information from position 0 passes through on its way to n−1: for a recurrent layer the cell steps "
        "of its step-by-step reference, followed operator by operator; for attention and convolution one per "
        "layer crossed.\n",
        "\n".join(_findings(ctx, rows)) + "\n",
        _figure(ctx, rows),
        _depth_text(ctx, rows),
        _table(ctx, rows),
    ]
    if "error" in rows:
        failed = rows[rows["error"].notna() & (rows["error"].astype(str).str.strip() != "")]
        if len(failed):
            parts.append(
                "Stacks that never crossed (recorded, not dropped):\n\n"
                + "\n".join(f"- {_label(row)}, n = {int(row.n)}: {row.error}" for _, row in failed.iterrows())
                + "\n"
            )
    return "\n".join(part for part in parts if part)
