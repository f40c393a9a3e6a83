"""What a point costs on this machine, call and visit, from measured ceilings and per-layer costs (docs/method.md)."""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace

import torch

import models

from . import formats, outside, peak
from .errors import BadInput
from .kept import kept
from .point import PassFailure, draws, measure_pass
from .policy import TimingPolicy, untimed_calls
from .spec import DECODE_MODE, PointSpec, device_key, validate
from .sweeps import VARIABLES, by_sweep, sweep_of

ANCHOR_WORK_OVER_FIXED, ANCHOR_MAX_S = 4.0, 0.01  # where a layer's share of the ceilings is measured
TINY_N, TINY_D = (8, 40, 1280), 8  # fixed costs at n = 8, per step from 40, per prefilled position from 1280 (`longer`)
TINY_POLICY = TimingPolicy(min_rounds=3, max_rounds=10, target_s=0.01, min_round_s=0.001, passes=1)
QUICK_POLICY = TimingPolicy(min_rounds=3, max_rounds=10, target_s=0.05, min_round_s=0.005, passes=1)
CALIBRATION_CALLS, PROBE_CALLS = 2, 2  # counted from bench.timing.calibrate and the two probes
TINY_VISITS = 3


def device_kind(device: str) -> str:
    return "cuda" if device.startswith("cuda") else "cpu"


@dataclass(frozen=True)
class Memory:
    """A device's (up to bytes, bytes/s) levels, smallest first (bench.hierarchy)."""

    levels: tuple[tuple[int, float], ...]

    def bytes_per_s(self, working_set_bytes: int) -> float:
        return next((rate for up_to, rate in self.levels if working_set_bytes <= up_to), self.levels[-1][1])


def memory_of(bandwidth: dict | None) -> Memory | None:
    """The Memory of meta.json's `memory_bandwidth` entry of a device; None without one."""
    bandwidth = bandwidth or {}
    levels = (bandwidth.get("hierarchy") or {}).get("levels")
    if levels:
        return Memory(tuple((int(v["up_to_bytes"]), float(v["bytes_per_s"])) for v in levels))
    rate = bandwidth.get("bytes_per_s_device") or bandwidth.get("bytes_per_s")
    return Memory(((2**62, float(rate)),)) if rate else None


@dataclass(frozen=True)
class Ceilings:
    matmul_flops_per_s: float
    conv_flops_per_s: float
    memory: Memory | None

    def flops_per_s(self, layer: str) -> float:
        return self.conv_flops_per_s if getattr(models.LAYERS[layer], "convolves", False) else self.matmul_flops_per_s


@dataclass(frozen=True)
class LayerCosts:
    """A layer's costs in one mode on one device that do not grow with its sizes, and its share of the ceilings."""

    call_s: float
    step_s: float
    visit_s: float  # building the layer and its input
    probes_s: float
    probe_step_s: float
    share: float = 1.0
    prefill_s: float = 0.0  # each position of the state a decode visit builds


def group_of(spec: PointSpec) -> tuple[str, str, str, str]:
    return spec.layer, spec.mode, spec.device, spec.dtype


def sequential_steps(spec: PointSpec) -> int:
    """Dependent steps of a call: n for a recurrence, ⌈log₂ n⌉ for a scan, 0 for O(1) or a decode step."""
    row = models.LAYERS[spec.layer].table1
    if spec.mode == DECODE_MODE or row is None or row.sequential_is_constant:
        return 0
    return row.sequential_steps(spec.n + 1 if spec.decodes else spec.n)


def analytic_flops(spec: PointSpec) -> int:
    return models.analytic_flops(spec.layer, spec.batch, spec.n, spec.config(), spec.mode, spec.device)


def activation_bytes(spec: PointSpec) -> int:
    cfg = spec.config()
    if spec.mode == DECODE_MODE:
        return models.analytic_decode_state_bytes(spec.layer, spec.batch, spec.n, cfg)
    n = spec.n + 1 if spec.decodes else spec.n
    return models.analytic_activation_bytes(spec.layer, spec.batch, n, cfg)


def input_elements(spec: PointSpec) -> int:
    return spec.batch * (spec.n + spec.decodes) * spec.d


