"""The time section's word on the allocator: each layer's largest point, pinned and in a default process, cited."""

from __future__ import annotations

import pandas as pd

from .context import ReportContext

POLICY = (
    "Every time in this report was measured with glibc's malloc pinned (it keeps the memory it got, so a warm call "
    "takes no page fault; docs/method.md). A plain Python process, a notebook, keeps glibc's own policy: there a "
    "block above its mmap threshold comes fresh from the OS at every call."
)


def default_policy_section(ctx: ReportContext) -> str:
    """The policy in words, and per layer its largest point's median time both ways (bench.default_policy)."""
    table = ctx.default_policy
    if table is None or table.empty:
        return POLICY + " No run here timed a default process (`default_policy.csv`).\n"
    every = ctx.every_point()
    pinned = every[["run_id", "point_id", "source", "time_median_s"]]
    both = table.merge(pinned, on=["run_id", "point_id"], suffixes=("_default", ""))
    both = both.sort_values("n").drop_duplicates(["source", "layer"], keep="last")
    rows = []
    for r in both.sort_values(["source", "layer"]).itertuples():
        key = f"{r.source}.{r.layer}.time_s"
        n = f"n{int(r.n)}"
        rows.append(
            {
                "column": ctx.source_tag(r.source),
                "layer": r.layer,
                "n": int(r.n),
                "pinned (the report's)": ctx.cite(f"{key}.pinned_malloc.{n}", float(r.time_median_s), "s", r.run_id),
                "default process": ctx.cite(f"{key}.default_malloc.{n}", float(r.time_median_s_default), "s", r.run_id),
                "default ÷ pinned": ctx.cite(
                    f"{key}.default_over_pinned.{n}", round(r.time_median_s_default / r.time_median_s, 2), "x", r.run_id
                ),
                "page faults a call (default)": f"{r.faults_per_call:,.0f}",
            }
        )
    if not rows:
        return POLICY + " The default-process timings stored match no point read here.\n"
    return (
        POLICY + " Each run timed the largest n of each layer's widest n-sweep once more in such a process "
        "(torch.utils.benchmark, the run's threads); quote the pinned time with its policy, or the default one:\n\n"
        + pd.DataFrame(rows).to_markdown(index=False)
        + "\n"
    )
