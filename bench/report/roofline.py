"""Every point against its roofline (bench.roofline) and its compute peak, on its own clock (docs/method.md)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.ticker import EngFormatter

import models

from .. import clock, fits
from ..formats import stored_peaks
from ..machine import machine_identity, node_facts
from ..peak import bandwidth_on, math_mode, mode_peak, peak_on
from ..policy import CPU, WALL
from ..roofline import against_roofline
from ..spec import IDENTITY, device_keys, mode_of
from . import style
from .context import ReportContext
from .hierarchy import hierarchy_section
from .load import newest_run, run_tag

ROOFLINE_TOLERANCE = 0.05


def _stored_peaks(runs: dict[str, dict]) -> dict[tuple[str, str, str], dict]:
    """The runs' compute peaks by (run id, machine: "" or, in a cluster, each machine's best node, device key)."""
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
    nodes = points["node"] if "node" in points else [None] * len(points)
    out = []
    for run_id, node in zip(points["run_id"], nodes):
        facts = node_facts(runs.get(run_id, {}), node)
        out.append(machine_identity(facts)[0] if facts else "")
    return out


def point_peaks(points: pd.DataFrame, runs: dict[str, dict], on: str | pd.Series = WALL) -> pd.Series:
    """Each point's compute peak (FLOP/s) of its math mode on clock `on` (one, or each point's); NaN where none."""
    peaks = _stored_peaks(runs)
    keys = zip(points["run_id"], _peak_machines(points, runs), device_keys(points))
    ons = [on] * len(points) if isinstance(on, str) else list(on)
    cudnn = [models.cudnn_products(layer, mode) for layer, mode in zip(points["layer"], mode_of(points))]
    values = []
    for key, on_clock, dtype, device, in_cudnn in zip(keys, ons, points["dtype"], points["device"], cudnn):
        peak = peaks.get(key)
        mode = math_mode(dtype, device, in_cudnn, peak.get("tf32")) if peak else None
        values.append(peak_on(mode_peak(peak, mode), on_clock) if peak else None)
    return pd.Series([math.nan if v is None else v for v in values], index=points.index, dtype=float)


def roofline_figure(ctx: ReportContext, points: pd.DataFrame, ceilings: dict[str, dict]):
    """Per source: achieved FLOP/s against intensity under the ceilings; each layer's largest point labelled."""
    sources = sorted(points["source"].unique())
    palette, markers = style.layer_palette(points["layer"].unique()), style.layer_markers(points["layer"].unique())
    fig, axes = style.panels(len(sources), sharex=False, sharey=False)
    for ax, source in zip(axes, sources):
        part = points[points["source"] == source]
        for layer in style.layer_order(part["layer"].unique()):
            mine = part[part["layer"] == layer]
            ax.scatter(
                mine["intensity"],
                mine["achieved"],
                color=palette[layer],
                marker=markers[layer],
                s=26,
                alpha=0.85,
                linewidths=0.4,
                edgecolors="white",
                zorder=3,
            )
            top = mine.sort_values(["useful", "n"]).iloc[-1]
            ax.annotate(layer, (top.intensity, top.achieved), fontsize=7, xytext=(3, 3), textcoords="offset points")
        top = ceilings[source]
        ridges = [top["peak"] / top[key] for key in ("bandwidth", "cache") if top.get(key) and top.get("peak")]
        low, high = min([part["intensity"].min(), *ridges]) / 2, part["intensity"].max() * 2
        xs = np.geomspace(low, high, 64)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(low, high)
        ax.set_ylim(part["achieved"].min() / 2, max(part["achieved"].max(), top.get("peak") or 0) * 1.6)
        if top.get("peak"):
            ax.axhline(top["peak"], color="0.25", linestyle=":", linewidth=1)
        for key, dashes in (("bandwidth", "-"), ("cache", "--")):
            if top.get(key):
                roof = np.minimum(top[key] * xs, top.get("peak") or np.inf)
                ax.plot(xs, roof, color="0.45", linestyle=dashes, linewidth=1, scalex=False, scaley=False)
        ax.set_title(ctx.source_label(source).replace(" · ", "\n", 1), fontsize=9)
        ax.set_xlabel("useful FLOPs per minimal byte")
        style.grid(ax)
    for ax in axes:
        ax.set_ylabel("achieved useful FLOP/s")
        style.log_axis(ax, "x", style.plain)
        ax.yaxis.set_major_formatter(EngFormatter(unit="FLOP/s", sep=" "))
    layers = style.layer_order(points["layer"].unique())
    handles = [
        Line2D([], [], color=palette[layer], marker=markers[layer], linestyle="none", markersize=6) for layer in layers
    ]
    handles += [
        Line2D([], [], color="0.25", linestyle=":", linewidth=1),
        Line2D([], [], color="0.45", linestyle="-", linewidth=1),
        Line2D([], [], color="0.45", linestyle="--", linewidth=1),
    ]
    labels = [*layers, "compute peak", "memory bandwidth × intensity", "cache bandwidth × intensity"]
    style.legend_outside(axes[-1], handles, labels, title="layer")
    return fig


