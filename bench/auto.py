"""`--preset auto`: every layer's sweeps against n planned from this machine's measured costs (bench.cost) and memory."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping

import models

from .cost import Costs, device_kind
from .errors import BadInput
from .footprint import point_memory_bytes
from .planner import flops_regime_start
from .policy import EXTEND_MEMORY_SHARE, TimingPolicy
from .spec import DECODE_MODE, PointSpec, expand_grid

WIDTH = {"cpu": 64, "cuda": 512}
HEADS = {"cpu": 4, "cuda": 8}
NARROWER = 3
SWEEP_SHARE = 0.25
WINDOW = {"cpu": 64, "cuda": 128}
BATCH = 4
KERNEL = 3
WORK_OVER_CALL = 8.0  # a sweep starts where what grows with n is this multiple of the per-call cost (89 % of the time)
POINTS, MIN_POINTS = 5, 4  # doubling from the start: 16x, and at least 8x where the budget trims it
FIRST_N, LAST_N = 16, 2**24
BUDGET_S = {"cpu": 240.0, "cuda": 100.0}


def _spec(layer: str, n: int, device: str, dtype: str, mode: str, d: int | None = None) -> PointSpec | None:
    kind = device_kind(device)
    d = d or WIDTH[kind]
    try:
        (spec,) = expand_grid(
            [layer],
            [n],
            [d],
            k=[KERNEL],
            heads=[max(1, HEADS[kind] * d // WIDTH[kind])],
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


@functools.lru_cache(maxsize=1024)
def regime_n(layer: str, device: str, dtype: str, mode: str, d: int | None = None) -> int:
    """The least power of two from which the analytic FLOPs double as Table 1's term says (FIRST_N if never); kept."""
    sizes = (2**i for i in range(FIRST_N.bit_length() - 1, LAST_N.bit_length()))
    first = next(s for n in sizes if (s := _spec(layer, n, device, dtype, mode, d)) is not None)
    start = flops_regime_start(first, "n", 2.0)
    return max(FIRST_N, int(start)) if start == start else FIRST_N


def start_n(
    layer: str, device: str, dtype: str, mode: str, costs: Costs, memory_bytes: float, d: int | None = None
) -> int | None:
    """The least n from regime_n where a call's growing part is WORK_OVER_CALL times its fixed cost, or the last 16x."""
    least = regime_n(layer, device, dtype, mode, d)
    n, fits = least, None
    while n <= LAST_N:
        spec = _spec(layer, n, device, dtype, mode, d)
        if spec is None:
            n *= 2
            continue
        if point_memory_bytes(spec) > memory_bytes:
            return fits // 2 ** (POINTS - 1) if fits and fits // 2 ** (POINTS - 1) >= least else None
        fits = n
        fixed_s, growing_s = costs.call_parts_s(spec)
        if growing_s >= WORK_OVER_CALL * fixed_s or (mode == DECODE_MODE and not _state_grows(spec)):
            return n
        n *= 2
    return None


def _doubling(
    layer: str, first: int | None, device: str, dtype: str, mode: str, limit: float, d: int
) -> list[PointSpec]:
    sweep = []
    for i in range(POINTS if first is not None else 0):
        spec = _spec(layer, first * 2**i, device, dtype, mode, d)
        if spec is not None and point_memory_bytes(spec) <= limit:
            sweep.append(spec)
    return sweep


def _sweep(
    layer: str, device: str, dtype: str, mode: str, costs: Costs, limit: float, policy: TimingPolicy
) -> tuple[list, list[str]]:
    """(the sweep, what to say): the widest of NARROWER halvings of the width in its budget share, else the cheapest."""
    kind = device_kind(device)
    widest, share_s = WIDTH[kind], SWEEP_SHARE * BUDGET_S[kind]
    where = f"{layer} ({mode} on {device})"
    found = []
    for d in (widest >> i for i in range(NARROWER + 1)):
        first = start_n(layer, device, dtype, mode, costs, limit, d)
        sweep = _doubling(layer, first, device, dtype, mode, limit, d)
        said = []
        if first is not None and len(sweep) < MIN_POINTS and sweep:
            first = sweep[-1].n // 2 ** (MIN_POINTS - 1)
            ok = first >= regime_n(layer, device, dtype, mode, d)
            sweep = _doubling(layer, first, device, dtype, mode, limit, d) if ok else []
            said = [f"auto: {where} starts at n = {first}: half the memory ends first"]
        if len(sweep) >= MIN_POINTS:
            found.append((sum(costs.visit_s(p, policy) for p in sweep), sweep, said))
            if found[-1][0] <= share_s:
                break
    if not found:
        return [], [f"auto: {where} left out: no 8x of n in half the memory where Table 1's term sets its FLOPs"]
    cost_s, sweep, said = found[-1] if found[-1][0] <= share_s else min(found, key=lambda f: f[0])
    if sweep[0].d < widest:
        why = "half the memory ends before 8x of n where Table 1's term sets its FLOPs"
        if any(f[1][0].d == widest for f in found):
            why = f"its sweep would take {found[0][0]:.0f} s, {cost_s:.0f} s here"
        said.append(f"auto: {where} at d = {sweep[0].d}, {sweep[0].heads or 1} head(s): at d = {widest}, {why}")
    return sweep, said


def probe_specs(grids: Iterable[Mapping], devices: Iterable[str], dtype: str) -> list[PointSpec]:
    found = (
        _spec(layer, 64 * FIRST_N, device, dtype, grid["mode"][0])
        for device in devices
        for grid in grids
        for layer in grid["layers"]
    )
    return [spec for spec in found if spec is not None]


def plan(
    grids: Iterable[Mapping],
    devices: Iterable[str],
    dtype: str,
    costs: Costs,
    memory_bytes: Mapping[str, float],
    policy: TimingPolicy,
    mode: str | None = None,
) -> tuple[list[PointSpec], list[str]]:
    """(the specs, a line per sweep left out or trimmed): POINTS doublings from `start_n`, in memory and BUDGET_S."""
    specs, notes = [], []
    for device in devices:
        limit = EXTEND_MEMORY_SHARE * memory_bytes[device]
        sweeps = []
        for grid in grids:
            each, layers = grid["mode"][0], grid["layers"]
            if mode not in (None, each):
                continue
            for layer in layers:
                sweep, said = _sweep(layer, device, dtype, each, costs, limit, policy)
                notes += said
                if sweep:
                    sweeps.append(sweep)
        cost = {id(s): sum(costs.visit_s(p, policy) for p in s) for s in sweeps}
        while sum(cost.values()) > BUDGET_S[device_kind(device)]:
            dearest = max((s for s in sweeps if len(s) > MIN_POINTS), key=lambda s: cost[id(s)], default=None)
            if dearest is None:
                break
            notes.append(f"auto: {dearest[-1].layer} ({dearest[-1].mode} on {device}) trimmed to n ≤ {dearest[-2].n}")
            last = dearest.pop()
            cost[id(dearest)] -= costs.visit_s(last, policy)
        specs += [s for sweep in sweeps for s in sweep]
    return specs, notes
