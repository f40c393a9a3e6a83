"""One pass over one point of a sweep: build its layer, time a share of its rounds, and on its first pass count
FLOPs and measure memory after them (both probes slow the call). bench.run schedules and stores the passes."""

from __future__ import annotations

import dataclasses
import gc
import traceback
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

import torch

import models

from .flops import count_flops
from .graphs import device_rounds
from .load import LoadMeter
from .memory import measure_memory
from .spec import DECODE_MODE, DEFAULT_MODE, RECOMPUTE_MODE, PointSpec
from .timing import Clocks, ClockStats, Timing, TimingPolicy, calibrate, plain_flag, record_of, synced, time_rounds

OOM_MESSAGES = ("out of memory", "can't allocate memory", "cannot allocate memory")


def is_oom(exc: BaseException) -> bool:
    """torch.OutOfMemoryError, or the CPU allocator's RuntimeError of older releases ("can't allocate memory")."""
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    return isinstance(exc, RuntimeError) and any(m in str(exc).lower() for m in OOM_MESSAGES)


@dataclass(frozen=True)
class PassResult:
    rounds_planned: int  # the point's rounds over all passes (its calibration)
    iterations: int
    record: dict  # pytest-benchmark's JSON of this pass's rounds (bench.timing.record_of)
    others_busy_cores: float  # CPU other processes took while this pass timed the point
    probes: dict | None = None  # FLOPs and memory, on a point's first pass only


@dataclass(frozen=True)
class PassFailure:
    status: str  # "oom" or "error"
    error: str  # the exception's first line
    traceback: str


def one_call(
    spec: PointSpec, layer: torch.nn.Module, x: torch.Tensor, seed: int
) -> tuple[Callable[[], object], Callable[[], object]]:
    """(call, forward): one timed call of the point (train: forward and backward), and its forward pass alone."""
    if not spec.trains:
        forward = lambda: layer(x)  # noqa: E731
        return forward, forward
    layer.train()
    x.requires_grad_(True)
    generator = torch.Generator(device="cpu").manual_seed(seed + 1)
    upstream = torch.randn(x.shape, generator=generator).to(x.device, x.dtype)
    leaves = (x, *(p for p in layer.parameters() if p.requires_grad))

    def train_step():
        for leaf in leaves:
            leaf.grad = None
        layer(x).backward(upstream)

    return train_step, lambda: layer(x)


def decode_call(spec: PointSpec, layer: torch.nn.Module, seed: int) -> tuple[Callable[[], object], int]:
    """(call, the state's bytes): the step at position n from a prefilled state (method: docs/method.md)."""
    generator = torch.Generator(device="cpu").manual_seed(seed)
    dtype = spec.config().torch_dtype

    def tokens(n: int) -> torch.Tensor:
        return torch.randn(spec.batch, n, spec.d, generator=generator).to(spec.device, dtype)

    if spec.mode == RECOMPUTE_MODE:
        x = tokens(spec.n + 1)
        return (lambda: layer(x)[:, -1:]), x[:, :-1].nbytes
    assert spec.mode == DECODE_MODE, spec.mode
    with torch.inference_mode():
        state = layer.prefill(tokens(spec.n))
        state_bytes = models.state_bytes(state)
        cache = layer.cache(state, spec.n, spec.n + 1)  # allocated once; every timed step writes slot n in place
    del state
    token = tokens(1)
    return (lambda: layer.step(token, cache, spec.n)), state_bytes


def autograd_mode(trains: bool) -> AbstractContextManager:
    return torch.enable_grad() if trains else torch.inference_mode()


def grad_mode(spec: PointSpec) -> AbstractContextManager:
    return autograd_mode(spec.trains)


