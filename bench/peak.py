"""A device's matrix-multiply peak, measured: the ceiling for the fraction-of-peak (roofline) column."""

from __future__ import annotations

import time

import torch

from .timing import TimingPolicy, interleaved

# Square matmuls large enough to reach the plateau of a BLAS / cuBLAS; the best of them is the peak.
CPU_SIZES = (512, 1024, 2048)
CUDA_SIZES = (4096, 8192, 16384)
PEAK_POLICY = TimingPolicy(min_rounds=6, max_rounds=20, target_s=0.3, passes=3)
# A size whose one product would take longer than this (judged from one product at the smallest size, m³
# scaling) is left out: a dtype without a fast kernel (float16 on many CPUs) would otherwise spend minutes.
MAX_CALL_S = 0.25


def with_measurement(entry: dict | None, when: str, value: dict) -> dict:
    """A device's stored peak entry with `value` (a matmul_peak) measured at `when` ("start", "end") added
    to its `measured`: the peak is the better of them (a ceiling: a slow phase of the machine can only
    lower it)."""
    measured = dict((entry or {}).get("measured", {}), **{when: value})
    return dict(max(measured.values(), key=lambda m: m["flops_per_s"]), measured=measured)


def matmul_peak(device: str, dtype: torch.dtype = torch.float32) -> dict:
    """Best achieved FLOP/s of an (m×m)·(m×m) product over a few sizes, 2·m³ FLOPs each (median time),
    the sizes timed interleaved by the sweep's engine (bench.timing.interleaved)."""
    sizes = CUDA_SIZES if device.startswith("cuda") else CPU_SIZES
    sync = torch.cuda.synchronize if device.startswith("cuda") else None
    sizes = _affordable(sizes, device, dtype, sync)
    operands = {
        m: (torch.randn(m, m, device=device, dtype=dtype), torch.randn(m, m, device=device, dtype=dtype)) for m in sizes
    }
    with torch.inference_mode():
        timings = interleaved({m: (lambda a=a, b=b: a @ b) for m, (a, b) in operands.items()}, PEAK_POLICY, sync=sync)
    best = max(sizes, key=lambda m: 2 * m**3 / timings[m].median_s)
    t = timings[best]
    return {
        "flops_per_s": 2 * best**3 / t.median_s,
        "size": best,
        "time_median_s": t.median_s,
        "time_iqr_s": t.iqr_s,
        "time_ci_s": [t.ci_low_s, t.ci_high_s],
        "dtype": str(dtype).removeprefix("torch."),
    }


def _affordable(sizes: tuple[int, ...], device: str, dtype: torch.dtype, sync) -> tuple[int, ...]:
    """The sizes whose one product takes at most MAX_CALL_S, judged from one product at the smallest (after a
    warm-up product); the smallest is always kept."""
    m = sizes[0]
    a, b = torch.randn(m, m, device=device, dtype=dtype), torch.randn(m, m, device=device, dtype=dtype)
    with torch.inference_mode():
        for _ in range(2):  # the first call warms up; the second is timed
            started = time.perf_counter()
            a @ b
            if sync is not None:
                sync()
            seconds = time.perf_counter() - started
    return tuple(size for size in sizes if size == m or seconds * (size / m) ** 3 <= MAX_CALL_S)
