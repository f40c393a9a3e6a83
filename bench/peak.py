"""A device's ceilings: compute peak, memory bandwidth, operator latency. Method: docs/method.md."""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable
from pathlib import Path

import torch

import models

from . import cgroup, hierarchy
from .graphs import device_rounds
from .policy import CPU, DEVICE, THREAD, TimingPolicy
from .spec import device_key
from .timing import WALL_ONLY, Clocks, interleaved

# Square matmuls large enough to reach the plateau of a BLAS / cuBLAS.
MATMUL_SIZES = {"cpu": (512, 1024), "cuda": (4096, 8192, 16384)}
# Convolutions (batch, n, d, k) at which oneDNN's and cuDNN's kernels run at their best rate (TF32: a wide one too).
CONV_SHAPES = {"cpu": ((4, 512, 256, 9), (4, 2048, 128, 3)), "cuda": ((8, 4096, 1024, 3), (4, 65536, 256, 31))}
GRAPH_ROUNDS = 5
PEAK_POLICY = TimingPolicy(min_rounds=6, max_rounds=20, target_s=0.3, passes=3)
# A kernel whose one call would take longer is left out (float16 on many CPUs would spend minutes).
MAX_CALL_S = 0.25


def _kept(entry: dict | None, when: str, value: dict, field: str, better=max) -> dict:
    """A stored ceiling with `value` measured at `when` ("start", "end") added; the better by `field` is kept."""
    measured = dict((entry or {}).get("measured", {}), **{when: value})
    return dict(better(measured.values(), key=lambda m: m[field]), measured=measured)


def _on_clock(entry: dict, field: str, clock: str) -> float | None:
    """A stored ceiling's `field` on `clock`, else the wall clock's (a run from before that clock)."""
    own = {CPU: f"{field}_cpu", DEVICE: f"{field}_device"}.get(clock)
    if own and entry.get(own):
        return float(entry[own])
    return float(entry[field]) if entry.get(field) else None


def _graph_min_s(fn: Callable[[], object]) -> float:
    with torch.inference_mode():
        times, _ = device_rounds(fn, 1, GRAPH_ROUNDS)
    return min(times)


def _timed(device: str, fns: dict, policy: TimingPolicy) -> dict:
    on_gpu = device.startswith("cuda")
    clocks = WALL_ONLY if on_gpu else Clocks.for_call(torch.get_num_threads())
    with torch.inference_mode():
        return interleaved(fns, policy, sync=torch.cuda.synchronize if on_gpu else None, clocks=clocks)


def _thread_cpu(timing):  # the process's CPU clock sums its threads: no ceiling
    return timing.cpu if timing.cpu is not None and timing.cpu_clock == THREAD else None


def with_measurement(entry: dict | None, when: str, value: dict) -> dict:
    """As `_kept`, and the CPU clock's best peak of any measurement."""
    best = _kept(entry, when, value, "flops_per_s")
    cpu = [m["flops_per_s_cpu"] for m in best["measured"].values() if m.get("flops_per_s_cpu")]
    if cpu:
        best["flops_per_s_cpu"] = max(cpu)
    modes: dict[str, dict] = {}
    for measured in best["measured"].values():
        for mode, peak in (measured.get("modes") or {}).items():
            if mode not in modes or peak["flops_per_s"] > modes[mode]["flops_per_s"]:
                modes[mode] = peak
    if modes:
        best["modes"] = modes
    return best


def peak_on(entry: dict, clock: str) -> float | None:
    return _on_clock(entry, "flops_per_s", clock)


def kernel_flops(kind: str) -> list[int]:
    """The FLOPs of one call of each kernel of a device kind's peak, in `_kernels`' order."""
    conv = models.ROLES.convolution
    return [2 * m**3 for m in MATMUL_SIZES[kind]] + [
        models.analytic_flops(conv, batch, n, models.LayerConfig(d=d, k=k)) for batch, n, d, k in CONV_SHAPES[kind]
    ]


def _kernels(device: str, dtype: torch.dtype, quick: bool = False) -> dict[str, tuple[int, Callable[[], object]]]:
    """{name: (FLOPs of one call, the call)}; `quick`: the smallest matmul and the first convolution alone."""
    kind = "cuda" if device.startswith("cuda") else "cpu"
    out = {}
    for m in MATMUL_SIZES[kind][:1] if quick else MATMUL_SIZES[kind]:
        a, b = (torch.randn(m, m, device=device, dtype=dtype) for _ in range(2))
        out[f"matmul {m}x{m}"] = (2 * m**3, lambda a=a, b=b: a @ b)
    conv = models.ROLES.convolution
    for batch, n, d, k in CONV_SHAPES[kind][:1] if quick else CONV_SHAPES[kind]:
        cfg = models.LayerConfig(d=d, k=k, dtype=str(dtype).removeprefix("torch."))
        layer = models.build(conv, cfg, device=device)
        x = torch.randn(batch, n, d, device=device, dtype=dtype)
        out[f"{conv} batch={batch} n={n} d={d} k={k}"] = (
            models.analytic_flops(conv, batch, n, cfg),
            lambda layer=layer, x=x: layer(x),
        )
    return out


