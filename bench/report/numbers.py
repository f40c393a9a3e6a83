"""numbers.json (every citable number of the report, by key) and `cite`, which reads it back."""

from __future__ import annotations

import csv
import difflib
import fnmatch
import json
import re
from pathlib import Path

from .. import storage
from ..errors import BadInput, RunFailed
from .context import Number, format_value, latex_escape


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
REPORTS_ROOT = storage.RESULTS_ROOT.parent / "reports"
LOCAL_REPORT_DIR = REPORTS_ROOT / "local"  # `report`'s default --out, ignored by git; reference/ is the shipped one
REFERENCE_REPORT_DIR = REPORTS_ROOT / "reference"
FIT_KEY = re.compile(
    r"^(?P<source>.+)\.(?P<layer>\w+)\.(?P<metric>\w+)\.exponent_(?P<variable>[a-z]+)(\.(?P<sweep>.+))?$"
)


def default_reports() -> list[Path]:
    """Where `cite` looks without --reports, in this order: this machine's report, then the shipped one."""
    return [LOCAL_REPORT_DIR, REFERENCE_REPORT_DIR]


def well_formed(entry) -> bool:
    """An entry of numbers.json `cite` can read: an object with a `value` and the `run_id` it came from."""
    return isinstance(entry, dict) and "value" in entry and isinstance(entry.get("run_id"), str)


def damaged_entries(doc: dict) -> list[str]:
    return sorted(key for key, entry in doc["numbers"].items() if not well_formed(entry))


def load_reports(dirs: list[Path]) -> list[tuple[Path, dict]]:
    found = [d for d in dirs if (d / "numbers.json").exists()]
    if not found:
        raise BadInput(
            f"{' and '.join(_shown(d / 'numbers.json') for d in dirs)}: not found; run `python -m bench report` "
            f"first (it writes numbers.json), or give --reports DIR, the folder of a report"
        )
    loaded = []
    for folder in found:
        path = folder / "numbers.json"
        try:
            doc = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise RunFailed(f"{path}: damaged, not valid JSON ({exc})") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("numbers"), dict):
            raise RunFailed(f"{path}: damaged, expected an object whose `numbers` is an object of entries")
        if not isinstance(doc.get("runs", {}), dict):
            raise RunFailed(f"{path}: damaged, `runs` is not an object")
        loaded.append((folder, doc))
    return loaded


def _where(dirs: list[Path]) -> str:
    return " or ".join(
        _shown(d / "numbers.json") + ("" if (d / "numbers.json").exists() else " (none yet: `report` writes it)")
        for d in dirs
    )


def _shown(path: Path) -> str:
    where = path.resolve()
    return str(where.relative_to(Path.cwd())) if where.is_relative_to(Path.cwd()) else str(path)


def matches(key: str, pattern: str | None) -> bool:
    if not pattern:
        return True
    if any(c in pattern for c in GLOB_CHARACTERS):
        return fnmatch.fnmatchcase(key, pattern)
    return pattern in key


def list_numbers(pattern: str | None, dirs: list[Path], fmt: str = "text") -> tuple[list[str], list[str]]:
    """`cite --list [PATTERN]`: (a line per matching key, with its value and report; warnings of damaged entries)."""
    found: dict[str, tuple[dict, Path]] = {}
    warnings = []
    for folder, doc in load_reports(dirs):
        damaged = damaged_entries(doc)
        if damaged:
            warnings.append(
                f"warning: {_shown(folder / 'numbers.json')}: {len(damaged)} damaged entries left out (not an "
                f"object with `value` and `run_id`): {', '.join(damaged[:5])}{' …' if len(damaged) > 5 else ''}"
            )
        for key, number in doc["numbers"].items():
            if well_formed(number):
                found.setdefault(key, (number, folder))
    keys = sorted(key for key in found if matches(key, pattern))
    if not keys and pattern:
        kind = "glob" if any(c in pattern for c in GLOB_CHARACTERS) else "substring"
        raise BadInput(
            f"cite --list {pattern}: no key of {_where(dirs)} matches this {kind} "
            f"({len(found)} keys there, e.g. {', '.join(sorted(found)[:3])})"
        )
    if fmt != "text":
        return cited_list([(key, *found[key]) for key in keys], fmt), warnings
    width = max((len(key) for key in keys), default=0)
    values = {key: format_value(found[key][0]["value"], found[key][0].get("unit", "")) for key in keys}
    if len(dirs) == 1:
        return [f"{key:{width}s}  {values[key]}" for key in keys], warnings
    value_width = max((len(value) for value in values.values()), default=0)
    return [f"{key:{width}s}  {values[key]:{value_width}s}  {_shown(found[key][1])}" for key in keys], warnings


def sweep_tag(fixed: str, batch) -> str:
    """A fit's sweep as its cite key ends, "d64.heads4.b4": two batches at the same sizes are two keys."""
    return f"{fixed.replace(', ', '.').replace('=', '')}.b{int(float(batch))}"


