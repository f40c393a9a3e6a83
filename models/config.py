"""The one config every matched layer is built from.

Every layer maps a float tensor of shape (batch, n, d) to one of the same shape. Sizes that a layer does
not use (k for attention, heads for a convolution) are ignored by it; `models.LAYERS[name].uses` says
which ones matter, so a sweep does not repeat a point over a size the layer never reads.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
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


@dataclass(frozen=True)
class Table1Row:
    """A layer's row of Vaswani et al. 2017, Table 1, kept beside the layer's code.

    `compute(n, d, k, window)`: the complexity per layer with constants dropped (numpy arrays or scalars in,
    an array out); `sizes`: the sizes besides n and d that `compute` reads (a point of the layer must store
    them); the three texts are the table's cells. `fit_n_over_d`: where the table's term carries the
    counted FLOPs only from n >= fit_n_over_d·d on (attention's projections, n·d², outweigh its n²·d below
    that), the fixed fit range of FLOPs and memory keeps only those points."""

    compute: Callable[..., np.ndarray]
    compute_text: str
    sequential_text: str
    path_text: str
    sizes: tuple[str, ...] = ()
    fit_n_over_d: int | None = None

    def cost(self, n, d, k=None, window=None) -> np.ndarray:
        return np.asarray(
            self.compute(
                np.asarray(n, float),
                np.asarray(d, float),
                None if k is None else np.asarray(k, float),
                None if window is None else np.asarray(window, float),
            ),
            float,
        )
