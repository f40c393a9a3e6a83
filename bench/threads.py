"""torch's intra-op thread count, pinned for a block of work and restored after, whatever happens.

A context manager that also works as a decorator (`@pinned_threads(1)`). The sweep pins the threads it
records in meta.json; the path and claims probes pin one thread, since they run many tiny operators
whose thread barriers cost more than the threads bring on a small shared machine."""

from __future__ import annotations

from contextlib import contextmanager

import torch


@contextmanager
def pinned_threads(threads: int):
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)
