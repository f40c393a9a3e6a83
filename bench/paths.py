"""Table 1's path lengths and sequential depths (`paths.csv`), measured on the real layers, never from the formula."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pandas as pd
import torch
from torch import nn

import models

from . import outside
from .dependence import (
    SOURCE,
    CellStepMode,
    OperatorDepthMode,
    Probe,
    UnsupportedReference,
    reached_by_poison,
    reached_by_tangent,
    recurrent_path_hops,
    scan_path_hops,
    seq_depth,
)
from .threads import pinned_threads

PROBE_DTYPE = torch.float32  # the dtype the sweep times, so the same kernels run; NaN propagates in any dtype
PROBE_BATCH = 1
PROBE_THREADS = 1  # tiny tensors: more threads only add synchronisation (and spin on a busy machine)
DEFAULT_D = 8
DEFAULT_WINDOW = 16

COLUMNS = [  # interface order first (bench/interface.md), then the details
    "layer",
    "n",
    "k",
    "layers_to_cross",
    "layers_to_cross_formula",
    "path_hops",
    "seq_depth",
    "window",
    "d",
    "margin",
    "layers_to_cross_no_margin",
    "path_hops_of",
    "seq_depth_of",
    "seq_depth_forward",
    "seq_depth_reference",
    "error",
]
_INT_COLUMNS = [c for c in COLUMNS if c not in ("layer", "n", "path_hops_of", "seq_depth_of", "error")]


class NeverCrosses(RuntimeError):
    """The stack stopped growing, or hit its cap, before output n-1 depended on input 0."""


def _check(name: str, n: int) -> None:
    if name not in models.LAYERS:
        raise ValueError(f"unknown layer {name!r}; built: {', '.join(models.LAYERS)}")
    if n < 2:
        raise ValueError(f"n={n}: a path from position 0 to position n-1 needs n >= 2")


def _uses_k(name: str) -> bool:
    return "k" in models.LAYERS[name].uses


def ends_margin(name: str, n: int, k: int) -> int:
    """Positions added on each side of the sequence, the layer's `path.margin` (k·n for conv_dilated)."""
    return models.LAYERS[name].path.ends_margin(n, k)


def stack_layer(
    name: str, index: int, d: int, k: int, window: int, seed: int = 0, dtype: torch.dtype = PROBE_DTYPE
) -> nn.Module:
    """Layer `index` (0-based) of the measured stack: fresh (seed + index), at its path rule's dilation."""
    dilation = models.LAYERS[name].path.stack_dilation(index, k)
    cfg = models.LayerConfig(d=d, k=k, heads=1, window=window, dilation=dilation)
    return models.build(name, cfg, seed=seed + index).to(dtype)


def probe_input(length: int, d: int, seed: int = 0, dtype: torch.dtype = PROBE_DTYPE) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(PROBE_BATCH, length, d, generator=gen, dtype=torch.float64).to(dtype)


@pinned_threads(PROBE_THREADS)
def layers_to_cross(
    name: str,
    n: int,
    k: int = 3,
    window: int = DEFAULT_WINDOW,
    d: int = DEFAULT_D,
    *,
    margin: int | None = None,
    max_layers: int | None = None,
    probe: Probe = reached_by_poison,
    seed: int = 0,
) -> int:
    """The fewest stacked layers after which output n-1 depends on input 0; NeverCrosses if it stalls first."""
    _check(name, n)
    margin = ends_margin(name, n, k) if margin is None else margin
    length = n + 2 * margin
    source, target = margin + SOURCE, margin + n - 1
    cap = length if max_layers is None else max_layers
    x = probe_input(length, d, seed)
    reached = torch.zeros(length, dtype=torch.bool)
    reached[source] = True
    rule = models.LAYERS[name].path
    for depth in range(1, cap + 1):
        dilation = rule.stack_dilation(depth - 1, k)
        if dilation >= length:
            raise NeverCrosses(
                f"{_describe(name, n, k, window)}, margin={margin}: after {depth - 1} layers input 0 reaches "
                f"positions {_span(reached, source)} but not n-1={n - 1}; the next dilation, {dilation}, puts "
                f"every tap but the centre outside the {length} positions, so no further layer can help"
            )
        layer = stack_layer(name, depth - 1, d, k, window, seed)
        x, now = probe(layer, x, reached)
        if now[target]:
            return depth
        # A stack of one fixed structure that adds no position never will; growing dilations may later.
        same_structure = rule.dilation is None or k == 1
        if same_structure and torch.equal(now, reached):
            raise NeverCrosses(
                f"{_describe(name, n, k, window)}: layer {depth} adds no position (input 0 reaches "
                f"{_span(reached, source)}), so no stack of these layers links input 0 to output n-1={n - 1}"
            )
        reached = now
    raise NeverCrosses(
        f"{_describe(name, n, k, window)}: capped at {cap} layers; input 0 reaches "
        f"{_span(reached, source)}, not n-1={n - 1}"
    )


def _describe(name: str, n: int, k: int, window: int) -> str:
    sizes = models.LAYERS[name].uses
    size = f"k={k}, " if "k" in sizes else (f"window={window}, " if "window" in sizes else "")
    return f"{name} {size}n={n}"


def _span(reached: torch.Tensor, source: int) -> str:
    where = torch.nonzero(reached).flatten() - source
    return f"{int(where.min())}..{int(where.max())} (relative to input 0)"


def layers_to_cross_formula(name: str, n: int, k: int = 3, window: int = DEFAULT_WINDOW) -> int | None:
    """The layer's own closed form (`models.LAYERS[name].path`); None where no stack crosses."""
    _check(name, n)
    return models.LAYERS[name].path.layers(n, k, window)


