"""The first table: a row per layer, a column per machine · device · mode, each cell a verdict and exponent in n."""

from __future__ import annotations

import math

import pandas as pd

import models

from .. import fits
from ..spec import DECODE_MODES, MODES, device_key
from .context import ReportContext
from .headline import path_cell, why_no_exponent

QUESTION = (
    "Does each layer's {what} grow with n as Vaswani et al. (2017), Table 1, predicts, on every machine, device "
    "and mode measured?"
)
WHAT = {"time": "time", "flops": "count of FLOPs", "memory": "peak memory"}
EMPTY = "·"
NO_BREAK = "\u00a0"


def _where(ctx: ReportContext) -> dict[str, tuple]:
    rows = ctx.every_point()
    if rows.empty:
        return {}
    rows = rows.drop_duplicates("source", keep="last")
    causal = rows["causal"] if "causal" in rows else pd.Series(False, index=rows.index)
    return {
        s: (ctx.machine_of_source(s), str(dev), str(dt), str(mode), bool(c) if pd.notna(c) else False)
        for s, dev, dt, mode, c in zip(rows["source"], rows["device"], rows["dtype"], rows["mode"], causal)
    }


def columns(ctx: ReportContext) -> list[str]:
    """The sources in column order: machine (the report's own first), device, float32 first, Table 1's modes in order."""
    where = _where(ctx)
    machines = list(dict.fromkeys(where[s][0] for s in ctx.sources() if s in where))
    machines += [m for m in dict.fromkeys(w[0] for w in where.values()) if m not in machines]

    def order(source: str) -> tuple:
        machine, device, dtype, mode, causal = where[source]
        return machines.index(machine), device, dtype != "float32", dtype, MODES.index(mode), causal

    return sorted(where, key=order)


def _short(words: str) -> str:
    """ "H100 on Intel Xeon, 16 cores (vm)" -> "H100"; "Intel Xeon, 2 cores (vm)" -> "Intel Xeon 2c"."""
    if " on " in words:
        return words.split(" on ")[0]
    model, _, rest = words.partition(", ")
    cores = rest.split(" cores")[0] if " cores" in rest else ""
    return f"{model.split(' (')[0]} {cores}c" if cores.isdigit() else model.split(" (")[0]


def column_label(ctx: ReportContext, source: str) -> str:
    words = {
        ctx.machine_of_source(s): ctx.source_label(s).split(" · ")[0].removeprefix("reference: ") for s in ctx.labels
    }
    mine = words.get(ctx.machine_of_source(source), ctx.source_label(source).split(" · ")[0])
    alike = sum(_short(w) == _short(mine) for w in words.values()) > 1
    return f"{mine if alike else _short(mine)} · {source.rsplit('.', 1)[-1]}"


def cell(texts: dict, source: str, layer: str, metric: str, decodes: bool) -> str:
    """ "✓ 1.93 [1.88, 2.05]": the primary n-sweep's verdict and exponent; a decode step's prediction in brackets."""
    entry = texts.get((source, layer, metric, "n"))
    if entry is None:
        return EMPTY
    text, verdict = entry[:2]
    if text == "–":
        why = why_no_exponent(texts, source, layer, metric)
        return f"– ({why})" if why else "–"
    predicted = entry[2] if len(entry) > 2 else math.nan
    judged = predicted is not None and math.isfinite(predicted)
    mark = f"{fits.VERDICT_MARK[verdict]}{NO_BREAK}" if judged else ""
    against = f" ({round(predicted, 2) + 0:g})" if decodes and judged else ""
    best = f" O({entry[4]})" if not judged and len(entry) > 4 and entry[4] else ""
    together = text.replace(", ", f",{NO_BREAK}")
    return f"{mark}{together}{against}{best}"


def row_head(layer: str) -> str:
    return f"{layer} · {fits.table1_cell(layer)}"


