"""Reading stored runs for the report (run folders, or folders of them to any depth) and choosing which of
them to show. method: docs/method.md"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from .. import machine, storage
from ..errors import BadInput, RunFailed
from ..folder import is_run_dir, read_meta, read_points

REFERENCE_DIR = storage.RESULTS_ROOT / "reference"
REFERENCE = "reference"  # the folder name that marks committed reference runs, and their sources' prefix


def _runs_below(path: Path, depth: int = 3) -> list[Path]:
    if is_run_dir(path):
        return [path]
    if depth == 0 or not path.is_dir():
        return []
    return [run for child in sorted(path.iterdir()) for run in _runs_below(child, depth - 1)]


def find_run_dirs(paths: list[Path], exclude: tuple[Path, ...] = ()) -> list[Path]:
    """The run folders at or below each path (a run folder, a folder of runs, a folder of machines' folders),
    leaving out those below `exclude`."""
    found = []
    for path in paths:
        if not path.exists():
            raise BadInput(f"--results {path}: does not exist")
        if not path.is_dir():
            raise BadInput(f"--results {path}: not a run folder or a folder of runs")
        found.extend(
            run for run in _runs_below(path) if not any(run.resolve().is_relative_to(e.resolve()) for e in exclude)
        )
    return list({run.resolve(): run for run in found}.values())  # a folder named twice is read once


def is_reference(run_dir: Path) -> bool:
    return REFERENCE in run_dir.resolve().parts[:-1]


REPORT_META_KEYS = ("run_id", "status")  # what the report reads of every run's meta.json


def _read_run(run_dir: Path) -> tuple[dict, dict[str, pd.DataFrame]]:
    meta = read_meta(run_dir, REPORT_META_KEYS)
    tables = {}
    for name in ("points", "paths", "claims"):
        path = run_dir / f"{name}.csv"
        if path.exists():
            df = read_points(run_dir) if name == "points" else storage.read_csv(path)
            df.insert(0, "run_id", meta.get("run_id") or run_dir.name)
            tables[name] = df
    return meta, tables


def _identity(meta: dict, run_dir: Path) -> tuple:
    """What makes two folders copies of one run: its id, the machine it ran on and when it started."""
    return meta.get("run_id") or run_dir.name, machine.machine_identity(meta)[0], meta.get("started_utc")


def _size(tables: dict[str, pd.DataFrame]) -> int:
    return sum(len(df) for df in tables.values())


def load_runs(paths: list[Path], skip_bad: bool = False, exclude: tuple[Path, ...] = ()):
    """(points, runs meta by run_id, paths, claims), tables with a run_id column; a damaged run is a RunFailed
    naming it, or with skip_bad named on stderr and left out; a copy of a run is read once."""
    runs: dict[str, dict] = {}
    read: dict[str, dict[str, pd.DataFrame]] = {}
    copies: dict[tuple, str] = {}  # identity -> run id
    for run_dir in find_run_dirs(paths, exclude):
        try:
            meta, run_tables = _read_run(run_dir)
        except RunFailed as exc:
            if not skip_bad:
                raise RunFailed(f"run {run_dir} is damaged: {exc} (use --skip-bad to report the others)") from None
            print(f"skipping damaged run {run_dir}: {exc}", file=sys.stderr)
            continue
        identity = _identity(meta, run_dir)
        if identity in copies:  # the same run in another folder (a backup)
            run_id = copies[identity]
            first, size, first_size = Path(runs[run_id]["folder"]), _size(run_tables), _size(read[run_id])
            fuller = size > first_size  # a copy taken while the run went on holds fewer rows
            kept, left = (run_dir, first) if fuller else (first, run_dir)
            print(
                f"note: {left} is a copy of run {identity[0]} ({kept}); read once, from {kept}"
                + (f" (the fuller copy: {size} rows, {first_size} in {left})" if fuller else ""),
                file=sys.stderr,
            )
            if fuller:
                runs[run_id] = dict(meta, run_id=run_id, folder=str(run_dir), reference=is_reference(run_dir))
                read[run_id] = run_tables
            continue
        run_id = identity[0]
        if run_id in runs:  # two machines started a run in the same second: told apart by the machine
            run_id = f"{run_id}@{'ref.' if is_reference(run_dir) else ''}{machine.machine_identity(meta)[0]}"
        if run_id in runs:
            raise BadInput(f"--results: run {run_id} is given twice ({runs[run_id]['folder']} and {run_dir})")
        copies[identity] = run_id
        runs[run_id] = dict(meta, run_id=run_id, folder=str(run_dir), reference=is_reference(run_dir))
        read[run_id] = run_tables
    if not runs:
        raise BadInput(f"--results {' '.join(map(str, paths))}: no stored runs found")
    tables = {
        name: [df.assign(run_id=run_id) for run_id, t in read.items() if (df := t.get(name)) is not None]
        for name in ("points", "paths", "claims")
    }
    frames = {name: (pd.concat(dfs, ignore_index=True) if dfs else None) for name, dfs in tables.items()}
    points = (
        frames["points"] if frames["points"] is not None else pd.DataFrame(columns=storage.POINT_COLUMNS + ["run_id"])
    )
    return points, runs, frames["paths"], frames["claims"]


def select_run_dirs(results: list[Path] | None, compare_reference: bool = False) -> tuple[list[Path], list[str]]:
    """(run folders to report, notes for the reader). `results` None: this machine's runs in results/
    (outside results/reference/), or the reference runs where this machine has none yet."""
    notes = []
    reference = find_run_dirs([REFERENCE_DIR]) if REFERENCE_DIR.exists() else []
    if results is not None:
        dirs = find_run_dirs(results)
    else:
        mine, label = machine.this_machine()
        own = find_run_dirs([storage.RESULTS_ROOT], exclude=(REFERENCE_DIR,)) if storage.RESULTS_ROOT.exists() else []
        dirs = [d for d in own if _machine_of(d) == mine]
        others = len(own) - len(dirs)
        if others:
            notes.append(
                f"{others} stored run(s) of other machines in results/ are not shown (`--results results` shows "
                "every machine side by side)."
            )
        if not dirs:
            notes.append(
                f"No run of this machine ({label}) is stored in results/ yet: `make bench` measures it. Shown "
                "instead: the reference runs that ship in results/reference/."
            )
            dirs = reference
    if compare_reference:
        dirs += [d for d in reference if d.resolve() not in {x.resolve() for x in dirs}]
    return dirs, notes


def _machine_of(run_dir: Path) -> str | None:
    try:
        return machine.machine_identity(read_meta(run_dir, REPORT_META_KEYS))[0]
    except RunFailed:
        return None  # damaged: load_runs names it


def newest_run(runs: dict[str, dict], run_ids) -> str:
    """Of `run_ids`, the newest run: by started_utc, then by id."""
    return max(run_ids, key=lambda r: (runs.get(r, {}).get("started_utc") or "", r))
