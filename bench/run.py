"""The life of a run: create its folder, resume it, execute it in interleaved passes, finish it.

A run measures its plan (a list of PointSpec) in `policy.passes` passes. Pass 0 visits the points in plan
order (smallest first, so a point that runs out of memory stops its larger siblings before they are tried)
and, for each point, calibrates its rounds, times its first share and counts its FLOPs and memory. Passes
1.. visit every point again in a fresh shuffled order (bench.timing.pass_order), each timing another share
of its rounds. Every pass of every point is appended to timings.jsonl as it finishes, so a kill loses at
most the pass in flight and `--resume` goes on from there.

Then the run samples until each point's time is known: a point whose median is not to be trusted on the clock
its fits use (bench.timing.choose_clock) gets more passes, interleaved over those points alone, until it is,
or until `policy.extra_passes` more passes or `policy.extra_budget` of the first passes' time are spent; a
point's statistics are over all its rounds. Then each point gets its points.csv row. A point that fails (out
of memory, an error) gets its row at once, with the full traceback in errors.log, and is not visited again.

The machine's load is watched throughout (bench.load): before the run, to choose the thread count and warn
if the machine is busy; during each pass and each point's timed rounds, stored in meta.json and the rows.

Where the points are measured is this process, or, with `measure_with` (bench.cluster: the nodes of a Ray
cluster), something else that measures the pending points and stores what comes back through this Run, the
folder's one writer; an `observer` hears each pass start and each record, row and error as they are stored
(how a Ray worker streams its chunk back to the driver).

One process writes a run folder at a time (storage.hold, for the life of the Run). Before each pass over a
point, a line in started.jsonl says so; a point started and never stored KILLED_AFTER times (its process
was killed while measuring it: the kernel's OOM killer or a memory limit, most likely) is stored as `killed`
and not tried again, so a resume goes on past it. meta.json says `finished` only when everything is written.
"""

from __future__ import annotations

import hashlib
import json
import signal
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean

import torch
from tqdm import tqdm

import models

from . import allocator, machine, storage
from .errors import BadInput, RunFailed
from .load import Load, LoadMeter, busy_warning, choose_threads, physical_cores, sample_load
from .peak import compute_peak, with_measurement
from .point import PassFailure, base_row, measure_pass, point_row
from .spec import PointSpec, device_key, validate
from .threads import pinned_threads
from .timing import Timing, TimingPolicy, choose_clock, method_constants, pass_order, rounds_of, summarize

# A record's `attempt`: 0 for the plan's passes, 1 for the passes that sample a point until its time is known
# (a run from before sampling stored a whole second set of passes as attempt 1).
FIRST, EXTRA = 0, 1
KILLED_AFTER = 2  # deaths of the process while measuring one point before it is stored as `killed`
META_REQUIRED = (*storage.META_KEYS, "threads", "machine_info", "commit_info")  # what a resume needs
PASS_ONLY_KEYS = ("pass", "attempt", "others_busy_cores", "probes", "visit_s")  # kept out of a point's merged record


def decide_threads(requested: int | None, cap: int | None = None) -> tuple[int, str, Load]:
    """(threads, why, load before the run): the user's --threads, or what the free cores allow, at most `cap`
    (the CPUs a Ray worker holds) where one is given."""
    load = sample_load()
    if requested is not None:
        return requested, f"--threads {requested}, as asked", load
    threads, why = choose_threads(load, physical_cores())
    if cap is not None and threads > cap:
        threads, why = cap, f"{why}; at most the {cap} CPU(s) this worker holds"
    return threads, why, load


@contextmanager
def sigterm_as_interrupt():
    """A scheduler's SIGTERM ends the run like Ctrl-C: cleanly, with status `interrupted`."""

    def handler(signum, frame):
        raise KeyboardInterrupt

    try:
        old = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _larger(spec: PointSpec, than: PointSpec) -> bool:
    """Same layer, device, dtype and other settings, and at least as large in n, d and batch."""
    same = (spec.layer, spec.device, spec.dtype, spec.k, spec.heads, spec.window, spec.dilation) == (
        than.layer,
        than.device,
        than.dtype,
        than.k,
        than.heads,
        than.window,
        than.dilation,
    )
    return same and spec.n >= than.n and spec.d >= than.d and spec.batch >= than.batch and spec != than


