"""What a point's row measures besides its time, a probe per module; bench.schema derives the columns from them."""

from . import flops, memory  # noqa: F401 - each registers its probe, in points.csv's column order
from .base import PROBES, Call, Column, Probe, register, unregister

__all__ = ["PROBES", "Call", "Column", "Probe", "register", "unregister"]
