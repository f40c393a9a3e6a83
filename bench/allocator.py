"""While measuring, glibc malloc keeps the memory it got: a warm call takes no page fault, whatever ran before it."""

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
    """Set the policy in this process, once; what was done (or why not), for meta.json `allocator`."""
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