def matrix(ctx: ReportContext, metric: str) -> pd.DataFrame:
    where, sources = _where(ctx), columns(ctx)
    texts = {**ctx.fit_texts, **ctx.decode_texts}
    measured = set(ctx.every_point()["layer"])
    rows = []
    for layer in (name for name in models.LAYERS if name in measured):
        row = {"layer · Table 1": row_head(layer)}
        for source in sources:
            row[column_label(ctx, source)] = cell(texts, source, layer, metric, where[source][3] in DECODE_MODES)
        rows.append(row)
    return pd.DataFrame(rows)


def path_matrix(ctx: ReportContext) -> pd.DataFrame:
    first = {}
    for source in columns(ctx):
        first.setdefault(ctx.machine_of_source(source), source)
    measured = set(ctx.every_point()["layer"])
    rows = []
    for layer in (name for name in models.LAYERS if name in measured):
        row = {"layer": layer}
        row |= {column_label(ctx, s).split(" · ")[0]: path_cell(ctx, s, layer) for s in first.values()}
        rows.append(row)
    return pd.DataFrame(rows)


PATH_LEGEND = (
    "Table 1's cell, then the hops from position 0 to n−1 at the smallest and the largest n of the paths study: "
    "layers crossed, or for a recurrence the steps inside its one layer; ✓ where they grow with n as the cell says.\n"
)


def legend(metric: str) -> str:
    marks = ", ".join(f"{fits.VERDICT_MARK[v]} {v}" for v in fits.VERDICTS)
    return (
        f"{marks} with Table 1's cost (the row's head), on the widest n-sweep that decides (else the widest fitted); "
        f"the fitted exponent of {WHAT[metric]} in n "
        f"[{100 * fits.CONFIDENCE:g} % interval]; a decode step's cells add the exponent it is judged against "
        f"(Table 1's term over n); – a sweep without a fit, {EMPTY} not measured.\n"
    )


def matrix_markdown(table: pd.DataFrame) -> str:
    return "_No points stored._\n" if table.empty else table.to_markdown(index=False) + "\n"


def _latex_text(text: str) -> str:
    if text.startswith("O(") or " · O(" in text:
        name, _, formula = text.rpartition(" · ")
        formula = (
            formula.replace("·", r" \cdot ").replace("²", "^2").replace("log_k", r"\log_k").replace("log n", r"\log n")
        )
        return (f"{_latex_text(name)} " if name else "") + f"${formula}$"
    for plain, tex in (
        ("\\", r"\textbackslash{}"),
        ("_", r"\_"),
        ("%", r"\%"),
        ("&", r"\&"),
        ("#", r"\#"),
        ("$", r"\$"),
        ("✓", r"$\surd$"),
        ("✗", r"$\times$"),
        ("·", r"$\cdot$"),
        ("–", "--"),
        ("²", r"$^2$"),
        (NO_BREAK, "~"),
    ):
        text = text.replace(plain, tex)
    return text


def matrix_latex(table: pd.DataFrame, caption: str) -> str:
    """table.tex: the matrix as a `table` of plain LaTeX (\\input into any article)."""
    if table.empty:
        return "% no points stored\n"
    heads = " & ".join(_latex_text(c) for c in table.columns)
    body = "\n".join(" & ".join(_latex_text(str(v)) for v in row) + r" \\" for row in table.itertuples(index=False))
    return (
        "% Generated by `python -m bench report`; every number with its provenance is in numbers.json.\n"
        "\\begin{table}\n\\centering\n\\scriptsize\n"
        f"\\begin{{tabular}}{{{'l' * len(table.columns)}}}\n\\hline\n{heads} \\\\\n\\hline\n{body}\n\\hline\n"
        f"\\end{{tabular}}\n\\caption{{{_latex_text(caption)}}}\n\\end{{table}}\n"
    )


def primary_fits(fit_rows: pd.DataFrame | None, metric: str) -> pd.DataFrame:
    """Per source and layer, the fit a cell shows: the widest n-sweep that decides, else with an exponent (as cited)."""
    if fit_rows is None or fit_rows.empty:
        return pd.DataFrame(columns=["source", "layer", "exponent", "ci_low", "ci_high", "predicted", "mode"])
    rows = fit_rows[(fit_rows["metric"] == metric) & (fit_rows["variable"] == "n") & fit_rows["exponent"].notna()]
    rows = rows.assign(span=rows["sweep_x_max"] / rows["sweep_x_min"], decided=rows["verdict"].isin(fits.DECIDED))
    ranked = rows.sort_values(["decided", "span", "sweep_points"], ascending=False)
    return ranked.drop_duplicates(["source", "layer"])


