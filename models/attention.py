"""Multi-head self-attention: fused, explicit, and restricted to a window of r (Vaswani et al. 2017, Table 1), with the
four d×d projections: 8·b·n·d² + 4·b·n²·d FLOPs. All share `SelfAttention`'s projections: equal seeds, equal weights."""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .config import CONSTANT_PATH, DecodeRow, LayerConfig, PathRule, Table1Row, spill_bytes

KV_CACHE_SOURCE = "Vaswani et al. 2017 (decoder, key/value cache)"


CPU_FLASH_KEY_BLOCK = 512  # FlashAttentionKernel.cpp: keys in blocks of 512, queries of 32, 64 or 256 by length


def cpu_flash_causal_pairs(q_len: int, kv_len: int) -> int:
    """(query, key) pairs the CPU flash kernel computes with is_causal: whole key blocks to a query block's last."""
    q_block = 256 if q_len >= 768 else 64 if q_len >= 192 else 32
    key_block = min(CPU_FLASH_KEY_BLOCK, kv_len)
    pairs = 0
    for start in range(0, q_len, q_block):
        queries = min(q_block, q_len - start)
        pairs += queries * min(-(-min(start + queries, kv_len) // key_block) * key_block, kv_len)
    return pairs


def left_keys(cfg: LayerConfig) -> int:
    return cfg.window - 1 if cfg.causal else cfg.window // 2


def projections_flops(batch: int, n: int, d: int) -> int:
    return 4 * 2 * batch * n * d * d


def _softmax_mix(q, k, v, masked: torch.Tensor | None = None) -> torch.Tensor:
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if masked is not None:
        scores = scores.masked_fill(masked, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def _softmax_useful_flops(batch: int, n: int, cfg: LayerConfig) -> int | None:
    if not cfg.causal:
        return None
    return projections_flops(batch, n, cfg.d) + 2 * (2 * batch * (n * (n + 1) // 2) * cfg.d)


def _local_layers(n: int, k: int, window: int) -> int | None:
    # Query i sees keys i - r//2 .. i - r//2 + r - 1, so key j reaches queries up to j + r//2.
    return None if window // 2 == 0 else math.ceil((n - 1) / (window // 2))


class SelfAttention(nn.Module):
    uses: tuple[str, ...] = ("heads",)
    # From n = 8d on, the table's 4·n²·d is at least 80 % of the counted FLOPs (8·n·d² + 4·n²·d).
    table1 = Table1Row(lambda n, d, k, r: n**2 * d, "O(n²·d)", "O(1)", "O(1)", fit_n_over_d=8)
    decode = DecodeRow(
        lambda t, d, k, r, dil: t * d,
        "O(t·d)",
        lambda t, d, k, r, dil: t * d,
        "O(t·d)",
        fit_t_over_d=8,
        source=KV_CACHE_SOURCE,
    )
    path = CONSTANT_PATH

    @staticmethod
    def check(cfg: LayerConfig, n: int | None = None) -> None:
        if cfg.heads < 1 or cfg.d % cfg.heads:
            raise ValueError(f"heads={cfg.heads}: d={cfg.d} must be divisible by the number of heads")

    def __init__(self, cfg: LayerConfig):
        super().__init__()
        self.check(cfg)
        self.cfg = cfg
        self.heads = cfg.heads
        self.d_head = cfg.d // cfg.heads
        self.q_proj = nn.Linear(cfg.d, cfg.d)
        self.k_proj = nn.Linear(cfg.d, cfg.d)
        self.v_proj = nn.Linear(cfg.d, cfg.d)
        self.out_proj = nn.Linear(cfg.d, cfg.d)

    def _split(self, t: torch.Tensor) -> torch.Tensor:
        b, n, _ = t.shape
        return t.view(b, n, self.heads, self.d_head).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = (self._split(p(x)) for p in (self.q_proj, self.k_proj, self.v_proj))
        mixed = self._mix(q, k, v)
        return self.out_proj(mixed.transpose(1, 2).reshape(b, n, d))

    def _mix(self, q, k, v):  # pragma: no cover - each subclass defines it
        raise NotImplementedError

    _attend = staticmethod(F.scaled_dot_product_attention)

    def _first_kept(self, t: int) -> int:
        return 0

    def prefill(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x = x[:, self._first_kept(x.shape[1]) :]
        return (self._split(self.k_proj(x)), self._split(self.v_proj(x)))

    def _slots(self, capacity: int) -> int:  # a restricted layer keeps a ring of its window
        return capacity

    def cache(self, state: tuple[torch.Tensor, ...], t: int, capacity: int) -> tuple[torch.Tensor, ...]:
        """Keys and values allocated once (a static cache, as gpt-fast's), position p in slot p mod slots."""
        if capacity <= t:
            raise ValueError(f"a cache for {capacity} positions has no room for position t = {t}")
        slots = self._slots(capacity)
        kept = min(state[0].shape[2], slots)
        start = (t - kept) % slots
        first = min(kept, slots - start)  # to the ring's end, then from 0: slices (indexed, 1 GB took 2 s more)
        buffers = tuple(part.new_empty(*part.shape[:2], slots, part.shape[3]) for part in state)
        for buffer, part in zip(buffers, state):
            part = part[:, :, part.shape[2] - kept :]
            buffer[:, :, start : start + first], buffer[:, :, : kept - first] = part[:, :, :first], part[:, :, first:]
            buffer[:, :, kept - first : start], buffer[:, :, start + first :] = 0, 0
        return buffers

    def step(self, x_t: torch.Tensor, cache: tuple[torch.Tensor, ...], t: int) -> torch.Tensor:
        """The output at position t, its key and value written in place into their slot: no copy of the cache."""
        q, k, v = (self._split(p(x_t)) for p in (self.q_proj, self.k_proj, self.v_proj))
        keys, values = cache
        keys[:, :, t % keys.shape[2]].copy_(k[:, :, 0])
        values[:, :, t % keys.shape[2]].copy_(v[:, :, 0])
        mixed = self._attend_cache(q, keys, values, min(t + 1, keys.shape[2]))
        return self.out_proj(mixed.transpose(1, 2).reshape(x_t.shape))

    def _attend_cache(self, q, keys, values, seen: int):
        return self._attend(q, keys[:, :, :seen], values[:, :, :seen])

    @classmethod
    def _keys_seen(cls, t: int, cfg: LayerConfig) -> int:
        return t + 1

    @classmethod
    def decode_flops(cls, batch: int, t: int, cfg: LayerConfig) -> int:
        return projections_flops(batch, 1, cfg.d) + 2 * (2 * batch * cls._keys_seen(t, cfg) * cfg.d)

    @classmethod
    def decode_state_bytes(cls, batch: int, t: int, cfg: LayerConfig, elem_bytes: int) -> int:
        return 2 * batch * (cls._keys_seen(t, cfg) - 1) * cfg.d * elem_bytes

    @staticmethod
    def flops(batch: int, n: int, cfg: LayerConfig) -> int:
        scores_and_mix = 2 * (2 * batch * n * n * cfg.d)  # QKᵀ and PV: n² d MACs each over all heads
        return projections_flops(batch, n, cfg.d) + scores_and_mix

    @classmethod
    def min_bytes(cls, batch: int, n: int, cfg: LayerConfig, elem_bytes: int, cache_bytes: int | None = None) -> int:
        # q, k, v and the mixed heads are stored between the products; head splits and transposes are layout.
        d = cfg.d
        compulsory = (2 * batch * n * d + 4 * (d * d + d)) * elem_bytes
        between = 4 * spill_bytes(batch * n * d * elem_bytes, cache_bytes)
        return compulsory + between + cls._mix_min_bytes(batch, n, cfg, elem_bytes, cache_bytes)


class Attention(SelfAttention):
    """Scores and mixing by F.scaled_dot_product_attention: a fused kernel never stores the n×n matrix whole."""

    useful_flops = staticmethod(_softmax_useful_flops)

    def _mix(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=self.cfg.causal)

    @classmethod
    def flops_on(cls, device: str, batch: int, n: int, cfg: LayerConfig) -> int:
        """As the kernel runs: the CPU's causal one skips key blocks (a GPU's counted as torch's formula, all pairs)."""
        if not cfg.causal or str(device).split(":")[0] != "cpu":
            return cls.flops(batch, n, cfg)
        return projections_flops(batch, n, cfg.d) + 2 * (2 * batch * cpu_flash_causal_pairs(n, n) * cfg.d)

    @classmethod
    def _mix_min_bytes(cls, batch, n, cfg, elem_bytes, cache_bytes):
        return 0  # the kernel keeps its tiles of scores on chip

    # Flash attention's backward recomputes Q·Kᵀ, then forms dV = Pᵀ·dO, dP = dO·Vᵀ, dQ = dS·K, dK = dSᵀ·Q.
    SCORE_PRODUCTS_BACKWARD = 5

    @classmethod
    def backward_flops(cls, batch: int, n: int, cfg: LayerConfig, device: str) -> int:
        projections = 2 * 4 * 2 * batch * n * cfg.d * cfg.d
        scores = cls.SCORE_PRODUCTS_BACKWARD * 2 * batch * n * n * cfg.d
        return projections + scores

    @staticmethod
    def activation_bytes(batch: int, n: int, cfg: LayerConfig, elem_bytes: int) -> int:
        # Q, K, V, the mixed heads and the output; fused kernels tile the scores.
        return 5 * batch * n * cfg.d * elem_bytes


class AttentionMath(SelfAttention):
    """The same computation written out: softmax(Q Kᵀ / sqrt(d_head)) V, materialising the n×n scores."""

    useful_flops = staticmethod(_softmax_useful_flops)
    _attend = staticmethod(_softmax_mix)

    def _mix(self, q, k, v):
        n = q.shape[2]
        masked = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1) if self.cfg.causal else None
        return _softmax_mix(q, k, v, masked)

    @classmethod
    def _mix_min_bytes(cls, batch, n, cfg, elem_bytes, cache_bytes):
        return 2 * spill_bytes(batch * cfg.heads * n * n * elem_bytes, cache_bytes)

    @staticmethod
    def activation_bytes(batch: int, n: int, cfg: LayerConfig, elem_bytes: int) -> int:
        # Scores and their softmax, n×n per head, plus O(n·d) as above.
        return (5 * batch * n * cfg.d + 2 * batch * cfg.heads * n * n) * elem_bytes


@dataclass(frozen=True)
class Blocks:
    """How `AttentionLocal` tiles n queries: `count` blocks of w queries, block β scoring keys from β·w − offset on."""

    queries: int  # w, queries per block
    count: int
    keys: int  # s, the keys of one block's span
    offset: int

    @property
    def padded_n(self) -> int:
        return self.count * self.queries

    @property
    def pairs(self) -> int:
        return self.padded_n * self.keys


def window_pairs(n: int, window: int, left: int | None = None) -> int:
    """(query, key) pairs inside the window and the sequence: n·r less the keys lost past either end."""
    left = window // 2 if left is None else left
    right = window - 1 - left
    return n * window - left * (left + 1) // 2 - right * (right + 1) // 2


def _parts(total: int, step: int) -> list[tuple[int, int]]:
    """`range(0, total, step)`'s slices as (size, how many): the whole ones, then the rest."""
    step = min(step, total)
    return [(step, total // step)] + ([(total % step, 1)] if total % step else [])


MASKS_KEPT = 4


class AttentionLocal(SelfAttention):
    """Query i attends to the r keys i - r//2 <= j <= i - r//2 + r - 1 (outside 0..n-1 masked), in blocks of w
    queries over overlapping key spans (Longformer's chunks): 8·b·n·d² + 4·b·n_w·(w + r − 1)·d FLOPs (docs/method.md)."""

    uses = ("heads", "window")
    table1 = Table1Row(lambda n, d, k, r: r * n * d, "O(r·n·d)", "O(1)", "O(n/r)", sizes=("window",))
    decode = DecodeRow(
        lambda t, d, k, r, dil: r * d,
        "O(r·d)",
        lambda t, d, k, r, dil: r * d,
        "O(r·d)",
        ("window",),
        source=f"{KV_CACHE_SOURCE} restricted to r",
    )
    path = PathRule(_local_layers, "⌈(n−1)/(r//2)⌉")
    # Queries per block, w: larger blocks make larger products, smaller ones compute fewer masked pairs.
    BLOCK = 32
    # Bytes of scores formed at a time, so that masking, softmax and the product with V find them in the cache.
    CHUNK_BYTES = 2**22

    @staticmethod
    def check(cfg: LayerConfig, n: int | None = None) -> None:
        SelfAttention.check(cfg)
        if cfg.window is None or cfg.window < 1:
            raise ValueError(f"window={cfg.window}: restricted attention needs a window r with 1 <= r <= n")
        if n is not None and cfg.window > n and not cfg.causal:
            raise ValueError(f"window={cfg.window}: must be at most n={n} (the causal form takes any)")

    def __init__(self, cfg: LayerConfig):
        super().__init__(cfg)
        self.window = cfg.window
        self.left = left_keys(cfg)  # keys before the query; window - 1 - left after it
        self._masked_cache: dict[tuple[int, Blocks, torch.device], torch.Tensor] = {}

    @classmethod
    def blocks(cls, n: int, window: int, left: int | None = None) -> Blocks:
        """Blocks of BLOCK queries, spans of BLOCK + r − 1 keys; one dense block where that is no cheaper."""
        w = min(cls.BLOCK, n)
        count = -(-n // w)
        if count * w * (w + window - 1) >= n * n:
            return Blocks(queries=n, count=1, keys=n, offset=0)
        return Blocks(queries=w, count=count, keys=w + window - 1, offset=window // 2 if left is None else left)

    @classmethod
    def chunk(cls, g: Blocks, elem_bytes: int, device_type: str = "cpu") -> tuple[int, int]:
        """(heads, blocks of each head) scored at a time, within CHUNK_BYTES; on a GPU all at once."""
        if device_type != "cpu":
            return sys.maxsize, g.count
        per_chunk = max(1, cls.CHUNK_BYTES // (g.queries * g.keys * elem_bytes))
        return (per_chunk // g.count, g.count) if per_chunk >= g.count else (1, per_chunk)

    def block_mask(self, n: int, device=None) -> torch.Tensor:
        """(count, w, s): True where query β·w + t may see key β·w − offset + u; padding queries see all."""
        g = self.blocks(n, self.window, self.left)
        starts = torch.arange(g.count, device=device) * g.queries
        t = torch.arange(g.queries, device=device)
        u = torch.arange(g.keys, device=device)
        offset = u[None, :] - g.offset - t[:, None]  # (w, s): key − query, the same in every block
        in_window = (offset >= -self.left) & (offset <= self.window - 1 - self.left)
        key = starts[:, None] - g.offset + u
        in_sequence = (key >= 0) & (key < n)
        padding_query = (starts[:, None] + t) >= n
        return (in_window[None] & in_sequence[:, None, :]) | padding_query[:, :, None]

    def _masked(self, n: int, g: Blocks, device) -> torch.Tensor:
        """~block_mask(n), kept for the last MASKS_KEPT (n, tiling, device): forty small operators a call less."""
        key = (n, g, torch.device(device))
        if key not in self._masked_cache:
            if len(self._masked_cache) >= MASKS_KEPT:
                self._masked_cache.pop(next(iter(self._masked_cache)))
            self._masked_cache[key] = ~self.block_mask(n, device)
        return self._masked_cache[key]

    @staticmethod
    def _padded_rows(t: torch.Tensor, g: Blocks) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, h, n, d_head) -> (one zero-padded copy of t's rows, all heads in a row; the view of t in it)."""
        b, h, n, d_head = t.shape
        heads_rows = b * h * g.padded_n
        rows = t.new_empty(heads_rows + g.keys - g.queries, d_head)
        heads = rows[g.offset : g.offset + heads_rows].view(b, h, g.padded_n, d_head)
        own = heads[:, :, :n]
        own.copy_(t)
        # A masked key must be finite: 0·inf and 0·NaN are NaN.
        rows[: g.offset].zero_()
        rows[g.offset + heads_rows :].zero_()
        heads[:, :, n:].zero_()
        return rows, own

    @staticmethod
    def _spans(rows: torch.Tensor, g: Blocks) -> torch.Tensor:
        """(B·h·count, s, d_head): every block's span, overlapping views of `rows`."""
        return rows.unfold(0, g.keys, g.queries).transpose(1, 2)

    def _mix(self, q, k, v):
        b, h, n, d_head = q.shape
        g = self.blocks(n, self.window, self.left)
        padded = F.pad(q, (0, 0, 0, g.padded_n - n)) if g.padded_n > n else q
        queries = padded.reshape(b * h * g.count, g.queries, d_head)  # (B·h·count, w, d_head): one copy
        k_rows, k_own = self._padded_rows(k, g)
        v_rows, v_own = self._padded_rows(v, g)
        # 0 × NaN is NaN: a non-finite value row is zeroed, its key made NaN (`poison`; docs/method.md).
        v_seen = v_own.detach()
        poison = v_seen.amax(-1, keepdim=True) * 0 + v_seen.amin(-1, keepdim=True) * 0
        k_own.add_(poison)
        v_rows.nan_to_num_(0.0, 0.0, 0.0)
        keys, values = self._spans(k_rows, g), self._spans(v_rows, g)
        masked = self._masked(n, g, q.device)
        heads_per, blocks_per = self.chunk(g, q.element_size(), q.device.type)
        queries, keys, values = (t.unflatten(0, (b * h, g.count)) for t in (queries, keys, values))
        mixed = []
        for head in range(0, b * h, heads_per):
            for block in range(0, g.count, blocks_per):
                chunk = (slice(head, head + heads_per), slice(block, block + blocks_per))
                q_c, k_c, v_c = (t[chunk].flatten(0, 1) for t in (queries, keys, values))
                # baddbmm with beta = 0 ignores its first argument; alpha scales inside the product.
                scores = torch.baddbmm(q.new_zeros(()), q_c, k_c.transpose(1, 2), beta=0, alpha=d_head**-0.5)
                chunk_masked = masked[chunk[1]]
                scores.view(-1, *chunk_masked.shape).masked_fill_(chunk_masked, float("-inf"))
                mixed.append(torch.bmm(torch.softmax(scores, dim=-1), v_c))
        mixed = torch.cat(mixed) if len(mixed) > 1 else mixed[0]
        return mixed.view(b, h, g.padded_n, d_head)[:, :, :n]

    def dense_mask(self, n: int, device=None) -> torch.Tensor:
        """(n, n): True where query i may see key j, for dense attention."""
        offset = torch.arange(n, device=device)[None, :] - torch.arange(n, device=device)[:, None]  # j - i
        return (offset >= -self.left) & (offset <= self.window - 1 - self.left)

    def _first_kept(self, t: int) -> int:
        return max(0, t - (self.window - 1))

    def _slots(self, capacity: int) -> int:
        return min(capacity, self.window)

    @classmethod
    def _keys_seen(cls, t: int, cfg: LayerConfig) -> int:
        return min(t + 1, cfg.window)

    @classmethod
    def flops(cls, batch: int, n: int, cfg: LayerConfig) -> int:
        """The projections and every computed pair of every block, masked ones included."""
        scores_and_mix = 2 * (2 * batch * cls.blocks(n, cfg.window).pairs * cfg.d)
        return projections_flops(batch, n, cfg.d) + scores_and_mix

    @staticmethod
    def useful_flops(batch: int, n: int, cfg: LayerConfig) -> int:
        """The projections and the pairs inside the window and the sequence alone."""
        pairs = window_pairs(n, cfg.window, left_keys(cfg))
        return projections_flops(batch, n, cfg.d) + 2 * (2 * batch * pairs * cfg.d)

    @classmethod
    def _mix_min_bytes(cls, batch, n, cfg, elem_bytes, cache_bytes):
        # Each of the CPU's chunks' scores and softmax (a GPU's one chunk of all is larger: a looser bound there).
        g = cls.blocks(n, cfg.window, left_keys(cfg))
        heads_per, blocks_per = cls.chunk(g, elem_bytes)
        total = 0
        for heads, head_chunks in _parts(batch * cfg.heads, heads_per):
            for blocks, block_chunks in _parts(g.count, blocks_per):
                chunk_bytes = heads * blocks * g.queries * g.keys * elem_bytes
                total += head_chunks * block_chunks * 2 * spill_bytes(chunk_bytes, cache_bytes)
        return total

    @classmethod
    def useful_fraction(cls, n: int, cfg: LayerConfig) -> float:
        """The share of the computed pairs inside the window, about r / (w + r − 1)."""
        return window_pairs(n, cfg.window, left_keys(cfg)) / cls.blocks(n, cfg.window).pairs

    @classmethod
    def activation_bytes(cls, batch: int, n: int, cfg: LayerConfig, elem_bytes: int) -> int:
        # Q, K, V; padded queries, K, V, chunks' outputs, their concatenation; one CPU chunk's scores and softmax.
        g = cls.blocks(n, cfg.window, left_keys(cfg))
        heads, blocks = cls.chunk(g, elem_bytes)
        chunk_pairs = min(heads, batch * cfg.heads) * blocks * g.queries * g.keys
        return (3 * batch * n * cfg.d + 5 * batch * g.padded_n * cfg.d + 2 * chunk_pairs) * elem_bytes


class AdditiveAttention(nn.Module):
    """Additive (Bahdanau) attention, vᵀ tanh(W_q q_i + W_k k_j), as the textbook writes it (for the claims)."""

    def __init__(self, d: int, d_att: int):
        super().__init__()
        self.w_q = nn.Linear(d, d_att, bias=False)
        self.w_k = nn.Linear(d, d_att, bias=False)
        self.v = nn.Parameter(torch.randn(d_att) / math.sqrt(d_att))

    def scores(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        features = torch.tanh(self.w_q(q)[:, :, None, :] + self.w_k(k)[:, None, :, :])
        return torch.einsum("bijd,d->bij", features, self.v)

    def forward(self, q, k, v):
        return torch.softmax(self.scores(q, k), dim=-1) @ v

    @staticmethod
    def flops(batch: int, n: int, d: int, d_att: int, d_v: int) -> int:
        return 2 * (2 * batch * n * d * d_att) + 2 * batch * n * n * d_att + 2 * batch * n * n * d_v
