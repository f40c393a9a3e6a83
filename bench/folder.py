"""A run folder and RunFolder, its one writer: lock, meta.json, plan.json, every append, what a resume finds."""

from __future__ import annotations

import csv
import json
import os
import platform
import shlex
import sys
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from types import MappingProxyType

import pandas as pd
import torch
from filelock import FileLock, Timeout

from . import formats, machine, schema, storage
from .deaths import at_start
from .errors import BadInput, RunFailed
from .policy import TimingPolicy
from .spec import IDENTITY, PointSpec, validate

META, PLAN, POINTS, TIMINGS, STARTED, ERRORS = (
    "meta.json",
    "plan.json",
    "points.csv",
    "timings.jsonl",
    "started.jsonl",
    "errors.log",
)
LOCK_NAME = ".writer.lock"
OWNER_NAME = ".writer.json"
WRITER_FILES = (LOCK_NAME, OWNER_NAME)
META_KEYS = ("run_id", "kind", "status", "started_utc")
RUN_STATES = ("running", "finished", "interrupted")
REPORT_TABLES = ("points", "paths", "claims", "generate", "decode_peers", "default_policy")
_COUNT = (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "a whole number >= 0")
_TEXT = (lambda v: isinstance(v, str) and v != "", "a text")
_NAME = (lambda v: isinstance(v, str) and 0 < len(v) <= 255, "a name of at most 255 characters")
_POSITIVE = (lambda v: _COUNT[0](v) and v >= 1, "a whole number >= 1")
META_TYPES = {
    **dict.fromkeys(("run_id", "kind", "started_utc"), _TEXT),
    "status": (lambda v: v in RUN_STATES, f"one of {', '.join(RUN_STATES)}"),
    **dict.fromkeys(("points_planned", "points_stored"), _COUNT),
    **dict.fromkeys(("threads", "cpu_cores", "cpu_logical_cores"), _POSITIVE),
    **dict.fromkeys(("hostname", "cpu_model"), _NAME),
    "devices": (lambda v: isinstance(v, list) and all(isinstance(d, dict) for d in v), "a list of objects"),
}
PROCESS = uuid.uuid4().hex[:12]  # this process, in started.jsonl (a pid can be reused)


def is_run_dir(path: Path) -> bool:
    return (path / META).exists()


def unbegun(path: Path) -> bool:
    return not path.exists() or path.is_dir() and all(p.name in WRITER_FILES for p in path.iterdir())


def list_runs(root: Path | None = None) -> list[Path]:
    root = root or storage.RESULTS_ROOT
    if not root.exists():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and is_run_dir(p))


def make_run_id(device_tag: str, now: datetime | None = None) -> str:
    now = now or datetime.now(UTC)
    return f"{now:%Y%m%dT%H%M%SZ}-{device_tag}"


def new_run_dir(root: Path, run_id: str) -> Path:
    """Create root/<run_id> (suffixing -2, -3 ... if taken); never reuse an existing folder."""
    root.mkdir(parents=True, exist_ok=True)
    for suffix in [""] + [f"-{i}" for i in range(2, 1000)]:
        path = root / f"{run_id}{suffix}"
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue
    raise RunFailed(f"could not find a free run folder name for {run_id} under {root}")


def hold(run_dir: Path) -> FileLock:
    """The folder's writer lock (an OS lock: a killed holder's is dropped); BadInput naming the holder if taken."""
    lock = FileLock(str(run_dir / LOCK_NAME), timeout=0, thread_local=False)
    try:
        lock.acquire()
    except Timeout:
        raise BadInput(
            f"{run_dir}: another process is writing this run folder ({_owner(run_dir)}); "
            "one writer at a time: wait for it to end, or stop it"
        ) from None
    owner = {"pid": os.getpid(), "host": platform.node(), "since": storage.utc_now(), "command": " ".join(sys.argv)}
    storage.write_json(run_dir / OWNER_NAME, owner)
    return lock


