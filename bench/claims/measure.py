"""How the claims time and count: interleaved times on one thread's CPU clock, counted FLOPs, parameters."""

from __future__ import annotations

from collections.abc import Callable, Hashable

import torch

from bench.flops import count_flops
from bench.point import autograd_mode
from bench.policy import CPU, TimingPolicy
from bench.threads import pinned_threads
from bench.timing import Clocks, interleaved

# Times compare variants, so only ratios matter: interleaved passes, one thread, its CPU clock (docs/method.md).
TIME_POLICY = TimingPolicy(min_rounds=9, max_rounds=9, target_s=0.1, min_round_s=0.015, passes=3)
TIME_THREADS = 1
CLAIMS_THREADS = 1  # measure_claims as a whole


def interleaved_times_s(
    fns: dict[Hashable, Callable[[], object]],
    policy: TimingPolicy = TIME_POLICY,
    clocks: Clocks | None = None,
    autograd: bool = False,
) -> dict[Hashable, float]:
    """Median seconds per call of each callable, interleaved, on the CPU clock (`clocks`: the tests' seam)."""
    with pinned_threads(TIME_THREADS), autograd_mode(autograd):
        timings = interleaved(fns, policy, clocks=clocks or Clocks.for_call(TIME_THREADS))
    return {name: t.on(CPU).median_s for name, t in timings.items()}


def parameter_count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def counted_flops(fn: Callable[[], object], autograd: bool = False) -> int:
    """FLOPs of one call of `fn`; an operator without a formula is an error, since claims compare counts."""
    with autograd_mode(autograd):
        count = count_flops(fn)
    if count.uncounted_ops:
        raise RuntimeError(f"FLOP count is a lower bound: no formula for {', '.join(count.uncounted_ops)}")
    return count.total
