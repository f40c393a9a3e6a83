"""Wall-clock timing of one forward pass, with pytest-benchmark as the engine, measured in interleaved passes.

Method (after torch.utils.benchmark.Timer, pytest-benchmark, Google Benchmark's random interleaving and
asv's rounds):
- Warm-up: parts of PyTorch initialise lazily (oneDNN primitives, cuDNN plans, allocator pools), so the
  first call after a layer is built is slower than the steady state. Every pass makes one untimed call,
  then pytest-benchmark runs `WARMUP_ROUNDS` untimed round(s) before the timed ones.
- Calibration (once per point, on its first pass): a warm call's time t sets `iterations`, the calls per
  round, so that a round lasts at least `min_round_s` (far above the clock's resolution and long enough to
  average the jitter of a virtual machine), and `rounds`, so that the timed rounds take about `target_s`
  in all, clamped to [`min_rounds`, `max_rounds`].
- Interleaving: the rounds of a point are split over `passes` passes (at least `MIN_ROUNDS_PER_PASS`
  each). A run visits every point once per pass, in a new shuffled order each pass (`pass_order`), so a
  slow phase of the machine (another program, a throttled core) lands on many points a little instead of
  on a few points whole.
- Rounds are run by pytest-benchmark's pedantic mode (`BenchmarkFixture.pedantic`), which keeps every
  round's time and writes its JSON record (with `machine_info` and `commit_info` kept in the run folder).
  The statistics of a point come from pytest-benchmark's `Stats` over the rounds of all its passes.
- Median over mean: the median ignores the rare slow round. Its CONFIDENCE interval is distribution-free,
  from order statistics (scipy.stats.quantile_test).
- On a GPU the target synchronizes the device inside the timed call, so a round ends when the kernels end.
- Flags, kept with the point, never dropping it: `noisy` when IQR/median exceeds NOISY_IQR_RATIO;
  unreliable (`assess`) when the median is more than STALL_RATIO times the fastest round (rounds that lost
  the CPU, or two modes), when the median of its passes' medians is more than PASS_SPREAD_RATIO times the
  fastest pass's (so at least half of its passes ran in a slow phase: one slow pass of several is what
  interleaving is there to absorb, and does not flag), or when the interval of the median is wider than
  CI_RELATIVE_WIDTH of it. A run measures unreliable points again at its end (bench.run).
The caller sets inference mode and pins threads; this module only times.
"""

from __future__ import annotations

import inspect
import math
import random
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import asdict, dataclass, field
from types import SimpleNamespace

import numpy as np
from pytest_benchmark.fixture import BenchmarkFixture
from pytest_benchmark.stats import Stats
from pytest_benchmark.utils import NameWrapper
from scipy import stats as scipy_stats

NOISY_IQR_RATIO = 0.10  # IQR / median above this flags a point as noisy
WARMUP_ROUNDS = 1  # untimed rounds of every pass, after its untimed first call
MIN_ROUNDS_PER_PASS = 2
CONFIDENCE = 0.95  # of the median's interval
STALL_RATIO = 1.5  # median / fastest round above this: the rounds lost the CPU, or are bimodal
PASS_SPREAD_RATIO = 1.3  # median / fastest of the passes' medians above this: most passes ran slow
CI_RELATIVE_WIDTH = 0.25  # (interval high − low) / median above this: the median is too uncertain


@dataclass(frozen=True)
class TimingPolicy:
    min_rounds: int = 10
    max_rounds: int = 60
    target_s: float = 0.3  # total time of a point's timed rounds, roughly
    min_round_s: float = 5e-3  # each round at least this long: calls are repeated within a round below it
    passes: int = 5  # interleaved passes over the plan; each times a share of every point's rounds
    remeasure: bool = True  # measure unreliable points again at the end of the run

    def __post_init__(self):
        if self.passes < 1 or self.min_rounds < 1 or self.max_rounds < self.min_rounds:
            raise ValueError(f"timing policy {self}: needs passes >= 1 and 1 <= min_rounds <= max_rounds")

    def plan(self, one_call_s: float) -> tuple[int, int]:
        """(rounds, iterations) for a call that took `one_call_s` once."""
        one_call_s = max(one_call_s, 1e-9)
        iterations = max(1, math.ceil(self.min_round_s / one_call_s - 1e-9))  # 1e-9: float noise in the ratio
        rounds = math.ceil(self.target_s / (one_call_s * iterations))
        return min(max(rounds, self.min_rounds), self.max_rounds), iterations

    def rounds_per_pass(self, rounds: int) -> int:
        return max(MIN_ROUNDS_PER_PASS, math.ceil(rounds / self.passes))

    def as_dict(self) -> dict:
        return asdict(self)


