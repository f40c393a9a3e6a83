"""What `run` says before it measures (warnings, estimated time and memory) and whether it goes, asks, or refuses."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from dataclasses import replace

import pandas as pd
import psutil

import models

from . import cgroup, cost, estimate, machine, outside
from .cost import Costs, device_kind
from .errors import BadInput
from .estimate import OPTIONAL_SHARE, PlanEstimate, PointEstimate
from .load import Load, choose_threads, decide_threads, physical_cores, slowdown
from .policy import EXTEND_MEMORY_SHARE, TimingPolicy
from .spec import DECODE_MODE, SIZES, PointSpec, expand_grid, kernel_wider_than_sequence
from .sweeps import (
    MIN_FIT_POINTS,
    SWEEP_KEYS,
    VARIABLES,
    asymptotic_range,
    mode_of_sweep,
    predicted_row,
    sweep_keys,
    sweeps,
)
from .units import describe_point, format_bytes, format_duration

PLAN_SIZES = (*(s for s in SIZES if s != "batch"), "batch")
LONG_RUN_S = 30 * 60  # above this estimate `run` asks before measuring (or wants --yes without a terminal)
# On the CPU such a point meets the OS's OOM killer, ending the run; a GPU's raises OutOfMemoryError, stored `oom`.
REFUSED_BEYOND_MEMORY = ("cpu",)


def plan_warnings(specs: list[PointSpec]) -> list[str]:
    """A line per sweep whose fit range keeps too few points (and no other sweep fits), with sizes that would."""
    if not specs:
        return []
    points = pd.DataFrame([spec.as_row() for spec in specs]).assign(status="ok")
    pending, fitted, covered, keys_of = [], set(), set(), _keys(points)
    for variable in VARIABLES:
        for fixed, sweep in sweeps(points, variable):
            if sweep[variable].nunique() >= MIN_FIT_POINTS:
                covered.update(keys_of[i] for i in sweep.index)
                warning = _plan_warning(fixed, sweep, variable)
                pending += [((fixed["layer"], variable), line) for line in warning]
                if not warning:
                    fitted.add((fixed["layer"], variable))
    alone = points[[key not in covered for key in keys_of]]
    keys = sweep_keys(alone)
    fixed_keys = [c for c in SWEEP_KEYS if c != "n"]
    for key, group in alone.groupby([keys[c] for c in fixed_keys], dropna=False):
        fixed = dict(zip(fixed_keys, key))
        pending += [((fixed["layer"], "n"), line) for line in _plan_warning(fixed, group.drop_duplicates("n"), "n")]
    return list(dict.fromkeys(line for what, line in pending if what not in fitted))


def _keys(frame: pd.DataFrame) -> list[tuple]:
    return list(sweep_keys(frame).astype(object).fillna(-1).itertuples(index=False, name=None))


def _plan_warning(fixed: dict, sweep: pd.DataFrame, variable: str) -> list[str]:
    layer = fixed["layer"]
    kept = asymptotic_range(sweep, variable, layer)
    if len(kept) >= MIN_FIT_POINTS:
        return []
    decodes = mode_of_sweep(sweep) == DECODE_MODE
    row = predicted_row(layer, mode_of_sweep(sweep))
    over_d = getattr(row, "fit_t_over_d" if decodes else "fit_n_over_d", None)
    values = sorted(int(v) for v in sweep[variable])
    sizes = ", ".join(f"{k}={int(fixed[k])}" for k in PLAN_SIZES if k in fixed and not pd.isna(fixed[k]))
    listed = f"{variable}={','.join(map(str, values))}"
    what = f"the {variable}-sweep {listed}" if len(values) > 1 else f"the single point {listed}"
    why = f"fewer than the {MIN_FIT_POINTS} a fit needs"
    if over_d is not None and len(kept) < len(sweep):
        bound = f" = {over_d * int(fixed['d'])}" if variable == "n" else ""
        term = f"the decode row's {row.compute_text}" if decodes else f"Table 1's {row.compute_text}"
        length = "t" if decodes else "n"
        why = f"only {length} >= {over_d}·d{bound} count, where {term} term carries the counted FLOPs; {why}"
    return [
        f"{layer} at {sizes}: {what} keeps {len(kept)} of {len(values)} point{'s' if len(values) != 1 else ''} "
        f"for the FLOPs and memory fits ({why}); {_sizes_that_serve(fixed, sweep, kept, variable)}"
    ]


def _sizes_that_serve(fixed: dict, sweep: pd.DataFrame, kept: pd.DataFrame, variable: str) -> str:
    """The fixed range's condition on the swept size, and MIN_FIT_POINTS sizes the layer accepts and the range keeps."""
    layer = fixed["layer"]
    ratio = getattr(models.LAYERS[layer].table1, "fit_n_over_d", None)
    first = sweep.iloc[0]
    values = sorted(int(v) for v in sweep[variable])
    chosen = sorted(int(v) for v in kept[variable])
    alternative = ""
    if ratio is not None and variable == "d":
        limit = int(first["n"]) // ratio
        chosen = chosen or ([limit] if limit >= 1 else [])
        while chosen and len(chosen) < MIN_FIT_POINTS and chosen[0] // 2 >= 1:
            chosen.insert(0, chosen[0] // 2)
        condition = f"d <= {limit} (n/{ratio}): give at least {MIN_FIT_POINTS} such d"
        alternative = f"; or n >= {ratio * values[-1]} ({ratio}·d for d up to {values[-1]})"
    elif ratio is not None and variable == "n":
        bound = ratio * int(first["d"])
        chosen = chosen or [bound]
        while len(chosen) < MIN_FIT_POINTS:
            chosen.append(chosen[-1] * 2)
        condition = f"n >= {bound} ({ratio}·d): give at least {MIN_FIT_POINTS} such n"
    elif ratio is not None and not len(kept):  # another size swept at an n below ratio·d
        return f"give n >= {ratio * int(first['d'])} ({ratio}·d)"
    else:
        step = values[-1] - values[0] if variable == "k" and len(values) > 1 else 2
        while len(chosen) < MIN_FIT_POINTS:
            chosen.append(chosen[-1] + step if variable == "k" else chosen[-1] * 2)
        condition = f"give at least {MIN_FIT_POINTS} values of {variable}"
    if len(chosen) >= MIN_FIT_POINTS and _plan_keeps(fixed, variable, chosen):
        condition += f", e.g. --{variable} {','.join(map(str, chosen))}"
    return condition + alternative


def _plan_keeps(fixed: dict, variable: str, values: list[int]) -> bool:
    """Whether the sweep of `values` at the `fixed` sizes is valid and keeps MIN_FIT_POINTS points."""
    sizes = {s: [None] if pd.isna(fixed.get(s)) else [int(fixed[s])] for s in SIZES if s != variable}
    try:  # a dilation left out (NaN: its k's) is derived from each k again
        specs = expand_grid(
            layers=[fixed["layer"]], **sizes, **{variable: values}, devices=[fixed["device"]], dtypes=[fixed["dtype"]]
        )
    except BadInput:
        return False
    frame = pd.DataFrame([spec.as_row() for spec in specs])
    return len(asymptotic_range(frame, variable, fixed["layer"])) >= MIN_FIT_POINTS


def wide_kernel_warnings(points: Iterable[tuple[str, int, int | None]]) -> list[str]:
    """A line per kernel size k wider than an n it is paired with (conv_dilated's span may exceed n by design)."""
    wide: dict[int, tuple[set[str], set[int]]] = {}
    for layer, n, k in points:
        if kernel_wider_than_sequence(layer, n, k):
            layers, ns = wide.setdefault(k, (set(), set()))
            layers.add(layer)
            ns.add(n)
    return [
        f"k={k} is wider than the sequence at n={','.join(map(str, sorted(ns)))} "
        f"({', '.join(sorted(layers))}): most of each output's taps read the zero padding, outside Table 1's "
        f"setting of a kernel narrower than the sequence (k < n); measured anyway"
        for k, (layers, ns) in sorted(wide.items())
    ]


def summary_line(plan: PlanEstimate) -> str:
    """`plan: 115 points, about 2.4 min on this machine (estimate...), peak memory about 570 MB on cpu (...)`."""
    memory = ", ".join(
        f"{format_bytes(p.memory_bytes)} on {device} ({describe_point(p.spec).rsplit(' on ', 1)[0]})"
        for device, p in sorted(plan.largest().items())
    )
    parts = []
    if plan.begun_s:
        parts.append(f"from the command's start: {format_duration(plan.begun_s)} of it before this line")
    optional = format_duration(plan.optional_s)
    if plan.extend_s:
        parts.append(
            f"{optional} of it sampling points until their time is known and extending sweeps that do not decide "
            f"(foreseen: at most {format_duration(plan.extra_s)} sampling, {plan.extend_points} point(s) in "
            f"{format_duration(plan.extend_foreseen_s)} on the modelled calls, "
            f"{format_duration(plan.extend_structural_s)} of it for sweeps short of points in their regime; none "
            f"added past {1 + OPTIONAL_SHARE:g}x this estimate), within {EXTEND_MEMORY_SHARE:.0%} of the memory available"
        )
    elif plan.extra_s:
        parts.append(
            f"{optional} of it sampling points until their time is known (at most {format_duration(plan.extra_s)})"
        )
    if plan.default_policy_s:
        parts.append(
            f"{format_duration(plan.default_policy_s)} of it timing each layer's largest point again with the C "
            "library's own malloc policy"
        )
    if plan.slowdown >= 1.05:
        parts.append(f"all {plan.slowdown:.1f}x what it would take alone: other processes are busy on the cores")
    said = "estimate" + (", " + "; ".join(parts) if parts else "")
    return (
        f"plan: {len(plan.points)} points, about {format_duration(plan.time_s)} on this machine "
        f"({said}), peak memory about {memory or '0 B'}"
    )


def _beyond(plan: PlanEstimate, limits: Mapping[str, int], kinds: tuple[str, ...]) -> dict[str, list]:
    out: dict[str, list[PointEstimate]] = {}
    for p in plan.points:
        device = p.spec.device
        if device_kind(device) in kinds and device in limits and p.memory_bytes > limits[device]:
            out.setdefault(device, []).append(p)
    return {device: sorted(ps, key=lambda p: -p.memory_bytes) for device, ps in sorted(out.items())}


def _beyond_text(points: list[PointEstimate], limit: int, what: str) -> str:
    largest = describe_point(points[0].spec)
    if len(points) == 1:
        return (
            f"{largest} needs about {format_bytes(points[0].memory_bytes)}, more than the {format_bytes(limit)} {what}"
        )
    return (
        f"{largest} and {len(points) - 1} smaller point(s) need up to about "
        f"{format_bytes(points[0].memory_bytes)}, more than the {format_bytes(limit)} {what}"
    )


def too_large(plan: PlanEstimate, total_bytes: Mapping[str, int]) -> list[str]:
    return [
        _beyond_text(points, total_bytes[device], f"of memory {device} has")
        for device, points in _beyond(plan, total_bytes, REFUSED_BEYOND_MEMORY).items()
    ]


def expected_ooms(plan: PlanEstimate, total_bytes: Mapping[str, int]) -> list[str]:
    kinds = tuple(k for k in ("cpu", "cuda") if k not in REFUSED_BEYOND_MEMORY)
    return [
        _beyond_text(points, total_bytes[device], f"of memory {device} has")
        + ": expected to run out of memory, stored as oom with the larger points of the layer skipped"
        for device, points in _beyond(plan, total_bytes, kinds).items()
    ]


def reasons_to_ask(
    plan: PlanEstimate, available_bytes: Mapping[str, int], long_run_s: float | None = None
) -> list[str]:
    """Why a run should not start unasked: too long an estimate, or a point above the memory available now."""
    long_run_s = LONG_RUN_S if long_run_s is None else long_run_s
    reasons = []
    if plan.time_s > long_run_s:
        reasons.append(
            f"it takes about {format_duration(plan.time_s)} (estimate), above the "
            f"{format_duration(long_run_s)} a run starts without asking"
        )
    for device, points in _beyond(plan, available_bytes, REFUSED_BEYOND_MEMORY).items():
        reasons.append(_beyond_text(points, available_bytes[device], f"available on {device} now"))
    return reasons


def stdin_is_terminal() -> bool:
    return sys.stdin is not None and sys.stdin.isatty()


def _ask_stdin(question: str) -> bool:
    print(question, end="", file=sys.stderr, flush=True)
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def print_lines(lines: list[str]) -> None:
    for line in lines:
        print(line, file=sys.stderr)


def device_memory(devices: Iterable[str]) -> tuple[dict[str, int], dict[str, int]]:
    """(available now, total) bytes of each device."""
    import torch

    available, total = {}, {}
    for device in set(devices):
        if device.startswith("cuda"):
            available[device], total[device] = torch.cuda.mem_get_info()
        else:
            available[device], total[device] = cgroup.available_bytes(), psutil.virtual_memory().total
    return available, total


def confirm_plan(
    plan: PlanEstimate,
    available_bytes: dict[str, int],
    total_bytes: dict[str, int],
    *,
    yes: bool,
    interactive: bool,
    ask: Callable[[str], bool] | None = None,
) -> None:
    """Go ahead or BadInput: above the whole memory refused even with `yes` (the OOM killer's end); the rest asked."""
    refused = too_large(plan, total_bytes)
    if refused:
        raise BadInput(f"run: {'; '.join(refused)}; give smaller sizes")
    reasons = reasons_to_ask(plan, available_bytes)
    if yes or not reasons:
        return
    if not interactive:
        raise BadInput(
            f"run: {'; '.join(reasons)}; stdin is not a terminal to ask, so give --yes to measure it anyway, "
            "or a smaller plan"
        )
    if not (ask or _ask_stdin)(f"{'; '.join(reasons)}. Measure it? [y/N] "):
        raise BadInput("run: not confirmed, nothing measured; --yes measures without asking")


def _machine_threads(threads: int | None) -> AbstractContextManager:
    from .threads import pinned_threads

    quiet = Load(others_busy_cores=0.0, loadavg_1m=0.0, logical_cores=psutil.cpu_count() or 1, wall_s=0.0)
    return pinned_threads(threads or choose_threads(quiet, physical_cores())[0])


def machine_costs(specs: list[PointSpec], threads: int | None) -> Costs:
    with _machine_threads(threads):
        return cost.measure(specs)


def memory_limits(devices: Iterable[str]) -> dict[str, float]:
    available, _total = device_memory(devices)
    return {device: EXTEND_MEMORY_SHARE * free for device, free in available.items()}


def before_measuring(
    specs: list[PointSpec],
    policy: TimingPolicy,
    *,
    threads: int | None,
    yes: bool,
    on_cluster: bool,
    costs: Costs | None = None,
    load: Load | None = None,
    started: float | None = None,
    dry_run: bool = False,
    startup_s: float | None = None,
) -> tuple[list[str], TimingPolicy]:
    """The lines to print before a run measures (warnings, `plan: ...`) and the policy keeping to it; or BadInput."""
    outside.check_points(specs)
    warnings = plan_warnings(specs) + wide_kernel_warnings((s.layer, s.n, s.k) for s in specs)
    if on_cluster and any(s.device != "cpu" for s in specs) and not machine.cuda_available():
        return [
            *(f"warning: {line}" for line in warnings),
            f"plan: {len(specs)} points (no estimate: this machine has no GPU to time a matmul on)",
        ], policy
    devices = {s.device for s in specs}
    costs = costs or machine_costs(specs, threads)
    plan = estimate.estimate_plan(specs, policy, costs, memory_limits(devices), None if on_cluster else startup_s)
    if load is not None and not on_cluster:
        plan = replace(plan, slowdown=slowdown(load, decide_threads(threads, load=load)[0]))
    if started is not None:
        plan = replace(plan, begun_s=max(0.0, time.time() - started))
    available, total = device_memory(devices)
    lines = [f"warning: {line}" for line in [*warnings, *expected_ooms(plan, total)]]
    lines.append(summary_line(plan))
    if dry_run:
        return lines, plan.kept_by(policy)

    def ask(question: str) -> bool:
        print_lines(lines)
        lines.clear()
        return _ask_stdin(question)

    confirm_plan(plan, available, total, yes=yes, interactive=stdin_is_terminal(), ask=ask)
    return lines, plan.kept_by(policy)
