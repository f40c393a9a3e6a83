"""FLOPs of one call: counted at the operator level while it runs, and the layers' closed forms."""

from __future__ import annotations

import models

from .. import outside
from ..flops import count_flops
from ..spec import PointSpec
from .base import Call, Column, Probe, register


def _measure(call: Call, spec: PointSpec) -> dict:
    counted = count_flops(call.run)
    if counted.uncounted_ops and outside.is_outside(spec.layer):
        counted = min(counted, outside.meta_count(spec), key=lambda c: len(c.uncounted_ops))
    return dict(
        flops_counted=counted.total,
        flops_uncounted_ops=";".join(counted.uncounted_ops),
        flops_elementwise=counted.elementwise,
    )


def _predict(spec: PointSpec) -> dict:
    if outside.is_outside(spec.layer):
        return dict(flops_analytic=None, flops_useful=None)
    cfg = spec.config()
    return dict(
        flops_analytic=models.analytic_flops(spec.layer, spec.batch, spec.n, cfg, spec.mode, spec.device),
        flops_useful=models.analytic_useful_flops(spec.layer, spec.batch, spec.n, cfg, spec.mode, spec.device),
    )


PROBE = register(
    Probe(
        "flops",
        (
            Column("flops_analytic", "float", "FLOPs", "the layers' closed form for this mode"),
            Column("flops_counted", "float", "FLOPs", "counted at the operator level (bench.flops)"),
            Column("flops_useful", "float", "FLOPs", "counted less the work a kernel skips or a mask discards"),
            Column("flops_uncounted_ops", "text", "", "operators without a FLOP formula, ';'-separated"),
            Column("flops_elementwise", "float", "FLOPs", "the counted elementwise operations"),
        ),
        _measure,
        _predict,
    )
)
