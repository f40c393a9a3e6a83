"""Before a run: how long it will take and how much memory its largest point needs, estimated.

Pure functions of the plan (its PointSpecs and timing policy) and one number per device and dtype, the
machine's compute rate in FLOP/s, the better of a dense matmul's and a convolution's (bench.peak: on some CPUs
oneDNN's convolution runs twice as fast as the BLAS matmul): measured in a fraction of a second by
`quick_rate`, or read from a stored run's compute peak (`rates_from_meta`), which is how the tests check the
model against the reference run without timing anything on a shared machine. An estimate, not a measurement: within a factor
of 2 of the reference run's duration is what it is held to (tests/test_estimate.py).

One forward call of a point (`call_time_s`): a roofline, plus the costs a call adds besides its work,

    call = CALL_OVERHEAD_S + max(compute, memory) + steps · STEP_OVERHEAD_S
    compute = flops_analytic / (COMPUTE_EFFICIENCY · rate)                the matrix products
    memory = activation_bytes · ACTIVATION_FLOPS_PER_BYTE / rate          the element-wise work (softmax,
                                                                          gathers, gates) on the activations

with `rate` the compute rate, the memory side in units of the same rate (so one number calibrates both), and
`steps` the dependent steps of the layer's sequential-operations cell beyond its one pass
(`table1.sequential_steps`): a recurrence's n, a parallel scan's ⌈log₂ n⌉ levels, 0 for the layers of O(1)
sequential operations. Nothing here names a layer: every term comes from models/.

A point's time (`point_time_s`) follows the timing policy exactly as bench.timing plans it
(`TimingPolicy.plan` on that call time: rounds and calls per round, split over the passes): per pass one
untimed call, WARMUP_ROUNDS untimed rounds and the pass's timed rounds, plus VISIT_OVERHEAD_S (the layer is
built again at every visit); its first pass also calibrates (2 calls) and runs the FLOP and memory probes
(a call each under a dispatch mode or the profiler, whose per-operator cost a recurrence pays at each of its
steps: PROBE_STEP_S). The compute peak is measured at the run's start and end (bench.peak, its kernels timed by
the same policy arithmetic). The extra passes that sample a point until its time is known take at most the
policy's `extra_budget` of the passes' time: `PlanEstimate.extra_s`, said beside the estimate, not in it.

Memory of a point (`point_memory_bytes`): its weights (the layer built on the meta device, so nothing is
allocated), its input and `models.analytic_activation_bytes`. Points run one at a time and free what they
allocated, so a run's peak is its largest point's.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import torch

import models

from . import peak
from .peak import stored_peaks
from .spec import PointSpec, device_key
from .timing import WARMUP_ROUNDS, TimingPolicy

# The model's constants, per device kind where they differ. CPU values: from the reference runs of the quick
# preset (results/reference/, 2-core VMs, 1 thread): calls of under 0.3 ms at 25 MFLOP say the per-call cost
# is tens of microseconds; convolutions, the LSTM and attention at d = 128 reach 0.3-0.9 of the compute
# rate; the explicit and local attention at large n run at about 1.2-2 GB/s of their activation bytes,
# 95-160 FLOPs of the peak per byte; the GRU's and RNN's per-step operator loops add 6-17 µs a step; the FLOP
# counter and the memory profiler add about 1 ms a step to a GRU of 256 steps, less to the RNN's fewer operators
# and nothing to the fused LSTM, so half that a step for a recurrence (PROBE_STEP_S). CUDA values: not fitted to a
# stored GPU run; the element-wise rate from an H100's ratio of FP32 FLOP/s to memory bandwidth (about 15
# FLOPs a byte), doubled since activations are written and read again; cuDNN runs a recurrence fused.
CALL_OVERHEAD_S = {"cpu": 50e-6, "cuda": 50e-6}
COMPUTE_EFFICIENCY = 0.5  # the share of the measured compute rate a layer's matrix products reach
ACTIVATION_FLOPS_PER_BYTE = {"cpu": 128.0, "cuda": 32.0}
STEP_OVERHEAD_S = {"cpu": 10e-6, "cuda": 5e-6}
PROBE_STEP_S = {"cpu": 0.5e-3, "cuda": 0.0}
VISIT_OVERHEAD_S = 5e-3  # building the layer and its input, pytest-benchmark's fixture, the pass's record
PROBE_OVERHEAD_S = 5e-3  # the FLOP counter's and the profiler's set-up, once per point
PROBE_CALLS = 2  # the FLOP counter's call and the memory probe's call, on a point's first pass
# A training call (mode "train") goes over its activations about three times (the forward writes them, the
# backward reads them and writes gradients of the same size), over a recurrence's steps twice (the backward
# is a second chain of n steps), and holds the activations and their gradients, and the weights' gradients,
# at its peak. Its FLOPs are the layers' own train formulas (models.analytic_flops).
TRAIN_ACTIVATION_PASSES = 3
TRAIN_STEP_CHAINS = 2
TRAIN_HELD_COPIES = 2
CALIBRATION_CALLS = 2  # bench.timing.calibrate: a call that pays lazy initialisation, then the timed one

# The quick calibration (bench.peak.quick_rate): the peak's smallest matmul and first convolution, large enough
# to leave the per-call overhead behind, small enough to stay well under a second with their warm-up; a few
# rounds of each, the better median.
QUICK_POLICY = TimingPolicy(min_rounds=3, max_rounds=10, target_s=0.05, min_round_s=0.005, passes=1)

LONG_RUN_S = 30 * 60  # above this estimate `run` asks before measuring (or wants --yes without a terminal)
# Device kinds where a point estimated beyond the memory is refused (or asked about, beyond what is available
# now): on the CPU such a point swaps or meets the OS's out-of-memory killer, which ends the whole run (and may
# pick another process). On a GPU the allocator raises torch.OutOfMemoryError, which the run records as `oom`
# and then skips the layer's larger points: the gpu preset runs attention_math up to n = 32768 for that.
REFUSED_BEYOND_MEMORY = ("cpu",)


def _kind(device: str) -> str:
    return "cuda" if device.startswith("cuda") else "cpu"


def _elem_bytes(dtype: str) -> int:
    return torch.empty((), dtype=models.DTYPES[dtype]).element_size()


@functools.lru_cache(maxsize=4096)
def _parameters(layer_cls: type, cfg: models.LayerConfig) -> int:
    """The layer's parameter count, from a build on the meta device (no memory, no initialisation)."""
    with torch.device("meta"):
        module = layer_cls(cfg)
    return sum(p.numel() for p in module.parameters())


