"""The one config every matched layer is built from.

Every layer maps a float tensor of shape (batch, n, d) to one of the same shape. Sizes that a layer does
not use (k for attention, heads for a convolution) are ignored by it; `models.LAYERS[name].uses` says
which ones matter, so a sweep does not repeat a point over a size the layer never reads.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


@dataclass(frozen=True)
class LayerConfig:
    d: int  # model width: features in and out
    k: int = 3  # kernel size of the convolutions (odd: centered 'same' padding)
    heads: int = 1  # attention heads; d % heads == 0
    window: int | None = None  # r, the positions a restricted-attention query sees
    dilation: int = 1  # dilation of one `conv_dilated` layer
    dtype: str = "float32"

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]
