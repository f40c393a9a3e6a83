"""Path length and sequential depth: the two structural columns of Vaswani et al. 2017, Table 1, measured.

Every number here comes from running the real layers (`models.build`), batch 1, width d (8 by default),
in float32, the dtype the sweep times (so the forward runs the same kernels, e.g. oneDNN's LSTM), one
intra-op thread (PROBE_THREADS); never from the formula. The closed form is kept beside each measurement.
Three measurements (the `paths.csv` columns):

`layers_to_cross`: the fewest stacked layers after which output position n-1 depends on input position 0.
    The stack is grown one fresh layer at a time (layer l built with seed l, same kind, same d). After
    each layer we know the set of positions that depend on input 0 ("reached"); the next layer is run
    twice, on its clean input and on a copy with the reached positions set to NaN, and the positions whose
    output is NaN are the new reached set (`reached_by_poison`). The clean output feeds the next layer.
    Why poison rather than a perturbation or a gradient: a derivative of output n-1 with respect to input 0
    is a product of one factor per step, and over a long recurrence or a deep stack it underflows even in
    float64 (the fused LSTM at n = 4096 gives an exact 0.0 tangent at a position that depends on x_0), so
    derivative probes miss real paths; a difference test loses them sooner still, to rounding. NaN does
    not decay, in any dtype. Its failure is the other way: a NaN times a structural zero is NaN, so a
    layer that masked by multiplying with 0 (dense attention with a 0/1 mask applied after the softmax)
    would look connected where it is not. The layers here keep that from happening: `attention_local`
    multiplies masked weights with the values of its blocks, so it zeroes non-finite values first and sets
    to NaN exactly the queries whose window holds one (models/attention.py); the convolutions pad with zeros.
    The tests cross-check the poison probe, position by position, against forward-mode tangents
    (`reached_by_tangent`, the exact Jacobian structure where it does not underflow) on every layer.
    The reached set is reset to exactly "NaN or not" after every layer, so depth never dilutes the signal.
    A stack that stops growing (a layer adds no position; only layers of one fixed structure, so nothing
    later can change that) or reaches the cap raises `NeverCrosses`, with how far it got.

    conv_dilated is a stack whose layer l has dilation k^l (ByteNet-style exponential growth). With
    centered kernels the offsets of that stack are balanced base-k digits, so the path from 0 to n-1 is
    unique, and for most n it leaves the sequence (n = 64, k = 3: 63 = 81 - 27 + 9 steps 0 -> 9 -> -18),
    where zero padding cuts it: the zero-padded stack of length n never connects 0 to n-1. The textbook's
    O(log_k n) is the path between two positions n-1 apart, so conv_dilated is measured with the two
    positions inside a longer sequence, `ends_margin` = k·n extra positions each side, more than the
    stack's one-sided reach (k^L - 1)/2 at the depth L where it first spans n-1 (k^(L-1) < 2n - 1, so
    (k^L - 1)/2 < k·n). The zero-padded length-n result is kept as `layers_to_cross_no_margin`.

`path_hops`: the number of dependent steps that information from position 0 passes through on its way to
    position n-1. Recurrent layers (`models.recurrent()`): measured on the transparent step loop
    (`.reference()`) by `CellStepMode`, a TorchDispatchMode that tags every tensor depending on x_0 with the
    fewest step-to-step transfers on a dependency path from x_0 (a step begins where the loop reads x[:, t];
    an operator in step t reading a tagged tensor made in an earlier step adds one hop). A parallel scan
    (`models.scans()`): the levels of its tree, measured on the forward itself as a stack is, by NaN: the
    scan is run with a tree of 0, 1, 2, ... levels (`layer(x, levels=L)`, which scans blocks of 2^L positions
    apart) until output n-1 depends on input 0 (`scan_path_hops`). Its step loop would take n-1 steps, as
    `recurrent_path_hops` on its reference shows; the forward does not run it. Attention and convolutions:
    each layer computes all positions at once, in one step, so the hops are the layers crossed (the
    measured `layers_to_cross`).

`seq_depth`: the longest chain of dependent operators in one forward pass of one layer, at the operator
    level (`OperatorDepthMode`): every operator's outputs get 1 + the largest depth of its tensor inputs
    (layer inputs and parameters are depth 0); views (transpose, select, split: they alias, computing
    nothing) pass the depth through. A fused library kernel hides its loop: on the CPU in float32
    nn.LSTM runs as one oneDNN operator (depth 2 whatever n is; cuDNN's RNNs are one operator too), while
    PyTorch runs nn.RNN and nn.GRU on the CPU as a C++ loop of per-step operators that the mode does see.
    So recurrent layers are measured on `.reference()`, the same on every device (`seq_depth_of` says
    which was measured), and the forward's depth is kept beside it as `seq_depth_forward`. A parallel scan's
    forward hides nothing (its ⌈log₂ n⌉ levels are operators the mode sees), so its forward is the measured
    depth; its reference's n-step depth is kept as `seq_depth_reference` (as are the recurrent layers',
    equal to their `seq_depth`), to set the two computations of one recurrence side by side.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Sequence

import pandas as pd
import torch
import torch.autograd.forward_ad as fwAD
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.weak import WeakTensorKeyDictionary

import models

from .threads import pinned_threads

PROBE_DTYPE = torch.float32  # the dtype the sweep times; NaN propagation is exact in any dtype
PROBE_BATCH = 1
PROBE_THREADS = 1  # tiny tensors: more threads only add synchronisation (and spin on a busy machine)
DEFAULT_D = 8
DEFAULT_WINDOW = 16
SOURCE = 0  # input position whose influence is followed (before the margin shift)

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

Probe = Callable[[nn.Module, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


class NeverCrosses(RuntimeError):
    """The stack stopped growing, or hit its cap, before output n-1 depended on input 0."""


class UnsupportedReference(RuntimeError):
    """A recurrent reference that does not read its input position by position, so steps cannot be told."""


# ----------------------------------------------------------------------------------- reachability probes
def reached_by_poison(layer: nn.Module, x: torch.Tensor, reached: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(clean output, output positions that depend on any `reached` input position), by NaN propagation.

    x: (1, n, d); reached: (n,) bool. The clean output must be finite, so every NaN comes from the poison.
    """
    with torch.no_grad():
        clean = layer(x)  # (1, n, d)
        poisoned = x.clone()
        poisoned[:, reached] = float("nan")
        out = layer(poisoned)  # (1, n, d)
    if not torch.isfinite(clean).all():
        raise FloatingPointError(f"{type(layer).__name__}: the clean pass is not finite; the NaN probe needs it")
    return clean, torch.isnan(out).any(dim=-1)[0]  # (n,)