def sequential_steps(spec: PointSpec) -> int:
    """The steps a call takes one after another: n for a recurrence (Table 1's O(n)), ⌈log₂ n⌉ for a parallel
    scan (O(log n)), 0 for a layer of O(1) sequential operations (its one pass is the call)."""
    row = models.LAYERS[spec.layer].table1
    return 0 if row.sequential_is_constant else row.sequential_steps(spec.n)


def call_time_s(spec: PointSpec, rate: float) -> float:
    """Estimated seconds of one call of `spec` (a forward pass, or in train mode a forward and a backward pass)
    on a device whose matmul runs at `rate` FLOP/s."""
    cfg = spec.config()
    kind = _kind(spec.device)
    train = spec.trains
    flops = models.analytic_flops(spec.layer, spec.batch, spec.n, cfg, spec.mode, spec.device)
    activations = models.analytic_activation_bytes(spec.layer, spec.batch, spec.n, cfg)
    compute_s = flops / (COMPUTE_EFFICIENCY * rate)
    memory_s = activations * (TRAIN_ACTIVATION_PASSES if train else 1) * ACTIVATION_FLOPS_PER_BYTE[kind] / rate
    steps = sequential_steps(spec) * (TRAIN_STEP_CHAINS if train else 1)
    return CALL_OVERHEAD_S[kind] + max(compute_s, memory_s) + steps * STEP_OVERHEAD_S[kind]


