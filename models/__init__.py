"""The matched layers: every one maps (batch, n, d) to (batch, n, d) and is built from a LayerConfig.

Each layer class carries its analytic cost next to its code:
  - `flops(batch, n, cfg)`: forward FLOPs of the whole batch, 2 per multiply-accumulate of every matrix
    product and convolution (torch.utils.flop_counter's convention); biases, softmax, activations and
    gate arithmetic excluded.
  - `activation_bytes(batch, n, cfg, elem_bytes)`: an estimate of the activations the forward pass holds.
  - `uses`: which of the sizes k, heads, window the layer reads.
  - `table1`: its row of Vaswani et al. 2017, Table 1 (a `Table1Row`: the compute term as a function and as
    text, sequential operations, maximum path length), which fits and the report read from here.
"""

from __future__ import annotations

import torch
from torch import nn

from .attention import Attention, AttentionLocal, AttentionMath
from .config import DTYPES, LayerConfig, Table1Row
from .conv import Conv, ConvDilated, ConvSeparable
from .recurrent import GRU, LSTM, RNN

LAYERS: dict[str, type[nn.Module]] = {
    "conv": Conv,
    "conv_dilated": ConvDilated,
    "conv_separable": ConvSeparable,
    "rnn": RNN,
    "gru": GRU,
    "lstm": LSTM,
    "attention": Attention,
    "attention_math": AttentionMath,
    "attention_local": AttentionLocal,
}

RECURRENT = ("rnn", "gru", "lstm")


def build(name: str, cfg: LayerConfig, device: str | torch.device = "cpu", seed: int = 0) -> nn.Module:
    """The layer `name`, seeded so that equal (name, cfg, seed) give equal weights, in eval mode."""
    if name not in LAYERS:
        raise KeyError(f"unknown layer {name!r}; built: {', '.join(LAYERS)}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        layer = LAYERS[name](cfg)
    return layer.to(device=device, dtype=cfg.torch_dtype).eval()


def analytic_flops(name: str, batch: int, n: int, cfg: LayerConfig) -> int:
    return LAYERS[name].flops(batch, n, cfg)


def analytic_activation_bytes(name: str, batch: int, n: int, cfg: LayerConfig) -> int:
    elem_bytes = torch.empty((), dtype=cfg.torch_dtype).element_size()
    return LAYERS[name].activation_bytes(batch, n, cfg, elem_bytes)


__all__ = [
    "LAYERS",
    "RECURRENT",
    "DTYPES",
    "LayerConfig",
    "Table1Row",
    "build",
    "analytic_flops",
    "analytic_activation_bytes",
]