def _bandwidth(ctx: ReportContext, source: str, run_id: str, device: str, suffix: str) -> str:
    """The run's bandwidths and operator latency of `device`, cited clauses of its peak line."""
    meta = ctx.runs[run_id]
    entry = (meta.get("memory_bandwidth") or {}).get(device)
    if not entry:
        return ""
    value = float(f"{entry['bytes_per_s']:.4g}")
    text = (
        f"; memory bandwidth {ctx.cite(f'{source}.memory_bandwidth{suffix}', value, 'B/s', run_id, clock=WALL)} (triad"
    )
    cache = entry.get("cache")
    if cache:
        value = float(f"{cache['bytes_per_s']:.4g}")
        key = f"{source}.cache_bandwidth{suffix}"
        text += f"; {ctx.cite(key, value, 'B/s', run_id, clock=WALL)} on arrays in its {entry['last_level_cache_bytes'] / 2**20:g} MiB last-level cache"
    text += ")"
    latency = (meta.get("op_latency") or {}).get(device)
    if latency:
        value = float(f"{latency['seconds']:.3g}")
        text += f"; operator latency {ctx.cite(f'{source}.op_latency{suffix}', value, 's', run_id, clock=WALL)} ({latency['kernel']})"
    return text


def _peak_line(ctx: ReportContext, source: str, run_id: str, peak: dict, newest: bool, device: str = "") -> str:
    """A source's peak under `<source>.compute_peak`, an older combined run's under `<source>.compute_peak.<run>`."""
    suffix = "" if newest else f".{run_tag(run_id)}"
    wall = ctx.cite(f"{source}.compute_peak{suffix}", float(f"{peak['flops_per_s']:.4g}"), "FLOP/s", run_id, clock=WALL)
    cpu = peak_on(peak, CPU) if peak.get("flops_per_s_cpu") else None
    on_cpu = (
        f", {ctx.cite(f'{source}.compute_peak_cpu{suffix}', float(f'{cpu:.4g}'), 'FLOP/s', run_id, clock=CPU)} on the "
        "CPU clock of its one thread"
        if cpu
        else ""
    )
    label_source = source
    if not newest:
        source = f"{source} (run {run_id})"
    if "kernel" not in peak:
        return (
            f"- {source}: matmul peak {wall} ({peak.get('size')}×{peak.get('size')} {peak.get('dtype', '')} matmul, "
            "median): a run from before the compute peak; a convolution can outrun this rate, so its fractions "
            "may exceed 100 %."
        )
    bandwidth = _bandwidth(ctx, label_source, run_id, device, suffix) if device else ""
    modes = ""
    for mode, m in sorted((peak.get("modes") or {}).items()):
        value = float(f"{m['flops_per_s']:.4g}")
        modes += (
            f"; {mode}: {ctx.cite(f'{label_source}.compute_peak.{mode}{suffix}', value, 'FLOP/s', run_id, clock=WALL)}"
        )
        modes += f" ({m['kernel']})"
    if modes:
        tf32 = peak.get("tf32") or {}
        allowed = [lib for lib in ("cudnn", "cublas") if tf32.get(lib)]
        modes = (
            f"; by math mode{modes} (TF32 allowed in {', '.join(allowed) or 'neither'}: a point is held to its mode's)"
        )
    return (
        f"- {source}: compute peak {wall} on the wall clock{on_cpu} (best: {peak['kernel']}, {peak.get('dtype', '')})"
        f"{modes}{bandwidth}."
    )