@dataclass
class _State:
    """What is stored so far: rows by point id, pass records by (point id, attempt, pass)."""

    rows: dict[str, dict] = field(default_factory=dict)
    records: dict[tuple[str, int, int], dict] = field(default_factory=dict)
    timings: dict[str, tuple[int, Timing]] = field(default_factory=dict)  # summaries, by the records they cover
    ooms: list[PointSpec] = field(default_factory=list)  # out of memory or killed: larger siblings are skipped
    deaths: dict[str, int] = field(default_factory=dict)  # passes started and never stored, by point id


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


@dataclass
class Run:
    dir: Path
    meta: dict
    specs: list[PointSpec]
    policy: TimingPolicy
    seed: int = 0
    log: Callable[[str], None] = _stderr
    lock: object = None  # the folder's writer lock (storage.hold), held until the run ends
    stored: _State | None = None  # what a resume found stored and checked, measured on from there
    # Measures the pending points elsewhere (bench.cluster): called as measure_with(run, state, progress) in
    # place of the passes in this process; it stores what it gets through `store_record` and `store_row`.
    measure_with: Callable[[Run, _State, bool], None] | None = None
    observer: Callable[[str, dict], None] | None = None  # hears "started", "record", "row", "error"
    measure_peaks: bool = True  # a Ray worker's chunk leaves the compute peak to its node (bench.cluster)

    # ------------------------------------------------------------------------------------ create
    @classmethod
    def create(
        cls,
        specs: list[PointSpec],
        policy: TimingPolicy,
        *,
        out: Path | None,
        command: list[str],
        preset: str | None,
        threads: int | None = None,
        threads_cap: int | None = None,
        seed: int = 0,
        log: Callable[[str], None] = _stderr,
        measure_with: Callable[[Run, _State, bool], None] | None = None,
    ) -> Run:
        """A new run folder with meta.json and plan.json; the thread count chosen from the free cores (at most
        `threads_cap`) unless given. With `measure_with`, the points are measured elsewhere (see Run)."""
        threads, why, load = decide_threads(threads, threads_cap)
        run_dir, lock = new_run_folder(out, "-".join(sorted({s.device for s in specs})))
        try:
            return cls._create_in(
                run_dir, lock, specs, policy, command, preset, threads, why, load, seed, log, measure_with
            )
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM while the folder is being made: say so in it
            if (run_dir / "meta.json").exists():
                meta = storage.read_json(run_dir / "meta.json")
                storage.write_json(run_dir / "meta.json", meta | {"status": "interrupted"})
            lock.release()
            raise

    @classmethod
    def _create_in(
        cls, run_dir, lock, specs, policy, command, preset, threads, why, load, seed, log, measure_with
    ) -> Run:
        meta = run_meta("run", command, preset, threads)
        meta.update(
            run_id=run_dir.name,
            points_planned=len(specs),
            threads_reason=why,
            load_before=load.as_dict(),
            timing_policy=policy.as_dict(),
            timing_method=method_constants(),
            allocator=allocator.pin(),
            load_passes=[],
        )
        plan = {"specs": [s.as_row() for s in specs], "timing_policy": policy.as_dict(), "seed": seed}
        meta["plan_sha1"] = _plan_digest(plan)
        storage.write_json(run_dir / "plan.json", plan)
        storage.write_json(run_dir / "meta.json", meta)
        run = cls(run_dir, meta, specs, policy, seed, log, lock, measure_with=measure_with)
        run._announce(load)
        return run

    @classmethod
    def resume(
        cls,
        run_dir: Path,
        log: Callable[[str], None] = _stderr,
        measure_with: Callable[[Run, _State, bool], None] | None = None,
    ) -> Run:
        """The run in `run_dir`, held, its meta.json and plan.json checked; RunFailed naming what is damaged.
        With `measure_with`, the rest is measured elsewhere (see Run), which checks its own devices."""
        if not run_dir.is_dir() or not storage.is_run_dir(run_dir):
            raise BadInput(f"--resume {run_dir}: not a run folder (no meta.json there)")
        lock = storage.hold(run_dir)
        try:
            meta = storage.read_meta(run_dir, META_REQUIRED)
            plan = storage.read_json(run_dir / "plan.json")
            specs, policy = _read_plan(run_dir / "plan.json", plan, meta)
        except BaseException:
            lock.release()
            raise
        for device in {s.device for s in specs} if measure_with is None else ():
            if device == "cuda" and not machine.cuda_available():
                lock.release()
                raise BadInput(f"--resume {run_dir}: its plan measures cuda, and no CUDA GPU is present here")
        run = cls(run_dir, meta, specs, policy, plan.get("seed", 0), log, lock, measure_with=measure_with)
        try:
            run.stored = run._stored_state()  # checked before anything is said or written
        except BaseException:
            lock.release()
            raise
        if meta.get("status") != "finished":
            meta.setdefault("resumed_utc", []).append(storage.utc_now())
            meta.update(status="running", finished_utc=None)
            storage.write_json(run_dir / "meta.json", meta)
        run._announce(sample_load())
        return run

    @property
    def threads(self) -> int:
        return int(self.meta["threads"])

    def _announce(self, load) -> None:
        if self.measure_with is not None:
            return  # measured elsewhere: each node chooses its threads and watches its own load
        self.log(f"threads: {self.meta.get('threads_reason') or self.threads}")
        warning = busy_warning(load)
        if warning:
            self.log(warning)

    # ----------------------------------------------------------------------------------- execute
    def execute(self, progress: bool = True) -> dict:
        """Measure what is not stored yet. Returns the finished meta; KeyboardInterrupt (Ctrl-C, SIGTERM)
        marks the run `interrupted` and propagates after the last finished pass is stored."""
        try:
            if self.meta.get("status") == "finished":
                self.log(f"{self.dir}: finished already ({self.meta.get('finished_utc')}); nothing to measure")
                return self.meta
            return self._execute(progress)
        finally:
            if self.lock is not None:
                self.lock.release()

    def _execute(self, progress: bool) -> dict:
        started = time.monotonic()
        state = self.stored if self.stored is not None else self._stored_state()
        self._store_killed(state)
        try:
            with sigterm_as_interrupt():
                if self.measure_with is not None:
                    self.measure_with(self, state, progress)
                else:
                    with pinned_threads(self.threads):
                        self._measure_here(state, progress)
        except KeyboardInterrupt:
            storage.append_stopped(self.dir)
            self.meta.update(status="interrupted", finished_utc=storage.utc_now())
            storage.write_json(self.dir / "meta.json", self.meta)
            raise
        except storage.DiskFull:
            self.meta.update(status="interrupted", finished_utc=storage.utc_now())
            try:
                storage.write_json(self.dir / "meta.json", self.meta)
            except storage.DiskFull:
                pass  # meta.json keeps `running`: still not `finished`
            raise
        except Exception:
            storage.append_stopped(self.dir)  # an error, not a death of the process
            raise
        return self._finish(state, time.monotonic() - started)

    def _measure_here(self, state: _State, progress: bool) -> None:
        """The pending points, in this process: the passes, sampling until each time is known, the rows."""
        allocator.pin()
        if self.measure_peaks:
            self._measure_peaks("start")
        pending = [s for s in self.specs if s.point_id not in state.rows]
        self._passes(pending, FIRST, range(self.policy.passes), state, progress)
        self._sample_until_known(pending, state, progress)
        for spec in pending:
            if spec.point_id not in state.rows:
                self.store_row(spec, self._final_row(spec, state), state)
        if self.measure_peaks:
            self._measure_peaks("end")

    def _sample_until_known(self, pending: list[PointSpec], state: _State, progress: bool) -> None:
        """More passes over the points whose time is not known yet on their clock, one pass at a time, within
        the policy's extra passes and budget (module docstring). Decided from the stored records alone, so a
        resume goes on where the run stopped."""
        measured = [s for s in pending if s.point_id not in state.rows]
        budget_s = self.policy.extra_budget * self._visits_s(measured, FIRST, state)
        for extra in range(self.policy.extra_passes):
            unknown = [s for s in measured if s.point_id not in state.rows and not self._known(s, state)]
            if not unknown:
                return
            spent_s = self._visits_s(measured, EXTRA, state)
            if spent_s >= budget_s:
                self.log(
                    f"{len(unknown)} point(s) not known yet, and the extra passes' budget is spent "
                    f"({spent_s:.0f} s of {budget_s:.0f} s): kept, flagged"
                )
                return
            if any((s.point_id, EXTRA, extra) not in state.records for s in unknown):
                self.log(f"pass {self.policy.passes + extra + 1}: {len(unknown)} point(s) whose time is not known yet")
            self._passes(unknown, EXTRA, [extra], state, progress)

    def _visits_s(self, specs: list[PointSpec], attempt: int, state: _State) -> float:
        """Seconds the stored visits of `attempt` over `specs` took (records from before visit_s: their rounds)."""
        ids = {s.point_id for s in specs}
        return sum(
            r.get("visit_s", sum(r["stats"]["data"]) * r["stats"].get("iterations", 1))
            for (pid, a, _), r in state.records.items()
            if a == attempt and pid in ids
        )

    def _known(self, spec: PointSpec, state: _State) -> bool:
        """Whether the point's median can be trusted on the clock its fits use."""
        timing = self._timing(spec, state)
        clock, _ = choose_clock(timing, self._others(spec, state), self.policy.clock)
        return timing.on(clock).reliable

    def _stored_state(self) -> _State:
        """What the folder holds, checked against the plan: rows, pass records, and the points started and
        never finished (storage.read_points and read_timing_records name anything damaged)."""
        state = _State()
        by_id = {s.point_id: s for s in self.specs}
        points_path = self.dir / "points.csv"
        if points_path.exists():
            storage.repair_tail(
                points_path, storage._complete_row(storage.stored_columns(points_path, storage.POINT_COLUMNS))
            )
            if points_path.stat().st_size:
                plan = {pid: spec.as_row() for pid, spec in by_id.items()}
                for row in storage.read_points(self.dir, plan).to_dict("records"):
                    state.rows[row["point_id"]] = row
                    if row["status"] in ("oom", "killed"):
                        state.ooms.append(by_id[row["point_id"]])
        timings = self.dir / "timings.jsonl"
        for number, record in enumerate(storage.read_timing_records(self.dir), 1):
            if not {"point_id", "attempt", "pass"} <= set(record):
                raise RunFailed(
                    f"{timings}: written by an older version without interleaved passes; it cannot be resumed "
                    f"(start a new run)"
                )
            if record["point_id"] not in by_id:
                raise RunFailed(f"{timings}: damaged at line {number}: point {record['point_id']} is not in plan.json")
            state.records[(record["point_id"], record["attempt"], record["pass"])] = record
        last = {}  # each process's last line: a death if it is a start whose pass was never stored
        for entry in storage.read_started(self.dir):
            last[entry.get("process", entry.get("pid"))] = entry
        for entry in last.values():
            if entry.get("stopped") or entry["point_id"] not in by_id or entry["point_id"] in state.rows:
                continue
            if (entry["point_id"], entry["attempt"], entry["pass"]) not in state.records:
                state.deaths[entry["point_id"]] = state.deaths.get(entry["point_id"], 0) + 1
        return state

    def _store_killed(self, state: _State) -> None:
        """Points whose process died KILLED_AFTER times while measuring them: stored as `killed`, not tried again."""
        for spec in self.specs:
            deaths = state.deaths.get(spec.point_id, 0)
            if deaths >= KILLED_AFTER and spec.point_id not in state.rows:
                reason = (
                    f"the process died {deaths} times while measuring this point and left no error: killed from "
                    "outside, most likely for memory (the kernel's OOM killer or a memory limit); not tried again"
                )
                self.log(f"{spec.layer} n={spec.n} d={spec.d} batch={spec.batch}: {reason}")
                self.store_row(spec, dict(base_row(spec, self.threads), status="killed", error=reason), state)
                state.ooms.append(spec)

    def _measure_peaks(self, when: str) -> None:
        """The compute peak of each device and dtype (bench.peak), measured at the start and again at the end of
        the run; on each clock the peak is the better of the two (a slow phase can only lower it)."""
        peaks = self.meta.setdefault("compute_peak", {})
        for device, dtype in sorted({(s.device, s.dtype) for s in self.specs}):
            key = device_key(device, dtype)
            if when in peaks.get(key, {}).get("measured", {}):
                continue
            self.log(f"compute peak of {key}, at the {when} of the run")
            peaks[key] = with_measurement(peaks.get(key), when, compute_peak(device, models.DTYPES[dtype]))
        storage.write_json(self.dir / "meta.json", self.meta)

    def _passes(self, specs: list[PointSpec], attempt: int, passes, state: _State, progress: bool) -> None:
        """The passes numbered `passes` of `attempt` over `specs`, skipping those already stored."""
        todo = sum(1 for p in passes for s in specs if (s.point_id, attempt, p) not in state.records)
        bar = tqdm(
            total=todo,
            desc="points" if attempt == FIRST else "more",
            unit="pt",
            disable=not progress,
            file=sys.stderr,
            dynamic_ncols=True,
        )
        shown = self.policy.passes if attempt == FIRST else self.policy.passes + self.policy.extra_passes
        try:
            for p in passes:
                first = attempt == FIRST and p == 0
                order = specs if first else pass_order(specs, attempt * self.policy.passes + p, self.seed)
                number = p + 1 if attempt == FIRST else self.policy.passes + p + 1
                meter = LoadMeter()
                visited = 0
                for spec in order:
                    if spec.point_id in state.rows or (spec.point_id, attempt, p) in state.records:
                        continue
                    bar.set_postfix_str(f"pass {number}/{shown} {spec.layer} n={spec.n} d={spec.d}", refresh=False)
                    self._visit(spec, attempt, p, state)
                    visited += 1
                    bar.update(1)
                if visited:
                    self._note_pass_load(attempt, p, number, meter)
        finally:
            bar.close()

    def skip_if_blocked(self, spec: PointSpec, state: _State) -> bool:
        """Store `spec` as `skipped` if a smaller point of its sweep ran out of memory or was killed."""
        blocker = next((o for o in state.ooms if _larger(spec, o)), None)
        if blocker is None:
            return False
        reason = f"larger than n={blocker.n} d={blocker.d} batch={blocker.batch}, which ran out of memory or was killed"
        self.store_row(spec, dict(base_row(spec, self.threads), status="skipped", error=reason), state)
        return True

    def _visit(self, spec: PointSpec, attempt: int, p: int, state: _State) -> None:
        first = attempt == FIRST and p == 0
        started_s = time.monotonic()
        if first and self.skip_if_blocked(spec, state):
            return
        plan = None if first else self._plan(spec, state)
        started = {"point_id": spec.point_id, "attempt": attempt, "pass": p}
        storage.append_started(self.dir, started)
        self._tell("started", started)
        result = measure_pass(spec, self.policy, plan, seed=self.seed, with_probes=first)
        if isinstance(result, PassFailure):
            self.store_error(spec, result.traceback)
            row = dict(base_row(spec, self.threads), status=result.status, error=result.error)
            self.store_row(spec, row, state)
            if result.status == "oom":
                state.ooms.append(spec)
            return
        record = dict(
            result.record,
            point_id=spec.point_id,
            attempt=attempt,
            spec=spec.as_row(),
            rounds_planned=result.rounds_planned,
            iterations=result.iterations,
            others_busy_cores=result.others_busy_cores,
            probes=result.probes,
            visit_s=round(time.monotonic() - started_s, 4),
        )
        record["pass"] = p
        self.store_record(record, state)

    def store_record(self, record: dict, state: _State) -> None:
        """One pass over one point, appended to timings.jsonl as it finishes."""
        storage.append_timing_record(self.dir, record)
        state.records[(record["point_id"], record["attempt"], record["pass"])] = record
        self._tell("record", record)

    def store_error(self, spec: PointSpec, traceback_text: str) -> None:
        """The whole traceback of a point that failed, in errors.log (its row keeps the first line)."""
        storage.append_error(self.dir, spec.key, traceback_text)
        self._tell("error", {"point_id": spec.point_id, "traceback": traceback_text})

    def _tell(self, what: str, payload: dict) -> None:
        if self.observer is not None:
            self.observer(what, payload)

    def _plan(self, spec: PointSpec, state: _State) -> tuple[int, int]:
        first = state.records[(spec.point_id, 0, 0)]
        return int(first["rounds_planned"]), int(first["iterations"])

    def _note_pass_load(self, attempt: int, p: int, number: int, meter: LoadMeter) -> None:
        load = meter.read()
        self.meta.setdefault("load_passes", []).append(dict(attempt=attempt, **{"pass": p}, **load.as_dict()))
        storage.write_json(self.dir / "meta.json", self.meta)
        if load.busy:
            self.log(
                f"pass {number}: other processes took {load.others_busy_cores:.1f} cores "
                f"(load average {load.loadavg_1m:.2f})"
            )

    def _records(self, spec: PointSpec, state: _State) -> list[dict]:
        """Every stored pass over the point, in the order they ran: the plan's passes, then the extra ones."""
        return [r for key, r in sorted(state.records.items()) if key[0] == spec.point_id]

    def _others(self, spec: PointSpec, state: _State) -> float:
        """The cores other processes took while the point's rounds were timed, averaged over its passes."""
        return fmean(r["others_busy_cores"] for r in self._records(spec, state))

    def _timing(self, spec: PointSpec, state: _State) -> Timing:
        """The statistics of the point over all its stored passes, summarized again only when one is added."""
        records = self._records(spec, state)
        cached = state.timings.get(spec.point_id)
        if cached is None or cached[0] != len(records):
            if not records or (spec.point_id, FIRST, 0) not in state.records:
                raise RunFailed(f"{self.dir}: point {spec.key} has no stored first pass")
            template = {k: v for k, v in records[0].items() if k not in PASS_ONLY_KEYS}
            timing = summarize([rounds_of(r) for r in records], int(records[0]["iterations"]), spec.key, template)
            cached = state.timings[spec.point_id] = (len(records), timing)
        return cached[1]

    def _final_row(self, spec: PointSpec, state: _State) -> dict:
        missing = [p for p in range(self.policy.passes) if (spec.point_id, FIRST, p) not in state.records]
        if missing:
            raise RunFailed(f"{self.dir}: point {spec.key} lacks its passes {missing}")
        timing = self._timing(spec, state)
        others = self._others(spec, state)
        return point_row(
            spec,
            self.threads,
            timing,
            state.records[(spec.point_id, FIRST, 0)]["probes"],
            clock=choose_clock(timing, others, self.policy.clock),
            others_busy_cores=others,
        )

    def store_row(self, spec: PointSpec, row: dict, state: _State) -> None:
        """A point's row in points.csv: it is done (a point is stored once; storage.append_point refuses a
        second row)."""
        row["finished_utc"] = storage.utc_now()
        storage.append_point(self.dir, row)
        state.rows[spec.point_id] = row
        self._tell("row", row)

    # ------------------------------------------------------------------------------------ finish
    def _finish(self, state: _State, elapsed_s: float) -> dict:
        df = storage.read_points(self.dir)
        ok = df[df["status"] == "ok"]
        by_id = {s.point_id: s for s in self.specs}
        benchmarks = [self._timing(by_id[pid], state).record for pid in ok["point_id"] if pid in by_id]
        storage.write_json(
            self.dir / "pytest-benchmark.json",
            {
                "machine_info": self.meta["machine_info"],
                "commit_info": self.meta["commit_info"],
                "benchmarks": benchmarks,
                "datetime": self.meta["started_utc"],
                "version": _pytest_benchmark_version(),
            },
        )
        self.meta.update(  # last: `finished` only once everything else is written
            status="finished",
            finished_utc=storage.utc_now(),
            points_stored=int(len(df)),
            status_counts={k: int(v) for k, v in df["status"].value_counts().items()},
            points_noisy=int(ok["time_noisy"].astype(bool).sum()) if len(ok) else 0,
            points_unreliable=int((~ok["time_reliable"].astype(bool)).sum()) if len(ok) else 0,
            points_sampled_further=int((ok["passes"] > self.policy.passes).sum()) if len(ok) else 0,
            points_cpu_clock=int((ok["time_clock"] == "cpu").sum()) if len(ok) else 0,
            measure_s=round(elapsed_s, 1),
        )
        storage.write_json(self.dir / "meta.json", self.meta)
        return self.meta


