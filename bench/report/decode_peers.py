"""The cached attention's decode step beside torch's kernels (bench.benchmarks.decode_peers), cited per machine."""

from __future__ import annotations

import re

import pandas as pd

from ..benchmarks.decode_peers import OURS
from .context import ReportContext

INTRO = (
    "One decode step of the cached attention (one query position against a cache of t keys and values, every head "
    "of the batch), run by each kernel on the same cache: this project's split-KV kernel (`models/split_kv_kernel.py`), "
    "the explicit softmax(q·Kᵀ)·V, torch's `scaled_dot_product_attention` as it dispatches and with each backend "
    "forced, and FlexAttention compiled (its decoding kernel). Time: the median of graph replays on the device clock. "
    "Share of the bound: the bytes the step must move (keys, values, query and output, once) at the device's "
    "measured bandwidth, over the time; above 100 % where the step reads faster than that measurement "
    "(`python -m bench.benchmarks.decode --peers`).\n"
)


def _slug(peer: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", peer.lower()).strip("_")


def _table(ctx: ReportContext, part: pd.DataFrame, prefix: str) -> list[str]:
    lines = [
        "| t | kernel | time | share of the bound | error (float64) | against the fastest of torch's |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for t, rows in part.groupby("t", sort=True):
        ok = rows[rows["status"] == "ok"]
        torch_ok = ok[ok["peer"] != OURS]
        fastest = torch_ok["time_s"].min() if len(torch_ok) else None
        for r in rows.itertuples():
            key = f"{prefix}.t{t}.{_slug(r.peer)}"
            if r.status != "ok":
                lines.append(f"| {t:,} | {r.peer} | not available: {r.message} | | | |")
                continue
            time = ctx.cite(f"{key}.time_s", float(f"{r.time_s:.4g}"), "s", r.run_id, clock="device")
            share = ctx.cite(f"{key}.share_of_bound", float(f"{100 * r.share_of_bound:.3g}"), "%", r.run_id)
            against = ""
            if fastest and r.peer == OURS:
                against = ctx.cite(f"{key}.speed_vs_fastest_torch", float(f"{fastest / r.time_s:.3g}"), "x", r.run_id)
            lines.append(f"| {t:,} | {r.peer} | {time} | {share} | {r.max_abs_error:.2g} | {against} |")
    return lines


def peers_section(ctx: ReportContext) -> str:
    table = ctx.decode_peers
    parts = ["### Decode beside its peers\n", INTRO]
    for (mid, words, device, dtype), part in table.groupby(["machine", "machine_words", "device", "dtype"], sort=True):
        device_key = str(device).split(":")[0]
        bandwidth = float(part["bandwidth_bytes_per_s"].iloc[0])
        prefix = f"{mid}.{device_key}.decode_peers.{dtype}"
        cited = ctx.cite(f"{prefix}.bandwidth", float(f"{bandwidth:.4g}"), "B/s", part["run_id"].iloc[0])
        first = part.iloc[0]
        parts.append(
            f"\n{words} · {device_key}, {dtype}: d = {first['d']}, {first['heads']} heads, batch {first['batch']}; "
            f"bandwidth {cited}.\n"
        )
        parts += _table(ctx, part, prefix)
    return "\n".join(parts) + "\n"
