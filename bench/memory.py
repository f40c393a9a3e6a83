"""Peak memory of one call: the allocator's (CUDA statistics, or CPU profiler events replayed) and the OS's RSS."""

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
    peak_bytes: int
    rss_peak_bytes: int | None
    rss_base_bytes: int | None
    method: str
    rss_method: str | None = None  # how rss_peak_bytes was read: "vmhwm-reset", "vmhwm-grew", "rss-sampled"
    end_bytes: int = 0  # bytes fn allocated and had not freed when it returned, its result included


class AllocationEvent(NamedTuple):
    time_ns: int
    ptr: int
    nbytes: int  # > 0 allocation, < 0 free


def measure_memory(fn: Callable[[], object], device: str | torch.device) -> MemoryPeak:
    """Run `fn()` once on "cpu" or "cuda[:i]"; call it once before if first-call allocations should not count."""
    device = torch.device(device)
    if device.type == "cuda":
        return _measure_cuda(fn, device)
    if device.type == "cpu":
        return _measure_cpu(fn)
    raise ValueError(f"device {str(device)!r}: memory is measured on 'cpu' or 'cuda' only")


def live_bytes(events: Iterable[AllocationEvent]) -> tuple[int, int]:
    """(peak, end) of the bytes allocated inside the window and not yet freed (docs/method.md)."""
    live: dict[int, int] = {}
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
    return live_bytes(events)[0]


def _measure_cpu(fn: Callable[[], object]) -> MemoryPeak:
    result = None
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
    # c10, when a block allocated before the session is freed in it: expected, live_bytes skips such frees
    "Memory block of unknown size was allocated before the profiling started",
)


@contextmanager
def _kineto_quiet():
    """Pass on fd 2 but Kineto's lines, written there every session with no way to turn them off."""
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