def _owner(run_dir: Path) -> str:
    try:
        owner = json.loads((run_dir / OWNER_NAME).read_text())
        return f"pid {owner['pid']} on {owner['host']} since {owner['since']}: {owner['command']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "a process that has not said who it is yet"


def claim_out_dir(path: Path) -> tuple[Path, FileLock]:
    """--out DIR, new or empty; held before it is found empty, so of several processes one gets it."""
    refused = BadInput(
        f"--out {path}: exists and is not empty; runs are never overwritten "
        f"(choose a new folder, or --resume {shlex.quote(str(path))} to finish it)"
    )
    if path.exists() and not path.is_dir():
        raise BadInput(f"--out {path}: exists and is not a folder")
    if not unbegun(path):
        raise refused
    path.mkdir(parents=True, exist_ok=True)
    lock = hold(path)
    if not unbegun(path):
        lock.release()
        raise refused
    return path, lock


def read_meta(run_dir: Path, required: tuple[str, ...] = META_KEYS) -> dict:
    path = run_dir / META
    meta = storage.read_json(path)
    if not isinstance(meta, dict):
        raise RunFailed(f"{path}: damaged, expected a JSON object, found {type(meta).__name__}")
    missing = [key for key in required if key not in meta]
    if missing:
        raise RunFailed(f"{path}: damaged, keys {', '.join(missing)} missing")
    for key, (fits, expected) in META_TYPES.items():
        if meta.get(key) is not None and not fits(meta[key]):
            raise RunFailed(f"{path}: damaged, {key} {meta[key]!r}, expected {expected}")
    formats.schema_of(meta, path)
    return meta


def read_points(run_dir: Path, plan: dict[str, dict] | None = None) -> pd.DataFrame:
    """points.csv, checked (storage.check_points), older rows with their `mode`."""
    path = run_dir / POINTS
    df = storage.read_csv(path)
    missing = [c for c in ("layer", "n", "d", "status", "point_id") if c not in df.columns]
    if missing:
        raise RunFailed(f"{path}: damaged, columns {missing} missing")
    return formats.with_mode(storage.check_points(df, path, plan))


def tables_in(run_dir: Path) -> list[str]:
    return [f"{name}.csv" for name in REPORT_TABLES if (run_dir / f"{name}.csv").exists()]


def read_timing_records(run_dir: Path) -> list[dict]:
    return storage.read_jsonl(run_dir / TIMINGS)


def _started_fault(entry) -> str | None:
    if isinstance(entry, dict) and ({"point_id", "attempt", "pass"} <= set(entry) or entry.get("stopped")):
        return None
    return "expected point_id, attempt and pass"


def read_started(run_dir: Path) -> list[dict]:
    return storage.read_jsonl(run_dir / STARTED, _started_fault)


def _larger(spec: PointSpec, than: PointSpec) -> bool:
    """Same layer, device, dtype, mode and other sizes, and at least as large in n, d and batch."""
    same = all(getattr(spec, f) == getattr(than, f) for f in IDENTITY if f not in ("n", "d", "batch"))
    return same and spec.n >= than.n and spec.d >= than.d and spec.batch >= than.batch and spec != than


