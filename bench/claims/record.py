"""What every claim shares: the result record, the registry (`@claim`), seeded generators, the report's numbers."""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import cache, wraps
from pathlib import Path

import pandas as pd
import torch

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
D2L_ATTENTION_SCORING = "d2l.ai §11.3 Attention Scoring Functions"
TABLE1 = f"{PAPER}, §4 and Table 1"
D2L_CNN_RNN_SA = f"{D2L_SELF_ATTENTION} (§11.6.2 Comparing CNNs, RNNs, and Self-Attention)"

D_KS = (16, 64, 256, 1024)
D_MODEL = 512  # the paper's d_model


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


_OWN_ID = object()


def claim(text: str, source: str, notes: tuple[str, ...] | None | object = _OWN_ID, claim_id: str | None = None):
    """Declare `measure(seed) -> Outcome` a claim, id the function's name (or `claim_id`), notes its catalogue's."""

    def declare(measure: Callable[[int], Outcome]) -> Callable[[int], ClaimResult]:
        own_id = claim_id or measure.__name__
        return _registered(own_id, Statement(text, source, (own_id,) if notes is _OWN_ID else notes), measure)

    return declare


def _registered(claim_id: str, said: Statement, measure: Callable[[int], Outcome]) -> Callable[[int], ClaimResult]:
    if claim_id in STATEMENTS:
        raise ValueError(f"claim {claim_id!r} declared twice")
    STATEMENTS[claim_id] = said

    @wraps(measure)
    def result(seed: int) -> ClaimResult:
        outcome = measure(seed)
        seed_ref, quote = note_refs(claim_id)
        return ClaimResult(
            claim_id,
            said.text,
            outcome.measured,
            outcome.expected,
            outcome.verdict,
            said.source,
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
