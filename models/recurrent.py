"""Recurrent layers: tanh RNN, GRU and LSTM (Vaswani et al. 2017, Table 1), fused (nn.RNN/GRU/LSTM) and as a loop,
`reference()`, whose n dependent steps probes can see. FLOPs: 2·b·n·g·2d², g = 1, 3, 4 gate blocks."""

from __future__ import annotations

import torch
from torch import nn

from .config import CONSTANT_PATH, LayerConfig, Table1Row, accept_any, fixed_cache, recurrent_step, spill_bytes


def onednn_takes(dtype: str, trains: bool = False) -> bool:
    """Whether ATen gives a CPU recurrence of this dtype to oneDNN (RNN.cpp, use_mkldnn): float32 always, bfloat16
    and float16 only on CPUs with oneDNN kernels for them (AVX-512 BF16, AMX), float16 not in training."""
    if not (torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled):
        return False
    if dtype == "bfloat16":
        return torch.ops.mkldnn._is_mkldnn_bf16_supported()
    if dtype == "float16":
        return not trains and torch.ops.mkldnn._is_mkldnn_fp16_supported()
    return True


class _Recurrent(nn.Module):
    gates: int
    fused_cls: type[nn.RNNBase]
    # Whether PyTorch runs it on the CPU as one fused oneDNN operator rather than ATen's per-step loop.
    cpu_fused: bool = False
    uses: tuple[str, ...] = ()
    table1 = Table1Row(lambda n, d, k, r: n * d**2, "O(n·d²)", "O(n)", "O(n)")
    decode = recurrent_step("Vaswani et al. 2017, Table 1 (a recurrence's step)")
    hidden_states = 1
    path = CONSTANT_PATH
    check = staticmethod(accept_any)

    def __init__(self, cfg: LayerConfig):
        super().__init__()
        self.cfg = cfg
        self.fused = self.fused_cls(cfg.d, cfg.d, num_layers=1, batch_first=True, **self._extra())

    def _extra(self) -> dict:
        return {}

    def _apply(self, fn, recurse=True):
        # Module.to() leaves cuDNN's weights in chunks, which every call would compact again
        out = super()._apply(fn, recurse)
        self.fused.flatten_parameters()
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.fused(x)
        return out

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        state = self._initial_state(x)
        outputs = []
        for t in range(x.shape[1]):
            state = self._advance(x[:, t], state)
            outputs.append(state[0])
        return torch.stack(outputs, dim=1)

    def _advance(self, x_t: torch.Tensor, state: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        w_ih, w_hh = self.fused.weight_ih_l0, self.fused.weight_hh_l0  # (g·d, d) each
        b_ih, b_hh = self.fused.bias_ih_l0, self.fused.bias_hh_l0
        gi = x_t @ w_ih.T + b_ih
        gh = state[0] @ w_hh.T + b_hh
        return self._cell(gi, gh, state)

    def prefill(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        if x.shape[1] == 0:
            return self._initial_state(x)
        _, last = self.fused(x)
        return tuple(s[0] for s in (last if isinstance(last, tuple) else (last,)))

    cache = staticmethod(fixed_cache)

    def step(self, x_t: torch.Tensor, cache: tuple[torch.Tensor, ...], t: int) -> torch.Tensor:
        """The output at position t; the hidden state advanced in place."""
        new = self._advance(x_t[:, 0], cache)
        for kept, value in zip(cache, new):
            kept.copy_(value)
        return new[0].unsqueeze(1)

    @classmethod
    def decode_flops(cls, batch: int, t: int, cfg: LayerConfig) -> int:
        return 2 * batch * cls.gates * 2 * cfg.d * cfg.d

    @classmethod
    def decode_state_bytes(cls, batch: int, t: int, cfg: LayerConfig, elem_bytes: int) -> int:
        return cls.hidden_states * batch * cfg.d * elem_bytes

    def _initial_state(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (x.new_zeros(x.shape[0], self.cfg.d),)

    def _cell(self, gi, gh, state):  # pragma: no cover - each subclass defines its cell
        raise NotImplementedError

    @classmethod
    def flops(cls, batch: int, n: int, cfg: LayerConfig) -> int:
        # n steps × (input and hidden products) × g blocks of d×d.
        return 2 * batch * n * cls.gates * (cfg.d * cfg.d + cfg.d * cfg.d)

    @classmethod
    def min_bytes(cls, batch: int, n: int, cfg: LayerConfig, elem_bytes: int, cache_bytes: int | None = None) -> int:
        # Every kernel (cuDNN, oneDNN, ATen's loop) forms W_ih·x of all n steps in one product and reads it back.
        g, d = cls.gates, cfg.d
        hidden_bytes = g * d * d * elem_bytes
        hidden_reads = n if cache_bytes is not None and hidden_bytes > cache_bytes else 1
        compulsory = (2 * batch * n * d + g * d * d + 2 * g * d) * elem_bytes + hidden_reads * hidden_bytes
        return compulsory + spill_bytes(batch * n * g * d * elem_bytes, cache_bytes)

    @classmethod
    def backward_flops(cls, batch: int, n: int, cfg: LayerConfig, device: str) -> int:
        """Twice the forward, less the step-0 product for h_0's gradient where ATen's loop (not fused) skips it."""
        skipped = 0 if cls.fused_on(device, cfg.dtype, trains=True) else 2 * batch * cls.gates * cfg.d * cfg.d
        return 2 * cls.flops(batch, n, cfg) - skipped

    @classmethod
    def fused_on(cls, device: str, dtype: str = "float32", trains: bool = False) -> bool:
        if str(device).split(":")[0] != "cpu":
            return True
        return cls.cpu_fused and onednn_takes(dtype, trains)

    @classmethod
    def activation_bytes(cls, batch: int, n: int, cfg: LayerConfig, elem_bytes: int) -> int:
        # The output and the gate pre-activations of every step, which fused kernels keep.
        return batch * n * cfg.d * (1 + cls.gates) * elem_bytes


class RNN(_Recurrent):
    """Elman RNN: h_t = tanh(W_ih x_t + b_ih + W_hh h_{t-1} + b_hh)."""

    gates = 1
    fused_cls = nn.RNN

    def _extra(self) -> dict:
        return {"nonlinearity": "tanh"}

    def _cell(self, gi, gh, state):
        return (torch.tanh(gi + gh),)


class GRU(_Recurrent):
    """GRU, PyTorch's gate order (r, z, n): n_t = tanh(i_n + r ⊙ h_n); h_t = (1 - z) ⊙ n_t + z ⊙ h_{t-1}."""

    gates = 3
    fused_cls = nn.GRU

    def _cell(self, gi, gh, state):
        (h,) = state
        i_r, i_z, i_n = gi.chunk(3, dim=1)  # (B, d) each
        h_r, h_z, h_n = gh.chunk(3, dim=1)
        r = torch.sigmoid(i_r + h_r)
        z = torch.sigmoid(i_z + h_z)
        cand = torch.tanh(i_n + r * h_n)
        return ((1 - z) * cand + z * h,)


class LSTM(_Recurrent):
    """LSTM, PyTorch's gate order (i, f, g, o): c_t = f ⊙ c_{t-1} + i ⊙ g; h_t = o ⊙ tanh(c_t)."""

    gates = 4
    fused_cls = nn.LSTM
    cpu_fused = True
    hidden_states = 2

    def _initial_state(self, x):
        return (x.new_zeros(x.shape[0], self.cfg.d), x.new_zeros(x.shape[0], self.cfg.d))

    def _cell(self, gi, gh, state):
        _, c = state
        i, f, g, o = (gi + gh).chunk(4, dim=1)  # (B, d) each
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        return (h, c)
