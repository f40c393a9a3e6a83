"""A run's duration and largest point's memory, from the plan and a compute rate per device and dtype (bench.peak)."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import torch

import models
from models.recurrent import onednn_takes

from . import peak
from .formats import stored_peaks
from .policy import WARMUP_ROUNDS, TimingPolicy
from .spec import DECODE_MODE, PointSpec, device_key

CALL_OVERHEAD_S = {"cpu": 50e-6, "cuda": 50e-6}
TRAIN_CALL_OVERHEAD_S = {"cpu": 200e-6, "cuda": 0.0}
COMPUTE_EFFICIENCY = 0.5  # the share of the measured compute rate a layer's matrix products reach
ACTIVATION_FLOPS_PER_BYTE = {"cpu": 128.0, "cuda": 32.0}  # element-wise work, in units of the compute rate
DECODE_CALL_S = {"cpu": 120e-6, "cuda": 100e-6}  # a decode step's few small operators; its state read follows
STATE_FLOPS_PER_BYTE = {"cpu": 32.0, "cuda": 8.0}
STATE_BANDWIDTH_SHARE = 0.65  # of the triad's at the state's size, where measured (the 2-core VM's decode: 0.63-0.67)
STEP_OVERHEAD_S = {"cpu": 10e-6, "cuda": 5e-6}
FUSED_CPU_STEP_S = 1e-6  # oneDNN's fused LSTM's step: 1.3 µs with its products at d = 40 (2-core VM)
PROBE_STEP_S = {"cpu": 0.5e-3, "cuda": 0.7e-3}  # what the FLOP counter and the profiler add a recurrence's step
VISIT_OVERHEAD_S = {"cpu": 5e-3, "cuda": 0.02}  # building the layer, its record, a GPU graph; its input: per element
INPUT_S_PER_ELEMENT = {"cpu": 5.5e-9, "cuda": 0.02e-9}
GRAPH_PASSES = {"cpu": 0, "cuda": 1}
MEMORY_CEILINGS_S = {"cpu": 4.0, "cuda": 1.0}  # bench.peak's bandwidth and latency (CPU: 2 s + 2 s, its caches before)
PROBE_OVERHEAD_S = 5e-3  # the FLOP counter's and the profiler's set-up, once per point
PROBE_CALLS = 2  # the FLOP counter's and the memory probe's, on a point's first pass
TRAIN_ACTIVATION_PASSES = 3
TRAIN_STEP_CHAINS = 2
TRAIN_HELD_COPIES = 2
PREFILL_COPIES = 3
MODEL_DRIFT = 0.09  # measured/modelled time's random walk per doubling (bench.extend.drifted, docs/method.md)
FORECAST_REALIZATIONS = 4
CALIBRATION_CALLS = 2  # bench.timing.calibrate: a call that pays lazy initialisation, then the timed one
CONVOLVES = " convolution"  # a rates key's suffix: the rate of a layer whose products are convolutions (`convolves`)
QUICK_POLICY = TimingPolicy(min_rounds=3, max_rounds=10, target_s=0.05, min_round_s=0.005, passes=1)


def device_kind(device: str) -> str:
    return "cuda" if device.startswith("cuda") else "cpu"


@functools.lru_cache(maxsize=4096)
def _parameters(layer_cls: type, cfg: models.LayerConfig) -> int:
    with torch.device("meta"):
        module = layer_cls(cfg)
    return sum(p.numel() for p in module.parameters())


def _fused_on_cpu(spec: PointSpec) -> bool:
    fused_on = getattr(models.LAYERS[spec.layer], "fused_on", None)
    return spec.device == "cpu" and fused_on is not None and fused_on(spec.device, spec.dtype, spec.trains)


def sequential_steps(spec: PointSpec) -> int:
    """Dependent steps of a call beyond its one pass: n for a recurrence, ⌈log₂ n⌉ for a scan, 0 for O(1) or a step."""
    row = models.LAYERS[spec.layer].table1
    if spec.mode == DECODE_MODE or row.sequential_is_constant:
        return 0
    return row.sequential_steps(spec.n + 1 if spec.decodes else spec.n)


def _activation_bytes(spec: PointSpec) -> int:
    cfg = spec.config()
    if spec.mode == DECODE_MODE:
        return models.analytic_decode_state_bytes(spec.layer, spec.batch, spec.n, cfg)
    n = spec.n + 1 if spec.decodes else spec.n
    return models.analytic_activation_bytes(spec.layer, spec.batch, n, cfg)


def _input_elements(spec: PointSpec) -> int:
    return spec.batch * (spec.n + spec.decodes) * spec.d


def analytic_flops(spec: PointSpec) -> int:
    return models.analytic_flops(spec.layer, spec.batch, spec.n, spec.config(), spec.mode, spec.device)


@dataclass(frozen=True)
class Memory:
    """A device's (up to bytes, bytes/s) levels, smallest first (bench.hierarchy): a cache's edge in a state read."""

    levels: tuple[tuple[int, float], ...]

    def bytes_per_s(self, working_set_bytes: int) -> float:
        return next((rate for up_to, rate in self.levels if working_set_bytes <= up_to), self.levels[-1][1])


def memory_of(bandwidth: dict | None) -> Memory | None:
    """The Memory of meta.json's `memory_bandwidth` entry of a device (or {"hierarchy": ...}); None without levels."""
    levels = ((bandwidth or {}).get("hierarchy") or {}).get("levels")
    return Memory(tuple((int(v["up_to_bytes"]), float(v["bytes_per_s"])) for v in levels)) if levels else None


