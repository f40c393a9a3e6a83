"""What a default process pays: each layer's largest point timed again in a child left with glibc's own malloc policy."""

from __future__ import annotations

import gc
import json
import os
import resource
import subprocess
import sys
from collections.abc import Callable

import pandas as pd

from .errors import RunFailed
from .spec import IDENTITY, MODES, SIZES, PointSpec

TABLE = "default_policy"
MIN_RUN_S = 1.0  # torch.utils.benchmark's blocked_autorange: at least this long per point, as a notebook's %timeit
FAULT_CALLS = 3  # calls after the timing whose minor page faults are counted


def chosen(points: pd.DataFrame) -> list[PointSpec]:
    """Per CPU layer, the largest n of its widest sweep in n (most sizes; then the largest; then Table 1's mode order)."""
    from .sweeps import sweeps  # the sweeps' grouping, one home

    best: dict[str, tuple] = {}
    cpu = points[points["device"].astype(str) == "cpu"]
    for _fixed, sweep in sweeps(cpu, "n"):
        top = sweep.loc[sweep["n"].idxmax()]
        rank = (sweep["n"].nunique(), int(top["n"]), -MODES.index(str(top["mode"])))
        if str(top["layer"]) not in best or rank > best[str(top["layer"])][0]:
            best[str(top["layer"])] = (rank, spec_of(top))
    return [spec for _rank, spec in sorted(best.values(), key=lambda item: item[1].layer)]


def duration_s(specs: list[PointSpec], call_s: Callable, overhead_s: Callable, startup_s: float) -> float:
    """What `store` will take for a plan of `specs` (docs/method.md, the estimate)."""
    if not specs or not (top := chosen(pd.DataFrame([s.as_row() for s in specs]).assign(status="ok"))):
        return 0.0
    return startup_s + sum(overhead_s(s) + max(MIN_RUN_S, call_s(s)) + FAULT_CALLS * call_s(s) for s in top)


def spec_of(row: pd.Series) -> PointSpec:
    def value(name: str):
        v = row[name]
        if pd.isna(v) or isinstance(v, str):
            return None if pd.isna(v) else v
        return bool(v) if name == "causal" else int(v)

    return PointSpec(**{name: value(name) for name in IDENTITY if name in row.index})


def measure(specs: list[PointSpec], threads: int, outside_layers: dict | None, seed: int = 0) -> list[dict]:
    """One row per spec, timed in a fresh child process (this one's malloc is pinned for good)."""
    if not specs:
        return []
    job = {"specs": [s.as_row() for s in specs], "threads": threads, "outside": outside_layers, "seed": seed}
    done = subprocess.run(
        [sys.executable, "-m", "bench.default_policy"], input=json.dumps(job), capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RunFailed(f"the default-policy timing failed: {done.stderr.strip().splitlines()[-1:] or done.returncode}")
    return json.loads(done.stdout)


def wanted() -> bool:
    """A local `run` times it unless SEQBENCH_DEFAULT_POLICY is 0 (the test suite's runs)."""
    return os.environ.get("SEQBENCH_DEFAULT_POLICY", "1").strip() != "0"


def store(folder, threads: int, outside_layers: dict | None, log: Callable[[str], None]) -> None:
    """default_policy.csv in the run's folder, once, of the planned points (the estimate's); a resume has it."""
    points = folder.points()
    planned = points[~points["extended"].fillna(False).astype(bool)] if "extended" in points else points
    if (folder.path / f"{TABLE}.csv").exists() or not (specs := chosen(planned)):
        return
    log(f"{len(specs)} layer(s): the largest point timed again in a process with the C library's own malloc policy")
    try:
        rows = measure(specs, threads, outside_layers)
    except RunFailed as exc:
        log(f"{exc}: no {TABLE}.csv")
        folder.update_meta(default_policy_error=str(exc))
        return
    folder.add_table(f"{TABLE}.csv", pd.DataFrame(rows).astype({size: "Int64" for size in SIZES}))


def _time(call: Callable[[], object], threads: int) -> dict:
    from torch.utils.benchmark import Timer

    m = Timer("call()", globals={"call": call}, num_threads=threads).blocked_autorange(min_run_time=MIN_RUN_S)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(FAULT_CALLS):
        call()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    calls = m.number_per_run * len(m.raw_times)
    return {
        "time_median_s": m.median,
        "time_min_s": min(m.times),
        "calls": calls,
        "faults_per_call": faults / FAULT_CALLS,
    }


def _child(job: dict) -> list[dict]:
    import torch

    import models

    from . import outside
    from .point import decode_call, draws, grad_mode, one_call

    torch.set_num_threads(job["threads"])
    outside.restore(job["outside"])
    rows = []
    for fields in job["specs"]:
        spec, seed = PointSpec(**fields), job["seed"]
        layer = models.build(spec.layer, spec.config(), device=spec.device, seed=seed)
        if spec.decodes:
            call = decode_call(spec, layer, seed)[0]
        else:
            x = draws(seed, spec.device)(spec.batch, spec.n, spec.d, dtype=spec.config().torch_dtype)
            call = one_call(spec, layer, x, seed)[0]
        with grad_mode(spec):
            rows.append({"point_id": spec.point_id, **fields, **_time(call, job["threads"]), "threads": job["threads"]})
        layer = x = call = None
    return rows


if __name__ == "__main__":
    json.dump(_child(json.load(sys.stdin)), sys.stdout)
    sys.stdout.flush()
    gc.freeze()
