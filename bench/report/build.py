"""`python -m bench report`: stored runs in, reports/ out. Measures nothing.

Writes report.md and report.html (same content; figures beside them in figures/), fits.csv,
numbers.json (every number the report shows, with provenance) and table.tex.
"""

from __future__ import annotations

import html
import shutil
from pathlib import Path

import markdown
import pandas as pd

from .. import fits, storage, timing
from ..spec import device_keys
from ..timing import NOISY_IQR_RATIO
from .context import ReportContext, format_value
from .load import load_runs
from .numbers import numbers_document
from .scaling import (
    cite_fits,
    crossover_section,
    flops_check,
    memory_pair_plot,
    peak_section,
    point_peaks,
    rss_table,
    scaling_section,
    sequential_time_section,
    two_term_section,
)
from .summary import summary_latex, summary_markdown, summary_rows


def label_sources(points: pd.DataFrame, runs: dict[str, dict]) -> pd.Series:
    """A short name per (run, device, dtype): `cpu`, `cuda`, `cuda-bfloat16`; where several runs measured
    the same device, the newest keeps the short name and the others get `@<run-id>`."""
    base = pd.Series(device_keys(points), index=points.index, dtype=object)
    labels = base.copy()
    for name in base.unique():
        run_ids = sorted(set(points.loc[base == name, "run_id"]), key=lambda r: runs[r].get("started_utc") or "")
        for run_id in run_ids[:-1]:
            labels[(base == name) & (points["run_id"] == run_id)] = f"{name}@{run_id}"
    return labels


def provenance_section(ctx: ReportContext) -> str:
    lines = [
        "## Provenance\n",
        "Every number above comes from these stored runs (`results/<run-id>/`); "
        "`numbers.json` ties each one to its run.\n",
    ]
    for run_id, meta in sorted(ctx.runs.items(), key=lambda kv: kv[1].get("started_utc") or ""):
        devices = "; ".join(
            f"{d.get('device')}: {d.get('name')} ({format_value(float(d.get('memory_bytes', 0)) / 2**30)} GiB)"
            for d in meta.get("devices", [])
        )
        commit = (meta.get("git_commit") or "unknown")[:12] + (" (with local changes)" if meta.get("git_dirty") else "")
        counts = meta.get("status_counts")
        lines.append(
            f"- **{run_id}** ({meta.get('kind', 'run')}, status {meta.get('status')}): started "
            f"{meta.get('started_utc')}, finished {meta.get('finished_utc')}; command `{meta.get('command')}`; "
            f"machine {meta.get('machine') or meta.get('cpu_model')}, {meta.get('cpu_cores')} cores, "
            f"{meta.get('threads')} threads; devices {devices}; Python {meta.get('python')}, torch {meta.get('torch')}; "
            f"commit {commit}" + (f"; points {counts}" if counts else "") + "."
        )
    return "\n".join(lines) + "\n"


POINT_COLUMNS_SHOWN = ["source", "layer", "batch", "n", "d", "k", "heads", "window"]


def _runs_without(ctx: ReportContext, column: str) -> list[str]:
    """Runs whose points.csv has no value in `column` (stored before the column existed)."""
    if column not in ctx.points:
        return sorted(ctx.points["run_id"].unique())
    return sorted(run_id for run_id, group in ctx.points.groupby("run_id") if group[column].isna().all())


def _timing_methods(ctx: ReportContext) -> str:
    """Each run's timing method (bench.timing.method_text from its meta.json), its thread choice and the
    load other processes put on the machine while it ran."""
    lines = []
    for run_id, meta in sorted(ctx.runs.items()):
        policy = meta.get("timing_policy")
        if not isinstance(policy, dict) or run_id not in set(ctx.points["run_id"]):
            continue
        line = f"- {run_id}: {timing.method_text(policy, meta.get('timing_method'))}"
        if meta.get("threads_reason"):
            line += f" Threads: {meta['threads_reason']}."
        passes = [p for p in meta.get("load_passes") or [] if "others_busy_cores" in p]
        if passes:
            busiest = max(p["others_busy_cores"] for p in passes)
            line += (
                f" Other processes took at most "
                f"{ctx.cite(f'runs.{run_id}.load.others_busy_cores_max', round(busiest, 2), 'cores', run_id)} "
                f"during a pass ({len(passes)} passes watched)."
            )
        lines.append(line)
    if not lines:
        return ""
    return "\nHow time was measured, per run (from its meta.json):\n\n" + "\n".join(lines) + "\n"


