"""seqlayer-bench: a point's path is cli -> commands (preflight) -> run (ray_phase) -> point (timing; flops, memory)
-> folder (the run folder's one writer) -> report/ (fits, sweeps). Interface: bench/interface.md; docs/method.md."""

import sys


def in_notebook() -> bool:
    """Whether this process is a Jupyter kernel (ipykernel imported is not: a test may import it)."""
    shell = sys.modules["IPython"].get_ipython() if "IPython" in sys.modules else None
    return shell is not None and "IPKernelApp" in shell.config


API = ("measure", "read_points", "fit", "table1", "plot_table1", "crossover", "write_report", "cite")


def __getattr__(name: str):
    if name in API:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'bench' has no attribute {name!r}")
