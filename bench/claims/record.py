"""What every claim shares: the result record, the registry of statements (what each claim checks and
where it is said), the verdict vocabulary, and the small helpers every family uses (seeded generators,
interleaved timing, FLOP counting, the supporting numbers the report cites).

A claim returns a `ClaimResult`:
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
import time
import tomllib
from collections.abc import Callable, Hashable
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path

import pandas as pd
import torch

from bench.flops import count_flops
from bench.threads import pinned_threads
from bench.timing import TimingPolicy, interleaved

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
# (../shared/seeds/, in Chinese): catalog.toml beside this file. `meta.existing_claims` maps each claim here
# to the statements it measures, or says that the notes do not make it.
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
# random, which no median repairs; one thread per call keeps the ratios stable.
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


# Every claim measured here, by claim_id: the one place its statement and source are written.
STATEMENTS: dict[str, Statement] = {
    "dot_product_variance": Statement(
        "For q, k with independent zero-mean unit-variance components, q·k has variance d_k; "
        "dividing by √d_k brings it back to 1.",
        f"{PAPER}, §3.2.1 and footnote 4",
    ),
    "softmax_saturation": Statement(
        "Without the 1/√d_k scaling, large d_k pushes the softmax into saturation (one weight near 1) "
        "where its gradients are extremely small.",
        f"{PAPER}, §3.2.1",
    ),
    "multihead_cost": Statement(
        "Multi-head attention with d_k = d_v = d/h costs about the same as single-head attention of full width d.",
        f"{PAPER}, §3.2.2",
    ),
    "dot_vs_additive": Statement(
        "Dot-product attention is much faster than additive attention in practice, though the two are "
        "similar in theoretical complexity.",
        f"{PAPER}, §3.2.1; additive attention: Bahdanau et al. 2015; d2l.ai §11.3 Attention Scoring Functions",
    ),
    "permutation_equivariance": Statement(
        "Self-attention without positional information is permutation-equivariant: permuting the input "
        "permutes the output; with sinusoidal encodings added it is not.",
        f"{PAPER}, §3.5; {D2L_SELF_ATTENTION}",
    ),
    "pe_rotation": Statement(
        "For any fixed offset k, PE(pos + k) is a linear function of PE(pos): the same rotation M_k for every pos.",
        f"{PAPER}, §3.5; {D2L_SELF_ATTENTION} (relative positional information)",
    ),
    "pe_distinct": Statement(
        "Every position gets a distinct sinusoidal encoding.",
        f"{PAPER}, §3.5; {D2L_SELF_ATTENTION} (absolute positional information)",
    ),
    "pe_wavelengths": Statement(
        "The wavelengths of the sinusoidal encoding form a geometric progression from 2π to 10000·2π.",
        f"{PAPER}, §3.5",
    ),
    "pe_variance_one_third": Statement(
        "Sinusoidal positional encodings have variance about 1/3 (study-note claim used to argue for "
        "the √d_model embedding scale).",
        f"study notes (not in the paper); cf. {PAPER}, §3.4 and §3.5",
    ),
    "embedding_scale": Statement(
        "Multiplying the embeddings by √d_model makes the embedding's scale dominate the positional encoding's.",
        f"{PAPER}, §3.4 (Embeddings and Softmax)",
    ),
    "causal_mask": Statement(
        "A causal mask (−∞ on future positions before the softmax) gives exactly zero weight to future positions.",
        f"{PAPER}, §3.2.3",
    ),
    "extrapolation": Statement(
        "A learned position table cannot represent positions beyond its length; the sinusoidal function can.",
        f"{PAPER}, §3.5 (sinusoids 'may allow the model to extrapolate to sequence lengths longer than "
        f"the ones encountered during training')",
    ),
}


@cache
def catalog() -> dict:
    """catalog.toml, read once."""
    with open(CATALOG_PATH, "rb") as f:
        return tomllib.load(f)


def note_refs(claim_id: str) -> tuple[str, str]:
    """(seed_ref, quote) of a claim: every note line of the catalogue statements it measures, and the
    words of the first; ("", "") for a claim the notes do not make."""
    covered = catalog()["meta"]["existing_claims"].get(claim_id)
    if covered is None:
        raise KeyError(f"claim {claim_id!r} is not in {CATALOG_PATH} (meta.existing_claims)")
    if isinstance(covered, str):  # "not in the notes"
        return "", ""
    entries = {entry["id"]: entry for entry in catalog()["statement"]}
    refs = [ref for statement_id in covered for ref in entries[statement_id]["seed_ref"]]
    return "; ".join(dict.fromkeys(refs)), entries[covered[0]]["quote"]


def _result(claim_id: str, measured, expected: str, verdict: str, details: dict, unit: str = "1") -> ClaimResult:
    """The ClaimResult of `claim_id`, its statement and source from STATEMENTS, its note lines from the
    catalogue."""
    said = STATEMENTS[claim_id]
    seed_ref, quote = note_refs(claim_id)
    return ClaimResult(claim_id, said.text, measured, expected, verdict, said.source, seed_ref, quote, unit, details)


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
    clock: Callable[[], float] = time.perf_counter,
) -> dict[Hashable, float]:
    """Median seconds per call of each callable, by bench.timing.interleaved (see TIME_POLICY above) on
    TIME_THREADS threads, in inference mode. `clock` is the seam for tests."""
    with pinned_threads(TIME_THREADS), torch.inference_mode():
        timings = interleaved(fns, policy, clock=clock)
    return {name: t.median_s for name, t in timings.items()}


def counted_flops(fn: Callable[[], object]) -> int:
    """FLOPs of one call of `fn` by bench.flops.count_flops (2 per multiply-accumulate of matrix products).
    An operator that ran without a formula would make the count a lower bound: that is an error here,
    since every claim that counts compares counts with each other or with a formula."""
    with torch.inference_mode():
        count = count_flops(fn)
    if count.uncounted_ops:
        raise RuntimeError(f"FLOP count is a lower bound: no formula for {', '.join(count.uncounted_ops)}")
    return count.total
