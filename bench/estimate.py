"""A run's duration before it starts and after its first pass, by one deterministic model (bench.cost)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from . import cost, default_policy, formats, planner
from .footprint import point_memory_bytes
from .policy import TimingPolicy
from .spec import PointSpec, device_key
from .units import format_duration

OPTIONAL_SHARE = 0.25  # the band's 1.5 over the estimate's error, up to 1.2 (docs/method.md), less one


@dataclass(frozen=True)
class PointEstimate:
    spec: PointSpec
    call_s: float
    time_s: float
    memory_bytes: int


@dataclass(frozen=True)
class PlanEstimate:
    points: tuple[PointEstimate, ...]
    peaks_s: float
    extra_s: float = 0.0
    extend_s: float = 0.0
    extend_foreseen_s: float = 0.0
    extend_points: int = 0
    extend_structural_s: float = 0.0
    slowdown: float = 1.0
    begun_s: float = 0.0
    default_policy_s: float = 0.0

    @property
    def mandatory_s(self) -> float:
        return sum(p.time_s for p in self.points) + self.peaks_s + self.default_policy_s

    @property
    def optional_s(self) -> float:
        """Sampling and extension counted: planner.STRUCTURAL's whole, the rest at most OPTIONAL_SHARE more."""
        structural_s = self.extend_structural_s
        return min(
            self.extra_s + self.extend_foreseen_s, structural_s + OPTIONAL_SHARE * (self.mandatory_s + structural_s)
        )

    @property
    def time_s(self) -> float:
        return (self.mandatory_s + self.optional_s) * self.slowdown + self.begun_s

    @property
    def extend_until_s(self) -> float:
        """Seconds from the run's start past which it adds no point: (1 + OPTIONAL_SHARE)x its estimate, less after."""
        after_s = (self.default_policy_s + self.peaks_s / 2) * self.slowdown
        return (1 + OPTIONAL_SHARE) * self.time_s - self.begun_s - after_s

    def kept_by(self, policy: TimingPolicy) -> TimingPolicy:
        if not self.extend_s:
            return policy
        return replace(policy, extend_until_s=round(self.extend_until_s, 3))

    def largest(self) -> dict[str, PointEstimate]:
        """Each device's point of the largest memory estimate: the run's peak there."""
        out: dict[str, PointEstimate] = {}
        for p in self.points:
            if p.spec.device not in out or p.memory_bytes > out[p.spec.device].memory_bytes:
                out[p.spec.device] = p
        return out


def estimate_plan(
    specs: Iterable[PointSpec],
    policy: TimingPolicy,
    costs: cost.Costs,
    memory_limits: Mapping[str, float] = {},
    startup_s: float | None = None,
) -> PlanEstimate:
    """The plan's duration; `startup_s`: a child's start-up where the run times bench.default_policy, else None."""
    specs = list(specs)
    points = tuple(
        PointEstimate(s, call, costs.visit_s(s, policy, call), point_memory_bytes(s))
        for s in specs
        for call in [costs.call_s(s)]
    )
    pairs = sorted({(s.device, s.dtype) for s in specs})
    peaks_s = 2 * sum(cost.peak_measurement_s(d, costs.ceilings[device_key(d, t)].matmul_flops_per_s) for d, t in pairs)
    # The memory hierarchy once: bench.peak keeps it for the run's end (a triad then, a tenth of it).
    peaks_s += sum(costs.memory_s.get(device, 0.0) for device in {d for d, _ in pairs})
    planned_s = sum(p.time_s for p in points)
    extra_s = policy.extra_budget_s(planned_s) if policy.extra_passes else 0.0
    extend_s = policy.extend_budget_s(planned_s + extra_s)
    again_s = 0.0 if startup_s is None else default_policy.duration_s(specs, costs.call_s, costs.overhead_s, startup_s)
    if not extend_s:
        return PlanEstimate(points, peaks_s, extra_s, default_policy_s=again_s)
    foreseen_s, added, structural = planner.extension_s(
        specs, costs.call_s, lambda s: costs.visit_s(s, policy), extend_s, memory_limits
    )
    structural_s = sum(costs.visit_s(s, policy) for s in structural)
    return PlanEstimate(
        points, peaks_s, extra_s, extend_s, foreseen_s, len(added), structural_s, default_policy_s=again_s
    )


def first_pass_line(records: Mapping[PointSpec, dict], policy: TimingPolicy) -> str:
    """The estimate said again from the first pass's visits."""
    first_s = sum(formats.visit_s(r) for r in records.values())
    probes_s = sum(r.get("probes_s", 0.0) for r in records.values())
    rest_s = (policy.passes - 1) * (first_s - probes_s)
    extra_s = policy.extra_budget_s(first_s + rest_s) if policy.extra_passes else 0.0
    extend_s = policy.extend_budget_s(first_s + rest_s + extra_s)
    extending = ""
    if policy.extend_until_s is not None:
        extending = f", extending sweeps that do not decide until {format_duration(policy.extend_until_s)} of the run"
    elif extend_s:
        extending = (
            f", at most {format_duration(extend_s)} extending sweeps that do not decide: about "
            f"{format_duration(rest_s + extra_s + extend_s)} more in all"
        )
    return (
        f"the first pass took {format_duration(first_s)} ({format_duration(probes_s)} of it counting FLOPs and "
        f"memory): about {format_duration(rest_s)} more for {policy.passes - 1} more passes, at most "
        f"{format_duration(extra_s)} sampling points further{extending}"
    )
