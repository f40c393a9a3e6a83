"""The node side of a Ray sweep (bench.cluster): where workers go, and the worker, bench.run.Run on a chunk."""

from __future__ import annotations

import os
import queue
import shutil
import tempfile
import threading
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import torch

import models

from . import allocator, machine, peak, schema
from .policy import TimingPolicy
from .run import Run
from .spec import PointSpec, device_key
from .threads import pinned_threads

REASON_NOISE = ("class_name:", "actor_id:", "pid:", "namespace:", "ip:")  # Ray's lines that only name the actor
CHUNK_PREFIX = "seqlayer-chunk-"  # a chunk's temporary folder: seqlayer-chunk-<worker pid>-<random>


@dataclass(frozen=True)
class Placement:
    node: str
    address: str
    cpus: float
    gpus: float = 0.0


def placements(nodes: list[dict], device: str, exclusive_node: bool = False) -> list[Placement]:
    """The workers for `device` on `nodes`: per node all its CPUs; per GPU its share (`exclusive_node`: the node)."""
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
    """One layer's sweep a chunk (device, dtype, mode and layer; in plan order), the largest chunk first."""
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
    """The points.csv columns that say where a point ran."""
    kind = device.split(":")[0]
    dev = next((d for d in facts.get("devices", []) if str(d.get("device", "")).split(":")[0] == kind), {})
    values = (facts.get("node"), facts.get("host"), dev.get("name"), dev.get("memory_bytes"))
    return dict(zip((c.name for c in schema.NODE), values, strict=True))


def node_facts(cpus: float, gpus: float) -> dict:
    """This node as its worker sees it: meta.json's machine fields, its Ray node, host and machine."""
    import ray  # noqa: PLC0415 - optional, and present on a node

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
    """A worker on one node (a Ray actor)."""

    def __init__(self, cpus: float, gpus: float, threads: int | None):
        self.cpus, self.gpus, self.threads = cpus, gpus, threads
        self.last_threads: int | None = None  # of the last chunk: the end peak is measured at them

    def facts(self) -> dict:
        return node_facts(self.cpus, self.gpus)

    def measure(self, chunk: dict) -> Iterator[tuple[str, dict]]:
        """Measure a chunk (in a thread), yielding each event as it happens: "log", "peak", the folder's, "done", "failed"."""
        events: queue.SimpleQueue = queue.SimpleQueue()
        worker = threading.Thread(target=self._measure, args=(chunk, events.put), daemon=True)
        worker.start()
        while (event := events.get()) is not None:
            yield event
        worker.join()

    def _measure(self, chunk: dict, emit: Callable[[tuple[str, dict] | None], None]) -> None:
        _remove_stale_chunks()
        folder = Path(tempfile.mkdtemp(prefix=f"{CHUNK_PREFIX}{os.getpid()}-"))
        try:
            run = Run.create(
                [PointSpec(**row) for row in chunk["specs"]],
                TimingPolicy(**chunk["policy"]),
                out=folder / "run",
                command=chunk["command"],
                preset=None,
                threads=chunk["threads"],
                threads_cap=max(1, int(self.cpus)),
                seed=chunk["seed"],
                log=lambda line: emit(("log", {"line": line})),
            )
            for record in chunk["records"]:  # measured on from the passes the driver stored
                run.folder.store_record(record)
            run.measure_peaks = False  # once a node (`peaks`), not per chunk
            run.folder.observer = lambda what, payload: emit((what, payload))
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
        with pinned_threads(self.last_threads or max(1, int(self.cpus))):
            return {device_key(device, dtype): _peak(device, dtype) for device, dtype in pairs}


def _remove_stale_chunks() -> None:
    """The temporary folders of this node's workers that died (no `finally` ran): none was stored."""
    for folder in Path(tempfile.gettempdir()).glob(f"{CHUNK_PREFIX}*-*"):
        pid = folder.name.removeprefix(CHUNK_PREFIX).split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not psutil.pid_exists(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _peak(device: str, dtype: str) -> dict:
    return peak.compute_peak(device, models.DTYPES[dtype])


def plural(value: float, noun: str) -> str:
    number = int(value) if float(value).is_integer() else value
    return f"{number} {noun}{'' if number == 1 else 's'}"
