"""The one config every matched layer is built from.

Every layer maps a float tensor of shape (batch, n, d) to one of the same shape. Sizes that a layer does
not use (k for attention, heads for a convolution) are ignored by it; `models.LAYERS[name].uses` says
which ones matter, so a sweep does not repeat a point over a size the layer never reads.
"""

from __future__ import annotations

import math
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


# The sequential-operations cells a row may have, each as the growth of the dependent steps with n (constants
# dropped): a parallel layer's one pass, a parallel scan's levels (Blelloch 1990), a recurrence's n steps.
SEQUENTIAL_GROWTH: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "O(1)": np.ones_like,
    "O(log n)": np.log2,
    "O(n)": lambda n: n,
}
TABLE1_SOURCE = "Vaswani et al. 2017, Table 1"


def growth_local_exponent(sequential_text: str, n_low: float, n_high: float) -> float:
    """The slope on log-log axes of a sequential-operations cell between two lengths: 0 for O(1), 1 for O(n),
    and for O(log n) log(log n_high / log n_low) / log(n_high / n_low) (0.21 from 64 to 256, 0.17 from 64 to
    4096, falling towards 0 as the lengths grow): what a measured depth that follows the cell shows over
    the same lengths. A log has no fixed power of n, so it is judged at the lengths measured."""
    low, high = SEQUENTIAL_GROWTH[sequential_text](np.asarray([n_low, n_high], float))
    return float(math.log(high / low) / math.log(n_high / n_low))


@dataclass(frozen=True)
class Table1Row:
    """A layer's row of Vaswani et al. 2017, Table 1, kept beside the layer's code.

    `compute(n, d, k, window)`: the complexity per layer with constants dropped (numpy arrays or scalars in,
    an array out); `sizes`: the sizes besides n and d that `compute` reads (a point of the layer must store
    them); the three texts are the table's cells, the sequential one of SEQUENTIAL_GROWTH. `fit_n_over_d`:
    where the table's term carries the counted FLOPs only from n >= fit_n_over_d·d on (attention's
    projections, n·d², outweigh its n²·d below that), the fixed fit range of FLOPs and memory keeps only
    those points. A row the paper's table does not have (a layer published later) names its `source` and
    says in `note` what it changes against the table's rows; the report shows the note beside the table."""

    compute: Callable[..., np.ndarray]
    compute_text: str
    sequential_text: str
    path_text: str
    sizes: tuple[str, ...] = ()
    fit_n_over_d: int | None = None
    source: str = TABLE1_SOURCE
    note: str = ""

    def __post_init__(self):
        if self.sequential_text not in SEQUENTIAL_GROWTH:
            known = ", ".join(SEQUENTIAL_GROWTH)
            raise ValueError(f"sequential operations {self.sequential_text!r}: known {known}")

    @property
    def sequential_exponent(self) -> int:
        """The power of n in the sequential-operations cell: 0 for O(1), 1 for O(n). O(log n) has none: a log
        is no power of n (its local slope on log-log axes falls towards 0 as n grows), so it raises; compare
        measured depths with `sequential_local_exponent` over the same n instead."""
        exponents = {"O(1)": 0, "O(n)": 1}
        if self.sequential_text not in exponents:
            raise ValueError(
                f"sequential operations {self.sequential_text}: not a power of n; use sequential_local_exponent"
            )
        return exponents[self.sequential_text]

    @property
    def sequential_is_constant(self) -> bool:
        return self.sequential_text == "O(1)"

    def sequential_growth(self, n) -> np.ndarray:
        """The sequential-operations cell as a function of n, constants dropped: 1, log₂ n or n."""
        return np.asarray(SEQUENTIAL_GROWTH[self.sequential_text](np.asarray(n, float)), float)

    def sequential_steps(self, n: int) -> int:
        """Dependent steps at length n as the cell counts them, constants dropped: 1 for O(1), ⌈log₂ n⌉ for
        O(log n) (the levels of a scan over n positions), n for O(n)."""
        return max(1, math.ceil(round(float(self.sequential_growth(n)), 9)))

    def sequential_local_exponent(self, n_low: float, n_high: float) -> float:
        """The slope on log-log axes of the sequential cell between two lengths (`growth_local_exponent`)."""
        return growth_local_exponent(self.sequential_text, n_low, n_high)

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
