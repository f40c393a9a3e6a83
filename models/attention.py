"""Multi-head self-attention: fused, explicit, and restricted to a window of r positions.

Cost (Vaswani et al. 2017, Table 1): self-attention O(n²·d) per layer, O(1) sequential operations, O(1)
maximum path length; restricted to a neighbourhood of r positions O(r·n·d), path length O(n/r).
The full count here adds the four d×d projections (Q, K, V, output), O(n·d²), which the table's row
leaves out: FLOPs = 8·b·n·d² (projections) + 4·b·n²·d (Q·Kᵀ and weights·V), 2 per multiply-accumulate,
biases and the softmax excluded (torch.utils.flop_counter's convention). Restricted, as computed in blocks of w
queries (`AttentionLocal`): 8·b·n·d² + 4·b·n_w·(w + r − 1)·d, n_w = n rounded up to whole blocks, of which the
window's own pairs, about 4·b·n·r·d, are the useful part (`AttentionLocal.useful_flops`).

All three share the projections, so `attention` and `attention_math` built from the same seed have the
same weights and tests prove them equal.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .config import CONSTANT_PATH, LayerConfig, PathRule, Table1Row


def _local_layers(n: int, k: int, window: int) -> int | None:
    # Query i sees keys i - r//2 .. i - r//2 + r - 1, so key j reaches queries up to j + r//2.
    return None if window // 2 == 0 else math.ceil((n - 1) / (window // 2))


class _SelfAttention(nn.Module):
    uses: tuple[str, ...] = ("heads",)
    # From n = 8d on, the table's 4·n²·d is at least 4x the projections' 8·n·d²: 80 % of the counted FLOPs.
    table1 = Table1Row(lambda n, d, k, r: n**2 * d, "O(n²·d)", "O(1)", "O(1)", fit_n_over_d=8)
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
        return t.view(b, n, self.heads, self.d_head).transpose(1, 2)  # (B, h, n, d_head)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = (self._split(p(x)) for p in (self.q_proj, self.k_proj, self.v_proj))
        mixed = self._mix(q, k, v)  # (B, h, n, d_head)
        return self.out_proj(mixed.transpose(1, 2).reshape(b, n, d))  # (B, n, d)

    def _mix(self, q, k, v):  # pragma: no cover - each subclass defines it
        raise NotImplementedError

    @staticmethod
    def flops(batch: int, n: int, cfg: LayerConfig) -> int:
        projections = 4 * 2 * batch * n * cfg.d * cfg.d
        scores_and_mix = 2 * (2 * batch * n * n * cfg.d)  # QKᵀ and PV: n² d MACs each over all heads
        return projections + scores_and_mix


class Attention(_SelfAttention):
    """Scores and mixing by torch.nn.functional.scaled_dot_product_attention (a fused kernel: flash or
    memory-efficient attention where the device has one, so the n×n matrix is never stored whole)."""

    def _mix(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v)  # (B, h, n, d_head)

    # The fused kernels' backward (flash attention's, on the CPU and on a GPU) keeps no n×n matrix: it
    # recomputes the scores Q·Kᵀ from Q, K and the row statistic it saved, then forms dV = Pᵀ·dO,
    # dP = dO·Vᵀ, dQ = dS·K and dK = dSᵀ·Q: five n²·d products where the forward did two.
    SCORE_PRODUCTS_BACKWARD = 5

    @classmethod
    def backward_flops(cls, batch: int, n: int, cfg: LayerConfig, device: str) -> int:
        projections = 2 * 4 * 2 * batch * n * cfg.d * cfg.d  # twice the forward's four projections
        scores = cls.SCORE_PRODUCTS_BACKWARD * 2 * batch * n * n * cfg.d
        return projections + scores

    @staticmethod
    def activation_bytes(batch: int, n: int, cfg: LayerConfig, elem_bytes: int) -> int:
        # Q, K, V, the mixed heads and the output: O(n·d); fused kernels tile the scores.
        return 5 * batch * n * cfg.d * elem_bytes


class AttentionMath(_SelfAttention):
    """The same computation written out: softmax(Q Kᵀ / sqrt(d_head)) V, materialising the n×n scores."""

    def _mix(self, q, k, v):
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_head)  # (B, h, n, n)
        return torch.softmax(scores, dim=-1) @ v  # (B, h, n, d_head)

    @staticmethod
    def activation_bytes(batch: int, n: int, cfg: LayerConfig, elem_bytes: int) -> int:
        # Scores and their softmax, one n×n matrix each per head: O(n²), plus O(n·d) as above.
        return (5 * batch * n * cfg.d + 2 * batch * cfg.heads * n * n) * elem_bytes


@dataclass(frozen=True)
class Blocks:
    """How `AttentionLocal` tiles a sequence of n queries with window r (`AttentionLocal.blocks`).

    The queries are cut into `count` blocks of `queries` consecutive positions (the last one padded past n);
    block β attends to the `keys` consecutive key positions from β·queries − `offset` on, its span, which
    holds every key its queries may see: queries + r − 1 keys from β·queries − r//2 (offset r//2), or,
    where one such span would cost as much as the whole sequence, all n keys (one block, offset 0: dense
    attention with the window mask). Every (query, key) pair of a block is computed; the window mask then
    sets the scores of the pairs outside the window (and of keys beyond the sequence) to −inf."""

    queries: int  # w, queries per block
    count: int  # blocks: ceil(n / w)
    keys: int  # s, the keys of one block's span
    offset: int  # block β's span starts at key β·w − offset

    @property
    def padded_n(self) -> int:
        """Query positions computed, n rounded up to whole blocks."""
        return self.count * self.queries

    @property
    def pairs(self) -> int:
        """(query, key) scores computed per head and batch element, masked ones included."""
        return self.padded_n * self.keys


def window_pairs(n: int, window: int) -> int:
    """(query, key) pairs inside the window and the sequence: n·r less the keys that the windows of the
    first r//2 and the last r − 1 − r//2 queries lose past either end (1 <= r <= n)."""
    left, right = window // 2, window - 1 - window // 2
    return n * window - left * (left + 1) // 2 - right * (right + 1) // 2


