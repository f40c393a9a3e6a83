"""The memory hierarchy measured: the triad over working sets, its plateaus the cache levels. Method: docs/method.md."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

SMALLEST_WORKING_SET = 3 * 2**14  # three 16 KiB arrays
LARGEST_OVER_REPORTED = 4  # the largest: 4x the reported cache (STREAM's rule), at least 1 GiB, at most 1/8 of memory
LARGEST_AT_LEAST = 2**30
MEMORY_SHARE = 1 / 8
LEVEL_DROP = 0.75  # a rate below this share of its level's best begins the next level
MEMORY_POINTS = 2


def working_sets(reported_cache_bytes: int | None, available_bytes: int) -> list[int]:
    """The triad's working sets (three float32 arrays), doubling."""
    largest = max(LARGEST_AT_LEAST, LARGEST_OVER_REPORTED * (reported_cache_bytes or 0))
    largest = min(largest, int(available_bytes * MEMORY_SHARE))
    sizes, size = [], SMALLEST_WORKING_SET
    while size <= largest:
        sizes.append(size // 12 * 12)
        size *= 2
    return sizes


def levels(sizes: Sequence[int], rates: Sequence[float]) -> list[dict]:
    """The plateaus of bandwidth against working set, smallest first, each its span and median rate."""
    groups: list[list[int]] = [[0]] if len(rates) else []
    for i in range(1, len(rates)):
        if rates[i] < LEVEL_DROP * max(rates[j] for j in groups[-1]):
            groups.append([i])
        else:
            groups[-1].append(i)
    return [
        {
            "from_bytes": int(sizes[g[0]]),
            "up_to_bytes": int(sizes[g[-1]]),
            "bytes_per_s": float(statistics.median(rates[i] for i in g)),
            "points": len(g),
        }
        for g in groups
    ]


def effective_last_level_bytes(found: Sequence[dict]) -> int | None:
    """The end of the level before memory's (the last, of MEMORY_POINTS or more); None without both."""
    if len(found) < 2 or found[-1]["points"] < MEMORY_POINTS:
        return None
    return found[-2]["up_to_bytes"]


def measure(triad: Callable[[int], float], reported_cache_bytes: int | None, available_bytes: int) -> dict:
    """`triad(elements)` -> bytes/s, swept over `working_sets`, with the levels found."""
    sizes = working_sets(reported_cache_bytes, available_bytes)
    rates = [triad(size // 12) for size in sizes]
    found = levels(sizes, rates)
    return {
        "working_set_bytes": sizes,
        "bytes_per_s": rates,
        "levels": found,
        "effective_last_level_cache_bytes": effective_last_level_bytes(found),
        "reported_last_level_cache_bytes": reported_cache_bytes,
    }