def _percent(fraction: float) -> float:
    return float(f"{100 * fraction:.3g}")


def _ceilings(points: pd.DataFrame, runs: dict[str, dict]) -> dict[str, dict]:
    """Per source, its newest run's ceilings on the clock most of its points use."""
    out = {}
    for source, part in points.groupby("source"):
        run_id = newest_run(runs, part["run_id"].unique())
        mine = part[part["run_id"] == run_id]
        on = mine["clock"].mode().iloc[0]
        entry = (runs[run_id].get("memory_bandwidth") or {}).get(str(mine["device"].iloc[0]).split(":")[0]) or {}
        out[source] = {
            "peak": float(mine["peak"].iloc[0]),
            "bandwidth": bandwidth_on(entry, on) if entry else None,
            "cache": bandwidth_on(entry, on, in_cache=True) if entry.get("cache") else None,
        }
    return out


def _attention_pair(ctx: ReportContext, points: pd.DataFrame) -> str:
    """The explicit and the fused attention at their largest common point, against their rooflines."""
    fused, explicit = models.ROLES.attention, models.ROLES.attention_explicit
    sizes = ["source", "n", "d", "batch", "heads"]
    pair = points[points["layer"] == fused].merge(
        points[points["layer"] == explicit], on=sizes, suffixes=("_fused", "_explicit")
    )
    if pair.empty:
        return ""
    top = pair.sort_values(["useful_explicit", "source"]).iloc[-1]
    source, run_id = top.source, top.run_id_explicit
    key = f"{source}.attention_pair"
    size = f"n={int(top.n)}, d={int(top.d)}, batch={int(top.batch)}, heads={int(top.heads)}"

    def cite(name: str, value: float, unit: str, which: str, clock: str = "") -> str:
        return ctx.cite(f"{key}.{name}_{which}", float(f"{value:.4g}"), unit, top[f"run_id_{which}"], clock=clock)

    time_ratio = top.time_s_explicit / top.time_s_fused
    if top.ceiling_explicit != top.ceiling_fused:
        why = (
            f"The roofline separates them: the explicit one is bound by {top.ceiling_explicit}, the fused one by "
            f"{top.ceiling_fused}."
        )
    else:
        why = (
            f"At this size both are bound by {top.ceiling_fused} on the roofline: the explicit one's extra time is "
            "its n×n softmax and its passes over the stored scores, element-wise work that the FLOP count (matrix "
            "products) leaves out and that runs far below either ceiling."
        )
    return (
        f"**The explicit and the fused attention at equal FLOPs** ({ctx.source_label(source)}, {size}): they count "
        f"{cite('flops', top.useful_fused, 'FLOP', 'fused')} and {cite('flops', top.useful_explicit, 'FLOP', 'explicit')}; "
        f"the explicit one stores its n×n scores and probabilities, so it moves at least "
        f"{cite('min_bytes', top.min_bytes_explicit, 'B', 'explicit')} against "
        f"{cite('min_bytes', top.min_bytes_fused, 'B', 'fused')}, "
        f"{cite('intensity', top.intensity_explicit, 'FLOP/B', 'explicit')} against "
        f"{cite('intensity', top.intensity_fused, 'FLOP/B', 'fused')}; its roofline is "
        f"{cite('bound', top.bound_explicit, 'FLOP/s', 'explicit')} against "
        f"{cite('bound', top.bound_fused, 'FLOP/s', 'fused')}. Measured, it takes "
        f"{ctx.cite(f'{key}.time_ratio', round(float(time_ratio), 2), 'x', run_id, clock=top.clock_explicit)} the "
        f"fused one's time, reaching {_percent(top.fraction_explicit)} % of its roofline against "
        f"{_percent(top.fraction_fused)} %. {why}\n\n"
    )


