"""Generating at the device's limit, outside a run: a run's decode points replayed as graphs under torch.utils.benchmark,
the split-KV step's S against its bandwidth bound, tokens per second. Method: docs/method.md.

    python -m bench.benchmarks.decode --check RUN --splits --generate --out DIR   # one CSV each in DIR
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import pandas as pd
import torch
from torch.utils import benchmark

import models
from bench.folder import POINTS, store_side_table
from bench.graphs import capture, device_rounds
from bench.peak import memory_bandwidth
from bench.point import decode_call
from bench.spec import LAYER_SIZES, PointSpec
from models import LayerConfig


def _synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _spec_of(row: pd.Series) -> PointSpec:
    sizes = {s: int(row[s]) for s in LAYER_SIZES if s in row and row[s] == row[s]}
    return PointSpec(
        row["layer"],
        int(row["n"]),
        int(row["d"]),
        int(row["batch"]),
        **sizes,
        device=row["device"],
        dtype=row["dtype"],
        mode=row["mode"],
    )


def check_run(run_dir: Path) -> pd.DataFrame:
    """Every ok GPU decode point of a run: its device time against torch.utils.benchmark's replay of its graph."""
    points = pd.read_csv(run_dir / POINTS)
    points = points[(points["status"] == "ok") & (points["mode"] == "decode") & points["device"].str.startswith("cuda")]
    rows = []
    for _, p in points.iterrows():
        spec = _spec_of(p)
        layer = models.build(spec.layer, spec.config(), device=spec.device)
        calls = int(p["time_graph_calls"]) if p.get("time_graph_calls") == p.get("time_graph_calls") else 1
        with torch.inference_mode():
            call, _ = decode_call(spec, layer, 0)
            replays = {}
            for size in sorted({1, calls}):
                graph = capture(call, size)
                timer = benchmark.Timer("graph.replay()", globals={"graph": graph})
                replays[size] = timer.blocked_autorange(min_run_time=0.2).median / size
                del graph
        measured = replays[calls]
        harness = p.get("time_device_median_s")
        rows.append(
            dict(
                layer=spec.layer,
                t=spec.n,
                d=spec.d,
                heads=spec.heads,
                batch=spec.batch,
                dtype=spec.dtype,
                harness_device_s=harness,
                harness_eager_s=p["time_median_s"],
                graph_calls=calls,
                graph_replay_s=measured,
                graph_replay_one_call_s=replays[1],
                ratio=harness / measured if harness == harness else math.nan,
                eager_over_graph=p["time_median_s"] / measured,
            )
        )
        del call, layer
        torch.cuda.empty_cache()
    return pd.DataFrame(rows)


def _device_time(call, device: str, rounds: int = 10) -> tuple[float, str]:
    if device.startswith("cuda"):
        times, _ = device_rounds(call, 20, rounds)
        return float(torch.tensor(times).median()), "device"
    measured = benchmark.Timer("call()", globals={"call": call}).blocked_autorange(min_run_time=0.3)
    return measured.median, "wall"


def sweep_splits(device: str, t: int, d: int, heads: int, batch: int, dtype: str, splits: list[int]) -> pd.DataFrame:
    """The cached attention's steps at t (split-KV at each S; 0: the device's) against their bytes' bandwidth bound."""
    bandwidth = memory_bandwidth(device)["bytes_per_s"]
    rows = []
    variants = [("attention", None), ("attention_math", None)] + [("attention_split", s) for s in splits]
    for name, s in variants:
        spec = PointSpec(
            name, n=t, d=d, batch=batch, heads=heads, device=device, dtype=dtype, mode="decode", causal=True
        )
        layer = models.build(name, spec.config(), device=device)
        if s:
            layer.splits = s
        with torch.inference_mode():
            call, _ = decode_call(spec, layer, 0)
            seconds, clock = _device_time(call, device)
        moved = models.analytic_decode_min_bytes(name, batch, t, spec.config())
        slots = models.split_kv.padded_slots(t + 1)
        chosen = models.split_kv.kv_splits(device, batch * heads, slots) if name == "attention_split" else None
        rows.append(
            dict(
                layer=name,
                splits=s or chosen,
                splits_chosen_by_device=name == "attention_split" and not s,
                t=t,
                d=d,
                heads=heads,
                batch=batch,
                dtype=dtype,
                time_s=seconds,
                clock=clock,
                bytes=moved,
                bandwidth_bytes_per_s=bandwidth,
                bound_s=moved / bandwidth,
                share_of_bound=moved / bandwidth / seconds,
                achieved_bytes_per_s=moved / seconds,
            )
        )
        del layer, call
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    return pd.DataFrame(rows)


