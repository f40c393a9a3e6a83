"""Sweeps on a Ray cluster: every point measured alone on its node, one run folder, one writer.

`python -m bench run ... --ray ADDRESS` measures a run's points on the nodes of an existing Ray cluster
(`auto`: the one `ray start --head` started on this machine), or `--ray local` on a Ray instance started here
to try it out. This process, the driver, stays the run folder's one writer (bench.run.Run holds its lock);
the nodes measure, and Ray is imported only here, only when asked for.

Placement, for honest timing: a worker (a Ray actor, pinned to its node by NodeAffinitySchedulingStrategy)
holds, for CPU points, all of its node's CPUs, so no two timings share a node's cores; for GPU points, one
GPU and its share of the node's CPUs (the node's CPUs over its GPUs), or with `exclusive_node` the whole
node. The CPU points and the GPU points of a plan are measured one after the other, never beside each other.

Chunks: the driver hands each worker a chunk at a time, one layer's sweep (a layer on one device, dtype and
mode, all its sizes; largest chunk first). The worker measures it with the engine, bench.run.Run, in a
temporary folder on its node: the same interleaved passes, sampling of unreliable points until known, out of memory
stored as `oom` (and larger points of the sweep `skipped`), FLOP and memory probes, the thread choice from
the node's free cores. Each pass's start, record, error and row streams back as it happens (a Ray streaming
generator); once the chunk is done, the driver appends its records and rows to the run folder, each record
and row naming the node it ran on (`node`, `host`) and each row its device (`device_name`,
`device_memory_bytes`). meta.json's `nodes` lists every node that took part: its machine (identity as
bench.machine.machine_identity reads it), devices, software, commit, each chunk's threads and load, and its
compute peak per device and dtype (measured on the node before its first chunk and at the end of the run,
the better kept, as a run in one process does).

Faults: a worker or node that dies loses the chunk in its hands (nothing of it was stored) and the chunk
goes to another node, from its first pass. The point whose pass was running is charged with the death; a
point charged MAX_DEATHS times is stored as `killed`, as a point whose process died as often in one
process (bench.run), and the larger points of its sweep in the chunk as `skipped`; a chunk that died as often
with no pass running is stored as `error`; each with the reasons (a traceback-like record in errors.log),
and the rest of the chunk goes on. A killed
driver leaves the chunks it stored whole; `run --resume DIR` (with `--ray`, or here) measures the others.
Points already stored are never sent; passes stored for a point with no row (a driver killed between the
two appends) are sent with it and measured on from, as a resume in one process does.
"""

from __future__ import annotations

import copy
import logging
import os
import queue
import shutil
import socket
import sys
import tempfile
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from . import machine, storage
from .errors import BadInput, RunFailed
from .peak import with_measurement
from .spec import PointSpec, device_key

INSTALL_HINT = 'pip install -e ".[ray]"'
MAX_DEATHS = 2  # deaths of a point's worker while measuring it (or of a chunk's, with no pass running) before
# it is stored as `killed` (`error`): the first death may be the node's (a preempted or failed machine), a
# second on another node is the point's own (its memory, most likely)
START_TIMEOUT_S = 300.0  # how long the driver waits for a first worker to start: a busy cluster may hold
# the CPUs a worker needs until its other jobs end
POLL_S = 5.0  # how often the driver looks for nodes that joined or died while it waits for results
CONNECT_TIMEOUT_S = 5.0  # the TCP check of a HOST:PORT before ray.init, which would retry for minutes
RUNTIME_ENV: dict | None = None  # Ray's runtime_env for the driver's job (None: the workers run in their node's
# Python, the driver's working directory on their path); the tests set a worker_process_setup_hook here
PLACEMENT = (
    "a CPU point's worker holds all of its node's CPUs (no two timings share a node's cores); a GPU point's "
    "worker holds one GPU and the node's CPUs over its GPUs, or the whole node with --exclusive-node; CPU and "
    "GPU points are measured one after the other"
)
ON_RAY = (  # meta.json's threads_reason of a cluster sweep begins so; the rest is the driver's own choice
    "on Ray each node chose its threads for each chunk (a row's `threads`; meta.json `nodes`, each chunk's "
    "threads_reason and load); this machine, the driver's, for a resume here"
)
REASON_NOISE = ("class_name:", "actor_id:", "pid:", "namespace:", "ip:")  # lines of Ray's death message that
# name the actor, not why it died