METHOD = (
    "Each point against its roofline (Williams, Waterman and Patterson 2009). The ceilings are measured with "
    "every run, at its start and its end on both clocks, the better kept (bench.peak): the compute peak, the "
    "best rate of a few dense kernels (square matmuls, and convolutions, whose oneDNN kernels outrun the BLAS "
    "matmul on some CPUs); the memory bandwidth, STREAM's triad on arrays four times the last-level cache, and "
    "the same triad on arrays inside that cache; and the latency of one small operator waiting for the last. "
    "A call's minimal bytes are what it must move at the least (the layer's `min_bytes`: input, weights and "
    "output once, and what its algorithm stores and reads back where that outgrows the cache: the explicit "
    "attention's n×n scores, a recurrence's weights at every step). Its roofline is the slowest of its "
    "useful FLOPs at the peak, its minimal bytes at the bandwidth (the cache's where they fit in it) and, for "
    "a loop that issues an operator per step (a recurrence run step by step, a scan's levels), that many "
    "operator latencies; the ceiling that sets it binds. A fused recurrence (oneDNN's LSTM, cuDNN's) waits for "
    "each step inside one kernel at a cost not measured here: it has no latency ceiling, and its low fraction "
    "is that chain of n steps. Achieved FLOP/s = useful FLOPs (the counted ones, less "
    "the work a kernel skips where the layer states it: a dilated convolution's taps in the zero padding) / "
    "median time, each point on its own clock against ceilings on the same clock; points whose time is not to "
    "be trusted are left out. A training call's minimal bytes are its forward's, the upstream gradient read, "
    "the input's gradient and one gradient per weight written; a decode step's, the state of t positions it "
    "reads, its weights and the token in and out; a recompute point's, its causal forward's over t + 1.\n\n"
)
TABLE_HEAD = (
    "| source | layer | largest point | FLOPs per minimal byte | roofline | achieved | of the roofline "
    "| binding ceiling | of the compute peak | clock |\n"
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
)


