"""Timing of one call on wall and CPU clocks in rounds over interleaved passes, pytest-benchmark's statistics."""

from __future__ import annotations

import math
import random
import resource
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np
from pytest_benchmark.stats import Stats

from .policy import (
    CONFIDENCE,
    CPU,
    DEVICE,
    NOISY_IQR_RATIO,
    PROCESS,
    THREAD,
    WARMUP_ROUNDS,
    TimingPolicy,
    assess,
    untimed_calls,
)


def pass_order(keys: Sequence[Hashable], pass_index: int, seed: int = 0) -> list:
    """A fresh shuffle for every pass, reproducible from the seed."""
    order = list(keys)
    random.Random(f"{seed}:{pass_index}").shuffle(order)
    return order


def median_interval(times: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Distribution-free interval of the median from order statistics; NaN with too few rounds."""
    if len(times) < 2:
        return math.nan, math.nan
    from scipy import stats  # noqa: PLC0415 - half a second of import, which every `python -m bench` would pay

    ci = stats.quantile_test(np.asarray(times, float), q=float(np.median(times))).confidence_interval(confidence)
    return float(ci.low), float(ci.high)


def _minor_faults(who: int) -> Callable[[], int]:
    return lambda: resource.getrusage(who).ru_minflt


@dataclass(frozen=True)
class Clocks:
    """What a round reads around its calls: wall clock, CPU clock (None on a GPU), minor page faults."""

    wall: Callable[[], float] = time.perf_counter
    cpu: Callable[[], float] | None = time.thread_time
    cpu_kind: str = THREAD
    faults: Callable[[], int] | None = None

    @classmethod
    def for_call(cls, threads: int, on_gpu: bool = False) -> Clocks:
        if on_gpu:
            return cls(cpu=None, cpu_kind="")
        if threads == 1:
            who = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)
            return cls(time.perf_counter, time.thread_time, THREAD, _minor_faults(who))
        return cls(time.perf_counter, time.process_time, PROCESS, _minor_faults(resource.RUSAGE_SELF))


WALL_ONLY = Clocks(cpu=None, cpu_kind="")


@dataclass(frozen=True)
class Rounds:
    """One pass's timed rounds: seconds per call on each clock; page faults over all its calls."""

    wall_s: tuple[float, ...]
    cpu_s: tuple[float, ...]  # empty without a CPU clock
    calls: int
    faults: int | None
    device_s: tuple[float, ...] = ()  # a GPU's graph replays, seconds per call (bench.graphs)
    graph_calls: int = 0


def time_rounds(target: Callable[[], object], rounds: int, iterations: int, clocks: Clocks = WALL_ONLY) -> Rounds:
    """One pass: its untimed calls (WARMUP_ROUNDS rounds, the first call the warm one), then `rounds` rounds."""
    for _ in range(untimed_calls(iterations)):
        target()
    wall, cpu = [], []
    faults0 = clocks.faults() if clocks.faults else None
    for _ in range(rounds):
        c0 = clocks.cpu() if clocks.cpu else 0.0
        w0 = clocks.wall()
        for _ in range(iterations):
            target()
        w1 = clocks.wall()
        c1 = clocks.cpu() if clocks.cpu else 0.0
        wall.append((w1 - w0) / iterations)
        if clocks.cpu:
            cpu.append((c1 - c0) / iterations)
    faults = clocks.faults() - faults0 if clocks.faults else None
    return Rounds(tuple(wall), tuple(cpu), rounds * iterations, faults)


def record_of(rounds: Rounds, iterations: int, name: str, clocks: Clocks = WALL_ONLY) -> dict:
    """One pass as a pytest-benchmark record: wall clock in `stats`, CPU clock and faults in `extra_info`."""
    st = Stats()
    for t in rounds.wall_s:
        st.update(t)
    return {
        "group": None,
        "name": name,
        "fullname": name,
        "params": None,
        "param": None,
        "extra_info": {
            "cpu_clock": clocks.cpu_kind,
            "cpu_data": list(rounds.cpu_s),
            "calls": rounds.calls,
            "faults": rounds.faults,
            "device_data": list(rounds.device_s),
            "graph_calls": rounds.graph_calls,
        },
        "options": {"timer": "perf_counter", "warmup_rounds": WARMUP_ROUNDS},
        "stats": dict(st.as_dict(), data=list(rounds.wall_s), iterations=iterations),
    }


def rounds_of(record: dict) -> Rounds:
    """The inverse of `record_of`; records from before the CPU clock hold the wall only."""
    extra = record.get("extra_info") or {}
    wall = tuple(float(t) for t in record["stats"]["data"])
    calls = extra.get("calls", len(wall) * int(record["stats"].get("iterations", 1)))
    cpu = tuple(float(t) for t in extra.get("cpu_data") or ())
    device = tuple(float(t) for t in extra.get("device_data") or ())
    return Rounds(wall, cpu, calls, extra.get("faults"), device, int(extra.get("graph_calls") or 0))


@dataclass(frozen=True)
class ClockStats:
    """A point's statistics on one clock, over the rounds of all its passes (seconds per call)."""

    median_s: float
    iqr_s: float
    mean_s: float
    min_s: float
    ci_low_s: float
    ci_high_s: float
    pass_spread: float  # the median of the passes' medians over the fastest pass's (1.0 with one pass)
    flag: str  # why this clock's median is not to be trusted; empty when it is

    @property
    def reliable(self) -> bool:
        return not self.flag

    @property
    def noisy(self) -> bool:
        return self.iqr_s / self.median_s > NOISY_IQR_RATIO if self.median_s > 0 else False


def clock_stats(passes: Sequence[Sequence[float]]) -> tuple[ClockStats, Stats]:
    st = Stats()
    for p in passes:
        for t in p:
            st.update(t)
    ci = median_interval(st.data)
    medians = [float(np.median(p)) for p in passes]
    spread = float(np.median(medians)) / min(medians) if min(medians) > 0 else math.inf
    stats = ClockStats(st.median, st.iqr, st.mean, st.min, ci[0], ci[1], spread, assess(st.median, st.min, spread, ci))
    return stats, st


@dataclass(frozen=True)
class Timing:
    wall: ClockStats
    cpu: ClockStats | None  # None without a CPU clock (a GPU, or runs from before it)
    cpu_clock: str  # THREAD, PROCESS or "" (none)
    pass_times_s: tuple[tuple[float, ...], ...]  # the wall clock's
    iterations: int
    faults_per_call: float | None  # minor page faults per timed call
    record: dict = field(repr=False, compare=False, default_factory=dict)  # pytest-benchmark's JSON
    device: ClockStats | None = None  # a GPU's graph replays (bench.graphs); None where none was captured
    graph_calls: int = 0

    @property
    def rounds(self) -> int:
        return sum(len(p) for p in self.pass_times_s)

    @property
    def passes(self) -> int:
        return len(self.pass_times_s)

    def on(self, clock: str) -> ClockStats:
        if clock == DEVICE and self.device is not None:
            return self.device
        return self.cpu if clock == CPU and self.cpu is not None else self.wall


def summarize(passes: Sequence[Rounds], iterations: int, name: str = "point", template: dict | None = None) -> Timing:
    """A point's statistics over all its passes, and one pytest-benchmark record of them built on `template`."""
    passes = [p for p in passes if len(p.wall_s)]
    if not passes:
        raise ValueError(f"{name}: no timed rounds")
    wall, st = clock_stats([p.wall_s for p in passes])
    with_cpu = all(len(p.cpu_s) == len(p.wall_s) for p in passes)
    cpu = clock_stats([p.cpu_s for p in passes])[0] if with_cpu else None
    cpu_clock = (template or {}).get("extra_info", {}).get("cpu_clock", "") if with_cpu else ""
    with_device = all(len(p.device_s) for p in passes)
    device = clock_stats([p.device_s for p in passes])[0] if with_device else None
    counted = [p for p in passes if p.faults is not None]
    faults = sum(p.faults for p in counted) / sum(p.calls for p in counted) if counted else None
    record = dict(template or {"name": name, "fullname": name})
    record["stats"] = dict(st.as_dict(), data=list(st.data), iterations=iterations)
    record["extra_info"] = dict(
        record.get("extra_info") or {},
        cpu_data=[t for p in passes for t in p.cpu_s],
        calls=sum(p.calls for p in passes),
        faults=sum(p.faults for p in counted) if counted else None,
        device_data=[t for p in passes for t in p.device_s] if with_device else [],
    )
    graph_calls = passes[0].graph_calls if with_device else 0
    return Timing(
        wall, cpu, cpu_clock, tuple(p.wall_s for p in passes), iterations, faults, record, device, graph_calls
    )


def synced(fn: Callable[[], object], sync: Callable[[], None] | None) -> Callable[[], object]:
    if sync is None:
        return fn

    def target():
        fn()
        sync()

    return target


def calibrate(
    target: Callable[[], object], policy: TimingPolicy, clock: Callable[[], float] = time.perf_counter
) -> tuple[int, int]:
    """(rounds, iterations) from one warm call; the first call pays lazy initialisation."""
    target()
    start = clock()
    target()
    return policy.plan(clock() - start)


def interleaved(
    fns: dict[Hashable, Callable[[], object]],
    policy: TimingPolicy | None = None,
    *,
    sync: Callable[[], None] | None = None,
    clocks: Clocks = WALL_ONLY,
    seed: int = 0,
) -> dict[Hashable, Timing]:
    """Time callables that stay built (claims, compute peak) against each other, in shuffled passes."""
    policy = policy or TimingPolicy()
    targets = {key: synced(fn, sync) for key, fn in fns.items()}
    plans = {key: calibrate(target, policy, clocks.wall) for key, target in targets.items()}
    times: dict[Hashable, list[Rounds]] = {key: [] for key in fns}
    for p in range(policy.passes):
        for key in pass_order(list(fns), p, seed):
            rounds, iterations = plans[key]
            times[key].append(time_rounds(targets[key], policy.rounds_per_pass(rounds), iterations, clocks))
    template = {"extra_info": {"cpu_clock": clocks.cpu_kind}}
    return {key: summarize(times[key], plans[key][1], str(key), template) for key in fns}
