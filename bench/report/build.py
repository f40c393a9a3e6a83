"""`python -m bench report`: stored runs in, reports/ out (report.md, report.html, figures/, fits.csv,
numbers.json, table.tex). Measures nothing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

from .. import allocator, clock, fits, machine, storage, timing
from ..errors import BadInput
from ..formats import stored_peaks
from ..spec import DECODE_MODES, IDENTITY, WHERE, mode_of, source_keys
from ..timing import CONFIDENCE, CPU, NOISY_IQR_RATIO
from .claims import claims_section
from .context import SIZES_SHOWN, ReportContext, format_value
from .crossover import crossover_section
from .decode import decode_headline, decode_section
from .headline import headline, verdict_table
from .load import REFERENCE, combine, keep_apart, load_runs, select_run_dirs
from .numbers import numbers_document
from .paths import paths_section
from .publish import staged
from .render import split_sections, to_html, to_markdown
from .roofline import peak_section, point_peaks
from .scaling import (
    cite_fits,
    flops_check,
    memory_pair_plot,
    rss_table,
    scaling_section,
    sequential_time_section,
    two_term_section,
)
from .summary import beyond_table1, summary_latex, summary_markdown, summary_rows
from .table1_figure import table1_section
from .training import training_section


def machine_key(meta: dict, node=None) -> tuple[str, str]:
    """(id, words) of a run's (or its `node`'s) machine; a reference run's prefixed, apart from the reader's own."""
    mid, label = machine.machine_identity(machine.node_facts(meta, node) or meta)
    if meta.get("reference"):
        return f"{REFERENCE}.{mid}", f"{REFERENCE}: {label}"
    return mid, label


def _device_words(meta: dict, device: str, key: str, node=None) -> str:
    facts = machine.node_facts(meta, node) or meta
    names = [d.get("name") for d in facts.get("devices", []) if str(d.get("device", "")).split(":")[0] == device]
    return f"{key} ({names[0]})" if device != "cpu" and names else key


def row_nodes(points: pd.DataFrame) -> list:
    """Each row's Ray node, None for a row measured in its run's own process."""
    if "node" not in points:
        return [None] * len(points)
    return [node if isinstance(node, str) and node else None for node in points["node"]]


def assign_sources(points: pd.DataFrame, runs: dict[str, dict]) -> tuple[pd.Series, dict[str, str]]:
    """Each point's source ("intel-xeon-2c-vm.cpu-train"), and each in words: what no fit or plot pools across."""
    sources, labels = [], {}
    for run_id, node, device, key in zip(points["run_id"], row_nodes(points), points["device"], source_keys(points)):
        mid, words = machine_key(runs[run_id], node)
        source = f"{mid}.{key}"
        sources.append(source)
        labels[source] = f"{words} · {_device_words(runs[run_id], str(device), key, node)}"
    return pd.Series(sources, index=points.index, dtype=object), labels


POINT_IDENTITY = tuple(c for c in IDENTITY if c not in WHERE)  # within a source: its device, dtype and mode fixed
PATH_IDENTITY = ("layer", "n", "k", "window")  # a row of paths.csv: what its section tells rows apart by
CLAIM_IDENTITY = ("claim_id",)


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
            f"commit {commit}" + (f"; points {counts}" if counts else "") + "." + _nodes_text(meta)
        )
    return "\n".join(lines) + "\n"


def _nodes_text(meta: dict) -> str:
    nodes = meta.get("nodes")
    if not isinstance(nodes, dict) or not nodes:
        return ""
    parts = []
    for node, facts in sorted(nodes.items(), key=lambda kv: (str(kv[1].get("host")), kv[0])):
        peaks = ", ".join(
            f"{key} {format_value(float(peak.get('flops_per_s', 0)) / 1e9)} GFLOP/s"
            for key, peak in sorted(stored_peaks(facts).items())
        )
        commit = (facts.get("git_commit") or "unknown")[:12]
        parts.append(
            f"{facts.get('host')} (node {node[:8]}: {machine.machine_identity(facts)[1]}; commit {commit}, torch "
            f"{facts.get('torch')}" + (f"; compute peak {peaks}" if peaks else "") + ")"
        )
    ray = meta.get("ray") or {}
    deaths = len(meta.get("worker_deaths") or [])
    return (
        f" Measured on Ray ({ray.get('address')}), {len(nodes)} node(s): {'; '.join(parts)}"
        + (f"; {deaths} worker death(s), their chunks measured again elsewhere" if deaths else "")
        + "."
    )


POINT_COLUMNS_SHOWN = ["source", "layer", "batch", *SIZES_SHOWN]


def _runs_without(ctx: ReportContext, column: str) -> list[str]:
    if column not in ctx.points:
        return sorted(ctx.points["run_id"].unique())
    return sorted(run_id for run_id, group in ctx.points.groupby("run_id") if group[column].isna().all())


