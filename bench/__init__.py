"""seqlayer-bench: measures the complexity table of sequence layers (Vaswani et al. 2017, Table 1). A point's path:
cli.py -> commands.py (preflight.py) -> run.py (ray_phase.py on a cluster) -> point.py (timing.py; first pass
flops.py, memory.py) -> folder.py (the run folder's one writer) -> report/ (fits.py, sweeps.py) -> reports/local/.
The public interface: bench/interface.md; the method: docs/method.md."""

API = ("measure", "read_points", "fit", "table1", "plot_table1", "crossover", "write_report", "cite")


def __getattr__(name: str):
    if name in API:
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'bench' has no attribute {name!r}")