MASKS_KEPT = 4  # block masks an AttentionLocal keeps, by sequence length and device


class AttentionLocal(_SelfAttention):
    """Each query i attends only to the r keys j with i - r//2 <= j <= i - r//2 + r - 1 (a window of r
    positions centered on i; keys outside 0..n-1 are masked).

    Computed in blocks, at the speed of batched matrix products (the sliding chunks of Longformer, Beltagy
    et al. 2020, with overlapping spans): the queries are cut into blocks of w (`blocks`); block β takes
    the span of w + r − 1 consecutive keys that its queries' windows cover; a batched product (`baddbmm`)
    forms the w·(w + r − 1) scores of many blocks at once, the window mask sets the pairs outside the window
    to −inf, and a second one (`bmm`) mixes the values, chunk after chunk of blocks (`chunk`). The spans are
    overlapping views (`unfold`) of one padded copy of K and of V, so nothing of size r·n·d is gathered.
    Work: 4·b·n·(w + r − 1)·d FLOPs for scores and mixing, O(r·n·d) for a fixed w, of which the window's
    pairs are the useful part (`useful_flops`, `useful_fraction`: about r/(w + r − 1), 0.67 at r = 64).

    Non-finite values (a NaN or inf in V) stay inside the window: a masked weight is 0 and 0·NaN = NaN, so a
    blocked product would carry a non-finite value to every query of the block, including those whose window
    does not hold it. So a value row that is not finite is zeroed and its key made NaN: the queries whose
    window holds it come out NaN, exactly those the windowed definition makes non-finite, and the others mask
    that key's score away (bench.paths' NaN probe measures the layer's reach this way). A non-finite key needs
    nothing: masking replaces its scores outside the window."""

    uses = ("heads", "window")
    table1 = Table1Row(lambda n, d, k, r: r * n * d, "O(r·n·d)", "O(1)", "O(n/r)", sizes=("window",))
    path = PathRule(_local_layers, "⌈(n−1)/(r//2)⌉")
    # Queries per block, w. Larger blocks make larger products, smaller ones compute fewer masked pairs (the
    # span w + r − 1 against the window r) and softmax fewer scores. Timed on a 2-core Xeon VM, 2 threads,
    # batch 4, 4 heads: w = 16 to 32 the fastest, within the machine's noise, for r from 16 to 256 and d from
    # 32 to 256; at n = 4096, d = 256, r = 64, w = 64 took 1.8x and w = 128 2x the time of w = 32.
    BLOCK = 32
    # Scores formed at a time: the blocks are processed in chunks of about this many bytes of scores, so that
    # masking, softmax and the product with V find them in the cache (4 MB: the L2 of the machine's two
    # cores). Timed as above, medians of 3: at d = 32, n = 4096 in 11.0 ms instead of 20.9 ms (all 25 MB of
    # scores at once, three trips to memory), n = 8192 in 23.6 ms instead of 43.7 ms; at n = 4096, d = 256 in
    # 57.8 ms against 55.7 ms; chunks of 1 MB took 12.6, 23.7 and 72.5 ms.
    CHUNK_BYTES = 2**22

    @staticmethod
    def check(cfg: LayerConfig, n: int | None = None) -> None:
        _SelfAttention.check(cfg)
        if cfg.window is None or cfg.window < 1:
            raise ValueError(f"window={cfg.window}: restricted attention needs a window r with 1 <= r <= n")
        if n is not None and cfg.window > n:
            raise ValueError(f"window={cfg.window}: must be at most n={n}")

    def __init__(self, cfg: LayerConfig):
        super().__init__(cfg)
        self.window = cfg.window
        self.left = cfg.window // 2  # keys before the query; window - 1 - left after it
        self._masked_cache: dict[tuple[int, Blocks, torch.device], torch.Tensor] = {}

    @classmethod
    def blocks(cls, n: int, window: int) -> Blocks:
        """The tiling of n queries with window r: blocks of w = BLOCK queries (at most n) with spans of
        w + r − 1 keys, unless that computes at least the n² pairs of dense attention, then one block of all n
        queries and all n keys."""
        w = min(cls.BLOCK, n)
        count = -(-n // w)
        if count * w * (w + window - 1) >= n * n:
            return Blocks(queries=n, count=1, keys=n, offset=0)
        return Blocks(queries=w, count=count, keys=w + window - 1, offset=window // 2)

    @classmethod
    def chunk(cls, g: Blocks, elem_bytes: int, device_type: str = "cpu") -> tuple[int, int]:
        """(heads, blocks of each head) whose scores are formed at a time: whole heads where a head's scores
        fit in CHUNK_BYTES, else runs of one head's blocks (at least one block). On a GPU all at once: its
        kernels stream the scores anyway, and every chunk would cost a few kernel launches (not measured here:
        no GPU)."""
        if device_type != "cpu":
            return sys.maxsize, g.count
        per_chunk = max(1, cls.CHUNK_BYTES // (g.queries * g.keys * elem_bytes))
        return (per_chunk // g.count, g.count) if per_chunk >= g.count else (1, per_chunk)

    def block_mask(self, n: int, device=None) -> torch.Tensor:
        """(count, w, s) boolean: True where query β·w + t may see key β·w − offset + u, the window inside the
        sequence; rows of the padding queries (β·w + t >= n) are all True, so that their softmax stays
        finite (their outputs are dropped)."""
        g = self.blocks(n, self.window)
        starts = torch.arange(g.count, device=device) * g.queries  # (count,)
        t = torch.arange(g.queries, device=device)
        u = torch.arange(g.keys, device=device)
        offset = u[None, :] - g.offset - t[:, None]  # (w, s): key − query, the same in every block
        in_window = (offset >= -self.left) & (offset <= self.window - 1 - self.left)
        key = starts[:, None] - g.offset + u  # (count, s)
        in_sequence = (key >= 0) & (key < n)
        padding_query = (starts[:, None] + t) >= n  # (count, w)
        return (in_window[None] & in_sequence[:, None, :]) | padding_query[:, :, None]

    def _masked(self, n: int, g: Blocks, device) -> torch.Tensor:
        """~block_mask(n), kept for the last few (n, tiling, device): about forty small operators a call less,
        a quarter of a short sequence's call (n = 256, d = 32, batch 1: 0.27 ms instead of 0.36 ms)."""
        key = (n, g, torch.device(device))
        if key not in self._masked_cache:
            if len(self._masked_cache) >= MASKS_KEPT:
                self._masked_cache.pop(next(iter(self._masked_cache)))
            self._masked_cache[key] = ~self.block_mask(n, device)
        return self._masked_cache[key]

    @staticmethod
    def _padded_rows(t: torch.Tensor, g: Blocks) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, h, n, d_head) -> (rows, own): one zero-padded copy of t, rows [offset | head 0's n_padded |
        head 1's | ... | s − w − offset] of d_head, and the view of t's own rows in it (B, h, n, d_head)."""
        b, h, n, d_head = t.shape
        heads_rows = b * h * g.padded_n
        rows = t.new_empty(heads_rows + g.keys - g.queries, d_head)
        heads = rows[g.offset : g.offset + heads_rows].view(b, h, g.padded_n, d_head)
        own = heads[:, :, :n]
        own.copy_(t)
        # Only the padding is zeroed (a masked key must be finite: 0·inf and 0·NaN are NaN).
        rows[: g.offset].zero_()
        rows[g.offset + heads_rows :].zero_()
        heads[:, :, n:].zero_()
        return rows, own

    @staticmethod
    def _spans(rows: torch.Tensor, g: Blocks) -> torch.Tensor:
        """(B·h·count, s, d_head): every block's span of keys (or values), overlapping views of `rows`: the span
        of block β of head j starts at row (j·count + β)·w, so unfold(0, s, w) gives all of them in order. Rows
        past a head's n keys (zeros, or a neighbouring head's keys) are masked."""
        return rows.unfold(0, g.keys, g.queries).transpose(1, 2)

    def _mix(self, q, k, v):
        b, h, n, d_head = q.shape
        g = self.blocks(n, self.window)
        padded = F.pad(q, (0, 0, 0, g.padded_n - n)) if g.padded_n > n else q  # (B, h, n_padded, d_head)
        queries = padded.reshape(b * h * g.count, g.queries, d_head)  # (B·h·count, w, d_head): one copy
        k_rows, k_own = self._padded_rows(k, g)
        v_rows, v_own = self._padded_rows(v, g)
        # Non-finite values (class docstring): 0·x is 0 for a finite x, NaN for inf or NaN, so `poison` is NaN
        # for a value row that is not finite, else 0. Added to its key it makes that key's scores NaN: the
        # queries whose window holds it come out NaN, the others mask the score away; the value row is zeroed
        # so that their masked weights multiply zeros. Four passes of n·d; amax and amin read, never overflow.
        v_seen = v_own.detach()  # the test needs no gradient
        poison = v_seen.amax(-1, keepdim=True) * 0 + v_seen.amin(-1, keepdim=True) * 0  # (B, h, n, 1)
        k_own.add_(poison)
        v_rows.nan_to_num_(0.0, 0.0, 0.0)
        keys, values = self._spans(k_rows, g), self._spans(v_rows, g)  # (B·h·count, s, d_head) each
        masked = self._masked(n, g, q.device)  # (count, w, s)
        # The blocks in chunks whose scores stay in the cache: whole heads where a head's blocks fit in
        # CHUNK_BYTES, else runs of one head's blocks. The same products, fewer trips to memory.
        heads_per, blocks_per = self.chunk(g, q.element_size(), q.device.type)
        queries, keys, values = (t.unflatten(0, (b * h, g.count)) for t in (queries, keys, values))
        mixed = []
        for head in range(0, b * h, heads_per):
            for block in range(0, g.count, blocks_per):
                chunk = (slice(head, head + heads_per), slice(block, block + blocks_per))
                q_c, k_c, v_c = (t[chunk].flatten(0, 1) for t in (queries, keys, values))  # (blocks, w or s, d_head)
                # baddbmm with beta = 0 ignores its first argument; alpha scales inside the product.
                scores = torch.baddbmm(q.new_zeros(()), q_c, k_c.transpose(1, 2), beta=0, alpha=d_head**-0.5)
                chunk_masked = masked[chunk[1]]  # (blocks of one head, w, s)
                scores.view(-1, *chunk_masked.shape).masked_fill_(chunk_masked, float("-inf"))
                mixed.append(torch.bmm(torch.softmax(scores, dim=-1), v_c))  # (blocks, w, d_head)
        mixed = torch.cat(mixed) if len(mixed) > 1 else mixed[0]  # (B·h·count, w, d_head)
        return mixed.view(b, h, g.padded_n, d_head)[:, :, :n]  # (B, h, n, d_head)

    def dense_mask(self, n: int, device=None) -> torch.Tensor:
        """The equivalent boolean mask for dense attention: True where query i may see key j."""
        offset = torch.arange(n, device=device)[None, :] - torch.arange(n, device=device)[:, None]  # j - i
        return (offset >= -self.left) & (offset <= self.window - 1 - self.left)  # (n, n)

    @classmethod
    def flops(cls, batch: int, n: int, cfg: LayerConfig) -> int:
        """What the kernels compute: the projections and, for scores and mixing, every pair of every block
        (masked ones included), d MACs each over all heads."""
        projections = 4 * 2 * batch * n * cfg.d * cfg.d
        scores_and_mix = 2 * (2 * batch * cls.blocks(n, cfg.window).pairs * cfg.d)
        return projections + scores_and_mix

    @staticmethod
    def useful_flops(batch: int, n: int, cfg: LayerConfig) -> int:
        """The FLOPs of the windowed definition alone: the projections and the pairs inside the window and
        the sequence (`window_pairs`), what a kernel that skips every masked pair would compute."""
        projections = 4 * 2 * batch * n * cfg.d * cfg.d
        return projections + 2 * (2 * batch * window_pairs(n, cfg.window) * cfg.d)

    @classmethod
    def useful_fraction(cls, n: int, cfg: LayerConfig) -> float:
        """The share of the computed (query, key) pairs that lie in the window and the sequence, the rest
        being masked: window_pairs / (n_padded · s), about r / (w + r − 1)."""
        return window_pairs(n, cfg.window) / cls.blocks(n, cfg.window).pairs

    @classmethod
    def activation_bytes(cls, batch: int, n: int, cfg: LayerConfig, elem_bytes: int) -> int:
        # Live at the peak, the concatenation of the chunks' outputs: Q, K, V (3·n·d), the padded queries, the
        # padded copies of K and V, the chunks' mixed values and their concatenation (5·n_padded·d), and the
        # scores of one chunk and their softmax: O(n·d), no r·n·d gathered, no scores of the whole sequence.
        # That is the CPU's: a GPU forms every block's scores at once (`chunk`), 2 per computed pair and head.
        g = cls.blocks(n, cfg.window)
        heads, blocks = cls.chunk(g, elem_bytes)
        chunk_pairs = min(heads, batch * cfg.heads) * blocks * g.queries * g.keys
        return (3 * batch * n * cfg.d + 5 * batch * g.padded_n * cfg.d + 2 * chunk_pairs) * elem_bytes


class AdditiveAttention(nn.Module):
    """Additive (Bahdanau) attention: score(q_i, k_j) = vᵀ tanh(W_q q_i + W_k k_j), then softmax over j
    and the weighted sum of the values. The (n, n, d_att) tensor of tanh arguments is materialised, as
    the textbook writes it. Counted FLOPs: 2·b·n·d·d_att twice (W_q, W_k), 2·b·n²·d_att (vᵀ·), 2·b·n²·d_v
    (weights·V); the broadcast sum and tanh are elementwise and not counted."""

    def __init__(self, d: int, d_att: int):
        super().__init__()
        self.w_q = nn.Linear(d, d_att, bias=False)
        self.w_k = nn.Linear(d, d_att, bias=False)
        self.v = nn.Parameter(torch.randn(d_att) / math.sqrt(d_att))

    def scores(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        features = torch.tanh(self.w_q(q)[:, :, None, :] + self.w_k(k)[:, None, :, :])  # (B, n, n, d_att)
        return torch.einsum("bijd,d->bij", features, self.v)  # (B, n, n)

    def forward(self, q, k, v):
        return torch.softmax(self.scores(q, k), dim=-1) @ v  # (B, n, d_v)

    @staticmethod
    def flops(batch: int, n: int, d: int, d_att: int, d_v: int) -> int:
        return 2 * (2 * batch * n * d * d_att) + 2 * batch * n * n * d_att + 2 * batch * n * n * d_v
