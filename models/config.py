"""LayerConfig (a layer ignores the sizes not in its `uses`), and a layer's Table 1 row and path rule."""

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
    dilation: int = 1
    dtype: str = "float32"
    causal: bool = False  # output i from inputs 0..i only

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def elem_bytes(self) -> int:
        return self.torch_dtype.itemsize

    @classmethod
    def of(cls, d: int, dtype: str = "float32", causal=False, **sizes) -> LayerConfig:
        """The config of a stored point or spec: sizes that are None or NaN keep their defaults."""
        causal = causal is True or str(causal).lower() in ("true", "1", "1.0")
        sizes = {k: int(v) for k, v in sizes.items() if v is not None and v == v}
        return cls(d=int(d), dtype=dtype, causal=causal, **sizes)


@dataclass(frozen=True)
class PathRule:
    """`layers(n, k, window)`: fewest stacked layers linking input 0 to output n-1 (None: none do), `text` its
    formula; `dilation(index, k)`: layer `index`'s in the measured stack; `margin(n, k)`: positions added each side."""

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


def spill_bytes(tensor_bytes: int, cache_bytes: int | None) -> int:
    """A stored intermediate's write and read back where it outgrows the cache (None: unknown, not counted)."""
    return 2 * tensor_bytes if cache_bytes is not None and tensor_bytes > cache_bytes else 0


CONSTANT_PATH = PathRule(lambda n, k, window: 1, "1")  # one layer already links input 0 to output n-1


# The sequential-operations cells a row may have, as the growth of the dependent steps with n.
SEQUENTIAL_GROWTH: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "O(1)": np.ones_like,
    "O(log n)": np.log2,
    "O(n)": lambda n: n,
}
TABLE1_SOURCE = "Vaswani et al. 2017, Table 1"


def growth_local_exponent(sequential_text: str, n_low: float, n_high: float) -> float:
    """The log-log slope of a sequential-operations cell between two lengths (O(log n) has no fixed power)."""
    low, high = SEQUENTIAL_GROWTH[sequential_text](np.asarray([n_low, n_high], float))
    return float(math.log(high / low) / math.log(n_high / n_low))


@dataclass(frozen=True)
class Table1Row:
    """A layer's row of Vaswani et al. 2017, Table 1: `compute(n, d, k, window)`, constants dropped, reading `sizes`
    besides n and d; cells as text. Fits keep n >= `fit_n_over_d`·d, where the table's term carries the counted FLOPs.
    A row beyond the paper names its `source` and says in `note` what it changes."""

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
        """The power of n in the sequential cell; O(log n) raises (see `sequential_local_exponent`)."""
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
        return np.asarray(SEQUENTIAL_GROWTH[self.sequential_text](np.asarray(n, float)), float)

    def sequential_steps(self, n: int) -> int:
        """Dependent steps at length n as the cell counts them: 1, ⌈log₂ n⌉ or n."""
        return max(1, math.ceil(round(float(self.sequential_growth(n)), 9)))

    def sequential_local_exponent(self, n_low: float, n_high: float) -> float:
        return growth_local_exponent(self.sequential_text, n_low, n_high)

    def cost(self, n, d, k=None, window=None) -> np.ndarray:
        return _evaluate(self.compute, n, d, k, window)


def _evaluate(formula: Callable[..., np.ndarray], *sizes) -> np.ndarray:
    arrays = [None if s is None else np.asarray(s, float) for s in sizes]
    shape = np.broadcast_shapes(*(a.shape for a in arrays if a is not None))
    return np.array(np.broadcast_to(np.asarray(formula(*arrays), float), shape))


@dataclass(frozen=True)
class DecodeRow:
    """A layer's decode step at t: `compute` and `state` of (t, d, k, r, dilation), constants dropped; as Table1Row."""

    compute: Callable[..., np.ndarray]
    compute_text: str
    state: Callable[..., np.ndarray]
    state_text: str
    sizes: tuple[str, ...] = ()
    fit_t_over_d: int | None = None
    source: str = ""
    note: str = ""

    def cost(self, t, d, k=None, window=None, dilation=None) -> np.ndarray:
        return _evaluate(self.compute, t, d, k, window, dilation)

    def state_size(self, t, d, k=None, window=None, dilation=None) -> np.ndarray:
        return _evaluate(self.state, t, d, k, window, dilation)


def fixed_cache(state: tuple[torch.Tensor, ...], t: int, capacity: int) -> tuple[torch.Tensor, ...]:
    """The static cache of a state whose size does not grow with t: its own buffers, which `step` updates in place."""
    return tuple(s.clone() for s in state)


def recurrent_step(source: str) -> DecodeRow:
    return DecodeRow(lambda t, d, k, r, dil: d**2, "O(d²)", lambda t, d, k, r, dil: d, "O(d)", source=source)
