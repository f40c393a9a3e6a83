"""Older run folders, in one place: what each lacks and how a reader copes (no meta.json `schema`: schema 1)."""

from __future__ import annotations

import csv
import hashlib
import json
import shlex
from pathlib import Path

import pandas as pd

from .errors import RunFailed
from .spec import causal_of, flag_of, mode_of

SCHEMA = 2  # meta.json `schema` of the folders this version writes
# Schema 1 folders lack newer columns: `point_id`, `visit_s`, `attempt`, `pass`, `process`, `plan_sha1`, `points_planned`.


def schema_of(meta: dict, path: Path) -> int:
    """The folder's format; RunFailed for one newer than this version reads."""
    schema = meta.get("schema", 1)
    if not isinstance(schema, int) or schema > SCHEMA:
        raise RunFailed(f"{path}: schema {schema!r}, this version reads 1 to {SCHEMA}: update bench to read it")
    return schema


def points_header(path: Path, columns: list[str]) -> list[str]:
    """The columns rows are appended to `path` in: an older folder's own header, else `columns`."""
    if not path.exists() or path.stat().st_size == 0:
        return columns
    with open(path, newline="") as f:
        header = next(csv.reader(f), [])
    return header if header and set(header) <= set(columns) and header[-1] == columns[-1] else columns


def identified(df: pd.DataFrame) -> pd.Series:
    """Which rows have a point id; an older row without one is known by its spec columns."""
    return df["point_id"].notna() & (df["point_id"].astype(str).str.strip() != "")


def with_mode(df: pd.DataFrame) -> pd.DataFrame:
    """Rows stored before the `mode` column measured inference, before `causal` the non-causal form, unextended."""
    return df.assign(mode=mode_of(df), causal=causal_of(df), extended=flag_of(df, "extended"))


def check_record(record: dict, path: Path) -> None:
    if not {"point_id", "attempt", "pass"} <= set(record):
        raise RunFailed(
            f"{path}: written by an older version without interleaved passes; it cannot be resumed (start a new run)"
        )


def visit_s(record: dict) -> float:
    """Seconds a pass over a point took; a record from before `visit_s`: its rounds' time."""
    return record.get("visit_s", sum(record["stats"]["data"]) * record["stats"].get("iterations", 1))


def process_of(entry: dict):
    return entry.get("process", entry.get("pid"))


def stored_peaks(meta: dict) -> dict[str, dict]:
    """The compute peaks a run's meta.json (or a node's facts) stores by device key; older runs' `matmul_peak`."""
    return meta.get("compute_peak") or meta.get("matmul_peak") or {}


def command_line(command: list[str]) -> str:
    return " ".join([command[0], shlex.join(command[1:])]) if len(command) > 1 else " ".join(command)


def _digest(obj) -> str:
    return hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def specs_digest(plan: dict) -> str:
    return _digest(plan["specs"])


def plan_digest(plan: dict) -> str:
    return _digest([plan["specs"], plan["timing_policy"], plan.get("seed", 0)])


def extended_digest(rows: list) -> str:
    return _digest(list(rows))