@dataclass(frozen=True)
class Costs:
    """The measured constants of a plan's estimate: ceilings by `device_key`, layer costs by `group_of`."""

    ceilings: Mapping[str, Ceilings]
    layers: Mapping[tuple, LayerCosts]
    draw_s_per_element: Mapping[str, float]
    memory_s: Mapping[str, float]  # seconds each device's bandwidth took to measure

    def call_s(self, spec: PointSpec) -> float:
        return sum(self.call_parts_s(spec))

    def call_parts_s(self, spec: PointSpec) -> tuple[float, float]:
        own = self.layers[group_of(spec)]
        return own.call_s, sequential_steps(spec) * own.step_s + self.work_s(spec) / own.share

    def work_s(self, spec: PointSpec) -> float:
        ceil = self.ceilings[device_key(spec.device, spec.dtype)]
        work_s = analytic_flops(spec) / ceil.flops_per_s(spec.layer)
        if ceil.memory is not None:
            moved = activation_bytes(spec)
            work_s = max(work_s, moved / ceil.memory.bytes_per_s(moved))
        return work_s

    def overhead_s(self, spec: PointSpec) -> float:
        own = self.layers[group_of(spec)]
        overhead_s = own.visit_s + input_elements(spec) * self.draw_s_per_element[spec.device]
        return overhead_s + own.prefill_s * spec.n * (spec.mode == DECODE_MODE)

    def visit_s(self, spec: PointSpec, policy: TimingPolicy, call_s: float | None = None) -> float:
        call_s = self.call_s(spec) if call_s is None else call_s
        own = self.layers[group_of(spec)]
        probes_s = own.probes_s + sequential_steps(spec) * own.probe_step_s
        return calls_s(spec, policy, call_s) + passes(spec, policy) * self.overhead_s(spec) + probes_s


@dataclass(frozen=True)
class Measured:
    """A run's own costs: a new point's call and visit overhead extend its sweep's last two (power law; line), rising."""

    calls_s: Mapping[PointSpec, float]
    overheads_s: Mapping[PointSpec, float]  # each visit's seconds beyond its calls
    policy: TimingPolicy

    @classmethod
    def of(cls, calls: Mapping[PointSpec, float], visits: Mapping[PointSpec, list[float]], policy) -> Measured:
        overheads = {
            s: max(0.0, sum(visits[s]) / len(visits[s]) - calls_s(s, policy, call) / passes(s, policy))
            for s, call in calls.items()
            if visits.get(s)
        }
        return cls(dict(calls), overheads, policy)

    @classmethod
    def of_points(cls, points, specs: Mapping[str, PointSpec], records_of, policy: TimingPolicy) -> Measured:
        ok = points[(points["status"] == "ok") & points["point_id"].isin(list(specs))]
        calls = {specs[pid]: float(t) for pid, t in zip(ok["point_id"], ok["time_median_s"])}
        return cls.of(calls, {s: [formats.visit_s(r) for r in records_of(s.point_id)] for s in calls}, policy)

    @functools.cached_property
    def _by_sweep(self) -> dict[tuple, list[PointSpec]]:
        return by_sweep(self.calls_s.keys() | self.overheads_s.keys())

    def _last_two(self, spec: PointSpec, known: Mapping) -> tuple[str, PointSpec, PointSpec] | None:
        for variable in VARIABLES:
            if getattr(spec, variable) is None:
                continue
            same = [s for s in self._by_sweep.get(sweep_of(spec, variable), []) if s in known]
            if len(same) >= 2:
                a, b = sorted(same, key=lambda s: getattr(s, variable))[-2:]
                return variable, a, b
        return None

    def call_s(self, spec: PointSpec) -> float:
        if spec in self.calls_s:
            return self.calls_s[spec]
        if (found := self._last_two(spec, self.calls_s)) is None:
            return max(self.calls_s.values())
        variable, a, b = found
        ta, tb = self.calls_s[a], self.calls_s[b]
        slope = max(0.0, math.log(tb / ta) / math.log(getattr(b, variable) / getattr(a, variable)))
        return tb * (getattr(spec, variable) / getattr(b, variable)) ** slope

    def overhead_s(self, spec: PointSpec) -> float:
        if spec in self.overheads_s:
            return self.overheads_s[spec]
        if (found := self._last_two(spec, self.overheads_s)) is None:
            return min(self.overheads_s.values(), default=0.0)
        variable, a, b = found
        oa, ob = self.overheads_s[a], self.overheads_s[b]
        per_size = max(0.0, (ob - oa) / (getattr(b, variable) - getattr(a, variable)))
        return ob + per_size * max(0.0, getattr(spec, variable) - getattr(b, variable))

    def visit_s(self, spec: PointSpec) -> float:
        return calls_s(spec, self.policy, self.call_s(spec)) + passes(spec, self.policy) * self.overhead_s(spec)


