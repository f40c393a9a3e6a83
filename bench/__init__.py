"""seqlayer-bench: measures the complexity table of sequence layers (Vaswani et al. 2017, Table 1). A point's path:
cli.py -> commands.py (preflight.py) -> run.py (ray_phase.py on a cluster) -> point.py (timing.py; first pass
flops.py, memory.py) -> folder.py (the run folder's one writer) -> report/ (fits.py, sweeps.py) -> reports/local/.
The public interface: bench/interface.md; the method: docs/method.md."""

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
