"""Restricted attention's time and share of peak beside the implementations before issue 19: `python -m` it."""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import pandas as pd
import torch
import torch.nn.functional as F
from torch.utils import benchmark

import models
from bench.load import Load, LoadMeter, sample_load
from bench.peak import compute_peak
from bench.spec import expand_grid
from bench.threads import pinned_threads
from models import LayerConfig
from models.attention import AttentionLocal
from models.conv import Conv, ConvSeparable

T = TypeVar("T")

DEFAULT_SIZES = ((4096, 32), (512, 256), (4096, 256))
DEFAULT_LAYERS = ("attention", "attention_local", "attention_math", "attention_local_unfold")


class AttentionLocalUnfold(AttentionLocal):
    """attention_local before issue 19: each query's r keys and values gathered by unfold (memory traffic, not math)."""

    def _windows(self, t: torch.Tensor) -> torch.Tensor:
        # (B, h, n, d_head) -> (B, h, n, r, d_head): the r keys (or values) each query sees.
        padded = F.pad(t, (0, 0, self.left, self.window - 1 - self.left))
        return padded.unfold(2, self.window, 1).transpose(-1, -2)

    def _valid(self, n: int, device) -> torch.Tensor:
        # valid[i, o]: key j = i - left + o lies inside the sequence.
        j = torch.arange(n, device=device)[:, None] - self.left + torch.arange(self.window, device=device)
        return (j >= 0) & (j < n)

    def _mix(self, q, k, v):
        n = q.shape[2]
        keys = self._windows(k).transpose(-1, -2)
        scores = (q.unsqueeze(-2) @ keys).squeeze(-2) / math.sqrt(self.d_head)
        scores = scores.masked_fill(~self._valid(n, q.device), float("-inf"))
        weights = torch.softmax(scores, dim=-1).unsqueeze(-2)
        return (weights @ self._windows(v)).squeeze(-2)

    @staticmethod
    def flops(batch: int, n: int, cfg: LayerConfig) -> int:
        projections = 4 * 2 * batch * n * cfg.d * cfg.d
        return projections + 2 * (2 * batch * n * cfg.window * cfg.d)  # r products per query

    useful_flops = AttentionLocal.useful_flops


class ConvChannelsFirst(Conv):
    """conv before issue 19: Conv1d on the channels-first transpose of the (B, n, d) input."""

    def __init__(self, cfg: LayerConfig, dilation: int = 1):
        super().__init__(cfg, dilation)
        self.conv.weight = torch.nn.Parameter(self.conv.weight.detach().contiguous())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x.transpose(1, 2)).transpose(1, 2)


class ConvDilatedChannelsFirst(ConvChannelsFirst):
    def __init__(self, cfg: LayerConfig):
        super().__init__(cfg, dilation=cfg.dilation)


