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

    @classmethod
    def of(cls, d: int, dtype: str = "float32", **sizes) -> LayerConfig:
        """The config of a stored point or spec: sizes that are None or NaN (unused by the layer) are left at
        their defaults, the others made int."""
        return cls(d=int(d), dtype=dtype, **{k: int(v) for k, v in sizes.items() if v is not None and v == v})


@dataclass(frozen=True)
class PathRule:
    """How information crosses a stack of the layer, in closed form; `bench.paths` measures the same on the
    real layers and sets this beside it.

    `layers(n, k, window)`: the fewest stacked layers after which output n-1 depends on input 0, None where
    no stack crosses; `text`: the same as a formula. `dilation(index, k)`: the dilation of layer `index`
    (0-based) of the measured stack, None when every layer is the same (a stack that adds no position at
    one layer then never will). `margin(n, k)`: positions added on each side of the sequence when measuring,
    None for none (a layer whose rightward path never needs to leave 0..n-1)."""

    layers: Callable[[int, int, int], int | None]
    text: str
    dilation: Callable[[int, int], int] | None = None
    margin: Callable[[int, int], int] | None = None

    def stack_dilation(self, index: int, k: int) -> int:
        return 1 if self.dilation is None else self.dilation(index, k)

    def ends_margin(self, n: int, k: int) -> int:
        return 0 if self.margin is None else self.margin(n, k)


def accept_any(cfg: LayerConfig, n: int | None = None) -> None:
    """The `check` of a layer that every LayerConfig fits."""


CONSTANT_PATH = PathRule(lambda n, k, window: 1, "1")  # one layer already links input 0 to output n-1


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

    @property
    def sequential_exponent(self) -> int:
        """The power of n in the sequential-operations cell: 0 for O(1), 1 for O(n)."""
        exponents = {"O(1)": 0, "O(n)": 1}
        if self.sequential_text not in exponents:
            raise ValueError(f"sequential operations {self.sequential_text!r}: known {', '.join(exponents)}")
        return exponents[self.sequential_text]

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
