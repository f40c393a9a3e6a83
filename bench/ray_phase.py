"""One device's points on a Ray cluster: a worker per placement, chunks streamed back, stored whole, resent on a death."""

from __future__ import annotations

import shlex
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any

from .deaths import KILLED_AFTER_WORKER as KILLED_AFTER
from .errors import RunFailed
from .folder import RunFolder
from .peak import with_measurement
from .policy import TimingPolicy
from .ray_worker import NodeWorker, Placement, chunks, death_reason, node_columns, placements, plural
from .result import PointResult, skip_if_blocked
from .spec import PointSpec, device_key
from .storage import utc_now

START_TIMEOUT_S = 300.0  # a busy cluster may hold the CPUs a first worker needs until its other jobs end
POLL_S = 5.0  # how often the driver looks for nodes that joined or died while it waits for results


@dataclass
class _Chunk:
    specs: list[PointSpec]  # what is left of it: a point given up leaves
    avoid: set[str] = field(default_factory=set)  # the nodes it died on
    deaths: list[str] = field(default_factory=list)  # with no pass running
    name: str = ""

    def __post_init__(self):
        spec = self.specs[0]
        mode = f" {spec.mode}" if spec.trains else ""
        self.name = self.name or f"{spec.layer} ({spec.device} {spec.dtype}{mode})"


@dataclass
class _Worker:
    key: tuple[str, int]
    placement: Placement
    actor: Any
    ready: Any = None
    facts: dict | None = None
    chunk: _Chunk | None = None
    stream: Any = None
    running: str | None = None  # the point id whose pass is running
    records: list[dict] = field(default_factory=list)
    rows: dict[str, dict] = field(default_factory=dict)
    errors: list[dict] = field(default_factory=list)
    since: float = 0.0

    @property
    def tag(self) -> str:
        host = (self.facts or {}).get("host") or self.placement.address
        return f"[{host} {self.placement.node[:8]}]"


@dataclass(frozen=True)
class Sweep:
    folder: RunFolder
    policy: TimingPolicy
    seed: int
    threads: int | None  # asked of every node; None: each chooses from its free cores


