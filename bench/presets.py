"""Presets: named sweeps stored as data in presets.toml."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from .errors import BadInput
from .spec import DEFAULT_MODE, PointSpec, expand_grid
from .timing import TimingPolicy

PRESETS_FILE = Path(__file__).with_name("presets.toml")
GRID_KEYS = {"what", "layers", "n", "d", "k", "heads", "window", "batch", "dtype", "dilation", "mode"}


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    grids: tuple[dict, ...]
    timing: TimingPolicy
    paths: tuple[dict, ...]  # the path-length studies `paths --preset` measures (layers, n, k, window each)

    def specs(self, devices: list[str], dtype: str | None = None, mode: str | None = None) -> list[PointSpec]:
        """Every point of the preset on each device; `dtype` and `mode` (if given) replace the grids' dtypes
        and modes."""
        specs: list[PointSpec] = []
        for grid in self.grids:
            for spec in expand_grid(
                layers=grid["layers"],
                n=grid["n"],
                d=grid["d"],
                k=grid.get("k", [3]),
                heads=grid.get("heads", [1]),
                window=grid.get("window", [None]),
                batch=grid.get("batch", [1]),
                devices=devices,
                dtypes=[dtype] if dtype else grid.get("dtype", ["float32"]),
                dilation=grid.get("dilation", [None]),
                modes=[mode] if mode else grid.get("mode", [DEFAULT_MODE]),
            ):
                if spec not in specs:
                    specs.append(spec)
        return specs


def load_presets(path: Path = PRESETS_FILE) -> dict[str, Preset]:
    with open(path, "rb") as f:
        data = tomllib.load(f)
    presets = {}
    for name, body in data.items():
        for grid in body.get("grid", []):
            unknown = set(grid) - GRID_KEYS
            if unknown:
                raise ValueError(f"{path}: preset {name!r} has unknown grid keys {sorted(unknown)}")
        presets[name] = Preset(
            name=name,
            description=body.get("description", ""),
            grids=tuple(body.get("grid", [])),
            timing=TimingPolicy(**body.get("timing", {})),
            paths=_studies(body.get("paths")),
        )
    return presets


def _studies(paths: dict | list | None) -> tuple[dict, ...]:
    """A preset's path-length studies: `[NAME.paths]` is one, `[[NAME.paths]]` (an array of tables) several,
    each with its own layers and lengths (a scan's depth to n = 4096 without a k = 3 stack of 4095
    convolutions)."""
    if paths is None:
        return ()
    return (paths,) if isinstance(paths, dict) else tuple(paths)


def get_preset(name: str) -> Preset:
    presets = load_presets()
    if name not in presets:
        raise BadInput(f"preset {name!r} does not exist; allowed: {', '.join(presets)}")
    return presets[name]
