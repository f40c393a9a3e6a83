"""The report's first screen: per machine and device a headline in words, then a compact verdict table."""

from __future__ import annotations

import math

import pandas as pd

import models
from models.config import SEQUENTIAL_GROWTH, growth_local_exponent

from .. import clock, fits
from ..policy import CPU, DEVICE
from ..spec import DEFAULT_MODE
from ..sweeps import predicted_row
from .context import ReportContext

METRICS = {"flops": "FLOPs", "time": "time", "memory": "memory"}
NO_BREAK = "\u00a0"
SEQUENTIAL_TOLERANCE = 0.1  # |measured depth slope - the cell's slope| at most this for "as Table 1 says"


def short_reason(reason: str) -> str:
    return reason.split(";")[0].split(" (")[0]


def _layers(ctx: ReportContext, source: str) -> list[str]:
    present = set(ctx.points.loc[ctx.points["source"] == source, "layer"])
    return [name for name in models.LAYERS if name in present]


def _verdict_counts(texts: dict, source: str, layers: list[str], metric: str) -> dict[str, int]:
    """Per verdict, the layers whose primary n-sweep has it; `no_fit`: not fitted, `unfitted`: no n-sweep."""
    counts = {verdict: 0 for verdict in fits.VERDICTS} | {"no_fit": 0, "unfitted": 0}
    for layer in layers:
        entry = texts.get((source, layer, metric, "n"))
        counts["unfitted" if entry is None else "no_fit" if entry[0] == "–" else entry[1]] += 1
    return counts


def _metric_phrase(ctx: ReportContext, source: str, metric: str, counts: dict[str, int], run_id: str) -> str:
    total = sum(counts.values())
    key = f"{source}.headline.{metric}"
    ok = ctx.cite(f"{key}.consistent_layers", counts["consistent"], "layers", run_id, show_unit=False)
    others = [
        f"{ctx.cite(f'{key}.{name}_layers', counts[name], 'layers', run_id, show_unit=False)} {word}"
        for name, word in (
            ("inconclusive", "inconclusive"),
            ("inconsistent", "not"),
            ("no_fit", "without a fit"),
            ("unfitted", "without an n-sweep to fit"),
        )
        if counts[name]
    ]
    return f"{METRICS[metric]} in {ok} of {total} layers" + (f" ({', '.join(others)})" if others else "")


def paths_rows(ctx: ReportContext, source: str) -> pd.DataFrame:
    if ctx.paths is None or "machine" not in ctx.paths:
        return pd.DataFrame()
    return ctx.paths[ctx.paths["machine"] == ctx.machine_of_source(source)]


def smallest_k(rows: pd.DataFrame) -> pd.DataFrame:
    if "k" in rows and rows["k"].notna().any():
        rows = rows[rows["k"] == rows["k"].min()]
    return rows


def layer_paths(ctx: ReportContext, source: str, layer: str) -> pd.DataFrame:
    rows = paths_rows(ctx, source)
    return rows if rows.empty else smallest_k(rows[rows["layer"] == layer]).sort_values("n")


def cite_crossing(ctx: ReportContext, source: str, row, show_unit: bool = True) -> str:
    if pd.isna(row.layers_to_cross):  # a stack that never crossed within the probe's cap
        return "never"
    key = f"{ctx.machine_of_source(source)}.paths.{row.layer}.layers_to_cross.n{int(row.n)}"
    return ctx.cite(key, int(row.layers_to_cross), "layers", row.run_id, show_unit=show_unit)


# a path cell's growth in n, as a sequential cell writes it: k and r are held fixed along an n-sweep
PATH_GROWTH = {"O(n/k)": "O(n)", "O(n/r)": "O(n)", "O(log_k n)": "O(log n)"}


def _growth_exponent(rows: pd.DataFrame, column: str) -> tuple[float, float, float] | None:
    rows = rows.sort_values("n")
    lo, hi = rows.iloc[0], rows.iloc[-1]
    if hi.n == lo.n or not lo[column] or pd.isna(lo[column]) or pd.isna(hi[column]):
        return None
    return math.log(hi[column] / lo[column]) / math.log(hi.n / lo.n), float(lo.n), float(hi.n)