def unfitted_reason(key: str, dirs: list[Path]) -> str | None:
    """Why a fitted exponent's key is in no numbers.json: its sweeps' verdicts and reasons from fits.csv."""
    parts = FIT_KEY.match(key)
    if parts is None:
        return None
    wanted = {name: parts[name] for name in ("source", "layer", "metric", "variable")}
    sweep = (parts["sweep"] or "").removesuffix(".predicted")
    for folder in dirs:
        if not (folder / "fits.csv").exists():
            continue
        with open(folder / "fits.csv", newline="") as table:
            rows = [
                row
                for row in csv.DictReader(table)
                if all(row.get(k) == v for k, v in wanted.items())
                and (not sweep or sweep_tag(row["fixed"], row["batch"]) == sweep)
            ]
        if rows:
            sweeps = "; ".join(
                f"{row['fixed']}, batch {int(float(row['batch']))}: {row['verdict']} "
                + (f"(exponent {float(row['exponent']):.3g})" if row["exponent"] else "(no exponent)")
                + f", {row['reason']}"
                for row in rows
            )
            what = f"{wanted['layer']} {wanted['metric']} in {wanted['variable']} on {wanted['source']}"
            return f"the fit of {what} has no exponent to cite ({_shown(folder / 'fits.csv')}): {sweeps}"
    return None


def cite_sentence(key: str, dirs: Path | list[Path], fmt: str = "text") -> str:
    dirs = [dirs] if isinstance(dirs, Path) else dirs
    reports = load_reports(dirs)
    folder, doc = next(((folder, doc) for folder, doc in reports if key in doc["numbers"]), (None, None))
    if doc is None:
        reason = unfitted_reason(key, [folder for folder, _ in reports])
        if reason is not None:
            raise BadInput(f"cite: no number {key!r} in {_where(dirs)}: {reason}")
        numbers = list(dict.fromkeys(k for _, d in reports for k in d.get("numbers", {})))
        meant = difflib.get_close_matches(key, numbers, n=3, cutoff=0.9)
        if meant:
            raise BadInput(f"cite: no number {key!r} in {_where(dirs)}; did you mean {' or '.join(meant)}?")
        close = [k for k in numbers if key.split(".")[0] in k][:5] or numbers[:5]
        raise BadInput(f"cite: no number {key!r} in {_where(dirs)}; {len(numbers)} keys there, e.g. {', '.join(close)}")
    number = doc["numbers"][key]
    if not well_formed(number):
        raise RunFailed(
            f"{folder / 'numbers.json'}: damaged entry {key!r}: expected an object with `value` and `run_id`"
        )
    return cited(key, number, doc.get("runs", {}).get(number["run_id"]), fmt)


FORMATS = ("text", "markdown", "latex")


def _source(number: dict, run) -> str:
    run = run if isinstance(run, dict) else {}
    commit = (run.get("git_commit") or "unknown")[:12] + (" with local changes" if run.get("git_dirty") else "")
    where = number.get("machine", "an unknown machine") + (f", {number['device']}" if number.get("device") else "")
    when = (run.get("finished_utc") or run.get("started_utc") or "an unknown date")[:10]
    return f"measured on {where} in run {number['run_id']} ({when}, torch {run.get('torch', '?')}, commit {commit})"


def _value(number: dict, fmt: str) -> str:
    unit = number.get("unit", "")
    low, high = number.get("interval") or (None, None)
    if fmt == "latex":
        value = latex_escape(format_value(number["value"], "" if unit == "x" else unit)) + (
            r"$\times$" if unit == "x" else ""
        )
        return value + (f"~[{format_value(low)}, {format_value(high)}]" if low is not None else "")
    value = format_value(number["value"], unit)
    if fmt == "markdown":
        return value + (f" [{format_value(low)}, {format_value(high)}]" if low is not None else "")
    return value + (f" (95 % interval {format_value(low)} to {format_value(high)})" if low is not None else "")


def _latex_source(key: str, number: dict, run) -> str:
    return (
        r"\footnote{"
        + latex_escape(_source(number, run)[0].upper() + _source(number, run)[1:])
        + rf"; \texttt{{{latex_escape(key)}}}.}}"
    )


def cited(key: str, number: dict, run, fmt: str = "text") -> str:
    """One number in `fmt` (FORMATS): its value, interval and unit, and where it came from."""
    if fmt == "latex":
        return _value(number, fmt) + _latex_source(key, number, run)
    if fmt == "markdown":
        label = re.sub(r"[^A-Za-z0-9]+", "-", key).strip("-")
        return f"{_value(number, fmt)}[^{label}]\n\n[^{label}]: `{key}`: {_source(number, run)}."
    note = f" {number['note']}." if number.get("note") else ""
    return f"{key} = {_value(number, fmt)}, {_source(number, run)}.{note}"


def cited_list(entries: list[tuple[str, dict, Path]], fmt: str) -> list[str]:
    """`cite --list --format markdown|latex`: a list to paste; in markdown one footnote per run's provenance."""
    docs = {folder: json.loads((folder / "numbers.json").read_text()) for _, _, folder in entries}
    runs = [docs[folder].get("runs", {}).get(number["run_id"]) for _, number, folder in entries]
    if fmt == "latex":
        items = [rf"\item \texttt{{{latex_escape(k)}}}: {cited(k, n, r, fmt)}" for (k, n, _), r in zip(entries, runs)]
        return [r"\begin{itemize}", *items, r"\end{itemize}"]
    notes: dict[str, int] = {}
    lines = [
        f"- `{key}`: {_value(number, fmt)}[^{notes.setdefault(_source(number, run), len(notes) + 1)}]"
        for (key, number, _), run in zip(entries, runs)
    ]
    return [*lines, "", *(f"[^{label}]: {source[0].upper()}{source[1:]}." for source, label in notes.items())]
