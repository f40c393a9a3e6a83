"""The machine's load, measured with psutil: how much CPU other processes take, and what thread count that
leaves us. Pure probes: they return values; the run stores them (meta.json, timings.jsonl).

Why it matters: a torch operator with T intra-op threads ends at a barrier where every thread waits for the
slowest. If another process holds one of those T cores, the whole operator waits for the scheduler to give
that core back (a time slice, milliseconds), so a sub-millisecond call comes out 5x to 300x slower, and
often every round alike, so no spread flags it. The remedy is to run fewer threads than there are free cores.

Method:
- `others_busy_cores`: CPU seconds the whole machine spent busy (psutil.cpu_times: everything but idle
  and iowait) minus the CPU seconds of this process, divided by the wall seconds of the window. 1.0 means
  other processes kept one core busy.
- `choose_threads`: the physical cores, less the cores other processes keep busy (rounded), less
  RESERVED_CORES for the operating system and whatever starts during the run, at least 1.
- A machine is called busy when other processes take at least BUSY_CORES cores.
"""

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
    """What other processes did over a window of `wall_s` seconds."""

    others_busy_cores: float
    loadavg_1m: float
    logical_cores: int
    wall_s: float

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

    def read(self) -> Load:
        wall = max(time.monotonic() - self._t0, 1e-6)
        others = (_busy_cpu_s() - self._busy0) - (_own_cpu_s(self._process) - self._own0)
        return Load(
            others_busy_cores=max(others, 0.0) / wall,
            loadavg_1m=psutil.getloadavg()[0],
            logical_cores=psutil.cpu_count() or 1,
            wall_s=wall,
        )


def sample_load(window_s: float = SAMPLE_WINDOW_S) -> Load:
    """The load over the next `window_s` seconds, this process idle meanwhile."""
    meter = LoadMeter()
    time.sleep(window_s)
    return meter.read()


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


def busy_warning(load: Load) -> str | None:
    """One line when the machine is busy, else None."""
    if not load.busy:
        return None
    return (
        f"warning: the machine is busy (other processes take {load.others_busy_cores:.1f} of "
        f"{load.logical_cores} cores, load average {load.loadavg_1m:.2f}); the run takes longer, a point timed "
        f"while they take cores is read on the CPU clock of its one thread, and points that stay unstable are "
        f"flagged time_reliable=False"
    )
