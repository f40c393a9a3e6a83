"""A run folder written by hand, for tests of `report` and `cite` that need a real report but no measuring:
attention's time ∝ n² over five n (a fit with an exponent), lstm's FLOPs off the line over three n (an
exponent, its interval too wide for a verdict), gru over two n (too few points: a fit with no exponent)."""

import json
from pathlib import Path

import pandas as pd

MACHINE = {"cpu_model": "Test CPU", "cpu_cores": 2, "hostname": "box"}  # machine id "test-2c-box"
SWEEPS = {  # layer: {n: (time_s, flops)}
    "attention": {n: (1e-3 * (n / 64) ** 2, 1e6 * (n / 64) ** 2) for n in (64, 128, 256, 512, 1024)},
    "lstm": {256: (1e-3, 1e6), 512: (2e-3, 4e6), 1024: (4e-3, 4e6)},  # FLOPs exponents 2 then 0
    "gru": {64: (1e-3, 1e6), 128: (2e-3, 2e6)},
}


def write_run(root: Path, run_id: str = "r1", sweeps: dict = SWEEPS, mode: str | None = None) -> Path:
    """The run folder root/run_id of `sweeps` ({layer: {n: (time_s, flops)}}); with `mode` (decode, recompute) each
    point in that mode, its state's bytes those of 2 float32 vectors of d (attention: of its t keys and values)."""
    rows = [
        {
            "layer": layer,
            "device": "cpu",
            "dtype": "float32",
            "batch": 1,
            "n": n,
            "d": 32,
            "k": None,
            "heads": 4 if layer == "attention" else None,
            "window": None,
            "time_median_s": time_s,
            "time_iqr_s": 0.01 * time_s,
            "time_ci_low_s": 0.99 * time_s,
            "time_ci_high_s": 1.01 * time_s,
            "time_reliable": True,
            "rounds": 10,
            "passes": 3,
            "flops_analytic": flops,
            "flops_counted": flops,
            "flops_uncounted_ops": None,
            "flops_elementwise": 0.01 * flops,
            "mem_peak_bytes": 1000 * n,
            "mem_rss_peak_bytes": 2e8,
            "mem_rss_base_bytes": 1e8,
            "status": "ok",
            "error": None,
            "time_noisy": False,
            "time_flag": "",
            "point_id": f"{layer}{n}",
        }
        for layer, points in sweeps.items()
        for n, (time_s, flops) in points.items()
    ]
    if mode is not None:
        for row in rows:
            row.update(
                mode=mode, causal=True, mem_state_bytes=2 * 32 * 4 * (row["n"] if "attention" in row["layer"] else 1)
            )
    run = root / run_id
    run.mkdir(parents=True)
    pd.DataFrame(rows).to_csv(run / "points.csv", index=False)
    meta = {"run_id": run_id, "kind": "run", "status": "finished", "started_utc": "2026-01-01T00:00:00+00:00"}
    (run / "meta.json").write_text(json.dumps(meta | MACHINE))
    return run