TF32, FLOAT32 = "tf32", "float32"


@contextlib.contextmanager
def _tf32(allowed: bool):
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = allowed
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def tf32_in_force() -> dict[str, bool]:
    return {"cublas": torch.backends.cuda.matmul.allow_tf32, "cudnn": torch.backends.cudnn.allow_tf32}


def math_mode(dtype: str, device: str, cudnn: bool, tf32: dict[str, bool] | None) -> str:
    if dtype != FLOAT32 or not str(device).startswith("cuda") or not tf32:
        return dtype
    return TF32 if tf32["cudnn" if cudnn else "cublas"] else FLOAT32


def compute_peak(device: str, dtype: torch.dtype = torch.float32) -> dict:
    """The ceiling of each math mode (a GPU's float32: plain and TF32), the best overall."""
    name = str(dtype).removeprefix("torch.")
    if not (device.startswith("cuda") and dtype == torch.float32):
        return dict(_compute_peak(device, dtype), tf32=tf32_in_force())
    modes = {}
    for mode, allowed in ((FLOAT32, False), (TF32, True)):
        with _tf32(allowed):
            modes[mode] = _compute_peak(device, dtype)
    best = max(modes.values(), key=lambda m: m["flops_per_s"])
    return dict(best, dtype=name, tf32=tf32_in_force(), modes=modes)


def mode_peak(entry: dict, mode: str) -> dict:
    return (entry.get("modes") or {}).get(mode) or entry


def _compute_peak(device: str, dtype: torch.dtype) -> dict:
    """The ceiling on each clock, the best kernel, the matmul's median rate and every kernel's figures."""
    with torch.inference_mode():
        kernels = _affordable(_kernels(device, dtype), torch.cuda.synchronize if device.startswith("cuda") else None)
    timings = _timed(device, {name: fn for name, (_, fn) in kernels.items()}, PEAK_POLICY)
    figures = {}
    for name, (flops, _) in kernels.items():
        t = timings[name]
        figures[name] = {"flops": flops, "wall_median_s": t.wall.median_s, "wall_min_s": t.wall.min_s}
        if cpu := _thread_cpu(t):
            figures[name] |= {"cpu_median_s": cpu.median_s, "cpu_min_s": cpu.min_s}
    best = max(figures, key=lambda name: figures[name]["flops"] / figures[name]["wall_min_s"])
    matmuls = [name for name in figures if name.startswith("matmul")]
    entry = {
        "flops_per_s": figures[best]["flops"] / figures[best]["wall_min_s"],
        "kernel": best,
        "matmul_flops_per_s": max(figures[m]["flops"] / figures[m]["wall_median_s"] for m in matmuls),
        "dtype": str(dtype).removeprefix("torch."),
        "kernels": figures,
    }
    with_cpu = [name for name in figures if "cpu_min_s" in figures[name]]
    if with_cpu:
        entry["flops_per_s_cpu"] = max(figures[name]["flops"] / figures[name]["cpu_min_s"] for name in with_cpu)
    if device.startswith("cuda"):
        for name, (_, fn) in kernels.items():
            figures[name]["device_min_s"] = _graph_min_s(fn)
        entry["flops_per_s_device"] = max(f["flops"] / f["device_min_s"] for f in figures.values())
    return entry


def _affordable(kernels: dict, sync) -> dict:
    """The kernels whose one call would take at most MAX_CALL_S at the rate of the first, which is kept."""
    (first_flops, first), *_ = kernels.values()
    for _ in range(2):  # the first call warms up; the second is timed
        started = time.perf_counter()
        first()
        if sync is not None:
            sync()
        seconds = time.perf_counter() - started
    return {
        name: (flops, fn)
        for index, (name, (flops, fn)) in enumerate(kernels.items())
        if index == 0 or seconds * flops / first_flops <= MAX_CALL_S
    }


