"""bench.claims.verdict, the verdict builder, on hand-computed cases: each relation on both sides of its
bound and exactly on it, NaN and unmeasured values, each rule's verdicts, the text `expected` is written
from; and the `claim` decorator that turns an Outcome into a ClaimResult."""

from __future__ import annotations

import math

import pytest

from bench.claims import record
from bench.claims import verdict as V
from bench.claims.verdict import (
    Check,
    Graded,
    Outcome,
    Rule,
    above,
    all_met,
    at_least,
    at_most,
    below,
    between,
    equals,
    is_true,
    some_met,
    within,
)

NAN = float("nan")


# ------------------------------------------------------------------------ relations
@pytest.mark.parametrize(
    ("check", "met"),
    [
        (at_most("x", 0.5, 1.0), True),
        (at_most("x", 1.0, 1.0), True),  # on the bound: met
        (at_most("x", 1.5, 1.0), False),
        (at_least("x", 1.5, 1.0), True),
        (at_least("x", 1.0, 1.0), True),  # on the bound: met
        (at_least("x", 0.5, 1.0), False),
        (below("x", 0.5, 1.0), True),
        (below("x", 1.0, 1.0), False),  # strict: on the bound is not below it
        (above("x", 1.5, 1.0), True),
        (above("x", 1.0, 1.0), False),  # strict
        (equals("x", 0, 0), True),
        (equals("x", 0.0, 0), True),
        (equals("x", 1e-300, 0.0), False),  # exact: no tolerance
        (equals("x", [2, 10, 64], [2, 10, 64]), True),
        (equals("x", (2, 10, 64), (2, 10, 65)), False),
        (equals("x", "IndexError", "IndexError"), True),
        (equals("x", "finite", "IndexError"), False),
        (within("x", 5.0, 4.0, rel_tol=0.25), True),  # |5 − 4| = 1 = 0.25·4: on the bound
        (within("x", 3.0, 4.0, rel_tol=0.25), True),  # and from below
        (within("x", 5.5, 4.0, rel_tol=0.25), False),
        (within("x", -5.0, -4.0, rel_tol=0.25), True),  # relative to |target|
        (within("x", 2.25, 2.0, abs_tol=0.25), True),  # |2.25 − 2| = 0.25: on the bound
        (within("x", 1.75, 2.0, abs_tol=0.25), True),
        (within("x", 2.5, 2.0, abs_tol=0.25), False),
        (between("x", 5.0, 0.1, 10.0), True),
        (between("x", 10.0, 0.1, 10.0), False),  # both ends excluded
        (between("x", 0.1, 0.1, 10.0), False),
        (between("x", 512.0, 0.1, 10.0), False),
        (is_true("x", True), True),
        (is_true("x", False), False),
    ],
)
def test_relation_met(check, met):
    assert check.met is met


@pytest.mark.parametrize(
    "check",
    [
        at_most("x", NAN, 1.0),
        at_least("x", NAN, 1.0),
        below("x", NAN, 1.0),
        above("x", NAN, 1.0),
        equals("x", NAN, NAN),
        within("x", NAN, 1.0, rel_tol=0.5),
        within("x", NAN, 1.0, abs_tol=0.5),
        between("x", NAN, 0.0, 1.0),
        at_most("x", None, 1.0),  # not measured
        at_least("x", None, 1.0),
        within("x", None, 1.0, rel_tol=0.5),
        between("x", None, 0.0, 1.0),
    ],
)
def test_nan_or_unmeasured_meets_no_bound(check):
    assert check.met is False


def test_nan_measured_fails_under_every_rule():
    nan = at_most("error", NAN, 1e-5)
    assert Outcome(NAN, all_met(nan), {}).verdict == "fails"
    assert some_met(nan, at_most("other", NAN, 1.0)).verdict == "fails"
    assert Rule(holds=(nan,), partly=(below("smaller", NAN, 0.1),)).verdict == "fails"
    # a rule written as `"fails" if x >= bound else ...` lets a NaN x through; a check does not
    assert Rule(holds=(at_most("x", 0.0, 1.0),), needs=(at_least("y", NAN, 0.0),)).verdict == "fails"


