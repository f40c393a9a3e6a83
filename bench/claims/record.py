"""What every claim shares: the result record, the registry of claims (`@claim`), and the helpers every family uses:
seeded generators, interleaved timing, FLOP counting, the numbers the report cites (`details["numbers"]`)."""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Callable, Hashable
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import cache, wraps
from pathlib import Path

import pandas as pd
import torch

from bench.flops import count_flops
from bench.point import autograd_mode
from bench.threads import pinned_threads
from bench.timing import CPU, Clocks, TimingPolicy, interleaved

from .verdict import Graded, Outcome, Rule

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
# The study notes' checkable statements, each with the note's file, line and words.
CATALOG_PATH = Path(__file__).with_name("catalog.toml")

PAPER = "Vaswani et al. 2017, Attention Is All You Need"
D2L_SELF_ATTENTION = "d2l.ai §11.6 Self-Attention and Positional Encoding"

D_KS = (16, 64, 256, 1024)
D_MODEL = 512  # the paper's d_model

# Times compare variants, so only ratios matter: interleaved passes, one thread, its CPU clock (docs/method.md).
TIME_POLICY = TimingPolicy(min_rounds=9, max_rounds=9, target_s=0.1, min_round_s=0.015, passes=3)
TIME_THREADS = 1
CLAIMS_THREADS = 1  # measure_claims as a whole


@dataclass(frozen=True)
class ClaimResult:
    claim_id: str
    statement: str  # the claim, as the textbook makes it
    measured: float | int | str  # the number (or text) the verdict rests on
    expected: str  # what `measured` is and what the claim predicts for it
    verdict: str  # one of VERDICTS; "partly": holds under some of the measured conditions only
    source: str  # paper and section, or d2l.ai chapter
    seed_ref: str = ""  # where the study notes say it, "file:line; ..." (empty: they do not)
    quote: str = ""  # the note's words at the first seed_ref
    unit: str = "1"
    details: dict = field(default_factory=dict, hash=False, compare=False)  # the figure's series, JSON-able

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r}: allowed {', '.join(VERDICTS)}")
        if self.measured is None or self.measured == "":
            raise ValueError(f"claim {self.claim_id}: measured must be filled")


def claims_frame(results: list[ClaimResult]) -> pd.DataFrame:
    """One row per claim: the interface columns, then `unit` and `details` (JSON, read back by the report)."""
    rows = []
    for r in results:
        row = asdict(r)
        row["details"] = json.dumps(row["details"])  # key order kept: the report lists numbers in it
        rows.append(row)
    return pd.DataFrame(rows, columns=[*COLUMNS, "unit", "details"])


@dataclass(frozen=True)
class Statement:
    text: str
    source: str
    notes: tuple[str, ...] | None = None  # catalog.toml statements it measures; None: not in the notes


STATEMENTS: dict[str, Statement] = {}  # by claim_id, filled by `claim`
MEASURES: list[Callable[[int], ClaimResult]] = []  # in the order they were declared


def claim(claim_id: str, text: str, source: str, notes: tuple[str, ...] | None):
    """Declare `measure(seed) -> Outcome` as claim `claim_id`, returning its ClaimResult."""

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
                {
                    **outcome.details,
                    "checks": checks_of(outcome.rule),
                    "statements": list(STATEMENTS[claim_id].notes or ()),
                },
            )

        MEASURES.append(result)
        return result

    return declare


def checks_of(rule: Rule | Graded) -> list[dict]:
    """details["checks"]: each check's sentence, whether it was met, and its tier in the rule."""
    tiers = (
        (("holds", rule.holds), ("partly", rule.partly), ("needs", rule.needs))
        if isinstance(rule, Rule)
        else (("graded", rule.checks),)
    )
    return [{"sentence": c.sentence, "met": bool(c.met), "tier": tier} for tier, checks in tiers for c in checks]


@cache
def catalog() -> dict:
    with open(CATALOG_PATH, "rb") as f:
        return tomllib.load(f)


def note_refs(claim_id: str) -> tuple[str, str]:
    """(seed_ref, quote): the note lines of the catalogue statements the claim measures, the first's words."""
    covered = STATEMENTS[claim_id].notes
    if not covered:
        return "", ""
    entries = {entry["id"]: entry for entry in catalog()["statement"]}
    missing = [statement_id for statement_id in covered if statement_id not in entries]
    if missing:
        raise KeyError(f"claim {claim_id!r}: {', '.join(missing)} not in {CATALOG_PATH}")
    refs = [ref for statement_id in covered for ref in entries[statement_id]["seed_ref"]]
    return "; ".join(dict.fromkeys(refs)), entries[covered[0]]["quote"]


def rounded(value: float | int | torch.Tensor, digits: int = 6) -> float:
    """A plain float with `digits` significant digits."""
    value = float(value)
    if value == 0 or not math.isfinite(value):
        return value
    return float(f"{value:.{digits}g}")


def numbers_of(**items: tuple[float | int | str, str, str]) -> dict:
    """details["numbers"]: name -> (value, unit, label)."""
    return {
        k: {"value": v if isinstance(v, (int, str)) else rounded(v), "unit": u, "label": lab}
        for k, (v, u, lab) in items.items()
    }


@contextmanager
def seeded(seed: int):
    """torch's global generator seeded inside (for modules built with their default init), restored after."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def generator_for(seed: int, offset: int) -> torch.Generator:
    # One stream per claim, so adding a claim never changes another's numbers.
    return torch.Generator().manual_seed(seed * 1000 + offset)


def interleaved_times_s(
    fns: dict[Hashable, Callable[[], object]],
    policy: TimingPolicy = TIME_POLICY,
    clocks: Clocks | None = None,
    autograd: bool = False,
) -> dict[Hashable, float]:
    """Median seconds per call of each callable, interleaved, on the CPU clock (`clocks`: the tests' seam)."""
    with pinned_threads(TIME_THREADS), autograd_mode(autograd):
        timings = interleaved(fns, policy, clocks=clocks or Clocks.for_call(TIME_THREADS))
    return {name: t.on(CPU).median_s for name, t in timings.items()}


def parameter_count(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def counted_flops(fn: Callable[[], object], autograd: bool = False) -> int:
    """FLOPs of one call of `fn`; an operator without a formula is an error, since claims compare counts."""
    with autograd_mode(autograd):
        count = count_flops(fn)
    if count.uncounted_ops:
        raise RuntimeError(f"FLOP count is a lower bound: no formula for {', '.join(count.uncounted_ops)}")
    return count.total
