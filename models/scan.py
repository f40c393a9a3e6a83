"""A diagonal linear recurrence (S4D/S5, the LRU): associative, so a parallel scan computes it (Blelloch 1990)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import CONSTANT_PATH, LayerConfig, Table1Row, accept_any, fixed_cache, recurrent_step, spill_bytes

DECAY_RANGE = (0.5, 0.99)  # the initial per-channel decays a: memories of 2 to 100 steps


def scan_levels(n: int) -> int:
    """The height of the scan's tree over n positions, ⌈log₂ n⌉ (0 for n = 1)."""
    return (n - 1).bit_length()


def parallel_scan(u: torch.Tensor, decay: torch.Tensor, levels: int | None = None) -> torch.Tensor:
    """h_t = decay ⊙ h_{t−1} + u_t by a work-efficient scan; `levels` < ⌈log₂ n⌉ stops it early (paths)."""
    b, n, d = u.shape
    height = scan_levels(n) if levels is None else levels
    block = 1 << height
    padded = -(-n // block) * block
    # Zeros after position n−1 change no h_t before them (the recurrence is causal).
    h = F.pad(u, (0, 0, 0, padded - n)).reshape(-1, block, d)  # (R, block, d), R = B·blocks
    evens = []
    decay_s = decay  # a^s, s = 2^level: the decay across one segment of the level
    for _ in range(height):  # up-sweep: each level halves the segments
        even, odd = h.unflatten(1, (-1, 2)).unbind(2)  # (R, m/2, d) each: left and right segments of a pair
        evens.append((even, decay_s))
        h = torch.addcmul(odd, decay_s, even)  # the pair's total: right + a^s ⊙ left
        decay_s = decay_s * decay_s
    # Down-sweep: a left segment's prefix is its pair's prefix before it, decayed across it, plus its own total.
    for even, decay_s in reversed(evens):
        before = F.pad(h[:, :-1], (0, 0, 1, 0))  # (R, m/2, d): the prefix ending before each pair, 0 first
        h = torch.stack((torch.addcmul(even, decay_s, before), h), dim=2).flatten(1, 2)
    return h.reshape(b, padded, d)[:, :n]


class Scan(nn.Module):
    """Diagonal linear recurrence h_t = a ⊙ h_{t−1} + B x_t, y_t = C h_t (a per-channel decay in (0, 1)), computed by a
    parallel scan in ⌈log₂ n⌉ levels; `reference()` is the same layer as a loop over the n time steps."""

    uses: tuple[str, ...] = ()
    table1 = Table1Row(
        lambda n, d, k, r: n * d**2 + n * d,
        "O(n·d² + n·d)",
        "O(log n)",
        "O(log n)",
        source="Blelloch 1990; Martin & Cundy 2018; Smith et al. 2023",
        note=(
            "a recurrence that is linear in its state is associative, so a parallel scan computes it in "
            "⌈log₂ n⌉ levels: Table 1's O(n) sequential operations and path length of a recurrence become "
            "O(log n), at the same O(n·d²) work (the projections; the scan itself is O(n·d) element-wise). "
            "Its step-by-step reference still takes n steps."
        ),
    )
    decode = recurrent_step("Smith et al. 2023; Orvieto et al. 2023 (a diagonal linear recurrence's step)")
    path = CONSTANT_PATH
    check = staticmethod(accept_any)
    scan_levels = staticmethod(scan_levels)

    def __init__(self, cfg: LayerConfig):
        super().__init__()
        self.cfg = cfg
        self.in_proj = nn.Linear(cfg.d, cfg.d)  # B
        self.out_proj = nn.Linear(cfg.d, cfg.d)  # C
        low, high = DECAY_RANGE
        # on the CPU even where the layer is built on the meta device (a footprint): logit there loads torch._dynamo
        self.decay_logit = nn.Parameter(torch.logit(torch.empty(cfg.d, device="cpu").uniform_(low, high)))

    @property
    def decay(self) -> torch.Tensor:
        return torch.sigmoid(self.decay_logit)

    def forward(self, x: torch.Tensor, levels: int | None = None) -> torch.Tensor:
        h = parallel_scan(self.in_proj(x), self.decay, levels)
        return self.out_proj(h)

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        a = self.decay
        batch, n, d = x.shape
        h = x.new_zeros(batch, d)
        outputs = []
        for t in range(n):
            h = a * h + (x[:, t] @ self.in_proj.weight.T + self.in_proj.bias)
            outputs.append(h @ self.out_proj.weight.T + self.out_proj.bias)  # y_t = C h_t
        return torch.stack(outputs, dim=1)

    def prefill(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if x.shape[1] == 0:
            return (x.new_zeros(x.shape[0], self.cfg.d),)
        return (parallel_scan(self.in_proj(x), self.decay)[:, -1].clone(),)

    cache = staticmethod(fixed_cache)

    def step(self, x_t: torch.Tensor, cache: tuple[torch.Tensor, ...], t: int) -> torch.Tensor:
        """The output at position t; h advanced in place."""
        h = self.decay * cache[0] + self.in_proj(x_t[:, 0])
        cache[0].copy_(h)
        return self.out_proj(h).unsqueeze(1)

    @staticmethod
    def decode_flops(batch: int, t: int, cfg: LayerConfig) -> int:
        return 2 * 2 * batch * cfg.d * cfg.d

    @staticmethod
    def decode_state_bytes(batch: int, t: int, cfg: LayerConfig, elem_bytes: int) -> int:
        return batch * cfg.d * elem_bytes

    @staticmethod
    def flops(batch: int, n: int, cfg: LayerConfig) -> int:
        # B x_t and C h_t; the scan is element-wise (not counted).
        return 2 * 2 * batch * n * cfg.d * cfg.d

    @classmethod
    def min_bytes(cls, batch: int, n: int, cfg: LayerConfig, elem_bytes: int, cache_bytes: int | None = None) -> int:
        # B·x and h are stored between the scan and the products; a single-pass scan keeps its levels in cache.
        d = cfg.d
        compulsory = (2 * batch * n * d + 2 * (d * d + d) + d) * elem_bytes
        return compulsory + 2 * spill_bytes(batch * n * d * elem_bytes, cache_bytes)

    @staticmethod
    def activation_bytes(batch: int, n: int, cfg: LayerConfig, elem_bytes: int) -> int:
        # B x, its copy padded to a power of two P, the up-sweep's totals (< P), the last pair (2P), the output.
        padded = 1 << scan_levels(n)
        return batch * cfg.d * (2 * n + 4 * padded) * elem_bytes


__all__ = ["Scan", "parallel_scan", "scan_levels"]
