"""numbers.json (every citable number of the report, by key) and `cite`, which reads it back."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import BadInput, RunFailed
from .context import Number, format_value


def numbers_document(numbers: dict[str, Number], runs: dict[str, dict]) -> dict:
    return {
        "about": "Every number shown in report.md, by key: value, unit, interval (95 %) where there is one, "
        "and the run and machine that produced it. `python -m bench cite KEY` prints one.",
        "runs": {
            rid: {
                k: meta.get(k)
                for k in (
                    "run_id",
                    "started_utc",
                    "finished_utc",
                    "status",
                    "command",
                    "preset",
                    "git_commit",
                    "git_dirty",
                    "torch",
                    "cpu_model",
                    "machine",
                    "devices",
                )
            }
            for rid, meta in runs.items()
        },
        "numbers": {key: numbers[key].as_dict() for key in sorted(numbers)},
    }


def load_numbers(reports_dir: Path) -> dict:
    path = reports_dir / "numbers.json"
    if not path.exists():
        raise BadInput(f"--reports {reports_dir}: no numbers.json there; run `python -m bench report` first")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise RunFailed(f"{path}: damaged, not valid JSON ({exc})") from None


def cite_sentence(key: str, reports_dir: Path) -> str:
    """One sentence a teacher can paste: the number, its interval, and where it was measured."""
    doc = load_numbers(reports_dir)
    numbers = doc.get("numbers", {})
    if key not in numbers:
        close = [k for k in numbers if key.split(".")[0] in k][:5] or list(numbers)[:5]
        raise BadInput(
            f"cite: no number {key!r} in {reports_dir / 'numbers.json'}; "
            f"{len(numbers)} keys there, e.g. {', '.join(close)}"
        )
    number = numbers[key]
    run = doc.get("runs", {}).get(number["run_id"], {})
    text = format_value(number["value"], number.get("unit", ""))
    if "interval" in number:
        low, high = number["interval"]
        text += f" (95 % interval {format_value(low)} to {format_value(high)})"
    commit = (run.get("git_commit") or "unknown")[:12] + (" with local changes" if run.get("git_dirty") else "")
    when = (run.get("finished_utc") or run.get("started_utc") or "an unknown date")[:10]
    note = f" {number['note']}." if number.get("note") else ""
    return (
        f"{key} = {text}, measured on {number.get('machine', 'an unknown machine')} in run "
        f"{number['run_id']} ({when}, torch {run.get('torch', '?')}, commit {commit}).{note}"
    )