def _achieved(ctx: ReportContext, ok: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    ok = clock.each_on_own_clock(ok)
    ok = ok.assign(
        peak=point_peaks(ok, ctx.runs, ok["clock"]), peak_key=device_keys(ok), peak_machine=_peak_machines(ok, ctx.runs)
    )
    ok = ok[ok["peak"].notna()]
    left_out = ok[~ok["time_ok"].astype(bool)]
    ok = ok[ok["time_ok"].astype(bool)]
    ok = ok.assign(useful=fits.useful_flops(ok))
    ok = ok.assign(achieved=ok["useful"] / ok["time_s"])
    return ok.assign(fraction_of_peak=ok["achieved"] / ok["peak"]), left_out


def _peak_lines(ctx: ReportContext, ok: pd.DataFrame, peaks: dict) -> list[str]:
    lines = []
    for (run_id, mid, key), peak in sorted(peaks.items()):
        mine = (ok["run_id"] == run_id) & (ok["peak_key"] == key) & (ok["peak_machine"] == mid)
        if mine.any():
            source = ok.loc[mine, "source"].iloc[0]
            newest = newest_run(ctx.runs, ok.loc[ok["source"] == source, "run_id"].unique()) == run_id
            device = "" if mid else str(ok.loc[mine, "device"].iloc[0]).split(":")[0]
            lines.append(_peak_line(ctx, source, run_id, peak, newest, device))
    return lines


def _largest_row(ctx: ReportContext, source: str, layer: str, top: pd.Series, bounded: pd.DataFrame, peaks) -> str:
    key = f"{source}.{layer}"
    over = "above the measured compute peak" if top.fraction_of_peak > 1 else ""
    if over and "kernel" not in peaks[(top.run_id, top.peak_machine, top.peak_key)]:
        over += " (a run from before the compute peak: a matmul's median rate alone)"
    of_peak = ctx.cite(
        f"{key}.fraction_of_peak.largest",
        _percent(top.fraction_of_peak),
        "%",
        top.run_id,
        note=over,
        clock=top.clock,
    )
    achieved = ctx.cite(
        f"{key}.achieved_flops_per_s.largest", float(f"{top.achieved:.4g}"), "FLOP/s", top.run_id, clock=top.clock
    )
    roofed = bounded.loc[bounded.index == top.name]
    if len(roofed):
        r = roofed.iloc[0]
        intensity = ctx.cite(f"{key}.intensity.largest", float(f"{r.intensity:.3g}"), "FLOP/B", top.run_id)
        bound = ctx.cite(
            f"{key}.roofline_bound.largest",
            float(f"{r.bound:.4g}"),
            "FLOP/s",
            top.run_id,
            note=r.ceiling,
            clock=top.clock,
        )
        of_roof = ctx.cite(
            f"{key}.fraction_of_roofline.largest",
            _percent(r.fraction),
            "%",
            top.run_id,
            note=f"bound by {r.ceiling}",
            clock=top.clock,
        )
        ceiling = r.ceiling
    else:
        why = "training (minimal bytes are the forward's)" if top["mode"] == "train" else "no bandwidth stored"
        intensity = bound = of_roof = "–"
        ceiling = why
    return (
        f"| {source} | {layer} | n={int(top.n)}, d={int(top.d)}, batch={int(top.batch)} | {intensity} | {bound} | "
        f"{achieved} | {of_roof} | {ceiling} | {of_peak} | {top.clock} |"
    )


def _points_above(ctx: ReportContext, bounded: pd.DataFrame) -> str:
    above = ", ".join(
        f"{ctx.cite(f'{source}.roofline.points_above', int((part['fraction'] > 1 + ROOFLINE_TOLERANCE).sum()), 'points', part['run_id'].iloc[-1])} "
        f"of {len(part)} (highest {ctx.cite(f'{source}.roofline.highest_fraction', round(100 * float(part['fraction'].max()), 1), '%', part.loc[part['fraction'].idxmax(), 'run_id'])}) "
        f"on {ctx.source_label(source)}"
        for source, part in bounded.groupby("source")
    )
    return (
        f"Points above their roofline by more than {100 * ROOFLINE_TOLERANCE:g} % (the timing's own spread): "
        f"{above or 'none with a roofline'}."
    )


def peak_section(ctx: ReportContext) -> str:
    every = ctx.every_point()
    ok = every[(every["status"] == "ok") & every["flops_counted"].notna()]
    peaks = _stored_peaks(ctx.runs)
    if ok.empty or not peaks:
        return "_No compute peak stored with the runs._\n"
    ok, left_out = _achieved(ctx, ok)
    roof = against_roofline(ok, ctx.runs, ok["peak"])
    columns = ["source", "run_id", *IDENTITY, "clock", "time_s", "useful", "achieved", "min_bytes", "intensity"]
    columns += ["peak", "bandwidth", "ops", "bound", "ceiling", "fraction", "fraction_of_peak"]
    ctx.files["roofline.csv"] = roof[[c for c in columns if c in roof]]
    bounded = roof[roof["bound"].notna()]
    lines = _peak_lines(ctx, ok, peaks)
    rows = [
        _largest_row(ctx, source, layer, group.sort_values(["flops_counted", "n"]).iloc[-1], bounded, peaks)
        for (source, layer), group in ok.groupby(["source", "layer"])
    ]
    text = METHOD + "\n".join(lines) + "\n\n" + TABLE_HEAD + "\n".join(rows) + "\n\n" + _points_above(ctx, bounded)
    if len(left_out):
        text += f" Left out, their time not to be trusted: {len(left_out)} points."
    text += "\n\n" + _attention_pair(ctx, bounded) + hierarchy_section(ctx)
    if bounded.empty:
        return text + "\n"
    fig = roofline_figure(ctx, bounded, _ceilings(bounded, ctx.runs))
    return text + ctx.figure(
        fig,
        "roofline",
        "Roofline: achieved FLOP/s against intensity",
        "Achieved useful FLOP/s against FLOPs per minimal byte, every point of every mode, under its run's measured "
        "compute peak (dotted) and bandwidths (solid: memory; dashed: last-level cache).",
    )
