"""numbers.json (every citable number of the report, by key) and `cite`, which reads it back."""

from __future__ import annotations

import fnmatch
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
            | ({"machines": meta["machines"]} if meta.get("machines") else {})  # a cluster sweep's
            for rid, meta in runs.items()
        },
        "numbers": {key: numbers[key].as_dict() for key in sorted(numbers)},
    }


GLOB_CHARACTERS = "*?["  # a PATTERN of `cite --list` with one of these is a shell glob, else a substring


def load_numbers(reports_dir: Path) -> dict:
    path = reports_dir / "numbers.json"
    if not path.exists():
        raise BadInput(
            f"{path}: not found; run `python -m bench report` first (it writes numbers.json), "
            f"or give --reports DIR, the folder of a report"
        )
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise RunFailed(f"{path}: damaged, not valid JSON ({exc})") from None


def matches(key: str, pattern: str | None) -> bool:
    if not pattern:
        return True
    if any(c in pattern for c in GLOB_CHARACTERS):
        return fnmatch.fnmatchcase(key, pattern)
    return pattern in key


def list_numbers(pattern: str | None, reports_dir: Path) -> list[str]:
    """`cite --list [PATTERN]`: each matching key with its value and unit, sorted; none is a BadInput."""
    numbers = load_numbers(reports_dir).get("numbers", {})
    keys = sorted(key for key in numbers if matches(key, pattern))
    if not keys and pattern:
        kind = "glob" if any(c in pattern for c in GLOB_CHARACTERS) else "substring"
        raise BadInput(
            f"cite --list {pattern}: no key of {reports_dir / 'numbers.json'} matches this {kind} "
            f"({len(numbers)} keys there, e.g. {', '.join(sorted(numbers)[:3])})"
        )
    width = max((len(key) for key in keys), default=0)
    return [f"{key:{width}s}  {format_value(numbers[key]['value'], numbers[key].get('unit', ''))}" for key in keys]


def cite_sentence(key: str, reports_dir: Path) -> str:
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