def reached_by_tangent(layer: nn.Module, x: torch.Tensor, reached: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The same question by forward-mode AD: output positions with a nonzero tangent when the tangent is 1
    at the reached input positions. Exact zeros where nothing depends (a mask multiplies a tangent by an
    exact 0), but a long chain underflows to 0, so this is the cross-check, not the production probe.
    The fused CPU attention kernel has no forward-mode formula, so SDPA runs its math backend here: the
    same function, so the same dependence structure."""
    tangent = torch.zeros_like(x)
    tangent[:, reached] = 1.0
    with warnings.catch_warnings():
        # torch scripts its forward-mode decompositions on first use and warns that torch.jit.script is
        # deprecated: torch's own notice, nothing this probe can act on.
        warnings.filterwarnings("ignore", message=".*torch.jit.script.*", category=DeprecationWarning)
        with torch.no_grad(), fwAD.dual_level(), sdpa_kernel(SDPBackend.MATH):
            primal, out_tangent = fwAD.unpack_dual(layer(fwAD.make_dual(x, tangent)))
    return primal, (out_tangent != 0).any(dim=-1)[0]  # (n,)


# ------------------------------------------------------------------------------------------ the stacks
def _check(name: str, n: int) -> None:
    if name not in models.LAYERS:
        raise ValueError(f"unknown layer {name!r}; built: {', '.join(models.LAYERS)}")
    if n < 2:
        raise ValueError(f"n={n}: a path from position 0 to position n-1 needs n >= 2")


def _uses_k(name: str) -> bool:
    return "k" in models.LAYERS[name].uses


def ends_margin(name: str, n: int, k: int) -> int:
    """Positions added on each side of the sequence: the layer's `path.margin` (k·n for conv_dilated, see
    the module docstring), 0 for a layer whose rightward path never needs to leave 0..n-1."""
    return models.LAYERS[name].path.ends_margin(n, k)


def stack_layer(
    name: str, index: int, d: int, k: int, window: int, seed: int = 0, dtype: torch.dtype = PROBE_DTYPE
) -> nn.Module:
    """Layer `index` (0-based) of the measured stack: a fresh layer (seed + index), at the dilation the
    layer's path rule gives it (k^index for conv_dilated, 1 otherwise)."""
    dilation = models.LAYERS[name].path.stack_dilation(index, k)
    cfg = models.LayerConfig(d=d, k=k, heads=1, window=window, dilation=dilation)
    return models.build(name, cfg, seed=seed + index).to(dtype)


