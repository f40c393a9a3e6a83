"""Multi-head attention: its cost against single-head attention of full width."""

from __future__ import annotations

import torch

import models
from models import LayerConfig

from .record import (
    PAPER,
    TIME_THREADS,
    ClaimResult,
    _generator,
    _num,
    _numbers,
    _result,
    claim,
    counted_flops,
    interleaved_times_s,
)

# ------------------------------------------------------------------------ 3. multi-head cost
MULTIHEAD_HEADS = (1, 2, 4, 8, 16)
MULTIHEAD_SIZE = {"batch": 1, "n": 256, "d": 256}
TIME_SIMILAR_RATIO = 1.25  # slowest / fastest time over h at most this for the times to count as "about the same"


@claim(
    "multihead_cost",
    "Multi-head attention with d_k = d_v = d/h costs about the same as single-head attention of full width d.",
    f"{PAPER}, §3.2.2",
    notes=("multihead_cost",),
)
def _claim_multihead_cost(seed: int) -> ClaimResult:
    b, n, d = MULTIHEAD_SIZE["batch"], MULTIHEAD_SIZE["n"], MULTIHEAD_SIZE["d"]
    x = torch.randn(b, n, d, generator=_generator(seed, 3))
    explicit, fused = models.ROLES.attention_explicit, models.ROLES.attention
    layers = {
        (name, h): models.build(name, LayerConfig(d=d, heads=h), seed=seed)
        for h in MULTIHEAD_HEADS
        for name in (explicit, fused)
    }
    flops = [counted_flops(lambda: layers[explicit, h](x)) for h in MULTIHEAD_HEADS]
    flops_fused = [counted_flops(lambda: layers[fused, h](x)) for h in MULTIHEAD_HEADS]
    times = interleaved_times_s({key: (lambda layer=layer: layer(x)) for key, layer in layers.items()})
    times_math = [_num(times[explicit, h]) for h in MULTIHEAD_HEADS]
    times_fused = [_num(times[fused, h]) for h in MULTIHEAD_HEADS]
    flops_equal = len(set(flops + flops_fused)) == 1
    ratio = max(times_math) / min(times_math)
    ratio_fused = max(times_fused) / min(times_fused)
    if not flops_equal:
        verdict = "fails"
    else:
        verdict = "holds" if max(ratio, ratio_fused) <= TIME_SIMILAR_RATIO else "partly"
    slowest = MULTIHEAD_HEADS[times_math.index(max(times_math))]
    fastest = MULTIHEAD_HEADS[times_math.index(min(times_math))]
    return _result(
        "multihead_cost",
        measured=_num(ratio, 3),
        expected=f"counted FLOPs equal for h in {list(MULTIHEAD_HEADS)} (b = {b}, n = {n}, d = {d}, both layers); "
        f"slowest / fastest time of {explicit} over h ≤ {TIME_SIMILAR_RATIO} (and of {fused})",
        verdict=verdict,
        details={
            "heads": list(MULTIHEAD_HEADS),
            **MULTIHEAD_SIZE,
            "flops_counted": flops,
            f"flops_counted_{fused}": flops_fused,
            f"time_median_s_{explicit}": times_math,
            f"time_median_s_{fused}": times_fused,
            "time_threads": TIME_THREADS,
            "numbers": _numbers(
                flops_counted=(flops[0], "FLOP", f"counted FLOPs at h = {MULTIHEAD_HEADS[0]}"),
                flops_distinct=(len(set(flops + flops_fused)), "1", "distinct FLOP counts over h and both layers"),
                slowest_heads=(slowest, "1", f"h of the slowest {explicit}"),
                fastest_heads=(fastest, "1", f"h of the fastest {explicit}"),
                time_ratio_attention=(ratio_fused, "1", f"slowest / fastest time over h, {fused}"),
            ),
        },
    )
