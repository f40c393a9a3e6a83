"""A device's matrix-multiply peak, measured: the ceiling for the fraction-of-peak (roofline) column."""
from __future__ import annotations

import torch

from .timing import TimingPolicy, time_call

# Square matmuls large enough to reach the plateau of a BLAS / cuBLAS; the best of them is the peak.
CPU_SIZES = (512, 1024, 2048)
CUDA_SIZES = (4096, 8192, 16384)
PEAK_POLICY = TimingPolicy(min_rounds=5, max_rounds=20, target_s=0.3)


def matmul_peak(device: str, dtype: torch.dtype = torch.float32) -> dict:
    """Best achieved FLOP/s of an (m×m)·(m×m) product over a few sizes, 2·m³ FLOPs each (median time)."""
    sizes = CUDA_SIZES if device.startswith("cuda") else CPU_SIZES
    sync = torch.cuda.synchronize if device.startswith("cuda") else None
    best = None
    for m in sizes:
        a = torch.randn(m, m, device=device, dtype=dtype)
        b = torch.randn(m, m, device=device, dtype=dtype)
        with torch.inference_mode():
            timing = time_call(lambda: a @ b, sync=sync, policy=PEAK_POLICY, name=f"matmul{m}")
        flops_per_s = 2 * m**3 / timing.median_s
        if best is None or flops_per_s > best["flops_per_s"]:
            best = {"flops_per_s": flops_per_s, "size": m, "time_median_s": timing.median_s,
                    "time_iqr_s": timing.iqr_s, "dtype": str(dtype).removeprefix("torch.")}
        del a, b
    return best
