"""A run: its plan in interleaved passes here or on Ray, sampled until known, stored as it goes. docs/method.md"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from statistics import fmean
from typing import Protocol

from . import allocator, deaths, default_policy, formats, interrupts, machine, outside, planner, storage
from .cost import Measured
from .errors import BadInput, RunFailed
from .estimate import first_pass_line
from .folder import META_KEYS, RunFolder, is_run_dir, unbegun
from .formats import extended_digest
from .load import Load, LoadMeter, busy_warning, decide_threads, sample_load
from .peak import ceilings
from .point import PassFailure, measure_pass
from .policy import TimingPolicy, method_constants
from .preflight import memory_limits
from .progress import progress_bar
from .result import PointResult, point_counts, skip_if_blocked
from .spec import PointSpec
from .threads import pinned_threads
from .timing import pass_order, rounds_of
from .units import format_duration


class Elsewhere(Protocol):
    """Where a run's points are measured when not in this process: a Ray cluster (bench.cluster.Cluster)."""

    def measure(
        self, folder: RunFolder, specs: list[PointSpec], policy: TimingPolicy, *, seed: int, progress: bool
    ) -> None: ...


FIRST, EXTRA = 0, 1  # a record's `attempt`: the plan's passes, then those sampling until the time is known
META_REQUIRED = (*META_KEYS, "threads", "machine_info", "commit_info")
PASS_ONLY_KEYS = ("pass", "attempt", "others_busy_cores", "probes", "probes_s", "visit_s")


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


