"""Linear attention (Katharopoulos et al. 2020), sharing `SelfAttention`'s projections: `attention`'s weights."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .attention import SelfAttention
from .config import DecodeRow, LayerConfig, Table1Row, fixed_cache, spill_bytes


def feature_map(x: torch.Tensor) -> torch.Tensor:
    """φ(x) = elu(x) + 1 (Katharopoulos et al. 2020, eq. 7): positive, so every normaliser is."""
    return F.elu(x) + 1


class AttentionLinear(SelfAttention):
    """Katharopoulos et al. 2020: φ(Q)(φ(K)ᵀV) / φ(Q)(φ(K)ᵀ1), φ = elu + 1: O(n·d²); causal by prefix sums."""

    table1 = Table1Row(
        lambda n, d, k, r: n * d**2,
        "O(n·d²)",
        "O(1)",
        "O(1)",
        source="Katharopoulos et al. 2020",
        note=(
            "softmax attention's n²·d becomes n·d²: with a kernel φ(q)·φ(k) for the weights, φ(K)ᵀV is summed "
            "once and every query reuses it. Sequential operations and path length stay O(1), so it keeps "
            "attention's one-layer path at a recurrence's O(n) cost in n; by FLOPs it is the cheaper attention "
            "from n = d/heads + 1 on."
        ),
    )

    decode = DecodeRow(
        lambda t, d, k, r, dil: d**2,
        "O(d²)",
        lambda t, d, k, r, dil: d**2,
        "O(d²)",
        source="Katharopoulos et al. 2020 (Transformers are RNNs)",
    )

    def _mix(self, q, k, v):
        q, k = feature_map(q), feature_map(k)  # (B, h, n, e), positive
        if self.cfg.causal:
            kv = (k.unsqueeze(-1) @ v.unsqueeze(-2)).cumsum(2)
            queries = q.unsqueeze(-2)
            return ((queries @ kv) / (queries @ k.cumsum(2).unsqueeze(-1))).squeeze(-2)
        kv = k.transpose(-2, -1) @ v  # (B, h, e, e): Σ_j φ(k_j) v_jᵀ
        k_sum = k.sum(dim=-2).unsqueeze(-1)  # (B, h, e, 1): φ(K)ᵀ 1
        # matmul, not einsum or a broadcast product: a product over e = 1 stays a counted matrix product.
        return (q @ kv) / (q @ k_sum)

    def prefill(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        k, v = feature_map(self._split(self.k_proj(x))), self._split(self.v_proj(x))
        return (k.transpose(-2, -1) @ v, k.sum(dim=-2).unsqueeze(-1))

    cache = staticmethod(fixed_cache)

    def step(self, x_t: torch.Tensor, cache: tuple[torch.Tensor, ...], t: int) -> torch.Tensor:
        """The output at position t; Σ φ(k)vᵀ and Σ φ(k) grown in place."""
        q, k, v = (self._split(p(x_t)) for p in (self.q_proj, self.k_proj, self.v_proj))
        q, k = feature_map(q), feature_map(k).transpose(-2, -1)
        kv, k_sum = cache
        kv.add_(k @ v)
        k_sum.add_(k)
        mixed = (q @ kv) / (q @ k_sum)
        return self.out_proj(mixed.transpose(1, 2).reshape(x_t.shape))

    @staticmethod
    def decode_flops(batch: int, t: int, cfg: LayerConfig) -> int:
        d, e = cfg.d, cfg.d // cfg.heads
        return 4 * 2 * batch * d * d + 2 * (2 * batch * d * e) + 2 * batch * d

    @staticmethod
    def decode_state_bytes(batch: int, t: int, cfg: LayerConfig, elem_bytes: int) -> int:
        return batch * (cfg.d * (cfg.d // cfg.heads) + cfg.d) * elem_bytes

    @classmethod
    def _mix_min_bytes(cls, batch, n, cfg, elem_bytes, cache_bytes):
        # The state φ(K)ᵀV and the normaliser φ(K)ᵀ1 are formed whole before any query reads them.
        state_bytes = batch * cfg.d * (cfg.d // cfg.heads) * elem_bytes
        return spill_bytes(state_bytes, cache_bytes) + spill_bytes(batch * cfg.d * elem_bytes, cache_bytes)

    @staticmethod
    def flops(batch: int, n: int, cfg: LayerConfig) -> int:
        d, e = cfg.d, cfg.d // cfg.heads
        projections = 4 * 2 * batch * n * d * d
        keys_values = 2 * batch * n * d * e  # φ(K)ᵀ V, all heads
        queries = 2 * batch * n * d * e  # φ(Q) (φ(K)ᵀ V)
        normaliser = 2 * batch * n * d  # φ(Q) (φ(K)ᵀ 1)
        return projections + keys_values + queries + normaliser

    @staticmethod
    def activation_bytes(batch: int, n: int, cfg: LayerConfig, elem_bytes: int) -> int:
        # Q, K, V, φ(Q), φ(K), the numerator and the mixed heads; φ(K)ᵀV (e×e) and the normaliser (n) a head.
        d, e = cfg.d, cfg.d // cfg.heads
        return (7 * batch * n * d + batch * d * e + batch * cfg.heads * n) * elem_bytes
