"""Run folders: the only module that writes measurements to disk.

A run folder (results/<run-id>/) holds meta.json, plan.json (the points the run is to measure),
points.csv (one row per finished point), timings.jsonl (pytest-benchmark's record of each pass over each
point, as it finishes: what --resume reads to skip the passes already done), errors.log (the full
traceback of each point that failed) and, once the run ends, pytest-benchmark.json (one record per point,
all its rounds, in pytest-benchmark's own file format, with machine_info and commit_info). paths.csv and
claims.csv come from their commands.

Nothing measured is lost if a run stops: rows are appended whole (one write of the full line, then flush
and fsync), so a killed process leaves at most one partial last line, which `read_points` ignores and
`repair_tail` removes before a resume appends; JSON files are written to a temporary file and renamed.
A run folder is never overwritten: `new_run_dir` refuses an existing one.
"""

from __future__ import annotations

import csv
import io
import json
import os
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from .errors import BadInput, RunFailed

POINT_COLUMNS = [
    # the spec
    "layer",
    "device",
    "dtype",
    "batch",
    "n",
    "d",
    "k",
    "heads",
    "window",
    "dilation",
    # time (seconds per forward pass) and its spread
    "time_median_s",
    "time_iqr_s",
    "time_mean_s",
    "time_min_s",
    "time_ci_low_s",
    "time_ci_high_s",
    "rounds",
    "iterations",
    "passes",
    "time_pass_spread",
    "time_noisy",
    "time_reliable",
    "time_flag",
    "attempts",
    # compute
    "flops_analytic",
    "flops_counted",
    "flops_uncounted_ops",
    "flops_elementwise",
    # memory
    "mem_peak_bytes",
    "mem_rss_peak_bytes",
    "mem_rss_base_bytes",
    "mem_analytic_bytes",
    "mem_method",
    # bookkeeping
    "threads",
    "load_others_cores",
    "status",
    "error",
    "point_id",
    "finished_utc",
]
STATUSES = ("ok", "oom", "error", "skipped")
RESULTS_ROOT = Path(__file__).resolve().parent.parent / "results"


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def make_run_id(device_tag: str, now: datetime | None = None) -> str:
    now = now or datetime.now(UTC)
    return f"{now:%Y%m%dT%H%M%SZ}-{device_tag}"


def new_run_dir(root: Path, run_id: str) -> Path:
    """Create results/<run_id> (suffixing -2, -3 ... if taken); never reuse an existing folder."""
    root.mkdir(parents=True, exist_ok=True)
    for suffix in [""] + [f"-{i}" for i in range(2, 1000)]:
        path = root / f"{run_id}{suffix}"
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise RunFailed(f"could not find a free run folder name for {run_id} under {root}")


def claim_out_dir(path: Path) -> Path:
    """--out DIR: a new or empty folder; a folder that holds anything is never overwritten."""
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise BadInput(
            f"--out {path}: exists and is not empty; runs are never overwritten "
            f"(choose a new folder, or --resume {path} to finish it)"
        )
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_json(path: Path, obj) -> None:
    """Write atomically: a temporary file beside it, fsync, rename over."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2, sort_keys=False, default=str)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_json(path: Path) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise RunFailed(f"{path}: missing") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RunFailed(f"{path}: damaged, not valid JSON ({exc})") from None


def _append_line(path: Path, text: str) -> None:
    # One write call of the whole line on an O_APPEND file, then flush and fsync.
    with open(path, "a", newline="") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def repair_tail(path: Path) -> None:
    """Drop a partial last line (a write cut off by a kill) so appends start on a fresh line."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":  # the usual case, checked on every append: read one byte, not the file
            return
        f.seek(0)
        f.truncate(f.read().rfind(b"\n") + 1)


def _csv_line(values: list) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(["" if v is None else v for v in values])
    return buf.getvalue()


def append_row(path: Path, row: dict, columns: list[str]) -> None:
    """Append one row; the header is written first if the file is new. Unknown keys are an error."""
    extra = set(row) - set(columns)
    if extra:
        raise ValueError(f"row has columns not in the schema: {sorted(extra)}")
    repair_tail(path)
    text = _csv_line([row.get(c) for c in columns])
    if not path.exists() or path.stat().st_size == 0:
        text = _csv_line(columns) + text
    _append_line(path, text)


def append_point(run_dir: Path, row: dict) -> None:
    append_row(run_dir / "points.csv", row, POINT_COLUMNS)


def append_timing_record(run_dir: Path, record: dict) -> None:
    repair_tail(run_dir / "timings.jsonl")
    _append_line(run_dir / "timings.jsonl", json.dumps(record, default=str) + "\n")


def read_timing_records(run_dir: Path) -> list[dict]:
    """Every record of timings.jsonl. A cut-off last line (a killed writer; that pass is measured again)
    is ignored; a damaged line anywhere else is an error naming it."""
    path = run_dir / "timings.jsonl"
    if not path.exists():
        return []
    text = path.read_text()
    lines = text.splitlines()
    if text and not text.endswith("\n"):
        lines = lines[:-1]
    out = []
    for number, line in enumerate(lines, 1):
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise RunFailed(f"{path}: damaged at line {number} ({exc})") from None
    return out


def append_error(run_dir: Path, what: str, traceback_text: str) -> None:
    """The full traceback of a failed point, in errors.log (points.csv keeps its first line)."""
    _append_line(run_dir / "errors.log", f"=== {utc_now()} {what}\n{traceback_text.rstrip()}\n")


def read_csv(path: Path) -> pd.DataFrame:
    """A stored CSV; a cut-off last line (a killed writer) is ignored, anything else damaged is an error."""
    if not path.exists():
        raise RunFailed(f"{path}: missing")
    text = path.read_text()
    if text and not text.endswith("\n"):
        text = text[: text.rfind("\n") + 1]
    try:
        return pd.read_csv(io.StringIO(text), on_bad_lines="error")
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise RunFailed(f"{path}: damaged, cannot be read as CSV ({str(exc).strip()})") from None


def read_points(run_dir: Path) -> pd.DataFrame:
    df = read_csv(run_dir / "points.csv")
    missing = [c for c in ("layer", "n", "d", "status", "point_id") if c not in df.columns]
    if missing:
        raise RunFailed(f"{run_dir / 'points.csv'}: damaged, columns {missing} missing")
    return df


def write_table(path: Path, df: pd.DataFrame) -> None:
    tmp = path.with_name(path.name + ".tmp")
    df.to_csv(tmp, index=False)
    os.replace(tmp, path)


def is_run_dir(path: Path) -> bool:
    return (path / "meta.json").exists()


def list_runs(root: Path = RESULTS_ROOT) -> list[Path]:
    if not root.exists():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and is_run_dir(p))
