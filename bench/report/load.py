"""Reading stored runs for the report, choosing which to show, combining one machine's runs (docs/method.md)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pandas as pd

import models

from .. import machine, outside, schema, storage
from ..errors import BadInput, RunFailed
from ..fits import RUN_STARTED
from ..folder import POINTS, REPORT_TABLES, is_run_dir, read_meta, read_points, tables_in
from ..spec import SIZES

REFERENCE_DIR = storage.RESULTS_ROOT / "reference"
REFERENCE = "reference"  # the folder name that marks committed reference runs, and their sources' prefix


def _runs_below(path: Path, depth: int = 3) -> list[Path]:
    if is_run_dir(path):
        return [path]
    if depth == 0 or not path.is_dir():
        return []
    return [run for child in sorted(path.iterdir()) for run in _runs_below(child, depth - 1)]


def find_run_dirs(paths: list[Path], exclude: tuple[Path, ...] = ()) -> list[Path]:
    """The run folders at or below each path (a run, or a folder of runs or machines), but not below `exclude`."""
    found = []
    for path in paths:
        if not path.exists():
            raise BadInput(f"--results {path}: does not exist")
        if not path.is_dir():
            raise BadInput(f"--results {path}: not a run folder or a folder of runs")
        runs = [run for run in _runs_below(path) if not any(run.resolve().is_relative_to(e.resolve()) for e in exclude)]
        if not runs:
            _say_tables_without_meta(path)
        found.extend(runs)
    return list({run.resolve(): run for run in found}.values())  # a folder named twice is read once


def _say_tables_without_meta(path: Path, depth: int = 3) -> None:
    """BadInput naming a folder below `path` that holds a run's tables but no meta.json."""
    if not path.is_dir() or is_run_dir(path):
        return
    tables = tables_in(path)
    if tables:
        raise BadInput(f"--results: {path} has {', '.join(tables)} but no meta.json (a run folder needs both)")
    if depth:
        for child in sorted(path.iterdir()):
            _say_tables_without_meta(child, depth - 1)


def is_reference(run_dir: Path) -> bool:
    return REFERENCE in run_dir.resolve().parts[:-1]


REPORT_META_KEYS = ("run_id", "status")  # what the report reads of every run's meta.json
SIDE_TABLES = REPORT_TABLES


REPORT_COLUMNS = ("time_median_s", "flops_counted", "mem_peak_bytes")


def _report_points(run_dir: Path) -> pd.DataFrame:
    df = read_points(run_dir)
    missing = [c for c in REPORT_COLUMNS if c not in df.columns]
    if missing:
        raise RunFailed(f"{run_dir / POINTS}: damaged, columns {', '.join(missing)} missing")
    unknown = sorted(set(df["layer"].astype(str)) - set(models.LAYERS))
    if unknown:
        shown = ", ".join(repr(name[:40]) for name in unknown[:3])
        raise RunFailed(f"{run_dir / POINTS}: layers this report does not know: {shown}")
    return df


def _read_run(run_dir: Path) -> tuple[dict, dict[str, pd.DataFrame]]:
    meta = read_meta(run_dir, REPORT_META_KEYS)
    outside.restore(meta.get("outside_layers"))
    tables = {}
    for name in SIDE_TABLES:
        path = run_dir / f"{name}.csv"
        if path.exists():
            df = _report_points(run_dir) if name == "points" else storage.read_csv(path)
            stored = meta.get("points_stored")
            if name == "points" and meta.get("status") == "finished" and isinstance(stored, int) and len(df) < stored:
                raise RunFailed(
                    f"{path}: {len(df)} rows, meta.json counted {stored} points stored: rows were lost; "
                    f"`python -m bench run --resume {run_dir}` measures them again"
                )
            df.insert(0, "run_id", meta.get("run_id") or run_dir.name)
            tables[name] = df
    return meta, tables


def _identity(meta: dict, run_dir: Path) -> tuple:
    """What makes two folders copies of one run: its id, the machine it ran on and when it started."""
    return meta.get("run_id") or run_dir.name, machine.machine_identity(meta)[0], meta.get("started_utc")


def _size(tables: dict[str, pd.DataFrame]) -> int:
    return sum(len(df) for df in tables.values())


def load_runs(paths: list[Path], skip_bad: bool = False, exclude: tuple[Path, ...] = ()):
    """(points, runs meta by run_id, {side table: frame}); a damaged run is a RunFailed (skip_bad: said, left out)."""
    runs: dict[str, dict] = {}
    read: dict[str, dict[str, pd.DataFrame]] = {}
    copies: dict[tuple, str] = {}
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
        for name in SIDE_TABLES
    }
    frames = {name: (pd.concat(dfs, ignore_index=True) if dfs else None) for name, dfs in tables.items()}
    points = frames["points"] if frames["points"] is not None else pd.DataFrame(columns=[*schema.names(), "run_id"])
    return points, runs, {name: frames[name] for name in SIDE_TABLES if name != "points"}