def _timing_methods(ctx: ReportContext) -> str:
    lines = []
    for run_id, meta in sorted(ctx.runs.items()):
        policy = meta.get("timing_policy")
        if not isinstance(policy, dict) or run_id not in set(ctx.points["run_id"]):
            continue
        line = f"- {run_id}: {timing.method_text(policy, meta.get('timing_method'))}"
        if meta.get("threads_reason"):
            line += f" Threads: {meta['threads_reason']}."
        line += f" CPU allocator: {allocator.describe(meta.get('allocator'))}."
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
    threshold = f"{100 * NOISY_IQR_RATIO:g} %"
    lines = []
    for source in ctx.sources():
        mine = points[points["source"] == source]
        mine_ok = mine[mine["status"] == "ok"]
        noisy = mine_ok[mine_ok["time_noisy"].fillna(False).astype(bool)]
        run_id = mine["run_id"].iloc[-1]
        lines.append(
            f"- {ctx.source_label(source)}: points not measured "
            f"{ctx.cite(f'{source}.points.not_ok', int((mine['status'] != 'ok').sum()), 'points', run_id)}; "
            f"noisy (IQR above {threshold} of the median; kept, flagged) "
            f"{ctx.cite(f'{source}.points.noisy', len(noisy), 'points', run_id)} of "
            f"{ctx.cite(f'{source}.points.ok', len(mine_ok), 'points', run_id)}"
            + (
                f"; timed on the CPU clock of their one thread "
                f"{ctx.cite(f'{source}.points.cpu_clock', int((mine_ok['time_clock'] == CPU).sum()), 'points', run_id)}"
                if "time_clock" in mine_ok
                else ""
            )
            + (
                f"; unreliable on their clock after every pass (stalled, bimodal or unstable; left out of the time "
                f"fits and of every number made of times, kept for FLOPs and memory) "
                f"{ctx.cite(f'{source}.points.unreliable', int((~clock.reliable(mine_ok)).sum()), 'points', run_id)}"
                if "time_reliable" in mine_ok and mine_ok["time_reliable"].notna().any()
                else ""
            )
            + "."
        )
    text = (
        "\n".join(lines) + f"\n\nOn a shared or virtual machine the speed drifts in phases of tens of milliseconds, "
        f"so many sub-millisecond points exceed {threshold}; each point's spread is in points.csv (`time_iqr_s`)."
    )
    unchecked = _runs_without(ctx, "time_reliable")
    if len(unchecked) < points["run_id"].nunique():
        unreliable = ok[~clock.reliable(ok)]
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
        text += "\n" + bad[["source", "layer", *SIZES_SHOWN, "status", "error"]].to_markdown(index=False) + "\n"
    return text


TITLE = "Sequence layers, measured: does Vaswani et al. (2017), Table 1, hold on this machine?"


def build_report(
    results: list[Path] | None,
    out_dir: Path,
    skip_bad: bool = False,
    compare_reference: bool = False,
    on_figure: Callable[[], object] | None = None,
) -> dict:
    """Read the chosen runs (default: this machine's) and replace the report in `out_dir`; `on_figure`: progress."""
    dirs, notes = select_run_dirs(results, compare_reference)
    if not dirs:
        raise BadInput("no stored runs found: `make bench` measures this machine")
    points, runs, paths, claims, generate = load_runs(dirs, skip_bad=skip_bad)
    points = points.copy()
    sources, labels = assign_sources(points, runs) if len(points) else (pd.Series(dtype=object), {})
    points["source"] = sources
    if len(points):
        points["source"], labels, apart = keep_apart(points, runs, labels)
        notes += apart
    points, combined = combine(points, runs, "source", POINT_IDENTITY, labels, "points")
    notes += combined
    machines = {
        src: machine_key(runs[r], node)[0]
        for src, r, node in zip(points["source"], points["run_id"], row_nodes(points))
    }
    side = {}
    for name, table, identity, what in (
        ("paths", paths, PATH_IDENTITY, "rows"),
        ("claims", claims, CLAIM_IDENTITY, "claims"),
    ):
        words = {}
        if table is not None:
            table = table.assign(machine=[machine_key(runs[r])[0] for r in table["run_id"]])
            words = {machine_key(runs[r])[0]: f"{machine_key(runs[r])[1]} · {name}" for r in table["run_id"]}
        side[name], combined = combine(table, runs, "machine", identity, words, what)
        notes += combined
    side["generate"] = generate
    this_id = machine.this_machine()[0]
    candidates = (
        list(dict.fromkeys(machines.values()))
        or [machine_key(runs[r])[0] for r in runs if not runs[r].get("reference")]
        or [machine_key(m)[0] for m in runs.values()]
    )
    primary = this_id if this_id in candidates else candidates[0]
    with staged(out_dir) as stage:
        return _write_report(stage, points, runs, side, labels, primary, machines, notes, on_figure)