def quick_rates(device: str, dtype: torch.dtype, policy: TimingPolicy) -> dict[str, float]:
    """The median rate of the smallest matmul and of the first convolution (a GPU's float32 one is TF32, 6x faster)."""
    on_gpu = device.startswith("cuda")
    with torch.inference_mode():
        kernels = _affordable(_kernels(device, dtype, quick=True), torch.cuda.synchronize if on_gpu else None)
        timings = interleaved(
            {name: fn for name, (_, fn) in kernels.items()}, policy, sync=torch.cuda.synchronize if on_gpu else None
        )
    rates = {name.split()[0]: flops / timings[name].wall.median_s for name, (flops, _) in kernels.items()}
    return {"matmul": rates["matmul"], "convolution": rates.get(models.ROLES.convolution, rates["matmul"])}


# STREAM's triad on arrays far larger than the last-level cache (STREAM's rule: 4x); docs/method.md.
TRIAD_CACHE_MULTIPLE = 4
TRIAD_MIN_ARRAY_BYTES = 64 * 2**20
TRIAD_MEMORY_SHARE = 1 / 32
TRIAD_POLICY = TimingPolicy(min_rounds=5, max_rounds=10, target_s=0.2, min_round_s=0.0, passes=1)
TRIAD_SCALAR = 3.0
TRIAD_IN_CACHE_SHARE = 8
CACHE_TRIAD_POLICY = TimingPolicy(min_rounds=5, max_rounds=10, target_s=0.1, min_round_s=0.005, passes=1)
HIERARCHY_POLICY = TimingPolicy(min_rounds=3, max_rounds=8, target_s=0.03, min_round_s=0.002, passes=1)
CPU_CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")


def last_level_cache_bytes(device: str) -> int | None:
    """The last-level cache as the machine reports it: the GPU's L2, or the CPU's highest cache level in sysfs."""
    if device.startswith("cuda"):
        return int(torch.cuda.get_device_properties(torch.device(device)).L2_cache_size) or None
    caches = sorted(CPU_CACHE_DIR.glob("index*"))
    sizes = {}
    for index in caches:
        try:
            level, size = int((index / "level").read_text()), (index / "size").read_text().strip()
        except (OSError, ValueError):
            continue
        units = {"K": 2**10, "M": 2**20, "G": 2**30}
        sizes[level] = int(size[:-1]) * units[size[-1]] if size[-1] in units else int(size)
    return sizes[max(sizes)] if sizes else None


def triad_array_bytes(cache_bytes: int | None, available_bytes: int) -> int:
    """One triad array's bytes by the rule above (a multiple of 4 bytes)."""
    wanted = max(TRIAD_MIN_ARRAY_BYTES, TRIAD_CACHE_MULTIPLE * (cache_bytes or 0))
    return int(min(wanted, available_bytes * TRIAD_MEMORY_SHARE)) // 4 * 4


def _triad(device: str, elements: int, policy: TimingPolicy) -> dict:
    a, b, c = (torch.full((elements,), value, device=device) for value in (0.5, 1.5, 2.5))
    timing = _timed(device, {"triad": lambda: torch.add(b, c, alpha=TRIAD_SCALAR, out=a)}, policy)["triad"]
    moved = 3 * 4 * elements
    out = {
        "bytes_per_s": moved / timing.wall.min_s,
        "median_bytes_per_s": moved / timing.wall.median_s,
        "array_bytes": 4 * elements,
        "bytes_per_call": moved,
        "wall_min_s": timing.wall.min_s,
        "wall_median_s": timing.wall.median_s,
    }
    if cpu := _thread_cpu(timing):
        out |= {"bytes_per_s_cpu": moved / cpu.min_s, "cpu_min_s": cpu.min_s}
    return out


def device_triad(device: str, elements: int) -> dict:
    """A GPU's bandwidth on its clock: the better of the triad and a read-only sum (a decode step only reads)."""
    a, b, c = (torch.full((elements,), value, device=device) for value in (0.5, 1.5, 2.5))
    triad_s = _graph_min_s(lambda: torch.add(b, c, alpha=TRIAD_SCALAR, out=a))
    both = torch.cat((b, c))
    read_s = _graph_min_s(lambda: both.sum())
    triad, read = 3 * 4 * elements / triad_s, both.nbytes / read_s
    return {"bytes_per_s_device": max(triad, read), "triad_bytes_per_s_device": triad, "read_bytes_per_s_device": read}


def memory_hierarchy(device: str) -> dict:
    """hierarchy.measure of a CPU device's triad at the threads in force: the plan's estimate, then the run's ceilings."""
    return _memory_hierarchy(device, torch.get_num_threads())


@functools.lru_cache(maxsize=8)
def _memory_hierarchy(device: str, threads: int) -> dict:
    return hierarchy.measure(
        lambda elements: _triad(device, elements, HIERARCHY_POLICY)["bytes_per_s"],
        last_level_cache_bytes(device),
        cgroup.available_bytes(),
    )