def _grows_as(rows: pd.DataFrame, column: str, cell: str) -> bool | None:
    """`column` grows over n nearest to `cell`'s slope and within SEQUENTIAL_TOLERANCE; None: not known."""
    measured = _growth_exponent(rows, column)
    if measured is None or cell not in SEQUENTIAL_GROWTH:
        return None
    exponent, n_low, n_high = measured
    cells = {name: growth_local_exponent(name, n_low, n_high) for name in SEQUENTIAL_GROWTH}
    nearest = min(cells, key=lambda name: abs(exponent - cells[name]))
    return nearest == cell and abs(exponent - cells[cell]) <= SEQUENTIAL_TOLERANCE


def depth_follows_table1(rows: pd.DataFrame, layer: str) -> bool | None:
    """Whether the layer's measured depth grows with n as its Table 1 cell says; None without two lengths."""
    row = models.LAYERS[layer].table1
    return None if row is None else _grows_as(rows, "seq_depth", row.sequential_text)


def hops_follow_table1(rows: pd.DataFrame, layer: str) -> bool | None:
    """Whether the hops from position 0 to n−1 grow with n as the Table 1 path cell says (None: not known)."""
    if "path_hops" not in rows or rows["path_hops"].isna().any():
        return None
    if models.LAYERS[layer].table1 is None:
        return None
    path = models.LAYERS[layer].table1.path_text
    return _grows_as(rows, "path_hops", PATH_GROWTH.get(path, path))


def _paths_phrase(ctx: ReportContext, source: str) -> str:
    rows = paths_rows(ctx, source)
    if rows.empty:
        return "no paths study stored for this machine (`python -m bench paths`)"
    machine = ctx.machine_of_source(source)
    run_id = rows["run_id"].iloc[-1]
    measured = rows.dropna(subset=["layers_to_cross_formula"])
    equal = int((measured["layers_to_cross"] == measured["layers_to_cross_formula"]).sum())
    as_table, layers = 0, 0
    for layer, group in rows.groupby("layer"):
        if layer not in models.LAYERS:
            continue
        follows = depth_follows_table1(smallest_k(group), layer)
        if follows is None:
            continue
        layers += 1
        as_table += follows
    key = f"{machine}.headline.paths"
    if not len(measured) and not layers:
        return f"measured for {rows['layer'].nunique()} layers, none with a closed form (the table below)"
    return (
        f"layers to cross equal the closed form at "
        f"{ctx.cite(f'{key}.points_equal', equal, 'points', run_id, show_unit=False)} of "
        f"{ctx.cite(f'{key}.points', len(measured), 'points', run_id)}; sequential depth grows with n as "
        f"Table 1 says for {ctx.cite(f'{key}.sequential_as_table1', as_table, 'layers', run_id, show_unit=False)} "
        f"of {ctx.cite(f'{key}.sequential_layers', layers, 'layers', run_id)}"
    )


def _cores_text(ctx: ReportContext, source: str, key: str, low: float, high: float, run_id: str) -> str:
    low, high = round(low, 1), round(high, 1)
    if low == high:
        return ctx.cite(f"{source}.load.{key}", low, "cores", run_id, show_unit=False)
    return (
        f"{ctx.cite(f'{source}.load.{key}_min', low, 'cores', run_id, show_unit=False)}–"
        f"{ctx.cite(f'{source}.load.{key}_max', high, 'cores', run_id, show_unit=False)}"
    )


def _short_of_points(texts: dict, fit_rows: pd.DataFrame, source: str, layers: list[str]) -> int:
    """The layers without a time verdict in n that lost unreliable points from one of their time n-fits."""
    rows = fit_rows[(fit_rows["source"] == source) & (fit_rows["metric"] == "time") & (fit_rows["variable"] == "n")]
    short = set(rows.loc[rows["unreliable_left_out"].fillna(0) > 0, "layer"])
    return sum(
        1
        for layer in layers
        if layer in short and (entry := texts.get((source, layer, "time", "n"))) and entry[1] != "consistent"
    )


def _layers_lack(count: int) -> str:
    return "1 layer lacks" if count == 1 else f"{count} layers lack"