def generate(device: str, layers: list[str], prompt: int, tokens: int, cfg: LayerConfig, batch: int) -> pd.DataFrame:
    """Tokens per second per layer: the prefill, then a Python loop of steps into a static cache."""
    rows = []
    g = torch.Generator().manual_seed(0)
    x = torch.randn(batch, prompt + tokens, cfg.d, generator=g).to(device, cfg.torch_dtype)
    for name in layers:
        layer = models.build(name, cfg, device=device)
        with torch.inference_mode():
            for _warm in (True, False):  # a first round pays lazy initialisation: timed is the second
                _synchronize(device)
                start = time.perf_counter()
                cache = layer.cache(layer.prefill(x[:, :prompt]), prompt, prompt + tokens)
                _synchronize(device)
                prefilled = time.perf_counter()
                for t in range(prompt, prompt + tokens):
                    layer.step(x[:, t : t + 1], cache, t)
                _synchronize(device)
                done = time.perf_counter()
        rows.append(
            dict(
                layer=name,
                prompt=prompt,
                tokens=tokens,
                d=cfg.d,
                heads=cfg.heads,
                batch=batch,
                dtype=cfg.dtype,
                device=device,
                prefill_s=prefilled - start,
                generate_s=done - prefilled,
                tokens_per_s=tokens / (done - prefilled),
                batch_tokens_per_s=batch * tokens / (done - prefilled),
            )
        )
        del layer, cache
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.benchmarks.decode", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", type=Path, help="a run folder whose decode points to time again as graphs")
    parser.add_argument("--splits", action="store_true", help="sweep the split-KV step's S")
    parser.add_argument("--generate", action="store_true", help="tokens per second per layer")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--t", type=int, default=32768)
    parser.add_argument("--d", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--window", type=int, default=128)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--s", default="0,1,2,4,8,16,32,64,128", help="S values to sweep (0: the device's choice)")
    parser.add_argument("--prompt", type=int, default=1024)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--into", type=Path, help="a run folder to add generate.csv to, for its report")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    cfg = LayerConfig(d=args.d, heads=args.heads, window=args.window, dtype=args.dtype, causal=True)
    parts = {
        "graph_check": (lambda: check_run(args.check)) if args.check else None,
        "splits": (
            lambda: sweep_splits(
                args.device, args.t, args.d, args.heads, args.batch, args.dtype, [int(s) for s in args.s.split(",")]
            )
        )
        if args.splits
        else None,
        "generate": (lambda: generate(args.device, list(models.LAYERS), args.prompt, args.tokens, cfg, args.batch))
        if args.generate
        else None,
    }
    failed = 0
    for name, part in parts.items():
        if part is None:
            continue
        try:
            table = part()
        except Exception as exc:  # noqa: BLE001 - said, and the exit code says it
            print(f"{name}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            failed += 1
            continue
        table.to_csv(args.out / f"{name}.csv", index=False)
        if name == "generate" and args.into:
            command = ["python", "-m", "bench.benchmarks.decode", *(sys.argv[1:] if argv is None else argv)]
            store_side_table("generate", table, out=args.into, command=command, preset=None)
        print(table.to_string(), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