def quick_memory(devices: Iterable[str]) -> dict[str, Memory]:
    found = {device: memory_of({"hierarchy": peak.memory_hierarchy(device)}) for device in devices if device == "cpu"}
    return {device: memory for device, memory in found.items() if memory is not None}


def call_time_s(spec: PointSpec, rate: float, memory: Memory | None = None) -> float:
    """Seconds of one call of `spec` at `rate` FLOP/s: a per-call cost, a roofline, and its sequential steps."""
    return sum(call_parts_s(spec, rate, memory))


def call_parts_s(spec: PointSpec, rate: float, memory: Memory | None = None) -> tuple[float, float]:
    """(the per-call cost, what grows with the sizes) of `spec`'s call."""
    kind = device_kind(spec.device)
    train = spec.trains
    flops = analytic_flops(spec)
    activations = _activation_bytes(spec)
    compute_s = flops / (COMPUTE_EFFICIENCY * rate)
    memory_s = activations * (TRAIN_ACTIVATION_PASSES if train else 1) * ACTIVATION_FLOPS_PER_BYTE[kind] / rate
    if spec.mode == DECODE_MODE:
        read_s = activations * STATE_FLOPS_PER_BYTE[kind] / rate
        if memory is not None:
            read_s = activations / (STATE_BANDWIDTH_SHARE * memory.bytes_per_s(activations))
        return DECODE_CALL_S[kind], max(compute_s, read_s)
    steps = sequential_steps(spec) * (TRAIN_STEP_CHAINS if train else 1)
    step_s = FUSED_CPU_STEP_S if _fused_on_cpu(spec) else STEP_OVERHEAD_S[kind]
    per_call_s = CALL_OVERHEAD_S[kind] + (TRAIN_CALL_OVERHEAD_S[kind] if train else 0.0)
    return per_call_s, max(compute_s, memory_s) + steps * step_s


def passes_time_s(call_s: float, policy: TimingPolicy, overhead_s: float = 0.0) -> float:
    """Seconds of the policy's passes over a callable of `call_s` a call, as bench.timing runs them."""
    rounds, iterations = policy.plan(call_s)
    calls_per_pass = 1 + (WARMUP_ROUNDS + policy.rounds_per_pass(rounds)) * iterations
    return policy.passes * (calls_per_pass * call_s + overhead_s)


def point_time_s(spec: PointSpec, policy: TimingPolicy, rate: float, call_s: float | None = None) -> float:
    """Seconds a run spends on `spec`: its passes, and its first pass's calibration and probes (a call: `call_s`)."""
    call_s = call_time_s(spec, rate) if call_s is None else call_s
    kind = device_kind(spec.device)
    inputs_s = _input_elements(spec) * INPUT_S_PER_ELEMENT[kind] * (2 if spec.trains else 1)
    passes_s = passes_time_s(call_s, policy, VISIT_OVERHEAD_S[kind] + inputs_s)
    passes_s += GRAPH_PASSES[kind] * passes_time_s(call_s, policy, VISIT_OVERHEAD_S[kind])
    first_s = (CALIBRATION_CALLS + PROBE_CALLS) * call_s + PROBE_OVERHEAD_S
    first_s += 0 if _fused_on_cpu(spec) else sequential_steps(spec) * PROBE_STEP_S[device_kind(spec.device)]
    return passes_s + first_s


def peak_measurement_s(device: str, rate: float) -> float:
    total = 0.0
    for flops in peak.kernel_flops(device_kind(device)):
        call_s = flops / rate
        total += CALIBRATION_CALLS * call_s + passes_time_s(call_s, peak.PEAK_POLICY)
    return total


def flop_count_bytes(spec: PointSpec) -> int:
    """Bytes counting FLOPs adds: an ATen-loop recurrence's gate weights per step where oneDNN takes its dtype."""
    cls = models.LAYERS[spec.layer]
    if (
        spec.mode == DECODE_MODE
        or spec.device != "cpu"
        or spec.dtype == "float32"
        or spec.layer not in models.recurrent()
    ):
        return 0
    if cls.cpu_fused or not onednn_takes(spec.dtype, spec.trains):
        return 0
    return spec.n * cls.gates * spec.d * spec.d * spec.config().elem_bytes