@pytest.mark.parametrize(
    ("check", "text"),
    [
        (at_most("largest error", 0.5, 0.001), "largest error: ≤ 0.001"),
        (at_least("ratio", 2.0, 1.2), "ratio: ≥ 1.2"),
        (below("RMS error", 0.1, 0.5), "RMS error: < 0.5"),
        (above("own", 1.0, 0.0), "own: > 0"),
        (equals("parameters saved", 18_944_000, 37_000 * 512), "parameters saved: exactly 18,944,000"),
        (equals("shape", (2, 10, 64), (2, 10, 64)), "shape: exactly (2, 10, 64)"),
        (equals("counted FLOPs", [1], [1], "8bnd² + 4bn²d"), "counted FLOPs: exactly 8bnd² + 4bn²d"),
        (within("variance", 0.49, 1 / 3, rel_tol=0.1, bound_text="1/3"), "variance: within 10 % of 1/3"),
        (within("exponent", 1.9, 2, abs_tol=0.2), "exponent: 2 ± 0.2"),
        (between("ratio", 5.0, 0.1, 10.0), "ratio: between 0.1 and 10"),
        (between("ratio", 5.0, 0.1, 10.0, "1/10 and 10"), "ratio: between 1/10 and 10"),
        (at_least("distance", 3.7, 10 * 2e-4, "10 × the rounding error"), "distance: ≥ 10 × the rounding error"),
        (is_true("every weight in [0, 1]", True), "every weight in [0, 1]"),
        (at_most("tiny", 0.0, 1e-06), "tiny: ≤ 1e-06"),
    ],
)
def test_check_text(check, text):
    assert check.text == text


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda: Check("x", 1.0, "≈", 1.0), ValueError),  # unknown relation
        (lambda: Check("x", 1.0, "≤", 1.0, tolerance=0.1), ValueError),  # a tolerance with "≤"
        (lambda: Check("x", 1.0, "within", 1.0), ValueError),  # "within" without one
        (lambda: within("x", 1.0, 1.0), ValueError),  # neither rel_tol nor abs_tol
        (lambda: within("x", 1.0, 1.0, rel_tol=0.1, abs_tol=0.1), ValueError),  # both
        (lambda: is_true("x", 1), TypeError),  # a bool, not a truthy number
    ],
)
def test_check_refuses_what_it_cannot_decide(make, error):
    with pytest.raises(error):
        make()


# ------------------------------------------------------------------------ rules
MET, MISSED = at_most("met", 0.0, 1.0), at_most("missed", 2.0, 1.0)


@pytest.mark.parametrize(
    ("rule", "verdict"),
    [
        (all_met(MET), "holds"),
        (all_met(MET, MET), "holds"),
        (all_met(MET, MISSED), "fails"),
        (all_met(MISSED, MET), "fails"),
        (some_met(MET, MET), "holds"),
        (some_met(MET, MISSED), "partly"),
        (some_met(MISSED, MET), "partly"),
        (some_met(MISSED, MISSED), "fails"),
        (some_met(MET, MISSED, MISSED), "partly"),
        # tiers: needs, then holds, then partly
        (Rule(holds=(MET,), partly=(MISSED,), needs=(MET,)), "holds"),
        (Rule(holds=(MISSED,), partly=(MET,), needs=(MET,)), "partly"),
        (Rule(holds=(MISSED,), partly=(MISSED,), needs=(MET,)), "fails"),
        (Rule(holds=(MET,), partly=(MET,), needs=(MISSED,)), "fails"),  # needs first: nothing else counts
        (Rule(holds=(MISSED,), needs=(MET,)), "partly"),  # no partly checks: partly once needs are met
        (Rule(holds=(MISSED,), needs=(MISSED,)), "fails"),
        (Rule(holds=(MET, MISSED), partly=(MET,)), "partly"),  # holds needs every one of its checks
        (Rule(holds=(MET,), partly=(MISSED,)), "holds"),
    ],
)
def test_rule_verdict(rule, verdict):
    assert rule.verdict == verdict


def test_rule_checks_are_every_check_once():
    a, b, c = at_most("a", 0, 1), at_most("b", 0, 1), at_most("c", 0, 1)
    assert Rule(holds=(a,), partly=(b,), needs=(c,)).checks == (a, b, c)
    assert all_met(a, b).checks == (a, b)
    assert some_met(a, b).checks == (a, b)


def test_rule_refuses_a_rule_that_decides_nothing():
    with pytest.raises(ValueError):
        Rule()
    with pytest.raises(ValueError):
        Rule(partly=(MET,), needs=(MET,))  # partly checks with no holds tier would never decide
    with pytest.raises(ValueError):
        Graded((MET,))  # one check: all_met


def test_rule_text():
    a = at_most("mean ratio", 0.4, 0.1)
    b = at_most("median ratio", 0.05, 0.1)
    c = at_least("max weight", 0.95, 0.9)
    d = at_most("drift", 1.2, 1.5)
    assert all_met(a, c).text == "mean ratio: ≤ 0.1; max weight: ≥ 0.9"
    assert some_met(a, c).text == "mean ratio: ≤ 0.1; max weight: ≥ 0.9 (holds if all are met, partly if some)"
    assert Rule(holds=(a,), partly=(b,), needs=(c, d)).text == (
        "mean ratio: ≤ 0.1 for holds; median ratio: ≤ 0.1 for partly; either needs max weight: ≥ 0.9 and drift: ≤ 1.5"
    )
    assert Rule(holds=(a, b), needs=(c,)).text == (
        "mean ratio: ≤ 0.1 and median ratio: ≤ 0.1 for holds, else partly; either needs max weight: ≥ 0.9"
    )
    assert Rule(holds=(a,), partly=(b,)).text == "mean ratio: ≤ 0.1 for holds; median ratio: ≤ 0.1 for partly"