def select_run_dirs(results: list[Path] | None, compare_reference: bool = False) -> tuple[list[Path], list[str]]:
    """(run folders, notes): `results`, else this machine's runs outside results/reference/, else the reference's."""
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


CLOCK_BEFORE_CHOICE = "wall (stored before the CPU clock)"


def run_setting(meta: dict, device: str) -> dict[str, str]:
    """What makes runs of one machine and device incomparable (not rounds or passes, which change precision)."""
    setting = {"torch": str(meta.get("torch"))}
    if device == "cpu":
        setting["threads"] = str(meta.get("threads"))
        setting["clock policy"] = str((meta.get("timing_policy") or {}).get("clock", CLOCK_BEFORE_CHOICE))
    return setting


def run_tag(run_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "-", run_id)


def keep_apart(points: pd.DataFrame, runs: dict[str, dict], labels: dict[str, str]):
    """(sources, labels, notes): runs set apart from their source's newest by `run_setting` become `<source>@<run>`."""
    sources, labels, notes = points["source"].copy(), dict(labels), []
    for source, rows in points.groupby("source", sort=False):
        device = str(rows["device"].iloc[0])
        settings = {r: run_setting(runs[r], device) for r in rows["run_id"].unique()}
        groups: dict[tuple, list[str]] = {}
        for run_id in sorted(settings, key=lambda r: (runs[r].get("started_utc") or "", r)):
            groups.setdefault(tuple(settings[run_id].items()), []).append(run_id)
        newest = newest_run(runs, settings)
        for setting, members in groups.items():
            if newest in members:
                continue
            apart = f"{source}@{run_tag(members[-1])}"
            sources.loc[rows.index[rows["run_id"].isin(members)]] = apart
            differs = "; ".join(
                f"{name} {value} there, {settings[newest][name]} in {newest}"
                for name, value in setting
                if value != settings[newest][name]
            )
            named = f"run{'s' if len(members) > 1 else ''} {', '.join(members)}"
            labels[apart] = f"{labels[source]}, {named}"
            notes.append(
                f"{labels[source]}: {named} kept apart from the newest run {newest}, as source "
                f"`{apart}` side by side ({differs}): their times do not compare."
            )
    return sources, labels, notes


NAMED_AT_MOST = 6


def _named(rows: pd.DataFrame, identity) -> str:
    """ "conv n=512 d=128, lstm n=1024 d=128, and 3 more": each row by its identity (a claim by its id), never empty."""
    names = []
    for _, row in rows.head(NAMED_AT_MOST).iterrows():
        words = [str(row[c]) for c in identity if c not in SIZES and c in row and pd.notna(row[c])]
        sizes = [f"{s}={int(row[s])}" for s in identity if s in SIZES and s in row and pd.notna(row[s])]
        names.append(" ".join([*words, *sizes]) or f"row {int(row['_row']) + 1} of its run's table")
    more = len(rows) - len(names)
    return ", ".join(names) + (f", and {more} more" if more > 0 else "")


def combine(table: pd.DataFrame | None, runs: dict[str, dict], by: str, identity, words: dict[str, str], what: str):
    """(rows, notes): per `by` value its newest measurement (`skipped` only if no other); a note per group of runs."""
    if table is None or table.empty:
        return table, []
    started = table["run_id"].map(lambda r: runs.get(r, {}).get("started_utc") or "")
    measured = table["status"] != "skipped" if "status" in table else True
    work = table.assign(**{RUN_STARTED: started}, _measured=measured, _row=range(len(table)))
    # groups in the folders' order; within one, older runs first however the folders were named
    work["_place"] = pd.Series(pd.factorize(work[by])[0], index=work.index).groupby(work["run_id"]).transform("min")
    work = work.sort_values(["_place", RUN_STARTED, "run_id", "_row"])
    key = [by, *(c for c in identity if c in work)]
    winner = work.sort_values(["_measured", RUN_STARTED, "run_id", "_row"]).duplicated(key, keep="last")
    dropped = winner.reindex(work.index)
    notes = []
    for group, rows in work.groupby(by, sort=False):
        if rows["run_id"].nunique() < 2:
            continue
        counts = rows.groupby("run_id", sort=False).size()
        gone = rows[dropped[rows.index]]
        again = gone[gone["_measured"]].groupby("run_id", sort=False).size()
        unmeasured = gone[~gone["_measured"]].groupby("run_id", sort=False).size()
        said = [
            f"{n} of {r}'s {what} measured again later, the newer kept ({_named(gone[gone['run_id'] == r], identity)})"
            for r, n in again.items()
        ]
        said += [
            f"{n} of {r}'s {what} skipped there, kept from a run that measured them" for r, n in unmeasured.items()
        ]
        notes.append(
            f"{words.get(group, group)}: runs {', '.join(f'{r} ({n} {what})' for r, n in counts.items())} combined "
            f"point by point; {'; '.join(said) or f'none of their {what} measured twice'}."
        )
    kept = work[~dropped].drop(columns=["_measured", "_row", "_place"])
    return kept.reset_index(drop=True), notes