def method_constants() -> dict:
    """The thresholds of this module, stored with each run so its report states the method it used."""
    return {
        "noisy_iqr_ratio": NOISY_IQR_RATIO,
        "warmup_rounds": WARMUP_ROUNDS,
        "min_rounds_per_pass": MIN_ROUNDS_PER_PASS,
        "confidence": CONFIDENCE,
        "stall_ratio": STALL_RATIO,
        "pass_spread_ratio": PASS_SPREAD_RATIO,
        "ci_relative_width": CI_RELATIVE_WIDTH,
    }


def pass_order(keys: Sequence[Hashable], pass_index: int, seed: int = 0) -> list:
    """The order a pass visits `keys` in: a fresh shuffle for every pass, reproducible from the seed."""
    order = list(keys)
    random.Random(f"{seed}:{pass_index}").shuffle(order)
    return order


def median_interval(times: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Distribution-free interval of the median from order statistics; NaN where too few rounds reach
    the confidence (5 or fewer at 95 %)."""
    if len(times) < 2:
        return math.nan, math.nan
    ci = scipy_stats.quantile_test(np.asarray(times, float), q=float(np.median(times))).confidence_interval(confidence)
    return float(ci.low), float(ci.high)


@dataclass(frozen=True)
class Timing:
    """Per-call times of each round (seconds), grouped by pass, and their statistics."""

    pass_times_s: tuple[tuple[float, ...], ...]
    iterations: int
    median_s: float
    iqr_s: float
    mean_s: float
    min_s: float
    ci_low_s: float
    ci_high_s: float
    pass_spread: float  # the median of the passes' medians over the fastest pass's (1.0 with one pass)
    reliable: bool
    flag: str  # why not reliable; empty when reliable
    record: dict = field(repr=False, compare=False, default_factory=dict)  # pytest-benchmark's JSON

    @property
    def rounds(self) -> int:
        return sum(len(p) for p in self.pass_times_s)

    @property
    def passes(self) -> int:
        return len(self.pass_times_s)

    @property
    def noisy(self) -> bool:
        return self.iqr_s / self.median_s > NOISY_IQR_RATIO if self.median_s > 0 else False


def assess(median_s: float, min_s: float, pass_spread: float, ci: tuple[float, float]) -> tuple[bool, str]:
    """(reliable, flag): the thresholds of the module docstring, every one that is crossed named."""
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
    return not flags, "; ".join(flags)


def summarize(
    pass_times_s: Sequence[Sequence[float]], iterations: int, name: str = "point", template: dict | None = None
) -> Timing:
    """The statistics of a point over the rounds of all its passes (pytest-benchmark's Stats), and one
    pytest-benchmark record holding them all (built on `template`, a record of one of its passes)."""
    passes = tuple(tuple(float(t) for t in p) for p in pass_times_s if len(p))
    if not passes:
        raise ValueError(f"{name}: no timed rounds")
    st = Stats()
    for p in passes:
        for t in p:
            st.update(t)
    ci = median_interval(st.data)
    pass_medians = [float(np.median(p)) for p in passes]
    spread = float(np.median(pass_medians)) / min(pass_medians) if min(pass_medians) > 0 else math.inf
    reliable, flag = assess(st.median, st.min, spread, ci)
    record = dict(template or {"name": name, "fullname": name})
    record["stats"] = dict(st.as_dict(), data=list(st.data), iterations=iterations)
    return Timing(
        pass_times_s=passes,
        iterations=iterations,
        median_s=st.median,
        iqr_s=st.iqr,
        mean_s=st.mean,
        min_s=st.min,
        ci_low_s=ci[0],
        ci_high_s=ci[1],
        pass_spread=spread,
        reliable=reliable,
        flag=flag,
        record=record,
    )


class _QuietLogger:
    """pytest-benchmark logs through pytest's terminal; outside pytest we keep it quiet."""

    def debug(self, *args, **kwargs):
        pass

    info = warning = warn = error = debug


def _fixture(name: str, clock: Callable[[], float]) -> BenchmarkFixture:
    node = SimpleNamespace(name=name, nodeid=name)
    options = dict(
        node=node,
        disable_gc=False,
        timer=NameWrapper(clock),
        min_rounds=1,
        min_time=0.0,
        max_time=1.0,
        precision=None,
        confidence=None,
        warmup=False,
        warmup_iterations=0,
        calibration_precision=10,
        add_stats=lambda stats: None,
        logger=_QuietLogger(),
        warner=lambda *a, **k: None,
        disabled=False,
        cprofile=False,
        cprofile_loops=None,
        cprofile_dump=None,
        group=None,
    )
    # Older pytest-benchmark releases (on some GPU images) take fewer arguments: pass what this one takes.
    accepted = inspect.signature(BenchmarkFixture.__init__).parameters
    return BenchmarkFixture(**{k: v for k, v in options.items() if k in accepted})


def synced(fn: Callable[[], object], sync: Callable[[], None] | None) -> Callable[[], object]:
    """`fn` followed by `sync` (e.g. torch.cuda.synchronize) inside the same call."""
    if sync is None:
        return fn

    def target():
        fn()
        sync()

    return target


def calibrate(
    target: Callable[[], object], policy: TimingPolicy, clock: Callable[[], float] = time.perf_counter
) -> tuple[int, int]:
    """(rounds, iterations) of a point from one warm call; the first call pays lazy initialisation."""
    target()
    start = clock()
    target()
    return policy.plan(clock() - start)


def time_rounds(
    target: Callable[[], object],
    rounds: int,
    iterations: int,
    clock: Callable[[], float] = time.perf_counter,
    name: str = "point",
) -> tuple[tuple[float, ...], dict]:
    """One pass: an untimed warm call, then pytest-benchmark's pedantic rounds. Returns the per-call time
    of each timed round and pytest-benchmark's JSON record of them."""
    target()
    fixture = _fixture(name, clock)
    fixture.pedantic(target, rounds=rounds, iterations=iterations, warmup_rounds=WARMUP_ROUNDS)
    return tuple(fixture.stats.stats.data), fixture.stats.as_dict(include_data=True)


def interleaved(
    fns: dict[Hashable, Callable[[], object]],
    policy: TimingPolicy = TimingPolicy(),
    *,
    sync: Callable[[], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    seed: int = 0,
) -> dict[Hashable, Timing]:
    """Time several callables against each other: calibrated one by one, then `policy.passes` passes,
    each timing a share of every callable's rounds in a shuffled order. For callables that stay built
    between passes (the claims, the matmul peak); a sweep, which rebuilds its layers, runs the same steps
    through bench.run."""
    targets = {key: synced(fn, sync) for key, fn in fns.items()}
    plans = {key: calibrate(target, policy, clock) for key, target in targets.items()}
    times: dict[Hashable, list[tuple[float, ...]]] = {key: [] for key in fns}
    for p in range(policy.passes):
        for key in pass_order(list(fns), p, seed):
            rounds, iterations = plans[key]
            data, _ = time_rounds(targets[key], policy.rounds_per_pass(rounds), iterations, clock, str(key))
            times[key].append(data)
    return {key: summarize(times[key], plans[key][1], str(key)) for key in fns}


def method_text(policy: dict, constants: dict | None = None) -> str:
    """The timing method of a run in one paragraph, from its stored policy and this module's constants as
    they were when it ran (meta.json `timing_policy`, `timing_method`), for the report and the README."""
    c = dict(method_constants(), **(constants or {}))
    p = dict(asdict(TimingPolicy()), **policy)
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
    text += (
        (
            "; unreliable points are measured again in a second set of passes at the end of the run, and "
            "those still unreliable are kept, flagged and left out of the time fits."
        )
        if p.get("remeasure", True)
        else "; unreliable points are kept, flagged and left out of the time fits."
    )
    return text
