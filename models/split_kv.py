"""Split-KV decode (Flash-Decoding, Dao et al. 2023): S chunks of the cache, their softmaxes merged by log-sum-exp."""

from __future__ import annotations

import torch
from torch.utils.flop_counter import register_flop_formula

from .attention import Attention, projections_flops
from .config import LayerConfig

MIN_SPLIT_KEYS = 256  # the shortest chunk; the cache's slots come in whole blocks of it
SPLIT_WAVES = 4  # batch × heads × S aims at this many per multiprocessor (a CPU: core)
TRIED_SPLITS = (0.5, 1, 2)


def kv_splits(device: torch.device | str, batch_heads: int, keys: int) -> int:
    """S: a power of two filling the device SPLIT_WAVES times over, no chunk under MIN_SPLIT_KEYS keys."""
    device = torch.device(device)
    if device.type == "cuda":
        units = torch.cuda.get_device_properties(device).multi_processor_count
    else:
        units = torch.get_num_threads()
    wanted = -(-SPLIT_WAVES * units // max(1, batch_heads))
    most = max(1, keys // MIN_SPLIT_KEYS)
    splits = 1
    while splits * 2 <= most and splits < wanted:
        splits *= 2
    return splits


def split_kv_attention(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, splits: int, seen: int | None = None
) -> torch.Tensor:
    """softmax(q Kᵀ / √e) V over the first `seen` of T keys; q (B, h, 1, e), keys and values (B, h, T, e)."""
    if splits <= 0:
        splits = kv_splits(keys.device, keys.shape[0] * keys.shape[1], keys.shape[2])
    e = q.shape[-1]
    total = keys.shape[2]
    chunk = max(1, total // max(1, splits))
    whole = (total // chunk) * chunk
    parts = [(keys[:, :, :whole].unflatten(2, (-1, chunk)), values[:, :, :whole].unflatten(2, (-1, chunk)), 0)]
    if whole < total:
        parts.append((keys[:, :, whole:].unsqueeze(2), values[:, :, whole:].unsqueeze(2), whole))
    query = q.unsqueeze(2) * e**-0.5
    maxima, sums, outputs = [], [], []
    for k_c, v_c, first in parts:
        scores = (k_c @ query.transpose(-2, -1)).squeeze(-1)
        if seen is not None and seen < first + scores.shape[2] * scores.shape[3]:
            scores.view(*scores.shape[:2], -1)[:, :, max(0, seen - first) :].fill_(float("-inf"))
        top = scores.amax(-1, keepdim=True)
        weights = scores.sub_(top.masked_fill(top == float("-inf"), 0.0)).exp_()
        maxima.append(top.unsqueeze(-1))
        sums.append(weights.sum(-1, keepdim=True).unsqueeze(-1))
        outputs.append(weights.unsqueeze(-2) @ v_c)
    top, total_sum, out = (torch.cat(t, 2) for t in (maxima, sums, outputs))
    scale = torch.exp(top - top.amax(2, keepdim=True))
    return (out * scale).sum(2) / (total_sum * scale).sum(2)


@torch.library.custom_op("seqbench::split_kv_attention", mutates_args=())
def split_kv_op(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, splits: int, seen: int) -> torch.Tensor:
    """One step's split-KV attention as one op (S 0: the device's): PyTorch's products anywhere, Triton on CUDA."""
    return split_kv_attention(q, keys, values, splits, seen)


try:
    from .split_kv_kernel import fastest_step, split_kv_triton
except ImportError:
    split_kv_triton = None

_CHOSEN: dict[tuple, tuple[int, bool]] = {}


def device_step(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, seen: int) -> tuple[int, bool]:
    """On CUDA: (S, one launch), the kernel's fastest of kv_splits' S times TRIED_SPLITS, timed once per cache shape."""
    key = (tuple(keys.shape), keys.dtype, keys.device)
    if key not in _CHOSEN:
        rule = kv_splits(keys.device, keys.shape[0] * keys.shape[1], keys.shape[2])
        most = max(1, keys.shape[2] // MIN_SPLIT_KEYS)
        _CHOSEN[key] = fastest_step(
            q, keys, values, seen, sorted({min(most, max(1, int(rule * f))) for f in TRIED_SPLITS})
        )
    return _CHOSEN[key]


def chosen_step(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str) -> tuple[int, int | None]:
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    found = _CHOSEN.get((tuple(shape), dtype, device))
    if found is None:
        return kv_splits(device, shape[0] * shape[1], shape[2]), None
    return found[0], 1 if found[1] else 2


if split_kv_triton is not None:

    @split_kv_op.register_kernel("cuda")
    def _split_kv_cuda(q, keys, values, splits: int, seen: int) -> torch.Tensor:
        if splits > 0:
            return split_kv_triton(q, keys, values, splits, seen)
        splits, one_launch = device_step(q, keys, values, seen)
        return split_kv_triton(q, keys, values, splits, seen, one_launch)


@register_flop_formula(torch.ops.seqbench.split_kv_attention)
def _split_kv_flops(q_shape, keys_shape, values_shape, *args, **kwargs) -> int:
    batch, heads, slots, width = keys_shape
    return 2 * (2 * batch * heads * slots * width)  # every slot scored (q·K) and mixed (p·V), as the products


def padded_slots(positions: int) -> int:
    return -(-positions // MIN_SPLIT_KEYS) * MIN_SPLIT_KEYS


class AttentionSplit(Attention):
    """The fused attention's forward; a decode step by split-KV over whole chunks, the slots past t masked."""

    splits: int | None = None  # S set by hand (bench.benchmarks.decode's sweep); None: the device's (split_kv_op)

    def _slots(self, capacity: int) -> int:
        return padded_slots(capacity)

    def _attend_cache(self, q, keys, values, seen: int):
        return split_kv_op(q, keys, values, self.splits or 0, seen)

    @classmethod
    def decode_flops(cls, batch: int, t: int, cfg: LayerConfig) -> int:
        """Every slot of a cache made for t + 1 positions scored (bench.point.decode_call)."""
        return projections_flops(batch, 1, cfg.d) + 2 * (2 * batch * padded_slots(t + 1) * cfg.d)
