"""Table 1 with measured values beside the predicted ones (report.md, table.tex), and the rows beyond it."""

from __future__ import annotations

from collections import Counter

import pandas as pd

import models

from .. import fits
from .context import ReportContext
from .headline import cite_hops, hops_unit, layer_paths


def _exp(texts: dict, source: str, layer: str, metric: str, variable: str) -> str:
    key = (source, layer, metric, variable)
    if key not in texts:
        return "–"
    value, verdict = texts[key][:2]
    return f"{value.split(' [')[0]} {fits.VERDICT_MARK[verdict]}"


def _paths_span(ctx: ReportContext, source: str, layer: str) -> tuple[int, int] | None:
    rows = layer_paths(ctx, source, layer)
    return None if rows.empty else (int(rows["n"].iloc[0]), int(rows["n"].iloc[-1]))


def _paths_cells(
    ctx: ReportContext, source: str, layer: str, header_span: tuple[int, int] | None = None
) -> tuple[str, str]:
    """Measured depth and path at both ends of the paths study, lengths named unless the header's (`header_span`)."""
    rows = layer_paths(ctx, source, layer)
    if rows.empty:
        return "–", "–"
    lo, hi = rows.iloc[0], rows.iloc[-1]
    run_id, key = hi["run_id"], f"{ctx.machine_of_source(source)}.paths.{layer}"
    depth = (
        f"{ctx.cite(f'{key}.seq_depth.n{int(lo.n)}', int(lo.seq_depth), 'ops', run_id)} → "
        f"{ctx.cite(f'{key}.seq_depth.n{int(hi.n)}', int(hi.seq_depth), 'ops', run_id)}"
        if rows["seq_depth"].notna().all()
        else "not measured"
    )
    cross = f"{cite_hops(ctx, source, lo, False)} → {cite_hops(ctx, source, hi, False)} {hops_unit(rows)}"
    if (int(lo.n), int(hi.n)) != header_span:
        lengths = f" (n={int(lo.n)}→{int(hi.n)})"
        depth, cross = depth + lengths, cross + lengths
    return depth, cross


def _common_span(ctx: ReportContext) -> tuple[int, int] | None:
    """The (smallest, largest) n of the paths study that most layers share, named in the table's header."""
    spans = Counter(
        span
        for source in ctx.sources()
        for layer in models.LAYERS
        if (span := _paths_span(ctx, source, layer)) is not None
    )
    return spans.most_common(1)[0][0] if spans else None


def summary_rows(ctx: ReportContext, fit_rows: pd.DataFrame, texts: dict) -> pd.DataFrame:
    rows = []
    common = _common_span(ctx)
    span = f", n={common[0]}→{common[1]}" if common else ""
    for source in ctx.sources():
        present = set(ctx.points.loc[ctx.points["source"] == source, "layer"])
        for layer in [l for l in models.LAYERS if l in present]:
            depth, cross = _paths_cells(ctx, source, layer, common)
            rows.append(
                {
                    "source": source,
                    "layer": layer,
                    "compute (Table 1)": fits.table1_cell(layer),
                    "FLOPs ∝ n^": _exp(texts, source, layer, "flops", "n"),
                    "time ∝ n^": _exp(texts, source, layer, "time", "n"),
                    "time ∝ d^": _exp(texts, source, layer, "time", "d"),
                    "time ∝ k^": _exp(texts, source, layer, "time", "k"),
                    "memory ∝ n^ (vs activation estimate)": _exp(texts, source, layer, "memory", "n"),
                    "sequential ops (Table 1)": fits.table1_cell(layer, "sequential_text"),
                    f"measured depth{span}": depth,
                    "max path (Table 1)": fits.table1_cell(layer, "path_text"),
                    f"path measured{span}": cross,
                }
            )
    return pd.DataFrame(rows)


def summary_markdown(table: pd.DataFrame) -> str:
    if table.empty:
        return "_No points stored._\n"
    return table.to_markdown(index=False) + "\n"


def beyond_table1(ctx: ReportContext, texts: dict) -> str:
    """The layers published after the paper's table: what each changes, and what was measured of it here."""
    items = []
    for layer, cls in models.LAYERS.items():
        row = cls.table1
        if row is None or not row.note:
            continue
        measured = []
        for source in ctx.sources():
            if not (ctx.points.loc[ctx.points["source"] == source, "layer"] == layer).any():
                continue
            fitted = [
                f"{what} ∝ n^{_exp(texts, source, layer, metric, 'n')}"
                for metric, what in (("flops", "FLOPs"), ("time", "time"))
                if texts.get((source, layer, metric, "n"), ("–",))[0] != "–"
            ]
            depth, _ = _paths_cells(ctx, source, layer)  # its lengths named
            if depth != "–":
                fitted.append(f"sequential depth {depth}")
            where = f" on {ctx.source_tag(source)}" if len(ctx.sources()) > 1 else ""
            measured.append(", ".join(fitted or ["no n-sweep fitted yet"]) + where)
        if not measured:
            continue
        items.append(
            f"- **{layer}** ({row.source}): compute {row.compute_text}, sequential operations "
            f"{row.sequential_text}, maximum path length {row.path_text}. {row.note[0].upper()}{row.note[1:]} "
            f"Measured here: {'; '.join(measured)}."
        )
    if not items:
        return ""
    return (
        "Rows beyond Table 1: layers published after it, measured in every column as the others are.\n\n"
        + "\n".join(items)
        + "\n"
    )
