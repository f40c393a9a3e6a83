"""A sweep: every point measured in three separate passes (time, then FLOPs, then memory) so that
counting and profiling never slow the timed rounds; each finished point is appended to the run folder
at once. Out-of-memory and errors are recorded per point and the sweep goes on."""
from __future__ import annotations

import gc
import hashlib
import signal
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm

import models

from . import storage
from .flops import count_flops
from .memory import measure_memory
from .spec import PointSpec
from .threads import pinned_threads
from .timing import TimingPolicy, time_call


@dataclass(frozen=True)
class RunOptions:
    threads: int  # torch intra-op threads, pinned for the whole run
    policy: TimingPolicy = field(default_factory=TimingPolicy)
    seed: int = 0
    progress: bool = True


def point_id(spec: PointSpec) -> str:
    return hashlib.sha1(spec.key.encode()).hexdigest()[:12]


OOM_MESSAGES = ("out of memory", "can't allocate memory", "cannot allocate memory")


def is_oom(exc: BaseException) -> bool:
    """CUDA raises torch.OutOfMemoryError; the CPU allocator raises it in recent releases and a
    RuntimeError ("DefaultCPUAllocator: can't allocate memory") in others."""
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    return isinstance(exc, RuntimeError) and any(m in str(exc).lower() for m in OOM_MESSAGES)


def _free(device: str) -> None:
    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def measure_point(spec: PointSpec, options: RunOptions) -> tuple[dict, dict | None]:
    """The points.csv row of one point and pytest-benchmark's timing record (None if not timed).
    Pure: returns values; the caller stores them."""
    cfg = spec.config()
    row = _base_row(spec)
    record = None
    failure: tuple[str, str] | None = None
    try:
        layer = models.build(spec.layer, cfg, device=spec.device, seed=options.seed)
        generator = torch.Generator(device="cpu").manual_seed(options.seed)
        x = torch.randn(spec.batch, spec.n, spec.d, generator=generator).to(spec.device, cfg.torch_dtype)
        sync = torch.cuda.synchronize if spec.device.startswith("cuda") else None

        def forward():
            return layer(x)

        with torch.inference_mode():
            timing = time_call(forward, sync=sync, policy=options.policy, name=spec.key)
            counted = count_flops(forward)
            memory = measure_memory(forward, spec.device)
        record = dict(timing.record, point_id=row["point_id"], spec=spec.as_row())
        row.update(
            time_median_s=timing.median_s, time_iqr_s=timing.iqr_s, time_mean_s=timing.mean_s,
            time_min_s=timing.min_s, rounds=timing.rounds, iterations=timing.iterations,
            time_noisy=timing.noisy,
            flops_counted=counted.total, flops_uncounted_ops=";".join(counted.uncounted_ops),
            flops_elementwise=counted.elementwise,
            mem_peak_bytes=memory.peak_bytes, mem_rss_peak_bytes=memory.rss_peak_bytes,
            mem_rss_base_bytes=memory.rss_base_bytes, mem_method=memory.method,
            status="ok", error="",
        )
    except Exception as exc:  # recorded in the row, never dropped; the sweep goes on
        failure = ("oom" if is_oom(exc) else "error", f"{type(exc).__name__}: {exc}".splitlines()[0][:500])
    finally:
        layer = x = None  # noqa: F841 - drop references so the memory is freed before the next point
        _free(spec.device)
    if failure is not None:
        row.update(status=failure[0], error=failure[1])
    row["finished_utc"] = storage.utc_now()
    return row, record


def _larger(spec: PointSpec, than: PointSpec) -> bool:
    """Same layer, device, dtype and other settings, and at least as large in n, d and batch."""
    same = (spec.layer, spec.device, spec.dtype, spec.k, spec.heads, spec.window, spec.dilation) == (
        than.layer, than.device, than.dtype, than.k, than.heads, than.window, than.dilation)
    return same and spec.n >= than.n and spec.d >= than.d and spec.batch >= than.batch and spec != than


def _base_row(spec: PointSpec) -> dict:
    """The columns every row has, measured or not: the spec, its id, the threads, the closed forms."""
    cfg = spec.config()
    row = spec.as_row()
    row.update(point_id=point_id(spec), threads=torch.get_num_threads(),
               flops_analytic=models.analytic_flops(spec.layer, spec.batch, spec.n, cfg),
               mem_analytic_bytes=models.analytic_activation_bytes(spec.layer, spec.batch, spec.n, cfg))
    return row


def _skipped_row(spec: PointSpec, reason: str) -> dict:
    return dict(_base_row(spec), status="skipped", error=reason, finished_utc=storage.utc_now())


@contextmanager
def _sigterm_as_interrupt():
    """A scheduler's SIGTERM ends the run like Ctrl-C: cleanly, with status `interrupted`."""
    def handler(signum, frame):
        raise KeyboardInterrupt
    try:
        old = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def run_sweep(specs: list[PointSpec], run_dir: Path, options: RunOptions,
              done: set[str] = frozenset(), oom_points: list[PointSpec] = ()) -> dict[str, int]:
    """Measure every spec whose point_id is not in `done`, appending each row as it finishes.
    Returns the count of each status written by this call. KeyboardInterrupt propagates after the
    last finished point is stored."""
    counts = {s: 0 for s in storage.STATUSES}
    todo = [s for s in specs if point_id(s) not in done]
    ooms = list(oom_points)
    bar = tqdm(total=len(todo), desc="points", unit="pt", disable=not options.progress,
               file=sys.stderr, dynamic_ncols=True)
    try:
        with pinned_threads(options.threads), _sigterm_as_interrupt():
            for spec in todo:
                bar.set_postfix_str(f"{spec.layer} n={spec.n} d={spec.d} {spec.device}", refresh=False)
                blocker = next((o for o in ooms if _larger(spec, o)), None)
                if blocker is not None:
                    row, record = _skipped_row(spec, f"larger than n={blocker.n} d={blocker.d} "
                                                     f"batch={blocker.batch}, which ran out of memory"), None
                else:
                    row, record = measure_point(spec, options)
                if record is not None:
                    storage.append_timing_record(run_dir, record)
                storage.append_point(run_dir, row)
                counts[row["status"]] += 1
                if row["status"] == "oom":
                    ooms.append(spec)
                bar.update(1)
    finally:
        bar.close()
    return counts