def passes(spec: PointSpec, policy: TimingPolicy) -> int:
    """A GPU's graph replays make a pass more of each."""
    return policy.passes * (1 + (device_kind(spec.device) == "cuda"))


def calls_s(spec: PointSpec, policy: TimingPolicy, call_s: float) -> float:
    return (passes(spec, policy) * calls_per_pass(call_s, policy) + CALIBRATION_CALLS + PROBE_CALLS) * call_s


def calls_per_pass(call_s: float, policy: TimingPolicy) -> int:
    rounds, iterations = policy.plan(call_s)
    return untimed_calls(iterations) + policy.rounds_per_pass(rounds) * iterations


def tiny(spec: PointSpec, n: int) -> PointSpec:
    """`spec` at length n, the narrowest width its heads allow, batch 1; `spec` itself where no such size is valid."""
    heads = spec.heads or 1
    while n < spec.n and not outside.is_outside(spec.layer):
        for candidate in (replace(spec, n=n, d=TINY_D * heads, batch=1), replace(spec, n=n, batch=1)):
            try:
                return validate(replace(candidate, window=min(spec.window, n)) if spec.window else candidate)
            except BadInput:
                continue
        n *= 2
    return spec


def _visit(spec: PointSpec, with_probes: bool = True) -> tuple[float, float, float]:
    """(median call, the pass's seconds beyond its calls and probes, probes' seconds) of one pass."""
    started = time.perf_counter()
    result = measure_pass(spec, TINY_POLICY, None, with_probes=with_probes)
    visit_s = time.perf_counter() - started
    if isinstance(result, PassFailure):
        raise BadInput(f"{spec.layer} ({spec.mode} on {spec.device}): its tiny point failed: {result.error}")
    calls = untimed_calls(result.iterations) + TINY_POLICY.rounds_per_pass(result.rounds_planned) * result.iterations
    call = float(result.record["stats"]["median"])
    return call, visit_s - (calls + CALIBRATION_CALLS + PROBE_CALLS) * call - result.probes_s, result.probes_s


def _fastest_visit(spec: PointSpec, with_probes: bool = True) -> tuple[float, float, float]:
    return tuple(map(min, zip(*(_visit(spec, with_probes) for _ in range(TINY_VISITS)))))


