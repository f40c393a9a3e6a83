"""The command line: `python -m bench COMMAND`. Parses and validates everything before measuring, then
calls the probes and the storage. Exit codes (bench/interface.md): 0 done; 2 bad input, one line on stderr
naming the bad value and what is allowed, no traceback; 1 any other failure (a traceback only with
--debug)."""

from __future__ import annotations

import argparse
import itertools
import re
import sys
import traceback
from dataclasses import replace
from pathlib import Path

import models

from . import machine, storage
from .errors import BadInput, RunFailed
from .presets import get_preset, load_presets
from .spec import PointSpec, expand_grid
from .timing import TimingPolicy

DESCRIPTION = (
    "Measure the complexity table of sequence layers (Vaswani et al. 2017, Table 1) on this machine: FLOPs, "
    "time, memory and path length of convolution, recurrent and self-attention layers, swept over n, d and k, "
    "fitted against the table and reported."
)


class _Parser(argparse.ArgumentParser):
    """argparse prints usage and exits 2 on a bad argument; we want one line and no usage dump."""

    def error(self, message):
        raise BadInput(message)


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


def _positive_float(name: str):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number; give a positive number of seconds") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{text!r}: must be positive")
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


def resolve_devices(device: str) -> list[str]:
    """`auto`: the CPU and, if present, the GPU; `cuda` must be present."""
    if device == "auto":
        return ["cpu"] + (["cuda"] if machine.cuda_available() else [])
    if device == "cuda" and not machine.cuda_available():
        raise BadInput("--device cuda: no CUDA GPU is present on this machine; allowed here: cpu, auto")
    return [device]


# ---------------------------------------------------------------------------------------------- run
def _grid_specs(args) -> list[PointSpec]:
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
        devices=resolve_devices(args.device),
        dtypes=[args.dtype or "float32"],
    )


GRID_OPTIONS = ("layers", "n", "d", "k", "heads", "batch", "window")
POLICY_OPTIONS = ("rounds", "target_time", "passes", "threads")


def _policy(args, policy: TimingPolicy) -> TimingPolicy:
    """The preset's (or default) timing policy with --rounds, --target-time, --passes applied."""
    if args.rounds is not None:
        policy = replace(policy, min_rounds=args.rounds, max_rounds=max(args.rounds, policy.max_rounds))
    if args.target_time is not None:
        policy = replace(policy, target_s=args.target_time)
    if args.passes is not None:
        policy = replace(policy, passes=args.passes)
    return policy


def cmd_run(args, argv) -> int:
    from .fits import plan_warnings  # noqa: PLC0415 - keeps `--help` fast
    from .run import Run  # noqa: PLC0415

    grid_given = [f"--{name}" for name in GRID_OPTIONS if getattr(args, name) is not None]
    if args.resume is not None:
        given = (
            (["--preset"] if args.preset else [])
            + grid_given
            + [f"--{name.replace('_', '-')}" for name in POLICY_OPTIONS if getattr(args, name) is not None]
        )
        if given:
            raise BadInput(f"--resume {args.resume}: finishes the run as planned; drop {' '.join(given)}")
        run = Run.resume(args.resume)
    else:
        if args.preset is not None and grid_given:
            raise BadInput(f"--preset {args.preset} and {' '.join(grid_given)}: give a preset or a grid, not both")
        if args.preset is not None:
            preset = get_preset(args.preset)
            specs, policy = preset.specs(resolve_devices(args.device), dtype=args.dtype), preset.timing
        else:
            specs, policy = _grid_specs(args), TimingPolicy()
        warnings = plan_warnings(specs)
        run = Run.create(
            specs,
            _policy(args, policy),
            out=args.out,
            command=argv,
            preset=args.preset,
            threads=args.threads,
            seed=args.seed,
        )
        for line in warnings:  # before measuring, which goes ahead
            print(f"warning: {line}", file=sys.stderr)
    try:
        meta = run.execute(progress=not args.no_progress)
    except KeyboardInterrupt:
        print(
            f"interrupted: the passes finished so far are stored in {run.dir}; finish the run with "
            f"`python -m bench run --resume {run.dir}`",
            file=sys.stderr,
        )
        return 1
    summary = ", ".join(f"{v} {k}" for k, v in meta["status_counts"].items())
    print(
        f"run {run.dir.name}: {meta['points_stored']} points ({summary}; {meta['points_noisy']} noisy, "
        f"{meta['points_remeasured']} measured again, {meta['points_unreliable']} unreliable) in "
        f"{meta['measure_s']:.0f} s on {meta['threads']} thread(s) -> {run.dir}"
    )
    return 0


# -------------------------------------------------------------------------------------------- paths
def cmd_paths(args, argv) -> int:
    from .paths import DEFAULT_D, DEFAULT_WINDOW, paths_table  # noqa: PLC0415

    if args.preset is not None:
        cfg = get_preset(args.preset).paths or {}
        layers, ns, ks, window = cfg.get("layers"), cfg.get("n"), cfg.get("k"), cfg.get("window", DEFAULT_WINDOW)
    else:
        layers, ns, ks, window = args.layers, args.n, args.k or [3], args.window or DEFAULT_WINDOW
    if not layers or not ns:
        raise BadInput("paths: give --preset NAME or --layers and --n")
    for layer, n, k in itertools.product(layers, ns, ks):  # each layer's own check (models/), as in a sweep
        try:
            models.check(layer, models.LayerConfig(d=DEFAULT_D, k=k, window=window), n)
        except ValueError as exc:
            raise BadInput(str(exc)) from None
    table = paths_table(layers, ns, ks, window=window)
    return _write_side_table(args, argv, "paths", table)


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
        default="auto",
        help="cpu, cuda, or auto: every device present (default)",
    )
    run.add_argument("--dtype", choices=list(models.DTYPES), help="default float32")
    run.add_argument(
        "--threads",
        type=_positive_int("threads"),
        help="torch intra-op threads, pinned for the run (default: the physical cores other "
        "processes leave free, less one for the system; see bench/load.py)",
    )
    run.add_argument("--rounds", type=_positive_int("rounds"), help="minimum timed rounds")
    run.add_argument(
        "--target-time",
        type=_positive_float("target-time"),
        help="seconds of timed rounds per point, roughly (default: the preset's)",
    )
    run.add_argument(
        "--passes", type=_positive_int("passes"), help="interleaved passes over the plan (default: the preset's)"
    )
    run.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the layers' weights, the inputs and the shuffled order of the passes (default 0)",
    )
    run.add_argument("--out", type=Path, help="a new or empty folder for the run (default results/<run-id>)")
    run.add_argument("--resume", type=Path, help="finish an interrupted or killed run in this folder")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")

    paths = command("paths")
    _grid_options(paths, "take layers, n, k and window from a preset", "64,256", "(default 16)")
    paths.add_argument("--out", type=Path, help="a run folder to add paths.csv to, or a new folder")

    claims = command("claims")
    claims.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the random inputs and weights the claims are measured on (default 0)",
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
