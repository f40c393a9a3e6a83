"""Durable files: JSON written atomically, lines appended whole, tables read back with any damage named."""

from __future__ import annotations

import csv
import errno
import io
import json
import math
import os
import shlex
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

from . import formats, schema
from .errors import RunFailed
from .spec import LAYER_SIZES, SIZES

SPEC_COLUMNS = (*(c.name for c in schema.IDENTITY), "node")
SIZE_COLUMNS = tuple(s for s in SIZES if s not in LAYER_SIZES)
RESULTS_ROOT = Path(__file__).resolve().parent.parent / "results"


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class DiskFull(RunFailed):
    """No space left while writing a run folder: what was stored stays, the run can be resumed."""


def _disk_full(path: Path, exc: OSError) -> DiskFull:
    return DiskFull(
        f"{path}: no space left on the device ({exc.strerror}); what was stored is kept: free some space, then "
        f"`python -m bench run --resume {shlex.quote(str(path.parent))}`"
    )


def _atomically(path: Path, write: Callable[[Path], object]) -> None:
    """`write` a temporary file beside `path`, then rename it over; a failed or interrupted write leaves no trace."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            raise _disk_full(path, exc) from None
        raise


def write_json(path: Path, obj) -> None:
    def write(tmp: Path) -> None:
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=2, sort_keys=False, default=str)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())

    _atomically(path, write)


def read_json(path: Path) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        raise RunFailed(f"{path}: missing") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RunFailed(f"{path}: damaged, not valid JSON ({exc})") from None


def append_line(path: Path, text: str) -> None:
    """One write of the whole line, then flush and fsync: a kill leaves at most a partial last line."""
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


def repair_tail(path: Path, complete: Callable[[str], bool] | None = None) -> None:
    """Drop a partial last line (one `complete` accepts gets its newline); a file with no whole line is damaged."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":  # checked before every append: one byte, not the file
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


def complete_row(columns: list[str]) -> Callable[[str], bool]:
    """Whether a CSV line is a whole row of `columns` whose last field is a whole UTC timestamp."""

    def complete(line: str) -> bool:
        fields = next(csv.reader([line]), [])
        if len(fields) != len(columns):
            return False
        try:
            return datetime.fromisoformat(fields[-1]).tzinfo is not None and len(fields[-1]) == len(utc_now())
        except ValueError:
            return False

    return complete


def append_row(path: Path, row: dict, columns: list[str], complete: Callable[[str], bool] | None = None) -> None:
    extra = set(row) - set(columns)
    if extra:
        raise ValueError(f"row has columns not in the schema: {sorted(extra)}")
    repair_tail(path, complete)
    text = _csv_line([row.get(c) for c in columns])
    if not path.exists() or path.stat().st_size == 0:
        text = _csv_line(columns) + text
    append_line(path, text)


def read_jsonl(path: Path, check: Callable[[object], str | None] = lambda entry: None) -> list:
    """A JSON-lines file; a cut-off last line is ignored, a damaged one (or one `check` faults) is named."""
    if not path.exists():
        return []
    text = path.read_text()
    out = []
    for number, line in enumerate(text.splitlines()[: None if text.endswith("\n") else -1], 1):
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            raise RunFailed(f"{path}: damaged at line {number} ({exc})") from None
        fault = check(entry)
        if fault:
            raise RunFailed(f"{path}: damaged at line {number}: {fault}")
        out.append(entry)
    return out


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


def write_table(path: Path, df: pd.DataFrame) -> None:
    _atomically(path, lambda tmp: df.to_csv(tmp, index=False, errors="backslashreplace"))


def point_words(row: pd.Series) -> str:
    """A point in words: "attention on cpu float32, batch=1 n=64 d=32 heads=4"."""

    def text(value) -> str:
        return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)

    shown = [c for c in SPEC_COLUMNS[3:] if c in row and pd.notna(row[c]) and not (c == "causal" and not row[c])]
    sizes = " ".join(f"{c}={text(row[c])}" for c in shown)
    return f"{row.get('layer')} on {row.get('device')} {row.get('dtype')}, {sizes}"


def check_points(df: pd.DataFrame, path: Path, plan: dict[str, dict] | None = None) -> pd.DataFrame:
    """The points table, numbers as numbers, every row sound (and of `plan`), or RunFailed naming line and column."""

    def bad(index, what: str) -> RunFailed:
        return RunFailed(f"{path}: damaged at line {index + 2}: {what}")

    def shown(value) -> str:
        return repr(value) if isinstance(value, str) else str(value)

    for index, status in df["status"].items():
        if status not in schema.STATUSES:
            raise bad(index, f"status {status!r}, expected one of {', '.join(schema.STATUSES)}")
    ids, has_id = df["point_id"].astype(str), formats.identified(df)
    for index in df.index[has_id & ids.duplicated()]:
        raise bad(index, f"point {ids[index]} stored twice (a point is stored once)")
    # distinct ids name distinct points (the id hashes the whole spec); a row without one, by its spec
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
    for column in [c for c in schema.number_names() if c in df]:
        values = pd.to_numeric(df[column], errors="coerce")
        given = df[column].notna() & (df[column].astype(str).str.strip() != "")
        for index in df.index[given & ~values.map(lambda v: isinstance(v, float | int) and math.isfinite(v))]:
            raise bad(index, f"{column} = {shown(df[column][index])}, expected a finite number")
        for index in df.index[values < 0]:
            raise bad(index, f"{column} = {shown(df[column][index])}, expected a number >= 0")
        df[column] = values
    ok = df["status"] == "ok"
    needed = [("time_median_s", ok, 0)]
    if "time_clock" in df:
        needed.append(("time_cpu_median_s", ok & (df["time_clock"] == "cpu"), 0))
    if "mode" in df:
        needed.append(("mem_state_bytes", ok & (df["mode"] == "decode"), -1))
    for column, rows, floor in needed:
        if column not in df:
            continue
        for index in df.index[rows & ~(df[column] > floor)]:
            expected = "> 0" if floor == 0 else "a number of bytes"
            raise bad(index, f"{column} = {shown(df[column][index])} for an ok point, expected {expected}")
    if plan is None:
        return df
    for index, point_id in ids.items():
        spec = plan.get(point_id)
        if spec is None:
            raise bad(index, f"point {point_id} is not in the folder's plan.json (a table from another run?)")
        for column in ("layer", *SIZE_COLUMNS):
            if column in df and str(df[column][index]) != str(spec[column]):
                raise bad(index, f"{column} = {shown(df[column][index])}, the plan has {spec[column]!r} for this point")
    return df
