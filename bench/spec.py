"""Sweep points: frozen specs, expanded from a grid and validated before anything is measured."""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import asdict, dataclass, fields

import models

from .errors import BadInput

MODES = ("inference", "train", "decode", "recompute")
DEFAULT_MODE, TRAIN_MODE, DECODE_MODE, RECOMPUTE_MODE = MODES
DECODE_MODES = (DECODE_MODE, RECOMPUTE_MODE)


@dataclass(frozen=True, order=True)
class PointSpec:
    """One measured point. Sizes the layer does not use are None (and empty in points.csv)."""

    layer: str
    n: int
    d: int
    batch: int = 1
    k: int | None = None
    heads: int | None = None
    window: int | None = None
    dilation: int | None = None
    device: str = "cpu"
    dtype: str = "float32"
    mode: str = DEFAULT_MODE
    causal: bool = False

    @property
    def trains(self) -> bool:
        return self.mode == TRAIN_MODE

    @property
    def decodes(self) -> bool:
        return self.mode in DECODE_MODES

    @property
    def key(self) -> str:
        """A stable id inside a run (for --resume); the default mode and causal left unsaid, as before they existed."""
        return "|".join(
            f"{f.name}={getattr(self, f.name)}"
            for f in fields(self)
            if not (f.name == "mode" and self.mode == DEFAULT_MODE) and not (f.name == "causal" and not self.causal)
        )

    @property
    def point_id(self) -> str:
        """The short id in points.csv and timings.jsonl, a hash of `key`."""
        return hashlib.sha1(self.key.encode()).hexdigest()[:12]

    def config(self) -> models.LayerConfig:
        return models.LayerConfig.of(
            self.d,
            self.dtype,
            k=self.k,
            heads=self.heads,
            window=self.window,
            dilation=self.dilation,
            causal=self.causal or self.decodes,
        )

    def as_row(self) -> dict:
        return asdict(self)


# A point's fields by role: every list of sizes or of what makes a point derives from these.
SIZES = ("n", "d", "batch", "k", "heads", "window", "dilation")
LAYER_SIZES = SIZES[3:]  # the sizes only some layers use (None elsewhere): models' `uses`
WHERE = ("device", "dtype", "mode", "causal")
IDENTITY = ("layer", *SIZES, *WHERE)  # what makes a point: PointSpec's fields; equal identity, same point


def device_key(device: str, dtype: str) -> str:
    """`cpu`, `cuda`, `cuda-bfloat16` (float32 left unsaid): the key of a compute peak and a source label."""
    return device if dtype == "float32" else f"{device}-{dtype}"


def device_keys(points) -> list[str]:
    return [device_key(str(device), str(dtype)) for device, dtype in zip(points["device"], points["dtype"])]


def mode_of(points) -> list[str]:
    """The mode of every row of a points table; rows stored before the `mode` column are inference."""
    if "mode" not in points:
        return [DEFAULT_MODE] * len(points)
    return [DEFAULT_MODE if not isinstance(m, str) or not m else m for m in points["mode"]]


def flag_of(points, column: str) -> list[bool]:
    """A boolean column of a points table as read back from its CSV (True, "True", 1.0); missing (older): False."""
    if column not in points:
        return [False] * len(points)
    return [c is True or str(c).lower() in ("true", "1", "1.0") for c in points[column]]


def causal_of(points) -> list[bool]:
    return flag_of(points, "causal")


def source_key(device: str, dtype: str, mode: str, causal: bool = False) -> str:
    """`device_key`, mode (inference unsaid) and causal form, what may share a fit: `cpu-train`, `cpu-causal`."""
    key = device_key(device, dtype)
    key = key if mode == DEFAULT_MODE else f"{key}-{mode}"
    return f"{key}-causal" if causal and mode not in DECODE_MODES else key


def source_keys(points) -> list[str]:
    return [
        source_key(str(device), str(dtype), mode, causal)
        for device, dtype, mode, causal in zip(points["device"], points["dtype"], mode_of(points), causal_of(points))
    ]


def kernel_wider_than_sequence(layer: str, n: int, k: int | None) -> bool:
    return k is not None and "k" in models.LAYERS[layer].uses and k > n


def _positive(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadInput(f"{name}={value!r}: must be a positive integer")
    return value


def validate(spec: PointSpec) -> PointSpec:
    """The spec unchanged, or BadInput naming the bad value and what is allowed (models' `check` included)."""
    if spec.layer not in models.LAYERS:
        raise BadInput(f"layer {spec.layer!r} is not built; allowed: {', '.join(models.LAYERS)}")
    for name in ("n", "d", "batch"):
        _positive(name, getattr(spec, name))
    if spec.dtype not in models.DTYPES:
        raise BadInput(f"dtype {spec.dtype!r}: allowed: {', '.join(models.DTYPES)}")
    if spec.device not in ("cpu", "cuda"):
        raise BadInput(f"device {spec.device!r}: allowed: cpu, cuda")
    if spec.mode not in MODES:
        raise BadInput(f"mode {spec.mode!r}: allowed: {', '.join(MODES)}")
    if spec.mode == DECODE_MODE and not hasattr(models.LAYERS[spec.layer], "step"):
        raise BadInput(
            f"{spec.layer} has no step interface (prefill, cache, step: docs/adding-a-layer.md): its decode is absent; "
            "--mode recompute decodes any layer by its forward over the prefix"
        )
    for name in models.LAYERS[spec.layer].uses:
        if getattr(spec, name) is None:
            raise BadInput(f"{spec.layer} needs {name}: give --{name}")
        _positive(name, getattr(spec, name))
    try:
        models.check(spec.layer, spec.config(), spec.n)
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    return spec


# A layer whose dilation grows along its stack is swept as the stack's layer 1 (k for conv_dilated).
SWEPT_STACK_LAYER = 1


def expand_grid(
    layers,
    n,
    d,
    k=(3,),
    heads=(1,),
    window=(None,),
    batch=(1,),
    devices=("cpu",),
    dtypes=("float32",),
    dilation=(None,),
    modes=(DEFAULT_MODE,),
    causal: bool = False,
) -> list[PointSpec]:
    """The product, unused sizes None so no point repeats; n innermost, so an n-sweep runs smallest first."""
    specs: list[PointSpec] = []
    seen: set[PointSpec] = set()
    for layer, device, dtype, mode, b, dd, kk, hh, ww, dil, nn in itertools.product(
        layers, devices, dtypes, modes, batch, d, k, heads, window, dilation, n
    ):
        if layer not in models.LAYERS:
            raise BadInput(f"layer {layer!r} is not built; allowed: {', '.join(models.LAYERS)}")
        cls = models.LAYERS[layer]
        if "dilation" in cls.uses and dil is None and isinstance(kk, int):
            dil = cls.path.stack_dilation(SWEPT_STACK_LAYER, kk)
        sizes = dict(zip(LAYER_SIZES, (kk, hh, ww, dil)))
        spec = PointSpec(
            layer=layer,
            n=nn,
            d=dd,
            batch=b,
            **{name: value if name in cls.uses else None for name, value in sizes.items()},
            device=device,
            dtype=dtype,
            mode=mode,
            causal=causal and mode not in DECODE_MODES,
        )
        if spec not in seen:
            seen.add(spec)
            specs.append(spec)
    return [validate(s) for s in specs]