class ConvSeparableChannelsFirst(ConvSeparable):
    """conv_separable before issue 19: depthwise and pointwise Conv1d, channels-first."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pointwise(self.depthwise(x.transpose(1, 2))).transpose(1, 2)


# Layers this script times besides the registered ones: name -> (class, the registered layer whose sizes it takes).
REFERENCES: dict[str, tuple[type[torch.nn.Module], str]] = {
    "attention_local_unfold": (AttentionLocalUnfold, "attention_local"),
    "conv_channels_first": (ConvChannelsFirst, "conv"),
    "conv_dilated_channels_first": (ConvDilatedChannelsFirst, "conv_dilated"),
    "conv_separable_channels_first": (ConvSeparableChannelsFirst, "conv_separable"),
}


@dataclass(frozen=True)
class Row:
    layer: str
    n: int
    d: int
    time_median_s: float
    time_iqr_s: float
    flops: int
    useful_flops: int | None
    others_busy_cores: float
    attempts: int


def build(name: str, n: int, d: int, args: argparse.Namespace) -> tuple[torch.nn.Module, type, LayerConfig]:
    """The layer `name` (registered or in REFERENCES) in eval mode, its class and config, sized as in a sweep."""
    cls, registered = REFERENCES.get(name, (models.LAYERS.get(name), name))
    (spec,) = expand_grid(
        [registered], [n], [d], k=[args.k], heads=[args.heads], window=[args.window], batch=[args.batch]
    )
    cfg = spec.config()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        layer = cls(cfg).eval()
    return layer, cls, cfg


QUIET_SAMPLE_S = 0.5  # each look at the load while waiting for a quiet machine


def wait_for_quiet(max_cores: float, timeout_s: float) -> Load:
    """The first load sample with others under `max_cores` cores, or the last when `timeout_s` runs out."""
    deadline = time.monotonic() + timeout_s
    while True:
        load = sample_load(QUIET_SAMPLE_S)
        if load.others_busy_cores < max_cores or time.monotonic() > deadline:
            return load


def quietly(measure_once: Callable[[], T], args: argparse.Namespace) -> tuple[T, Load, int]:
    """(`measure_once()`, the load while it ran, attempts): with --quiet, on a quiet machine, retried under load."""
    attempts = 0
    while True:
        attempts += 1
        if args.quiet is not None:
            wait_for_quiet(args.quiet, args.quiet_wait)
        meter = LoadMeter()
        result = measure_once()
        load = meter.read()
        if args.quiet is None or load.others_busy_cores < args.quiet or attempts > args.retries:
            return result, load, attempts


def timed(fn: Callable[[], object], args: argparse.Namespace) -> benchmark.Measurement:
    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=args.threads)
    return timer.blocked_autorange(min_run_time=args.min_run_time)


def measure(name: str, n: int, d: int, args: argparse.Namespace) -> Row:
    layer, cls, cfg = build(name, n, d, args)
    x = torch.randn(args.batch, n, d)

    def forward():
        with torch.inference_mode():
            layer(x)

    m, load, attempts = quietly(lambda: timed(forward, args), args)
    useful = cls.useful_flops(args.batch, n, cfg) if hasattr(cls, "useful_flops") else None
    flops = cls.flops(args.batch, n, cfg)
    return Row(name, n, d, m.median, m.iqr, flops, useful, load.others_busy_cores, attempts)


def table(rows: list[Row], peak_flops_per_s: float) -> pd.DataFrame:
    out = []
    for r in rows:
        rate = r.flops / r.time_median_s
        useful_rate = None if r.useful_flops is None else r.useful_flops / r.time_median_s
        out.append(
            {
                "n": r.n,
                "d": r.d,
                "layer": r.layer,
                "time ms": round(r.time_median_s * 1e3, 2),
                "IQR %": round(100 * r.time_iqr_s / r.time_median_s, 1),
                "GFLOP/s": round(rate / 1e9, 1),
                "of peak %": round(100 * rate / peak_flops_per_s, 1),
                "useful GFLOP/s": None if useful_rate is None else round(useful_rate / 1e9, 1),
                "useful of peak %": None if useful_rate is None else round(100 * useful_rate / peak_flops_per_s, 1),
                "others' cores": round(r.others_busy_cores, 2),
                "attempts": r.attempts,
            }
        )
    return pd.DataFrame(out)


def _sizes(text: str) -> list[tuple[int, int]]:
    try:
        return [tuple(int(v) for v in item.lower().split("x")) for item in text.split(",")]  # type: ignore[misc]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: sizes are n×d pairs, e.g. 4096x32,512x256") from None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.benchmarks.restricted", description=__doc__.split("\n")[0])
    default_sizes = ",".join(f"{n}x{d}" for n, d in DEFAULT_SIZES)
    parser.add_argument(
        "--sizes", type=_sizes, default=list(DEFAULT_SIZES), help=f"n×d pairs (default {default_sizes})"
    )
    parser.add_argument(
        "--layers",
        type=lambda s: s.split(","),
        default=list(DEFAULT_LAYERS),
        help=f"registered layers and {', '.join(REFERENCES)} (default {','.join(DEFAULT_LAYERS)})",
    )
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--window", type=int, default=64, help="r of attention_local (default 64)")
    parser.add_argument("--k", type=int, default=3, help="kernel size of the convolutions (default 3)")
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads (default 2)")
    parser.add_argument("--min-run-time", type=float, default=1.0, help="seconds of timed calls per point (default 1)")
    parser.add_argument(
        "--quiet", type=float, default=None, help="time only while other processes take fewer than this many cores"
    )
    parser.add_argument("--quiet-wait", type=float, default=120.0, help="seconds to wait for quiet per point (120)")
    parser.add_argument("--retries", type=int, default=5, help="times a point is timed again under load (default 5)")
    args = parser.parse_args(argv)
    unknown = [name for name in args.layers if name not in models.LAYERS and name not in REFERENCES]
    if unknown:
        parser.error(f"unknown layer(s) {', '.join(unknown)}; known: {', '.join([*models.LAYERS, *REFERENCES])}")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    before = sample_load()
    meter = LoadMeter()
    with pinned_threads(args.threads):
        peak, peak_load, peak_attempts = quietly(lambda: compute_peak("cpu"), args)
        rows = [measure(name, n, d, args) for n, d in args.sizes for name in args.layers]
    during = meter.read()
    print(
        f"torch {torch.__version__}, {args.threads} threads, batch {args.batch}, heads {args.heads}, "
        f"window {args.window}, k {args.k}; compute peak {peak['flops_per_s'] / 1e9:.1f} GFLOP/s "
        f"({peak['kernel']}, float32; others busy on {peak_load.others_busy_cores:.2f} cores, "
        f"{peak_attempts} attempt{'s' if peak_attempts > 1 else ''})"
    )
    print(
        f"load: before, average {before.loadavg_1m:.2f}, others busy on {before.others_busy_cores:.2f} cores; "
        f"during, average {during.loadavg_1m:.2f}, others busy on {during.others_busy_cores:.2f} cores"
    )
    print(table(rows, peak["flops_per_s"]).to_markdown(index=False))


if __name__ == "__main__":
    main()
