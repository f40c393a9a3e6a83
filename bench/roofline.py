"""Each point against its roofline (Williams, Waterman and Patterson 2009). Method: docs/method.md."""

from __future__ import annotations

import math

import pandas as pd

import models

from .peak import bandwidth_on, latency_on
from .spec import DECODE_MODE, DEFAULT_MODE, RECOMPUTE_MODE, TRAIN_MODE
from .sweeps import row_config

COMPUTE, BANDWIDTH, CACHE, LATENCY = "compute", "memory bandwidth", "cache bandwidth", "operator latency"


def dependent_ops(layer: str, n: int, device: str, dtype: str) -> int | None:
    """Operators a forward issues one after another: a per-step loop's n, a scan's levels; None if fused."""
    cls = models.LAYERS[layer]
    if layer in models.recurrent() and not cls.fused_on(device, dtype):
        return n
    if layer in models.scans():
        return cls.scan_levels(n)
    return None


def bound(
    flops: float, min_bytes: float, peak: float, bandwidth: float | None, ops: int | None, latency: float | None
) -> tuple[float, str]:
    """The attainable FLOP/s of a call and the ceiling that sets it (the slowest of those known)."""
    times = {COMPUTE: flops / peak}
    if bandwidth:
        times[BANDWIDTH] = min_bytes / bandwidth
    if ops and latency:
        times[LATENCY] = ops * latency
    binding = max(times, key=times.get)
    return flops / times[binding], binding


def min_bytes_of(layer: str, mode: str, batch: int, n: int, cfg: models.LayerConfig, cache: int | None) -> int:
    if mode == DECODE_MODE:
        return models.analytic_decode_min_bytes(layer, batch, n, cfg)
    if mode == RECOMPUTE_MODE:
        return models.analytic_min_bytes(layer, batch, n + 1, cfg, cache)
    if mode == TRAIN_MODE:
        return models.analytic_train_min_bytes(layer, batch, n, cfg, cache)
    return models.analytic_min_bytes(layer, batch, n, cfg, cache)


def _ceiling(runs: dict[str, dict], kind: str, run_id: str, device: str) -> dict:
    return ((runs.get(run_id) or {}).get(kind) or {}).get(str(device).split(":")[0]) or {}


def against_roofline(points: pd.DataFrame, runs: dict[str, dict], peaks: pd.Series) -> pd.DataFrame:
    """The points of every mode (with `useful`, `clock`) with their roofline; `peaks`: compute peaks on their clocks."""
    rows = []
    modes = points["mode"].fillna(DEFAULT_MODE) if "mode" in points else pd.Series(DEFAULT_MODE, index=points.index)
    for p, mode in zip(points.itertuples(), modes):
        index = p.Index
        bandwidth_entry = _ceiling(runs, "memory_bandwidth", p.run_id, p.device)
        cache = bandwidth_entry.get("effective_last_level_cache_bytes") or bandwidth_entry.get("last_level_cache_bytes")
        cfg = row_config(p)
        min_bytes = min_bytes_of(p.layer, mode, int(p.batch), int(p.n), cfg, cache)
        in_cache = bool(cache) and min_bytes <= cache
        bandwidth = bandwidth_on(bandwidth_entry, p.clock) if bandwidth_entry else None
        if in_cache and bandwidth:  # the cache triad bounds it, never below memory's; none measured: nothing does
            in_cache_rate = bandwidth_on(bandwidth_entry, p.clock, in_cache=True)
            bandwidth = max(bandwidth, in_cache_rate) if in_cache_rate else None
        latency = latency_on(_ceiling(runs, "op_latency", p.run_id, p.device), p.clock)
        ops = dependent_ops(p.layer, int(p.n), str(p.device).split(":")[0], p.dtype) if mode != DECODE_MODE else None
        row = {"min_bytes": min_bytes, "intensity": p.useful / min_bytes}
        row |= {"bandwidth": math.nan if bandwidth is None else bandwidth, "ops": math.nan if ops is None else ops}
        if not bandwidth_entry or not peaks[index] > 0:
            row |= {"bound": math.nan, "ceiling": "no peak stored" if bandwidth_entry else "no bandwidth stored"}
        else:
            rate, binding = bound(p.useful, min_bytes, peaks[index], bandwidth, ops, latency)
            row |= {"bound": rate, "ceiling": CACHE if binding == BANDWIDTH and in_cache else binding}
        rows.append(pd.Series(row, name=index))
    out = points.loc[[r.name for r in rows]].copy() if rows else points.iloc[:0].copy()
    for column in ("min_bytes", "intensity", "bandwidth", "ops", "bound", "ceiling"):
        out[column] = [r[column] for r in rows] if rows else []
    if "time_s" in out:
        out["fraction"] = out["useful"] / out["time_s"] / out["bound"]
    return out