def path_hops(
    name: str, n: int, k: int = 3, window: int = DEFAULT_WINDOW, d: int = DEFAULT_D, layers_crossed: int | None = None
) -> tuple[int, str]:
    """(hops from input 0 to output n-1, what was counted: cell steps, scan levels or layers crossed)."""
    _check(name, n)
    if name in models.recurrent():
        hops = recurrent_path_hops(stack_layer(name, 0, d, k, window), probe_input(n, d))[n - 1]
        if hops is None:
            raise NeverCrosses(f"{name} n={n}: output n-1 of the reference does not depend on x_0")
        return hops, "reference cell steps"
    if name in models.scans():
        hops = scan_path_hops(stack_layer(name, 0, d, k, window), probe_input(n, d))
        if hops is None:
            raise NeverCrosses(f"{name} n={n}: output n-1 of the whole scan does not depend on x_0")
        return hops, "scan levels"
    if layers_crossed is None:
        layers_crossed = layers_to_cross(name, n, k, window, d)
    return layers_crossed, "layers crossed"


def layer_seq_depth(
    name: str, n: int, k: int = 3, window: int = DEFAULT_WINDOW, d: int = DEFAULT_D, reference: bool = True
) -> tuple[int, str]:
    """(operator depth of one layer, what ran): a recurrence's `.reference()` unless reference=False."""
    _check(name, n)
    layer, x = stack_layer(name, 0, d, k, window), probe_input(n, d)
    if reference and name in models.recurrent():
        return seq_depth(layer.reference, x), "reference"
    hidden = outside.steps_hidden(layer, x) if outside.is_outside(name) else []
    if hidden:
        return None, f"not measured: {', '.join(hidden)} takes its steps inside one operator"
    return seq_depth(layer, x), "forward"


def reference_seq_depth(name: str, n: int, k: int = 3, window: int = DEFAULT_WINDOW, d: int = DEFAULT_D) -> int | None:
    """Operator depth of the layer's step-by-step `.reference()` at length n; None for a layer without one."""
    _check(name, n)
    if name not in models.stepwise():
        return None
    return seq_depth(stack_layer(name, 0, d, k, window).reference, probe_input(n, d))


def paths_row(name: str, n: int, k: int | None, window: int = DEFAULT_WINDOW, d: int = DEFAULT_D) -> dict:
    """One row of paths.csv. A stack that never crosses is recorded (NaN and the reason in `error`)."""
    kk = 3 if k is None else k  # layers without k ignore it
    row = {
        "layer": name,
        "n": n,
        "k": k,
        "window": window if "window" in models.LAYERS[name].uses else None,
        "d": d,
        "margin": ends_margin(name, n, kk),
        "error": "",
    }
    errors = []
    try:
        row["layers_to_cross"] = layers_to_cross(name, n, kk, window, d)
    except NeverCrosses as exc:
        row["layers_to_cross"] = None
        errors.append(str(exc))
    row["layers_to_cross_formula"] = layers_to_cross_formula(name, n, kk, window)
    if row["margin"]:
        try:
            row["layers_to_cross_no_margin"] = layers_to_cross(name, n, kk, window, d, margin=0)
        except NeverCrosses:
            row["layers_to_cross_no_margin"] = None  # expected for most n (docs/method.md); not an error
    else:
        row["layers_to_cross_no_margin"] = row["layers_to_cross"]
    if name in models.recurrent() or row["layers_to_cross"] is not None:
        try:
            row["path_hops"], row["path_hops_of"] = path_hops(name, n, kk, window, d, row["layers_to_cross"])
        except NeverCrosses as exc:
            row["path_hops"], row["path_hops_of"] = None, ""
            errors.append(str(exc))
    else:
        row["path_hops"], row["path_hops_of"] = None, ""
    row["seq_depth"], row["seq_depth_of"] = layer_seq_depth(name, n, kk, window, d)
    row["seq_depth_forward"] = layer_seq_depth(name, n, kk, window, d, reference=False)[0]
    row["seq_depth_reference"] = (
        row["seq_depth"] if row["seq_depth_of"] == "reference" else reference_seq_depth(name, n, kk, window, d)
    )
    row["error"] = "; ".join(errors)
    return row


def paths_cases(layers: Sequence[str], ns: Sequence[int], ks: Sequence[int]) -> list[tuple[str, int, int | None]]:
    return [(name, n, k) for name in layers for k in (ks if _uses_k(name) else [None]) for n in ns]


def paths_table(
    layers: Sequence[str],
    ns: Sequence[int],
    ks: Sequence[int],
    window: int = DEFAULT_WINDOW,
    d: int = DEFAULT_D,
    on_row: Callable[[], object] | None = None,
) -> pd.DataFrame:
    """One row per (layer, n, k), k empty for the layers that do not use it; `on_row` is called after each."""
    for name in layers:
        _check(name, 2)
    rows = []
    with pinned_threads(PROBE_THREADS):
        for name, n, k in paths_cases(layers, ns, ks):
            rows.append(paths_row(name, n, k, window, d))
            if on_row is not None:
                on_row()
    table = pd.DataFrame(rows, columns=COLUMNS)
    for column in _INT_COLUMNS:
        table[column] = table[column].astype("Int64")
    return table


__all__ = [  # the probes of bench.dependence are read here too
    "NeverCrosses",
    "UnsupportedReference",
    "CellStepMode",
    "OperatorDepthMode",
    "reached_by_poison",
    "reached_by_tangent",
    "ends_margin",
    "stack_layer",
    "layers_to_cross",
    "layers_to_cross_formula",
    "recurrent_path_hops",
    "scan_path_hops",
    "path_hops",
    "seq_depth",
    "layer_seq_depth",
    "reference_seq_depth",
    "paths_row",
    "paths_table",
]
