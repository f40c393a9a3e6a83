"""The command line: `python -m bench COMMAND`. Parses and validates everything before measuring, then
calls the probes and the storage. Exit codes (bench/interface.md): 0 done; 2 bad input, one line on stderr
naming the bad value and what is allowed, no traceback; 1 any other failure (a traceback only with
--debug)."""

from __future__ import annotations

import argparse
import itertools
import math
import re
import sys
import traceback
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path

import psutil

import models

from . import estimate, machine, storage
from .errors import BadInput, RunFailed
from .presets import get_preset, load_presets
from .spec import DEFAULT_MODE, MODES, PointSpec, expand_grid
from .timing import CLOCK_CHOICES, CPU, MIN_ROUNDS_PER_PASS, TimingPolicy

DESCRIPTION = (
    "Measure the complexity table of sequence layers (Vaswani et al. 2017, Table 1) on this machine: FLOPs, "
    "time, memory and path length of convolution, recurrent and self-attention layers, swept over n, d and k, "
    "fitted against the table and reported."
)


class _Parser(argparse.ArgumentParser):
    """argparse prints usage and exits 2 on a bad argument; we want one line and no usage dump."""

    def error(self, message):
        raise BadInput(message)


# Bounds of the options that set how long a run measures and what it seeds. A value outside them passes
# argparse's type but makes every point an error or the run hang (--target-time inf, --rounds 10**9), so it is
# bad input (exit 2) naming the option and the range.
MAX_TARGET_TIME_S = 60.0  # seconds of rounds per point; the presets use 0.2-0.5 s. Infinity makes every point's
# round count an OverflowError; a minute per point is far beyond what the median's interval needs, and with
# --rounds at its bound it makes a point of slow calls last minutes
MAX_ROUNDS = 10_000  # each round lasts at least min_round_s (5 ms by default): 10 000 rounds are at least 50 s
# per point, and timings.jsonl keeps every round of every pass
MAX_PASSES = 100  # every pass visits every point (builds its layer, an untimed call and round) and times at
# least MIN_ROUNDS_PER_PASS (2) rounds of it: 100 passes are 200 rounds and 100 visits a point
MAX_SEED = 2**32 - 1  # seeds go to torch.manual_seed and torch.Generator.manual_seed (up to 2**64 - 1) and
# random.Random (any); numpy's legacy seeding takes < 2**32; the claims seed with seed·1000 + a small offset,
# which stays below 2**42. Non-negative: numpy's default_rng refuses a negative seed
MAX_PATHS_N = 16_384  # the paths study grows a stack of up to n−1 layers (a contiguous convolution at k = 3,
# restricted attention at r = 2) and runs each twice over the n positions: on a 2-core CPU n = 2048 takes
# 1.5-5 s per layer and k, n = 8192 18-45 s, growing as about n^1.7, so n = 16384 takes minutes per layer and
# n = 100000 an hour or more; and attention_math's n×n scores and their softmax hold 2·n²·4 bytes (2 GiB at
# n = 16384, 80 GB at 100000)
MAX_PATHS_POSITIONS = 2**22  # conv_dilated is probed inside k·n extra positions each side (bench/paths.py):
# n·(1 + 2k) positions of d = 8 floats, 128 MiB a tensor at this bound


# Converters for argparse: they raise ArgumentTypeError, which argparse reports as
# "argument --n: <message>" (a ValueError would become a generic "invalid value").
def _int_list(name: str):
    def parse(text: str) -> list[int]:
        values = []
        for item in text.split(","):
            try:
                value = int(item.strip())
            except ValueError:
                raise argparse.ArgumentTypeError(
                    f"{item.strip()!r} is not an integer; give positive integers separated by commas, e.g. 64,128"
                ) from None
            if value < 1:
                raise argparse.ArgumentTypeError(f"{value} is not positive; sizes must be >= 1")
            values.append(value)
        return values

    return parse


def _positive_int(name: str):
    def parse(text: str) -> int:
        values = _int_list(name)(text)
        if len(values) != 1:
            raise argparse.ArgumentTypeError(f"{text!r}: give one positive integer")
        return values[0]

    return parse