def longer(short: PointSpec, n: int) -> PointSpec:
    try:
        return validate(replace(short, n=n if n > short.n else short.n * TINY_N[1] // TINY_N[0]))
    except BadInput:
        return short


def measure_layer(spec: PointSpec) -> LayerCosts:
    short = tiny(spec, TINY_N[0])
    long = longer(short, TINY_N[2 if spec.mode == DECODE_MODE else 1])
    return LayerCosts(
        **kept(
            f"layer costs, least of {TINY_VISITS} visits, {short.key} {long.key}",
            lambda: asdict(_tiny_costs(short, long)),
        )
    )


def _tiny_costs(short: PointSpec, long: PointSpec) -> LayerCosts:
    _warm_probes()
    steps0, steps1 = sequential_steps(short), sequential_steps(long)
    call0, fixed0, probes0 = _fastest_visit(short)
    step_s = probe_step_s = prefill_s = 0.0
    if steps1 > steps0 or (short.mode == DECODE_MODE and long.n > short.n):
        call1, fixed1, probes1 = _fastest_visit(long)
        if steps1 > steps0:
            step_s = max(0.0, (call1 - call0) / (steps1 - steps0))
            probe_step_s = max(0.0, (probes1 - probes0) / (steps1 - steps0))
        else:
            prefill_s = max(0.0, (fixed1 - fixed0) / (long.n - short.n))
    call_s = max(0.0, call0 - steps0 * step_s)
    fixed_visit_s = max(0.0, fixed0 - short.n * prefill_s)
    return LayerCosts(
        call_s, step_s, fixed_visit_s, max(0.0, probes0 - steps0 * probe_step_s), probe_step_s, prefill_s=prefill_s
    )


def draw_s_per_element(device: str) -> float:
    draw, elements = draws(0, device), 2**20
    draw(1024)
    started = time.perf_counter()
    draw(elements)
    if device_kind(device) == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - started) / elements


def measure(specs: Iterable[PointSpec]) -> Costs:
    """The Costs of a plan on this machine, measured here or kept from the last day's commands (bench.kept)."""
    specs = sorted(set(specs), key=lambda s: (s.n, s.d, s.k or 0, s.batch))
    pairs = sorted({(s.device, s.dtype) for s in specs})
    groups: dict[tuple, list[PointSpec]] = {}
    for spec in specs:
        groups.setdefault(group_of(spec), []).append(spec)
    ceilings = {(d, t): kept(f"ceilings {d} {t}", lambda d=d, t=t: _ceilings(d, t)) for d, t in pairs}
    costs = Costs(
        ceilings={
            device_key(d, t): Ceilings(rates[0], rates[1], memory_of(rates[2])) for (d, t), rates in ceilings.items()
        },
        layers={group: measure_layer(members[0]) for group, members in groups.items()},
        draw_s_per_element={d: kept(f"draw {d}", lambda d=d: draw_s_per_element(d)) for d, _ in pairs},
        memory_s={d: rates[3] for (d, _), rates in ceilings.items()},
    )
    return replace(costs, layers={group: anchored(costs, members) for group, members in groups.items()})


def _ceilings(device: str, dtype: str) -> list:
    rates = peak.quick_rates(device, models.DTYPES[dtype], QUICK_POLICY)
    started = time.perf_counter()
    if device_kind(device) == "cuda":
        memory = peak.device_triad(device, 2**26)
    else:
        memory = {"hierarchy": peak.memory_hierarchy(device)}
    return [rates["matmul"], rates["convolution"], memory, time.perf_counter() - started]


@functools.cache
def _warm_probes() -> None:
    """The profiler's start-up (1.5 s on the 2-core VM) is no layer's cost."""
    _visit(PointSpec(models.ROLES.convolution, n=TINY_N[0], d=TINY_D, k=3, batch=1))


def anchored(costs: Costs, members: list[PointSpec]) -> LayerCosts:
    """A layer's costs with its share of the ceilings measured at its anchor point."""
    own = costs.layers[group_of(members[0])]

    def fixed_s(s: PointSpec) -> float:
        return own.call_s + sequential_steps(s) * own.step_s

    affordable = [s for s in members if costs.work_s(s) + fixed_s(s) <= ANCHOR_MAX_S]
    anchor = next((s for s in affordable if costs.work_s(s) >= ANCHOR_WORK_OVER_FIXED * fixed_s(s)), None)
    anchor = anchor or (affordable[-1] if affordable else _shortened(members[0], costs, fixed_s))
    call_s = kept(f"call, least of {TINY_VISITS} visits, {anchor.key}", lambda: _fastest_visit(anchor, False)[0])
    work_s = call_s - fixed_s(anchor)
    return replace(own, share=min(1.0, costs.work_s(anchor) / work_s) if work_s > 0 else 1.0)


def _shortened(spec: PointSpec, costs: Costs, fixed_s) -> PointSpec:
    while costs.work_s(spec) + fixed_s(spec) > ANCHOR_MAX_S and spec.n // 2 >= TINY_N[1]:
        try:
            spec = validate(replace(spec, n=spec.n // 2))
        except BadInput:
            break
    return spec if costs.work_s(spec) + fixed_s(spec) <= ANCHOR_MAX_S else tiny(spec, TINY_N[1])


def peak_measurement_s(device: str, rate: float) -> float:
    total = 0.0
    for flops in peak.kernel_flops(device_kind(device)):
        call_s = flops / rate
        total += (CALIBRATION_CALLS + peak.PEAK_POLICY.passes * calls_per_pass(call_s, peak.PEAK_POLICY)) * call_s
    return total
