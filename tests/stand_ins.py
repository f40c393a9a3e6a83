"""Stand-ins for a run's ceilings (compute peak, memory bandwidth, operator latency: seconds a run on 2 busy cores,
at its start and again at its end) in the processes the tests start where the run folder is tested, not the
ceilings; the ceilings themselves are tested in tests/test_peak.py and measured for real by the other runs."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

FAKE_PEAK = {"flops_per_s": 1e11, "size": 512, "time_median_s": 2.7e-3, "time_iqr_s": 0.0, "time_ci_s": [2.7e-3] * 2}
FAKE_BANDWIDTH = {"bytes_per_s": 1e10, "median_bytes_per_s": 1e10, "array_bytes": 2**26}
FAKE_LATENCY = {"seconds": 2e-6, "kernel": "a stand-in"}

# Python that sets them in a child process, before it runs the command line.
CEILINGS_STUB = (
    f"import bench.run, bench.peak\nbench.peak.compute_peak = lambda device, dtype: dict({FAKE_PEAK!r}, dtype=str(dtype))\n"
    f"bench.peak.memory_bandwidth = lambda device, swept=None: dict({FAKE_BANDWIDTH!r})\n"
    f"bench.peak.op_latency = lambda device: dict({FAKE_LATENCY!r})\n"
    "bench.peak.memory_hierarchy = lambda device: {}\n"
)


def setup(pass_delay_s: float = 0) -> str:
    """CEILINGS_STUB; with pass_delay_s, each pass over a point then takes that much longer (so that a signal sent
    once measuring began surely meets it at work)."""
    code = CEILINGS_STUB
    if pass_delay_s:
        code += (
            "import time\nmeasure_pass = bench.run.measure_pass\n"
            f"def slowly(*args, **kwargs):\n    time.sleep({pass_delay_s})\n    return measure_pass(*args, **kwargs)\n"
            "bench.run.measure_pass = slowly\n"
        )
    return code


def bench_argv(*args: str, pass_delay_s: float = 0) -> list[str]:
    """The argv of `python -m bench ARGS` with the stand-in ceilings (setup()): bench/__main__.py itself (runpy),
    its signal handling and exit codes as they are, once the stand-ins are set."""
    code = setup(pass_delay_s)
    code += (
        f"import runpy, sys\nsys.argv = ['bench', *{list(args)!r}]\nrunpy.run_module('bench', run_name='__main__')\n"
    )
    return [sys.executable, "-c", code]


def wait_until_handling(child: subprocess.Popen) -> None:
    """Until `child` runs the code that handles SIGTERM (its first lines): a signal before that lands in the
    interpreter's own start-up (site-packages' .pth files: 0.05 s was too early on a machine with many), where no
    program's handler can be."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and child.poll() is None:
        try:
            caught = int(Path(f"/proc/{child.pid}/status").read_text().split("SigCgt:")[1].split()[0], 16)
        except (OSError, IndexError):
            return  # no /proc: as before, a start-up signal at any moment
        if caught & (1 << (signal.SIGTERM - 1)):
            return
        time.sleep(0.005)