def _bounded_int(low: int, high: int, why: str):
    """An integer low <= value <= high; `why` says where the bound comes from."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer; allowed {low} to {high}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value}: allowed {low} to {high} ({why})")
        return value

    return parse


def _seconds(high: float):
    """A finite number of seconds, 0 < value <= high."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a number; allowed more than 0 up to {high:g} s"
            ) from None
        if not (math.isfinite(value) and 0 < value <= high):
            raise argparse.ArgumentTypeError(f"{text!r}: allowed more than 0 up to {high:g} s, finite")
        return value

    return parse


def _layer_list(text: str) -> list[str]:
    layers = [t.strip() for t in text.split(",") if t.strip()]
    for layer in layers:
        if layer not in models.LAYERS:
            raise argparse.ArgumentTypeError(f"{layer!r} is not a built layer; allowed: {', '.join(models.LAYERS)}")
    if not layers:
        raise argparse.ArgumentTypeError("empty; allowed: " + ", ".join(models.LAYERS))
    return layers


def _cuda_where(cluster=None) -> tuple[bool, str]:
    """(whether a CUDA GPU is there to measure on, where it was looked for): this machine, or with `cluster`
    (bench.cluster.Cluster) the nodes of the Ray cluster."""
    if cluster is not None:
        return cluster.has("cuda"), "on any node of the Ray cluster"
    return machine.cuda_available(), "on this machine"


def resolve_devices(device: str, cluster=None) -> list[str]:
    """`auto`: the CPU and, if present, the GPU; `cuda` must be present (`_cuda_where`)."""
    cuda, where = _cuda_where(cluster)
    if device == "auto":
        return ["cpu"] + (["cuda"] if cuda else [])
    if device == "cuda" and not cuda:
        raise BadInput(f"--device cuda: no CUDA GPU is present {where}; allowed here: cpu, auto")
    return [device]


# ---------------------------------------------------------------------------------------------- run
def _grid_specs(args, cluster=None) -> list[PointSpec]:
    missing = [f"--{name}" for name in ("layers", "n", "d") if getattr(args, name) is None]
    if missing:
        raise BadInput(f"run: give --preset NAME or a grid; missing {' '.join(missing)}")
    return expand_grid(
        layers=args.layers,
        n=args.n,
        d=args.d,
        k=args.k or [3],
        heads=[args.heads or 1],
        window=[args.window],
        batch=[args.batch or 1],
        devices=resolve_devices(args.device or "auto", cluster),
        dtypes=[args.dtype or "float32"],
        modes=[args.mode or DEFAULT_MODE],
    )


GRID_OPTIONS = ("layers", "n", "d", "k", "heads", "batch", "window")
# What `run --resume DIR` reads from the command line; every other option of `run` (all default to None or
# False) would be ignored, since DIR/plan.json fixes the points, the policy, the seed and the folder. Where the
# rest is measured (--ray, --exclusive-node) is the resume's own choice.
RESUME_READS = ("command", "debug", "resume", "no_progress", "ray", "exclusive_node")
# Presets sized for a device other than the CPU: without that device they are refused, with the preset to use
# instead. (Data that belongs in presets.toml once bench.presets reads a device per preset.)
PRESET_DEVICES = {"gpu": ("cuda", "quick (minutes) or full (tens of minutes)")}


def _policy(args, policy: TimingPolicy) -> TimingPolicy:
    """The preset's (or default) timing policy with --rounds, --target-time, --passes applied."""
    if args.rounds is not None:
        policy = replace(policy, min_rounds=args.rounds, max_rounds=max(args.rounds, policy.max_rounds))
    if args.target_time is not None:
        policy = replace(policy, target_s=args.target_time)
    if args.passes is not None:
        policy = replace(policy, passes=args.passes)
    if args.clock is not None:
        policy = replace(policy, clock=args.clock)
    return policy


def ignored_by_resume(args) -> list[str]:
    """The options given beside --resume that it would ignore, as flags (`--rounds`), in the parser's order."""
    return [
        f"--{name.replace('_', '-')}"
        for name, value in vars(args).items()
        if name not in RESUME_READS and value is not None and value is not False
    ]


