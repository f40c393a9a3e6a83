"""What every report section gets: the stored data, `cite` (a number shown, for numbers.json) and `figure`."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from ..machine import machine_identity
from ..spec import SIZES
from .drawing import png
from .load import REFERENCE

SIZES_SHOWN = tuple(s for s in SIZES if s not in ("batch", "dilation"))  # the sizes a table of points shows


@dataclass(frozen=True)
class Number:
    key: str
    value: float | int | str
    unit: str
    run_id: str
    machine: str
    interval: tuple[float, float] | None = None
    note: str = ""
    text: str = ""  # as the report shows it
    clock: str = ""
    device: str = ""

    def as_dict(self) -> dict:
        out = {"value": self.value, "unit": self.unit, "run_id": self.run_id, "machine": self.machine}
        if self.text:
            out["text"] = self.text
        if self.interval is not None:
            out["interval"] = list(self.interval)
        if self.clock:
            out["clock"] = self.clock
        if self.device:
            out["device"] = self.device
        if self.note:
            out["note"] = self.note
        return out


LATEX_SPECIAL = {c: "\\" + c for c in "_%&#${}"} | {"\\": r"\textbackslash{}", "~": r"\textasciitilde{}", "^": r"\^{}"}


def latex_escape(text: str) -> str:
    return re.sub(r"[\\_%&#${}~^]", lambda found: LATEX_SPECIAL[found.group()], text)


def format_value(value, unit: str = "", digits: int = 3) -> str:
    """3 significant digits, integers in full, the unit after."""
    if isinstance(value, str):
        text = value
    elif isinstance(value, (int,)) or (isinstance(value, float) and value.is_integer() and abs(value) < 1e15):
        text = f"{int(value):,}"
    elif isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        text = str(value)
    else:
        text = f"{value:.{digits}g}"
    if unit == "x":
        return f"{text}x"
    return f"{text} {unit}".strip() if unit and unit != "1" else text


@dataclass
class ReportContext:
    points: pd.DataFrame  # with `run_id` and `source`
    runs: dict[str, dict]  # run_id -> meta.json
    out_dir: Path
    paths: pd.DataFrame | None = None
    claims: pd.DataFrame | None = None
    numbers: dict[str, Number] = field(default_factory=dict)
    files: dict[str, bytes | str | pd.DataFrame] = field(default_factory=dict)  # written by build, in one place
    labels: dict[str, str] = field(default_factory=dict)  # source -> in words
    primary: str = ""  # the machine the report is about first (this machine, where it has runs)
    machines: dict[str, str] = field(default_factory=dict)  # source -> its machine
    notes: list[str] = field(default_factory=list)
    on_figure: Callable[[], object] | None = None
    draw: Callable[[plt.Figure], object] = png
    decode: pd.DataFrame | None = None
    fit_rows: pd.DataFrame | None = None
    decode_fit_rows: pd.DataFrame | None = None
    fit_texts: dict = field(default_factory=dict)
    decode_texts: dict = field(default_factory=dict)
    generate: pd.DataFrame | None = None
    decode_peers: pd.DataFrame | None = None  # bench.benchmarks.decode_peers' tables, with run_id
    default_policy: pd.DataFrame | None = None  # bench.default_policy's tables, with run_id

    def every_point(self) -> pd.DataFrame:
        frames = [f for f in (self.points, self.decode) if f is not None and len(f)]
        return pd.concat(frames, ignore_index=True) if frames else self.points

    def sources(self) -> list[str]:
        present = set(self.points["source"]) if "source" in self.points else set()
        return sorted(present, key=lambda s: (self.machine_of_source(s) != self.primary, s))

    def machine_words(self, machine: str) -> str:
        for source, words in self.labels.items():
            if self.machine_of_source(source) == machine:
                return words.split(" · ")[0]
        return machine

    def machine_of_source(self, source: str) -> str:
        return self.machines.get(source, source.rsplit(".", 1)[0])

    def source_tag(self, source: str) -> str:
        """A source in a table column: "here · cpu", "ref. Intel Xeon · cpu"."""
        device = source.rsplit(".", 1)[-1]
        if self.machine_of_source(source) == self.primary and not self.primary.startswith(f"{REFERENCE}."):
            return f"here · {device}"
        words = self.labels.get(source, source).split(" · ")[0].replace(f"{REFERENCE}: ", "ref. ")
        return f"{words.split(',')[0].split(' (')[0]} · {device}"

    def source_label(self, source: str) -> str:
        """ "intel-xeon-2c-vm.cpu" (a source: the prefix of its cite keys) as "Intel Xeon, 2 cores (vm) · cpu"."""
        return self.labels.get(source, source)

    @property
    def figures(self) -> list[Path]:
        return [Path(name) for name in self.files if name.startswith("figures/")]

    def machine_of(self, run_id: str) -> str:
        meta = self.runs.get(run_id, {})
        words = machine_identity(meta)[1] if meta else "unknown machine"
        return f"{words}, reference run" if meta.get("reference") else words

    def number_machine(self, key: str, run_id: str) -> str:
        """Its run's machine, or in a cluster sweep the machine of the source the key begins with."""
        meta = self.runs.get(run_id, {})
        source = next((s for s in self.labels if key.startswith(f"{s}.")), None) if meta.get("nodes") else None
        if source is None:
            return self.machine_of(run_id)
        words = self.labels[source].split(" · ")[0].removeprefix(f"{REFERENCE}: ")
        return f"{words}, reference run" if meta.get("reference") else words

    def number_device(self, key: str) -> str:
        """The device and mode of the longest source `key` begins with ("cuda-train (NVIDIA H200)"), or ""."""
        source = max((s for s in self.labels if key.startswith(f"{s}.")), key=len, default=None)
        return self.labels[source].partition(" · ")[2] if source else ""

    def cite(
        self,
        key: str,
        value,
        unit: str,
        run_id: str,
        interval=None,
        note: str = "",
        digits: int = 3,
        show_unit: bool = True,
        clock: str = "",
    ) -> str:
        """Register a number under a stable dotted `key` and return its text; a key cited twice must carry one value."""
        if (
            isinstance(value, float)
            and value.is_integer()
            and unit in ("FLOP", "B", "layers", "steps", "ops", "positions", "points")
        ):
            value = int(value)
        text = format_value(value, unit if show_unit else "", digits)
        if interval is not None:
            text += f" [{format_value(float(interval[0]), '', digits)}, {format_value(float(interval[1]), '', digits)}]"
        number = Number(
            key,
            value,
            unit,
            run_id,
            self.number_machine(key, run_id),
            None if interval is None else (float(interval[0]), float(interval[1])),
            note,
            text,
            clock,
            self.number_device(key),
        )
        old = self.numbers.get(key)
        if old is not None and old.value != number.value:
            raise ValueError(f"number {key!r} cited twice with different values: {old.value} and {value}")
        self.numbers.setdefault(key, number)
        return text

    def figure(self, fig: plt.Figure, name: str, alt: str, caption: str = "") -> str:
        """The figure drawn to PNG, kept with the report's files; its markdown: short alt text, the caption once."""
        self.files[f"figures/{name}.png"] = self.draw(fig)
        if self.on_figure is not None:
            self.on_figure()
        return f"![{alt}](figures/{name}.png)\n" + (f"\n*{caption}*\n" if caption else "")