def probe_input(length: int, d: int, seed: int = 0, dtype: torch.dtype = PROBE_DTYPE) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(PROBE_BATCH, length, d, generator=gen, dtype=torch.float64).to(dtype)  # (1, length, d)


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
    """The fewest stacked layers of kind `name` after which output n-1 depends on input 0 (measured).

    margin: positions added each side (default `ends_margin`); max_layers: the cap (default: the sequence
    length, enough for any layer that moves information at least one position per layer).
    Raises NeverCrosses when the stack stalls or reaches the cap first.
    """
    _check(name, n)
    margin = ends_margin(name, n, k) if margin is None else margin
    length = n + 2 * margin
    source, target = margin + SOURCE, margin + n - 1
    cap = length if max_layers is None else max_layers
    x = probe_input(length, d, seed)  # (1, length, d)
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
        # A stack of one fixed structure (or of kernel size 1) that adds no position never will; growing
        # dilations may still add positions later.
        same_structure = rule.dilation is None or k == 1
        if same_structure and torch.equal(now, reached):  # the same map every layer: a fixed point
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
    """The closed form the measurement is compared with, the layer's own (`models.LAYERS[name].path`); None
    where no stack crosses."""
    _check(name, n)
    return models.LAYERS[name].path.layers(n, k, window)


# ------------------------------------------------------------------------------------------- path hops
_aten = torch.ops.aten
# Operators that read only a tensor's shape, dtype and device, never its values (x.new_zeros(...) for the
# initial state): reading x through them moves no information.
_METADATA_ONLY = {
    _aten.new_zeros.default,
    _aten.new_ones.default,
    _aten.new_empty.default,
    _aten.new_full.default,
    _aten.zeros_like.default,
    _aten.ones_like.default,
    _aten.empty_like.default,
    _aten.full_like.default,
}


class CellStepMode(TorchDispatchMode):
    """Follows x[:, source] through a step-by-step recurrent reference and counts cell steps.

    A step begins where the loop reads x[:, t] (aten.select on the sequence dim). Every tensor that depends
    on x_0 gets `hops`: the fewest step-to-step transfers on a dependency path from x_0, i.e. the minimum
    over its tagged inputs of their hops, +1 for an input made in an earlier step. `stacked` keeps the tags
    of the tensors the final aten.stack assembles: entry t is output position t.
    """

    def __init__(self, x: torch.Tensor, source: int = SOURCE):
        super().__init__()
        self.x, self.source = x, source
        self.step = -1
        self.tags = WeakTensorKeyDictionary()  # tensor -> (hops, step made in), only tensors depending on x_0
        self.stacked: list[tuple[int, int] | None] | None = None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        inputs = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        if any(t is self.x for t in inputs):
            return self._read_input(func, args, kwargs)
        out = func(*args, **kwargs)
        tagged = [tag for tag in (self.tags.get(t) for t in inputs) if tag is not None]
        if tagged:
            hops = min(h + (1 if made < self.step else 0) for h, made in tagged)
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor):
                    self.tags[t] = (hops, self.step)
        if func is _aten.stack.default:
            self.stacked = [self.tags.get(t) for t in args[0]]
        return out

    def _read_input(self, func, args, kwargs):
        if func in _METADATA_ONLY:
            return func(*args, **kwargs)
        dim = args[1] if len(args) > 1 else None
        if func is not _aten.select.int or args[0] is not self.x or dim not in (1, -2):
            raise UnsupportedReference(
                f"{func} reads the whole input; cell steps are told apart only when the "
                "reference reads x position by position (x[:, t])"
            )
        out = func(*args, **kwargs)
        self.step = args[2] % self.x.shape[1]
        if self.step == self.source:
            self.tags[out] = (0, self.step)  # x_0 enters here
        return out


def recurrent_path_hops(layer: nn.Module, x: torch.Tensor) -> list[int | None]:
    """Hops from x_0 to every output position of `layer.reference(x)` (None: does not depend on x_0)."""
    mode = CellStepMode(x)
    with torch.no_grad(), mode:
        layer.reference(x)
    if mode.stacked is None:
        raise UnsupportedReference(f"{type(layer).__name__}.reference did not assemble its outputs with stack")
    return [None if tag is None else tag[0] for tag in mode.stacked]


