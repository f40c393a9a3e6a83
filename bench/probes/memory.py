"""Memory of one call: the allocator's peak above what was live, the resident set, bytes kept for the backward."""

from __future__ import annotations

from collections.abc import Callable

import models

from ..memory import measure_memory
from ..spec import DEFAULT_MODE, PointSpec
from .base import Call, Column, Probe, register


def saved_bytes(forward: Callable[[], object], spec: PointSpec) -> int:
    """What a training forward pass leaves allocated for its backward: its output and what autograd saved."""
    return measure_memory(forward, spec.device).end_bytes


def _measure(call: Call, spec: PointSpec) -> dict:
    memory = measure_memory(call.run, spec.device)
    return dict(
        mem_peak_bytes=memory.peak_bytes,
        mem_saved_bytes=saved_bytes(call.forward, spec) if spec.trains else None,
        mem_state_bytes=call.state_bytes,
        mem_rss_peak_bytes=memory.rss_peak_bytes,
        mem_rss_base_bytes=memory.rss_base_bytes,
        mem_method=memory.method,
    )


def _predict(spec: PointSpec) -> dict:
    if spec.mode != DEFAULT_MODE:  # the layers' estimate is of an inference forward pass's activations
        return {}
    return {"mem_analytic_bytes": models.analytic_activation_bytes(spec.layer, spec.batch, spec.n, spec.config())}


PROBE = register(
    Probe(
        "memory",
        (
            Column("mem_peak_bytes", "int", "bytes", "allocated above what was live before the call, at its peak"),
            Column("mem_saved_bytes", "int", "bytes", "train: what the forward leaves allocated for the backward"),
            Column("mem_rss_peak_bytes", "int", "bytes", "the process's resident set at its peak during the call"),
            Column("mem_rss_base_bytes", "int", "bytes", "the process's resident set before the call"),
            Column("mem_analytic_bytes", "int", "bytes", "inference: the layers' estimate of the activations"),
            Column("mem_state_bytes", "int", "bytes", "decode and recompute: the state the step reads"),
            Column("mem_method", "text", "", "how the peak was read: the CUDA allocator or the profiler's events"),
        ),
        _measure,
        _predict,
    )
)