def passes_time_s(call_s: float, policy: TimingPolicy, overhead_s: float = 0.0) -> float:
    """Seconds of one set of `policy.passes` passes over a callable of `call_s` a call, as bench.timing runs
    them: rounds and calls per round from the policy's plan, each pass one untimed call, WARMUP_ROUNDS
    untimed rounds and its share of the timed rounds, plus `overhead_s` a pass."""
    rounds, iterations = policy.plan(call_s)
    calls_per_pass = 1 + (WARMUP_ROUNDS + policy.rounds_per_pass(rounds)) * iterations
    return policy.passes * (calls_per_pass * call_s + overhead_s)


def point_time_s(spec: PointSpec, policy: TimingPolicy, rate: float) -> float:
    """Estimated seconds a run spends on `spec`: its passes, and its first pass's calibration and probes."""
    call_s = call_time_s(spec, rate)
    passes_s = passes_time_s(call_s, policy, VISIT_OVERHEAD_S)
    first_s = (CALIBRATION_CALLS + PROBE_CALLS) * call_s + PROBE_OVERHEAD_S
    first_s += sequential_steps(spec) * PROBE_STEP_S[_kind(spec.device)]
    return passes_s + first_s


def peak_measurement_s(device: str, rate: float) -> float:
    """Estimated seconds of one bench.peak.compute_peak on `device`: its kernels, timed interleaved."""
    total = 0.0
    for flops in peak.kernel_flops(_kind(device)):
        call_s = flops / rate
        total += CALIBRATION_CALLS * call_s + passes_time_s(call_s, peak.PEAK_POLICY)
    return total


def flop_count_bytes(spec: PointSpec) -> int:
    """What counting a point's FLOPs holds beyond its forward call: a recurrence that the CPU runs as a loop of
    per-step operators (not fused), in a reduced precision, keeps one copy of its gate weights per step while
    FlopCounterMode decomposes it: g·d² elements a step (measured here, torch 2.13, batch 4, d = 512, n = 1024:
    rnn 0.59 MB a step against 0.52 MB = d²·2 B, gru 1.6 MB against 3·d²·2 B; float32 and the fused LSTM hold
    nothing that grows with n). rnn, bfloat16, n = 16384, d = 512: 8.6 GB."""
    cls = models.LAYERS[spec.layer]
    if spec.device != "cpu" or spec.dtype == "float32" or spec.layer not in models.recurrent() or cls.cpu_fused:
        return 0
    return spec.n * cls.gates * spec.d * spec.d * _elem_bytes(spec.dtype)


def point_memory_bytes(spec: PointSpec) -> int:
    """Estimated bytes a point holds at its peak: weights, input, and the activations of its forward call or
    what counting its FLOPs holds (flop_count_bytes), whichever is larger."""
    cfg = spec.config()
    elem = _elem_bytes(spec.dtype)
    copies = TRAIN_HELD_COPIES if spec.trains else 1
    weights = _parameters(models.LAYERS[spec.layer], cfg) * elem * copies
    inputs = spec.batch * spec.n * spec.d * elem * copies
    forward = models.analytic_activation_bytes(spec.layer, spec.batch, spec.n, cfg) * copies
    return weights + inputs + max(forward, flop_count_bytes(spec))


@dataclass(frozen=True)
class PointEstimate:
    spec: PointSpec
    call_s: float
    time_s: float
    memory_bytes: int