def wide_kernel_warnings(points: Iterable[tuple[str, int, int | None]]) -> list[str]:
    """One line per kernel size k wider than a sequence length n it is paired with, for (layer, n, k) of the
    layers that read k.

    Warned, not refused: the layer computes what it should (centered 'same' padding keeps all n outputs), its
    FLOPs count every tap, the padded ones too, which it really multiplies, and one layer then links every pair
    of positions, which the paths study reports as it is. What no longer holds is Table 1's setting, a kernel of
    width k < n (Vaswani et al. 2017, section 4): most taps read the zero padding, so such points say little
    about O(k·n·d²) or O(n/k). The other plan warnings are warnings for the same reason: the sweep goes ahead.
    (conv_dilated's span, (k−1)·dilation + 1, may exceed n by design, as in the quick preset's k-sweep: only
    the kernel's own width is checked.)"""
    wide: dict[int, tuple[set[str], set[int]]] = {}
    for layer, n, k in points:
        if k is not None and "k" in models.LAYERS[layer].uses and k > n:
            layers, ns = wide.setdefault(k, (set(), set()))
            layers.add(layer)
            ns.add(n)
    return [
        f"k={k} is wider than the sequence at n={','.join(map(str, sorted(ns)))} "
        f"({', '.join(sorted(layers))}): most of each output's taps read the zero padding, outside Table 1's "
        f"setting of a kernel narrower than the sequence (k < n); measured anyway"
        for k, (layers, ns) in sorted(wide.items())
    ]


def _check_preset_device(name: str, cluster=None) -> None:
    needs = PRESET_DEVICES.get(name)
    cuda, where = _cuda_where(cluster)
    if needs is not None and needs[0] == "cuda" and not cuda:
        raise BadInput(
            f"--preset {name}: sized for a CUDA GPU, and none is present {where}; on a CPU use --preset {needs[1]}"
        )


def stdin_is_terminal() -> bool:
    """Whether a person can be asked: `run` asks before a long or large plan only then."""
    return sys.stdin is not None and sys.stdin.isatty()


def _ask_stdin(question: str) -> bool:
    print(question, end="", file=sys.stderr, flush=True)
    return sys.stdin.readline().strip().lower() in ("y", "yes")


def device_memory(devices: Iterable[str]) -> tuple[dict[str, int], dict[str, int]]:
    """(available now, total) bytes of each device: psutil for the CPU, the CUDA driver for a GPU."""
    import torch  # noqa: PLC0415 - keeps `--help` fast

    available, total = {}, {}
    for device in set(devices):
        if device.startswith("cuda"):
            available[device], total[device] = torch.cuda.mem_get_info()
        else:
            memory = psutil.virtual_memory()
            available[device], total[device] = memory.available, memory.total
    return available, total


def confirm_plan(
    plan: estimate.PlanEstimate,
    available_bytes: dict[str, int],
    total_bytes: dict[str, int],
    *,
    yes: bool,
    interactive: bool,
    ask: Callable[[str], bool] | None = None,
) -> None:
    """Go ahead, or raise BadInput (its one line is all a refusal prints). With `yes`, always go ahead. A CPU
    point estimated above the machine's whole memory: refused. A plan estimated above estimate.LONG_RUN_S, or
    with a CPU point above the memory available now: asked about (`ask`, default a [y/N] question on stdin)
    when `interactive`, i.e. stdin is a terminal, refused otherwise. (A GPU point beyond the GPU's memory is
    warned about, not refused: estimate.REFUSED_BEYOND_MEMORY says why.)"""
    if yes:
        return
    too_large = estimate.too_large(plan, total_bytes)
    if too_large:
        raise BadInput(f"run: {'; '.join(too_large)}; give smaller sizes, or --yes to try it anyway")
    reasons = estimate.reasons_to_ask(plan, available_bytes)
    if not reasons:
        return
    if not interactive:
        raise BadInput(
            f"run: {'; '.join(reasons)}; stdin is not a terminal to ask, so give --yes to measure it anyway, "
            "or a smaller plan"
        )
    if not (ask or _ask_stdin)(f"{'; '.join(reasons)}. Measure it? [y/N] "):
        raise BadInput("run: not confirmed, nothing measured; --yes measures without asking")


def _print_lines(lines: list[str]) -> None:
    for line in lines:
        print(line, file=sys.stderr)


