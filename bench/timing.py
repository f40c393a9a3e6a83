"""Timing of one call on wall and CPU clocks in rounds over interleaved passes, with pytest-benchmark's statistics and
flags for a median not to be trusted. The method: `method_text`. The caller sets autograd and pins the threads."""

from __future__ import annotations

import math
import random
import resource
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import asdict, dataclass, field, fields

import numpy as np
from pytest_benchmark.stats import Stats

from .load import BUSY_CORES

NOISY_IQR_RATIO = 0.10  # IQR / median above this flags a point as noisy
WARMUP_ROUNDS = 1  # untimed rounds of every pass, after its untimed first call
MIN_ROUNDS_PER_PASS = 2
CONFIDENCE = 0.95  # of the median's interval
STALL_RATIO = 1.5  # median / fastest round above this: the rounds lost the CPU, or are bimodal
PASS_SPREAD_RATIO = 1.3  # median / fastest of the passes' medians above this: most passes ran slow
CI_RELATIVE_WIDTH = 0.25  # (interval high − low) / median above this: the median is too uncertain

WALL, CPU, DEVICE = "wall", "cpu", "device"
CLOCK_CHOICES = ("auto", WALL, CPU)  # TimingPolicy.clock, `run --clock`
THREAD, PROCESS = "thread", "process"  # the CPU clock read: the calling thread's (one thread), or the process's


@dataclass(frozen=True)
class TimingPolicy:
    min_rounds: int = 10
    max_rounds: int = 60
    target_s: float = 0.3  # total time of a point's timed rounds, roughly
    min_round_s: float = 5e-3  # each round at least this long: calls are repeated within a round below it
    passes: int = 5  # interleaved passes over the plan; each times a share of every point's rounds
    extra_passes: int = 10  # at most this many more passes over the points whose time is not known yet
    extra_budget: float = 0.5  # those passes take at most this share of the first passes' time
    clock: str = "auto"  # the clock a point's time fits use: chosen from the data, or always wall or cpu

    def __post_init__(self):
        if self.passes < 1 or self.min_rounds < 1 or self.max_rounds < self.min_rounds:
            raise ValueError(f"timing policy {self}: needs passes >= 1 and 1 <= min_rounds <= max_rounds")
        if self.extra_passes < 0 or not self.extra_budget >= 0 or self.clock not in CLOCK_CHOICES:
            raise ValueError(
                f"timing policy {self}: needs extra_passes >= 0, extra_budget >= 0 and clock in {CLOCK_CHOICES}"
            )

    @classmethod
    def stored(cls, stored: dict) -> TimingPolicy:
        """The policy a plan.json stored; missing fields take their defaults (old `remeasure` False: no extra)."""
        known = {f.name for f in fields(cls)}
        unknown = set(stored) - known - {"remeasure"}
        if unknown:
            raise TypeError(f"unexpected field(s) {', '.join(sorted(unknown))}")
        policy = {k: v for k, v in stored.items() if k in known}
        if stored.get("remeasure") is False:
            policy.setdefault("extra_passes", 0)
        return cls(**policy)

    def plan(self, one_call_s: float) -> tuple[int, int]:
        one_call_s = max(one_call_s, 1e-9)
        iterations = max(1, math.ceil(self.min_round_s / one_call_s - 1e-9))  # 1e-9: float noise in the ratio
        rounds = math.ceil(self.target_s / (one_call_s * iterations))
        return min(max(rounds, self.min_rounds), self.max_rounds), iterations

    def rounds_per_pass(self, rounds: int) -> int:
        return max(MIN_ROUNDS_PER_PASS, math.ceil(rounds / self.passes))

    def as_dict(self) -> dict:
        return asdict(self)


def method_constants() -> dict:
    """Stored with each run, so its report states the method it used."""
    return {
        "noisy_iqr_ratio": NOISY_IQR_RATIO,
        "warmup_rounds": WARMUP_ROUNDS,
        "min_rounds_per_pass": MIN_ROUNDS_PER_PASS,
        "confidence": CONFIDENCE,
        "stall_ratio": STALL_RATIO,
        "pass_spread_ratio": PASS_SPREAD_RATIO,
        "ci_relative_width": CI_RELATIVE_WIDTH,
        "busy_cores": BUSY_CORES,
    }


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
    """One pass: a warm call, WARMUP_ROUNDS untimed rounds, then `rounds` rounds of `iterations` calls."""
    target()
    for _ in range(WARMUP_ROUNDS * iterations):
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


def assess(median_s: float, min_s: float, pass_spread: float, ci: tuple[float, float]) -> str:
    """Why a clock's median is not to be trusted, every threshold it crosses named; "" when it is."""
    flags = []
    if min_s > 0 and median_s / min_s > STALL_RATIO:
        flags.append(f"stalled: median {median_s / min_s:.2f}x the fastest round (> {STALL_RATIO})")
    if pass_spread > PASS_SPREAD_RATIO:
        flags.append(f"passes disagree: their median {pass_spread:.2f}x the fastest pass (> {PASS_SPREAD_RATIO})")
    low, high = ci
    if math.isnan(low) or math.isnan(high):
        flags.append(f"too few rounds for a {CONFIDENCE:.0%} interval of the median")
    elif median_s > 0 and (high - low) / median_s > CI_RELATIVE_WIDTH:
        flags.append(f"uncertain: interval {(high - low) / median_s:.0%} of the median (> {CI_RELATIVE_WIDTH:.0%})")
    return "; ".join(flags)


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


