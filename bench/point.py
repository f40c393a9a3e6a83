"""One pass over one point: build its layer and call, time a share of its rounds, on a first pass the probes after."""

from __future__ import annotations

import dataclasses
import gc
import time
import traceback
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

import torch

import models

from .graphs import device_rounds
from .load import LoadMeter
from .policy import TimingPolicy
from .probes import PROBES, Call
from .spec import DECODE_MODE, RECOMPUTE_MODE, PointSpec
from .timing import Clocks, calibrate, record_of, synced, time_rounds

OOM_MESSAGES = ("out of memory", "can't allocate memory", "cannot allocate memory")
DRAWN_POSITIONS = 4096  # a decode prefix: this many drawn positions, repeated (docs/method.md)


def is_oom(exc: BaseException) -> bool:
    """torch.OutOfMemoryError, or the CPU allocator's RuntimeError of older releases ("can't allocate memory")."""
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)):
        return True
    return isinstance(exc, RuntimeError) and any(m in str(exc).lower() for m in OOM_MESSAGES)


def draws(seed: int, device: str | torch.device) -> Callable[..., torch.Tensor]:
    """draw(*shape, dtype=None) on `device` itself (a CPU draw took 4-6 ns an element, most of a GPU visit's time)."""
    generator = torch.Generator(device=device).manual_seed(seed)

    def draw(*shape: int, dtype: torch.dtype | None = None) -> torch.Tensor:
        return torch.randn(shape, generator=generator, device=device).to(dtype=dtype)

    return draw


@dataclass(frozen=True)
class PassResult:
    rounds_planned: int  # the point's rounds over all passes (its calibration)
    iterations: int
    record: dict  # pytest-benchmark's JSON of this pass's rounds (bench.timing.record_of)
    others_busy_cores: float  # CPU other processes took while this pass timed the point
    probes: dict | None = None  # the probes' values (bench.probes), on a point's first pass only
    probes_s: float = 0.0  # the seconds they took


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
    upstream = draws(seed + 1, x.device)(*x.shape, dtype=x.dtype)
    leaves = (x, *(p for p in layer.parameters() if p.requires_grad))

    def train_step():
        for leaf in leaves:
            leaf.grad = None
        layer(x).backward(upstream)

    return train_step, lambda: layer(x)


def decode_call(spec: PointSpec, layer: torch.nn.Module, seed: int) -> tuple[Callable[[], object], int]:
    """(call, the state's bytes): the step at position n from a prefilled state (method: docs/method.md)."""
    draw, dtype = draws(seed, spec.device), spec.config().torch_dtype

    def tokens(n: int) -> torch.Tensor:
        return draw(spec.batch, n, spec.d, dtype=dtype)

    if spec.mode == RECOMPUTE_MODE:
        x = tokens(spec.n + 1)
        return (lambda: layer(x)[:, -1:]), x[:, :-1].nbytes
    assert spec.mode == DECODE_MODE, spec.mode
    with torch.inference_mode():
        block = tokens(min(spec.n, DRAWN_POSITIONS))
        state = layer.prefill(block.repeat(1, -(-spec.n // block.shape[1]), 1)[:, : spec.n])
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
            x = draws(seed, spec.device)(spec.batch, spec.n, spec.d, dtype=cfg.torch_dtype)
            call, forward = one_call(spec, layer, x, seed)
        on_gpu = spec.device.startswith("cuda")
        target = synced(call, torch.cuda.synchronize if on_gpu else None)
        clocks = Clocks.for_call(torch.get_num_threads(), on_gpu)
        with grad_mode(spec):
            rounds, iterations = plan if plan is not None else calibrate(target, policy)
            meter = LoadMeter()
            timed = time_rounds(target, policy.rounds_per_pass(rounds), iterations, clocks)
            load = meter.read()
            probes, probes_started_s = None, time.perf_counter()
            if with_probes:
                prepared = Call(call, forward, state_bytes)
                probes = {k: v for probe in PROBES for k, v in probe.measured(prepared, spec).items()}
            probes_s = time.perf_counter() - probes_started_s
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
        return PassResult(rounds, iterations, record, round(load.others_busy_cores, 4), probes, round(probes_s, 4))
    except Exception as exc:  # recorded with the point, never dropped; the sweep goes on
        text = f"{type(exc).__name__}: {exc}"
        return PassFailure(
            "oom" if is_oom(exc) else "error", text.splitlines()[0][:500], "".join(traceback.format_exception(exc))
        )
    finally:
        layer = x = call = forward = target = None  # noqa: F841 - drop references so the memory is freed before the next point
        _free(spec.device, collect=failed)