class RunFolder:
    """A run folder's one writer (meta.json by `update_meta` alone) and what is stored in it so far."""

    def __init__(self, path: Path, lock: FileLock | None = None, meta: dict | None = None):
        self.path, self.lock = path, lock
        self._meta = dict(meta or {})
        self.observer: Callable[[str, dict], None] | None = None
        self._rows: dict[str, dict] = {}
        self._ids_on_disk: set[str] | None = None  # points.csv's ids, read once by the first append
        self._records: dict[tuple[str, int, int], dict] = {}
        self._blockers: list[PointSpec] = []  # out of memory or killed: their larger siblings are skipped
        self._deaths: dict[str, list[dict]] = {}  # point id: the started.jsonl lines of processes that died there

    @classmethod
    def create(cls, out: Path | None, tag: str) -> RunFolder:
        if out is not None:
            return cls(*claim_out_dir(out))
        path = new_run_dir(storage.RESULTS_ROOT, make_run_id(tag))
        return cls(path, hold(path))

    @classmethod
    def open(cls, path: Path, required: tuple[str, ...] = META_KEYS) -> RunFolder:
        lock = hold(path)
        try:
            return cls(path, lock, read_meta(path, required))
        except BaseException:
            lock.release()
            raise

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()

    def discard_unbegun(self) -> None:
        (self.path / PLAN).unlink(missing_ok=True)
        self.release()
        for name in WRITER_FILES:
            (self.path / name).unlink(missing_ok=True)

    @property
    def meta(self) -> MappingProxyType:
        return MappingProxyType(self._meta)

    def has_meta(self) -> bool:
        return (self.path / META).exists()

    def update_meta(self, **changes) -> None:
        """The one writer of meta.json: `changes` set, the file written whole."""
        self._meta.update(changes)
        storage.write_json(self.path / META, self._meta)

    def extend_meta(self, key: str, item) -> None:
        self.update_meta(**{key: [*self._meta.get(key, []), item]})

    def begin(self, kind: str, command: list[str], preset: str | None, threads: int, **more) -> None:
        """meta.json of a new folder of any kind (a sweep, paths, claims), with `more` keys."""
        meta = {
            "run_id": self.path.name,
            "kind": kind,
            "schema": formats.SCHEMA,
            "started_utc": storage.utc_now(),
            "finished_utc": None,
            "status": "running",
            "command": formats.command_line(command),
            "preset": preset,
            **machine.run_meta(threads),
        }
        self.update_meta(**(meta | more))

    def save_json(self, name: str, obj) -> None:
        if name == META:
            raise ValueError("meta.json is written by update_meta")
        storage.write_json(self.path / name, obj)

    def write_plan(
        self, specs: list[PointSpec], policy: TimingPolicy, seed: int, extended: list[PointSpec] = ()
    ) -> str:
        """plan.json: what a resume finishes (the added points apart), its policy as stored first; returns plan_sha1."""
        kept = storage.read_json(self.path / PLAN)["timing_policy"] if (self.path / PLAN).exists() else None
        plan = {"specs": [s.as_row() for s in specs], "timing_policy": kept or policy.as_dict(), "seed": seed}
        if extended:
            plan["extended"] = [s.as_row() for s in extended]
        self.save_json(PLAN, plan)
        return formats.plan_digest(plan)

    def read_plan(self) -> tuple[list[PointSpec], TimingPolicy, int, list[PointSpec]]:
        """plan.json's specs, policy, seed and added points, each checked against itself and meta.json."""
        path, plan, meta = self.path / PLAN, storage.read_json(self.path / PLAN), self._meta
        if not isinstance(plan, dict) or not isinstance(plan.get("specs"), list) or "timing_policy" not in plan:
            raise RunFailed(f"{path}: damaged, expected an object with `specs` (a list) and `timing_policy`")
        if "plan_digest" in meta:
            if meta["plan_digest"] != formats.plan_digest(plan):
                raise RunFailed(
                    f"{path}: does not match this folder's meta.json (plan_digest: its points, timing policy or seed "
                    "changed since the run began)"
                )
        elif meta.get("plan_sha1") not in (None, formats.specs_digest(plan)):
            raise RunFailed(f"{path}: does not match this folder's meta.json (plan_sha1): a plan from another run?")
        # meta.json takes an extension round before plan.json: either may be the newer
        if "extended_sha1" in meta and formats.extended_digest(plan.get("extended", [])) not in (
            meta["extended_sha1"],
            meta.get("extended_sha1_before"),
        ):
            raise RunFailed(f"{path}: its extended points are not the ones the run added (meta.json's extended_sha1)")
        specs, extended = [], []
        for key, into in (("specs", specs), ("extended", extended)):
            for index, row in enumerate(plan.get(key, [])):
                try:
                    into.append(validate(PointSpec(**row)))
                except (TypeError, BadInput) as exc:
                    raise RunFailed(f"{path}: damaged at {key}[{index}]: {exc}") from None
        try:
            policy = TimingPolicy.stored(plan["timing_policy"])
        except TypeError as exc:
            raise RunFailed(f"{path}: damaged at timing_policy: {exc}") from None
        if meta.get("points_planned") not in (None, len(specs)):
            raise RunFailed(f"{path}: {len(specs)} points, meta.json planned {meta['points_planned']}")
        return specs, policy, plan.get("seed", 0), extended

    def add_table(self, name: str, table: pd.DataFrame) -> Path:
        if (self.path / name).exists():
            raise BadInput(f"--out {self.path}: already has {name}; run folders are never overwritten")
        storage.write_table(self.path / name, table)
        return self.path / name

    def point_columns(self) -> list[str]:
        return formats.points_header(self.path / POINTS, schema.names())

    def points(self) -> pd.DataFrame:
        return read_points(self.path)

    def append_point(self, row: dict) -> None:
        """A row in points.csv; a point stored already, or a value in a column an older folder lacks, is refused."""
        known = schema.names()
        extra = set(row) - set(known)
        if extra:
            raise ValueError(f"row has columns not in the schema: {sorted(extra)}")
        path, columns = self.path / POINTS, self.point_columns()
        lost = sorted(c for c in set(known) - set(columns) if row.get(c) not in (None, ""))
        if lost:
            raise RunFailed(
                f"{path}: stored without the columns {lost}, which this row fills; measure into a new folder"
            )
        complete = storage.complete_row(columns)
        storage.repair_tail(path, complete)
        if self._ids_on_disk is None:
            self._ids_on_disk = set()
            if path.exists():
                with open(path, newline="") as rows:
                    self._ids_on_disk = {r.get("point_id") for r in csv.DictReader(rows)}
        if row["point_id"] in self._rows or row["point_id"] in self._ids_on_disk:
            raise RunFailed(f"{path}: point {row['point_id']} ({row.get('layer')}, n={row.get('n')}) is already stored")
        storage.append_row(path, {c: row.get(c) for c in columns}, columns, complete)
        self._rows[row["point_id"]] = row

    def store_row(self, spec: PointSpec, row: dict) -> None:
        row = dict(row, finished_utc=storage.utc_now())
        self.append_point(row)
        if row["status"] in ("oom", "killed"):
            self._blockers.append(spec)
        self._tell("row", row)

    def store_record(self, record: dict) -> None:
        storage.repair_tail(self.path / TIMINGS)
        storage.append_line(self.path / TIMINGS, json.dumps(record, default=str) + "\n")
        self._records[(record["point_id"], record["attempt"], record["pass"])] = record
        self._tell("record", record)

    def store_error(self, spec: PointSpec, traceback_text: str) -> None:
        storage.append_line(self.path / ERRORS, f"=== {storage.utc_now()} {spec.key}\n{traceback_text.rstrip()}\n")
        self._tell("error", {"point_id": spec.point_id, "traceback": traceback_text})

    def note_start(self, point_id: str, attempt: int, p: int) -> None:
        entry = {"point_id": point_id, "attempt": attempt, "pass": p}
        self._started_line(entry | at_start())  # to judge later whether memory killed it
        self._tell("started", entry)

    def note_stop(self) -> None:
        """This process stops cleanly (an interrupt, an error): its last start was no death."""
        if (self.path / STARTED).exists():
            self._started_line({"stopped": True})

    def _started_line(self, entry: dict) -> None:
        path = self.path / STARTED
        storage.repair_tail(path)
        line = dict(entry, process=PROCESS, pid=os.getpid(), utc=storage.utc_now())
        storage.append_line(path, json.dumps(line) + "\n")

    def _tell(self, what: str, payload: dict) -> None:
        if self.observer is not None:
            self.observer(what, payload)

    def read_stored(self, specs: list[PointSpec]) -> None:
        """Rows, pass records and deaths (last starts whose pass was never stored), checked against `specs`."""
        by_id = {s.point_id: s for s in specs}
        path = self.path / POINTS
        if path.exists():
            storage.repair_tail(path, storage.complete_row(self.point_columns()))
        if path.exists() and path.stat().st_size:
            self._ids_on_disk = set()  # every row is in self._rows: the first append need not read the file again
            for row in read_points(self.path, {pid: s.as_row() for pid, s in by_id.items()}).to_dict("records"):
                self._rows[row["point_id"]] = row
                if row["status"] in ("oom", "killed"):
                    self._blockers.append(by_id[row["point_id"]])

        def planned(record) -> str | None:
            formats.check_record(record, self.path / TIMINGS)
            return None if record["point_id"] in by_id else f"point {record['point_id']} is not in plan.json"

        for record in storage.read_jsonl(self.path / TIMINGS, planned):
            self._records[(record["point_id"], record["attempt"], record["pass"])] = record
        last = {formats.process_of(entry): entry for entry in read_started(self.path)}
        for entry in last.values():
            pid = entry.get("point_id")
            if entry.get("stopped") or pid not in by_id or pid in self._rows:
                continue
            if (pid, entry["attempt"], entry["pass"]) not in self._records:
                self._deaths.setdefault(pid, []).append(entry)

    def stored(self, point_id: str) -> bool:
        return point_id in self._rows

    def record(self, point_id: str, attempt: int, p: int) -> dict | None:
        return self._records.get((point_id, attempt, p))

    def records_of(self, *point_ids: str) -> list[dict]:
        wanted = set(point_ids)
        return [r for _key, r in sorted(item for item in self._records.items() if item[0][0] in wanted)]

    def deaths(self, point_id: str) -> int:
        return len(self._deaths.get(point_id, []))

    def death_lines(self, point_id: str) -> list[dict]:
        """The started.jsonl lines of the processes that died measuring the point, oldest first."""
        return list(self._deaths.get(point_id, []))

    def blocked_by(self, spec: PointSpec) -> PointSpec | None:
        """A smaller point of the same sweep that ran out of memory or was killed."""
        return next((b for b in self._blockers if _larger(spec, b)), None)


