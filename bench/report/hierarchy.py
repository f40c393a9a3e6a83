"""The memory hierarchy each run measured (bench.hierarchy): its levels, a figure and cite keys."""

from __future__ import annotations

from ..policy import WALL
from . import style
from .context import ReportContext
from .load import newest_run


def _measured(ctx: ReportContext) -> dict[str, tuple[str, dict]]:
    out = {}
    points = ctx.points
    for source in ctx.sources():
        mine = points[points["source"] == source]
        device = str(mine["device"].iloc[0]).split(":")[0]
        swept = {
            r: ((ctx.runs[r].get("memory_bandwidth") or {}).get(device) or {}).get("hierarchy")
            for r in mine["run_id"].unique()
        }
        swept = {r: h for r, h in swept.items() if h}
        if swept:
            run_id = newest_run(ctx.runs, list(swept))
            out[source] = (run_id, swept[run_id])
    return out


def _figure(ctx: ReportContext, measured: dict[str, tuple[str, dict]]) -> str:
    fig, axes = style.panels(len(measured), sharex=False, sharey=False)
    for ax, (source, (_, h)) in zip(axes, sorted(measured.items())):
        ax.loglog(h["working_set_bytes"], h["bytes_per_s"], "o-", color="0.3", markersize=4, linewidth=1)
        for level in h["levels"]:
            ax.hlines(level["bytes_per_s"], level["from_bytes"], level["up_to_bytes"], color="tab:blue", linewidth=3)
        if h.get("reported_last_level_cache_bytes"):
            ax.axvline(h["reported_last_level_cache_bytes"], color="tab:red", linestyle="--", linewidth=1)
        if h.get("effective_last_level_cache_bytes"):
            ax.axvline(h["effective_last_level_cache_bytes"], color="tab:green", linestyle="-", linewidth=1)
        ax.set_title(ctx.source_label(source), fontsize=9)
        ax.set_xlabel("working set (the triad's three arrays)")
        ax.set_ylabel("bandwidth")
        ax.xaxis.set_major_formatter(style.EngFormatter(unit="B", sep=" "))
        ax.yaxis.set_major_formatter(style.EngFormatter(unit="B/s", sep=" "))
    return ctx.figure(
        fig,
        "memory_hierarchy",
        "Bandwidth against working set",
        "The triad's bandwidth against its working set (points), its levels (blue: each plateau's median), the "
        "effective last-level cache measured (green) and the one the OS reports (red, dashed).",
    )


def hierarchy_section(ctx: ReportContext) -> str:
    measured = _measured(ctx)
    if not measured:
        return ""
    lines = []
    for source, (run_id, h) in sorted(measured.items()):
        key = f"{source}.memory_hierarchy"
        parts = []
        for i, level in enumerate(h["levels"]):
            rate = ctx.cite(
                f"{key}.level{i + 1}.bytes_per_s", float(f"{level['bytes_per_s']:.4g}"), "B/s", run_id, clock=WALL
            )
            span = f"{level['from_bytes'] / 2**20:.3g}–{level['up_to_bytes'] / 2**20:.4g} MiB"
            parts.append(f"{rate} over {span}")
        effective = h.get("effective_last_level_cache_bytes")
        reported = h.get("reported_last_level_cache_bytes")
        said = (
            f"; the effective last-level cache is {ctx.cite(f'{key}.effective_last_level_cache_bytes', int(effective), 'B', run_id)}"
            if effective
            else "; no level above memory's was found"
        )
        if reported:
            said += f" (the OS reports {reported / 2**20:g} MiB)"
        lines.append(f"- {ctx.source_label(source)}: levels {', '.join(parts)}{said}.")
    text = (
        "The memory hierarchy as measured (bench.hierarchy): STREAM's triad over working sets doubling from 48 KiB "
        "to four times the last-level cache the OS reports, each working set's best round; a level ends where the "
        "bandwidth falls below 75 % of the best in it, and the effective last-level cache is the largest working "
        "set of the level before memory's. The roofline's rule for an intermediate that spills out of the cache uses "
        "it, not the size the OS reports (a VM may report its host's).\n\n" + "\n".join(lines) + "\n\n"
    )
    return text + _figure(ctx, measured)