def memory_bandwidth(device: str, swept: dict | None = None) -> dict:
    """The device's memory bandwidth by the triad, its best round (STREAM's figure); `cache`: inside that cache."""
    on_gpu = device.startswith("cuda")
    if on_gpu:
        available = torch.cuda.mem_get_info(torch.device(device))[0]
    else:
        available = cgroup.available_bytes()
    cache = last_level_cache_bytes(device)
    out = _triad(device, triad_array_bytes(cache, available) // 4, TRIAD_POLICY)
    out |= {"kernel": f"triad a = b + {TRIAD_SCALAR:g}·c, float32", "last_level_cache_bytes": cache}
    if on_gpu:  # on a GPU a triad that fits in L2 is a few µs: its launch, not its bandwidth
        return out | device_triad(device, out["array_bytes"] // 4)
    out["hierarchy"] = swept = swept or memory_hierarchy(device)
    effective = swept["effective_last_level_cache_bytes"]
    if effective:
        out["effective_last_level_cache_bytes"] = effective
    inside = effective or cache
    if inside:
        out["cache"] = _triad(device, inside // TRIAD_IN_CACHE_SHARE // 4, CACHE_TRIAD_POLICY)
    return out


def with_bandwidth(entry: dict | None, when: str, value: dict) -> dict:
    return _kept(entry, when, value, "bytes_per_s")


def bandwidth_on(entry: dict, clock: str, in_cache: bool = False) -> float | None:
    return _on_clock((entry.get("cache") or {}) if in_cache else entry, "bytes_per_s", clock)


LATENCY_CHAIN = 64
LATENCY_SIZE = 8
LATENCY_POLICY = TimingPolicy(min_rounds=6, max_rounds=12, target_s=0.1, passes=1)


def op_latency(device: str) -> dict:
    """Seconds of one small operator that waits for the last: the floor of a loop of an operator per step."""
    h = torch.randn(1, LATENCY_SIZE, device=device)
    w = torch.randn(LATENCY_SIZE, LATENCY_SIZE, device=device) / LATENCY_SIZE

    def chain():
        x = h
        for _ in range(LATENCY_CHAIN):
            x = x @ w
        return x

    timing = _timed(device, {"chain": chain}, LATENCY_POLICY)["chain"]
    out = {
        "seconds": timing.wall.min_s / LATENCY_CHAIN,
        "kernel": f"matmul 1x{LATENCY_SIZE} by {LATENCY_SIZE}x{LATENCY_SIZE}, {LATENCY_CHAIN} in a chain",
    }
    if cpu := _thread_cpu(timing):
        out["seconds_cpu"] = cpu.min_s / LATENCY_CHAIN
    if device.startswith("cuda"):
        out["seconds_device"] = _graph_min_s(chain) / LATENCY_CHAIN
    return out


def with_latency(entry: dict | None, when: str, value: dict) -> dict:
    return _kept(entry, when, value, "seconds", better=min)


def latency_on(entry: dict, clock: str) -> float | None:
    """On the device clock, the graph's latency alone (an eager one would bound a graph's time too low)."""
    if clock == DEVICE:
        return float(entry["seconds_device"]) if entry.get("seconds_device") else None
    return _on_clock(entry, "seconds", clock)


def ceilings(meta: dict, pairs: list[tuple[str, str]], when: str, log: Callable[[str], None]) -> dict:
    """meta.json's ceilings with each (device, dtype) measured at the run's `when` (start, end) where not yet."""
    peaks = dict(meta.get("compute_peak", {}))
    for device, dtype in pairs:
        key = device_key(device, dtype)
        if when in peaks.get(key, {}).get("measured", {}):
            continue
        log(f"compute peak of {key}, at the {when} of the run")
        peaks[key] = with_measurement(peaks.get(key), when, compute_peak(device, models.DTYPES[dtype]))
    bandwidths = dict(meta.get("memory_bandwidth", {}))
    latencies = dict(meta.get("op_latency", {}))
    for device in sorted({device for device, _ in pairs}):
        if when in bandwidths.get(device, {}).get("measured", {}):
            continue
        log(f"memory bandwidth and operator latency of {device}, at the {when} of the run")
        swept = (bandwidths.get(device) or {}).get("hierarchy")
        bandwidths[device] = with_bandwidth(bandwidths.get(device), when, memory_bandwidth(device, swept))
        latencies[device] = with_latency(latencies.get(device), when, op_latency(device))
    return dict(compute_peak=peaks, memory_bandwidth=bandwidths, op_latency=latencies)