def import_ray():
    """The `ray` module, or BadInput with the one line that says how to install it."""
    try:
        import ray  # noqa: PLC0415 - optional: bench works without it
    except ImportError:
        raise BadInput(
            f"--ray: Ray is not installed in this Python ({sys.executable}); install the extra: {INSTALL_HINT}"
        ) from None
    return ray


# ----------------------------------------------------------------------------------------- placement
@dataclass(frozen=True)
class Placement:
    """Where one worker goes: a node, and the resources it holds there."""

    node: str  # Ray node id
    address: str  # the node's IP
    cpus: float
    gpus: float = 0.0


def placements(nodes: list[dict], device: str, exclusive_node: bool = False) -> list[Placement]:
    """The workers a `device` phase places on `nodes` (ray.nodes() entries; dead ones left out): for the CPU,
    one a node holding all its CPUs; for a GPU, one a GPU holding its share of the node's CPUs (CPUs over
    GPUs), or one a node holding all of it with `exclusive_node`."""
    out = []
    for node in nodes:
        if not node.get("Alive", node.get("alive", False)):
            continue
        resources = node.get("Resources") or {}
        cpus, gpus = float(resources.get("CPU", 0)), int(resources.get("GPU", 0))
        where = (node["NodeID"], node.get("NodeManagerAddress", ""))
        if device == "cpu":
            if cpus >= 1:
                out.append(Placement(*where, cpus))
        elif gpus >= 1:
            if exclusive_node:
                out.append(Placement(*where, cpus, float(gpus)))
            else:
                share = float(cpus // gpus) if cpus >= gpus else cpus / gpus
                out.extend(Placement(*where, share, 1.0) for _ in range(gpus))
    return out


def chunks(specs: list[PointSpec]) -> list[list[PointSpec]]:
    """The plan's points in chunks of one layer's sweep (one device, dtype, mode and layer; every size, in plan
    order, so the smallest goes first and an out-of-memory point stops its larger siblings), the largest
    chunk first (a long sweep does not start last)."""
    groups: dict[tuple, list[PointSpec]] = {}
    for spec in specs:
        groups.setdefault((spec.device, spec.dtype, spec.mode, spec.layer), []).append(spec)
    return sorted(groups.values(), key=len, reverse=True)


def death_reason(exc: BaseException) -> str:
    """Why a worker died, in one line: Ray's message without the lines that only name the actor."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    kept = [line for line in lines if not line.startswith(REASON_NOISE)]
    return " ".join(kept or [type(exc).__name__])[:400]


def node_columns(facts: dict, device: str) -> dict:
    """The points.csv columns that say where a point ran: its node, host and device (name, memory)."""
    kind = device.split(":")[0]
    dev = next((d for d in facts.get("devices", []) if str(d.get("device", "")).split(":")[0] == kind), {})
    return {
        "node": facts.get("node"),
        "host": facts.get("host"),
        "device_name": dev.get("name"),
        "device_memory_bytes": dev.get("memory_bytes"),
    }


# -------------------------------------------------------------------------------------- on the node
def node_facts(cpus: float, gpus: float) -> dict:
    """This node as a worker sees it: the machine fields of meta.json (bench.machine.run_meta, without the raw
    py-cpuinfo dump), its Ray node id, host and IP, its machine's id and label, the Ray version, and the
    allocator policy its worker pinned (bench.allocator)."""
    import ray  # noqa: PLC0415
    import torch  # noqa: PLC0415

    from . import allocator  # noqa: PLC0415

    facts = {k: v for k, v in machine.run_meta(torch.get_num_threads()).items() if k not in ("machine_info", "threads")}
    facts.update(
        allocator=allocator.pin(),
        node=ray.get_runtime_context().get_node_id(),
        host=facts.get("hostname"),
        ip=ray.util.get_node_ip_address(),
        ray=ray.__version__,
        worker={"cpus": cpus, "gpus": gpus, "gpu_ids": [str(g) for g in ray.get_gpu_ids()], "pid": os.getpid()},
    )
    facts["machine_id"], facts["machine_label"] = machine.machine_identity(facts)
    return facts


class NodeWorker:
    """A worker on one node (a Ray actor; the driver places it): its node's facts, chunks measured by the
    engine in a temporary folder, and the node's compute peaks."""

    def __init__(self, cpus: float, gpus: float, threads: int | None):
        self.cpus, self.gpus, self.threads = cpus, gpus, threads
        self.last_threads: int | None = None  # of the last chunk: the end peak is measured at them

    def facts(self) -> dict:
        return node_facts(self.cpus, self.gpus)

    def measure(self, chunk: dict) -> Iterator[tuple[str, dict]]:
        """Measure a chunk, yielding (what, payload) as it goes: "log", "peak", the engine's "started",
        "record", "error" and "row", then "done" (or "failed", with the exception). The engine runs in a
        thread of this worker and hands its events over a queue, so each reaches the driver as it happens."""
        events: queue.SimpleQueue = queue.SimpleQueue()
        worker = threading.Thread(target=self._measure, args=(chunk, events.put), daemon=True)
        worker.start()
        while (event := events.get()) is not None:
            yield event
        worker.join()

    def _measure(self, chunk: dict, emit: Callable[[tuple[str, dict] | None], None]) -> None:
        from .run import Run  # noqa: PLC0415
        from .threads import pinned_threads  # noqa: PLC0415
        from .timing import TimingPolicy  # noqa: PLC0415

        _remove_stale_chunks()
        folder = Path(tempfile.mkdtemp(prefix=f"{CHUNK_PREFIX}{os.getpid()}-"))
        try:
            specs = [PointSpec(**row) for row in chunk["specs"]]
            run = Run.create(
                specs,
                TimingPolicy(**chunk["policy"]),
                out=folder / "run",
                command=chunk["command"],
                preset=None,
                threads=chunk["threads"],
                threads_cap=max(1, int(self.cpus)),
                seed=chunk["seed"],
                log=lambda line: emit(("log", {"line": line})),
            )
            for record in chunk["records"]:  # passes the driver stored for these points: measured on from them
                storage.append_timing_record(run.dir, record)
            run.measure_peaks = False  # the node's peak is measured once, not per chunk (below, and `peaks`)
            run.observer = lambda what, payload: emit((what, payload))
            self.last_threads = run.threads
            with pinned_threads(run.threads):
                for device, dtype in chunk["peaks"]:
                    emit(("peak", {"key": device_key(device, dtype), "when": "start", "value": _peak(device, dtype)}))
            meta = run.execute(progress=False)
            keys = ("threads", "threads_reason", "load_before", "load_passes", "measure_s")
            emit(("done", {k: meta.get(k) for k in keys}))
        except BaseException as exc:  # the driver records it and sends the chunk elsewhere
            text = f"{type(exc).__name__}: {exc}".splitlines()[0][:400]
            emit(("failed", {"error": text, "traceback": "".join(traceback.format_exception(exc))}))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
            emit(None)

    def peaks(self, pairs: list[tuple[str, str]], when: str) -> dict[str, dict]:
        """The compute peak of each (device, dtype), at the threads of the last chunk."""
        from .threads import pinned_threads  # noqa: PLC0415

        with pinned_threads(self.last_threads or max(1, int(self.cpus))):
            return {device_key(device, dtype): _peak(device, dtype) for device, dtype in pairs}


CHUNK_PREFIX = "seqlayer-chunk-"  # a chunk's temporary folder on its node: seqlayer-chunk-<worker pid>-<random>


def _remove_stale_chunks() -> None:
    """The temporary folders of this node's workers that died (killed: no `finally` ran), removed: none of them
    was stored, and their chunks were measured again."""
    import psutil  # noqa: PLC0415

    for folder in Path(tempfile.gettempdir()).glob(f"{CHUNK_PREFIX}*-*"):
        pid = folder.name.removeprefix(CHUNK_PREFIX).split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not psutil.pid_exists(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _peak(device: str, dtype: str) -> dict:
    import models  # noqa: PLC0415

    from . import peak  # noqa: PLC0415

    return peak.compute_peak(device, models.DTYPES[dtype])


# ------------------------------------------------------------------------------------- the driver
@dataclass
class _Chunk:
    specs: list[PointSpec]  # what is left of it: a point given up leaves
    avoid: set[str] = field(default_factory=set)  # nodes it died on: another is preferred
    deaths: list[str] = field(default_factory=list)  # deaths with no pass running, and why
    name: str = ""  # its layer, device, dtype and mode in words

    def __post_init__(self):
        spec = self.specs[0]
        mode = f" {spec.mode}" if spec.trains else ""
        self.name = self.name or f"{spec.layer} ({spec.device} {spec.dtype}{mode})"


@dataclass
class _Worker:
    key: tuple[str, int]  # (node, index among the node's placements)
    placement: Placement
    actor: Any
    ready: Any = None  # the facts() call while the worker starts
    facts: dict | None = None
    chunk: _Chunk | None = None
    stream: Any = None  # the measure() generator of its chunk
    running: str | None = None  # the point whose pass is running
    records: list[dict] = field(default_factory=list)
    rows: dict[str, dict] = field(default_factory=dict)
    errors: list[dict] = field(default_factory=list)
    since: float = 0.0

    @property
    def tag(self) -> str:
        host = (self.facts or {}).get("host") or self.placement.address
        return f"[{host} {self.placement.node[:8]}]"


class Cluster:
    """A connection to a Ray cluster, and the measuring of a run's pending points on it (`measure`, given to
    bench.run.Run as its `measure_with`)."""

    def __init__(self, ray, address: str, exclusive_node: bool, threads: int | None, log: Callable[[str], None]):
        self.ray, self.address, self.exclusive_node, self.threads, self.log = ray, address, exclusive_node, threads, log

    @classmethod
    def connect(
        cls,
        address: str,
        *,
        exclusive_node: bool = False,
        threads: int | None = None,
        log: Callable[[str], None] | None = None,
    ) -> Cluster:
        """Connect to the cluster at `address` (`auto`, HOST:PORT, ray://HOST:PORT), or start a local Ray
        instance (`local`). BadInput when Ray is missing or no cluster answers."""
        ray = import_ray()
        _check_reachable(address)
        try:
            ray.init(
                address=address,
                runtime_env=copy.deepcopy(RUNTIME_ENV),  # Ray writes into it
                include_dashboard=False if address == "local" else None,
                log_to_driver=False,  # the workers' lines come back as events, with their node
                logging_level=logging.WARNING,
            )
        except ConnectionError as exc:
            raise BadInput(f"--ray {address}: {str(exc).splitlines()[0]}") from None
        return cls(ray, address, exclusive_node, threads, log or _stderr)

    def close(self) -> None:
        if self.ray.is_initialized():
            self.ray.shutdown()

    def alive_nodes(self) -> list[dict]:
        return [n for n in self.ray.nodes() if n.get("Alive")]

    def has(self, device: str) -> bool:
        """Whether some node of the cluster has `device` (cpu, cuda)."""
        resource = "GPU" if device.startswith("cuda") else "CPU"
        return any((n.get("Resources") or {}).get(resource, 0) >= 1 for n in self.alive_nodes())

    def describe(self) -> str:
        nodes = self.alive_nodes()
        parts = [
            f"{n.get('NodeManagerHostname') or n.get('NodeManagerAddress')} {n['NodeID'][:8]}: "
            f"{_count((n.get('Resources') or {}).get('CPU', 0), 'CPU')}"
            + (f", {_count(n['Resources']['GPU'], 'GPU')}" if (n.get("Resources") or {}).get("GPU") else "")
            for n in nodes
        ]
        return f"ray: {self.address}, {_count(len(nodes), 'node')} ({'; '.join(parts)})"

    # ------------------------------------------------------------------------------- measure
    def measure(self, run, state, progress: bool) -> None:
        """bench.run.Run's `measure_with`: the pending points of `run`, measured on the cluster's nodes and
        stored through `run`, one device phase after the other."""
        from tqdm import tqdm  # noqa: PLC0415

        columns = storage.stored_columns(run.dir / "points.csv", storage.POINT_COLUMNS)
        if "node" not in columns:  # its rows could not say where they ran (storage.append_row refuses)
            raise RunFailed(
                f"{run.dir}: its points.csv was begun before sweeps on Ray and has no `node` column; resume it "
                "without --ray, or measure on Ray into a new folder"
            )
        stored_ray = run.meta.get("ray") or {}
        threads = self.threads if self.threads is not None else stored_ray.get("threads_requested")
        run.meta["ray"] = {
            "address": self.address,
            "ray": self.ray.__version__,
            "exclusive_node": self.exclusive_node,
            "threads_requested": threads,
            "placement": PLACEMENT,
        }
        if stored_ray and stored_ray.get("address") != self.address:
            run.meta["ray"]["earlier_addresses"] = [
                *stored_ray.get("earlier_addresses", []),
                stored_ray.get("address"),
            ]
        run.meta.setdefault("nodes", {})
        run.meta.setdefault("machines", {})
        if not str(run.meta.get("threads_reason", "")).startswith(ON_RAY):
            run.meta["threads_reason"] = f"{ON_RAY}; {run.meta.get('threads_reason')}"
        storage.write_json(run.dir / "meta.json", run.meta)
        pending = [s for s in run.specs if s.point_id not in state.rows and not run.skip_if_blocked(s, state)]
        self.log(f"{self.describe()}; {_count(len(pending), 'point')} to measure; placement: {PLACEMENT}")
        bar = tqdm(total=len(pending), desc="points", unit="pt", disable=not progress, file=sys.stderr)
        try:
            for device in sorted({s.device for s in pending}):
                if not self.has(device):
                    raise RunFailed(f"--ray {self.address}: the plan measures {device}, and no node has one")
                _Phase(self, run, state, device, threads, bar).measure([s for s in pending if s.device == device])
        finally:
            bar.close()


class _Phase:
    """The driver measuring one device's points: workers started on every node that has the device, chunks
    handed out, streamed back, stored whole when done, sent elsewhere when their worker dies."""

    def __init__(self, cluster: Cluster, run, state, device: str, threads: int | None, bar):
        self.cluster, self.ray, self.run, self.state = cluster, cluster.ray, run, state
        self.device, self.threads, self.bar = device, threads, bar
        self.remote = self.ray.remote(NodeWorker)
        self.workers: dict[tuple[str, int], _Worker] = {}
        self.start_failures: dict[tuple[str, int], list[str]] = {}
        self.left_out: set[tuple[str, int]] = set()
        self.deaths: dict[str, list[str]] = {}  # point id -> why each death
        self.queue: deque[_Chunk] = deque()
        self.pairs: dict[str, set[tuple[str, str]]] = {}  # node -> (device, dtype) it measured: its end peaks
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
                if not waits:  # no worker alive: wait for one to start (the timeout above)
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

    # ----------------------------------------------------------------------------- workers
    def _refresh(self) -> None:
        """Start a worker on each placement that has none: the nodes found at the start and any that joined."""
        nodes = self.cluster.alive_nodes()
        counts: dict[str, int] = {}
        for placement in placements(nodes, self.device, self.cluster.exclusive_node):
            key = (placement.node, counts.get(placement.node, 0))
            counts[placement.node] = key[1] + 1
            if key in self.workers or key in self.left_out:
                continue
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: PLC0415

            actor = self.remote.options(
                num_cpus=placement.cpus,
                num_gpus=placement.gpus,
                scheduling_strategy=NodeAffinitySchedulingStrategy(placement.node, soft=False),
                max_restarts=0,
            ).remote(placement.cpus, placement.gpus, self.threads)
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
            f"{worker.tag} worker started: {facts['machine_label']}, {_count(worker.placement.cpus, 'CPU')}"
            + (f", GPU {', '.join(facts['worker']['gpu_ids'])}" if worker.placement.gpus else "")
        )

    def _note_node(self, facts: dict) -> None:
        """meta.json's entry of the node (its facts; the devices every worker there saw), and its machine."""
        meta = self.run.meta
        node = facts["node"]
        entry = meta["nodes"].get(node) or {}
        devices = list(entry.get("devices") or [])
        devices += [d for d in facts.get("devices", []) if d not in devices]
        kept = {k: entry[k] for k in ("compute_peak", "chunks") if k in entry}
        meta["nodes"][node] = {**{k: v for k, v in facts.items() if k != "worker"}, "devices": devices, **kept}
        meta["machines"][facts["machine_id"]] = facts["machine_label"]
        storage.write_json(self.run.dir / "meta.json", meta)
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

    def _lost(self, worker: _Worker, exc: BaseException) -> None:
        """A worker that died, or never started: its chunk goes back to the queue, charged (see _charge)."""
        reason = death_reason(exc)
        self.workers.pop(worker.key, None)
        self.lost = True  # a new worker takes its place if its node is alive
        # Unreachable is not always dead (ActorUnavailableError): stopped for good, so its node's CPUs are free
        # for the next worker there and nothing of it is measured beside it.
        self.ray.kill(worker.actor, no_restart=True)
        chunk, worker.stream, worker.ready = worker.chunk, None, None
        if chunk is not None:
            self._charge(worker, reason)
            worker.chunk = None
            return
        failures = self.start_failures.setdefault(worker.key, [])
        failures.append(reason)
        if len(failures) >= MAX_DEATHS:
            self.left_out.add(worker.key)
            self.cluster.log(f"{worker.tag} left out: its worker died {len(failures)} times with no chunk ({reason})")

    # ------------------------------------------------------------------------------ chunks
    def _dispatch(self) -> None:
        """Each started, idle worker takes the first chunk that did not die on its node (or any chunk, when it
        died on every node there is)."""
        for worker in self.workers.values():
            if worker.facts is None or worker.chunk is not None or not self.queue:
                continue
            node = worker.placement.node
            others = {w.placement.node for w in self.workers.values() if w.facts is not None} - {node}
            chunk = next((c for c in self.queue if node not in c.avoid), None)
            if chunk is None:
                chunk = next((c for c in self.queue if others <= c.avoid), None)
            if chunk is None:
                continue  # another node should take what is left
            self.queue.remove(chunk)
            self._send(worker, chunk)

    def _send(self, worker: _Worker, chunk: _Chunk) -> None:
        ids = {s.point_id for s in chunk.specs}
        records = [r for (pid, _, _), r in sorted(self.state.records.items()) if pid in ids]
        peaks = self.run.meta["nodes"].get(worker.placement.node, {}).get("compute_peak", {})
        pairs = sorted({(s.device, s.dtype) for s in chunk.specs})
        message = {
            "specs": [s.as_row() for s in chunk.specs],
            "policy": self.run.policy.as_dict(),
            "seed": self.run.seed,
            "threads": self.threads,
            "records": records,
            "peaks": [p for p in pairs if "start" not in peaks.get(device_key(*p), {}).get("measured", {})],
            "command": [f"chunk of {self.run.dir}"],
        }
        worker.chunk, worker.running, worker.since = chunk, None, time.monotonic()
        worker.records, worker.rows, worker.errors = [], {}, []
        self.pairs.setdefault(worker.placement.node, set()).update(pairs)
        worker.stream = worker.actor.measure.options(num_returns="streaming").remote(message)
        self.cluster.log(f"{worker.tag} measuring {chunk.name}: {_count(len(chunk.specs), 'point')}")

    def _drain(self, worker: _Worker) -> None:
        """Every event of the worker's stream that has arrived, in order."""
        stream = worker.stream
        self._next_event(worker)
        while worker.stream is stream and self.ray.wait([stream], timeout=0)[0]:
            self._next_event(worker)

    def _next_event(self, worker: _Worker) -> None:
        try:
            ref = next(worker.stream)
            what, payload = self.ray.get(ref)
        except StopIteration:  # ended without "done" or "failed": not a whole chunk
            self._charge(worker, "the worker's stream ended before its chunk was done")
            worker.stream = worker.chunk = None
            return
        except self.ray.exceptions.RayError as exc:
            self._lost(worker, exc)
            return
        self._handle(worker, what, payload)

    def _handle(self, worker: _Worker, what: str, payload: dict) -> None:
        """One event of a worker's chunk: kept until the chunk is done, then stored whole (`_commit`)."""
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
            done = replace(worker)  # the finished chunk and what came back (_send gives the worker new lists)
            worker.stream = worker.chunk = None
            self._dispatch()  # the worker measures its next chunk while this one is written
            self._commit(done, payload)
        elif what == "failed":
            self.run.store_error(
                worker.chunk.specs[0], f"{worker.tag} chunk {worker.chunk.name}:\n{payload['traceback']}"
            )
            self._charge(worker, payload["error"])
            worker.stream = worker.chunk = None

    def _commit(self, worker: _Worker, done: dict) -> None:
        """The chunk's records and rows, appended to the run folder point by point (records, then the row);
        `worker` as it was when its chunk was done."""
        chunk, facts = worker.chunk, worker.facts
        where = {"node": facts["node"], "host": facts["host"]}
        for spec in chunk.specs:
            for record in worker.records:
                if record["point_id"] == spec.point_id:
                    self.run.store_record(dict(record, **where), self.state)
            for error in worker.errors:
                if error["point_id"] == spec.point_id:
                    self.run.store_error(spec, f"{worker.tag}\n{error['traceback']}")
            row = worker.rows.get(spec.point_id)
            if row is None:
                row = self._base_row(spec, error=f"{worker.tag}: the worker's chunk ended without a row for this point")
            self.run.store_row(spec, {**row, **node_columns(facts, spec.device)}, self.state)
            if row["status"] in ("oom", "killed"):
                self.state.ooms.append(spec)
        self.bar.update(len(chunk.specs))
        entry = self.run.meta["nodes"][facts["node"]]
        entry.setdefault("chunks", []).append(
            {"chunk": chunk.name, "points": len(chunk.specs), "utc": storage.utc_now(), **done}
        )
        storage.write_json(self.run.dir / "meta.json", self.run.meta)
        self.cluster.log(
            f"{worker.tag} stored {chunk.name}: {_count(len(chunk.specs), 'point')} in {done.get('measure_s')} s"
        )

    def _charge(self, worker: _Worker, reason: str) -> None:
        """A death: charged to the point whose pass was running (or to the chunk); what died MAX_DEATHS times
        is stored (a point as `killed`, its larger siblings in the chunk as `skipped`; a chunk's points as
        `error`), the rest of the chunk goes back to the queue, first, to another node."""
        chunk, node = worker.chunk, worker.placement.node
        where = f"{(worker.facts or {}).get('host') or worker.placement.address} (node {node[:8]})"
        chunk.avoid.add(node)
        failed: dict[PointSpec, list[str]] = {}  # what is given up, and its deaths
        spec = next((s for s in chunk.specs if s.point_id == worker.running), None)
        if spec is not None:
            deaths = self.deaths.setdefault(spec.point_id, [])
            deaths.append(f"on {where}: {reason}")
            what = f"{spec.layer} n={spec.n} d={spec.d} batch={spec.batch}"
            if len(deaths) >= MAX_DEATHS:
                failed[spec] = deaths
            status = "killed"
        else:
            chunk.deaths.append(f"on {where}: {reason}")
            what = f"{chunk.name} between passes"
            if len(chunk.deaths) >= MAX_DEATHS:
                failed = {spec: chunk.deaths for spec in chunk.specs}
            status = "error"
        for spec, why in failed.items():
            text = f"its Ray worker died {len(why)} times while measuring it: " + "; ".join(why)
            self.run.store_error(spec, text)
            row = self._base_row(spec, error=text[:500], status=status)
            self.run.store_row(spec, {**row, **node_columns(worker.facts or {"node": node}, spec.device)}, self.state)
            self.bar.update(1)
            if status == "killed":
                self.state.ooms.append(spec)
        chunk.specs = [s for s in chunk.specs if s not in failed]
        skipped = [s for s in chunk.specs if self.run.skip_if_blocked(s, self.state)]  # stores them
        self.bar.update(len(skipped))
        chunk.specs = [s for s in chunk.specs if s not in skipped]
        then = f"{_count(len(chunk.specs), 'point')} of {chunk.name} go to another node" if chunk.specs else "stored"
        self.cluster.log(f"{worker.tag} the worker died measuring {what} ({reason}); {then}")
        self.run.meta.setdefault("worker_deaths", []).append(
            {
                "utc": storage.utc_now(),
                "node": node,
                "host": (worker.facts or {}).get("host"),
                "chunk": chunk.name,
                "measuring": what,
                "reason": reason,
                "given_up": [s.point_id for s in failed],
            }
        )
        storage.write_json(self.run.dir / "meta.json", self.run.meta)
        worker.running = None
        if chunk.specs:
            self.queue.appendleft(chunk)

    def _base_row(self, spec: PointSpec, error: str, status: str = "error") -> dict:
        from .point import base_row  # noqa: PLC0415

        return dict(base_row(spec, None), status=status, error=error)

    # ------------------------------------------------------------------------------- peaks
    def _store_peak(self, node: str, key: str, when: str, value: dict) -> None:
        """A node's compute peak, measured at `when` ("start", "end"); the better of the two is kept."""
        peaks = self.run.meta["nodes"].setdefault(node, {}).setdefault("compute_peak", {})
        peaks[key] = with_measurement(peaks.get(key), when, value)
        storage.write_json(self.run.dir / "meta.json", self.run.meta)

    def _end_peaks(self) -> None:
        """Each node's compute peak again at the end, as a run in one process measures it at its start and end."""
        calls = {}
        for worker in self.workers.values():
            node = worker.placement.node
            if worker.facts is None or node in {w.placement.node for w in calls.values()}:
                continue
            peaks = self.run.meta["nodes"].get(node, {}).get("compute_peak", {})
            pairs = [
                pair
                for pair in sorted(self.pairs.get(node, ()))
                if "end" not in peaks.get(device_key(*pair), {}).get("measured", {})
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
            f"`python -m bench run --resume {self.run.dir}`"
        )


def _check_reachable(address: str) -> None:
    """A HOST:PORT (or ray://HOST:PORT) that nothing answers on is bad input at once (ray.init would retry
    for minutes); `auto` and `local` are left to ray.init."""
    if address in ("auto", "local"):
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise BadInput(f"--ray {address}: give HOST:PORT of a cluster's head, auto (the one on this machine) or local")
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise BadInput(
            f"--ray {address}: no Ray cluster answers there ({exc.strerror or exc}); start one with "
            "`ray start --head` and give the address it prints, or --ray local"
        ) from None


def _count(value: float, noun: str) -> str:
    number = int(value) if float(value).is_integer() else value
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)