@dataclass(frozen=True)
class PlanEstimate:
    """The estimate of a whole plan: its points' and the run's seconds, and each device's largest point."""

    points: tuple[PointEstimate, ...]
    peaks_s: float  # the compute peak at the start and the end of the run
    extra_s: float = 0.0  # at most this much more: the passes that sample points until their time is known

    @property
    def time_s(self) -> float:
        return sum(p.time_s for p in self.points) + self.peaks_s

    def largest(self) -> dict[str, PointEstimate]:
        """Each device's point with the largest memory estimate: the run's peak on that device."""
        out: dict[str, PointEstimate] = {}
        for p in self.points:
            if p.spec.device not in out or p.memory_bytes > out[p.spec.device].memory_bytes:
                out[p.spec.device] = p
        return out


def estimate_plan(specs: Iterable[PointSpec], policy: TimingPolicy, rates: Mapping[str, float]) -> PlanEstimate:
    """The estimate of a run of `specs` under `policy`; `rates`: compute FLOP/s by `device_key(device, dtype)`
    (the keys of meta.json's `compute_peak`), one for every device and dtype of the plan."""
    specs = list(specs)
    missing = sorted({device_key(s.device, s.dtype) for s in specs} - set(rates))
    if missing:
        raise ValueError(f"no compute rate for {', '.join(missing)}")
    points = tuple(
        PointEstimate(
            spec=s,
            call_s=call_time_s(s, rates[device_key(s.device, s.dtype)]),
            time_s=point_time_s(s, policy, rates[device_key(s.device, s.dtype)]),
            memory_bytes=point_memory_bytes(s),
        )
        for s in specs
    )
    pairs = sorted({(s.device, s.dtype) for s in specs})
    peaks_s = 2 * sum(peak_measurement_s(device, rates[device_key(device, dtype)]) for device, dtype in pairs)
    extra_s = policy.extra_budget * sum(p.time_s for p in points) if policy.extra_passes else 0.0
    return PlanEstimate(points, peaks_s, extra_s)


def rates_from_meta(meta: dict) -> dict[str, float]:
    """The compute rates a stored run measured (meta.json `compute_peak`; an older run's `matmul_peak`, its square
    matmul's), in the form `estimate_plan` takes."""
    return {key: float(value["flops_per_s"]) for key, value in stored_peaks(meta).items()}


# ------------------------------------------------------------------------------------------- judging
def describe_point(spec: PointSpec) -> str:
    sizes = [f"{name}={getattr(spec, name)}" for name in ("n", "d", "batch", *models.LAYERS[spec.layer].uses)]
    dtype = "" if spec.dtype == "float32" else f" {spec.dtype}"
    return f"{spec.layer} {' '.join(sizes)} on {spec.device}{dtype}"


def _beyond(estimate: PlanEstimate, limits: Mapping[str, int], kinds: tuple[str, ...]) -> dict[str, list]:
    """The points of each device of `kinds` estimated above that device's limit in `limits`, largest first."""
    out: dict[str, list[PointEstimate]] = {}
    for p in estimate.points:
        device = p.spec.device
        if _kind(device) in kinds and device in limits and p.memory_bytes > limits[device]:
            out.setdefault(device, []).append(p)
    return {device: sorted(ps, key=lambda p: -p.memory_bytes) for device, ps in sorted(out.items())}


def _beyond_text(points: list[PointEstimate], limit: int, what: str) -> str:
    largest = points[0]
    if len(points) == 1:
        return f"{describe_point(largest.spec)} needs about {format_bytes(largest.memory_bytes)}, more than the {format_bytes(limit)} {what}"
    return (
        f"{describe_point(largest.spec)} and {len(points) - 1} smaller point(s) need up to about "
        f"{format_bytes(largest.memory_bytes)}, more than the {format_bytes(limit)} {what}"
    )


def too_large(estimate: PlanEstimate, total_bytes: Mapping[str, int]) -> list[str]:
    """One line per device of REFUSED_BEYOND_MEMORY with points estimated above its whole memory
    (`total_bytes` by device), naming the largest: points that cannot run there."""
    return [
        _beyond_text(points, total_bytes[device], f"of memory {device} has")
        for device, points in _beyond(estimate, total_bytes, REFUSED_BEYOND_MEMORY).items()
    ]


