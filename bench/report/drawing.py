"""A figure drawn to PNG: here, or in worker processes while the report goes on (docs/method.md, Pure sections)."""

from __future__ import annotations

import io
import multiprocessing
import os
import pickle
import sys
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import matplotlib.pyplot as plt

from ..load import physical_cores

DPI = 110


def png(fig: plt.Figure) -> bytes:
    out = io.BytesIO()
    try:
        fig.savefig(out, format="png", dpi=DPI, bbox_inches="tight")
    finally:
        plt.close(fig)
    return out.getvalue()


def _png_of(pickled: bytes, rc: dict) -> bytes:
    dict.update(plt.rcParams, rc)
    return png(pickle.loads(pickled))


class Drawing:
    def __init__(self, pickled: bytes, future: Future):
        self.pickled, self.future = pickled, future

    def result(self) -> bytes:
        try:
            return self.future.result()
        except (BrokenProcessPool, OSError):
            return png(pickle.loads(self.pickled))


_POOLS: dict[int, ProcessPoolExecutor] = {}
_FORKED: list[bool] = []


def _forked() -> None:
    _POOLS.clear()
    _FORKED.append(True)


os.register_at_fork(after_in_child=_forked)


def _pool(workers: int) -> ProcessPoolExecutor:
    if workers not in _POOLS:
        _POOLS[workers] = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("forkserver"))
    return _POOLS[workers]


def abandon() -> None:
    while _POOLS:
        pool = _POOLS.popitem()[1]
        for worker in list((pool._processes or {}).values()):
            worker.terminate()
        pool.shutdown(wait=False, cancel_futures=True)


def _main_runs_nothing() -> bool:
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    return not hasattr(main, "__file__") or (spec is not None and spec.name.endswith(".__main__"))


def in_workers(fig: plt.Figure) -> bytes | Drawing:
    workers = physical_cores()
    if (
        workers < 2
        or _FORKED
        or "forkserver" not in multiprocessing.get_all_start_methods()
        or not _main_runs_nothing()
    ):
        return png(fig)
    try:
        pickled = pickle.dumps(fig)
    except (pickle.PicklingError, AttributeError, TypeError):
        return png(fig)
    rc = {key: value for key, value in plt.rcParams.items() if key != "backend"}
    try:
        future = _pool(workers).submit(_png_of, pickled, rc)
    except (OSError, ImportError, NotImplementedError, BrokenProcessPool):
        _POOLS.pop(workers, None)
        return png(fig)
    plt.close(fig)
    return Drawing(pickled, future)


def drawn(files: dict) -> dict:
    return {name: content.result() if isinstance(content, Drawing) else content for name, content in files.items()}
