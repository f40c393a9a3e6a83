"""Multi-head self-attention: fused, explicit, and restricted to a window of r positions.

Cost (Vaswani et al. 2017, Table 1): self-attention O(n²·d) per layer, O(1) sequential operations, O(1)
maximum path length; restricted to a neighbourhood of r positions O(r·n·d), path length O(n/r).
The full count here adds the four d×d projections (Q, K, V, output), O(n·d²), which the table's row
leaves out: FLOPs = 8·b·n·d² (projections) + 4·b·n²·d (Q·Kᵀ and weights·V), 2 per multiply-accumulate,
biases and the softmax excluded (torch.utils.flop_counter's convention). Restricted: 8·b·n·d² + 4·b·n·r·d.

All three share the projections, so `attention` and `attention_math` built from the same seed have the
same weights and tests prove them equal.
"""

from __future__ import annotations

import math

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


class AttentionLocal(_SelfAttention):
    """Each query i attends only to the r keys j with i - r//2 <= j <= i - r//2 + r - 1 (a window of r
    positions centered on i; keys outside 0..n-1 are masked). Computed banded: the r keys of every query
    are gathered (unfold) and only those r products per query are formed, so the work really is
    O(r·n·d), not a dense n×n product with a mask."""

    uses = ("heads", "window")
    table1 = Table1Row(lambda n, d, k, r: r * n * d, "O(r·n·d)", "O(1)", "O(n/r)", sizes=("window",))
    path = PathRule(_local_layers, "⌈(n−1)/(r//2)⌉")

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

    def _windows(self, t: torch.Tensor) -> torch.Tensor:
        # (B, h, n, d_head) -> (B, h, n, r, d_head): the r keys (or values) each query sees.
        padded = F.pad(t, (0, 0, self.left, self.window - 1 - self.left))  # (B, h, n + r - 1, d_head)
        return padded.unfold(2, self.window, 1).transpose(-1, -2)

    def _valid(self, n: int, device) -> torch.Tensor:
        # valid[i, o]: key j = i - left + o lies inside the sequence.
        j = torch.arange(n, device=device)[:, None] - self.left + torch.arange(self.window, device=device)
        return (j >= 0) & (j < n)  # (n, r)

    def _mix(self, q, k, v):
        n = q.shape[2]
        # matmul, not einsum: einsum turns a product over a size-1 index (r = 1 or d_head = 1) into an
        # element-wise multiply, which would drop out of the matrix-product FLOP count.
        keys = self._windows(k).transpose(-1, -2)  # (B, h, n, d_head, r)
        scores = (q.unsqueeze(-2) @ keys).squeeze(-2) / math.sqrt(self.d_head)  # (B, h, n, r)
        scores = scores.masked_fill(~self._valid(n, q.device), float("-inf"))
        weights = torch.softmax(scores, dim=-1).unsqueeze(-2)  # (B, h, n, 1, r)
        return (weights @ self._windows(v)).squeeze(-2)  # (B, h, n, d_head)

    def dense_mask(self, n: int, device=None) -> torch.Tensor:
        """The equivalent boolean mask for dense attention: True where query i may see key j."""
        offset = torch.arange(n, device=device)[None, :] - torch.arange(n, device=device)[:, None]  # j - i
        return (offset >= -self.left) & (offset <= self.window - 1 - self.left)  # (n, n)

    @staticmethod
    def flops(batch: int, n: int, cfg: LayerConfig) -> int:
        projections = 4 * 2 * batch * n * cfg.d * cfg.d
        scores_and_mix = 2 * (2 * batch * n * cfg.window * cfg.d)  # r products per query, not n
        return projections + scores_and_mix

    @staticmethod
    def activation_bytes(batch: int, n: int, cfg: LayerConfig, elem_bytes: int) -> int:
        # Gathered key and value windows (r·n·d each) and the (n, r) scores per head: O(r·n·d).
        r = cfg.window
        return (5 * batch * n * cfg.d + 2 * batch * n * r * cfg.d + 2 * batch * cfg.heads * n * r) * elem_bytes


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