def test_outcome_expected_says_what_is_measured_then_the_rule_then_the_note():
    rule = all_met(at_most("largest error", 1e-7, 1e-5))
    assert Outcome(1e-7, rule, {}).expected == "largest error: ≤ 1e-05"
    assert Outcome(1e-7, rule, {}, note="float32 rounding").expected == "largest error: ≤ 1e-05; float32 rounding"
    outcome = Outcome(7, rule, {}, measured_is="the larger of two errors", note="n = 4")
    assert outcome.expected == "measured: the larger of two errors; largest error: ≤ 1e-05; n = 4"
    assert outcome.verdict == "holds"


# ------------------------------------------------------------------------ the decorator
@pytest.fixture
def registry(monkeypatch):
    """An empty claim registry, so the test's claims leave the real one as it is."""
    monkeypatch.setattr(record, "STATEMENTS", {})
    monkeypatch.setattr(record, "MEASURES", [])
    return record


def test_claim_makes_the_outcome_a_claim_result_named_by_its_function(registry):
    @registry.claim("A toy statement.", "a toy source", notes=None)
    def toy_bound(seed: int) -> Outcome:
        value = 0.25 * seed
        return Outcome(value, some_met(at_most("value", value, 0.4), at_least("value", value, 0.4)), {"seed": seed})

    r = toy_bound(1)
    assert (r.claim_id, r.statement, r.source, r.seed_ref, r.quote) == (
        "toy_bound",
        "A toy statement.",
        "a toy source",
        "",
        "",
    )
    assert (r.measured, r.verdict, r.unit, r.details["seed"]) == (0.25, "partly", "1", 1)
    assert r.details["statements"] == []  # the catalogue statements it measures: none
    assert r.details["checks"] == [  # each check as a sentence, for the report
        {"sentence": "value is 0.25, expected at most 0.4: met", "met": True, "tier": "graded"},
        {"sentence": "value is 0.25, expected at least 0.4: not met", "met": False, "tier": "graded"},
    ]
    assert r.expected == "value: ≤ 0.4; value: ≥ 0.4 (holds if all are met, partly if some)"
    assert toy_bound(2).verdict == "partly" and math.isclose(toy_bound(2).measured, 0.5)
    assert registry.MEASURES == [toy_bound] and registry.STATEMENTS["toy_bound"].notes is None
    assert isinstance(toy_bound.__wrapped__(1), Outcome)  # the measuring function itself
    with pytest.raises(ValueError, match="declared twice"):
        registry.claim("again", "src", notes=None, claim_id="toy_bound")(lambda seed: None)


def test_claim_takes_note_lines_from_the_catalogue(registry):
    entry = next(e for e in record.catalog()["statement"] if e["seed_ref"])

    def measure(seed: int) -> Outcome:
        return Outcome(0, all_met(equals("n", 0, 0)), {}, unit="positions")

    noted = registry.claim("A statement the notes make.", "src", notes=(entry["id"],), claim_id="toy_noted")(measure)
    own = registry.claim("The same, by default.", "src", claim_id=entry["id"])(measure)  # notes: its own id
    assert registry.STATEMENTS["toy_noted"].notes == registry.STATEMENTS[entry["id"]].notes == (entry["id"],)
    for r in (noted(0), own(0)):
        assert r.seed_ref.split("; ")[0] == entry["seed_ref"][0] and r.quote == entry["quote"]
        assert (r.verdict, r.unit) == ("holds", "positions")


def test_check_sentences_say_measured_expected_and_met():
    assert V.at_most("error", 0.5, 1.0).sentence == "error is 0.5, expected at most 1: met"
    assert V.at_least("ratio", 1.23456, 2).sentence == "ratio is 1.235, expected at least 2: not met"
    assert V.within("λ / 2π", 0.9647, 1, rel_tol=0.01).sentence == "λ / 2π is 0.9647, expected within 1 % of 1: not met"
    assert V.within("x", 3.0, 3, abs_tol=0.5).sentence == "x is 3, expected 3 ± 0.5: met"
    assert V.equals("bits", [1, 2], [1, 2]).sentence == "bits is [1, 2], expected exactly [1, 2]: met"
    assert V.is_true("sits last", False).sentence == "sits last: no (expected yes)"
    assert V.between("p", 0.5, 0, 1).sentence == "p is 0.5, expected between 0 and 1: met"
    long = V.equals("table", list(range(40)), list(range(40)), bound_text="the formula")
    assert long.sentence == "table: expected exactly the formula: met"  # a long value is not written out
