"""Presets: named sweeps stored as data in presets.toml."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from .errors import BadInput
from .policy import TimingPolicy
from .spec import DECODE_MODES, DEFAULT_MODE, SIZES, WHERE, PointSpec, expand_grid

PRESETS_FILE = Path(__file__).with_name("presets.toml")
GRID_KEYS = {"what", "layers", *SIZES, *WHERE} - {"device"}  # the device is the command line's


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    grids: tuple[dict, ...]
    timing: TimingPolicy
    paths: tuple[dict, ...]  # the path-length studies `paths --preset` measures (layers, n, k, window each)
    device: str | None = None  # the device it is sized for, if not every one
    cpu_instead: str = ""  # the presets to name where that device is missing
    planned: bool = False  # bench.auto

    def specs(self, devices: list[str], dtype: str | None = None, mode: str | None = None) -> list[PointSpec]:
        """Every point on each device; `dtype` and `mode` replace the grids' (a decode mode: its decode grids only)."""
        if self.planned:
            raise ValueError(f"preset {self.name}: its points are planned at the run's start (bench.auto)")
        specs: list[PointSpec] = []
        for grid in self.grids:
            decodes = any(m in DECODE_MODES for m in grid.get("mode", [DEFAULT_MODE]))
            if mode and decodes != (mode in DECODE_MODES):
                continue
            for spec in expand_grid(
                layers=grid["layers"],
                **{size: grid[size] for size in SIZES if size in grid},
                devices=devices,
                dtypes=[dtype] if dtype else grid.get("dtype", ["float32"]),
                modes=[mode] if mode else grid.get("mode", [DEFAULT_MODE]),
                causal=grid.get("causal", False),
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
        paths = body.get("paths")  # `[NAME.paths]` is one study, `[[NAME.paths]]` several
        presets[name] = Preset(
            name=name,
            description=body.get("description", ""),
            grids=tuple(body.get("grid", [])),
            timing=TimingPolicy(**body.get("timing", {})),
            paths=() if paths is None else (paths,) if isinstance(paths, dict) else tuple(paths),
            device=body.get("device"),
            cpu_instead=body.get("cpu_instead", ""),
            planned=body.get("planned", False),
        )
    return presets


def get_preset(name: str) -> Preset:
    presets = load_presets()
    if name not in presets:
        raise BadInput(f"preset {name!r} does not exist; allowed: {', '.join(presets)}")
    return presets[name]
