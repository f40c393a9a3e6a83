"""The split-KV decode step (Flash-Decoding, Dao et al. 2023) in Triton: chunks' softmaxes, then their merge."""

from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl

TILE_ROWS = (32, 64, 128, 256)
CONFIGS = [
    triton.Config({"ROWS": rows}, num_warps=warps, num_stages=stages)
    for rows in TILE_ROWS
    for warps in (4, 8)
    for stages in (2, 3)
]
if os.environ.get("TRITON_INTERPRET") == "1":
    CONFIGS = CONFIGS[4:5]
CHUNK_MULTIPLE = max(TILE_ROWS)
DOT_ROWS: tl.constexpr = tl.constexpr(16)  # the fewest rows of a tl.dot operand


@triton.jit
def _chunk_kernel(q_ptr, k_ptr, v_ptr, acc_ptr, top_ptr, sum_ptr, count_ptr, out_ptr, seen, chunk, chunk_log2, heads,
                  scale, sq_b, sq_h, sk_b, sk_h, sk_t, sv_b, sv_h, sv_t, WIDTH: tl.constexpr, WIDTH_P2: tl.constexpr,
                  ON_CORES: tl.constexpr, MERGE: tl.constexpr, PARTS_P2: tl.constexpr, ROWS: tl.constexpr):  # fmt: skip
    """A chunk's softmax max, sum and mix (ON_CORES: tl.dot, the query on R rows); MERGE: the row's last merges."""
    row, part = tl.program_id(0), tl.program_id(1)
    b, h = (row // heads).to(tl.int64), (row % heads).to(tl.int64)  # a cache may pass 2**31 elements
    e = tl.arange(0, WIDTH_P2)
    in_width = e < WIDTH
    R: tl.constexpr = DOT_ROWS if ON_CORES else 1
    q = tl.load(q_ptr + b * sq_b + h * sq_h + e, mask=in_width, other=0.0)
    if ON_CORES:
        q_rows = tl.broadcast_to(q[None, :], (R, WIDTH_P2))
    else:
        q = q.to(tl.float32)
    top = tl.full((R,), float("-inf"), tl.float32)
    total = tl.zeros((R,), tl.float32)
    acc = tl.zeros((R, WIDTH_P2), tl.float32)
    first = part * chunk
    last = tl.minimum(first + chunk, seen)
    k_row = k_ptr + b * sk_b + h * sk_h
    v_row = v_ptr + b * sv_b + h * sv_h
    for start in tl.range(first, last, ROWS):
        rows = start + tl.arange(0, ROWS)
        live = rows < last
        where = live[:, None] & in_width[None, :]
        at = rows.to(tl.int64)[:, None]
        keys = tl.load(k_row + at * sk_t + e[None, :], mask=where, other=0.0)
        values = tl.load(v_row + at * sv_t + e[None, :], mask=where, other=0.0)
        if ON_CORES:
            scores = tl.dot(q_rows, tl.trans(keys))
        else:
            scores = tl.sum(keys.to(tl.float32) * q[None, :], 1)[None, :]
        scores = tl.where(live[None, :], scores * scale, float("-inf"))
        new_top = tl.maximum(top, tl.max(scores, 1))
        weights = tl.exp(scores - new_top[:, None])
        if ON_CORES:
            mixed = tl.dot(weights.to(values.dtype), values)
        else:
            mixed = tl.sum(tl.trans(weights) * values.to(tl.float32), 0)[None, :]
        kept = tl.exp(top - new_top)
        acc = acc * kept[:, None] + mixed
        total = total * kept + tl.sum(weights, 1)
        top = new_top
    out = row * tl.num_programs(1) + part
    r = tl.arange(0, R)
    first_row = r == 0
    tl.store(acc_ptr + out * WIDTH_P2 + e[None, :] + 0 * r[:, None], acc, mask=first_row[:, None])
    tl.store(top_ptr + out + 0 * r, top, mask=first_row)
    tl.store(sum_ptr + out + 0 * r, total, mask=first_row)
    if MERGE:  # stores, barrier, a release-acquire count (Triton's stream-K recipe); the last reads them from L2
        tl.debug_barrier()
        if tl.atomic_add(count_ptr + row, 1, sem="acq_rel") == tl.num_programs(1) - 1:
            _merge_row(acc_ptr, top_ptr, sum_ptr, out_ptr, row, tl.num_programs(1), WIDTH, WIDTH_P2, PARTS_P2)
            tl.atomic_xchg(count_ptr + row, 0, sem="relaxed")


_tuned_chunk_kernel = triton.autotune(
    configs=CONFIGS, key=["WIDTH", "chunk_log2"], do_bench=functools.partial(triton.testing.do_bench, warmup=5, rep=20)
)(_chunk_kernel)


@triton.jit
def _merge_row(
    acc_ptr, top_ptr, sum_ptr, out_ptr, row, parts, WIDTH: tl.constexpr, WIDTH_P2: tl.constexpr, PARTS_P2: tl.constexpr
):
    p = tl.arange(0, PARTS_P2)
    e = tl.arange(0, WIDTH_P2)
    in_parts = p < parts
    top = tl.load(top_ptr + row * parts + p, mask=in_parts, other=float("-inf"), cache_modifier=".cg")
    total = tl.load(sum_ptr + row * parts + p, mask=in_parts, other=0.0, cache_modifier=".cg")
    best = tl.max(top, 0)
    weight = tl.where(top > float("-inf"), tl.exp(top - best), 0.0)
    at = (row * parts + p)[:, None] * WIDTH_P2 + e[None, :]
    acc = tl.load(acc_ptr + at, mask=in_parts[:, None], other=0.0, cache_modifier=".cg")
    out = tl.sum(acc * weight[:, None], 0) / tl.sum(total * weight, 0)
    tl.store(out_ptr + row * WIDTH + e, out.to(out_ptr.dtype.element_ty), mask=e < WIDTH)


@triton.jit
def _merge_kernel(
    acc_ptr, top_ptr, sum_ptr, out_ptr, parts, WIDTH: tl.constexpr, WIDTH_P2: tl.constexpr, PARTS_P2: tl.constexpr
):
    _merge_row(acc_ptr, top_ptr, sum_ptr, out_ptr, tl.program_id(0), parts, WIDTH, WIDTH_P2, PARTS_P2)


_COUNTS: dict[torch.device, torch.Tensor] = {}
_TUNED: dict[tuple, triton.Config] = {}


def _counts(device: torch.device, rows: int) -> torch.Tensor:
    have = _COUNTS.get(device)
    if have is None or have.numel() < rows:
        have = _COUNTS[device] = torch.zeros(max(rows, 1024), dtype=torch.int32, device=device)
    return have


def split_kv_triton(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, splits: int, seen: int, one_launch: bool = False
) -> torch.Tensor:
    batch, heads, slots, width = keys.shape
    if q.stride(-1) != 1 or keys.stride(-1) != 1 or values.stride(-1) != 1:
        raise ValueError("the split-KV kernel reads rows of a head contiguous in memory (stride 1 in the last dim)")
    seen = max(1, min(seen, slots))
    chunk = triton.cdiv(triton.cdiv(seen, max(1, splits)), CHUNK_MULTIPLE) * CHUNK_MULTIPLE
    parts = triton.cdiv(seen, chunk)
    width_p2 = triton.next_power_of_2(width)
    acc = torch.empty(batch * heads, parts, width_p2, device=q.device, dtype=torch.float32)
    top, total = (torch.empty(batch * heads, parts, device=q.device, dtype=torch.float32) for _ in range(2))
    # float32 on the cores would round to TF32, and reaches the bound without them
    on_cores = keys.element_size() == 2 and width_p2 >= DOT_ROWS.value
    out = torch.empty(batch, heads, 1, width, device=q.device, dtype=q.dtype)
    args = (q, keys, values, acc, top, total, _counts(q.device, batch * heads), out, seen, chunk, chunk.bit_length())
    args += (heads, width**-0.5, q.stride(0), q.stride(1), *keys.stride()[:3], *values.stride()[:3])
    sizes = dict(WIDTH=width, WIDTH_P2=width_p2, ON_CORES=on_cores)
    tuned = (width, chunk.bit_length(), keys.dtype)
    if one_launch and tuned in _TUNED:
        config = _TUNED[tuned]
        _chunk_kernel[(batch * heads, parts)](
            *args, **sizes, MERGE=True, PARTS_P2=triton.next_power_of_2(parts), **config.all_kwargs()
        )
        return out
    _tuned_chunk_kernel[(batch * heads, parts)](*args, **sizes, MERGE=False, PARTS_P2=1)
    _TUNED[tuned] = _tuned_chunk_kernel.best_config
    parts_p2 = triton.next_power_of_2(parts)
    _merge_kernel[(batch * heads,)](acc, top, total, out, parts, WIDTH=width, WIDTH_P2=width_p2, PARTS_P2=parts_p2)
    return out


def _one_launch_agrees(q, keys, values, splits: int, seen: int) -> bool:
    queries = [q, -q, 2 * q, -q]
    want = [split_kv_triton(x, keys, values, splits, seen).float() for x in queries]
    try:
        got = [split_kv_triton(x, keys, values, splits, seen, True).float() for x in queries]
    except (triton.TritonError, RuntimeError):
        return False
    return all(float((g - w).abs().max()) <= 1e-2 * float(w.abs().max()) for g, w in zip(got, want))


def fastest_step(q, keys, values, seen: int, tried: list[int]) -> tuple[int, bool]:
    """The fastest (S, one launch) of the `tried` S in two launches, and in one where it agrees on changing queries."""
    variants = [(s, False) for s in tried] + [(s, True) for s in tried if _one_launch_agrees(q, keys, values, s, seen)]
    times = {
        v: triton.testing.do_bench(lambda v=v: split_kv_triton(q, keys, values, v[0], seen, v[1]), warmup=5, rep=20)
        for v in variants
    }
    return min(variants, key=times.__getitem__)
