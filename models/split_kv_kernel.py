"""The split-KV decode step as one Triton kernel: each (batch·head, chunk) block streams its keys and values once."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

ROWS_PER_BLOCK = 64


@triton.jit(do_not_specialize=["seen", "chunk"])
def _chunk_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    acc_ptr,
    top_ptr,
    sum_ptr,
    seen,
    chunk,
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
    b, h = row // heads, row % heads
    e = tl.arange(0, WIDTH_P2)
    in_width = e < WIDTH
    q = tl.load(q_ptr + b * sq_b + h * sq_h + e, mask=in_width, other=0.0).to(tl.float32) * scale
    top = tl.full((), float("-inf"), tl.float32)
    total = tl.zeros((), tl.float32)
    acc = tl.zeros((WIDTH_P2,), tl.float32)
    first = part * chunk
    for block in range(0, chunk // ROWS):
        rows = first + block * ROWS + tl.arange(0, ROWS)
        live = rows < seen
        where = live[:, None] & in_width[None, :]
        keys = tl.load(k_ptr + b * sk_b + h * sk_h + rows[:, None] * sk_t + e[None, :], mask=where, other=0.0)
        values = tl.load(v_ptr + b * sv_b + h * sv_h + rows[:, None] * sv_t + e[None, :], mask=where, other=0.0)
        scores = tl.where(live, tl.sum(keys.to(tl.float32) * q[None, :], 1), float("-inf"))
        new_top = tl.maximum(top, tl.max(scores, 0))
        safe = tl.where(new_top == float("-inf"), 0.0, new_top)  # a block wholly masked adds nothing
        weights = tl.exp(scores - safe)
        kept = tl.exp(top - safe)
        acc = acc * kept + tl.sum(weights[:, None] * values.to(tl.float32), 0)
        total = total * kept + tl.sum(weights, 0)
        top = new_top
    out = row * tl.num_programs(1) + part
    tl.store(acc_ptr + out * WIDTH_P2 + e, acc)
    tl.store(top_ptr + out, top)
    tl.store(sum_ptr + out, total)


def split_kv_triton(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, splits: int, seen: int) -> torch.Tensor:
    """As models.split_kv.split_kv_attention; each chunk's partial softmax in the kernel, merged by log-sum-exp."""
    batch, heads, slots, width = keys.shape
    if q.stride(-1) != 1 or keys.stride(-1) != 1 or values.stride(-1) != 1:
        raise ValueError("the split-KV kernel reads rows of a head contiguous in memory (stride 1 in the last dim)")
    chunk = triton.cdiv(triton.cdiv(slots, splits), ROWS_PER_BLOCK) * ROWS_PER_BLOCK
    parts = triton.cdiv(slots, chunk)
    width_p2 = triton.next_power_of_2(width)
    acc = torch.empty(batch * heads, parts, width_p2, device=q.device, dtype=torch.float32)
    top, total = (torch.empty(batch * heads, parts, device=q.device, dtype=torch.float32) for _ in range(2))
    _chunk_kernel[(batch * heads, parts)](
        q,
        keys,
        values,
        acc,
        top,
        total,
        min(seen, slots),
        chunk,
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
        ROWS=ROWS_PER_BLOCK,
    )
    weight = torch.exp(top - top.amax(1, keepdim=True))
    out = (acc[..., :width] * weight[..., None]).sum(1) / (total * weight).sum(1, keepdim=True)
    return out.view(batch, heads, 1, width).to(q.dtype)
