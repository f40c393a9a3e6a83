"""What every claim shares: the result record, the registry of statements (what each claim checks and
where it is said), and the small helpers every family uses (seeded generators, interleaved timing, FLOP
counting, the supporting numbers the report cites).

A claim is a function `measure(seed) -> Outcome` (bench.claims.verdict: its checks, each bound stated once,
and the rule that makes them a verdict) declared with `@claim(claim_id, text, source, notes=...)`; the
decorator turns the `Outcome` into the `ClaimResult` (statement and source from the registry, note lines
from the catalogue), so a claim names its id once.

A claim's `ClaimResult`:
  - `measured`: the one number (or, where the outcome is an exception, the short text) the verdict rests
    on; `expected` says what that number is and which value or bound the claim predicts.
  - `verdict`: "holds", "fails" or "partly" (the claim holds under some of the measured conditions only).
  - `details`: the series behind the claim's figure and the supporting numbers, JSON-serialisable;
    `claims_frame` stores it as a JSON string in a `details` column after the interface columns, and
    `bench.report.claims` reads its figures back from that column (claims.csv is all that is stored).
    Supporting numbers the report cites sit in `details["numbers"]`: {name: {"value", "unit", "label"}}.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Callable, Hashable
from dataclasses import asdict, dataclass, field
from functools import cache, wraps
from pathlib import Path

import pandas as pd
import torch

from bench.flops import count_flops
from bench.point import autograd_mode
from bench.threads import pinned_threads
from bench.timing import CPU, Clocks, TimingPolicy, interleaved

from .verdict import Outcome

VERDICTS = ("holds", "fails", "partly")
COLUMNS = (  # bench/interface.md
    "claim_id",
    "statement",
    "measured",
    "expected",
    "verdict",
    "source",
    "seed_ref",
    "quote",
)
# The study notes' checkable statements, each with the file and line that says it and the note's words
# (../shared/seeds/, in Chinese): catalog.toml beside this file; each claim names the statements it measures.
CATALOG_PATH = Path(__file__).with_name("catalog.toml")

PAPER = "Vaswani et al. 2017, Attention Is All You Need"
D2L_SELF_ATTENTION = "d2l.ai §11.6 Self-Attention and Positional Encoding"

# Sizes shared by several claims.
D_KS = (16, 64, 256, 1024)  # key widths for the scaling claims (1, 2)
D_MODEL = 512  # the paper's d_model, for the positional-encoding claims

# Timing (claims 3 and 4 compare times of variants, so only ratios matter): the sweep's engine,
# bench.timing.interleaved, with TIME_POLICY: every variant's rounds are split over passes that visit the
# variants in shuffled order, so a change of load (other processes on the machine) hits every variant
# alike. One thread: oversubscribed OpenMP threads on a shared machine were seen to slow a call 50-fold at
# random, which no median repairs; one thread per call keeps the ratios stable, and its own CPU clock (the
# calling thread's CPU time, bench.timing) keeps them on a busy machine, where the wall clock counts the time
# other programs held the core.
TIME_POLICY = TimingPolicy(min_rounds=9, max_rounds=9, target_s=0.1, min_round_s=0.015, passes=3)
TIME_THREADS = 1
CLAIMS_THREADS = 1  # measure_claims as a whole (see its docstring)


@dataclass(frozen=True)
class ClaimResult:
    claim_id: str  # short stable slug
    statement: str  # the claim, as the textbook makes it
    measured: float | int | str  # the number (or text) the verdict rests on; always filled
    expected: str  # what `measured` is and what the claim predicts for it
    verdict: str  # one of VERDICTS
    source: str  # paper and section, or d2l.ai chapter
    seed_ref: str = ""  # where the study notes say it: "file:line; file:line" (empty: the notes do not)
    quote: str = ""  # the note's words at the first seed_ref
    unit: str = "1"  # unit of `measured` ("1": dimensionless)
    details: dict = field(default_factory=dict, hash=False, compare=False)

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r}: allowed {', '.join(VERDICTS)}")
        if self.measured is None or self.measured == "":
            raise ValueError(f"claim {self.claim_id}: measured must be filled")


def claims_frame(results: list[ClaimResult]) -> pd.DataFrame:
    """One row per claim: the interface columns first, then `unit` and `details` (a JSON string)."""
    rows = []
    for r in results:
        row = asdict(r)
        row["details"] = json.dumps(row["details"])  # key order kept: the report lists numbers in it
        rows.append(row)
    return pd.DataFrame(rows, columns=[*COLUMNS, "unit", "details"])


@dataclass(frozen=True)
class Statement:
    """A claim as the textbook makes it, and where."""

    text: str
    source: str  # paper and section, or d2l.ai chapter
    notes: tuple[str, ...] | None = None  # catalog.toml statements it measures; None: not in the notes


# ------------------------------------------------------------------------ the registry
# Every claim measured here, by claim_id: its statement, its source, and the catalogue statements (the study
# notes') it measures, written once, where the claim is (the `claim` decorator in each family's module).
STATEMENTS: dict[str, Statement] = {}
MEASURES: list[Callable[[int], ClaimResult]] = []  # the claims' functions, in the order they were declared


def claim(claim_id: str, text: str, source: str, notes: tuple[str, ...] | None):
    """Declare the function below, `measure(seed) -> Outcome`, as claim `claim_id`: what it checks (`text`, in
    English), where the paper or d2l says it (`source`), and which statements of catalog.toml it measures
    (`notes`; None: the study notes do not make this claim). The declared function returns the ClaimResult;
    the measuring function itself stays reachable as its `__wrapped__`."""

    def declare(measure: Callable[[int], Outcome]) -> Callable[[int], ClaimResult]:
        if claim_id in STATEMENTS:
            raise ValueError(f"claim {claim_id!r} declared twice")
        STATEMENTS[claim_id] = Statement(text, source, notes)

        @wraps(measure)
        def result(seed: int) -> ClaimResult:
            outcome = measure(seed)
            seed_ref, quote = note_refs(claim_id)
            return ClaimResult(
                claim_id,
                text,
                outcome.measured,
                outcome.expected,
                outcome.verdict,
                source,
                seed_ref,
                quote,
                outcome.unit,
                outcome.details,
            )

        MEASURES.append(result)
        return result

    return declare


@cache
def catalog() -> dict:
    """catalog.toml, read once."""
    with open(CATALOG_PATH, "rb") as f:
        return tomllib.load(f)


def note_refs(claim_id: str) -> tuple[str, str]:
    """(seed_ref, quote) of a claim: every note line of the catalogue statements it measures, and the
    words of the first; ("", "") for a claim the notes do not make."""
    covered = STATEMENTS[claim_id].notes
    if not covered:
        return "", ""
    entries = {entry["id"]: entry for entry in catalog()["statement"]}
    missing = [statement_id for statement_id in covered if statement_id not in entries]
    if missing:
        raise KeyError(f"claim {claim_id!r}: {', '.join(missing)} not in {CATALOG_PATH}")
    refs = [ref for statement_id in covered for ref in entries[statement_id]["seed_ref"]]
    return "; ".join(dict.fromkeys(refs)), entries[covered[0]]["quote"]


def _num(value: float | int | torch.Tensor, digits: int = 6) -> float:
    """A plain float with `digits` significant digits, for JSON and the CSV."""
    value = float(value)
    if value == 0 or not math.isfinite(value):
        return value
    return float(f"{value:.{digits}g}")


def _numbers(**items: tuple[float | int | str, str, str]) -> dict:
    """details["numbers"]: name -> (value, unit, label)."""
    return {
        k: {"value": v if isinstance(v, (int, str)) else _num(v), "unit": u, "label": lab}
        for k, (v, u, lab) in items.items()
    }


def _generator(seed: int, offset: int) -> torch.Generator:
    # One independent stream per claim, so adding a claim never changes another's numbers.
    return torch.Generator().manual_seed(seed * 1000 + offset)


def interleaved_times_s(
    fns: dict[Hashable, Callable[[], object]],
    policy: TimingPolicy = TIME_POLICY,
    clocks: Clocks | None = None,
    autograd: bool = False,
) -> dict[Hashable, float]:
    """Median seconds per call of each callable on the CPU clock of its one thread, by bench.timing.interleaved
    (see TIME_POLICY above) on TIME_THREADS threads, in inference mode (with autograd on where `autograd`).
    `clocks` is the seam for tests."""
    with pinned_threads(TIME_THREADS), autograd_mode(autograd):
        timings = interleaved(fns, policy, clocks=clocks or Clocks.for_call(TIME_THREADS))
    return {name: t.on(CPU).median_s for name, t in timings.items()}


def counted_flops(fn: Callable[[], object], autograd: bool = False) -> int:
    """FLOPs of one call of `fn` by bench.flops.count_flops (2 per multiply-accumulate of matrix products),
    in inference mode (with autograd on where `autograd`: a backward pass's kernels count too). An operator
    that ran without a formula would make the count a lower bound: that is an error here, since every claim
    that counts compares counts with each other or with a formula."""
    with autograd_mode(autograd):
        count = count_flops(fn)
    if count.uncounted_ops:
        raise RuntimeError(f"FLOP count is a lower bound: no formula for {', '.join(count.uncounted_ops)}")
    return count.total