def choose_clock(timing: Timing, others_busy_cores: float, policy_clock: str = "auto") -> tuple[str, str]:
    """(clock, why): the clock a point's time fits use, by `method_text`'s rule unless `policy_clock` forces one."""
    own_cpu = timing.cpu is not None and timing.cpu_clock == THREAD
    if policy_clock == WALL:
        return WALL, "asked for (--clock wall)"
    if timing.device is not None:
        return DEVICE, f"the device's own time: a CUDA graph of {timing.graph_calls} calls replayed"
    if policy_clock == CPU:
        if own_cpu:
            return CPU, "asked for (--clock cpu)"
        return WALL, "no CPU clock of its own thread (several threads, or a GPU): the wall clock, though --clock cpu"
    if not own_cpu:
        return WALL, ""
    if others_busy_cores >= BUSY_CORES:
        return CPU, f"other programs took {others_busy_cores:.1f} cores while it was timed"
    if not timing.wall.reliable:
        return CPU, f"the wall clock was not to be trusted ({timing.wall.flag})"
    return WALL, ""


def plain_flag(stats: ClockStats, clock: str, passes: int, on_gpu: bool = False) -> str:
    """Why a point's time on `clock` stays unreliable: words a user reads first, then the thresholds."""
    if stats.reliable:
        return ""
    if on_gpu and clock == WALL and ("stalled" in stats.flag or "passes disagree" in stats.flag):
        lead = "launch jitter: the host's Python and kernel launches, which the wall clock of a GPU call includes"
    elif on_gpu and clock == DEVICE:
        lead = "the device's own time varied (clock or memory speed, or another program on the GPU)"
    elif "stalled" in stats.flag or "passes disagree" in stats.flag:
        lead = "its rounds kept losing the CPU to other programs"
    elif "too few rounds" in stats.flag:
        lead = "too few rounds to know its median"
    else:
        lead = "its rounds still spread too widely"
    return f"{lead} after {passes} passes on the {clock} clock ({stats.flag})"


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
    policy: TimingPolicy = TimingPolicy(),
    *,
    sync: Callable[[], None] | None = None,
    clocks: Clocks = WALL_ONLY,
    seed: int = 0,
) -> dict[Hashable, Timing]:
    """Time callables that stay built (claims, compute peak) against each other, in shuffled passes."""
    targets = {key: synced(fn, sync) for key, fn in fns.items()}
    plans = {key: calibrate(target, policy, clocks.wall) for key, target in targets.items()}
    times: dict[Hashable, list[Rounds]] = {key: [] for key in fns}
    for p in range(policy.passes):
        for key in pass_order(list(fns), p, seed):
            rounds, iterations = plans[key]
            times[key].append(time_rounds(targets[key], policy.rounds_per_pass(rounds), iterations, clocks))
    template = {"extra_info": {"cpu_clock": clocks.cpu_kind}}
    return {key: summarize(times[key], plans[key][1], str(key), template) for key in fns}


def method_text(policy: dict, constants: dict | None = None) -> str:
    """A run's timing method in one paragraph, from its meta.json `timing_policy` and `timing_method`."""
    c = dict(method_constants(), **(constants or {}))
    stored = dict(policy)
    p = TimingPolicy.stored(stored).as_dict() if "remeasure" not in stored else dict(asdict(TimingPolicy()), **stored)
    text = (
        f"Each point's rounds (each round at least {p['min_round_s'] * 1e3:g} ms of repeated calls; "
        f"{p['min_rounds']} to {p['max_rounds']} rounds, about {p['target_s']:g} s of them) are split over "
        f"{p['passes']} interleaved passes, at least {c['min_rounds_per_pass']} rounds each; every pass visits "
        f"every point in a new shuffled order (the first in plan order, smallest first), and each visit "
        f"builds the layer, makes one untimed call and {c['warmup_rounds']} untimed round. Median over all "
        f"rounds, with its {c['confidence']:.0%} interval from order statistics. A point is flagged noisy "
        f"when its IQR exceeds {c['noisy_iqr_ratio']:.0%} of its median, and unreliable when its median is "
        f"more than {c['stall_ratio']:g}x its fastest round (stalled or bimodal rounds), when the median of "
        f"its passes' medians is more than {c['pass_spread_ratio']:g}x its fastest pass's (a slow phase "
        f"over most of its passes), or when the interval of its median is wider than "
        f"{c['ci_relative_width']:.0%} of it"
    )
    if "remeasure" in stored:  # a run from before the CPU clock and sampling until known
        return text + (
            "; unreliable points are measured again in a second set of passes at the end of the run, and "
            "those still unreliable are kept, flagged and left out of the time fits."
            if stored["remeasure"]
            else "; unreliable points are kept, flagged and left out of the time fits."
        )
    text += (
        ". Every round is read on two clocks: the wall clock, and the CPU time of the calling thread where the "
        "call runs on one thread (of the whole process with several threads, where threads waiting at a "
        "barrier burn CPU time too). A point's time fits use the wall clock, what a user waits for, unless "
        f"other programs took at least {c['busy_cores']:g} cores while it was timed or its wall clock was "
        "unreliable and the call ran on one thread: then its thread's CPU time, which the scheduler does not "
        "inflate; a fit uses one clock for all its points (the CPU clock where any of them needs it)"
        + ("" if p["clock"] == "auto" else f" (this run: the {p['clock']} clock, as asked)")
        + "."
    )
    if p["extra_passes"]:
        text += (
            f" Points still unreliable on their clock after the passes get more passes, interleaved, over those "
            f"points alone (at most {p['extra_passes']} more, together at most {p['extra_budget']:.0%} of the "
            "first passes' time), their statistics over all their rounds; those that stay unreliable are kept, "
            "flagged with the reason and left out of the time fits and of every number derived from times."
        )
    else:
        text += (
            " Unreliable points are kept, flagged and left out of the time fits and of every number derived from times."
        )
    return text