def expected_ooms(estimate: PlanEstimate, total_bytes: Mapping[str, int]) -> list[str]:
    """One line per other device (a GPU) with points estimated above its whole memory: they are expected to
    run out of memory, which the run records (`oom`, larger points of the layer `skipped`)."""
    kinds = tuple(k for k in CALL_OVERHEAD_S if k not in REFUSED_BEYOND_MEMORY)
    return [
        _beyond_text(points, total_bytes[device], f"of memory {device} has")
        + ": expected to run out of memory, stored as oom with the larger points of the layer skipped"
        for device, points in _beyond(estimate, total_bytes, kinds).items()
    ]


def reasons_to_ask(
    estimate: PlanEstimate, available_bytes: Mapping[str, int], long_run_s: float | None = None
) -> list[str]:
    """Why a run should not start without asking: an estimate above `long_run_s` (default LONG_RUN_S), or a
    point estimated above the memory available now (`available_bytes` by device) on a device of
    REFUSED_BEYOND_MEMORY."""
    long_run_s = LONG_RUN_S if long_run_s is None else long_run_s
    reasons = []
    if estimate.time_s > long_run_s:
        reasons.append(
            f"it takes about {format_duration(estimate.time_s)} (estimate), above the "
            f"{format_duration(long_run_s)} a run starts without asking"
        )
    for device, points in _beyond(estimate, available_bytes, REFUSED_BEYOND_MEMORY).items():
        reasons.append(_beyond_text(points, available_bytes[device], f"available on {device} now"))
    return reasons


def summary_line(estimate: PlanEstimate) -> str:
    """`plan: 115 points, about 2.4 min on this machine (estimate; at most 1.1 min more where points need more
    rounds), peak memory about 570 MB (...)`."""
    memory = ", ".join(
        f"{format_bytes(p.memory_bytes)} on {device} ({describe_point(p.spec).rsplit(' on ', 1)[0]})"
        for device, p in sorted(estimate.largest().items())
    )
    extra = (
        f"; at most {format_duration(estimate.extra_s)} more where points need more rounds" if estimate.extra_s else ""
    )
    return (
        f"plan: {len(estimate.points)} points, about {format_duration(estimate.time_s)} on this machine "
        f"(estimate{extra}), peak memory about {memory or '0 B'}"
    )


def format_duration(seconds: float) -> str:
    """In the unit that reads best: 45 s, 2.4 min, 30 min, 1.5 h, 12 days."""
    for unit, size, below in (("s", 1, 90), ("min", 60, 90 * 60), ("h", 3600, 48 * 3600), ("days", 86400, math.inf)):
        if seconds < below:
            value = seconds / size
            return f"{value:.1f} {unit}" if value < 10 and unit != "s" else f"{value:.0f} {unit}"
    raise AssertionError("unreachable")


def format_bytes(n: float) -> str:
    """Three significant digits in decimal units: 579 MB, 1.2 GB."""
    for unit in ("B", "kB", "MB", "GB"):
        if abs(n) < 999.5:
            return f"{n:.3g} {unit}"
        n /= 1000
    return f"{n:.3g} TB"


# ----------------------------------------------------------------------------------------- measuring
def quick_rates(specs: Iterable[PointSpec]) -> dict[str, float]:
    """bench.peak.quick_rate of every device and dtype of the plan (QUICK_POLICY), keyed as `estimate_plan`
    wants; the torch threads in force (the caller pins them)."""
    return {
        device_key(device, dtype): peak.quick_rate(device, models.DTYPES[dtype], QUICK_POLICY)
        for device, dtype in sorted({(s.device, s.dtype) for s in specs})
    }


__all__ = [
    "LONG_RUN_S",
    "PlanEstimate",
    "PointEstimate",
    "call_time_s",
    "estimate_plan",
    "format_bytes",
    "format_duration",
]