def load_phrase(ctx: ReportContext, source: str, missing: int) -> str:
    """What other programs' load did to the source's run, and what to do where `missing` layers lack a time verdict."""
    ok = ctx.points[(ctx.points["source"] == source) & (ctx.points["status"] == "ok")]
    if ok.empty or "load_others_cores" not in ok or ok["load_others_cores"].isna().all():
        return ""
    run_id = ok["run_id"].iloc[-1]
    meta = ctx.runs[run_id]
    cores = meta.get("cpu_logical_cores") or meta.get("cpu_cores")
    of = f" of the {cores} cores" if cores else " cores"
    during = ok["load_others_cores"].dropna()
    text = "Load: other programs took " + _cores_text(ctx, source, "others_cores", during.min(), during.max(), run_id)
    text += f"{of} while its points were timed"
    before = (meta.get("load_before") or {}).get("others_busy_cores")
    if before is not None:
        text += f" ({ctx.cite(f'{source}.load.others_cores_before', round(before, 1), 'cores', run_id, show_unit=False)} before the run)"
    if "time_clock" in ok:
        on_cpu = int((ok["time_clock"] == CPU).sum())
        on_device = int((ok["time_clock"] == DEVICE).sum())
        cited = ctx.cite(f"{source}.points.cpu_clock", on_cpu, "points", run_id, show_unit=False)
        if on_device:
            graphs = ctx.cite(f"{source}.points.device_clock", on_device, "points", run_id, show_unit=False)
            text += (
                f"; {graphs} of {len(ok)} points were timed on the device's own clock, each call replayed as a CUDA "
                "graph, which neither that load nor Python's launches slow down"
            )
        elif on_cpu:
            text += f"; {cited} of {len(ok)} points were timed on the CPU clock of their one thread, which that load does not slow down"
        else:
            text += "; every point was timed on the wall clock"
    unreliable = int((~clock.reliable(ok)).sum())
    if unreliable and missing:
        busy = ok.loc[~clock.reliable(ok), "load_others_cores"].dropna()
        stayed = ctx.cite(f"{source}.points.unreliable", unreliable, "points", run_id, show_unit=False)
        on_gpu = str(ok["device"].iloc[-1]).startswith("cuda")
        if on_gpu:
            longest = ok.loc[~clock.reliable(ok), "time_median_s"].max()
            return text + (
                f". {_layers_lack(missing)} a time verdict because {stayed} of {len(ok)} points stayed unreliable, "
                f"calls of {longest * 1e3:.2g} ms or less whose passes disagreed or whose rounds spread"
                + (f" while other programs took at most {round(busy.max(), 1)}{of}" if len(busy) else "")
                + ". To get them: more time per point (`--target-time`) or more passes (`--passes`)."
            )
        text += (
            f". {_layers_lack(missing)} a time verdict because {stayed} of {len(ok)} points stayed "
            f"unreliable: other programs kept {round(busy.min(), 1)}–{round(busy.max(), 1)}{of} busy while they "
            "were timed. To get them: close other programs and run `make bench` again, give each point more "
            "time (`--target-time`), or time on the CPU clock (`--clock cpu`, one thread)"
            if len(busy)
            else f". {_layers_lack(missing)} a time verdict because {stayed} of {len(ok)} points stayed unreliable"
        )
    return text + "."


def headline(ctx: ReportContext, texts: dict, fit_rows: pd.DataFrame | None = None) -> str:
    """One paragraph per source, this machine's first."""
    lines = []
    for source in ctx.sources():
        every = _layers(ctx, source)
        layers = [layer for layer in every if predicted_row(layer, DEFAULT_MODE) is not None]
        run_id = ctx.points.loc[ctx.points["source"] == source, "run_id"].iloc[-1]
        counts = {m: _verdict_counts(texts, source, layers, m) for m in METRICS}
        phrases = [_metric_phrase(ctx, source, m, counts[m], run_id) for m in METRICS]
        date = (ctx.runs[run_id].get("started_utc") or "")[:10]
        missing = 0 if fit_rows is None else _short_of_points(texts, fit_rows, source, layers)
        load = load_phrase(ctx, source, missing)
        judged = f", the exponent in n agrees with Table 1 for {'; '.join(phrases)}" if layers else ""
        lines.append(
            f"**On {ctx.source_label(source)}** (run {run_id}, {date}){judged}{_classes_phrase(texts, source, every)}"
            + f". Paths: {_paths_phrase(ctx, source)}."
            + (f" {load}" if load else "")
        )
    return "\n\n".join(lines) + "\n"


