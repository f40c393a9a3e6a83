"""torch's intra-op thread count, pinned for a block of work (or a function, as a decorator) and restored after."""

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
