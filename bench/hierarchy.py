"""The memory hierarchy as a program sees it: STREAM's triad over working sets from a few KiB to several times the
last-level cache the OS reports, its bandwidth's plateaus taken as the effective cache levels (the Empirical Roofline
Toolkit's method: the machine's own sizes are never read). Method: docs/method.md."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

SMALLEST_WORKING_SET = 3 * 2**14  # three 16 KiB arrays: inside any first-level cache
LARGEST_OVER_REPORTED = 4  # the sweep goes to this many times the reported last-level cache (STREAM's rule) ...
LARGEST_AT_LEAST = 2**30  # ... and at least this far, where the OS reports none or a small one
MEMORY_SHARE = 1 / 8  # ... and never past this share of the memory available
LEVEL_DROP = 0.75  # a rate below this share of its level's best begins the next level
MEMORY_POINTS = 2  # the largest working sets that make the memory level at the least


def working_sets(reported_cache_bytes: int | None, available_bytes: int) -> list[int]:
    """Working sets (bytes of the triad's three arrays) doubling from SMALLEST_WORKING_SET to the largest the rules
    allow; each a multiple of 12 bytes (three float32 arrays)."""
    largest = max(LARGEST_AT_LEAST, LARGEST_OVER_REPORTED * (reported_cache_bytes or 0))
    largest = min(largest, int(available_bytes * MEMORY_SHARE))
    sizes, size = [], SMALLEST_WORKING_SET
    while size <= largest:
        sizes.append(size // 12 * 12)
        size *= 2
    return sizes


def levels(sizes: Sequence[int], rates: Sequence[float]) -> list[dict]:
    """The plateaus of bandwidth against working set, smallest first: a level ends where a rate falls below
    LEVEL_DROP of the best rate seen in it. Each: the working sets it spans, its median rate, its points."""
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
    """The largest working set still served faster than memory: the end of the level before the last (memory), if
    the last has MEMORY_POINTS points; None where the sweep found no cache above memory or did not reach memory."""
    if len(found) < 2 or found[-1]["points"] < MEMORY_POINTS:
        return None
    return found[-2]["up_to_bytes"]


def measure(triad: Callable[[int], float], reported_cache_bytes: int | None, available_bytes: int) -> dict:
    """`triad(elements)` -> bytes/s of one array size, over `working_sets`; the sweep, its levels, the effective
    last-level cache and the cache the OS reports."""
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