def scan_path_hops(layer: nn.Module, x: torch.Tensor, probe: Probe = reached_by_poison) -> int | None:
    """The fewest levels of a parallel scan's tree after which output n-1 depends on input 0: the layer run
    with trees of 0, 1, 2, ... levels (`layer(x, levels=L)`), each probed as a stack's layer is; None if the
    whole tree (`layer.scan_levels(n)` levels) does not link them."""
    n = x.shape[1]
    reached = torch.zeros(n, dtype=torch.bool)
    reached[SOURCE] = True
    for levels in range(layer.scan_levels(n) + 1):
        _, now = probe(functools.partial(layer, levels=levels), x, reached)
        if now[n - 1]:
            return levels
    return None


def path_hops(
    name: str, n: int, k: int = 3, window: int = DEFAULT_WINDOW, d: int = DEFAULT_D, layers_crossed: int | None = None
) -> tuple[int, str]:
    """(hops from input 0 to output n-1, how they were counted). Recurrent: cell steps on `.reference()`
    (one layer crosses). A parallel scan: the levels of its tree, on the forward. Others: one hop per
    layer, so the layers of the stack that crosses."""
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


# ------------------------------------------------------------------------------------ sequential depth
class OperatorDepthMode(TorchDispatchMode):
    """Gives every operator's outputs 1 + the largest depth of its tensor inputs (tensors made outside the
    mode, inputs and parameters, are depth 0); a view (an alias, `OpOverload.is_view`) passes the depth
    through. `deepest` is the longest chain seen, `ops` the number of operators run."""

    def __init__(self):
        super().__init__()
        self.depth = WeakTensorKeyDictionary()
        self.deepest = 0
        self.ops = 0

    def depth_of(self, t: torch.Tensor) -> int:
        return self.depth.get(t, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        depth = max((self.depth_of(t) for t in inputs), default=0) + (0 if func.is_view else 1)
        self.ops += 0 if func.is_view else 1
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.depth[t] = depth
        self.deepest = max(self.deepest, depth)
        return out


def seq_depth(fn: Callable, *inputs: torch.Tensor) -> int:
    """Operator depth of fn(*inputs): the longest chain of dependent operators ending in its output."""
    mode = OperatorDepthMode()
    with torch.no_grad(), mode:
        out = fn(*inputs)
    return max(mode.depth_of(t) for t in tree_leaves(out) if isinstance(t, torch.Tensor))


def layer_seq_depth(
    name: str, n: int, k: int = 3, window: int = DEFAULT_WINDOW, d: int = DEFAULT_D, reference: bool = True
) -> tuple[int, str]:
    """(operator depth of one layer's forward pass at length n, what ran): the transparent `.reference()`
    for recurrent layers (whose fused kernels hide their loop) unless reference=False, `forward` otherwise,
    a parallel scan's included."""
    _check(name, n)
    layer, x = stack_layer(name, 0, d, k, window), probe_input(n, d)
    if reference and name in models.recurrent():
        return seq_depth(layer.reference, x), "reference"
    return seq_depth(layer, x), "forward"


def reference_seq_depth(name: str, n: int, k: int = 3, window: int = DEFAULT_WINDOW, d: int = DEFAULT_D) -> int | None:
    """Operator depth of the layer's step-by-step `.reference()` at length n; None for a layer without one."""
    _check(name, n)
    if name not in models.stepwise():
        return None
    return seq_depth(stack_layer(name, 0, d, k, window).reference, probe_input(n, d))


# ------------------------------------------------------------------------------------------- the table
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
            row["layers_to_cross_no_margin"] = None  # expected for most n (module docstring); not an error
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


def paths_table(
    layers: Sequence[str], ns: Sequence[int], ks: Sequence[int], window: int = DEFAULT_WINDOW, d: int = DEFAULT_D
) -> pd.DataFrame:
    """The path-length and sequential-depth study: one row per (layer, n, k) for the layers that use k,
    one per (layer, n) with k empty for the others. Pure: returns the table, writes nothing."""
    for name in layers:
        _check(name, 2)
    with pinned_threads(PROBE_THREADS):
        rows = [
            paths_row(name, n, k, window, d) for name in layers for k in (ks if _uses_k(name) else [None]) for n in ns
        ]
    table = pd.DataFrame(rows, columns=COLUMNS)
    for column in _INT_COLUMNS:
        table[column] = table[column].astype("Int64")
    return table


__all__ = [
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
