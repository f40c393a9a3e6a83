"""The split-KV decode step as two Triton kernels (Flash-Decoding, Dao et al. 2023): each (batch·head, chunk) program
streams its keys and values once into a partial softmax; one program per batch·head merges them by log-sum-exp."""

from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl

# The tile's rows, warps and pipeline stages, chosen on the device at each new (width, dtype, chunk's power of two)
# by Triton's autotuner: the best differs between float32 and bfloat16 tiles and between GPUs.
TILE_ROWS = (32, 64, 128)
CONFIGS = [
    triton.Config({"ROWS": rows}, num_warps=warps, num_stages=stages)
    for rows in TILE_ROWS
    for warps in (4, 8)
    for stages in (2, 3, 4)
]
if os.environ.get("TRITON_INTERPRET") == "1":  # the interpreter (tests on a CPU) times nothing: one config
    CONFIGS = CONFIGS[3:4]
# A chunk is a whole number of the largest tile, so that every config's loop covers it.
CHUNK_MULTIPLE = max(TILE_ROWS)
DOT_ROWS: tl.constexpr = tl.constexpr(16)  # the fewest rows of a tl.dot operand


@triton.autotune(
    configs=CONFIGS,
    key=["WIDTH", "chunk_log2"],
    do_bench=functools.partial(triton.testing.do_bench, warmup=5, rep=20),
)
@triton.jit
def _chunk_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    acc_ptr,
    top_ptr,
    sum_ptr,
    seen,
    chunk,
    chunk_log2,
    heads,
    scale,
    sq_b,
    sq_h,
    sk_b,
    sk_h,
    sk_t,
    sv_b,
    sv_h,
    sv_t,
    WIDTH: tl.constexpr,
    WIDTH_P2: tl.constexpr,
    ROWS: tl.constexpr,
):
    row, part = tl.program_id(0), tl.program_id(1)
    b, h = (row // heads).to(tl.int64), (row % heads).to(tl.int64)  # a cache may pass 2**31 elements
    e = tl.arange(0, WIDTH_P2)
    in_width = e < WIDTH
    q = tl.load(q_ptr + b * sq_b + h * sq_h + e, mask=in_width, other=0.0).to(tl.float32) * scale
    top = tl.full((), float("-inf"), tl.float32)
    total = tl.zeros((), tl.float32)
    acc = tl.zeros((WIDTH_P2,), tl.float32)
    first = part * chunk
    last = tl.minimum(first + chunk, seen)  # slots past `seen` are never read
    k_row = k_ptr + b * sk_b + h * sk_h
    v_row = v_ptr + b * sv_b + h * sv_h
    for start in tl.range(first, last, ROWS):
        rows = start + tl.arange(0, ROWS)
        live = rows < last
        where = live[:, None] & in_width[None, :]
        at = rows.to(tl.int64)[:, None]
        keys = tl.load(k_row + at * sk_t + e[None, :], mask=where, other=0.0)
        values = tl.load(v_row + at * sv_t + e[None, :], mask=where, other=0.0)
        scores = tl.where(live, tl.sum(keys.to(tl.float32) * q[None, :], 1), float("-inf"))
        new_top = tl.maximum(top, tl.max(scores, 0))
        weights = tl.exp(scores - new_top)  # new_top is finite: a started block has a live row
        kept = tl.exp(top - new_top)
        acc = acc * kept + tl.sum(weights[:, None] * values.to(tl.float32), 0)
        total = total * kept + tl.sum(weights, 0)
        top = new_top
    out = row * tl.num_programs(1) + part
    tl.store(acc_ptr + out * WIDTH_P2 + e, acc)
    tl.store(top_ptr + out, top)
    tl.store(sum_ptr + out, total)


@triton.autotune(
    configs=CONFIGS,
    key=["WIDTH", "chunk_log2"],
    do_bench=functools.partial(triton.testing.do_bench, warmup=5, rep=20),
)
@triton.jit
def _chunk_dot_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    acc_ptr,
    top_ptr,
    sum_ptr,
    seen,
    chunk,
    chunk_log2,
    heads,
    scale,
    sq_b,
    sq_h,
    sk_b,
    sk_h,
    sk_t,
    sv_b,
    sv_h,
    sv_t,
    WIDTH: tl.constexpr,
    WIDTH_P2: tl.constexpr,
    ROWS: tl.constexpr,
):
    """As _chunk_kernel, its two products on the tensor cores (16-bit tiles): the query repeated on DOT_ROWS rows,
    the smallest a tl.dot takes, so that q·Kᵀ and p·V need no reduction across threads; row 0 is stored."""
    row, part = tl.program_id(0), tl.program_id(1)
    b, h = (row // heads).to(tl.int64), (row % heads).to(tl.int64)
    e = tl.arange(0, WIDTH_P2)
    r = tl.arange(0, DOT_ROWS)
    in_width = e < WIDTH
    q = tl.load(q_ptr + b * sq_b + h * sq_h + e, mask=in_width, other=0.0)
    q = tl.broadcast_to(q[None, :], (DOT_ROWS, WIDTH_P2))
    top = tl.full((DOT_ROWS,), float("-inf"), tl.float32)
    total = tl.zeros((DOT_ROWS,), tl.float32)
    acc = tl.zeros((DOT_ROWS, WIDTH_P2), tl.float32)
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
        scores = tl.where(live[None, :], tl.dot(q, tl.trans(keys)) * scale, float("-inf"))
        new_top = tl.maximum(top, tl.max(scores, 1))
        weights = tl.exp(scores - new_top[:, None])
        kept = tl.exp(top - new_top)
        acc = acc * kept[:, None] + tl.dot(weights.to(values.dtype), values)
        total = total * kept + tl.sum(weights, 1)
        top = new_top
    out = row * tl.num_programs(1) + part
    first_row = r == 0
    tl.store(acc_ptr + out * WIDTH_P2 + e[None, :] + 0 * r[:, None], acc, mask=first_row[:, None])
    tl.store(top_ptr + out + 0 * r, top, mask=first_row)
    tl.store(sum_ptr + out + 0 * r, total, mask=first_row)


@triton.jit
def _merge_kernel(acc_ptr, top_ptr, sum_ptr, out_ptr, parts, WIDTH: tl.constexpr, WIDTH_P2: tl.constexpr,
                  PARTS_P2: tl.constexpr):  # fmt: skip
    row = tl.program_id(0)
    p = tl.arange(0, PARTS_P2)
    e = tl.arange(0, WIDTH_P2)
    in_parts = p < parts
    top = tl.load(top_ptr + row * parts + p, mask=in_parts, other=float("-inf"))
    total = tl.load(sum_ptr + row * parts + p, mask=in_parts, other=0.0)
    best = tl.max(top, 0)
    weight = tl.where(top > float("-inf"), tl.exp(top - best), 0.0)  # a chunk wholly past `seen` adds nothing
    acc = tl.load(acc_ptr + (row * parts + p)[:, None] * WIDTH_P2 + e[None, :], mask=in_parts[:, None], other=0.0)
    out = tl.sum(acc * weight[:, None], 0) / tl.sum(total * weight, 0)
    tl.store(out_ptr + row * WIDTH + e, out.to(out_ptr.dtype.element_ty), mask=e < WIDTH)


def split_kv_triton(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, splits: int, seen: int) -> torch.Tensor:
    """As models.split_kv.split_kv_attention: S chunks' partial softmaxes, then their merge, two launches in all."""
    batch, heads, slots, width = keys.shape
    if q.stride(-1) != 1 or keys.stride(-1) != 1 or values.stride(-1) != 1:
        raise ValueError("the split-KV kernel reads rows of a head contiguous in memory (stride 1 in the last dim)")
    seen = max(1, min(seen, slots))
    chunk = triton.cdiv(triton.cdiv(seen, max(1, splits)), CHUNK_MULTIPLE) * CHUNK_MULTIPLE
    parts = triton.cdiv(seen, chunk)
    width_p2 = triton.next_power_of_2(width)
    acc = torch.empty(batch * heads, parts, width_p2, device=q.device, dtype=torch.float32)
    top, total = (torch.empty(batch * heads, parts, device=q.device, dtype=torch.float32) for _ in range(2))
    # 16-bit tiles on the tensor cores: float32 ones there would round to TF32, and stream at the bound without them
    on_cores = keys.element_size() == 2 and width_p2 >= DOT_ROWS
    (_chunk_dot_kernel if on_cores else _chunk_kernel)[(batch * heads, parts)](
        q,
        keys,
        values,
        acc,
        top,
        total,
        seen,
        chunk,
        chunk.bit_length(),
        heads,
        width**-0.5,
        q.stride(0),
        q.stride(1),
        keys.stride(0),
        keys.stride(1),
        keys.stride(2),
        values.stride(0),
        values.stride(1),
        values.stride(2),
        WIDTH=width,
        WIDTH_P2=width_p2,
    )
    out = torch.empty(batch, heads, 1, width, device=q.device, dtype=q.dtype)
    _merge_kernel[(batch * heads,)](
        acc, top, total, out, parts, WIDTH=width, WIDTH_P2=width_p2, PARTS_P2=triton.next_power_of_2(parts)
    )
    return out