def point_memory_bytes(spec: PointSpec) -> int:
    """Bytes a point holds at its peak: weights, input, and the larger of its activations and flop_count_bytes."""
    cfg = spec.config()
    elem = cfg.elem_bytes
    copies = TRAIN_HELD_COPIES if spec.trains else 1
    weights = _parameters(models.LAYERS[spec.layer], cfg) * elem * copies
    inputs = _input_elements(spec) * elem * copies
    forward = (PREFILL_COPIES if spec.mode == DECODE_MODE else copies) * _activation_bytes(spec)
    return weights + inputs + max(forward, flop_count_bytes(spec))


@dataclass(frozen=True)
class PointEstimate:
    spec: PointSpec
    call_s: float
    time_s: float
    memory_bytes: int


@dataclass(frozen=True)
class PlanEstimate:
    points: tuple[PointEstimate, ...]
    peaks_s: float  # the ceilings (bench.peak) at the start and the end of the run
    extra_s: float = 0.0  # at most this much more: the passes that sample points until their time is known
    extend_s: float = 0.0  # and at most this: points beyond the sweeps that do not decide yet (bench.extend)
    extend_foreseen_s: float = 0.0
    slowdown: float = 1.0
    begun_s: float = 0.0  # what the command took before its plan: start-up, the rates the plan is made from

    @property
    def time_s(self) -> float:
        return (
            sum(p.time_s for p in self.points) + self.peaks_s + self.extend_foreseen_s
        ) * self.slowdown + self.begun_s

    def largest(self) -> dict[str, PointEstimate]:
        """Each device's point of the largest memory estimate: the run's peak there (points run one at a time)."""
        out: dict[str, PointEstimate] = {}
        for p in self.points:
            if p.spec.device not in out or p.memory_bytes > out[p.spec.device].memory_bytes:
                out[p.spec.device] = p
        return out


def rate_of(rates: Mapping[str, float], spec: PointSpec) -> float:
    key = device_key(spec.device, spec.dtype)
    return (
        rates.get(key + CONVOLVES, rates[key]) if getattr(models.LAYERS[spec.layer], "convolves", False) else rates[key]
    )


def estimate_plan(
    specs: Iterable[PointSpec], policy: TimingPolicy, rates: Mapping[str, float], memory: Mapping[str, Memory] = {}
) -> PlanEstimate:
    """The estimate of a run of `specs`; `rates`: compute FLOP/s by `device_key(device, dtype)`, as in meta.json."""
    specs = list(specs)

    def call_s(s: PointSpec) -> float:
        return call_time_s(s, rate_of(rates, s), memory.get(s.device))

    missing = sorted({device_key(s.device, s.dtype) for s in specs} - set(rates))
    if missing:
        raise ValueError(f"no compute rate for {', '.join(missing)}")
    points = tuple(
        PointEstimate(
            spec=s,
            call_s=call_s(s),
            time_s=point_time_s(s, policy, rate_of(rates, s), call_s(s)),
            memory_bytes=point_memory_bytes(s),
        )
        for s in specs
    )
    pairs = sorted({(s.device, s.dtype) for s in specs})
    peaks_s = 2 * sum(peak_measurement_s(device, rates[device_key(device, dtype)]) for device, dtype in pairs)
    peaks_s += sum(MEMORY_CEILINGS_S[device_kind(device)] for device in {device for device, _ in pairs})
    planned_s = sum(p.time_s for p in points)
    extra_s = policy.extra_budget * planned_s if policy.extra_passes else 0.0
    extend_s = policy.extend_budget_s(planned_s)
    if not extend_s:
        return PlanEstimate(points, peaks_s, extra_s)
    from . import extend

    foreseen_s = extend.forecast_s(
        specs,
        call_s,
        lambda s: point_time_s(s, policy, rate_of(rates, s), call_s(s)),
        extend_s,
        extend.memory_limits({s.device for s in specs}),
        MODEL_DRIFT,
        FORECAST_REALIZATIONS,
    )
    return PlanEstimate(points, peaks_s, extra_s, extend_s, foreseen_s)


def rates_from_meta(meta: dict) -> dict[str, float]:
    return {key: float(value["flops_per_s"]) for key, value in stored_peaks(meta).items()}


def quick_rates(specs: Iterable[PointSpec]) -> dict[str, float]:
    """bench.peak.quick_rates of every device and dtype of the plan, at the torch threads in force."""
    rates = {}
    for device, dtype in sorted({(s.device, s.dtype) for s in specs}):
        measured = peak.quick_rates(device, models.DTYPES[dtype], QUICK_POLICY)
        rates[device_key(device, dtype)] = measured["matmul"]
        rates[device_key(device, dtype) + CONVOLVES] = measured["convolution"]
    return rates
