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
A run folder is never overwritten: `new_run_dir` refuses an existing one. One process at a time writes a
run folder: `hold` takes an OS lock on it (filelock: flock on Linux) for the writer's life, so a second
writer is refused with the holder's pid, and a killed holder leaves no lock behind.

What is read back is checked (`check_points`, `read_meta`): a damaged value or file is a RunFailed naming
the file, the line or key, and what was expected; nothing damaged counts as stored.
"""

from __future__ import annotations

import csv
import errno
import io
import json
import math
import os
import platform
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
from filelock import FileLock, Timeout

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
    "mode",
    # time (seconds per call: a forward pass, or in train mode a forward and a backward pass) on the wall clock
    # and its spread, then on the CPU clock (bench.timing), then which clock the time fits use and whether the
    # time on it is to be trusted
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
    "time_wall_flag",
    "time_cpu_clock",
    "time_cpu_median_s",
    "time_cpu_iqr_s",
    "time_cpu_min_s",
    "time_cpu_ci_low_s",
    "time_cpu_ci_high_s",
    "time_cpu_pass_spread",
    "time_cpu_flag",
    "time_clock",
    "time_clock_why",
    "time_reliable",
    "time_flag",
    "faults_per_call",
    # compute
    "flops_analytic",
    "flops_counted",
    "flops_useful",
    "flops_uncounted_ops",
    "flops_elementwise",
    # memory
    "mem_peak_bytes",
    "mem_saved_bytes",
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
    # where, in a cluster sweep (bench.cluster; empty for a point measured in the run's own process, whose
    # machine is meta.json's): the Ray node id, its host, the device's name and memory
    "node",
    "host",
    "device_name",
    "device_memory_bytes",
    "finished_utc",
]
STATUSES = ("ok", "oom", "killed", "error", "skipped")
# What a point is, as a row of points.csv says it (a row stored before a column existed lacks it).
SPEC_COLUMNS = ("layer", "device", "dtype", "batch", "n", "d", "k", "heads", "window", "dilation", "mode", "node")
# killed: the process died while measuring the point, KILLED_AFTER times (the kernel's OOM killer or a memory
# limit, most likely: a SIGKILL leaves no trace in the process); recorded so that a resume goes on past it.
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


def claim_out_dir(path: Path) -> tuple[Path, FileLock]:
    """--out DIR: a new or empty folder, held (see `hold`) before it is found empty, so of several processes
    given the same DIR at once one gets it and the others are refused; a folder that holds anything is never
    overwritten."""
    if path.exists() and not path.is_dir():
        raise BadInput(f"--out {path}: exists and is not a folder")
    path.mkdir(parents=True, exist_ok=True)
    lock = hold(path)
    if any(p.name not in WRITER_FILES for p in path.iterdir()):
        lock.release()
        raise BadInput(
            f"--out {path}: exists and is not empty; runs are never overwritten "
            f"(choose a new folder, or --resume {path} to finish it)"
        )
    return path, lock


# ------------------------------------------------------------------------------------------ one writer
LOCK_NAME = ".writer.lock"
OWNER_NAME = ".writer.json"  # who holds the lock: pid, host, since, command
WRITER_FILES = (LOCK_NAME, OWNER_NAME)


def hold(run_dir: Path) -> FileLock:
    """The run folder's writer lock, taken without waiting and held until released or the process ends (an
    OS lock on .writer.lock: the kernel drops it with a killed process, so a stale file never blocks). A
    second writer gets BadInput naming the folder and the process that holds it."""
    lock = FileLock(str(run_dir / LOCK_NAME), timeout=0, thread_local=False)
    try:
        lock.acquire()
    except Timeout:
        raise BadInput(
            f"{run_dir}: another process is writing this run folder ({_owner(run_dir)}); "
            "one writer at a time: wait for it to end, or stop it"
        ) from None
    owner = {"pid": os.getpid(), "host": platform.node(), "since": utc_now(), "command": " ".join(sys.argv)}
    write_json(run_dir / OWNER_NAME, owner)
    return lock


def _owner(run_dir: Path) -> str:
    try:
        owner = json.loads((run_dir / OWNER_NAME).read_text())
        return f"pid {owner['pid']} on {owner['host']} since {owner['since']}: {owner['command']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "a process that has not said who it is yet"


class DiskFull(RunFailed):
    """No space left while writing a run folder: what was stored stays, the run can be resumed."""


def _disk_full(path: Path, exc: OSError) -> DiskFull:
    return DiskFull(
        f"{path}: no space left on the device ({exc.strerror}); what was stored is kept: free some space, then "
        f"`python -m bench run --resume {path.parent}`"
    )


def write_json(path: Path, obj) -> None:
    """Write atomically: a temporary file beside it, fsync, rename over; the temporary file is removed if
    the write fails (a full disk: DiskFull naming the file)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=2, sort_keys=False, default=str)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.errno == errno.ENOSPC:
            raise _disk_full(path, exc) from None
        raise


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
    try:
        with open(path, "a", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            repair_tail(path)  # the part of the line that was written, if any
            raise _disk_full(path, exc) from None
        raise


def repair_tail(path: Path, complete=None) -> None:
    """Drop a partial last line (a write cut off by a kill) so appends start on a fresh line; a last line that
    `complete(line)` says is whole (it lacks only its newline: a hand edit) gets its newline instead. A file
    with no whole line at all is damaged, never emptied."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":  # the usual case, checked on every append: read one byte, not the file
            return
        f.seek(0)
        data = f.read()
        cut = data.rfind(b"\n") + 1
        if cut == 0:
            raise RunFailed(f"{path}: damaged, no whole line in it (expected a header and rows)")
        if complete is not None and complete(data[cut:].decode(errors="replace")):
            f.write(b"\n")
            return
        f.truncate(cut)


def _csv_line(values: list) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(["" if v is None else v for v in values])
    return buf.getvalue()


def _complete_row(columns: list[str]):
    """Whether a CSV line is a whole row of `columns` whose last field, finished_utc, is a whole timestamp."""

    def complete(line: str) -> bool:
        fields = next(csv.reader([line]), [])
        if len(fields) != len(columns):
            return False
        try:
            return datetime.fromisoformat(fields[-1]).tzinfo is not None and len(fields[-1]) == len(utc_now())
        except ValueError:
            return False

    return complete


def stored_columns(path: Path, schema: list[str]) -> list[str]:
    """The columns rows are appended in: the header of the CSV at `path` where it has one made of `schema`'s
    columns (a folder written before a column was added keeps its own columns), else `schema`."""
    if not path.exists() or path.stat().st_size == 0:
        return schema
    with open(path, newline="") as f:
        header = next(csv.reader(f), [])
    return header if header and set(header) <= set(schema) and header[-1] == schema[-1] else schema


def append_row(path: Path, row: dict, columns: list[str]) -> None:
    """Append one row; the header is written first if the file is new. Unknown keys are an error, and so is
    a value in a column of the schema that an older file lacks (never dropped)."""
    extra = set(row) - set(columns)
    if extra:
        raise ValueError(f"row has columns not in the schema: {sorted(extra)}")
    header = stored_columns(path, columns)
    lost = sorted(c for c in set(columns) - set(header) if row.get(c) not in (None, ""))
    if lost:
        raise RunFailed(f"{path}: stored without the columns {lost}, which this row fills; measure into a new folder")
    columns = header
    repair_tail(path, _complete_row(columns) if columns[-1] == "finished_utc" else None)
    text = _csv_line([row.get(c) for c in columns])
    if not path.exists() or path.stat().st_size == 0:
        text = _csv_line(columns) + text
    _append_line(path, text)


def append_point(run_dir: Path, row: dict) -> None:
    """Append a point's row; a point already stored is refused (RunFailed naming it), never stored twice."""
    path = run_dir / "points.csv"
    if path.exists() and path.stat().st_size:
        repair_tail(path, _complete_row(stored_columns(path, POINT_COLUMNS)))
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            if any(stored.get("point_id") == row["point_id"] for stored in reader):
                raise RunFailed(
                    f"{path}: point {row['point_id']} ({row.get('layer')}, n={row.get('n')}) is already stored"
                )
    append_row(path, row, POINT_COLUMNS)


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


PROCESS = uuid.uuid4().hex[:12]  # this process, in started.jsonl (a pid can be reused)


def append_started(run_dir: Path, entry: dict) -> None:
    """A pass over a point is about to start (started.jsonl, with this process's id): if the process's last
    line is a start whose pass was never stored and it never said it stopped, it died there."""
    path = run_dir / "started.jsonl"
    repair_tail(path)
    _append_line(path, json.dumps(dict(entry, process=PROCESS, pid=os.getpid(), utc=utc_now())) + "\n")


def append_stopped(run_dir: Path) -> None:
    """This process stops measuring cleanly (an interrupt, an error): its last start was no death."""
    path = run_dir / "started.jsonl"
    if path.exists():
        _append_line(
            path, json.dumps({"stopped": True, "process": PROCESS, "pid": os.getpid(), "utc": utc_now()}) + "\n"
        )


def read_started(run_dir: Path) -> list[dict]:
    """started.jsonl; a cut-off last line is ignored, a damaged line anywhere else names it."""
    path = run_dir / "started.jsonl"
    if not path.exists():
        return []
    text = path.read_text()
    lines = text.splitlines()[: None if text.endswith("\n") else -1]
    out = []
    for number, line in enumerate(lines, 1):
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            raise RunFailed(f"{path}: damaged at line {number} ({exc})") from None
        if not isinstance(entry, dict) or not ({"point_id", "attempt", "pass"} <= set(entry) or entry.get("stopped")):
            raise RunFailed(f"{path}: damaged at line {number}: expected point_id, attempt and pass")
        out.append(entry)
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


def read_points(run_dir: Path, plan: dict[str, dict] | None = None) -> pd.DataFrame:
    """points.csv, checked (`check_points`); with `plan` ({point_id: spec row}), every row must be a point
    of it, with its sizes."""
    path = run_dir / "points.csv"
    df = read_csv(path)
    missing = [c for c in ("layer", "n", "d", "status", "point_id") if c not in df.columns]
    if missing:
        raise RunFailed(f"{path}: damaged, columns {missing} missing")
    return check_points(df, path, plan)


SIZE_COLUMNS = ("n", "d", "batch")
TEXT_COLUMNS = (
    "time_flag",
    "time_wall_flag",
    "time_cpu_flag",
    "time_cpu_clock",
    "time_clock",
    "time_clock_why",
    "flops_uncounted_ops",
    "mem_method",
)
NUMBER_COLUMNS = [
    c for c in POINT_COLUMNS if c.startswith(("time_", "flops_", "mem_", "faults_")) and c not in TEXT_COLUMNS
]


def point_words(row: pd.Series) -> str:
    """A point in words: "attention on cpu float32, batch=1 n=64 d=32 heads=4"."""

    def text(value) -> str:
        return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)

    sizes = " ".join(f"{c}={text(row[c])}" for c in SPEC_COLUMNS[3:] if c in row and pd.notna(row[c]))
    return f"{row.get('layer')} on {row.get('device')} {row.get('dtype')}, {sizes}"


