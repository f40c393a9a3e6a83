"""Attention on long sequences: time, counted FLOPs and peak memory as n grows, against the RNN and the convolution."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

import models
from bench import fits
from bench.memory import measure_memory
from models import LayerConfig

from .complexity import fitted_exponent
from .measure import TIME_THREADS, counted_flops, interleaved_times_s
from .record import D2L_CNN_RNN_SA, claim, generator_for, numbers_of, rounded, seeded
from .verdict import Outcome, all_met, at_least

SLOW_D = 64
SLOW_NS = (512, 1024, 2048, 4096, 8192)
EXPONENT_NS = SLOW_NS[-3:]
SLOW_TIME_EXPONENT_MIN = 1.5  # attention's, fitted over a 4x span (over 2x one slow median moved it to 1.47): n² is 2
SLOW_FLOP_EXPONENT_MIN = 1.8  # the same of its counted FLOPs (the note's "because")
SLOWER_RATIO_MIN = 2.0  # attention's time / the other layer's at the largest n, for "very slow"
MEMORY_NS = (256, 512, 1024)  # peak memory of the explicit n×n scores, d = MEMORY_D
MEMORY_D = 32


def _crossing_text(n_star: float | None, slower_from_the_first: bool) -> float | str:
    if n_star is not None:
        return n_star
    return f"below n = {SLOW_NS[0]}" if slower_from_the_first else "none"


def _local_exponent(ns: Sequence[int], ys: Sequence[float]) -> float:
    return math.log(ys[-1] / ys[-2]) / math.log(ns[-1] / ns[-2])


@claim(
    "Because its cost is quadratic in sequence length, self-attention becomes very slow on very long sequences.",
    D2L_CNN_RNN_SA,
)
def attention_slow_long_sequences(seed: int) -> Outcome:
    gen = generator_for(seed, 134)
    names = (models.ROLES.attention, models.ROLES.recurrent, models.ROLES.convolution)
    with seeded(seed):
        layers = {name: models.build(name, LayerConfig(d=SLOW_D)) for name in names}
    inputs = {n: torch.randn(1, n, SLOW_D, generator=gen) for n in SLOW_NS}
    # Every length in one interleaved round, so a slow spell of the machine falls on all of them alike.
    fns = {(name, n): (lambda layer=layer, x=x: layer(x)) for name, layer in layers.items() for n, x in inputs.items()}
    measured_s = interleaved_times_s(fns)
    times = {name: [rounded(measured_s[name, n]) for n in SLOW_NS] for name in names}
    flops = {name: [counted_flops(fns[name, n]) for n in SLOW_NS] for name in names}
    attention, others = names[0], names[1:]
    time_exp = fitted_exponent(EXPONENT_NS, times[attention][-len(EXPONENT_NS) :])
    flop_exp = fitted_exponent(EXPONENT_NS, flops[attention][-len(EXPONENT_NS) :])
    slower = {other: times[attention][-1] / times[other][-1] for other in others}
    crossover = {other: fits.crossover_n(SLOW_NS, times[attention], times[other]) for other in others}
    explicit = models.build(models.ROLES.attention_explicit, LayerConfig(d=MEMORY_D))
    peaks = []
    for n in MEMORY_NS:
        x = torch.randn(1, n, MEMORY_D, generator=gen)
        with torch.inference_mode():
            peaks.append(measure_memory(lambda x=x: explicit(x), "cpu").peak_bytes)
    between = f"fitted over n = {', '.join(map(str, EXPONENT_NS))} (d = {SLOW_D})"
    return Outcome(
        measured=rounded(time_exp, 3),
        rule=all_met(
            at_least(f"exponent in n of attention's time {between}", time_exp, SLOW_TIME_EXPONENT_MIN),
            *(
                at_least(f"attention's time / {other}'s at n = {SLOW_NS[-1]}", ratio, SLOWER_RATIO_MIN)
                for other, ratio in slower.items()
            ),
            at_least(
                f"exponent of its counted FLOPs {between} (the cause: quadratic)",
                flop_exp,
                SLOW_FLOP_EXPONENT_MIN,
            ),
        ),
        note="at short n attention is not the slow one: the projections' n·d² and the RNN's sequential steps weigh more",
        details={
            "d": SLOW_D,
            "n": list(SLOW_NS),
            "time_median_s": times,
            "flops_counted": flops,
            "crossover_n": crossover,
            "time_threads": TIME_THREADS,
            "memory_n": list(MEMORY_NS),
            "memory_d": MEMORY_D,
            "peak_bytes_explicit": peaks,
            "numbers": numbers_of(
                time_attention_largest_n=(times[attention][-1], "s", f"attention's median time at n = {SLOW_NS[-1]}"),
                **{
                    f"crossover_{other}": (
                        _crossing_text(crossover[other], times[attention][0] >= times[other][0]),
                        "1",
                        f"n* where attention's time overtakes {other}'s (log-log interpolated, as the report's n*)",
                    )
                    for other in others
                },
                memory_exponent=(
                    _local_exponent(MEMORY_NS, peaks),
                    "1",
                    "local exponent in n of the explicit scores' peak bytes",
                ),
            ),
        },
    )
