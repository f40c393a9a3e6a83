"""One cached-attention decode step by this project's kernel and torch's, on one cache. Method: docs/method.md."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import pandas as pd
import torch
import torch.nn.functional as F
from torch.utils import benchmark

from bench.graphs import device_rounds
from bench.peak import bandwidth_on, memory_bandwidth
from bench.policy import DEVICE, WALL
from models.split_kv import chosen_step, split_kv_op

ROUNDS, REPLAY_S, MAX_CALLS = 10, 0.005, 50
MEMORY_SHARE, FIRST_T, LADDER = 0.6, 32768, 8  # t, t·LADDER and the longest whose cache fits this share of free memory
OURS = "split-KV (this project)"
SDPA_BACKENDS = {
    "SDPA flash": "FLASH_ATTENTION",
    "SDPA memory-efficient": "EFFICIENT_ATTENTION",
    "SDPA cuDNN": "CUDNN_ATTENTION",
}
FLEX = "FlexAttention"


def device_time(call: Callable[[], object], device: str, calls: int = 20, rounds: int = ROUNDS) -> tuple[float, str]:
    if str(device).startswith("cuda"):
        times, _ = device_rounds(call, calls, rounds)
        return float(torch.tensor(times).median()), DEVICE
    return benchmark.Timer("call()", globals={"call": call}).blocked_autorange(min_run_time=0.3).median, WALL


def _explicit(q, k, v):
    scores = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
    return torch.softmax(scores.float(), -1).to(v.dtype) @ v


def _split_kv(q, k, v):
    return split_kv_op(q, k, v, 0, k.shape[2])


def _sdpa_forced(backend: str) -> Callable:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    chosen = getattr(SDPBackend, backend)

    def call(q, k, v):
        with sdpa_kernel(chosen):
            return F.scaled_dot_product_attention(q, k, v)

    return call


def _flex() -> Callable:
    import torch._dynamo
    from torch.nn.attention.flex_attention import flex_attention

    for limit in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, limit):
            setattr(torch._dynamo.config, limit, 64)
    return torch.compile(flex_attention, dynamic=False)


def peer_kernels(names: list[str] | None = None) -> dict[str, Callable]:
    made = {
        OURS: lambda: _split_kv,
        "explicit": lambda: _explicit,
        "SDPA default": lambda: F.scaled_dot_product_attention,
    }
    made |= {name: (lambda b=backend: _sdpa_forced(b)) for name, backend in SDPA_BACKENDS.items()}
    made[FLEX] = _flex
    unknown = sorted(set(names or ()) - set(made))
    if unknown:
        raise ValueError(f"unknown peer {', '.join(unknown)}; known: {', '.join(made)}")
    return {name: made[name]() for name in (names or made)}


def cache_bytes(batch: int, t: int, d: int, elem_bytes: int) -> int:
    return 2 * batch * t * d * elem_bytes + 2 * batch * d * elem_bytes


def ladder(free_bytes: int, batch: int, d: int, elem_bytes: int, first: int = FIRST_T) -> list[int]:
    fits = lambda t: cache_bytes(batch, t, d, elem_bytes) <= MEMORY_SHARE * free_bytes  # noqa: E731
    if not fits(first):
        return []
    ts = [first] + ([first * LADDER] if fits(first * LADDER) else [])
    longest = ts[-1]
    while fits(longest * 2):
        longest *= 2
    return ts + ([longest] if longest != ts[-1] else [])


def _error(out: torch.Tensor, q, k, v) -> float:
    q0, k0, v0 = (x[-1, -1].double() for x in (q, k, v))
    want = torch.softmax((q0 @ k0.T) * q0.shape[-1] ** -0.5, -1) @ v0
    return float((out[-1, -1].double() - want).abs().max())


def peers(
    device: str,
    ts: list[int],
    d: int,
    heads: int,
    batch: int,
    dtypes: list[str],
    names: list[str] | None = None,
    bandwidth: dict | None = None,
) -> pd.DataFrame:
    if d % heads:
        raise ValueError(f"d = {d} is not a multiple of heads = {heads}")
    bandwidth = bandwidth or memory_bandwidth(device)
    on_gpu = str(device).startswith("cuda")
    rate = bandwidth_on(bandwidth, DEVICE if on_gpu else WALL)
    kernels = peer_kernels(names)
    rows = []
    g = torch.Generator(device=device).manual_seed(0)
    for dtype in dtypes:
        torch_dtype = getattr(torch, dtype)
        for t in ts:
            shape = (batch, heads, t, d // heads)
            q = torch.randn(batch, heads, 1, d // heads, device=device, dtype=torch_dtype, generator=g)
            k, v = (torch.randn(shape, device=device, dtype=torch_dtype, generator=g) for _ in range(2))
            moved = cache_bytes(batch, t, d, k.element_size())
            bound_s = moved / rate
            calls = max(1, min(MAX_CALLS, math.ceil(REPLAY_S / bound_s)))
            base = dict(t=t, d=d, heads=heads, batch=batch, dtype=dtype, device=device, bytes=moved)
            base |= dict(bandwidth_bytes_per_s=rate, bound_s=bound_s)
            for name, fn in kernels.items():
                row = dict(base, peer=name)
                started = time.perf_counter()
                try:
                    with torch.inference_mode():
                        error = _error(fn(q, k, v), q, k, v)
                        prepared = time.perf_counter() - started
                        seconds, clock = device_time(lambda fn=fn, q=q, k=k, v=v: fn(q, k, v), device, calls)
                except Exception as exc:  # noqa: BLE001 - a peer without this case is a row saying so
                    row |= dict(status="not available", message=f"{type(exc).__name__}: {str(exc).splitlines()[0]}")
                else:
                    row |= dict(status="ok", time_s=seconds, clock=clock, calls=calls, prepare_s=prepared)
                    row |= dict(share_of_bound=bound_s / seconds, achieved_bytes_per_s=moved / seconds)
                    row |= dict(max_abs_error=error)
                    if name == OURS:
                        row["splits"], row["launches"] = chosen_step(k.shape, k.dtype, k.device)
                rows.append(row)
                if on_gpu:
                    torch.cuda.empty_cache()
            del q, k, v
            if on_gpu:
                torch.cuda.empty_cache()
    return pd.DataFrame(rows)