def _estimate_and_confirm(specs: list[PointSpec], policy: TimingPolicy, warnings: list[str], args) -> list[str]:
    """Estimate the plan (bench.estimate, from a quick matmul and convolution timed at the threads a quiet machine gets) and
    `confirm_plan` it. Returns the lines still to print before measuring: the plan's warnings, then
    `plan: N points, about T ..., peak memory about B ...`. A refusal prints nothing but its one error line;
    a question prints them first."""
    from .load import Load, choose_threads, physical_cores  # noqa: PLC0415
    from .threads import pinned_threads  # noqa: PLC0415

    quiet = Load(others_busy_cores=0.0, loadavg_1m=0.0, logical_cores=psutil.cpu_count() or 1, wall_s=0.0)
    threads = args.threads or choose_threads(quiet, physical_cores())[0]
    with pinned_threads(threads):
        rates = estimate.quick_rates(specs)
    plan = estimate.estimate_plan(specs, policy, rates)
    available, total = device_memory({s.device for s in specs})
    lines = [f"warning: {line}" for line in [*warnings, *estimate.expected_ooms(plan, total)]]
    lines.append(estimate.summary_line(plan))

    def ask(question: str) -> bool:
        _print_lines(lines)
        lines.clear()
        return _ask_stdin(question)

    confirm_plan(plan, available, total, yes=args.yes, interactive=stdin_is_terminal(), ask=ask)
    return lines


def cmd_run(args, argv) -> int:
    from .run import sigterm_as_interrupt  # noqa: PLC0415 - keeps `--help` fast

    with sigterm_as_interrupt():  # a scheduler's SIGTERM, from the first moment, ends the run like Ctrl-C
        return _run(args, argv)


def _run(args, argv) -> int:
    if args.exclusive_node and args.ray is None:
        raise BadInput("--exclusive-node: only with --ray ADDRESS|local (it places GPU points on a Ray cluster)")
    if args.resume is not None:
        ignored = ignored_by_resume(args)
        if ignored:
            raise BadInput(
                f"--resume finishes the run as planned in {args.resume / 'plan.json'}; "
                f"{', '.join(ignored)} would be ignored"
            )
    if args.clock == CPU:
        if args.threads not in (None, 1):
            raise BadInput(
                f"--clock cpu --threads {args.threads}: the CPU clock times a call on one thread (with several, "
                "threads waiting at a barrier count CPU time too); give --threads 1 or leave --threads out"
            )
        args.threads = 1
    cluster = None
    if args.ray is not None:
        from .cluster import Cluster  # noqa: PLC0415 - Ray is optional, imported only here

        cluster = Cluster.connect(args.ray, exclusive_node=args.exclusive_node, threads=args.threads)
    try:
        return _run_on(args, argv, cluster)
    finally:
        if cluster is not None:
            cluster.close()


def _run_on(args, argv, cluster) -> int:
    """`run`, measured here or, with `cluster`, on the nodes of a Ray cluster (bench.cluster)."""
    from .fits import plan_warnings  # noqa: PLC0415
    from .run import Run  # noqa: PLC0415

    if args.resume is not None:
        run = Run.resume(args.resume, cluster=cluster)
        if cluster is None and run.meta.get("ray"):
            run.log(f"measuring the rest here, not on Ray (it was begun on {run.meta['ray'].get('address')})")
    else:
        grid_given = [f"--{name}" for name in GRID_OPTIONS if getattr(args, name) is not None]
        if args.preset is not None and grid_given:
            raise BadInput(f"--preset {args.preset} and {' '.join(grid_given)}: give a preset or a grid, not both")
        if args.preset is not None:
            preset = get_preset(args.preset)
            _check_preset_device(args.preset, cluster)
            specs, policy = (
                preset.specs(resolve_devices(args.device or "auto", cluster), dtype=args.dtype, mode=args.mode),
                preset.timing,
            )
        else:
            specs, policy = _grid_specs(args, cluster), TimingPolicy()
        policy = _policy(args, policy)
        warnings = plan_warnings(specs) + wide_kernel_warnings((s.layer, s.n, s.k) for s in specs)
        if cluster is not None and any(s.device != "cpu" for s in specs) and not machine.cuda_available():
            lines = [f"warning: {line}" for line in warnings]
            lines.append(f"plan: {len(specs)} points (no estimate: this machine has no GPU to time a matmul on)")
        else:
            lines = _estimate_and_confirm(specs, policy, warnings, args)
        run = Run.create(
            specs,
            policy,
            out=args.out,
            command=argv,
            preset=args.preset,
            threads=args.threads,
            seed=args.seed or 0,
            cluster=cluster,
        )
        _print_lines(lines)  # before measuring, which goes ahead
    try:
        meta = run.execute(progress=not args.no_progress and sys.stderr.isatty())  # no bar in a log file
    except KeyboardInterrupt:
        print(
            f"interrupted: the passes finished so far are stored in {run.dir}; finish the run with "
            f"`python -m bench run --resume {run.dir}`",
            file=sys.stderr,
        )
        return 1
    summary = ", ".join(f"{v} {k}" for k, v in meta["status_counts"].items())
    where = f"{meta['threads']} thread(s)"
    if cluster is not None:
        where = f"{len(meta.get('nodes') or {})} Ray node(s) of {len(meta.get('machines') or {})} machine(s)"
    print(
        f"run {run.dir.name}: {meta['points_stored']} points ({summary}; {meta['points_cpu_clock']} on the CPU "
        f"clock, {meta['points_sampled_further']} sampled further, {meta['points_unreliable']} unreliable) in "
        f"{meta['measure_s']:.0f} s on {where} -> {run.dir}"
    )
    return 0


