"""Decode at the device's limit, as tables of a run folder (--into RUN, or a new one: --out DIR). docs/method.md."""

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
from bench import cgroup, storage
from bench.benchmarks import decode_peers
from bench.cli import path_given
from bench.errors import BadInput, RunFailed
from bench.folder import POINTS, RunFolder, is_run_dir
from bench.graphs import capture
from bench.load import LoadMeter, decide_threads
from bench.peak import bandwidth_on, memory_bandwidth
from bench.point import decode_call
from bench.policy import DEVICE, WALL, choose_clock, plain_flag
from bench.spec import DECODE_MODE, LAYER_SIZES, PointSpec, mode_of
from bench.threads import pinned_threads
from bench.timing import Clocks, Rounds, pass_order, summarize
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
    points = _gpu_decode_points(run_dir)
    points = points[points["status"] == "ok"]
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


def sweep_splits(device: str, t: int, d: int, heads: int, batch: int, dtype: str, splits: list[int]) -> pd.DataFrame:
    """The cached attention's steps at t (split-KV at each S; 0: the device's) against their bytes' bandwidth bound."""
    bandwidth = bandwidth_on(memory_bandwidth(device), DEVICE if device.startswith("cuda") else WALL)
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
            seconds, clock = decode_peers.device_time(call, device)
        moved = models.analytic_decode_min_bytes(name, batch, t, spec.config())
        slots = models.split_kv.padded_slots(t + 1)
        shape, torch_dtype = (batch, heads, slots, d // heads), getattr(torch, dtype)
        chosen = models.split_kv.chosen_step(shape, torch_dtype, device)[0] if name == "attention_split" else None
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


GENERATE_PASSES, GENERATE_ROUNDS = 3, 3


def _loop_rounds(layer, state, x, prompt: int, tokens: int, device: str, rounds: int, clocks: Clocks) -> Rounds:
    wall, cpu = [], []
    for _ in range(rounds):
        cache = layer.cache(state, prompt, prompt + tokens)
        _synchronize(device)
        w0, c0 = clocks.wall(), clocks.cpu() if clocks.cpu else 0.0
        for t in range(prompt, prompt + tokens):
            layer.step(x[:, t : t + 1], cache, t)
        _synchronize(device)
        wall.append(clocks.wall() - w0)
        if clocks.cpu:
            cpu.append(clocks.cpu() - c0)
    return Rounds(tuple(wall), tuple(cpu), rounds, None)


def generate(
    device: str, layers: list[str], prompt: int, tokens: int, cfg: LayerConfig, batch: int, threads: int | None = None
) -> pd.DataFrame:
    """Tokens per second per layer (a Python loop of steps into a static cache), timed as a point is."""
    threads, why, _ = decide_threads(threads)
    clocks = Clocks.for_call(threads, device.startswith("cuda"))
    g = torch.Generator().manual_seed(0)
    x = torch.randn(batch, prompt + tokens, cfg.d, generator=g).to(device, cfg.torch_dtype)
    with pinned_threads(threads), torch.inference_mode():
        built, prefill_s = {}, {}
        for name in layers:
            layer = models.build(name, cfg, device=device)
            for _warm in (True, False):  # a first call pays lazy initialisation: timed is the second
                _synchronize(device)
                start = time.perf_counter()
                state = layer.prefill(x[:, :prompt])
                _synchronize(device)
                prefill_s[name] = time.perf_counter() - start
            _loop_rounds(layer, state, x, prompt, min(tokens, 2), device, 1, clocks)
            built[name] = (layer, state)
        passes: dict[str, list[Rounds]] = {name: [] for name in layers}
        meter = LoadMeter()
        for p in range(GENERATE_PASSES):
            for name in pass_order(layers, p):
                passes[name].append(_loop_rounds(*built[name], x, prompt, tokens, device, GENERATE_ROUNDS, clocks))
        load = meter.read()
    rows = []
    for name in layers:
        timing = summarize(passes[name], 1, name, {"extra_info": {"cpu_clock": clocks.cpu_kind}})
        clock, _ = choose_clock(timing, load.others_busy_cores)
        stats = timing.on(clock)
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
                threads=threads,
                threads_reason=why,
                others_busy_cores=load.others_busy_cores,
                rounds=timing.rounds,
                clock=clock,
                prefill_s=prefill_s[name],
                generate_s=stats.median_s,
                generate_wall_s=timing.wall.median_s,
                generate_cpu_s=timing.cpu.median_s if timing.cpu else math.nan,
                reliable=stats.reliable,
                flag=plain_flag(stats, clock, timing.passes),
                tokens_per_s=tokens / stats.median_s,
                batch_tokens_per_s=batch * tokens / stats.median_s,
            )
        )
    return pd.DataFrame(rows)


TABLES = {
    "graph_check": "decode_graph_check.csv",
    "splits": "decode_splits.csv",
    "peers": "decode_peers.csv",
    "generate": "generate.csv",
}


def _folder(args: argparse.Namespace, tables: list[str]) -> RunFolder:
    if args.into is None:
        return RunFolder.create(args.out, "decode")
    if not args.into.is_dir() or not is_run_dir(args.into):
        raise BadInput(f"--into {args.into}: not a run folder (it has no meta.json); --out DIR makes a new one")
    try:
        folder = RunFolder.open(args.into, ("run_id",))
    except RunFailed as exc:
        raise BadInput(f"--into {args.into}: {exc}") from None
    if TABLES["generate"] in tables and _decode_points(args.into).empty:
        folder.release()
        raise BadInput(
            f"--into {args.into}: has no decode points; the report shows tokens per second beside a run's decode "
            "points (run --mode decode), so they would never be shown"
        )
    there = [name for name in tables if (args.into / name).exists()]
    if there:
        folder.release()
        raise BadInput(f"--into {args.into}: already has {', '.join(there)}; run folders are never overwritten")
    return folder