def _classes_phrase(texts: dict, source: str, layers: list[str]) -> str:
    """The class in n each layer that states no cost fits best (time, FLOPs), its only verdict."""
    unstated = [layer for layer in layers if predicted_row(layer, DEFAULT_MODE) is None]
    parts = []
    for layer in unstated:
        found = [(m, texts.get((source, layer, m, "n"), ())) for m in ("time", "flops")]
        classes = [f"{m} O({e[4]})" for m, e in found if len(e) > 4 and e[4]]
        parts.append(f"{layer} {', '.join(classes) or 'no class yet'}")
    return f"{', and' if len(unstated) < len(layers) else ','} stating no cost, {'; '.join(parts)}" if parts else ""


def why_no_exponent(texts: dict, source: str, layer: str, metric: str) -> str:
    entry = texts.get((source, layer, metric, "n"))
    if entry is None or entry[0] != "–" or len(entry) < 4 or not isinstance(entry[3], str):
        return ""
    return short_reason(entry[3])


def verdict_cell(texts: dict, source: str, layer: str, metric: str) -> str:
    """ "✓ 1.93 [1.88, 1.98] (1.94) · O(n²)": the primary n-sweep's verdict, exponent, prediction and best class."""
    entry = texts.get((source, layer, metric, "n"))
    if entry is None:
        return "–"
    text, verdict = entry[:2]
    predicted = entry[2] if len(entry) > 2 else None
    against = f" ({predicted:.2f})" if text != "–" and predicted is not None and math.isfinite(predicted) else ""
    if why := why_no_exponent(texts, source, layer, metric):
        against = f" ({why})"
    judged = predicted is not None and math.isfinite(predicted)
    best = f" · O({entry[4]})" if len(entry) > 4 and entry[4] else ""
    power = {0: "1", 1: "n", 2: "n²", 3: "n³"}.get(round(predicted)) if judged else None
    if best and power and abs(predicted - round(predicted)) < 0.05 and entry[4] != power:
        best += f" (predicted O({power}))"
    mark = f"{fits.VERDICT_MARK[verdict]} " if judged or text == "–" else ""
    # no-break spaces: a narrow window wraps the cell only before the prediction
    return f"{mark}{text}".replace(" ", NO_BREAK) + against + best


def hops_unit(rows: pd.DataFrame) -> str:
    """What the path's hops are: layers crossed, or steps (levels) inside one layer of a recurrence (a scan)."""
    of = rows["path_hops_of"].dropna().astype(str) if "path_hops_of" in rows else pd.Series(dtype=str)
    what = of.iloc[-1] if len(of) else "layers crossed"
    if what == "layers crossed":
        return "layers"
    return f"{'levels' if 'level' in what else 'steps'} inside 1 layer"


def cite_hops(ctx: ReportContext, source: str, row, show_unit: bool = True) -> str:
    if pd.isna(row.path_hops):
        return cite_crossing(ctx, source, row, show_unit)
    key = f"{ctx.machine_of_source(source)}.paths.{row.layer}.path_hops.n{int(row.n)}"
    return ctx.cite(key, int(row.path_hops), "steps", row.run_id, show_unit=show_unit)


def path_cell(ctx: ReportContext, source: str, layer: str) -> str:
    """ "O(n) · ✓ 63 → 255 steps inside 1 layer": Table 1's path cell, then the hops measured at both ends."""
    rows = layer_paths(ctx, source, layer)
    cell = fits.table1_cell(layer, "path_text")
    if rows.empty:
        return f"{cell} · –"
    lo, hi = rows.iloc[0], rows.iloc[-1]
    follows = hops_follow_table1(rows, layer)
    mark = "" if follows is None else fits.VERDICT_MARK["consistent" if follows else "inconsistent"] + " "
    ends = f"{cite_hops(ctx, source, lo, False)} → {cite_hops(ctx, source, hi, False)}"
    return f"{cell} · {mark}{ends} {hops_unit(rows)}"