def _write_report(out_dir: Path, points, runs, side, labels, primary, machines, notes, on_figure) -> dict:
    decoding = pd.Series([m in DECODE_MODES for m in mode_of(points)], index=points.index, dtype=bool)
    decode, points = points[decoding].copy(), points[~decoding].copy()
    ctx = ReportContext(
        decode=decode,
        points=points,
        runs=runs,
        out_dir=out_dir,
        paths=side["paths"],
        claims=side["claims"],
        generate=side.get("generate"),
        labels=labels,
        primary=primary,
        machines=machines,
        notes=notes,
        on_figure=on_figure,
    )

    intro = (
        "Generated by `python -m bench report` from the stored runs listed under Provenance; it measures "
        "nothing itself. Every number here is in `numbers.json` with the run, machine and commit that "
        "produced it (`python -m bench cite KEY`; `--list` shows the keys).\n"
    )
    said = "".join(f"_{note}_\n\n" for note in notes)
    headline_md, figure_md, verdicts_md, parts = "_No points stored._\n", "", "", []
    fit_rows = pd.DataFrame(columns=fits.FIT_COLUMNS)
    decode_fits = fit_rows
    if len(decode):
        for on, column in fits.PEAK_COLUMNS.items():
            decode[column] = point_peaks(decode, runs, on)
        decode_fits = fits.fit_table(decode)
        ctx.decode_texts = cite_fits(ctx, decode_fits)
    if len(points):
        for on, column in fits.PEAK_COLUMNS.items():  # for "not asymptotic yet": rates as % of peak
            points[column] = point_peaks(points, runs, on)
        fit_rows = fits.fit_table(points)
        texts = cite_fits(ctx, fit_rows)
        headline_md, verdicts_md = headline(ctx, texts, fit_rows), verdict_table(ctx, texts)
        figure_md = table1_section(ctx, fit_rows)
        table = summary_rows(ctx, fit_rows, texts)
        marks = ", ".join(f"{fits.VERDICT_MARK[v]} {v}" for v in fits.VERDICTS)
        parts += [
            "## The whole table, measured\n",
            f"Predicted (Table 1) beside measured: exponents of power-law fits ({marks}; – no sweep, "
            "– ? sweeps but none that could be fitted), sequential depth measured at the operator level, "
            "the path from position 0 to position n−1 (layers crossed, or the steps inside a recurrence's one "
            "layer). Details, intervals and the reason of every "
            "verdict in the sections below.\n",
            summary_markdown(table),
            beyond_table1(ctx, texts),
            "## How it was measured, and what went wrong\n",
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
                "FLOPs of one forward pass (a forward and a backward pass for a `-train` source), whole batch, "
                "2 per multiply-accumulate of every "
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
                "Median time of one forward pass in inference mode (a training step for a `-train` source), "
                "threads pinned, after warm-up, on the clock its fit uses: the wall clock, or where other "
                "programs took cores while a point was timed the CPU time of the call's one thread (spread as IQR "
                f"in points.csv, and the {100 * CONFIDENCE:g} % interval of the median where the run "
                "stored one; both clocks are in points.csv).\n\n" + two_term_section(ctx),
            )
        )
        parts += [
            "### Crossover: where attention becomes the costlier layer\n",
            crossover_section(ctx),
            "### Against the roofline\n",
            peak_section(ctx),
        ]
        parts.append(
            scaling_section(
                ctx,
                fit_rows,
                texts,
                "memory",
                "Memory",
                "Peak bytes the forward pass (with the backward, for a `-train` source) allocates above what was "
                "live before it (inputs "
                "and weights excluded): CUDA allocator statistics on a GPU, the profiler's "
                "allocation events replayed on the CPU.\n\n" + memory_pair_plot(ctx) + "\n" + rss_table(ctx),
            )
        )
        parts.append(training_section(ctx, texts))
    if len(points) or len(decode):
        headline_md = (headline_md + "\n" if len(points) else "") + decode_headline(ctx)
    parts.append(decode_section(ctx))
    if len(points):
        table.to_csv(out_dir / "table.csv", index=False)
        (out_dir / "table.tex").write_text(summary_latex(table), errors="backslashreplace")
    parts.append(paths_section(ctx))
    if len(points):
        parts.append(sequential_time_section(ctx))
    parts.append(claims_section(ctx))
    parts.append(provenance_section(ctx))

    sections = split_sections("\n".join(parts))
    first_screen = "\n".join([headline_md, said, figure_md, verdicts_md, intro])
    (out_dir / "report.md").write_text(to_markdown(TITLE, first_screen, sections), errors="backslashreplace")
    html = to_html(TITLE, headline_md, verdicts_md, intro, sections, figure_md, said)
    (out_dir / "report.html").write_text(html, errors="backslashreplace")
    every_fit = [f for f in (fit_rows, decode_fits) if len(f)]
    storage.write_table(out_dir / "fits.csv", pd.concat(every_fit, ignore_index=True) if every_fit else fit_rows)
    storage.write_json(out_dir / "numbers.json", numbers_document(ctx.numbers, runs))
    return {
        "runs": len(runs),
        "points": len(points) + len(decode),
        "figures": len(ctx.figures),
        "numbers": len(ctx.numbers),
    }