# -------------------------------------------------------------------------------------------- paths
def cmd_paths(args, argv) -> int:
    import pandas as pd  # noqa: PLC0415

    from .paths import DEFAULT_WINDOW, paths_table  # noqa: PLC0415

    if args.preset is not None:
        studies = [
            (cfg.get("layers"), cfg.get("n"), cfg.get("k") or [3], cfg.get("window", DEFAULT_WINDOW))
            for cfg in get_preset(args.preset).paths
        ]
    else:
        studies = [(args.layers, args.n, args.k or [3], args.window or DEFAULT_WINDOW)]
    if not studies or any(not layers or not ns for layers, ns, _, _ in studies):
        raise BadInput("paths: give --preset NAME or --layers and --n")
    for layers, ns, ks, window in studies:
        _check_paths_study(layers, ns, ks, window)
    tables = [paths_table(layers, ns, ks, window=window) for layers, ns, ks, window in studies]
    table = tables[0] if len(tables) == 1 else pd.concat(tables, ignore_index=True)
    return _write_side_table(args, argv, "paths", table)


def _check_paths_study(layers: list[str], ns: list[int], ks: list[int], window: int) -> None:
    """Bad input (exit 2) where one study of `paths` cannot be measured; the warnings it deserves."""
    from .paths import DEFAULT_D, ends_margin  # noqa: PLC0415

    for n in ns:
        if not 2 <= n <= MAX_PATHS_N:
            raise BadInput(
                f"paths --n {n}: allowed 2 to {MAX_PATHS_N} (a path from position 0 to n−1 needs 2 positions; "
                f"a stack of up to n−1 layers over n positions takes minutes per layer at {MAX_PATHS_N})"
            )
    for layer, n, k in itertools.product(layers, ns, ks):  # each layer's own check (models/), as in a sweep
        try:
            models.check(layer, models.LayerConfig(d=DEFAULT_D, k=k, window=window), n)
        except ValueError as exc:
            raise BadInput(str(exc)) from None
        positions = n + 2 * ends_margin(layer, n, k)
        if positions > MAX_PATHS_POSITIONS:
            raise BadInput(
                f"paths --k {k} --n {n}: {layer} is probed over n·(1 + 2k) = {positions} positions; allowed up "
                f"to {MAX_PATHS_POSITIONS} (give a smaller k or n)"
            )
    for line in wide_kernel_warnings(itertools.product(layers, ns, ks)):
        print(f"warning: {line}", file=sys.stderr)


def _write_side_table(args, argv, kind: str, table) -> int:
    from .run import store_side_table  # noqa: PLC0415

    path = store_side_table(kind, table, out=args.out, command=argv, preset=getattr(args, "preset", None))
    print(f"{kind}: {len(table)} rows -> {path}")
    return 0


# ------------------------------------------------------------------------------------------- claims
def cmd_claims(args, argv) -> int:
    from .claims import claims_frame, measure_claims  # noqa: PLC0415

    table = claims_frame(measure_claims(seed=args.seed))
    return _write_side_table(args, argv, "claims", table)


