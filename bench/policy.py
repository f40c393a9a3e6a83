"""The timing policy: rounds and passes, when a median is trusted, which clock fits use, the method in words."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING

from .load import BUSY_CORES

if TYPE_CHECKING:
    from .timing import ClockStats, Timing

NOISY_IQR_RATIO = 0.10  # IQR / median above this flags a point as noisy
WARMUP_ROUNDS = 1  # untimed rounds of every pass, its first call the warm one (a second call runs at the steady time)
MIN_ROUNDS_PER_PASS = 2
CONFIDENCE = 0.95  # of the median's interval
STALL_RATIO = 1.5  # median / fastest round above this: the rounds lost the CPU, or are bimodal
PASS_SPREAD_RATIO = 1.3  # median / fastest of the passes' medians above this: most passes ran slow
CI_RELATIVE_WIDTH = 0.25  # (interval high − low) / median above this: the median is too uncertain

WALL, CPU, DEVICE = "wall", "cpu", "device"
CLOCK_CHOICES = ("auto", WALL, CPU)
THREAD, PROCESS = "thread", "process"  # the CPU clock read: the calling thread's (one thread), or the process's
# A value beyond these passes argparse's type but makes every point an error or the run hang: bad input (exit 2).
MAX_TARGET_TIME_S = 60.0  # seconds of rounds per point: infinity overflows the round count; a minute is ample
MAX_ROUNDS = 10_000  # each round lasts at least min_round_s, and timings.jsonl keeps every round
MAX_PASSES = 100  # each pass visits every point and times at least MIN_ROUNDS_PER_PASS rounds of it
EXTEND_MEMORY_SHARE = 0.5
EXTEND_BUDGET = 0.5  # `run`'s extend_budget unless a preset's, SEQBENCH_EXTEND_BUDGET or --no-extend (default: 0)
EXTEND_MIN_S = 90.0
LEGACY = {"extend_cap_s", "extend_cap"}


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
    # bench.planner's share of the planned visits' time (0: off); no point past extend_until_s of the run's start
    extend_budget: float = 0.0
    extend_until_s: float | None = None

    def __post_init__(self):
        if self.passes < 1 or self.min_rounds < 1 or self.max_rounds < self.min_rounds:
            raise ValueError(f"timing policy {self}: needs passes >= 1 and 1 <= min_rounds <= max_rounds")
        budgets = (self.extra_budget, self.extend_budget)
        if self.extra_passes < 0 or not all(b >= 0 for b in budgets) or self.clock not in CLOCK_CHOICES:
            raise ValueError(
                f"timing policy {self}: needs extra_passes >= 0, extra_budget and extend_budget >= 0 and clock in "
                f"{CLOCK_CHOICES}"
            )

    @classmethod
    def stored(cls, stored: dict) -> TimingPolicy:
        """The policy a plan.json stored; missing fields take their defaults (old `remeasure` False: no extra)."""
        known = {f.name for f in fields(cls)}
        unknown = set(stored) - known - {"remeasure"} - LEGACY
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

    def extra_budget_s(self, first_passes_s: float) -> float:
        """Seconds the passes sampling points until their time is known may take, all together."""
        return self.extra_budget * first_passes_s

    def extend_budget_s(self, planned_s: float) -> float:
        if not self.extend_budget:
            return 0.0
        return max(self.extend_budget * planned_s, EXTEND_MIN_S)

    def as_dict(self) -> dict:
        return asdict(self)


def method_constants() -> dict:
    """Stored with each run, so its report states the method it used."""
    return {
        "noisy_iqr_ratio": NOISY_IQR_RATIO,
        "warmup_rounds": WARMUP_ROUNDS,
        "warm_call_in_round": True,
        "min_rounds_per_pass": MIN_ROUNDS_PER_PASS,
        "confidence": CONFIDENCE,
        "stall_ratio": STALL_RATIO,
        "pass_spread_ratio": PASS_SPREAD_RATIO,
        "ci_relative_width": CI_RELATIVE_WIDTH,
        "busy_cores": BUSY_CORES,
    }


def untimed_calls(iterations: int) -> int:
    return max(1, WARMUP_ROUNDS * iterations)


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


def method_text(policy: dict, constants: dict | None = None) -> str:
    """A run's timing method in one paragraph, from its meta.json `timing_policy` and `timing_method`."""
    c = dict(method_constants(), **(constants or {}))
    rounds = f"{c['warmup_rounds']} untimed round"
    in_round = (constants or c).get("warm_call_in_round")
    warming = f"{rounds} (its first call the warm one)" if in_round else f"one untimed call and {rounds}"
    stored = dict(policy)
    p = TimingPolicy.stored(stored).as_dict() if "remeasure" not in stored else dict(asdict(TimingPolicy()), **stored)
    text = (
        f"Each point's rounds (each round at least {p['min_round_s'] * 1e3:g} ms of repeated calls; "
        f"{p['min_rounds']} to {p['max_rounds']} rounds, about {p['target_s']:g} s of them) are split over "
        f"{p['passes']} interleaved passes, at least {c['min_rounds_per_pass']} rounds each; every pass visits "
        f"every point in a new shuffled order (the first in plan order, smallest first), and each visit "
        f"builds the layer, makes {warming}. Median over all "
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
