"""Pure probes of the machine's load by psutil: the cores other processes keep busy, the thread count that leaves us."""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass

import psutil

SAMPLE_WINDOW_S = 0.5  # how long the load is watched before a run chooses its threads
RESERVED_CORES = 1  # left to the OS and other programs, on a machine with more than one core
BUSY_CORES = 0.5  # other processes taking at least this many cores: the run warns that the machine is busy


def _busy_cpu_s() -> float:
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


def _own_cpu_s(process: psutil.Process) -> float:
    t = process.cpu_times()
    return t.user + t.system


@dataclass(frozen=True)
class Load:
    others_busy_cores: float  # CPU seconds of all but this process (busy: not idle, not iowait) per wall second
    loadavg_1m: float
    logical_cores: int
    wall_s: float
    own_cores: float | None = None
    idle_cores: float | None = None

    @property
    def busy(self) -> bool:
        return self.others_busy_cores >= BUSY_CORES

    def as_dict(self) -> dict:
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in asdict(self).items()}


class LoadMeter:
    """Start, do work, `read()`: the load other processes put on the machine in between."""

    def __init__(self):
        self._process = psutil.Process(os.getpid())
        self.start()

    def start(self) -> None:
        self._t0 = time.monotonic()
        self._busy0 = _busy_cpu_s()
        self._own0 = _own_cpu_s(self._process)

    @property
    def elapsed_s(self) -> float:
        return time.monotonic() - self._t0

    def read(self, wanting: bool = False) -> Load:
        wall, cores = max(self.elapsed_s, 1e-6), psutil.cpu_count() or 1
        busy, own = _busy_cpu_s() - self._busy0, _own_cpu_s(self._process) - self._own0
        return Load(
            others_busy_cores=max(busy - own, 0.0) / wall,
            loadavg_1m=psutil.getloadavg()[0],
            logical_cores=cores,
            wall_s=wall,
            own_cores=min(own / wall, 1.0) if wanting else None,
            idle_cores=max(cores - busy / wall, 0.0) if wanting else None,
        )


def sample_load(window_s: float = SAMPLE_WINDOW_S, since: LoadMeter | None = None) -> Load:
    """The load over at least `window_s` seconds: since `since` was started (the command's imports), else from now."""
    meter = since or LoadMeter()
    time.sleep(max(0.0, window_s - meter.elapsed_s))
    return meter.read(wanting=since is not None)


def physical_cores() -> int:
    return psutil.cpu_count(logical=False) or psutil.cpu_count() or 1


def choose_threads(load: Load, cores: int) -> tuple[int, str]:
    """(threads, why): the cores other processes leave free, less RESERVED_CORES, at least 1."""
    taken = round(load.others_busy_cores)
    reserved = RESERVED_CORES if cores > 1 else 0
    threads = max(1, cores - taken - reserved)
    why = (
        f"{cores} physical cores, other processes busy on {load.others_busy_cores:.2f} of them "
        f"(load average {load.loadavg_1m:.2f}), {reserved} left to the system: {threads} thread"
        f"{'s' if threads != 1 else ''}"
    )
    return threads, why


def slowdown(load: Load, threads: int) -> float:
    """How much longer a run of `threads` takes than alone: cores wanted over those there, or its start's core lost."""
    wanted = (load.others_busy_cores + threads) / load.logical_cores
    if not load.own_cores or load.idle_cores is None:
        return max(1.0, wanted)
    taken = max(0.0, 1.0 - load.own_cores - load.idle_cores)
    return max(1.0, wanted, (load.own_cores + taken) / load.own_cores)


def busy_warning(load: Load) -> str | None:
    if not load.busy:
        return None
    return (
        f"warning: the machine is busy (other processes take {load.others_busy_cores:.1f} of "
        f"{load.logical_cores} cores, load average {load.loadavg_1m:.2f}); the run takes longer, a point timed "
        f"while they take cores is read on the CPU clock of its one thread, and points that stay unstable are "
        f"flagged time_reliable=False"
    )


def decide_threads(requested: int | None, cap: int | None = None, load: Load | None = None) -> tuple[int, str, Load]:
    """(threads, why, load before the run, sampled unless given): --threads, or what the free cores allow, ≤ `cap`."""
    load = load or sample_load()
    if requested is not None:
        return requested, f"--threads {requested}, as asked", load
    threads, why = choose_threads(load, physical_cores())
    if cap is not None and threads > cap:
        threads, why = cap, f"{why}; at most the {cap} CPU(s) this worker holds"
    return threads, why, load
