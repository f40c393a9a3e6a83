"""The runs behind the report: how each measured, what went wrong, and where every number comes from."""

from __future__ import annotations

from .. import allocator, clock, machine
from ..formats import stored_peaks
from ..policy import CPU, NOISY_IQR_RATIO, method_text
from .context import SIZES_SHOWN, ReportContext, format_value
from .facts import planner_rule


def provenance_section(ctx: ReportContext) -> str:
    lines = [
        "## Provenance\n",
        "Every number above comes from these stored runs (`results/<run-id>/`); "
        "`numbers.json` ties each one to its run.\n",
    ]
    if ctx.notes:
        lines += ["Runs read together:\n", *(f"- {note}" for note in ctx.notes), "\nThe runs:\n"]
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
            f"commit {commit}"
            + (f"; points {counts}, beyond the plan: {planner_rule(meta)}" if counts else "")
            + "."
            + _nodes_text(meta)
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
        line = f"- {run_id}: {method_text(policy, meta.get('timing_method'))}"
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