@dataclass
class Run:
    folder: RunFolder
    specs: list[PointSpec]
    policy: TimingPolicy
    seed: int = 0
    log: Callable[[str], None] = _stderr
    cluster: Elsewhere | None = None  # measures the points on a Ray cluster; None: this process
    measure_peaks: bool = True  # False in a Ray worker's chunk: its node measures the peak
    time_default_policy: bool = False
    extended: list[PointSpec] = field(default_factory=list)
    _results: dict[str, tuple[int, PointResult]] = field(default_factory=dict, init=False, repr=False)
    _sweep_states: dict = field(default_factory=dict, init=False, repr=False)

    @property
    def dir(self) -> Path:
        return self.folder.path

    @property
    def meta(self):
        return self.folder.meta

    @property
    def lock(self):
        return self.folder.lock

    @property
    def threads(self) -> int:
        return int(self.meta["threads"])

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
        cluster: Elsewhere | None = None,
        load: Load | None = None,
    ) -> Run:
        threads, why, load = decide_threads(threads, threads_cap, load)
        folder = RunFolder.create(out, "-".join(sorted({s.device for s in specs})))
        run = cls(folder, specs, policy, seed, log, cluster)
        try:
            digest = folder.write_plan(specs, policy, seed)
            folder.begin(
                "run",
                command,
                preset,
                threads,
                points_planned=len(specs),
                threads_reason=why,
                load_before=load.as_dict(),
                timing_policy=policy.as_dict(),
                timing_method=method_constants(),
                allocator=allocator.pin(),
                load_passes=[],
                plan_digest=digest,
                extended_sha1=extended_digest([]),
                outside_layers=outside.sources({s.layer for s in specs}),
            )
            run._announce(load)
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM while the folder is being made: say so in it
            with interrupts.deferred():
                if folder.has_meta():
                    folder.update_meta(status="interrupted")
                    folder.release()
                else:
                    folder.discard_unbegun()
            raise
        return run

    @classmethod
    def resume(cls, run_dir: Path, log: Callable[[str], None] = _stderr, cluster: Elsewhere | None = None) -> Run:
        """The run in `run_dir`, held, with what is stored checked (RunFailed naming what is damaged)."""
        if unbegun(run_dir):
            raise BadInput(
                f"--resume {run_dir}: no run began there, nothing was stored; start it again: its command with "
                f"--out {run_dir}"
            )
        if not run_dir.is_dir() or not is_run_dir(run_dir):
            raise BadInput(f"--resume {run_dir}: not a run folder (no meta.json there)")
        folder = None
        try:
            with interrupts.deferred():  # a signal while the folder is taken comes once `folder` is set
                folder = RunFolder.open(run_dir, META_REQUIRED)
            outside.restore(folder.meta.get("outside_layers"))
            specs, policy, seed, extended = folder.read_plan()
            if cluster is None and "cuda" in {s.device for s in specs} and not machine.cuda_available():
                raise BadInput(f"--resume {run_dir}: its plan measures cuda, and no CUDA GPU is present here")
            folder.read_stored(specs + extended)  # checked before anything is said or written
            finished = folder.meta.get("status") == "finished"
            lost = [s for s in specs if not folder.stored(s.point_id)] if finished else []
            if lost:
                log(
                    f"{run_dir}: finished, but its points.csv holds {len(specs) - len(lost)} of the {len(specs)} "
                    f"planned points (meta.json counted {folder.meta.get('points_stored')}): measuring the "
                    f"{len(lost)} lost again"
                )
            run = cls(folder, specs + extended, policy, seed, log, cluster, extended=extended)
            if not finished or lost:
                resumed = [*folder.meta.get("resumed_utc", []), storage.utc_now()]
                folder.update_meta(resumed_utc=resumed, status="running", finished_utc=None)
            run._announce(sample_load())
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM while opening: a folder left `running` says `interrupted`
            with interrupts.deferred():
                if folder is not None:
                    if folder.meta.get("status") == "running":
                        folder.update_meta(status="interrupted")
                    folder.release()
            raise
        except BaseException:
            if folder is not None:
                folder.release()
            raise
        return run

    def _announce(self, load: Load) -> None:
        if self.cluster is not None:
            return
        self.log(f"threads: {self.meta.get('threads_reason') or self.threads}")
        warning = busy_warning(load)
        if warning:
            self.log(warning)

    def execute(self, progress: bool = True) -> dict:
        """Measure what is not stored yet; returns meta.json. An interrupt: `interrupted`, and re-raised."""
        try:
            with interrupts.as_exceptions():
                if self.meta.get("status") == "finished":
                    self.log(f"{self.dir}: finished already ({self.meta.get('finished_utc')}); nothing to measure")
                    return dict(self.meta)
                return self._execute(progress)
        except KeyboardInterrupt:
            if self.meta.get("status") == "running":  # not if the finished meta.json was written already
                self._stopped(status="interrupted", finished_utc=storage.utc_now())
            raise
        finally:
            self.folder.release()

    def _stopped(self, **meta) -> None:
        """Stop cleanly (the last start was no death), saying so in meta.json; a second Ctrl-C waits for the write."""
        with interrupts.deferred():
            self.folder.note_stop()
            self.folder.update_meta(**meta)

    def _execute(self, progress: bool) -> dict:
        started = self._started = time.monotonic()
        try:
            self._store_killed()
            if self.cluster is not None:
                if self.policy.extend_budget:
                    self.log("extension: not on a Ray cluster (yet): the grid is measured as given")
                pending = [s for s in self.specs if not self.folder.stored(s.point_id)]
                self.cluster.measure(self.folder, pending, self.policy, seed=self.seed, progress=progress)
            else:
                with pinned_threads(self.threads):
                    self._measure_here(progress)
        except KeyboardInterrupt:
            raise
        except storage.DiskFull:
            try:
                self.folder.update_meta(status="interrupted", finished_utc=storage.utc_now())
            except storage.DiskFull:
                pass  # meta.json keeps `running`: still not `finished`
            raise
        except Exception:
            self.folder.note_stop()  # an error, not a death of the process
            raise
        return self._finish(time.monotonic() - started)

    def _measure_here(self, progress: bool) -> None:
        allocator.pin()
        if self.measure_peaks:
            self._measure_peaks("start")
        self._measure([s for s in self.specs if not self.folder.stored(s.point_id)], progress)
        self._extend(progress)
        if self.time_default_policy:
            default_policy.store(self.folder, self.threads, self.meta.get("outside_layers"), self.log)
        if self.measure_peaks:
            self._measure_peaks("end")

    def _measure(self, pending: list[PointSpec], progress: bool) -> None:
        self._passes(pending, FIRST, range(self.policy.passes), progress)
        self._sample_until_known(pending, progress)
        for spec in pending:
            if not self.folder.stored(spec.point_id):
                self._store(spec, self._final_row(spec))

    def _store(self, spec: PointSpec, row: dict) -> None:
        self.folder.store_row(spec, dict(row, extended=spec in self.extended))

    def _extend(self, progress: bool) -> None:
        if not self.policy.extend_budget:
            return
        planned = [s for s in self.specs if s not in self.extended]
        budget_s = self.policy.extend_budget_s(self._visits_s(planned))
        limits, told = memory_limits({s.device for s in planned}), set()
        started_s, before_s, until = time.monotonic(), self._visits_s(self.extended), self.policy.extend_until_s
        within = f"its {format_duration(budget_s)} budget" if until is None else f"{format_duration(until)} of the run"
        while True:
            ids = {s.point_id: s for s in self.specs}
            points = self.folder.points()
            spent_s = before_s + time.monotonic() - started_s
            left_s = budget_s - spent_s if until is None else until - (time.monotonic() - self._started)
            own = Measured.of_points(points, ids, self.folder.records_of, self.policy)
            chosen, stopped = planner.choose(
                planner.states(points, ids, memo=self._sweep_states), set(ids), own.visit_s, limits, left_s
            )
            for line in planner.lines(chosen, stopped, told):
                self.log(line)
            if not chosen:
                break
            added = [s for c in chosen for s in c.specs]
            done = self.meta.get("extension_rounds", 0)
            self.log(
                f"extension round {done + 1}: {len(added)} point(s), about "
                f"{format_duration(sum(c.cost_s for c in chosen))} ({format_duration(left_s)} left of its budget)"
            )
            before = extended_digest([p.as_row() for p in self.extended])
            self.extended += added
            self.specs += added
            self.folder.update_meta(
                points_extended=len(self.extended),
                extension_rounds=done + 1,
                extended_sha1=extended_digest([p.as_row() for p in self.extended]),
                extended_sha1_before=before,
            )
            self.folder.write_plan(planned, self.policy, self.seed, self.extended)
            self._measure(added, progress)
        if self.extended:
            self.log(
                f"extended: {len(self.extended)} point(s) beyond the plan in {format_duration(spent_s)}, within {within}"
            )

    def _sample_until_known(self, pending: list[PointSpec], progress: bool) -> None:
        """Extra passes over the points whose time is not known yet, within budget, from the stored records alone."""
        measured = [s for s in pending if not self.folder.stored(s.point_id)]
        budget_s = self.policy.extra_budget_s(self._visits_s(measured, FIRST))
        for extra in range(self.policy.extra_passes):
            unknown = [s for s in measured if not self.folder.stored(s.point_id) and not self._result(s).known]
            if not unknown:
                return
            spent_s = self._visits_s(measured, EXTRA)
            if spent_s >= budget_s:
                self.log(
                    f"{len(unknown)} point(s) not known yet, and the extra passes' budget is spent "
                    f"({spent_s:.0f} s of {budget_s:.0f} s): kept, flagged"
                )
                return
            if any(self.folder.record(s.point_id, EXTRA, extra) is None for s in unknown):
                self.log(f"pass {self.policy.passes + extra + 1}: {len(unknown)} point(s) whose time is not known yet")
            self._passes(unknown, EXTRA, [extra], progress, within_s=budget_s - spent_s)

    def _visits_s(self, specs: list[PointSpec], attempt: int | None = None) -> float:
        records = self.folder.records_of(*(s.point_id for s in specs))
        return sum(formats.visit_s(r) for r in records if attempt in (None, r["attempt"]))

    def _store_killed(self) -> None:
        """Points whose process died too often (bench.deaths) stored `killed`, their reasons in errors.log."""
        for spec, reason, why in deaths.all_given_up(self.specs, self.folder.death_lines, self.folder.stored):
            self.log(f"{spec.layer} n={spec.n} d={spec.d} batch={spec.batch}: {reason}")
            self.folder.store_error(spec, why)
            self._store(spec, PointResult(spec, self.threads, "killed", reason).as_row())

    def _measure_peaks(self, when: str) -> None:
        pairs = sorted({(s.device, s.dtype) for s in self.specs})
        self.folder.update_meta(**ceilings(self.meta, pairs, when, self.log))

    def _done(self, spec: PointSpec, attempt: int, p: int) -> bool:
        return self.folder.stored(spec.point_id) or self.folder.record(spec.point_id, attempt, p) is not None

    def _passes(self, specs: list[PointSpec], attempt: int, passes, progress: bool, within_s: float = math.inf) -> None:
        todo = sum(1 for p in passes for s in specs if self.folder.record(s.point_id, attempt, p) is None)
        desc = "points" if attempt == FIRST else "more"
        bar = progress_bar(todo, desc, "visits", show=progress)
        shown = self.policy.passes if attempt == FIRST else self.policy.passes + self.policy.extra_passes
        try:
            for p in passes:
                first = attempt == FIRST and p == 0
                order = specs if first else pass_order(specs, attempt * self.policy.passes + p, self.seed)
                # Died there: visited last, so that an early kill of the next process meets another point.
                order = sorted(order, key=lambda s: self.folder.deaths(s.point_id))
                number = p + 1 if attempt == FIRST else self.policy.passes + p + 1
                meter = LoadMeter()
                visited = 0
                for spec in order:
                    if self._done(spec, attempt, p):
                        continue
                    if within_s <= 0:
                        break
                    bar.set_postfix_str(f"pass {number}/{shown} {spec.layer} n={spec.n} d={spec.d}", refresh=False)
                    within_s -= self._visit(spec, attempt, p)
                    visited += 1
                    bar.update(1)
                if visited:
                    self._note_pass_load(attempt, p, number, meter)
                if visited and first and not set(specs) & set(self.extended):
                    self._say_the_rest(specs)
        finally:
            bar.close()

    def _visit(self, spec: PointSpec, attempt: int, p: int) -> float:
        first = attempt == FIRST and p == 0
        started_s = time.monotonic()
        if first and skip_if_blocked(self.folder, spec):
            return 0.0
        plan = None if first else self._plan(spec)
        self.folder.note_start(spec.point_id, attempt, p)
        result = measure_pass(spec, self.policy, plan, seed=self.seed, with_probes=first)
        if isinstance(result, PassFailure):
            self.folder.store_error(spec, result.traceback)
            self._store(spec, PointResult(spec, self.threads, result.status, result.error).as_row())
            return time.monotonic() - started_s
        record = dict(
            result.record,
            point_id=spec.point_id,
            attempt=attempt,
            spec=spec.as_row(),
            rounds_planned=result.rounds_planned,
            iterations=result.iterations,
            others_busy_cores=result.others_busy_cores,
            probes=result.probes,
            probes_s=result.probes_s,
            visit_s=round(time.monotonic() - started_s, 4),
        )
        record["pass"] = p
        self.folder.store_record(record)
        return record["visit_s"]

    def _say_the_rest(self, specs: list[PointSpec]) -> None:
        records = {s: r for s in specs if (r := self.folder.record(s.point_id, FIRST, 0)) is not None}
        self.log(first_pass_line(records, self.policy))

    def _plan(self, spec: PointSpec) -> tuple[int, int]:
        first = self.folder.record(spec.point_id, FIRST, 0)
        return int(first["rounds_planned"]), int(first["iterations"])

    def _note_pass_load(self, attempt: int, p: int, number: int, meter: LoadMeter) -> None:
        load = meter.read()
        self.folder.extend_meta("load_passes", dict(attempt=attempt, **{"pass": p}, **load.as_dict()))
        if load.busy:
            self.log(
                f"pass {number}: other processes took {load.others_busy_cores:.1f} cores "
                f"(load average {load.loadavg_1m:.2f})"
            )

    def _result(self, spec: PointSpec) -> PointResult:
        records = self.folder.records_of(spec.point_id)
        cached = self._results.get(spec.point_id)
        if cached is None or cached[0] != len(records):
            first = self.folder.record(spec.point_id, FIRST, 0)
            if not records or first is None:
                raise RunFailed(f"{self.dir}: point {spec.key} has no stored first pass")
            result = PointResult(
                spec,
                self.threads,
                passes=tuple(rounds_of(r) for r in records),
                iterations=int(first["iterations"]),
                probes=first["probes"],
                others_busy_cores=fmean(r["others_busy_cores"] for r in records),
                clock_policy=self.policy.clock,
                record={k: v for k, v in first.items() if k not in PASS_ONLY_KEYS},
            )
            cached = self._results[spec.point_id] = (len(records), result)
        return cached[1]

    def _final_row(self, spec: PointSpec) -> dict:
        missing = [p for p in range(self.policy.passes) if self.folder.record(spec.point_id, FIRST, p) is None]
        if missing:
            raise RunFailed(f"{self.dir}: point {spec.key} lacks its passes {missing}")
        return self._result(spec).as_row()

    def _finish(self, elapsed_s: float) -> dict:
        df = self.folder.points()
        ok = df[df["status"] == "ok"]
        by_id = {s.point_id: s for s in self.specs}
        benchmarks = [self._result(by_id[pid]).timing.record for pid in ok["point_id"] if pid in by_id]
        self.folder.save_json(
            "pytest-benchmark.json",
            {
                "machine_info": self.meta["machine_info"],
                "commit_info": self.meta["commit_info"],
                "benchmarks": benchmarks,
                "datetime": self.meta["started_utc"],
                "version": version("pytest-benchmark"),
            },
        )
        counts = point_counts(df, self.policy.passes)
        # last: `finished` only once everything else is written
        self.folder.update_meta(
            status="finished", finished_utc=storage.utc_now(), **counts, measure_s=round(elapsed_s, 1)
        )
        return dict(self.meta)
