"""What every report section gets: the stored data, and the two ways it may put things in the report.

A section never writes a number into its text by hand: `ctx.cite(...)` registers the number under a stable
key (it lands in `reports/numbers.json` with its unit, interval and provenance) and returns the text to
show. Figures go through `ctx.figure(...)`, which saves the PNG under `reports/figures/` and returns the
markdown that embeds it. So every number and figure in the report is traceable to a stored run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # reports are written headless
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from ..machine import machine_identity  # noqa: E402
from .load import REFERENCE  # noqa: E402


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
    clock: str = ""  # a number made of times: the clock they were read on (bench.clock)

    def as_dict(self) -> dict:
        out = {"value": self.value, "unit": self.unit, "run_id": self.run_id, "machine": self.machine}
        if self.text:
            out["text"] = self.text
        if self.interval is not None:
            out["interval"] = list(self.interval)
        if self.clock:
            out["clock"] = self.clock
        if self.note:
            out["note"] = self.note
        return out


def format_value(value, unit: str = "", digits: int = 3) -> str:
    """Numbers as a reader wants them: 3 significant digits, integers in full, units spelled after."""
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
    points: pd.DataFrame  # every stored points.csv, concatenated, with a `run_id` column
    runs: dict[str, dict]  # run_id -> meta.json
    out_dir: Path
    paths: pd.DataFrame | None = None  # paths.csv rows (with run_id), if any run has one
    claims: pd.DataFrame | None = None  # claims.csv rows (with run_id), if any run has one
    numbers: dict[str, Number] = field(default_factory=dict)
    figures: list[Path] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)  # source -> its name in words (see source_label)
    primary: str = ""  # the machine the report is about first (this machine, where it has runs)
    machines: dict[str, str] = field(default_factory=dict)  # source -> its machine (the source's prefix)
    notes: list[str] = field(default_factory=list)  # what the reader should know about the runs chosen

    def sources(self) -> list[str]:
        """The sources with points, the primary machine's first, then by name."""
        present = set(self.points["source"]) if "source" in self.points else set()
        return sorted(present, key=lambda s: (self.machine_of_source(s) != self.primary, s))

    def machine_words(self, machine: str) -> str:
        """A machine (a source's prefix) in words, from the label of any of its sources."""
        for source, words in self.labels.items():
            if self.machine_of_source(source) == machine:
                return words.split(" · ")[0]
        return machine

    def machine_of_source(self, source: str) -> str:
        return self.machines.get(source, source.rsplit(".", 1)[0])

    def source_tag(self, source: str) -> str:
        """A short name of a source for a table column: "here · cpu" (this machine), "ref. Intel Xeon · cpu"."""
        device = source.rsplit(".", 1)[-1]
        if self.machine_of_source(source) == self.primary and not self.primary.startswith(f"{REFERENCE}."):
            return f"here · {device}"
        words = self.labels.get(source, source).split(" · ")[0].replace(f"{REFERENCE}: ", "ref. ")
        return f"{words.split(',')[0].split(' (')[0]} · {device}"

    def source_label(self, source: str) -> str:
        """A source (the `source` column: machine id and device, "intel-xeon-2c-vm.cpu", the key cite keys
        start with) in words for readers: "Intel Xeon, 2 cores (vm) · cpu"."""
        return self.labels.get(source, source)

    @property
    def fig_dir(self) -> Path:
        return self.out_dir / "figures"

    def machine_of(self, run_id: str) -> str:
        """The machine a run was measured on, in words (bench.machine.machine_identity)."""
        meta = self.runs.get(run_id, {})
        words = machine_identity(meta)[1] if meta else "unknown machine"
        return f"{words}, reference run" if meta.get("reference") else words

    def number_machine(self, key: str, run_id: str) -> str:
        """The machine a cited number was measured on: its run's, or, in a cluster sweep (whose rows each name
        their node's machine), the machine of the source the key begins with."""
        meta = self.runs.get(run_id, {})
        source = next((s for s in self.labels if key.startswith(f"{s}.")), None) if meta.get("nodes") else None
        if source is None:
            return self.machine_of(run_id)
        words = self.labels[source].split(" · ")[0].removeprefix(f"{REFERENCE}: ")
        return f"{words}, reference run" if meta.get("reference") else words

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
        """Register one number under `key` (stable, dotted: `intel-xeon-2c-vm.cpu.attention.time.exponent_n`)
        and return its text for the report (without the unit when show_unit is False, for text that says
        it once: "8 of 9 layers"). A number made of times names the `clock` they were read on (only points
        whose time is to be trusted on it go into one). A key cited twice must carry the same value."""
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
        )
        old = self.numbers.get(key)
        if old is not None and old.value != number.value:
            raise ValueError(f"number {key!r} cited twice with different values: {old.value} and {value}")
        self.numbers.setdefault(key, number)
        return text

    def figure(self, fig: plt.Figure, name: str, caption: str) -> str:
        """Save `fig` as figures/<name>.png, close it, and return the markdown that shows it."""
        self.fig_dir.mkdir(parents=True, exist_ok=True)
        path = self.fig_dir / f"{name}.png"
        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)
        self.figures.append(path)
        return f"![{caption}](figures/{name}.png)\n\n*{caption}*\n"
