"""The commands of `python -m bench` (bench.cli parses their options): run, paths, claims, report, cite, list."""

from __future__ import annotations

import itertools
import math
import os
import re
import shlex
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import models

from . import default_policy, folder, interrupts, machine, outside, storage
from .errors import BadInput, RunFailed
from .load import sample_load
from .policy import CPU, EXTEND_BUDGET, TimingPolicy
from .preflight import before_measuring, device_memory, machine_costs, print_lines, wide_kernel_warnings
from .presets import Preset, get_preset, load_presets
from .progress import progress_bar
from .spec import DEFAULT_MODE, SIZES, PointSpec, expand_grid

if TYPE_CHECKING:
    from .cost import Costs

MAX_PATHS_N = 16_384  # the paths study runs a stack of up to n−1 layers over n positions; attention_math holds n²
MAX_PATHS_POSITIONS = 2**22  # conv_dilated is probed inside k·n extra positions each side (bench/paths.py)


def _cuda_where(cluster=None) -> tuple[bool, str]:
    if cluster is not None:
        return cluster.has("cuda"), "on any node of the Ray cluster"
    return machine.cuda_available(), "on this machine"


def resolve_devices(device: str, cluster=None) -> list[str]:
    """`auto`: the CPU and, if present, the GPU; `cuda` must be present."""
    cuda, where = _cuda_where(cluster)
    if device == "auto":
        return ["cpu"] + (["cuda"] if cuda else [])
    if device == "cuda" and not cuda:
        raise BadInput(f"--device cuda: no CUDA GPU is present {where}; allowed here: cpu, auto")
    return [device]


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
        dilation=args.dilation or [None],
        modes=[args.mode or DEFAULT_MODE],
        causal=args.causal,
    )


GRID_OPTIONS = ("layers", *SIZES)  # those `run` has options for; a preset sets them all
# What `run --resume DIR` reads (where to measure the rest, too); DIR/plan.json fixes the rest of the options.
RESUME_READS = tuple("command debug resume no_progress ray exclusive_node started load_since startup_s".split())


def _policy(args, policy: TimingPolicy) -> TimingPolicy:
    """The preset's (or default) timing policy with --rounds, --target-time, --passes, --clock and --no-extend."""
    if args.rounds is not None:
        policy = replace(policy, min_rounds=args.rounds, max_rounds=max(args.rounds, policy.max_rounds))
    if args.target_time is not None:
        policy = replace(policy, target_s=args.target_time)
    if args.passes is not None:
        policy = replace(policy, passes=args.passes)
    if args.clock is not None:
        policy = replace(policy, clock=args.clock)
    if args.no_extend:
        return replace(policy, extend_budget=0.0)
    return replace(policy, extend_budget=_extend_budget(policy.extend_budget or EXTEND_BUDGET))


def _extend_budget(share: float) -> float:
    text = os.environ.get("SEQBENCH_EXTEND_BUDGET", "").strip()
    if not text:  # unset, or set empty: the default
        return share
    try:
        share = float(text)
    except ValueError:
        share = math.nan
    if not (math.isfinite(share) and share >= 0):
        raise BadInput(f"SEQBENCH_EXTEND_BUDGET={text!r}: a share of the planned passes' time, 0 (off) or more")
    return share


def ignored_by_resume(args) -> list[str]:
    """The options given beside --resume that it would ignore, as flags, in the parser's order."""
    return [
        f"--{name.replace('_', '-')}"
        for name, value in vars(args).items()
        if name not in RESUME_READS and value is not None and value is not False
    ]


def check_preset_device(preset: Preset, cluster=None) -> None:
    """A preset sized for a GPU is refused without one, naming the presets for a CPU."""
    cuda, where = _cuda_where(cluster)
    if preset.device == "cuda" and not cuda:
        raise BadInput(
            f"--preset {preset.name}: sized for a CUDA GPU, and none is present {where}; on a CPU use --preset "
            f"{preset.cpu_instead}"
        )


def cmd_run(args, argv) -> int:
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
        from .cluster import Cluster  # Ray is optional, imported only here

        cluster = Cluster.connect(args.ray, exclusive_node=args.exclusive_node, threads=args.threads)
    try:
        return _run_on(args, argv, cluster)
    finally:
        if cluster is not None:
            cluster.close()


def _planned_specs(args, preset: Preset, devices: list[str], policy) -> tuple[list[PointSpec], Costs]:
    """`--preset auto`'s points (bench.auto) from this machine's measured costs and memory, and those costs."""
    from . import auto

    dtype = args.dtype or "float32"
    modes = sorted({grid["mode"][0] for grid in preset.grids})
    if args.mode and args.mode not in modes:
        raise BadInput(
            f"--preset auto --mode {args.mode}: the auto preset plans {', '.join(modes)}, not {args.mode}; give one of "
            f"those, or a grid of your own (--layers, --n, ...) with --mode {args.mode}"
        )
    costs = machine_costs(auto.probe_specs(preset.grids, devices, dtype), args.threads)
    specs, notes = auto.plan(preset.grids, devices, dtype, costs, device_memory(devices)[0], policy, args.mode)
    print_lines(notes)
    if not specs:
        raise BadInput(f"--preset auto: no sweep fits this machine ({'; '.join(notes) or 'none planned'})")
    return specs, costs


