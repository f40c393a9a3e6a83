"""Why the process measuring a point died, and when a point is given up: a death is blamed on memory only on
evidence (the kernel's count of OOM kills rose, or the point was predicted to need about the memory there was),
and a point whose deaths have no such evidence is measured again more times before it is stored `killed`."""

from __future__ import annotations

import re
from pathlib import Path

import psutil

from .estimate import point_memory_bytes
from .spec import PointSpec

# Deaths of the process while measuring a point before the point is stored `killed`. With evidence that memory
# killed it, a second death proves the point does it every time. Without, a death is as likely a user's kill or
# a machine going away: the point is measured again, each time later in its pass (bench.run), and given up only
# once it has died this often, so that a point that kills every process is still given up.
KILLED_AFTER_MEMORY = 2
KILLED_AFTER_UNEXPLAINED = 4
# The predicted peak (bench/estimate.py) is rough, and the process holds more than the point (torch, the other
# points' weights): a point predicted to need more than this share of the memory available when it started
# could have been killed for memory.
MEMORY_SHARE = 0.5
# The kernel counts OOM kills in the memory cgroup that ran out (cgroup v2: memory.events, also counted in its
# ancestors; v1: memory.oom_control, that cgroup's alone): this process's own cgroup and every ancestor are read.
CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")


def _oom_counters() -> list[Path]:
    """The files counting OOM kills in this process's memory cgroup and its ancestors, as /proc/self/cgroup names
    them (a line `ID:CONTROLLERS:PATH`: v1's `memory` hierarchy, or v2's unified one, `0::PATH`)."""
    try:
        lines = PROC_CGROUP.read_text().splitlines()
    except OSError:
        return []
    files = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            where = [(CGROUP_ROOT / "memory", "memory.oom_control")]
        elif not controllers:
            where = [(CGROUP_ROOT, "memory.events"), (CGROUP_ROOT / "unified", "memory.events")]
        else:
            continue
        own = Path(path.lstrip("/"))
        files += [base / folder / name for base, name in where for folder in (own, *own.parents)]
    return files


def oom_kills() -> int | None:
    """The kernel's count of OOM kills in this process's cgroup and its ancestors (a count that only grows, to be
    compared with an earlier reading), where it can be read; None where it cannot."""
    counts = []
    for path in _oom_counters():
        try:
            found = re.search(r"^oom_kill (\d+)$", path.read_text(), re.M)
        except OSError:
            continue
        if found:
            counts.append(int(found.group(1)))
    return sum(counts) if counts else None


def at_start() -> dict:
    """What a line of started.jsonl keeps to judge a death there later: memory available, the OOM kill count."""
    return {"available_bytes": psutil.virtual_memory().available, "oom_kills": oom_kills()}


def memory_evidence(spec: PointSpec, started: dict, oom_kills_now: int | None) -> str | None:
    """Why memory may have killed the process that logged `started` (its line of started.jsonl), or None."""
    before = started.get("oom_kills")
    if before is not None and oom_kills_now is not None and oom_kills_now > before:
        return f"the kernel counted {oom_kills_now - before} OOM kill(s) in this cgroup since the point was started"
    available = started.get("available_bytes")
    predicted = point_memory_bytes(spec) if spec.device == "cpu" else 0  # a GPU's lack of memory is an `oom` row
    if available and predicted > MEMORY_SHARE * available:
        return (
            f"it was predicted to need {predicted / 2**20:.0f} MiB with {available / 2**20:.0f} MiB available "
            "when it was started"
        )
    return None


def given_up(spec: PointSpec, deaths: list[dict], oom_kills_now: int | None = None) -> tuple[str, str] | None:
    """(the row's reason, the errors.log text) when the point's `deaths` (the started.jsonl lines of processes that
    died measuring it) reach the bound; None while it is to be measured again."""
    evidence = [e for e in (memory_evidence(spec, d, oom_kills_now) for d in deaths) if e]
    bound = KILLED_AFTER_MEMORY if evidence else KILLED_AFTER_UNEXPLAINED
    if len(deaths) < bound:
        return None
    if evidence:
        reason = (
            f"the process died {len(deaths)} times while measuring this point and left no error; memory the likely "
            f"cause: {evidence[-1]}; not tried again"
        )
    else:
        reason = (
            f"the process died {len(deaths)} times while measuring this point and left no error: killed from outside, "
            "no sign that memory was the cause (the kernel's OOM count did not rise where it can be read, and the "
            "point was predicted to fit); not tried again"
        )
    lines = [f"given up, stored killed: {reason}"]
    for death in deaths:
        at = f"pass {death.get('pass')} (attempt {death.get('attempt')})"
        why = memory_evidence(spec, death, oom_kills_now) or "no sign of memory"
        lines.append(f"  process {death.get('pid')} died in {at}, started {death.get('utc')}: {why}")
    return reason, "\n".join(lines)
