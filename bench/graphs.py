"""A GPU call's own time: captured as a CUDA graph and replayed (triton's do_bench_cudagraph). docs/method.md."""

from __future__ import annotations

from collections.abc import Callable

import torch

MAX_GRAPH_CALLS = 1000


def capture(call: Callable[[], object], calls: int) -> torch.cuda.CUDAGraph:
    """`calls` calls of `call` as one graph, warmed on a side stream first (torch.cuda.graphs' recipe)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            call()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            call()
    torch.cuda.synchronize()
    return graph


def replay_rounds(graph: torch.cuda.CUDAGraph, calls: int, rounds: int) -> tuple[float, ...]:
    """Seconds per call of `rounds` replays, each between two CUDA events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    graph.replay()
    times = []
    for _ in range(rounds):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / calls)
    return tuple(times)


def device_rounds(call: Callable[[], object], calls: int, rounds: int) -> tuple[tuple[float, ...], int]:
    """(seconds per call of each replay, calls per graph); the graph freed after."""
    calls = max(1, min(calls, MAX_GRAPH_CALLS))
    torch.cuda.empty_cache()
    graph = capture(call, calls)
    try:
        return replay_rounds(graph, calls, rounds), calls
    finally:
        graph.reset()
        del graph
        torch.cuda.empty_cache()
