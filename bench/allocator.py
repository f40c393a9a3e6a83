"""The CPU allocator's policy while measuring: glibc malloc keeps the memory it got.

Why: glibc serves a large block (the explicit attention's n×n scores) with a fresh mmap above a threshold that
it raises and lowers as blocks are freed, and gives the top of its heap back to the OS above a trim threshold
that moves with it. Which of the two a call meets depends on the points measured before it, so the same call
either reuses pages the process holds or takes every page fresh from the OS, a page fault each, and its time
changes with the order of the points. Pinning the thresholds is not enough: a trim threshold of 2 GiB (the
most mallopt takes) still gives back the 1 GiB blocks of a large point at every call. So no block is mmapped
on its own (M_MMAP_MAX 0) and the heap is never trimmed (M_TRIM_THRESHOLD −1): a block comes from the heap,
freed memory stays with the process, and a warm call takes no page fault; the process's resident memory
stays at its largest point's. The policy is applied once per measuring process (`pin`), recorded in meta.json
(`allocator`), and the timed calls' page faults are stored per point (`faults_per_call`), so a call that still
faults is seen.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import platform

# mallopt's parameters (malloc.h) and the values set: no mmapped blocks, no trimming (mallopt(3): -1 disables it)
M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4
SETTINGS = {M_MMAP_MAX: 0, M_TRIM_THRESHOLD: -1}
POLICY = "glibc malloc: no block mmapped on its own, the heap never trimmed"


@functools.cache
def pin() -> dict:
    """Set the policy in this process (once); what was done, for meta.json `allocator`. Where the C library is
    not glibc, or refuses a value, nothing is set and the entry says so."""
    libc_name, libc_version = platform.libc_ver()
    entry = {"policy": POLICY, "libc": f"{libc_name} {libc_version}".strip(), "pinned": False}
    if libc_name != "glibc":
        return entry | {"why_not": "not glibc: the C library's own policy is in force"}
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    done = [libc.mallopt(param, ctypes.c_int(value)) for param, value in SETTINGS.items()]
    if not all(done):
        return entry | {"why_not": "mallopt refused the values: glibc's dynamic thresholds are in force"}
    return entry | {"pinned": True, "mmap_max": 0, "trim_threshold": -1}


def describe(entry: dict | None) -> str:
    """The policy a run's meta.json records, in a sentence for the report."""
    if not entry:
        return "glibc's default, moving malloc thresholds (the run predates the pinned policy)"
    if entry.get("pinned"):
        return (
            f"{entry['libc']}, malloc keeps the memory it got (no block mmapped on its own, the heap never trimmed), "
            "so a warm call reuses the process's pages instead of taking fresh ones from the OS"
        )
    if "mmap_threshold_bytes" in entry:  # the first policy: thresholds pinned at 2 GiB
        return f"{entry['libc']}, malloc's mmap and trim thresholds pinned at 2 GiB"
    return f"{entry.get('libc') or 'unknown C library'}: {entry.get('why_not', 'thresholds not pinned')}"