def _decode_points(run: Path) -> pd.DataFrame:
    try:
        points = pd.read_csv(run / POINTS)
    except (OSError, ValueError):
        return pd.DataFrame(columns=["device", "status"])
    return points[[mode == DECODE_MODE for mode in mode_of(points)]]


def _gpu_decode_points(run: Path) -> pd.DataFrame:
    points = _decode_points(run)
    return points[points["device"].astype(str).str.startswith("cuda")]


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.benchmarks.decode", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", type=path_given, help="a run folder whose decode points to time again as graphs")
    parser.add_argument("--splits", action="store_true", help="sweep the split-KV step's S")
    parser.add_argument("--peers", action="store_true", help="the cached attention beside torch's decoding kernels")
    parser.add_argument("--generate", action="store_true", help="tokens per second per layer")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--t", type=int, default=32768)
    parser.add_argument("--peer-t", default="ladder", help="t of the peers: a list, or `ladder` (32768 to memory)")
    parser.add_argument("--d", type=int, default=512)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--window", type=int, default=128)
    parser.add_argument("--dtype", default="float32", help="the dtype of --generate")
    parser.add_argument("--dtypes", default="float32,bfloat16", help="the dtypes of --splits and --peers")
    parser.add_argument("--s", default="0,1,2,4,8,16,32,64,128", help="S values to sweep (0: the device's choice)")
    parser.add_argument("--prompt", type=int, default=1024)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--threads", type=int, help="torch threads of --generate (default: as `run` chooses them)")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--out", type=path_given, help="a new run folder for the tables")
    where.add_argument("--into", type=path_given, help="a run folder to add the tables to (its report shows them)")
    args = parser.parse_args(argv)
    if not (args.check or args.splits or args.peers or args.generate):
        parser.error("nothing to measure: give --check RUN, --splits, --peers or --generate")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: this machine has no CUDA device")
    for dtype in [args.dtype, *args.dtypes.split(",")]:
        if dtype not in models.DTYPES:
            parser.error(f"--dtype {dtype!r}: allowed {', '.join(models.DTYPES)}")
    if args.threads is not None and args.threads < 1:
        parser.error(f"--threads {args.threads}: must be at least 1")
    for name in ("t", "d", "heads", "batch", "prompt", "tokens"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} {getattr(args, name)}: must be at least 1")
    if args.check:
        if not (args.check / POINTS).exists():
            parser.error(f"--check {args.check}: no {POINTS} there")
        if _gpu_decode_points(args.check).empty:
            parser.error(f"--check {args.check}: no GPU decode points to time again as graphs")
    return args


def _peer_ts(args: argparse.Namespace, dtype: str) -> list[int]:
    if args.peer_t != "ladder":
        return [int(t) for t in args.peer_t.split(",")]
    free = torch.cuda.mem_get_info()[0] if args.device.startswith("cuda") else cgroup.available_bytes()
    return decode_peers.ladder(free, args.batch, args.d, models.DTYPES[dtype].itemsize, first=args.t)


def main(argv: list[str] | None = None) -> int:
    try:
        args = _parse(argv)
    except SystemExit as exc:
        return exc.code
    cfg = LayerConfig(d=args.d, heads=args.heads, window=args.window, dtype=args.dtype, causal=True)
    dtypes = args.dtypes.split(",")
    parts = {
        "graph_check": (lambda: check_run(args.check)) if args.check else None,
        "splits": (
            lambda: pd.concat(
                [
                    sweep_splits(
                        args.device, args.t, args.d, args.heads, args.batch, dt, [int(s) for s in args.s.split(",")]
                    )
                    for dt in dtypes
                ],
                ignore_index=True,
            )
        )
        if args.splits
        else None,
        "peers": (
            lambda: pd.concat(
                [
                    decode_peers.peers(args.device, _peer_ts(args, dt), args.d, args.heads, args.batch, [dt])
                    for dt in dtypes
                ],
                ignore_index=True,
            )
        )
        if args.peers
        else None,
        "generate": (
            lambda: generate(args.device, list(models.LAYERS), args.prompt, args.tokens, cfg, args.batch, args.threads)
        )
        if args.generate
        else None,
    }
    parts = {name: part for name, part in parts.items() if part is not None}
    try:
        folder = _folder(args, [TABLES[name] for name in parts])
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    command = ["python", "-m", "bench.benchmarks.decode", *(sys.argv[1:] if argv is None else argv)]
    failed = 0
    try:
        if not folder.has_meta():
            folder.begin("decode", command, None, torch.get_num_threads(), status="running")
        for name, part in parts.items():
            try:
                table = part()
            except Exception as exc:  # noqa: BLE001 - said, and the exit code says it
                print(f"{name}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
                failed += 1
                continue
            folder.add_table(TABLES[name], table)
            print(table.to_string(), flush=True)
        if folder.meta.get("kind") == "decode":
            folder.update_meta(status="finished", finished_utc=storage.utc_now())
    finally:
        folder.release()
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
