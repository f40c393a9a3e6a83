"""Each column's facts in one table under the matrix: its runs, when, the commit, the load, the clocks, the planner."""

from __future__ import annotations

import pandas as pd

from .. import clock
from .context import ReportContext
from .matrix import column_label, columns

CLOCK_WORDS = {"wall": "wall", "cpu": "CPU", "device": "device (CUDA graphs)"}


def planner_rule(meta: dict) -> str:
    """Which rule chose the run's points beyond its plan, read from its meta.json."""
    budget = (meta.get("timing_policy") or {}).get("extend_budget") or 0
    if not budget:
        return "none: the plan's grid"
    # plan_digest came the day the one-rule planner (bench/planner.py) replaced bench/extend.py; no stored run between
    return "one rule (bench/planner.py)" if "plan_digest" in meta else "tuned ladder (bench/extend.py, retired)"


def _load(ctx: ReportContext, ok: pd.DataFrame, meta: dict) -> str:
    during = ok["load_others_cores"].dropna() if "load_others_cores" in ok else pd.Series(dtype=float)
    cores = meta.get("cpu_logical_cores") or meta.get("cpu_cores")
    if during.empty:
        return "not recorded"
    low, high = round(float(during.min()), 1), round(float(during.max()), 1)
    return (f"{low:g}" if low == high else f"{low:g}–{high:g}") + (f" of {cores} cores" if cores else " cores")


def _clocks(ok: pd.DataFrame) -> str:
    if "time_clock" not in ok:
        return "wall"
    counts = ok["time_clock"].fillna("wall").value_counts()
    untrusted = int((~clock.reliable(ok)).sum())
    said = ", ".join(f"{int(n)} {CLOCK_WORDS.get(str(c), str(c))}" for c, n in counts.items())
    return said + (f"; {untrusted} untrusted" if untrusted else "")


def facts(ctx: ReportContext) -> pd.DataFrame:
    rows = []
    frames = ctx.every_point()
    for source in columns(ctx):
        mine = frames[frames["source"] == source]
        ok = mine[mine["status"] == "ok"]
        run_ids = list(dict.fromkeys(mine["run_id"]))
        metas = [ctx.runs[r] for r in run_ids]
        commits = dict.fromkeys(
            (m.get("git_commit") or "unknown")[:7] + (" (dirty)" if m.get("git_dirty") else "") for m in metas
        )
        days = sorted({(m.get("started_utc") or "")[:10] for m in metas} - {""})
        rows.append(
            {
                "column": column_label(ctx, source),
                "machine": ctx.source_label(source).removeprefix("reference: "),
                "runs": ", ".join(run_ids),
                "measured": " to ".join(dict.fromkeys([days[0], days[-1]])) if days else "unknown",
                "commit": ", ".join(commits),
                "points (ok)": f"{len(ok)} of {len(mine)}",
                "other programs' load": _load(ctx, ok, metas[-1]),
                "time clock": _clocks(ok),
                "points beyond the plan": " · ".join(dict.fromkeys(planner_rule(m) for m in metas)),
            }
        )
    return pd.DataFrame(rows)
