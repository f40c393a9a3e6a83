"""The command line: `python -m bench COMMAND`, parsed and checked, then bench.commands (exit codes: interface.md)."""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
import traceback
from pathlib import Path

import psutil

import models

from . import interrupts, machine, outside
from .commands import COMMANDS, MAX_PATHS_N
from .errors import BadInput, RunFailed
from .policy import (
    CLOCK_CHOICES,
    EXTEND_BUDGET,
    MAX_PASSES,
    MAX_ROUNDS,
    MAX_TARGET_TIME_S,
    MIN_ROUNDS_PER_PASS,
    TimingPolicy,
)
from .preflight import LONG_RUN_S
from .spec import MODES
from .units import format_duration

DESCRIPTION = (
    "Measure the complexity table of sequence layers (Vaswani et al. 2017, Table 1) on this machine: FLOPs, "
    "time, memory and path length of convolution, recurrent and self-attention layers, swept over n, d and k, "
    "fitted against the table and reported."
)


class _Parser(argparse.ArgumentParser):
    """One line and no usage dump on a bad argument; no option taken for another by its prefix."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, allow_abbrev=False, **kwargs)

    def error(self, message):
        raise BadInput(message)


MAX_SEED = 2**32 - 1  # what torch, numpy's legacy seeding and random all take (the claims' seed·1000 + i too)


# Converters raise ArgumentTypeError, reported as "argument --n: <message>" (a ValueError: "invalid value").
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
    layers = []
    for layer in (t.strip() for t in text.split(",") if t.strip()):
        if ":" in layer:
            try:
                layer = outside.register(layer)
            except BadInput as exc:
                raise argparse.ArgumentTypeError(str(exc)) from None
        elif layer not in models.LAYERS:
            raise argparse.ArgumentTypeError(
                f"{layer!r} is not a built layer; allowed: {', '.join(models.LAYERS)}, or FILE.py:NAME, "
                "package.module:NAME, torch:NAME"
            )
        layers.append(layer)
    if not layers:
        raise argparse.ArgumentTypeError("empty; allowed: " + ", ".join(models.LAYERS))
    return layers


COMMAND_TEXT = {  # (help, description)
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
        "regenerate reports/local/ from stored runs (measures nothing)",
        "Write report.md, report.html, figures/, fits.csv, numbers.json, table.tex.",
    ),
    "cite": (
        "one measured number with its provenance; --list lists the keys",
        "Print one number of numbers.json (reports/local/, then the shipped reports/reference/) to paste "
        "(--format text, markdown or latex), or list the keys with --list.",
    ),
}


def _grid_options(parser: argparse.ArgumentParser, preset_help: str, n_example: str, window_note: str) -> None:
    parser.add_argument("--preset", help=preset_help)
    parser.add_argument("--layers", type=_layer_list, help="comma-separated layer names (see `list`)")
    parser.add_argument("--n", type=_int_list("n"), help=f"sequence lengths, e.g. {n_example}")
    parser.add_argument("--k", type=_int_list("k"), help="odd kernel sizes of the convolutions, e.g. 3,5 (default 3)")
    parser.add_argument(
        "--window", type=_positive_int("window"), help=f"r, the window of restricted attention {window_note}"
    )


def _no_progress(parser) -> None:
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress (a bar on a terminal; in a log file or a pipe, a line every few seconds)",
    )


def _run_sizes(run: argparse.ArgumentParser) -> None:
    run.add_argument("--d", type=_int_list("d"), help="widths")
    run.add_argument(
        "--dilation", type=_int_list("dilation"), help="dilations of conv_dilated, e.g. 1,4 (default: k itself)"
    )
    run.add_argument("--heads", type=_positive_int("heads"), help="attention heads (default 1)")
    run.add_argument(
        "--expect",
        action="append",
        help="a cost a layer from outside is judged against, as Table 1's rows are: NAME=EXPR, or EXPR for each "
        "(an expression in n, d, k, window: 'n**2*d', 'n*d*log2(n)')",
    )
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
        help="inference (default): the forward pass; train: one forward and one backward pass; decode: the token "
        "at position n from the state of n positions (key/value cache, recurrent state, ...); recompute: that "
        "token by the causal forward over all n + 1 positions (with a preset: its grids of the same kind in this mode)",
    )
    run.add_argument(
        "--causal", action="store_true", help="the layers' causal form: output i from inputs 0..i (a grid's)"
    )


def _run_timing(run: argparse.ArgumentParser) -> None:
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
        "--no-extend",
        action="store_true",
        help="measure the grid exactly as given: no points the planner adds to a sweep whose time does not decide yet "
        f"(default: added, within {EXTEND_BUDGET:g}x the planned passes' time, said before the run)",
    )
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan and its estimate (with the points the planner expects to add) and exit: nothing "
        "measured beyond the machine's costs, nothing stored",
    )
    run.add_argument(
        "--seed",
        type=_bounded_int(0, MAX_SEED, "what torch, numpy and random all accept as a seed"),
        help=f"seed of the layers' weights, the inputs and the shuffled order of the passes, 0 to {MAX_SEED} "
        "(default 0)",
    )


def _run_output(run: argparse.ArgumentParser) -> None:
    run.add_argument("--out", type=path_given, help="a new or empty folder for the run (default results/<run-id>)")
    run.add_argument(
        "--resume",
        type=path_given,
        help="finish an interrupted or killed run in this folder, as its plan.json says (alone, or with --no-progress)",
    )
    run.add_argument(
        "--yes",
        action="store_true",
        help="measure without asking: before a new run its duration and peak memory are estimated, and a plan "
        f"above {format_duration(LONG_RUN_S)}, or with a point above the memory available, is "
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


def _run_options(run: argparse.ArgumentParser) -> None:
    _grid_options(run, "a preset from presets.toml (see `list`)", "64,128,256", "(required for it)")
    _run_sizes(run)
    _run_timing(run)
    _run_output(run)
    _no_progress(run)


def _paths_options(paths: argparse.ArgumentParser) -> None:
    _grid_options(paths, "take layers, n, k and window from a preset", f"64,256 (2 to {MAX_PATHS_N})", "(default 16)")
    paths.add_argument("--out", type=path_given, help="a run folder to add paths.csv to, or a new folder")
    _no_progress(paths)


def _claims_options(claims: argparse.ArgumentParser) -> None:
    claims.add_argument(
        "--seed",
        type=_bounded_int(0, MAX_SEED, "what torch, numpy and random all accept as a seed"),
        default=0,
        help=f"seed of the random inputs and weights the claims are measured on, 0 to {MAX_SEED} (default 0)",
    )
    claims.add_argument("--out", type=path_given, help="a run folder to add claims.csv to, or a new folder")
    _no_progress(claims)


def _report_options(report: argparse.ArgumentParser) -> None:
    report.add_argument(
        "--results",
        type=path_given,
        nargs="+",
        help="run folders, or folders of runs, to any depth (default: this machine's runs under results/, "
        "or the reference runs where it has none yet)",
    )
    report.add_argument(
        "--out",
        type=path_given,
        metavar="DIR",
        help="the folder to write report.md, report.html, figures/ and the tables to (default reports/local/; "
        "reports/reference/ is the shipped report of results/reference/)",
    )
    report.add_argument("--skip-bad", action="store_true", help="report the other runs when one is damaged")
    _no_progress(report)
    report.add_argument(
        "--compare",
        choices=["reference"],
        help="set the reference runs (results/reference/) beside the others: each machine apart, never averaged",
    )


CITE_FORMAT_HELP = "text: a sentence; markdown, latex: value, interval, a footnote (machine, device, run, commit)"


def _cite_options(cite: argparse.ArgumentParser) -> None:
    cite.add_argument(
        "key",
        nargs="?",
        help="a key of numbers.json, e.g. reference.intel-xeon-2c-vm.cpu.attention.time.exponent_n: machine, device, "
        "layer, what (not with --list)",
    )
    cite.add_argument(
        "--list",
        nargs="?",
        const="",
        metavar="PATTERN",
        help="list the keys, one a line with value, unit and the report it is read from; only those matching "
        "PATTERN if given: a substring of the key, or a shell glob (fnmatch) when PATTERN has *, ? or [, e.g. "
        "'*.exponent_n'",
    )
    cite.add_argument("--format", choices=("text", "markdown", "latex"), default="text", help=CITE_FORMAT_HELP)
    cite.add_argument(
        "--reports",
        type=path_given,
        metavar="DIR",
        help="the report folder that holds numbers.json (default: reports/local/, then reports/reference/; "
        "a key in both is read from the first)",
    )


def path_given(text: str) -> Path:
    if not text.strip():
        raise argparse.ArgumentTypeError("an empty path (it would mean the current folder); give a folder")
    return Path(text)


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
    for name, options in (
        ("run", _run_options),
        ("paths", _paths_options),
        ("claims", _claims_options),
        ("report", _report_options),
        ("cite", _cite_options),
        ("list", None),
    ):
        words, description = COMMAND_TEXT[name]
        command = sub.add_parser(name, parents=[common], help=words, description=description)
        if options is not None:
            options(command)
    return parser


def _print_paths_as_given() -> None:
    """A path that is not UTF-8 is printed as its own bytes, as `ls` shows it, not as a UnicodeEncodeError."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="surrogateescape")


def console() -> None:
    sys.exit(main())


def main(argv: list[str] | None = None, load_since=None) -> int:
    _print_paths_as_given()
    started = psutil.Process().create_time() if argv is None else time.time()
    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv
    try:
        with interrupts.as_exceptions():  # Ctrl-C and SIGTERM: the run stores what it has, then one line here
            args = build_parser().parse_args(argv)
            machine.given_commit()
            args.started, args.load_since, args.startup_s = started, load_since, time.time() - started
            return COMMANDS[args.command](args, ["python -m bench", *argv])
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        print(f"interrupted ({exc})" if str(exc) else "interrupted", file=sys.stderr)
        return interrupts.exit_code(exc)
    except BrokenPipeError:  # the reader went away (`cite --list | head`): what it read was whole
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:  # any other failure: a message, the traceback only with --debug
        if interrupts.received() is not None and not debug:  # code that swallowed the interrupt failed after it
            print(f"interrupted ({interrupts.NAMES.get(interrupts.received())})", file=sys.stderr)
            return 128 + interrupts.received()
        if debug:
            traceback.print_exc()
        print(
            f"error: {type(exc).__name__}: {exc}" if not isinstance(exc, RunFailed) else f"error: {exc}",
            file=sys.stderr,
        )
        return 1
