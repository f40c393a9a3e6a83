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


@dataclass(frozen=True)
class Number:
    key: str
    value: float | int | str
    unit: str
    run_id: str
    machine: str
    interval: tuple[float, float] | None = None
    note: str = ""

    def as_dict(self) -> dict:
        out = {"value": self.value, "unit": self.unit, "run_id": self.run_id, "machine": self.machine}
        if self.interval is not None:
            out["interval"] = list(self.interval)
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

    @property
    def fig_dir(self) -> Path:
        return self.out_dir / "figures"

    def machine_of(self, run_id: str) -> str:
        meta = self.runs.get(run_id, {})
        return meta.get("machine") or meta.get("cpu_model") or "unknown machine"

    def cite(self, key: str, value, unit: str, run_id: str, interval=None, note: str = "", digits: int = 3) -> str:
        """Register one number under `key` (stable, dotted: `cpu.attention.time.exponent_n`) and return
        its text for the report. A key cited twice must carry the same value."""
        if (
            isinstance(value, float)
            and value.is_integer()
            and unit in ("FLOP", "B", "layers", "steps", "ops", "positions", "points")
        ):
            value = int(value)
        number = Number(
            key,
            value,
            unit,
            run_id,
            self.machine_of(run_id),
            None if interval is None else (float(interval[0]), float(interval[1])),
            note,
        )
        old = self.numbers.get(key)
        if old is not None and old.value != number.value:
            raise ValueError(f"number {key!r} cited twice with different values: {old.value} and {value}")
        self.numbers[key] = number
        text = format_value(value, unit, digits)
        if interval is not None:
            text += f" [{format_value(float(interval[0]), '', digits)}, {format_value(float(interval[1]), '', digits)}]"
        return text

    def figure(self, fig: plt.Figure, name: str, caption: str) -> str:
        """Save `fig` as figures/<name>.png, close it, and return the markdown that shows it."""
        self.fig_dir.mkdir(parents=True, exist_ok=True)
        path = self.fig_dir / f"{name}.png"
        fig.savefig(path, dpi=110, bbox_inches="tight")
        plt.close(fig)
        self.figures.append(path)
        return f"![{caption}](figures/{name}.png)\n\n*{caption}*\n"
