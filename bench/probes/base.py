"""A probe: the columns it fills in points.csv and how it measures a point's prepared call. docs/adding-a-probe.md"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..spec import PointSpec

TYPES = ("int", "float", "bool", "text")


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # one of TYPES; int, float and bool columns are checked as finite numbers >= 0 when read back
    unit: str  # "s", "bytes", "FLOPs", "" (a count, a ratio or words)
    what: str

    def __post_init__(self):
        if self.type not in TYPES:
            raise ValueError(f"column {self.name}: type {self.type!r}, expected one of {TYPES}")


@dataclass(frozen=True)
class Call:
    run: Callable[[], object]  # one call: a forward pass (train: forward and backward; decode: one step)
    forward: Callable[[], object]  # its forward pass alone
    state_bytes: int | None = None  # decode: the state the step reads


def _nothing(spec: PointSpec) -> dict:
    return {}


@dataclass(frozen=True)
class Probe:
    name: str
    columns: tuple[Column, ...]
    measure: Callable[[Call, PointSpec], dict]  # once, on a point's first pass after its timed rounds
    predict: Callable[[PointSpec], dict] = _nothing  # the columns a formula fills, in every row

    def measured(self, call: Call, spec: PointSpec) -> dict:
        return self._only_own("measure", self.measure(call, spec))

    def predicted(self, spec: PointSpec) -> dict:
        return self._only_own("predict", self.predict(spec))

    def _only_own(self, how: str, values: dict) -> dict:
        foreign = set(values) - {c.name for c in self.columns}
        if foreign:
            raise ValueError(f"probe {self.name}: {how} filled {sorted(foreign)}, not among its columns")
        return values


PROBES: list[Probe] = []


def register(probe: Probe) -> Probe:
    taken = {c.name for p in PROBES for c in p.columns}
    if probe.name in {p.name for p in PROBES} or taken & {c.name for c in probe.columns}:
        raise ValueError(f"probe {probe.name}: its name or a column is registered already")
    PROBES.append(probe)
    return probe


def unregister(name: str) -> None:
    PROBES[:] = [p for p in PROBES if p.name != name]