# ------------------------------------------------------------------------------------------- report
def cmd_report(args, argv) -> int:
    from .report.build import build_report  # noqa: PLC0415

    written = build_report(
        args.results, args.out, skip_bad=args.skip_bad, compare_reference=args.compare == "reference"
    )
    print(
        f"report: {written['points']} points from {written['runs']} runs -> {args.out / 'report.md'} "
        f"and report.html ({written['figures']} figures, {written['numbers']} citable numbers)"
    )
    return 0


def cmd_cite(args, argv) -> int:
    from .report.numbers import cite_sentence, list_numbers  # noqa: PLC0415

    if args.list is not None:
        if args.key is not None:
            raise BadInput(f"cite {args.key} --list: give a KEY or --list [PATTERN], not both")
        for line in list_numbers(args.list or None, args.reports):
            print(line)
    elif args.key is None:
        raise BadInput("cite: give a KEY of numbers.json, or --list [PATTERN] to see the keys")
    else:
        print(cite_sentence(args.key, args.reports))
    return 0


# --------------------------------------------------------------------------------------------- list
def first_sentence(doc: str | None) -> str:
    """The whole first sentence of a docstring: its first paragraph's lines joined until a period followed
    by a space or the end ("0..n-1" and "cfg.dilation" do not end it)."""
    paragraph = " ".join((doc or "").strip().split("\n\n")[0].split())
    end = re.search(r"(?<!\.)\.(?=\s|$)", paragraph)
    return paragraph[: end.end()] if end else paragraph


def _run_lines(runs: list[Path], indent: str) -> list[str]:
    """One line per stored run: its id, kind, status, date, machine, preset and tables."""
    width = max((len(run.name) for run in runs), default=0)
    lines = []
    for run in runs:
        try:
            meta = storage.read_json(run / "meta.json")
        except RunFailed as exc:
            lines.append(f"{indent}{run.name:{width}s}  damaged: {exc}")
            continue
        label = machine.machine_identity(meta)[1]
        date = (meta.get("started_utc") or "?")[:10]
        what = [f for f in ("points.csv", "paths.csv", "claims.csv") if (run / f).exists()]
        preset = f"preset {meta['preset']}" if meta.get("preset") else "no preset"
        lines.append(
            f"{indent}{run.name:{width}s}  {meta.get('kind', '?'):6s} {meta.get('status', '?'):11s} {date}  "
            f"{label}  ({preset}; {' '.join(what) or 'no tables'})"
        )
    return lines


def cmd_list(args, argv) -> int:
    from .report import load  # noqa: PLC0415 - where the reference runs are kept

    print("presets:")
    for name, preset in load_presets().items():
        print(f"  {name:8s} {len(preset.specs(['cpu'])):4d} points per device  {preset.description}")
    print("layers:")
    for name, cls in models.LAYERS.items():
        print(f"  {name} (sizes {', '.join(('n', 'd', *cls.uses))})")
        print(f"      {first_sentence(cls.__doc__)}")
    print("stored runs:")
    runs = storage.list_runs(storage.RESULTS_ROOT)
    print("\n".join(_run_lines(runs, "  ") or ["  (none)"]))
    machines = sorted(p for p in load.REFERENCE_DIR.iterdir() if p.is_dir()) if load.REFERENCE_DIR.is_dir() else []
    if machines:
        print("reference runs:")
        for folder in machines:
            print(f"  {folder.name}/")
            print("\n".join(_run_lines(storage.list_runs(folder), "    ") or ["    (none)"]))
    return 0


# ---------------------------------------------------------------------------------------------- main
COMMAND_TEXT = {  # each command's one-line help and its description
    "list": (
        "presets, layers, stored runs",
        "List the presets, the layers with what each computes, and the stored runs (their kind, status, date and "
        "machine), the reference runs under results/reference/ apart.",
    ),
    "run": (
        "measure a preset or a grid of points",
        "Measure time, FLOPs and memory of every point of a preset or a grid.",
    ),
    "paths": (
        "the path-length and sequential-depth study",
        "Measure layers to cross the sequence, path hops and sequential depth.",
    ),
    "claims": (
        "check the textbook claims by measurement",
        "Measure each textbook claim about self-attention; write claims.csv.",
    ),
    "report": (
        "regenerate reports/ from stored runs (measures nothing)",
        "Write report.md, report.html, figures/, fits.csv, numbers.json, table.tex.",
    ),
    "cite": (
        "one measured number with its provenance; --list lists the keys",
        "Print one number of reports/numbers.json as a sentence to paste, or list the keys with --list.",
    ),
}


