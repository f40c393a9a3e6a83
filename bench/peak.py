"""A device's matrix-multiply peak, measured: the ceiling for the fraction-of-peak (roofline) column."""

from __future__ import annotations

import torch

from .timing import TimingPolicy, interleaved

# Square matmuls large enough to reach the plateau of a BLAS / cuBLAS; the best of them is the peak.
CPU_SIZES = (512, 1024, 2048)
CUDA_SIZES = (4096, 8192, 16384)
PEAK_POLICY = TimingPolicy(min_rounds=6, max_rounds=20, target_s=0.3, passes=3)


def matmul_peak(device: str, dtype: torch.dtype = torch.float32) -> dict:
    """Best achieved FLOP/s of an (m×m)·(m×m) product over a few sizes, 2·m³ FLOPs each (median time),
    the sizes timed interleaved by the sweep's engine (bench.timing.interleaved)."""
    sizes = CUDA_SIZES if device.startswith("cuda") else CPU_SIZES
    sync = torch.cuda.synchronize if device.startswith("cuda") else None
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