def _free(device: str, collect: bool) -> None:
    # Dropped tensors are freed at once; a costly gc.collect only after a failure (its traceback holds cycles).
    if collect:
        gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def measure_pass(
    spec: PointSpec, policy: TimingPolicy, plan: tuple[int, int] | None, seed: int = 0, with_probes: bool = False
) -> PassResult | PassFailure:
    """One pass of `spec`, calibrated first where `plan` (rounds, iterations) is None; frees what it allocated."""
    cfg = spec.config()
    layer = x = None
    failed = True
    try:
        layer = models.build(spec.layer, cfg, device=spec.device, seed=seed)
        state_bytes = None
        if spec.decodes:
            call, state_bytes = decode_call(spec, layer, seed)
            forward = call
        else:
            generator = torch.Generator(device="cpu").manual_seed(seed)
            x = torch.randn(spec.batch, spec.n, spec.d, generator=generator).to(spec.device, cfg.torch_dtype)
            call, forward = one_call(spec, layer, x, seed)
        on_gpu = spec.device.startswith("cuda")
        target = synced(call, torch.cuda.synchronize if on_gpu else None)
        clocks = Clocks.for_call(torch.get_num_threads(), on_gpu)
        with grad_mode(spec):
            rounds, iterations = plan if plan is not None else calibrate(target, policy)
            meter = LoadMeter()
            timed = time_rounds(target, policy.rounds_per_pass(rounds), iterations, clocks)
            load = meter.read()
            probes = None
            if with_probes:
                counted = count_flops(call)
                memory = measure_memory(call, spec.device)
                probes = dict(
                    flops_counted=counted.total,
                    flops_uncounted_ops=";".join(counted.uncounted_ops),
                    flops_elementwise=counted.elementwise,
                    mem_peak_bytes=memory.peak_bytes,
                    mem_saved_bytes=saved_bytes(forward, spec) if spec.trains else None,
                    mem_state_bytes=state_bytes,
                    mem_rss_peak_bytes=memory.rss_peak_bytes,
                    mem_rss_base_bytes=memory.rss_base_bytes,
                    mem_method=memory.method,
                )
            graph_error = None
            if on_gpu:  # last: the probes above measure the eager call as a user runs it
                try:
                    device_s, graph_calls = device_rounds(call, iterations, policy.rounds_per_pass(rounds))
                    timed = dataclasses.replace(timed, device_s=device_s, graph_calls=graph_calls)
                except Exception as exc:  # noqa: BLE001 - the eager time stands; why no graph is kept with the pass
                    graph_error = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
                    _free(spec.device, collect=True)
            record = record_of(timed, iterations, spec.key, clocks)
            if graph_error:
                record["extra_info"]["graph_error"] = graph_error
        failed = False
        return PassResult(rounds, iterations, record, round(load.others_busy_cores, 4), probes)
    except Exception as exc:  # recorded with the point, never dropped; the sweep goes on
        text = f"{type(exc).__name__}: {exc}"
        return PassFailure(
            "oom" if is_oom(exc) else "error", text.splitlines()[0][:500], "".join(traceback.format_exception(exc))
        )
    finally:
        layer = x = call = forward = target = None  # noqa: F841 - drop references so the memory is freed before the next point
        _free(spec.device, collect=failed)


def saved_bytes(forward: Callable[[], object], spec: PointSpec) -> int:
    """What a training forward pass leaves allocated for its backward: its output and what autograd saved."""
    return measure_memory(forward, spec.device).end_bytes


def base_row(spec: PointSpec, threads: int) -> dict:
    """The columns every row has, measured or not."""
    cfg = spec.config()
    return dict(
        spec.as_row(),
        point_id=spec.point_id,
        threads=threads,
        flops_analytic=models.analytic_flops(spec.layer, spec.batch, spec.n, cfg, spec.mode, spec.device),
        flops_useful=models.analytic_useful_flops(spec.layer, spec.batch, spec.n, cfg, spec.mode, spec.device),
        # the layers' estimate is of an inference forward pass's activations
        mem_analytic_bytes=(
            None if spec.mode != DEFAULT_MODE else models.analytic_activation_bytes(spec.layer, spec.batch, spec.n, cfg)
        ),
    )


def unmeasured_row(spec: PointSpec, threads: int | None, status: str, error: str) -> dict:
    """The row of a point stored without a measurement: out of memory, killed, skipped, an error."""
    return dict(base_row(spec, threads), status=status, error=error)


def _clock_columns(name: str, stats: ClockStats | None, missing: str) -> dict:
    return {
        f"time_{name}_median_s": stats.median_s if stats else None,
        f"time_{name}_iqr_s": stats.iqr_s if stats else None,
        f"time_{name}_min_s": stats.min_s if stats else None,
        f"time_{name}_ci_low_s": stats.ci_low_s if stats else None,
        f"time_{name}_ci_high_s": stats.ci_high_s if stats else None,
        f"time_{name}_pass_spread": round(stats.pass_spread, 4) if stats else None,
        f"time_{name}_flag": stats.flag if stats else missing,
    }


def point_row(
    spec: PointSpec, threads: int, timing: Timing, probes: dict, clock: tuple[str, str], others_busy_cores: float
) -> dict:
    """The points.csv row of a point whose passes are all done; `clock`: bench.timing.choose_clock's."""
    wall, cpu, device = timing.wall, timing.cpu, timing.device
    chosen = timing.on(clock[0])
    on_gpu = spec.device.startswith("cuda")
    return dict(
        base_row(spec, threads),
        **probes,
        time_median_s=wall.median_s,
        time_iqr_s=wall.iqr_s,
        time_mean_s=wall.mean_s,
        time_min_s=wall.min_s,
        time_ci_low_s=wall.ci_low_s,
        time_ci_high_s=wall.ci_high_s,
        time_pass_spread=round(wall.pass_spread, 4),
        time_noisy=wall.noisy,
        time_wall_flag=wall.flag,
        time_cpu_clock=timing.cpu_clock,
        **_clock_columns("cpu", cpu, "no CPU clock"),
        **_clock_columns("device", device, "no CUDA graph of the call" if on_gpu else "not a GPU"),
        time_graph_calls=timing.graph_calls or None,
        time_clock=clock[0],
        time_clock_why=clock[1],
        time_reliable=chosen.reliable,
        time_flag=plain_flag(chosen, clock[0], timing.passes, on_gpu),
        faults_per_call=None if timing.faults_per_call is None else round(timing.faults_per_call, 2),
        rounds=timing.rounds,
        iterations=timing.iterations,
        passes=timing.passes,
        load_others_cores=round(others_busy_cores, 3),
        status="ok",
        error="",
    )
