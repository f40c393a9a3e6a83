"""This process's memory cgroups (a container's, a job's): their OOM kill count and the memory left to take."""

from __future__ import annotations

import re
from pathlib import Path

import psutil

# The kernel counts an OOM kill in the cgroup that ran out (v1: there alone), so every ancestor is read too.
CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")


def _memory_cgroups() -> list[tuple[Path, int]]:
    """This process's memory cgroup and its ancestors, each with its version (1 or 2)."""
    try:
        lines = PROC_CGROUP.read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            where = [(CGROUP_ROOT / "memory", 1)]
        elif not controllers:
            where = [(CGROUP_ROOT, 2), (CGROUP_ROOT / "unified", 2)]
        else:
            continue
        own = Path(path.lstrip("/"))
        found += [(base / folder, version) for base, version in where for folder in (own, *own.parents)]
    return found


def _oom_counters() -> list[Path]:
    """The files counting OOM kills in this process's memory cgroup and its ancestors (v1 or v2)."""
    return [folder / ("memory.oom_control" if v == 1 else "memory.events") for folder, v in _memory_cgroups()]


def available_bytes() -> int:
    """The memory this process may still take: the machine's available memory, or less where a cgroup limits it."""
    available = psutil.virtual_memory().available
    for folder, version in _memory_cgroups():
        names = ("memory.limit_in_bytes", "memory.usage_in_bytes") if version == 1 else ("memory.max", "memory.current")
        try:
            limit, used = ((folder / name).read_text().strip() for name in names)
            available = min(available, max(0, int(limit) - int(used)))
        except (OSError, ValueError):  # no such file, or "max": no limit there
            continue
    return available


def oom_kills() -> int | None:
    """A count of OOM kills that only grows, to compare with an earlier reading; None where none can be read."""
    counts = []
    for path in _oom_counters():
        try:
            found = re.search(r"^oom_kill (\d+)$", path.read_text(), re.M)
        except OSError:
            continue
        if found:
            counts.append(int(found.group(1)))
    return sum(counts) if counts else None