def problems_section(ctx: ReportContext) -> str:
    points = ctx.points
    bad = points[points["status"] != "ok"]
    ok = points[points["status"] == "ok"]
    noisy = ok[ok["time_noisy"].fillna(False).astype(bool)]
    run_id = points["run_id"].iloc[-1]
    threshold = f"{100 * NOISY_IQR_RATIO:g} %"
    text = (
        f"Points not measured: {ctx.cite('all.points.not_ok', len(bad), 'points', run_id)}; points whose "
        f"timing is noisy (IQR above {threshold} of the median; kept, flagged): "
        f"{ctx.cite('all.points.noisy', len(noisy), 'points', run_id)} of "
        f"{ctx.cite('all.points.ok', len(ok), 'points', run_id)}. "
        f"On a shared or virtual machine the speed drifts in phases of tens of milliseconds, so many "
        f"sub-millisecond points exceed {threshold}; each point's spread is in points.csv (`time_iqr_s`)."
    )
    unchecked = _runs_without(ctx, "time_reliable")
    if len(unchecked) < points["run_id"].nunique():
        unreliable = ok[~fits.reliable_mask(ok)]
        text += (
            f" Points whose timing stayed unreliable after a re-measurement (stalled, bimodal or unstable; "
            f"left out of the time fits, kept for FLOPs and memory): "
            f"{ctx.cite('all.points.unreliable', len(unreliable), 'points', run_id)}."
        )
        if len(unreliable):
            flags = (
                unreliable[POINT_COLUMNS_SHOWN + ["time_flag"]]
                if "time_flag" in unreliable
                else unreliable[POINT_COLUMNS_SHOWN]
            )
            text += "\n\n" + flags.dropna(axis=1, how="all").to_markdown(index=False) + "\n"
    if unchecked:
        text += (
            f"\n\nRuns stored without a reliability check or an interval per point (an older format): "
            f"{', '.join(unchecked)}. Their ok points count as reliable, and their time fits take the "
            f'regression\'s interval alone (`measurement_uncertainty` "none stored" in fits.csv).'
        )
    text += "\n" + _timing_methods(ctx)
    if len(bad):
        text += (
            "\n"
            + bad[["source", "layer", "n", "d", "k", "heads", "window", "status", "error"]].to_markdown(index=False)
            + "\n"
        )
    return text