def _what_to_measure(args, cluster) -> tuple[list[PointSpec], Costs | None, TimingPolicy]:
    """(the specs, the costs measured on the way if any, the policy) of a new run's preset or grid."""
    outside.expect(args.layers, getattr(args, "expect", None))
    grid_given = [f"--{name}" for name in GRID_OPTIONS if getattr(args, name, None) is not None]
    grid_given += ["--causal"] if getattr(args, "causal", False) else []
    if args.preset is not None and grid_given:
        raise BadInput(f"--preset {args.preset} and {' '.join(grid_given)}: give a preset or a grid, not both")
    if args.preset is None:
        return _grid_specs(args, cluster), None, _policy(args, TimingPolicy())
    preset = get_preset(args.preset)
    check_preset_device(preset, cluster)
    # A preset sized for one device measures that device under `auto`, not the CPU beside it too.
    device = preset.device if preset.device and args.device in (None, "auto") else args.device or "auto"
    devices, policy = resolve_devices(device, cluster), _policy(args, preset.timing)
    if preset.planned and cluster is not None:
        raise BadInput(
            f"--preset {preset.name} plans from this machine, not a cluster's: give --ray a preset or a grid"
        )
    if preset.planned:
        return *_planned_specs(args, preset, devices, policy), policy
    return preset.specs(devices, dtype=args.dtype, mode=args.mode), None, policy


def _run_on(args, argv, cluster) -> int:
    from .run import Run

    if args.resume is not None:
        run = Run.resume(args.resume, cluster=cluster)
        if cluster is None and run.meta.get("ray"):
            run.log(f"measuring the rest here, not on Ray (it was begun on {run.meta['ray'].get('address')})")
    else:
        specs, costs, policy = _what_to_measure(args, cluster)
        load = sample_load(since=getattr(args, "load_since", None))
        lines, policy = before_measuring(
            specs,
            policy,
            threads=args.threads,
            yes=args.yes,
            on_cluster=cluster is not None,
            costs=costs,
            load=load,
            started=getattr(args, "started", None),
            dry_run=getattr(args, "dry_run", False),
            startup_s=getattr(args, "startup_s", 0.0) if default_policy.wanted() else None,
        )
        if getattr(args, "dry_run", False):
            print_lines(lines)
            print_lines(["dry run: nothing measured, nothing stored"])
            return 0
        run = Run.create(
            specs,
            policy,
            out=args.out,
            command=argv,
            preset=args.preset,
            threads=args.threads,
            seed=args.seed or 0,
            cluster=cluster,
            load=load,
        )
        print_lines(lines)  # before measuring, which goes ahead
    run.time_default_policy = default_policy.wanted()
    try:
        meta = run.execute(progress=not args.no_progress)
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM (bench.interrupts): 130 or 143
        print(
            f"interrupted: the passes finished so far are stored in {run.dir}; finish the run with "
            f"`python -m bench run --resume {shlex.quote(str(run.dir))}`",
            file=sys.stderr,
        )
        return interrupts.exit_code(exc)
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


def cmd_paths(args, argv) -> int:
    import pandas as pd

    from .paths import DEFAULT_WINDOW, paths_cases, paths_table

    if args.preset is not None:
        given = [f"--{name}" for name in ("layers", "n", "k", "window") if getattr(args, name, None) is not None]
        if given:
            raise BadInput(f"--preset {args.preset} and {' '.join(given)}: give a preset or a grid, not both")
        studies = [
            (cfg.get("layers"), cfg.get("n"), cfg.get("k") or [3], cfg.get("window", DEFAULT_WINDOW))
            for cfg in get_preset(args.preset).paths
        ]
    else:
        once = [None if v is None else list(dict.fromkeys(v)) for v in (args.layers, args.n, args.k or [3])]
        studies = [(*once, args.window or DEFAULT_WINDOW)]
    if not studies or any(not layers or not ns for layers, ns, _, _ in studies):
        raise BadInput("paths: give --preset NAME or --layers and --n")
    for layers, ns, ks, window in studies:
        _check_paths_study(layers, ns, ks, window)
    folder.check_side_table_out("paths", args.out)
    total = sum(len(paths_cases(layers, ns, ks)) for layers, ns, ks, _ in studies)
    bar = progress_bar(total, "paths", "rows", show=not args.no_progress)
    try:
        tables = [paths_table(layers, ns, ks, window=window, on_row=bar.update) for layers, ns, ks, window in studies]
    finally:
        bar.close()
    table = tables[0] if len(tables) == 1 else pd.concat(tables, ignore_index=True)
    return _write_side_table(args, argv, "paths", table)