def check_points(df: pd.DataFrame, path: Path, plan: dict[str, dict] | None = None) -> pd.DataFrame:
    """Every row of a points table whole and sound, or RunFailed naming the file, the line, the column and
    what was expected: a known status, a point id seen once (and, with `plan`, one of the plan's points with
    its sizes), positive integer sizes, numbers that are numbers and finite, and an ok point's median time
    positive. Returns the table with its number columns as numbers."""

    def bad(index, what: str) -> RunFailed:
        return RunFailed(f"{path}: damaged at line {index + 2}: {what}")

    def shown(value) -> str:
        return repr(value) if isinstance(value, str) else str(value)

    for index, status in df["status"].items():
        if status not in STATUSES:
            raise bad(index, f"status {status!r}, expected one of {', '.join(STATUSES)}")
    ids = df["point_id"].astype(str)
    has_id = df["point_id"].notna() & (ids.str.strip() != "")  # rows of older runs may have none
    for index in df.index[has_id & ids.duplicated()]:
        raise bad(index, f"point {ids[index]} stored twice (a point is stored once)")
    # A row without an id is known by its sizes: the same layer, sizes, device, dtype and mode as another row
    # (distinct ids name distinct points: the id hashes the whole spec).
    spec = [c for c in SPEC_COLUMNS if c in df]
    same = df[spec].astype(object).where(df[spec].notna(), None).duplicated(keep=False)
    for index in df.index[same & ~has_id]:
        twin = next(i for i in df.index[same] if i != index and df.loc[i, spec].equals(df.loc[index, spec]))
        raise bad(index, f"{point_words(df.loc[index])}, without point_id, stored twice (as at line {twin + 2})")
    for column in SIZE_COLUMNS:
        if column not in df:
            continue
        values = pd.to_numeric(df[column], errors="coerce")
        for index in df.index[~(values.notna() & (values >= 1) & (values == values.round()))]:
            raise bad(index, f"{column} = {shown(df[column][index])}, expected a positive integer")
    df = df.copy()
    for column in [c for c in NUMBER_COLUMNS if c in df]:
        values = pd.to_numeric(df[column], errors="coerce")
        given = df[column].notna() & (df[column].astype(str).str.strip() != "")
        for index in df.index[given & ~values.map(lambda v: isinstance(v, float | int) and math.isfinite(v))]:
            raise bad(index, f"{column} = {shown(df[column][index])}, expected a finite number")
        df[column] = values
    if "time_median_s" in df:
        ok = df["status"] == "ok"
        for index in df.index[ok & ~(df["time_median_s"] > 0)]:
            raise bad(index, f"time_median_s = {shown(df['time_median_s'][index])} for an ok point, expected > 0")
    if plan is not None:
        for index, point_id in ids.items():
            spec = plan.get(point_id)
            if spec is None:
                raise bad(index, f"point {point_id} is not in the folder's plan.json (a table from another run?)")
            for column in ("layer", *SIZE_COLUMNS):
                if column in df and str(df[column][index]) != str(spec[column]):
                    raise bad(
                        index, f"{column} = {shown(df[column][index])}, the plan has {spec[column]!r} for this point"
                    )
    return df


META_KEYS = ("run_id", "kind", "status", "started_utc")


def read_meta(run_dir: Path, required: tuple[str, ...] = META_KEYS) -> dict:
    """meta.json, which must be a JSON object with the `required` keys (RunFailed naming what is missing)."""
    path = run_dir / "meta.json"
    meta = read_json(path)
    if not isinstance(meta, dict):
        raise RunFailed(f"{path}: damaged, expected a JSON object, found {type(meta).__name__}")
    missing = [key for key in required if key not in meta]
    if missing:
        raise RunFailed(f"{path}: damaged, keys {', '.join(missing)} missing")
    return meta


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