def _pytest_benchmark_version() -> str:
    from importlib.metadata import version  # noqa: PLC0415

    return version("pytest-benchmark")


def run_meta(kind: str, command: list[str], preset: str | None, threads: int) -> dict:
    """meta.json of a new run folder of any kind (a sweep, paths, claims)."""
    return {
        "run_id": None,
        "kind": kind,
        "started_utc": storage.utc_now(),
        "finished_utc": None,
        "status": "running",
        "command": " ".join(command),
        "preset": preset,
        **machine.run_meta(threads),
    }


def new_run_folder(out: Path | None, tag: str):
    """(folder, its writer lock): --out DIR (new or empty), or results/<run-id>."""
    if out is not None:
        return storage.claim_out_dir(out)
    run_dir = storage.new_run_dir(storage.RESULTS_ROOT, storage.make_run_id(tag))
    return run_dir, storage.hold(run_dir)


def _plan_digest(plan: dict) -> str:
    return hashlib.sha1(json.dumps(plan["specs"], sort_keys=True, default=str).encode()).hexdigest()


def _read_plan(path: Path, plan, meta: dict) -> tuple[list[PointSpec], TimingPolicy]:
    """The plan's specs and policy, each checked; RunFailed naming the file and the entry that is damaged."""
    if not isinstance(plan, dict) or not isinstance(plan.get("specs"), list) or "timing_policy" not in plan:
        raise RunFailed(f"{path}: damaged, expected an object with `specs` (a list) and `timing_policy`")
    if meta.get("plan_sha1") not in (None, _plan_digest(plan)):
        raise RunFailed(f"{path}: does not match this folder's meta.json (plan_sha1): a plan from another run?")
    specs = []
    for index, row in enumerate(plan["specs"]):
        try:
            specs.append(validate(PointSpec(**row)))
        except (TypeError, BadInput) as exc:
            raise RunFailed(f"{path}: damaged at specs[{index}]: {exc}") from None
    try:
        policy = TimingPolicy.stored(plan["timing_policy"])
    except TypeError as exc:
        raise RunFailed(f"{path}: damaged at timing_policy: {exc}") from None
    if meta.get("points_planned") not in (None, len(specs)):
        raise RunFailed(f"{path}: {len(specs)} points, meta.json planned {meta['points_planned']}")
    return specs, policy


def store_side_table(kind: str, table, *, out: Path | None, command: list[str], preset: str | None) -> Path:
    """paths.csv / claims.csv: added to an existing run folder (never replacing a file), or stored in a new
    run folder of their own. Returns the file's path."""
    filename = f"{kind}.csv"
    if out is not None and storage.is_run_dir(out):
        _lock = storage.hold(out)  # noqa: F841 - held until this process ends: one writer per folder
        if (out / filename).exists():
            raise BadInput(f"--out {out}: already has {filename}; run folders are never overwritten")
        run_dir = out
    else:
        run_dir, _lock = new_run_folder(out, kind)  # held until this process ends
        meta = run_meta(kind, command, preset, torch.get_num_threads())
        meta.update(run_id=run_dir.name, status="finished", finished_utc=storage.utc_now())
        storage.write_json(run_dir / "meta.json", meta)
    storage.write_table(run_dir / filename, table)
    return run_dir / filename
