"""`--preset auto`: every layer's sweeps against n planned from this machine's measured compute rate and memory."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import models

from .errors import BadInput
from .estimate import call_parts_s, device_kind, point_memory_bytes, point_time_s
from .policy import EXTEND_MEMORY_SHARE, TimingPolicy
from .spec import DECODE_MODE, PointSpec, device_key, expand_grid

WIDTH = {"cpu": 64, "cuda": 512}
HEADS = {"cpu": 4, "cuda": 8}
WINDOW = {"cpu": 64, "cuda": 128}
BATCH = 4
KERNEL = 3
WORK_OVER_CALL = 8.0  # a sweep starts where what grows with n is this multiple of the per-call cost (89 % of the time)
POINTS, MIN_POINTS = 5, 4  # doubling from the start: 16x, and at least 8x where the budget trims it
FIRST_N, LAST_N = 16, 2**24
BUDGET_S = {"cpu": 240.0, "cuda": 150.0}  # the plan's estimated time, at most, per device


def _spec(layer: str, n: int, device: str, dtype: str, mode: str) -> PointSpec | None:
    kind = device_kind(device)
    try:
        (spec,) = expand_grid(
            [layer],
            [n],
            [WIDTH[kind]],
            k=[KERNEL],
            heads=[HEADS[kind]],
            window=[WINDOW[kind]],
            batch=[BATCH],
            devices=[device],
            dtypes=[dtype],
            modes=[mode],
        )
    except BadInput:
        return None
    return spec


def _state_grows(spec: PointSpec) -> bool:
    cfg = spec.config()
    return models.analytic_decode_state_bytes(spec.layer, spec.batch, 2 * spec.n, cfg) > (
        models.analytic_decode_state_bytes(spec.layer, spec.batch, spec.n, cfg)
    )


def start_n(layer: str, device: str, dtype: str, mode: str, rate: float, memory_bytes: float) -> int | None:
    """The least n where a call's growing part is WORK_OVER_CALL times its fixed cost, or the last 16x in memory."""
    n, fits = FIRST_N, None
    while n <= LAST_N:
        spec = _spec(layer, n, device, dtype, mode)
        if spec is None:
            n *= 2
            continue
        if point_memory_bytes(spec) > memory_bytes:
            return fits // 2 ** (POINTS - 1) if fits and fits // 2 ** (POINTS - 1) >= FIRST_N else None
        fits = n
        fixed_s, growing_s = call_parts_s(spec, rate)
        if growing_s >= WORK_OVER_CALL * fixed_s or (mode == DECODE_MODE and not _state_grows(spec)):
            return n
        n *= 2
    return None


def _doubling(layer: str, first: int | None, device: str, dtype: str, mode: str, limit: float) -> list[PointSpec]:
    sweep = []
    for i in range(POINTS if first is not None else 0):
        spec = _spec(layer, first * 2**i, device, dtype, mode)
        if spec is not None and point_memory_bytes(spec) <= limit:
            sweep.append(spec)
    return sweep


def probe_spec(layer: str, device: str, dtype: str) -> PointSpec:
    return PointSpec(layer, n=FIRST_N, d=WIDTH[device_kind(device)], batch=BATCH, device=device, dtype=dtype)


def plan(
    grids: Iterable[Mapping],
    devices: Iterable[str],
    dtype: str,
    rates: Mapping[str, float],
    memory_bytes: Mapping[str, float],
    policy: TimingPolicy,
    mode: str | None = None,
) -> tuple[list[PointSpec], list[str]]:
    """(the specs, a line per sweep left out or trimmed): POINTS doublings from `start_n`, within memory and budget."""
    specs, notes = [], []
    for device in devices:
        rate, limit = rates[device_key(device, dtype)], EXTEND_MEMORY_SHARE * memory_bytes[device]
        sweeps = []
        for grid in grids:
            each, layers = grid["mode"][0], grid["layers"]
            if mode not in (None, each):
                continue
            for layer in layers:
                first = start_n(layer, device, dtype, each, rate, limit)
                sweep = _doubling(layer, first, device, dtype, each, limit)
                if first is not None and len(sweep) < MIN_POINTS and sweep:
                    first = sweep[-1].n // 2 ** (MIN_POINTS - 1)
                    sweep = _doubling(layer, first, device, dtype, each, limit) if first >= FIRST_N else []
                    if len(sweep) >= MIN_POINTS:
                        notes.append(
                            f"auto: {layer} ({each} on {device}) starts at n = {first}: half the memory ends first"
                        )
                if len(sweep) < MIN_POINTS:
                    notes.append(f"auto: {layer} ({each} on {device}) left out: no 8x of n in half the memory")
                    continue
                sweeps.append(sweep)
        cost = {id(s): sum(point_time_s(p, policy, rate) for p in s) for s in sweeps}
        while sum(cost.values()) > BUDGET_S[device_kind(device)]:
            dearest = max((s for s in sweeps if len(s) > MIN_POINTS), key=lambda s: cost[id(s)], default=None)
            if dearest is None:
                break
            notes.append(f"auto: {dearest[-1].layer} ({dearest[-1].mode} on {device}) trimmed to n ≤ {dearest[-2].n}")
            cost[id(dearest)] -= point_time_s(dearest.pop(), policy, rate)
        specs += [s for sweep in sweeps for s in sweep]
    return specs, notes