HTML_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 78rem; margin: 2rem auto; padding: 0 1rem; line-height: 1.45; }
table { border-collapse: collapse; font-size: 0.85rem; margin: 1rem 0; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.5rem; text-align: left; }
th { background: #f3f3f3; }
img { max-width: 100%; }
code { background: #f5f5f5; padding: 0 0.2rem; }
"""


def to_html(md_text: str, title: str) -> str:
    body = markdown.markdown(md_text, extensions=["tables", "fenced_code"])
    return (
        f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{HTML_STYLE}</style></head><body>\n{body}\n</body></html>\n"
    )


def build_report(results: list[Path], out_dir: Path, skip_bad: bool = False) -> dict:
    points, runs, paths, claims = load_runs(results, skip_bad=skip_bad)
    points = points.copy()
    points["source"] = label_sources(points, runs) if len(points) else pd.Series(dtype=str)
    out_dir.mkdir(parents=True, exist_ok=True)
    if (out_dir / "figures").exists():
        shutil.rmtree(out_dir / "figures")  # figures are regenerated whole: none is left from older data
    ctx = ReportContext(points=points, runs=runs, out_dir=out_dir, paths=paths, claims=claims)

    parts = [
        "# Sequence layers, measured: the complexity table of Vaswani et al. (2017), Table 1\n",
        "Generated by `python -m bench report` from the stored runs listed under Provenance; it measures "
        "nothing itself. Every number here is in `numbers.json` with the run, machine and commit that "
        "produced it (`python -m bench cite KEY`).\n",
    ]
    fit_rows = pd.DataFrame(columns=fits.FIT_COLUMNS)
    if len(points):
        points[fits.PEAK_COLUMN] = point_peaks(points, runs)  # for "not asymptotic yet": rates as % of peak
        fit_rows = fits.fit_table(points)
        texts = cite_fits(ctx, fit_rows)
        table = summary_rows(ctx, fit_rows, texts)
        marks = ", ".join(f"{fits.VERDICT_MARK[v]} {v}" for v in fits.VERDICTS)
        parts += [
            "## The table, measured\n",
            f"Predicted (Table 1) beside measured: exponents of power-law fits ({marks}; – no sweep, "
            "– ? sweeps but none that could be fitted), sequential depth measured at the operator level, "
            "layers needed for position 0 to reach position n−1. Details, intervals and the reason of every "
            "verdict in the sections below.\n",
            summary_markdown(table),
            "How the fits are judged: " + fits.method_text() + "\n",
            problems_section(ctx),
        ]
        parts.append(
            scaling_section(
                ctx,
                fit_rows,
                texts,
                "flops",
                "Compute: FLOPs",
                "FLOPs of one forward pass, whole batch, 2 per multiply-accumulate of every "
                "matrix product and convolution, counted at the operator level while the "
                "layer runs (bench.flops) and checked against the closed form (models).\n\n" + flops_check(ctx),
            )
        )
        parts.append(
            scaling_section(
                ctx,
                fit_rows,
                texts,
                "time",
                "Time",
                "Median wall time of one forward pass in inference mode, threads pinned, "
                "after warm-up (pytest-benchmark rounds; spread as IQR in points.csv, and the "
                f"{100 * fits.POINT_CI_CONFIDENCE:g} % interval of the median where the run "
                "stored one).\n\n" + two_term_section(ctx),
            )
        )
        parts += [
            "### Crossover: where attention becomes the costlier layer\n",
            crossover_section(ctx),
            "### Fraction of peak\n",
            peak_section(ctx),
        ]
        parts.append(
            scaling_section(
                ctx,
                fit_rows,
                texts,
                "memory",
                "Memory",
                "Peak bytes the forward pass allocates above what was live before it (inputs "
                "and weights excluded): CUDA allocator statistics on a GPU, the profiler's "
                "allocation events replayed on the CPU.\n\n" + memory_pair_plot(ctx) + "\n" + rss_table(ctx),
            )
        )
        table.to_csv(out_dir / "table.csv", index=False)
        (out_dir / "table.tex").write_text(summary_latex(table))
    parts.append(_optional_section("paths", ctx))
    if len(points):
        parts.append(sequential_time_section(ctx))
    parts.append(_optional_section("claims", ctx))
    parts.append(provenance_section(ctx))

    md_text = "\n".join(parts)
    (out_dir / "report.md").write_text(md_text)
    (out_dir / "report.html").write_text(to_html(md_text, "Sequence layers, measured"))
    storage.write_table(out_dir / "fits.csv", fit_rows)
    storage.write_json(out_dir / "numbers.json", numbers_document(ctx.numbers, runs))
    return {"runs": len(runs), "points": len(points), "figures": len(ctx.figures), "numbers": len(ctx.numbers)}


def _optional_section(name: str, ctx: ReportContext) -> str:
    """The paths and claims sections live in their own modules."""
    if name == "paths":
        from .paths import paths_section  # noqa: PLC0415

        return paths_section(ctx)
    from .claims import claims_section  # noqa: PLC0415

    return claims_section(ctx)