def check_side_table_out(kind: str, out: Path | None) -> None:
    """BadInput before measuring where `store_side_table` could not write `out`."""
    if out is None or not out.exists():
        return
    if not out.is_dir():
        raise BadInput(f"--out {out}: exists and is not a folder")
    if is_run_dir(out):
        if (out / f"{kind}.csv").exists():
            raise BadInput(f"--out {out}: already has {kind}.csv; run folders are never overwritten")
        return
    if any(p.name not in WRITER_FILES for p in out.iterdir()):
        raise BadInput(
            f"--out {out}: exists and is not empty nor a run folder; give a new folder, or a run folder to add "
            f"{kind}.csv to"
        )


def store_side_table(kind: str, table, *, out: Path | None, command: list[str], preset: str | None, **meta) -> Path:
    """paths.csv / claims.csv / generate.csv, added to an existing run folder or in a new one; returns its path."""
    folder = RunFolder.open(out, ()) if out is not None and is_run_dir(out) else RunFolder.create(out, kind)
    try:
        if not folder.has_meta():
            finished = dict(status="finished", finished_utc=storage.utc_now())
            folder.begin(kind, command, preset, torch.get_num_threads(), **finished, **meta)
        elif meta:
            folder.update_meta(**{key: {**(folder.meta.get(key) or {}), **value} for key, value in meta.items()})
        return folder.add_table(f"{kind}.csv", table)
    finally:
        folder.release()
