"""Achieved useful FLOP/s as a fraction of the device's measured compute peak (bench.peak), every point
on its own clock (method: docs/method.md)."""

from __future__ import annotations

import math

import pandas as pd
from matplotlib.lines import Line2D

from .. import clock, fits
from ..formats import stored_peaks
from ..machine import machine_identity, node_facts
from ..peak import peak_on
from ..spec import device_keys
from ..timing import CPU, WALL
from . import style
from .context import ReportContext
from .load import newest_run, run_tag


def _stored_peaks(runs: dict[str, dict]) -> dict[tuple[str, str, str], dict]:
    """The compute peaks stored with the runs by (run id, machine, device key): machine "" for the run's own
    process; in a cluster sweep each machine's, the best of its nodes' peaks (one machine's ceiling)."""
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
    """Each point's device compute peak (FLOP/s) on clock `on` (one, or each point's); NaN where none is stored."""
    peaks = _stored_peaks(runs)
    keys = zip(points["run_id"], _peak_machines(points, runs), device_keys(points))
    ons = [on] * len(points) if isinstance(on, str) else list(on)
    values = [peak_on(peaks[key], c) if key in peaks else None for key, c in zip(keys, ons)]
    return pd.Series([math.nan if v is None else v for v in values], index=points.index, dtype=float)


def fraction_of_peak_figure(ctx: ReportContext, ok: pd.DataFrame):
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


def _bandwidth(ctx: ReportContext, source: str, run_id: str, device: str, suffix: str) -> str:
    """The run's triad bandwidth of `device` as a clause of its peak line, cited; "" where it measured none."""
    entry = (ctx.runs[run_id].get("memory_bandwidth") or {}).get(device)
    if not entry:
        return ""
    value = float(f"{entry['bytes_per_s']:.4g}")
    return (
        f"; memory bandwidth {ctx.cite(f'{source}.memory_bandwidth{suffix}', value, 'B/s', run_id, clock=WALL)} (triad)"
    )


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
    if "kernel" not in peak:  # a run from before the compute peak stored its square matmul's median rate
        return (
            f"- {source}: matmul peak {wall} ({peak.get('size')}×{peak.get('size')} {peak.get('dtype', '')} matmul, "
            "median): a run from before the compute peak; a convolution can outrun this rate, so its fractions "
            "may exceed 100 %."
        )
    bandwidth = _bandwidth(ctx, label_source, run_id, device, suffix) if device else ""
    return (
        f"- {source}: compute peak {wall} on the wall clock{on_cpu} (best: {peak['kernel']}, {peak.get('dtype', '')})"
        f"{bandwidth}."
    )


def peak_section(ctx: ReportContext) -> str:
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
            source = ok.loc[mine, "source"].iloc[0]
            newest = newest_run(ctx.runs, ok.loc[ok["source"] == source, "run_id"].unique()) == run_id
            device = "" if mid else str(ok.loc[mine, "device"].iloc[0]).split(":")[0]
            lines.append(_peak_line(ctx, source, run_id, peak, newest, device))
    rows = []
    for (source, layer), group in ok.groupby(["source", "layer"]):
        top = group.sort_values(["flops_counted", "n"]).iloc[-1]
        key = f"{source}.{layer}"
        over = "above the measured compute peak" if top.fraction > 1 else ""
        if over and "kernel" not in peaks[(top.run_id, top.peak_machine, top.peak_key)]:
            over += " (a run from before the compute peak: a matmul's median rate alone)"
        fraction = ctx.cite(
            f"{key}.fraction_of_peak.largest", round(100 * top.fraction, 1), "%", top.run_id, note=over, clock=top.clock
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
