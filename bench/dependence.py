"""Pure probes of which outputs depend on which inputs, in how many steps: NaN, tangents, cell steps, operator depth."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable

import torch
import torch.autograd.forward_ad as fwAD
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.weak import WeakTensorKeyDictionary

SOURCE = 0  # input position whose influence is followed (before the margin shift)

Probe = Callable[[nn.Module, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


class UnsupportedReference(RuntimeError):
    """A recurrent reference that does not read its input position by position, so steps cannot be told."""


def reached_by_poison(layer: nn.Module, x: torch.Tensor, reached: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(clean output, output positions depending on a `reached` input), by NaN; x: (1, n, d), reached: (n,)."""
    with torch.no_grad():
        clean = layer(x)
        poisoned = x.clone()
        poisoned[:, reached] = float("nan")
        out = layer(poisoned)
    if not torch.isfinite(clean).all():  # then a NaN need not come from the poison
        raise FloatingPointError(f"{type(layer).__name__}: the clean pass is not finite; the NaN probe needs it")
    return clean, torch.isnan(out).any(dim=-1)[0]


def reached_by_tangent(layer: nn.Module, x: torch.Tensor, reached: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The same by forward-mode AD (nonzero tangent), the cross-check: exact where a long chain does not underflow."""
    tangent = torch.zeros_like(x)
    tangent[:, reached] = 1.0
    with warnings.catch_warnings():
        # torch warns, scripting its forward-mode decompositions on first use, that torch.jit.script is deprecated.
        warnings.filterwarnings("ignore", message=".*torch.jit.script.*", category=DeprecationWarning)
        # The fused CPU attention kernel has no forward-mode formula; the math backend is the same function.
        with torch.no_grad(), fwAD.dual_level(), sdpa_kernel(SDPBackend.MATH):
            primal, out_tangent = fwAD.unpack_dual(layer(fwAD.make_dual(x, tangent)))
    return primal, (out_tangent != 0).any(dim=-1)[0]


_aten = torch.ops.aten
# Operators that read a tensor's shape, dtype and device, never its values (x.new_zeros for the initial state).
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
    """Tags each tensor depending on x_0 with its fewest step-to-step hops; `stacked`: the final stack's inputs'."""

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
        if tagged:  # an input made in an earlier step adds one hop
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
            self.tags[out] = (0, self.step)
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
    """The fewest tree levels (`layer(x, levels=L)`) after which output n-1 depends on input 0, or None."""
    n = x.shape[1]
    reached = torch.zeros(n, dtype=torch.bool)
    reached[SOURCE] = True
    for levels in range(layer.scan_levels(n) + 1):
        _, now = probe(functools.partial(layer, levels=levels), x, reached)
        if now[n - 1]:
            return levels
    return None


class OperatorDepthMode(TorchDispatchMode):
    """Every operator's outputs get 1 + the largest depth of its tensor inputs; a view passes the depth through."""

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
