"""A sweep's wall time on a local Ray cluster of one single-CPU node against two, alternated: `python -m` it."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PLAN = ["run", "--layers", "conv,rnn,gru,lstm,attention,attention_math", "--n", "64,128,256,512,1024"]
PLAN += ["--d", "32", "--device", "cpu", "--target-time", "0.5", "--passes", "3", "--no-progress", "--yes"]


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def sweep(nodes: int, out: Path) -> tuple[float, float]:
    """(wall seconds of the command, the run's measure_s) of PLAN on a fresh local cluster of `nodes` nodes."""
    import ray
    from ray.cluster_utils import Cluster

    from bench.cli import main
    from bench.folder import read_meta

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    try:
        for _ in range(nodes - 1):
            cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        started = time.monotonic()
        code = main([*PLAN, "--ray", cluster.address, "--out", str(out)])
        wall = time.monotonic() - started
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()
    if code != 0:
        raise SystemExit(f"the sweep on {nodes} node(s) failed (exit {code})")
    meta = read_meta(out)
    assert len(meta["nodes"]) == nodes, meta["nodes"].keys()
    return wall, float(meta["measure_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2, help="sweeps of each configuration (default 2)")
    parser.add_argument(
        "--out",
        type=Path,
        help="a new folder for the runs (default a temporary one: outside results/, so the "
        "report of this machine is not made of them)",
    )
    args = parser.parse_args()
    args.out = args.out or Path(tempfile.mkdtemp(prefix="ray-nodes-"))
    print(f"runs in {args.out}")
    os.chdir(ROOT)  # Ray puts the driver's working directory on its workers' path
    before = uptime()
    walls: dict[int, list[float]] = {1: [], 2: []}
    for repeat in range(args.repeats):
        for nodes in (1, 2):
            wall, measure_s = sweep(nodes, args.out / f"{nodes}-nodes-{repeat}")
            walls[nodes].append(wall)
            print(f"{nodes} node(s), run {repeat}: {wall:.1f} s wall, measure_s {measure_s:.1f}", flush=True)
    one, two = statistics.median(walls[1]), statistics.median(walls[2])
    print(f"median wall: 1 node {one:.1f} s, 2 nodes {two:.1f} s, speed-up {one / two:.2f}x")
    print(f"load before: {before}")
    print(f"load after:  {uptime()}")


if __name__ == "__main__":
    main()
