"""A layer from outside the project (`FILE.py:NAME`, `package.module:NAME`, `torch:NAME`): no formula (docs/method.md)."""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

import models
from models import LayerConfig, PathRule

from .errors import BadInput
from .flops import FlopCount, count_flops

SIZES = ("d", "n", "k", "heads", "window", "dilation")
MEASURED_PATH = PathRule(lambda n, k, window: None, "measured")
META_NS = (32, 64, 128)
CHECKED_N = 4096


class _SelfAttention(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.attention = nn.MultiheadAttention(d, heads, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attention(x, x, x, need_weights=False)[0]


class _Conv1d(nn.Module):
    def __init__(self, d: int, k: int):
        super().__init__()
        if k % 2 == 0:
            raise ValueError(f"k={k}: torch:Conv1d keeps the length with an odd k (1, 3, 5, ...)")
        self.conv = nn.Conv1d(d, d, k, padding=k // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x.transpose(1, 2)).transpose(1, 2)


TORCH_LAYERS: dict[str, Callable[..., nn.Module]] = {
    "MultiheadAttention": lambda d, heads: _SelfAttention(d, heads),
    "TransformerEncoderLayer": lambda d, heads: nn.TransformerEncoderLayer(
        d, heads, dim_feedforward=4 * d, dropout=0.0, batch_first=True
    ),
    "LSTM": lambda d: nn.LSTM(d, d, batch_first=True),
    "GRU": lambda d: nn.GRU(d, d, batch_first=True),
    "RNN": lambda d: nn.RNN(d, d, batch_first=True),
    "Conv1d": lambda d, k: _Conv1d(d, k),
}


def _import(source: str) -> tuple[str, object]:
    where, _, name = source.rpartition(":")
    if not where or not name.isidentifier():
        raise BadInput(f"--layers {source}: give FILE.py:NAME, package.module:NAME or torch:NAME")
    if where == "torch":
        if name not in TORCH_LAYERS:
            raise BadInput(f"--layers {source}: torch layers by name: {', '.join(TORCH_LAYERS)}")
        return name, TORCH_LAYERS[name]
    try:
        if where.endswith(".py"):
            path = Path(where).expanduser().resolve()
            if not path.is_file():
                raise BadInput(f"--layers {source}: no file {path}")
            spec = importlib.util.spec_from_file_location(f"seqbench_outside_{path.stem}", path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = module
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
    except BadInput:
        raise
    except Exception as exc:
        raise BadInput(f"--layers {source}: {where} does not import: {type(exc).__name__}: {exc}") from None
    if not hasattr(module, name):
        raise BadInput(f"--layers {source}: {where} has no {name}")
    return name, getattr(module, name)


def _sizes_named(factory) -> tuple[tuple[str, ...], bool]:
    params = list(inspect.signature(factory).parameters.values())
    takes_x = not isinstance(factory, type) and bool(params) and params[0].name not in SIZES
    named = []
    for p in params[1:] if takes_x else params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.name in SIZES:
            named.append(p.name)
        elif p.default is p.empty:
            raise BadInput(
                f"{getattr(factory, '__name__', factory)}: parameter {p.name!r} is no size the harness knows "
                f"({', '.join(SIZES)}); give it a default"
            )
    return tuple(named), takes_x


class _Function(nn.Module):
    def __init__(self, fn, sizes: dict):
        super().__init__()
        self.fn, self.sizes = fn, sizes

    def forward(self, x):
        return self.fn(x, **self.sizes)


class OutsideLayer(nn.Module):
    """The harness's view of an outside layer: built from its sizes (once per n if it names n), output checked."""

    factory: Callable | None = None
    named: tuple[str, ...] = ()
    takes_x = False
    source = ""
    uses: tuple[str, ...] = ()
    table1 = None
    expected: Expected | None = None
    path = MEASURED_PATH
    check = staticmethod(models.config.accept_any)

    def __init__(self, cfg: LayerConfig):
        super().__init__()
        self.cfg, self.seed = cfg, torch.initial_seed()
        self.inner, self.n = (None, None) if "n" in self.named else (self._inner(None), None)

    @classmethod
    def _sizes(cls, cfg: LayerConfig, n: int | None) -> dict:
        every = dict(d=cfg.d, n=n, k=cfg.k, heads=cfg.heads, window=cfg.window, dilation=cfg.dilation)
        return {name: every[name] for name in cls.named}

    def _inner(self, n: int | None) -> nn.Module:
        if self.factory is None:
            raise BadInput(f"{type(self).__name__}: known from a stored run ({self.source}), not importable here")
        sizes = self._sizes(self.cfg, n)
        try:
            inner = _Function(self.factory, sizes) if self.takes_x else self.factory(**sizes)
        except BadInput:
            raise
        except Exception as exc:
            raise ValueError(f"{self.source} with {sizes}: {type(exc).__name__}: {exc}") from None
        if not isinstance(inner, nn.Module):
            raise ValueError(f"{self.source}: built an {type(inner).__name__}, not an nn.Module")
        return inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if "n" in self.named and self.n != x.shape[1]:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(self.seed + x.shape[1])
                self.inner, self.n = self._inner(x.shape[1]).to(device=x.device, dtype=x.dtype), x.shape[1]
        y = self.inner(x)
        y = y[0] if isinstance(y, (tuple, list)) and y else y
        if not isinstance(y, torch.Tensor) or y.shape != x.shape:
            got = tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__
            raise ValueError(f"{self.source}: returned {got} for an input of {tuple(x.shape)}; it must keep the shape")
        return y

    @classmethod
    def flops(cls, batch: int, n: int, cfg: LayerConfig) -> int:
        return _at(cls, batch, n, cfg, False)[0]

    @classmethod
    def backward_flops(cls, batch: int, n: int, cfg: LayerConfig, device: str = "cpu") -> int:
        return _at(cls, batch, n, cfg, True)[0] - cls.flops(batch, n, cfg)

    @classmethod
    def activation_bytes(cls, batch: int, n: int, cfg: LayerConfig, elem_bytes: int) -> int:
        return _at(cls, batch, n, cfg, False)[1]

    @classmethod
    def min_bytes(cls, batch: int, n: int, cfg: LayerConfig, elem_bytes: int, cache_bytes=None) -> int:
        return 2 * batch * n * cfg.d * elem_bytes + models.parameter_bytes(cls.__name__, cfg)


class _Stepping:
    """Decode through the layer's own step interface (docs/adding-a-layer.md); a step's FLOPs counted on meta."""

    def prefill(self, x):
        return self.inner.prefill(x)

    def cache(self, state, t, capacity):
        return self.inner.cache(state, t, capacity)

    def step(self, x_t, cache, t):
        return self.inner.step(x_t, cache, t)

    @classmethod
    def decode_flops(cls, batch: int, t: int, cfg: LayerConfig) -> int:
        return _decode_on_meta(cls, batch, t, cfg)[0]

    @classmethod
    def decode_state_bytes(cls, batch: int, t: int, cfg: LayerConfig, elem_bytes: int) -> int:
        return _decode_on_meta(cls, batch, t, cfg)[1]


@functools.cache
def _decode_on_meta(cls: type[OutsideLayer], batch: int, t: int, cfg: LayerConfig) -> tuple[int, int]:
    with torch.device("meta"), torch.no_grad():
        layer, dtype = cls(cfg).to(cfg.torch_dtype), cfg.torch_dtype
        state = layer.prefill(torch.empty(batch, t, cfg.d, dtype=dtype))
        cache, token = layer.cache(state, t, t + 1), torch.empty(batch, 1, cfg.d, dtype=dtype)
        return count_flops(lambda: layer.step(token, cache, t)).total, models.state_bytes(state)


class _OutputBytes(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.bytes += sum(t.nbytes for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor))
        return out


def _meta_call(cls: type[OutsideLayer], batch: int, n: int, cfg: LayerConfig, trains: bool):
    with torch.device("meta"):
        layer = cls(cfg).to(cfg.torch_dtype)
        x = torch.empty(batch, n, cfg.d, dtype=cfg.torch_dtype, requires_grad=trains)

    def call():
        with torch.device("meta"), torch.enable_grad() if trains else torch.no_grad():
            y = layer(x)
            if trains:
                y.backward(torch.empty_like(y))

    return layer, call


@functools.cache
def _on_meta(cls: type[OutsideLayer], batch: int, n: int, cfg: LayerConfig, trains: bool) -> tuple[FlopCount, int]:
    _, call = _meta_call(cls, batch, n, cfg, trains)
    outputs = _OutputBytes()

    def counted():
        with outputs:
            call()

    return count_flops(counted), outputs.bytes


FUSED_STEPS = tuple(f"aten.{op}" for op in "lstm gru rnn_tanh rnn_relu mkldnn_rnn_layer _cudnn_rnn mkldnn_rnn".split())


class _Ops(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.add(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


def steps_hidden(layer: nn.Module, x: torch.Tensor) -> list[str]:
    """The fused recurrent operators (aten.lstm, ...) its forward runs: steps no operator depth can see."""
    ops = _Ops()
    with torch.no_grad(), ops:
        layer(x)
    return [name for name in FUSED_STEPS if name in ops.names]


def _at(cls: type[OutsideLayer], batch: int, n: int, cfg: LayerConfig, trains: bool) -> tuple[int, int]:
    try:
        counts = [_on_meta(cls, batch, m, cfg, trains) for m in META_NS] if n > META_NS[-1] else None
    except Exception:
        counts = None
    if counts is None:
        counted, out_bytes = _on_meta(cls, batch, n, cfg, trains)
        return counted.total, out_bytes
    through = [np.polyfit(META_NS, values, 2) for values in ([c.total for c, _ in counts], [b for _, b in counts])]
    return tuple(max(0, round(float(np.polyval(coefficients, n)))) for coefficients in through)


def meta_count(spec) -> FlopCount:
    n = spec.n + 1 if spec.mode == "recompute" else spec.n
    return _on_meta(models.LAYERS[spec.layer], spec.batch, n, spec.config(), spec.trains)[0]


_NODES = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.Name, ast.Constant, ast.Load, ast.Call)
_OPERATORS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.Pow, ast.USub)
_FUNCTIONS = {"log": np.log, "log2": np.log2, "sqrt": np.sqrt, "__builtins__": {}}


def _python(text: str) -> str:
    return text.replace("^", "**").replace("·", "*")


@dataclass(frozen=True)
class Expected:
    text: str
    sizes: tuple[str, ...] = ()
    fit_n_over_d = None

    @classmethod
    def parse(cls, text: str) -> Expected:
        try:
            nodes = list(ast.walk(ast.parse(_python(text), mode="eval")))
        except SyntaxError:
            nodes = []
        names = {node.id for node in nodes if isinstance(node, ast.Name)} - set(_FUNCTIONS)
        sound = all(
            isinstance(node, (*_NODES, *_OPERATORS))
            and not (isinstance(node, ast.Call) and getattr(node.func, "id", None) not in _FUNCTIONS)
            and not (isinstance(node, ast.Constant) and not isinstance(node.value, (int, float)))
            for node in nodes
        )
        if not nodes or not sound or not names <= {"n", "d", "k", "window"}:
            raise BadInput(f"--expect {text!r}: an expression in n, d, k, window with + - * / ** and log, log2, sqrt")
        return cls(text, tuple(sorted(names - {"n", "d"})))

    @property
    def compute_text(self) -> str:
        return f"O({self.text})"

    def cost(self, n, d, k=None, window=None) -> np.ndarray:
        sizes = dict(n=n, d=d, k=k, window=window)
        return models.config._evaluate(
            lambda *a: eval(_python(self.text), dict(_FUNCTIONS), dict(zip(sizes, a))), *sizes.values()
        )


def expect(layers: list[str] | None, given: list[str] | None) -> None:
    for item in given or []:
        name, _, text = item.rpartition("=") if "=" in item.split("(")[0] else ("", "", item)
        targets = [name] if name else [layer for layer in layers or [] if is_outside(layer)]
        if not targets or any(not is_outside(t) for t in targets):
            raise BadInput(f"--expect {item}: names no layer from outside among --layers")
        for target in targets:
            models.LAYERS[target].expected = Expected.parse(text.strip())


def check_points(specs) -> None:
    """BadInput (exit 2, nothing stored) where a layer from a file fails on meta at a grid size, or cannot train."""
    for spec in dict.fromkeys(
        s for s in specs if is_outside(s.layer) and not models.LAYERS[s.layer].source.startswith("torch:")
    ):
        try:
            layer, call = _meta_call(models.LAYERS[spec.layer], 1, min(spec.n, CHECKED_N), spec.config(), spec.trains)
            call()
        except Exception as exc:
            raise BadInput(f"{spec.layer} at n={spec.n}, d={spec.d}: {type(exc).__name__}: {exc}") from None
        if spec.trains and not any(p.numel() for p in layer.parameters()):
            raise BadInput(f"{spec.layer}: no parameters, so --mode train trains nothing; measure it in inference")


def register(source: str) -> str:
    name, factory = _import(source)
    if name in models.LAYERS and getattr(models.LAYERS[name], "source", None) != source:
        raise BadInput(f"--layers {source}: {name} is already the name of a layer ({_describe(name)})")
    if not callable(factory):
        raise BadInput(f"--layers {source}: {name} is a {type(factory).__name__}, not an nn.Module or a function")
    named, takes_x = _sizes_named(factory)
    if "d" not in named and not takes_x and source.partition(":")[0] != "torch":
        raise BadInput(f"--layers {source}: {name} must take d, its width in and out")
    stated = getattr(factory, "cost", None)
    attrs = dict(
        expected=Expected.parse(stated) if isinstance(stated, str) else None,
        factory=staticmethod(factory) if inspect.isfunction(factory) else factory,
        named=named,
        takes_x=takes_x,
        source=source,
        uses=tuple(s for s in named if s not in ("d", "n")),
    )
    steps = (
        isinstance(factory, type)
        and "n" not in named
        and all(hasattr(factory, m) for m in ("prefill", "cache", "step"))
    )
    models.LAYERS[name] = type(name, (_Stepping, OutsideLayer) if steps else (OutsideLayer,), attrs)
    return name


def _describe(name: str) -> str:
    return getattr(models.LAYERS[name], "source", "built in")


def is_outside(name: str) -> bool:
    return isinstance(models.LAYERS.get(name), type) and issubclass(models.LAYERS[name], OutsideLayer)


def restore(entries: dict | None) -> None:
    for name, entry in (entries or {}).items():
        if name in models.LAYERS:
            continue
        try:
            register(entry["source"])
        except BadInput:
            models.LAYERS[name] = type(name, (OutsideLayer,), dict(source=entry["source"], uses=tuple(entry["uses"])))
        if entry.get("expect"):
            models.LAYERS[name].expected = Expected.parse(entry["expect"])


def sources(names) -> dict[str, dict]:
    def entry(cls) -> dict:
        return {"source": cls.source, "uses": list(cls.uses), "expect": cls.expected and cls.expected.text}

    return {name: entry(models.LAYERS[name]) for name in names if is_outside(name)}
