"""Peak memory of one call: `mem_peak_bytes` from the allocator, `mem_rss_peak_bytes` from the OS.

`measure_memory(fn, device)` runs `fn()` once and returns a `MemoryPeak`: the peak, and what `fn` left
allocated when it returned (`end_bytes`: its result and whatever the result keeps alive, such as the
tensors autograd saved for a backward pass). It measures memory only; the
runner times in a separate pass, because both probes below slow the call down.

Allocator peak (`peak_bytes`, the interface's `mem_peak_bytes`): the largest number of bytes that `fn`
had allocated and not yet freed at any moment, counted from zero at the start, so tensors that were live
before the call (inputs, weights) are excluded. The tensor `fn` returns is live at its end and counts.

- On a GPU, from the CUDA caching allocator's statistics: synchronize, reset the peak counter, read
  `memory_allocated`, run, synchronize, and take `max_memory_allocated - before`. Sizes are the
  allocator's block sizes (rounded up to 512 bytes); a free of a block that was live before `fn` lowers
  the running count, so it can offset `fn`'s own allocations (a forward pass whose caller holds its input
  and weights frees none). The peak counter is reset by the call and left describing it.
- On the CPU, from allocation events: `torch.profiler.profile(profile_memory=True)` records every
  allocation and free of PyTorch's CPU allocator with its address, signed size (free < 0) and time.
  `peak_live_bytes` replays them in time order. A free counts only if its address was allocated inside
  the window, with the size recorded at that allocation; frees of blocks allocated before `fn` are
  skipped. So the running count is exactly the bytes of `fn`'s own blocks still live, never below zero,
  and the peak is its maximum. Skipping those frees is needed, not cosmetic: PyTorch's CPU reporter keeps
  its table of block sizes across profiler sessions, so a block allocated under an earlier profile and
  freed inside this one is reported with a negative size, and a stale entry (its free happened with the
  profiler off, then the address was reused) would be reported with the wrong size. Blocks allocated
  before any profiling are reported with no free at all (c10 logs "Memory block of unknown size was
  allocated before the profiling started").
  Sizes are the requested bytes (a float32 tensor of m elements is 4·m bytes), so the peak is exact to the
  byte for memory that goes through PyTorch's allocator. Not seen: memory a library takes from malloc
  directly (MKL's or oneDNN's internal buffers, thread stacks) and tensors allocated on another thread
  than the caller's (the profiler follows the thread it was started on; a tensor made in a Python thread
  during `fn` is not recorded). RSS below includes both. For the matched layers on torch 2.13 the events
  do include oneDNN's weight reorders and RNN workspace (ideep takes them from PyTorch's allocator) and
  the fused CPU attention kernel's scratch, all on the calling thread.

RSS peak (`rss_peak_bytes`, the interface's `mem_rss_peak_bytes`): the process's peak resident set while
`fn` ran, bytes, everything included (the interpreter, weights, inputs, malloc's arenas, the profiler's
own buffers during a CPU measurement). `rss_base_bytes` is the resident set just before the call, so
`rss_peak_bytes - rss_base_bytes` is comparable with `peak_bytes` (it is usually smaller where malloc
reuses freed pages, larger where libraries allocate outside PyTorch). How it is read, in `rss_method`:

- `"vmhwm-reset"` (Linux): writing "5" to /proc/self/clear_refs resets the kernel's high-water mark
  VmHWM to the current RSS; VmHWM in /proc/self/status after the call is the exact peak during it.
- `"vmhwm-grew"` (Linux, clear_refs not writable): VmHWM is then the lifetime peak; if it grew during the
  call, its new value was reached during the call and is exact.
- `"rss-sampled"`: otherwise (VmHWM did not grow, or there is no /proc), a thread samples the RSS with
  psutil every `RSS_SAMPLE_INTERVAL_S` during the call; the maximum of those samples and the RSS before
  and after is a measured lower bound of the peak, not the peak itself.
- `None` and both RSS fields None: only where psutil cannot read this process's RSS at all.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import psutil
import torch
from torch.profiler import ProfilerActivity, profile

METHOD_CUDA = "cuda-allocator"
METHOD_CPU = "cpu-profiler-events"

RSS_SAMPLE_INTERVAL_S = 0.001  # the fallback sampler's period; shorter peaks can be missed

_CLEAR_REFS = Path("/proc/self/clear_refs")
_STATUS = Path("/proc/self/status")
_RESET_PEAK_RSS = "5"  # clear_refs code that resets VmHWM (Linux >= 4.0, Documentation/filesystems/proc)

# Device types under which PyTorch's CPU allocator reports (torch.autograd.profiler's _cpu_memory_usage).
_CPU_EVENT_DEVICES = frozenset({"cpu", "mkldnn", "ideep"})


@dataclass(frozen=True)
class MemoryPeak:
    peak_bytes: int  # -> mem_peak_bytes: peak bytes fn allocated above what was live before it
    rss_peak_bytes: int | None  # -> mem_rss_peak_bytes: peak resident set of the process during fn
    rss_base_bytes: int | None  # resident set just before fn
    method: str  # how peak_bytes was read: METHOD_CUDA or METHOD_CPU
    rss_method: str | None = None  # how rss_peak_bytes was read (see the module docstring)
    end_bytes: int = 0  # bytes fn allocated and had not freed when it returned, its result included


class AllocationEvent(NamedTuple):
    time_ns: int
    ptr: int
    nbytes: int  # > 0 allocation, < 0 free


def measure_memory(fn: Callable[[], object], device: str | torch.device) -> MemoryPeak:
    """Run `fn()` once on `device` ("cpu" or "cuda[:i]") and return its memory peaks (see the module
    docstring for the method). Call `fn` once before, as the timing pass does, if first-call allocations
    (cuBLAS workspaces, lazily built caches) should not count."""
    device = torch.device(device)
    if device.type == "cuda":
        return _measure_cuda(fn, device)
    if device.type == "cpu":
        return _measure_cpu(fn)
    raise ValueError(f"device {str(device)!r}: memory is measured on 'cpu' or 'cuda' only")


def live_bytes(events: Iterable[AllocationEvent]) -> tuple[int, int]:
    """(peak, end): the maximum over time of the bytes allocated inside the window and not yet freed, from 0,
    and those bytes at the window's end.

    Events are replayed in time order (ties keep the given order). A free whose address was not
    allocated inside the window belongs to a block that was live before it and is skipped; a free counts
    the size recorded at its allocation."""
    live: dict[int, int] = {}  # address -> bytes, blocks allocated inside the window
    current = peak = 0
    for event in sorted(events, key=lambda e: e.time_ns):
        if event.nbytes > 0:
            current += event.nbytes - live.pop(event.ptr, 0)  # a reused address: its free went unseen
            live[event.ptr] = event.nbytes
            peak = max(peak, current)
        elif event.nbytes < 0:
            current -= live.pop(event.ptr, 0)
    return peak, current


def peak_live_bytes(events: Iterable[AllocationEvent]) -> int:
    """The peak of `live_bytes`."""
    return live_bytes(events)[0]


def _measure_cpu(fn: Callable[[], object]) -> MemoryPeak:
    result = None
    # The profiler's __exit__ stops it whatever fn raises.
    with _kineto_quiet(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        with _RssWatch() as rss:  # after the profiler started, so its start-up is not in the RSS peak
            result = fn()
    del result  # freed with the profiler off: not an event, and fn's peak already counted it
    peak, end = live_bytes(_cpu_allocation_events(prof))
    return MemoryPeak(peak, rss.peak_bytes, rss.base_bytes, METHOD_CPU, rss.method, end)


def _cpu_allocation_events(prof: profile) -> Iterable[AllocationEvent]:
    # The event tree keeps each allocation's address (the flat EventList folds sizes into operators).
    stack = list(reversed(prof.profiler.kineto_results.experimental_event_tree()))
    while stack:  # depth first in recorded order, so events with equal times keep their order
        node = stack.pop()
        stack.extend(reversed(node.children))
        fields = node.extra_fields
        if isinstance(fields, torch._C._profiler._ExtraFields_Allocation):
            if fields.device.type in _CPU_EVENT_DEVICES:
                yield AllocationEvent(node.start_time_ns, fields.ptr, fields.alloc_size)


def _measure_cuda(fn: Callable[[], object], device: torch.device) -> MemoryPeak:
    if not torch.cuda.is_available():
        raise RuntimeError(f"device {str(device)!r}: CUDA is not available in this process")
    torch.cuda.synchronize(device)  # earlier work's frees must have landed before the baseline
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    with _RssWatch() as rss:
        result = fn()
        torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - before
    end = torch.cuda.memory_allocated(device) - before
    del result
    return MemoryPeak(peak, rss.peak_bytes, rss.base_bytes, METHOD_CUDA, rss.method, end)


_KINETO_NOISE = (
    "USDT:",
    "profiler_start",
    "profiler_stop",
    # c10, when a block allocated before the session is freed in it (a train call drops the last gradients):
    # expected, and handled by live_bytes (module docstring)
    "Memory block of unknown size was allocated before the profiling started",
)


@contextmanager
def _kineto_quiet():
    """Kineto writes `USDT: ... profiler_start/stop` lines straight to file descriptor 2 on every session,
    with no setting to turn them off; they would break the progress bar of every sweep point. Capture fd 2
    for the session and pass on every other line (warnings, errors) unchanged."""
    try:
        saved = os.dup(2)
    except OSError:  # no usable stderr: nothing to keep quiet
        yield
        return
    sys.stderr.flush()
    with tempfile.TemporaryFile(mode="w+b") as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            kept = [
                line
                for line in capture.read().decode(errors="replace").splitlines(keepends=True)
                if not any(mark in line for mark in _KINETO_NOISE)
            ]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()


class _RssWatch:
    """Context manager: the process's peak RSS while its body runs (see the module docstring)."""

    def __init__(self) -> None:
        self.base_bytes: int | None = None
        self.peak_bytes: int | None = None
        self.method: str | None = None
        self._process = psutil.Process()
        self._hwm_before: int | None = None
        self._reset = False
        self._sampler: _RssSampler | None = None

    def __enter__(self) -> _RssWatch:
        self.base_bytes = self._rss()
        if self.base_bytes is None:
            return self
        self._reset = _reset_peak_rss()
        self._hwm_before = _read_vmhwm()
        if not self._reset:
            self._sampler = _RssSampler(self._rss)
            self._sampler.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.base_bytes is None:
            return
        sampled = self._sampler.stop() if self._sampler is not None else None
        hwm_after = _read_vmhwm()
        if self._reset and hwm_after is not None:
            self.peak_bytes, self.method = hwm_after, "vmhwm-reset"
        elif hwm_after is not None and self._hwm_before is not None and hwm_after > self._hwm_before:
            self.peak_bytes, self.method = hwm_after, "vmhwm-grew"
        else:
            after = self._rss()
            self.peak_bytes = max(b for b in (self.base_bytes, after, sampled) if b is not None)
            self.method = "rss-sampled"

    def _rss(self) -> int | None:
        try:
            return self._process.memory_info().rss
        except psutil.Error:
            return None


class _RssSampler(threading.Thread):
    def __init__(self, read: Callable[[], int | None]) -> None:
        super().__init__(daemon=True, name="rss-sampler")
        self._read = read
        self._done = threading.Event()
        self._peak: int | None = None

    def run(self) -> None:
        while True:
            rss = self._read()
            if rss is not None:
                self._peak = rss if self._peak is None else max(self._peak, rss)
            if self._done.wait(RSS_SAMPLE_INTERVAL_S):
                return

    def stop(self) -> int | None:
        self._done.set()
        self.join()
        return self._peak


def _reset_peak_rss() -> bool:
    try:
        _CLEAR_REFS.write_text(_RESET_PEAK_RSS)
    except OSError:
        return False
    return True


def _read_vmhwm() -> int | None:
    try:
        status = _STATUS.read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            value, unit = line.split()[1:3]  # "VmHWM:   123456 kB"
            return int(value) * 1024 if unit == "kB" else None
    return None
