"""Linear attention (Katharopoulos et al. 2020, "Transformers are RNNs"): softmax attention's weights
exp(q·k) replaced by a kernel φ(q)·φ(k) with a positive feature map φ(x) = elu(x) + 1, so the n×n weight
matrix factors and is never formed:

    out_i = Σ_j (φ(q_i)·φ(k_j)) v_j / Σ_j φ(q_i)·φ(k_j) = φ(q_i) (φ(K)ᵀ V) / φ(q_i) (φ(K)ᵀ 1)

per head, non-causal (every query sees every key). φ(K)ᵀ V (d_head × d_head) and φ(K)ᵀ 1 are formed once and
every query multiplies them: O(n·d²) work where softmax attention's is O(n²·d), O(1) sequential operations
and O(1) maximum path length (one layer links any two positions) like softmax attention's.

FLOPs, 2 per multiply-accumulate of every matrix product (bench/flops.py), h heads of size e = d/h:
  Q, K, V and output projections   4 · 2·b·n·d²
  φ(K)ᵀ V                          2·b·h·n·e² = 2·b·n·d·e      ((e × n) · (n × e) per head)
  φ(Q) (φ(K)ᵀ V)                   2·b·n·d·e                   ((n × e) · (e × e) per head)
  φ(Q) (φ(K)ᵀ 1)                   2·b·n·d                     ((n × e) · (e × 1) per head)
φ(K)ᵀ 1 is a sum over positions (a reduction, not a product), φ and the division are element-wise: not
counted. Softmax attention (models/attention.py) costs 8·b·n·d² + 4·b·n²·d, so by FLOPs it is the costlier one
from n > e + 1/2 on: n* = e + 1 (bench.fits.closed_form_crossover_n).

The Q, K, V and output projections are `_SelfAttention`'s, so a build from the same seed has the same weights
as `attention` and `attention_math`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .attention import _SelfAttention
from .config import LayerConfig, Table1Row


def feature_map(x: torch.Tensor) -> torch.Tensor:
    """φ(x) = elu(x) + 1 (Katharopoulos et al. 2020, eq. 7): positive everywhere, so every normaliser
    φ(q)·Σ_j φ(k_j) is positive."""
    return F.elu(x) + 1


class AttentionLinear(_SelfAttention):
    """Kernelized linear attention: weights φ(q)·φ(k) with φ(x) = elu(x) + 1 in place of softmax(q·k),
    computed as φ(Q)(φ(K)ᵀV) normalised by φ(Q)(φ(K)ᵀ1), so the n×n weights are never formed and the work is
    O(n·d²). Katharopoulos et al. 2020, non-causal."""

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

    def _mix(self, q, k, v):
        q, k = feature_map(q), feature_map(k)  # (B, h, n, e), positive
        kv = k.transpose(-2, -1) @ v  # (B, h, e, e): Σ_j φ(k_j) v_jᵀ
        k_sum = k.sum(dim=-2).unsqueeze(-1)  # (B, h, e, 1): φ(K)ᵀ 1
        # matmul, not einsum or a broadcast product: a product over e = 1 stays a counted matrix product.
        return (q @ kv) / (q @ k_sum)  # (B, h, n, e) / (B, h, n, 1)

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
        # At most seven (b, n, d) tensors live at once, O(n·d): Q, K, V, φ(Q), φ(K), the numerator and the
        # mixed heads (the allocator's peak on the CPU: 7.0-7.1 of them at n >= 256); φ(K)ᵀV is e×e a head
        # and the normaliser n a head.
        d, e = cfg.d, cfg.d // cfg.heads
        return (7 * batch * n * d + batch * d * e + batch * cfg.heads * n) * elem_bytes
