"""Wall-clock timing of one forward pass, with pytest-benchmark as the engine.

Method (after torch.utils.benchmark.Timer's and pytest-benchmark's own):
- Warm-up first: parts of PyTorch initialise lazily (oneDNN primitives, cuDNN plans, allocator pools), so
  the first calls are slower than the steady state we want. `WARMUP_ROUNDS` untimed rounds run after one
  calibration call.
- Calibration: after one untimed call, a warm calibration call's time t sets `iterations` (calls per round) so that a round lasts at
  least `min_round_s` (well above the clock's resolution), and `rounds` so that the timed rounds take about
  `target_s` in all, clamped to [`min_rounds`, `max_rounds`].
- Rounds are run by pytest-benchmark's pedantic mode (`BenchmarkFixture.pedantic`), which keeps every
  round's time; its `Stats` give the median and the interquartile range; its JSON record (with
  `machine_info` and `commit_info`) is kept in the run folder.
- On a GPU the target synchronizes the device inside the timed call, so a round ends when the kernels end,
  not when they are queued.
- Median over mean: the median ignores the rare slow round (a page fault, another process) that would
  drag the mean. A point whose IQR/median exceeds `NOISY_IQR_RATIO` is flagged noisy, never dropped.
The caller sets inference mode and pins threads (bench.runner); this module only times.
"""
from __future__ import annotations

import inspect
import math
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Callable

from pytest_benchmark.fixture import BenchmarkFixture
from pytest_benchmark.utils import NameWrapper

NOISY_IQR_RATIO = 0.10  # IQR / median above 10 % flags a point as noisy
WARMUP_ROUNDS = 1  # after the untimed first call and the calibration call, which warm up too


@dataclass(frozen=True)
class TimingPolicy:
    min_rounds: int = 5
    max_rounds: int = 50
    target_s: float = 0.3  # total time of the timed rounds, roughly
    min_round_s: float = 1e-3  # each round at least this long: calls are repeated within a round below it

    def plan(self, one_call_s: float) -> tuple[int, int]:
        """(rounds, iterations) for a call that took `one_call_s` once."""
        one_call_s = max(one_call_s, 1e-9)
        iterations = max(1, math.ceil(self.min_round_s / one_call_s - 1e-9))  # 1e-9: float noise in the ratio
        rounds = math.ceil(self.target_s / (one_call_s * iterations))
        return min(max(rounds, self.min_rounds), self.max_rounds), iterations


@dataclass(frozen=True)
class Timing:
    """Per-call times of each round (seconds) and pytest-benchmark's statistics of them."""

    times_s: tuple[float, ...]
    iterations: int
    median_s: float
    iqr_s: float
    mean_s: float
    min_s: float
    record: dict = field(repr=False, compare=False)  # pytest-benchmark's JSON for this benchmark

    @property
    def rounds(self) -> int:
        return len(self.times_s)

    @property
    def noisy(self) -> bool:
        return self.iqr_s / self.median_s > NOISY_IQR_RATIO if self.median_s > 0 else False


class _QuietLogger:
    """pytest-benchmark logs through pytest's terminal; outside pytest we keep it quiet."""

    def debug(self, *args, **kwargs):
        pass

    info = warning = warn = error = debug


def _fixture(name: str, clock: Callable[[], float]) -> BenchmarkFixture:
    node = SimpleNamespace(name=name, nodeid=name)
    options = dict(
        node=node, disable_gc=False, timer=NameWrapper(clock), min_rounds=1, min_time=0.0, max_time=1.0,
        precision=None, confidence=None, warmup=False, warmup_iterations=0, calibration_precision=10,
        add_stats=lambda stats: None, logger=_QuietLogger(), warner=lambda *a, **k: None, disabled=False,
        cprofile=False, cprofile_loops=None, cprofile_dump=None, group=None,
    )
    # Older pytest-benchmark releases (on some GPU images) take fewer arguments: pass what this one takes.
    accepted = inspect.signature(BenchmarkFixture.__init__).parameters
    return BenchmarkFixture(**{k: v for k, v in options.items() if k in accepted})


def time_call(
    fn: Callable[[], object],
    *,
    sync: Callable[[], None] | None = None,
    policy: TimingPolicy = TimingPolicy(),
    clock: Callable[[], float] = time.perf_counter,
    name: str = "point",
) -> Timing:
    """Time `fn()`; `sync` (e.g. torch.cuda.synchronize) runs inside every timed call."""
    if sync is None:
        target = fn
    else:
        def target():
            fn()
            sync()

    target()  # the first call pays lazy initialisation; it is not used for anything
    start = clock()
    target()  # calibration call, warm
    rounds, iterations = policy.plan(clock() - start)

    fixture = _fixture(name, clock)
    fixture.pedantic(target, rounds=rounds, iterations=iterations, warmup_rounds=WARMUP_ROUNDS)
    stats = fixture.stats.stats
    record = fixture.stats.as_dict(include_data=True)
    return Timing(
        times_s=tuple(stats.data), iterations=iterations, median_s=stats.median, iqr_s=stats.iqr,
        mean_s=stats.mean, min_s=stats.min, record=record,
    )
