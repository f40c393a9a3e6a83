"""Why the process measuring a point died, and when the point is given up (method: docs/method.md)."""

from __future__ import annotations

from .cgroup import available_bytes, oom_kills
from .footprint import point_memory_bytes
from .spec import PointSpec

# Deaths before `killed`: one without memory evidence is as likely a user's kill; a Ray worker's counts as memory's.
KILLED_AFTER_MEMORY = 2
KILLED_AFTER_UNEXPLAINED = 4
KILLED_AFTER_WORKER = KILLED_AFTER_MEMORY
# Of the memory available: the predicted peak is rough, and the process holds more than the point.
MEMORY_SHARE = 0.5


def at_start() -> dict:
    """What a line of started.jsonl keeps to judge a death there later: memory available, the OOM kill count."""
    return {"available_bytes": available_bytes(), "oom_kills": oom_kills()}


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
    """(the row's reason, the errors.log text) once `deaths` (started.jsonl lines) reach the bound, else None."""
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


def all_given_up(specs, death_lines, stored) -> list[tuple[PointSpec, str, str]]:
    """(spec, reason, why) of each point not stored whose process died too often (`given_up`)."""
    oom_kills_now = oom_kills()
    found = ((spec, death_lines(spec.point_id)) for spec in specs if not stored(spec.point_id))
    return [(spec, *verdict) for spec, lines in found if lines and (verdict := given_up(spec, lines, oom_kills_now))]
