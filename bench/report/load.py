"""Reading stored runs for the report: run folders, or folders that hold run folders."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from .. import storage
from ..errors import BadInput, RunFailed


def find_run_dirs(paths: list[Path]) -> list[Path]:
    found = []
    for path in paths:
        if not path.exists():
            raise BadInput(f"--results {path}: does not exist")
        if storage.is_run_dir(path):
            found.append(path)
        elif path.is_dir():
            found.extend(storage.list_runs(path))
        else:
            raise BadInput(f"--results {path}: not a run folder or a folder of runs")
    return found


def _read_run(run_dir: Path) -> tuple[dict, dict[str, pd.DataFrame]]:
    meta = storage.read_json(run_dir / "meta.json")
    tables = {}
    for name in ("points", "paths", "claims"):
        path = run_dir / f"{name}.csv"
        if path.exists():
            df = storage.read_points(run_dir) if name == "points" else storage.read_csv(path)
            df.insert(0, "run_id", meta.get("run_id") or run_dir.name)
            tables[name] = df
    return meta, tables


def load_runs(paths: list[Path], skip_bad: bool = False):
    """(points, runs meta by run_id, paths, claims): tables concatenated over runs, with a run_id column.
    A damaged run is a RunFailed naming it, unless skip_bad (then it is named on stderr and left out)."""
    runs, tables = {}, {"points": [], "paths": [], "claims": []}
    for run_dir in find_run_dirs(paths):
        try:
            meta, run_tables = _read_run(run_dir)
        except RunFailed as exc:
            if not skip_bad:
                raise RunFailed(f"run {run_dir} is damaged: {exc} (use --skip-bad to report the others)") from None
            print(f"skipping damaged run {run_dir}: {exc}", file=sys.stderr)
            continue
        run_id = meta.get("run_id") or run_dir.name
        runs[run_id] = dict(meta, run_id=run_id, folder=str(run_dir))
        for name, df in run_tables.items():
            tables[name].append(df)
    if not runs:
        raise BadInput(f"--results {' '.join(map(str, paths))}: no stored runs found")
    frames = {name: (pd.concat(dfs, ignore_index=True) if dfs else None) for name, dfs in tables.items()}
    points = (
        frames["points"] if frames["points"] is not None else pd.DataFrame(columns=storage.POINT_COLUMNS + ["run_id"])
    )
    return points, runs, frames["paths"], frames["claims"]