class Phase:
    """One device's points of a sweep, measured on the nodes of `cluster` (a bench.cluster.Cluster)."""

    def __init__(self, cluster, sweep: Sweep, device: str, bar):
        self.cluster, self.ray, self.sweep, self.folder = cluster, cluster.ray, sweep, sweep.folder
        self.device, self.bar = device, bar
        self.remote = self.ray.remote(NodeWorker)
        self.workers: dict[tuple[str, int], _Worker] = {}
        self.start_failures: dict[tuple[str, int], list[str]] = {}
        self.left_out: set[tuple[str, int]] = set()
        self.deaths: dict[str, list[str]] = {}
        self.queue: deque[_Chunk] = deque()
        self.pairs: dict[str, set[tuple[str, str]]] = {}  # by node: the (device, dtype) of its end peaks
        self.lost = False  # a worker died since the last look at the nodes

    def measure(self, specs: list[PointSpec]) -> None:
        self.queue.extend(_Chunk(c) for c in chunks(specs))
        waiting_since = time.monotonic()
        refreshed = 0.0
        try:
            while self.queue or any(w.chunk is not None for w in self.workers.values()):
                if time.monotonic() - refreshed > POLL_S:
                    self._refresh()
                    refreshed = time.monotonic()
                self._dispatch()
                starting = [w for w in self.workers.values() if w.ready is not None]
                busy = [w for w in self.workers.values() if w.stream is not None]
                if busy or any(w.facts for w in self.workers.values()):
                    waiting_since = time.monotonic()
                elif time.monotonic() - waiting_since > START_TIMEOUT_S:
                    raise RunFailed(self._no_worker_message())
                waits = [w.ready for w in starting] + [w.stream for w in busy]
                if not waits:
                    time.sleep(1.0)
                    refreshed = 0.0
                    continue
                ready, _ = self.ray.wait(waits, num_returns=1, timeout=1.0 if starting else POLL_S)
                if self.lost:
                    refreshed, self.lost = 0.0, False
                for item in ready:
                    worker = next((w for w in busy if w.stream is item), None)
                    if worker is not None:
                        self._drain(worker)
                        continue
                    worker = next((w for w in starting if w.ready == item), None)
                    if worker is not None:
                        self._started(worker)
            self._end_peaks()
        finally:
            for worker in list(self.workers.values()):
                self.ray.kill(worker.actor, no_restart=True)
            self.workers.clear()

    def _refresh(self) -> None:
        counts: dict[str, int] = {}
        for placement in placements(self.cluster.alive_nodes(), self.device, self.cluster.exclusive_node):
            key = (placement.node, counts.get(placement.node, 0))
            counts[placement.node] = key[1] + 1
            if key in self.workers or key in self.left_out:
                continue
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            actor = self.remote.options(
                num_cpus=placement.cpus,
                num_gpus=placement.gpus,
                scheduling_strategy=NodeAffinitySchedulingStrategy(placement.node, soft=False),
                max_restarts=0,
            ).remote(placement.cpus, placement.gpus, self.sweep.threads)
            self.workers[key] = _Worker(key, placement, actor, ready=actor.facts.remote(), since=time.monotonic())

    def _started(self, worker: _Worker) -> None:
        try:
            facts = self.ray.get(worker.ready)
        except self.ray.exceptions.RayError as exc:
            self._lost(worker, exc)
            return
        worker.ready, worker.facts = None, facts
        self._note_node(facts)
        self.cluster.log(
            f"{worker.tag} worker started: {facts['machine_label']}, {plural(worker.placement.cpus, 'CPU')}"
            + (f", GPU {', '.join(facts['worker']['gpu_ids'])}" if worker.placement.gpus else "")
        )

    def _note_node(self, facts: dict) -> None:
        meta, node = self.folder.meta, facts["node"]
        entry = meta["nodes"].get(node) or {}
        devices = list(entry.get("devices") or [])
        devices += [d for d in facts.get("devices", []) if d not in devices]
        kept = {k: entry[k] for k in ("compute_peak", "chunks") if k in entry}
        self.folder.update_meta(
            nodes={
                **meta["nodes"],
                node: {**{k: v for k, v in facts.items() if k != "worker"}, "devices": devices, **kept},
            },
            machines={**meta["machines"], facts["machine_id"]: facts["machine_label"]},
        )
        differs = [
            f"{what} {facts.get(key)}"
            for what, key in (("commit", "git_commit"), ("torch", "torch"), ("python", "python"))
            if facts.get(key) != meta.get(key)
        ]
        if differs:
            self.cluster.log(
                f"warning: node {facts.get('host')} ({node[:8]}) runs {', '.join(differs)}, unlike this driver "
                f"(commit {meta.get('git_commit')}, torch {meta.get('torch')}); meta.json keeps each node's"
            )

    def _update_node(self, node: str, **changes) -> None:
        nodes = self.folder.meta["nodes"]
        self.folder.update_meta(nodes={**nodes, node: {**nodes.get(node, {}), **changes}})

    def _lost(self, worker: _Worker, exc: BaseException) -> None:
        reason = death_reason(exc)
        self.workers.pop(worker.key, None)
        self.lost = True  # a new worker takes its place if its node is alive
        # unreachable is not always dead: stopped, so that nothing is measured beside its successor
        self.ray.kill(worker.actor, no_restart=True)
        chunk, worker.stream, worker.ready = worker.chunk, None, None
        if chunk is not None:
            self._charge(worker, reason)
            worker.chunk = None
            return
        failures = self.start_failures.setdefault(worker.key, [])
        failures.append(reason)
        if len(failures) >= KILLED_AFTER:
            self.left_out.add(worker.key)
            self.cluster.log(f"{worker.tag} left out: its worker died {len(failures)} times with no chunk ({reason})")

    def _dispatch(self) -> None:
        """Each idle worker takes the first chunk that did not die on its node (or one that died on all)."""
        for worker in self.workers.values():
            if worker.facts is None or worker.chunk is not None or not self.queue:
                continue
            node = worker.placement.node
            others = {w.placement.node for w in self.workers.values() if w.facts is not None} - {node}
            chunk = next((c for c in self.queue if node not in c.avoid), None)
            if chunk is None:
                chunk = next((c for c in self.queue if others <= c.avoid), None)
            if chunk is None:
                continue
            self.queue.remove(chunk)
            self._send(worker, chunk)

    def _send(self, worker: _Worker, chunk: _Chunk) -> None:
        peaks = self.folder.meta["nodes"].get(worker.placement.node, {}).get("compute_peak", {})
        pairs = sorted({(s.device, s.dtype) for s in chunk.specs})
        message = {
            "specs": [s.as_row() for s in chunk.specs],
            "policy": self.sweep.policy.as_dict(),
            "seed": self.sweep.seed,
            "threads": self.sweep.threads,
            "records": self.folder.records_of(*(s.point_id for s in chunk.specs)),
            "peaks": [p for p in pairs if "start" not in peaks.get(device_key(*p), {}).get("measured", {})],
            "command": [f"chunk of {self.folder.path}"],
        }
        worker.chunk, worker.running, worker.since = chunk, None, time.monotonic()
        worker.records, worker.rows, worker.errors = [], {}, []
        self.pairs.setdefault(worker.placement.node, set()).update(pairs)
        worker.stream = worker.actor.measure.options(num_returns="streaming").remote(message)
        self.cluster.log(f"{worker.tag} measuring {chunk.name}: {plural(len(chunk.specs), 'point')}")

    def _drain(self, worker: _Worker) -> None:
        stream = worker.stream
        self._next_event(worker)
        while worker.stream is stream and self.ray.wait([stream], timeout=0)[0]:
            self._next_event(worker)

    def _next_event(self, worker: _Worker) -> None:
        try:
            what, payload = self.ray.get(next(worker.stream))
        except StopIteration:  # ended without "done" or "failed": not a whole chunk
            self._charge(worker, "the worker's stream ended before its chunk was done")
            worker.stream = worker.chunk = None
            return
        except self.ray.exceptions.RayError as exc:
            self._lost(worker, exc)
            return
        self._handle(worker, what, payload)

    def _handle(self, worker: _Worker, what: str, payload: dict) -> None:
        """One event of a worker's chunk: kept until the chunk is done, then stored whole."""
        if what == "started":
            worker.running = payload["point_id"]
        elif what in ("record", "row", "error"):
            if payload.get("point_id") == worker.running:
                worker.running = None
            if what == "record":
                worker.records.append(payload)
                self.bar.set_postfix_str(f"{worker.tag} {worker.chunk.name} pass {payload['pass'] + 1}", refresh=False)
            elif what == "row":
                worker.rows[payload["point_id"]] = payload
            else:
                worker.errors.append(payload)
        elif what == "log":
            self.cluster.log(f"{worker.tag} {payload['line']}")
        elif what == "peak":
            self._store_peak(worker.placement.node, payload["key"], payload["when"], payload["value"])
        elif what == "done":
            done = replace(worker)  # the chunk and what came back (_send gives the worker new lists)
            worker.stream = worker.chunk = None
            self._dispatch()  # the worker measures its next chunk while this one is written
            self._commit(done, payload)
        elif what == "failed":
            text = f"{worker.tag} chunk {worker.chunk.name}:\n{payload['traceback']}"
            self.folder.store_error(worker.chunk.specs[0], text)
            self._charge(worker, payload["error"])
            worker.stream = worker.chunk = None

    def _commit(self, worker: _Worker, done: dict) -> None:
        """The chunk's records and rows, stored point by point (records, then the row)."""
        chunk, facts = worker.chunk, worker.facts
        where = {"node": facts["node"], "host": facts["host"]}
        for spec in chunk.specs:
            for record in worker.records:
                if record["point_id"] == spec.point_id:
                    self.folder.store_record(dict(record, **where))
            for error in worker.errors:
                if error["point_id"] == spec.point_id:
                    self.folder.store_error(spec, f"{worker.tag}\n{error['traceback']}")
            row = worker.rows.get(spec.point_id)
            if row is None:
                why = f"{worker.tag}: the worker's chunk ended without a row for this point"
                row = PointResult(spec, None, "error", why).as_row()
            self.folder.store_row(spec, {**row, **node_columns(facts, spec.device)})
        self.bar.update(len(chunk.specs))
        stored = {"chunk": chunk.name, "points": len(chunk.specs), "utc": utc_now(), **done}
        self._update_node(facts["node"], chunks=[*self.folder.meta["nodes"][facts["node"]].get("chunks", []), stored])
        self.cluster.log(
            f"{worker.tag} stored {chunk.name}: {plural(len(chunk.specs), 'point')} in {done.get('measure_s')} s"
        )

    def _charge(self, worker: _Worker, reason: str) -> None:
        """A death, charged to the point whose pass was running; the rest of the chunk goes back to the queue."""
        chunk, node = worker.chunk, worker.placement.node
        where = f"{(worker.facts or {}).get('host') or worker.placement.address} (node {node[:8]})"
        chunk.avoid.add(node)
        failed: dict[PointSpec, list[str]] = {}
        spec = next((s for s in chunk.specs if s.point_id == worker.running), None)
        if spec is not None:
            deaths = self.deaths.setdefault(spec.point_id, [])
            deaths.append(f"on {where}: {reason}")
            what = f"{spec.layer} n={spec.n} d={spec.d} batch={spec.batch}"
            if len(deaths) >= KILLED_AFTER:
                failed[spec] = deaths
            status = "killed"
        else:
            chunk.deaths.append(f"on {where}: {reason}")
            what = f"{chunk.name} between passes"
            if len(chunk.deaths) >= KILLED_AFTER:
                failed = {spec: chunk.deaths for spec in chunk.specs}
            status = "error"
        for spec, why in failed.items():
            text = f"its Ray worker died {len(why)} times while measuring it: " + "; ".join(why)
            self.folder.store_error(spec, text)
            row = PointResult(spec, None, status, text[:500]).as_row()
            self.folder.store_row(spec, {**row, **node_columns(worker.facts or {"node": node}, spec.device)})
            self.bar.update(1)
        chunk.specs = [s for s in chunk.specs if s not in failed]
        skipped = [s for s in chunk.specs if skip_if_blocked(self.folder, s)]
        self.bar.update(len(skipped))
        chunk.specs = [s for s in chunk.specs if s not in skipped]
        then = f"{plural(len(chunk.specs), 'point')} of {chunk.name} go to another node" if chunk.specs else "stored"
        self.cluster.log(f"{worker.tag} the worker died measuring {what} ({reason}); {then}")
        death = {"utc": utc_now(), "node": node, "host": (worker.facts or {}).get("host"), "chunk": chunk.name}
        death |= {"measuring": what, "reason": reason, "given_up": [s.point_id for s in failed]}
        self.folder.extend_meta("worker_deaths", death)
        worker.running = None
        if chunk.specs:
            self.queue.appendleft(chunk)

    def _store_peak(self, node: str, key: str, when: str, value: dict) -> None:
        peaks = self.folder.meta["nodes"].get(node, {}).get("compute_peak", {})
        self._update_node(node, compute_peak={**peaks, key: with_measurement(peaks.get(key), when, value)})

    def _end_peaks(self) -> None:
        calls = {}
        for worker in self.workers.values():
            node = worker.placement.node
            if worker.facts is None or node in {w.placement.node for w in calls.values()}:
                continue
            peaks = self.folder.meta["nodes"].get(node, {}).get("compute_peak", {})
            pairs = [
                p
                for p in sorted(self.pairs.get(node, ()))
                if "end" not in peaks.get(device_key(*p), {}).get("measured", {})
            ]
            if pairs:
                calls[worker.actor.peaks.remote(pairs, "end")] = worker
        for ref, worker in calls.items():
            try:
                for key, value in self.ray.get(ref).items():
                    self._store_peak(worker.placement.node, key, "end", value)
            except self.ray.exceptions.RayError as exc:
                self.cluster.log(f"{worker.tag} no compute peak at the end ({death_reason(exc)})")

    def _no_worker_message(self) -> str:
        failures = "; ".join(f"{key[0][:8]}: {', '.join(why)}" for key, why in self.start_failures.items())
        return (
            f"--ray {self.cluster.address}: no worker for {self.device} points could start on any node in "
            f"{START_TIMEOUT_S:g} s (each holds {'all the CPUs of its node' if self.device == 'cpu' else 'a GPU'}"
            f"; are other jobs holding them? can each node import this bench, at the same commit?)"
            f"{': ' + failures if failures else ''}; what was measured is stored: "
            f"`python -m bench run --resume {shlex.quote(str(self.folder.path))}`"
        )
