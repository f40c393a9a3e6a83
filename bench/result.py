"""A point's result as one object (spec, status, rounds on every clock, probes); `as_row` derives its row."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from .policy import choose_clock
from .probes import PROBES, timed
from .spec import PointSpec
from .timing import Rounds, Timing, summarize

if TYPE_CHECKING:
    import pandas as pd

    from .folder import RunFolder


@dataclass(frozen=True)
class PointResult:
    spec: PointSpec
    threads: int | None
    status: str = "ok"
    error: str = ""
    passes: tuple[Rounds, ...] = ()
    iterations: int = 0
    probes: dict = field(default_factory=dict)  # from its first pass
    others_busy_cores: float = 0.0  # the mean of its passes'
    clock_policy: str = "auto"
    record: dict = field(default_factory=dict, repr=False)  # pytest-benchmark's fields of its first pass

    @cached_property
    def timing(self) -> Timing:
        return summarize(self.passes, self.iterations, self.spec.key, self.record)

    @property
    def clock(self) -> tuple[str, str]:
        """(clock, why): the clock its time fits use, by bench.policy's rule."""
        return choose_clock(self.timing, self.others_busy_cores, self.clock_policy)

    @property
    def known(self) -> bool:
        """Whether its time is to be trusted on that clock; if not, bench.run samples it further."""
        return self.timing.on(self.clock[0]).reliable

    def as_row(self) -> dict:
        spec = self.spec
        row = dict(spec.as_row(), point_id=spec.point_id, threads=self.threads)
        for probe in PROBES:
            row.update(probe.predicted(spec))
        if self.status != "ok":
            return dict(row, status=self.status, error=self.error)
        on_gpu = spec.device.startswith("cuda")
        return dict(
            row,
            **self.probes,
            **timed.values(self.timing, self.clock, on_gpu),
            load_others_cores=round(self.others_busy_cores, 3),
            status="ok",
            error="",
        )


def skip_if_blocked(folder: RunFolder, spec: PointSpec) -> bool:
    """Store `spec` as `skipped` if a smaller point of its sweep ran out of memory or was killed."""
    blocker = folder.blocked_by(spec)
    if blocker is None:
        return False
    why = f"larger than n={blocker.n} d={blocker.d} batch={blocker.batch}, which ran out of memory or was killed"
    folder.store_row(spec, PointResult(spec, int(folder.meta["threads"]), "skipped", why).as_row())
    return True


def point_counts(points: pd.DataFrame, planned_passes: int) -> dict[str, object]:
    """A finished run's meta.json counts of its stored points: statuses, and how its ok points were timed."""
    ok = points[points["status"] == "ok"]

    def count(mask) -> int:
        return int(mask(ok).sum()) if len(ok) else 0

    return dict(
        points_stored=int(len(points)),
        status_counts={k: int(v) for k, v in points["status"].value_counts().items()},
        points_noisy=count(lambda p: p["time_noisy"].astype(bool)),
        points_unreliable=count(lambda p: ~p["time_reliable"].astype(bool)),
        points_sampled_further=count(lambda p: p["passes"] > planned_passes),
        points_cpu_clock=count(lambda p: p["time_clock"] == "cpu"),
        points_device_clock=count(lambda p: p["time_clock"] == "device"),
    )