def _check_paths_study(layers: list[str], ns: list[int], ks: list[int], window: int) -> None:
    """Bad input (exit 2) where one study of `paths` cannot be measured; the warnings it deserves."""
    from .paths import DEFAULT_D, ends_margin

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
    from .folder import store_side_table

    layers = table["layer"].unique() if "layer" in table else []
    path = store_side_table(
        kind, table, out=args.out, command=argv, preset=getattr(args, "preset", None), **_outside_meta(layers)
    )
    print(f"{kind}: {len(table)} rows -> {path}")
    return 0


def _outside_meta(layers) -> dict:
    entries = outside.sources(layers)
    return {"outside_layers": entries} if entries else {}


def cmd_claims(args, argv) -> int:
    from .claims import CLAIMS, claims_frame, measure_claims

    folder.check_side_table_out("claims", args.out)
    bar = progress_bar(len(CLAIMS), "claims", "checked", show=not args.no_progress)
    try:
        table = claims_frame(measure_claims(seed=args.seed, on_claim=bar.update))
    finally:
        bar.close()
    return _write_side_table(args, argv, "claims", table)


def cmd_report(args, argv) -> int:
    from .report import numbers
    from .report.build import build_report

    out = args.out or numbers.LOCAL_REPORT_DIR
    if folder.is_run_dir(out):
        raise BadInput(f"--out {out}: a run folder; a report goes to a folder of its own, e.g. {out}-report")
    bar = progress_bar(None, "report", "figures", show=not args.no_progress)
    try:
        written = build_report(
            args.results,
            out,
            skip_bad=args.skip_bad,
            compare_reference=args.compare == "reference",
            on_figure=bar.update,
        )
    finally:
        bar.close()
    print(
        f"report: {written['points']} points from {written['runs']} runs -> {out / 'report.md'} "
        f"and report.html ({written['figures']} figures, {written['numbers']} citable numbers)"
    )
    return 0


def cmd_cite(args, argv) -> int:
    from .report.numbers import cite_sentence, default_reports, list_numbers

    reports = default_reports() if args.reports is None else [args.reports]
    if args.list is not None:
        if args.key is not None:
            raise BadInput(f"cite {args.key} --list: give a KEY or --list [PATTERN], not both")
        lines, warnings = list_numbers(args.list or None, reports, args.format)
        for warning in warnings:
            print(warning, file=sys.stderr)
        for line in lines:
            print(line)
    elif args.key is None:
        raise BadInput("cite: give a KEY of numbers.json, or --list [PATTERN] to see the keys")
    else:
        print(cite_sentence(args.key, reports, args.format))
    return 0


def first_sentence(doc: str | None) -> str:
    """A docstring's whole first sentence, its first paragraph joined ("0..n-1" and "cfg.dilation" do not end it)."""
    paragraph = " ".join((doc or "").strip().split("\n\n")[0].split())
    end = re.search(r"(?<!\.)\.(?=\s|$)", paragraph)
    return paragraph[: end.end()] if end else paragraph


def _run_lines(runs: list[Path], indent: str) -> list[str]:
    width = max((len(run.name) for run in runs), default=0)
    lines = []
    for run in runs:
        try:
            meta = folder.read_meta(run, required=())
        except RunFailed as exc:
            lines.append(f"{indent}{run.name:{width}s}  damaged: {exc}")
            continue
        label = machine.machine_identity(meta)[1]
        date = (meta.get("started_utc") or "?")[:10]
        what = folder.tables_in(run)
        preset = f"preset {meta['preset']}" if meta.get("preset") else "no preset"
        lines.append(
            f"{indent}{run.name:{width}s}  {meta.get('kind', '?'):6s} {meta.get('status', '?'):11s} {date}  "
            f"{label}  ({preset}; {' '.join(what) or 'no tables'})"
        )
    return lines


def cmd_list(args, argv) -> int:
    from .report import load

    print("presets:")
    for name, preset in load_presets().items():
        size = "planned per machine" if preset.planned else f"{len(preset.specs(['cpu'])):4d} points per device"
        print(f"  {name:8s} {size:>21s}  {preset.description}")
    print("layers:")
    for name, cls in models.LAYERS.items():
        print(f"  {name} (sizes {', '.join(('n', 'd', *cls.uses))})")
        print(f"      {first_sentence(cls.__doc__)}")
    print("stored runs:")
    runs = folder.list_runs(storage.RESULTS_ROOT)
    print("\n".join(_run_lines(runs, "  ") or ["  (none)"]))
    machines = sorted(p for p in load.REFERENCE_DIR.iterdir() if p.is_dir()) if load.REFERENCE_DIR.is_dir() else []
    if machines:
        print("reference runs:")
        for machine_dir in machines:
            print(f"  {machine_dir.name}/")
            print("\n".join(_run_lines(folder.list_runs(machine_dir), "    ") or ["    (none)"]))
    return 0


COMMANDS = {
    "run": cmd_run,
    "paths": cmd_paths,
    "claims": cmd_claims,
    "report": cmd_report,
    "cite": cmd_cite,
    "list": cmd_list,
}