def _grid_options(parser: argparse.ArgumentParser, preset_help: str, n_example: str, window_note: str) -> None:
    """The options `run` and `paths` share: a preset, or the layers and sizes of a grid."""
    parser.add_argument("--preset", help=preset_help)
    parser.add_argument("--layers", type=_layer_list, help="comma-separated layer names (see `list`)")
    parser.add_argument("--n", type=_int_list("n"), help=f"sequence lengths, e.g. {n_example}")
    parser.add_argument("--k", type=_int_list("k"), help="odd kernel sizes of the convolutions, e.g. 3,5 (default 3)")
    parser.add_argument(
        "--window", type=_positive_int("window"), help=f"r, the window of restricted attention {window_note}"
    )


def _reports_dir(parser: argparse.ArgumentParser, flag: str, help: str) -> None:
    parser.add_argument(
        flag,
        type=Path,
        default=storage.RESULTS_ROOT.parent / "reports",
        metavar="DIR",
        help=f"{help} (default reports/)",
    )


def build_parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument("--debug", action="store_true", help="show tracebacks of failures")
    parser = _Parser(prog="python -m bench", description=DESCRIPTION, parents=[common])
    sub = parser.add_subparsers(
        dest="command",
        required=True,
        parser_class=_Parser,
        metavar="COMMAND",
        help="one of these; `python -m bench COMMAND --help` gives its options",
    )

    def command(name: str) -> argparse.ArgumentParser:
        help, description = COMMAND_TEXT[name]
        return sub.add_parser(name, parents=[common], help=help, description=description)

    run = command("run")
    _grid_options(run, "a preset from presets.toml (see `list`)", "64,128,256", "(required for it)")
    run.add_argument("--d", type=_int_list("d"), help="widths")
    run.add_argument("--heads", type=_positive_int("heads"), help="attention heads (default 1)")
    run.add_argument("--batch", type=_positive_int("batch"), help="batch size (default 1)")
    run.add_argument(
        "--device",
        choices=["cpu", "cuda", "auto"],
        help="cpu, cuda, or auto: every device present (default auto)",
    )
    run.add_argument("--dtype", choices=list(models.DTYPES), help="default float32")
    run.add_argument(
        "--mode",
        choices=list(MODES),
        help="inference (default): the forward pass; train: one forward and one backward pass "
        "(with a preset: every grid in this mode)",
    )
    logical_cores = psutil.cpu_count() or 1
    run.add_argument(
        "--threads",
        type=_bounded_int(1, logical_cores, "this machine's logical cores: more only oversubscribe them"),
        help="torch intra-op threads, pinned for the run (default: the physical cores other "
        f"processes leave free, less one for the system; see bench/load.py); at most {logical_cores}, the "
        "logical cores",
    )
    run.add_argument(
        "--rounds",
        type=_bounded_int(
            1,
            MAX_ROUNDS,
            f"each round lasts at least {TimingPolicy().min_round_s * 1e3:g} ms; more buy no better median",
        ),
        help=f"minimum timed rounds, 1 to {MAX_ROUNDS}",
    )
    run.add_argument(
        "--target-time",
        type=_seconds(MAX_TARGET_TIME_S),
        help=f"seconds of timed rounds per point, roughly, more than 0 up to {MAX_TARGET_TIME_S:g} "
        "(default: the preset's)",
    )
    run.add_argument(
        "--passes",
        type=_bounded_int(
            1, MAX_PASSES, f"each pass visits every point and times at least {MIN_ROUNDS_PER_PASS} rounds of it"
        ),
        help=f"interleaved passes over the plan, 1 to {MAX_PASSES} (default: the preset's)",
    )
    run.add_argument(
        "--clock",
        choices=CLOCK_CHOICES,
        help="the clock each point's time fits use: auto (default: the wall clock where it measures the layer; "
        "the CPU time of the call's one thread where other programs took cores or the wall clock was unreliable), "
        "wall, or cpu (the run on one thread; what a busy machine cannot slow down)",
    )
    run.add_argument(
        "--seed",
        type=_bounded_int(0, MAX_SEED, "what torch, numpy and random all accept as a seed"),
        help=f"seed of the layers' weights, the inputs and the shuffled order of the passes, 0 to {MAX_SEED} "
        "(default 0)",
    )
    run.add_argument("--out", type=Path, help="a new or empty folder for the run (default results/<run-id>)")
    run.add_argument(
        "--resume",
        type=Path,
        help="finish an interrupted or killed run in this folder, as its plan.json says (alone, or with --no-progress)",
    )
    run.add_argument(
        "--yes",
        action="store_true",
        help="measure without asking: before a new run its duration and peak memory are estimated, and a plan "
        f"above {estimate.format_duration(estimate.LONG_RUN_S)}, or with a point above the memory available, is "
        "asked about on a terminal and refused elsewhere unless --yes",
    )
    run.add_argument(
        "--ray",
        metavar="ADDRESS|local",
        help="measure on the nodes of a Ray cluster: auto (the one `ray start --head` started on this machine), "
        "HOST:PORT of its head, or local (a Ray instance started here, to try it out); this process stays the "
        "run folder's one writer. Needs the ray extra: " + 'pip install -e ".[ray]"' + " (see the README)",
    )
    run.add_argument(
        "--exclusive-node",
        action="store_true",
        help="with --ray: a GPU point's worker holds its whole node (all its GPUs and CPUs), not one GPU and its "
        "share of the CPUs; a CPU point's worker always holds all of its node's CPUs",
    )
    run.add_argument(
        "--no-progress", action="store_true", help="no progress bar (there is none when stderr is not a terminal)"
    )

    paths = command("paths")
    _grid_options(paths, "take layers, n, k and window from a preset", f"64,256 (2 to {MAX_PATHS_N})", "(default 16)")
    paths.add_argument("--out", type=Path, help="a run folder to add paths.csv to, or a new folder")

    claims = command("claims")
    claims.add_argument(
        "--seed",
        type=_bounded_int(0, MAX_SEED, "what torch, numpy and random all accept as a seed"),
        default=0,
        help=f"seed of the random inputs and weights the claims are measured on, 0 to {MAX_SEED} (default 0)",
    )
    claims.add_argument("--out", type=Path, help="a run folder to add claims.csv to, or a new folder")

    report = command("report")
    report.add_argument(
        "--results",
        type=Path,
        nargs="+",
        help="run folders, or folders of runs, to any depth (default: this machine's runs under results/, "
        "or the reference runs where it has none yet)",
    )
    _reports_dir(report, "--out", "the folder to write report.md, report.html, figures/ and the tables to")
    report.add_argument("--skip-bad", action="store_true", help="report the other runs when one is damaged")
    report.add_argument(
        "--compare",
        choices=["reference"],
        help="set the reference runs (results/reference/) beside the others: each machine apart, never averaged",
    )

    cite = command("cite")
    cite.add_argument(
        "key",
        nargs="?",
        help="a key of numbers.json, e.g. intel-xeon-2c-vm.cpu.attention.time.exponent_n: machine, device, layer, what (not with --list)",
    )
    cite.add_argument(
        "--list",
        nargs="?",
        const="",
        metavar="PATTERN",
        help="list the keys, one a line with value and unit; only those matching PATTERN if given: a substring "
        "of the key, or a shell glob (fnmatch) when PATTERN has *, ? or [, e.g. '*.exponent_n'",
    )
    _reports_dir(cite, "--reports", "the report folder that holds numbers.json")

    command("list")
    return parser


COMMANDS = {
    "run": cmd_run,
    "paths": cmd_paths,
    "claims": cmd_claims,
    "report": cmd_report,
    "cite": cmd_cite,
    "list": cmd_list,
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args, ["python -m bench", *argv])
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 1
    except Exception as exc:  # any other failure: a message, the traceback only with --debug
        if debug:
            traceback.print_exc()
        print(
            f"error: {type(exc).__name__}: {exc}" if not isinstance(exc, RunFailed) else f"error: {exc}",
            file=sys.stderr,
        )
        return 1