def _kind(ctx: ReportContext, where: dict, source: str) -> str:
    device, dtype = where[source][1:3]
    return f"{column_label(ctx, source).split(' · ')[0]} · {device_key(device, dtype)}"


def forest_figure(ctx: ReportContext) -> str:
    """The matrix drawn: per mode a panel, per layer a row, each column's exponent and interval against Table 1's."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    fitted = pd.concat([primary_fits(f, "time") for f in (ctx.fit_rows, ctx.decode_fit_rows)], ignore_index=True)
    if fitted.empty:
        return ""
    where, order = _where(ctx), columns(ctx)
    fitted = fitted[fitted["source"].isin(order)]
    modes = [m for m in MODES if m in set(fitted["mode"])]
    layers = [name for name in models.LAYERS if name in set(fitted["layer"])]
    kinds = list(dict.fromkeys(_kind(ctx, where, s) for s in order))
    colors = dict(zip(kinds, sns.color_palette("tab10", len(kinds))))
    fig, axes = plt.subplots(
        1, len(modes), figsize=(3.2 * len(modes) + 1.6, 0.36 * len(layers) + 1.4), sharey=True, squeeze=False
    )
    for ax, mode in zip(axes[0], modes):
        mine = fitted[fitted["mode"] == mode]
        sources = [s for s in order if s in set(mine["source"])]
        for y, layer in enumerate(layers):
            rows = mine[mine["layer"] == layer]
            if rows.empty:
                continue
            predicted = float(rows["predicted"].median())
            tolerance = fits.TOLERANCE["time"]
            ax.add_patch(plt.Rectangle((predicted - tolerance, y - 0.4), 2 * tolerance, 0.8, color="0.92", zorder=0))
            ax.plot([predicted, predicted], [y - 0.4, y + 0.4], color="0.3", linewidth=1.2, zorder=1)
            for i, source in enumerate(sources):
                row = rows[rows["source"] == source]
                if row.empty:
                    continue
                r = row.iloc[0]
                offset = (i - (len(sources) - 1) / 2) * 0.6 / max(len(sources), 1)
                low, high = r["exponent"] - r["ci_low"], r["ci_high"] - r["exponent"]
                color = colors.get(_kind(ctx, where, source))
                ax.errorbar(
                    r["exponent"],
                    y + offset,
                    xerr=[[max(low, 0)], [max(high, 0)]],
                    fmt="X" if r["verdict"] == "inconsistent" else "o",
                    markersize=4,
                    color=color,
                    markerfacecolor="white" if r["verdict"] == "inconclusive" else color,
                    linewidth=1,
                    zorder=2,
                )
        ax.set_title(mode if mode != "train" else "training", fontsize=10)
        ax.set_xlabel("time ∝ n^e: e")
        ax.grid(axis="x", color="0.9")
    axes[0][0].set_yticks(range(len(layers)), layers)
    axes[0][0].invert_yaxis()
    handles = [plt.Line2D([], [], marker="o", linestyle="", color=c, label=k) for k, c in colors.items()]
    handles.append(plt.Rectangle((0, 0), 1, 1, color="0.92", label=f"Table 1 ± {fits.TOLERANCE['time']:g}"))
    fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 0.95), fontsize=8, frameon=False)
    fig.tight_layout()
    return ctx.figure(
        fig,
        "matrix",
        "The time exponent in n of every layer and column, against Table 1",
        "Each column's fitted exponent of time in n (dot) and its 95 % interval (bar), a panel per mode; grey: "
        "Table 1's prediction (line) and the band within which it counts as agreeing; hollow: inconclusive, ×: "
        "inconsistent.",
    )
