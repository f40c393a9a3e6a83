"""A point's time: each clock's statistics over its passes' rounds, the clock its fits use, and why not trusted."""

from __future__ import annotations

from ..policy import CPU, DEVICE, WALL, plain_flag
from ..timing import ClockStats, Timing
from .base import Column

CLOCK_WORDS = {
    WALL: "wall clock",
    CPU: "CPU clock",
    DEVICE: "the device's own time, CUDA graph replays on CUDA events",
}
# statistic -> (type, unit, what); on the wall clock all of them, on the CPU and device clocks all but the mean
STATS = {
    "median_s": ("float", "s", "median seconds per call over all rounds"),
    "iqr_s": ("float", "s", "interquartile range of the rounds"),
    "mean_s": ("float", "s", "mean seconds per call"),
    "min_s": ("float", "s", "the fastest round"),
    "ci_low_s": ("float", "s", "low end of the median's 95 % interval"),
    "ci_high_s": ("float", "s", "high end of the median's 95 % interval"),
    "pass_spread": ("float", "", "median of the passes' medians over the fastest pass's"),
    "flag": ("text", "", "why its median is not to be trusted; empty when it is"),
}


def column(clock: str, stat: str) -> str:
    """The wall clock's statistics are `time_<stat>` (its flag `time_wall_flag`), another clock's `time_<clock>_<stat>`."""
    return f"time_{stat}" if clock == WALL and stat != "flag" else f"time_{clock}_{stat}"


def _stat(clock: str, stat: str) -> Column:
    kind, unit, what = STATS[stat]
    return Column(column(clock, stat), kind, unit, f"{CLOCK_WORDS[clock]}: {what}")


def _clock(clock: str) -> tuple[Column, ...]:
    return tuple(_stat(clock, s) for s in STATS if s != "mean_s")


COLUMNS = (
    *(_stat(WALL, s) for s in ("median_s", "iqr_s", "mean_s", "min_s", "ci_low_s", "ci_high_s")),
    Column("rounds", "int", "", "timed rounds over all passes"),
    Column("iterations", "int", "", "calls per round"),
    Column("passes", "int", "", "interleaved passes: the plan's and any that sampled the point further"),
    _stat(WALL, "pass_spread"),
    Column("time_noisy", "bool", "", "wall clock: IQR above the policy's share of the median"),
    _stat(WALL, "flag"),
    Column("time_cpu_clock", "text", "", "thread: the calling thread's CPU time; process: the process's; empty: none"),
    *_clock(CPU),
    *_clock(DEVICE),
    Column("time_graph_calls", "int", "", "calls captured in the CUDA graph replayed"),
    Column("time_clock", "text", "", "the clock the point's time fits use: wall, cpu or device"),
    Column("time_clock_why", "text", "", "why that clock"),
    Column("time_reliable", "bool", "", "whether the median on that clock is to be trusted"),
    Column("time_flag", "text", "", "why not, in words first"),
    Column("faults_per_call", "float", "", "minor page faults per timed call"),
)


def _on(clock: str, stats: ClockStats | None, missing: str) -> dict:
    values = {column(clock, s): getattr(stats, s) if stats else None for s in STATS if s not in ("mean_s", "flag")}
    values[column(clock, "pass_spread")] = round(stats.pass_spread, 4) if stats else None
    return values | {column(clock, "flag"): stats.flag if stats else missing}


def values(timing: Timing, clock: tuple[str, str], on_gpu: bool) -> dict:
    """The columns of a point timed over all its passes; `clock`: bench.policy.choose_clock's (clock, why)."""
    wall, chosen = timing.wall, timing.on(clock[0])
    return dict(
        _on(WALL, wall, ""),
        time_mean_s=wall.mean_s,
        time_noisy=wall.noisy,
        time_cpu_clock=timing.cpu_clock,
        **_on(CPU, timing.cpu, "no CPU clock"),
        **_on(DEVICE, timing.device, "no CUDA graph of the call" if on_gpu else "not a GPU"),
        time_graph_calls=timing.graph_calls or None,
        time_clock=clock[0],
        time_clock_why=clock[1],
        time_reliable=chosen.reliable,
        time_flag=plain_flag(chosen, clock[0], timing.passes, on_gpu),
        faults_per_call=None if timing.faults_per_call is None else round(timing.faults_per_call, 2),
        rounds=timing.rounds,
        iterations=timing.iterations,
        passes=timing.passes,
    )
