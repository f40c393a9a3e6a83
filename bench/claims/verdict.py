"""The verdict builder: a claim's bounds, each stated once, and the rule that turns them into a verdict.

A `Check` is one comparison: what is compared (`label`), the measured `value`, the relation and the bound;
its `met` decides and its `text` says it. The constructors name the relations: `at_most` (≤), `at_least`
(≥), `below` (<), `above` (>), `equals` (exact), `within` (a relative or absolute tolerance), `between`
(exclusive) and `is_true` (a condition that compares no single number). A value that was not measured
(None) or is NaN meets no bound.

A rule combines checks, each rule written once here: `all_met` ("holds" or "fails"), `some_met` (all met:
"holds", some: "partly", none: "fails") and `Rule(holds=, partly=, needs=)` for a claim that holds under
some conditions only. An `Outcome` (what a claim's measurement returns) carries `measured`, the rule and
the details; its `expected` is written from the rule's checks, so the bounds it states are the ones the
verdict used. `bench.claims.record.claim` makes the Outcome a ClaimResult.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass

# The relations a Check knows (its `met` tests them, its `text` writes them); the ordered ones by operator.
_ORDERED = {"≤": operator.le, "≥": operator.ge, "<": operator.lt, ">": operator.gt}
RELATIONS = (*_ORDERED, "=", "within", "±", "between", "true")


def _shown(value) -> str:
    """A bound as `expected` writes it: ints with thousands separators, floats in %g."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return f"{value:,}" if isinstance(value, int) else f"{value:g}"


@dataclass(frozen=True)
class Check:
    """One comparison a verdict rests on, its bound stated once: `label` (what is compared, in words),
    `value` (what was measured), `relation` (one of RELATIONS) and `bound`; `met` decides, `text` says it.

    Relations: "≤", "≥", "<", ">" against `bound`; "=" exact equality (numbers, texts, lists, shapes);
    "within": |value − bound| ≤ tolerance·|bound| (relative); "±": |value − bound| ≤ tolerance (absolute);
    "between": low < value < high, `bound` = (low, high); "true": `value` is True, `label` states the
    condition. `bound_text` writes the bound where its number alone would not say it ("1/3", a formula).
    A value of None (not measured) or NaN meets no relation but "=" with the same None."""

    label: str
    value: object
    relation: str
    bound: object = None
    tolerance: float | None = None
    bound_text: str | None = None

    def __post_init__(self):
        if self.relation not in RELATIONS:
            raise ValueError(f"check {self.label!r}: relation {self.relation!r}, allowed {', '.join(RELATIONS)}")
        if (self.tolerance is None) == (self.relation in ("within", "±")):
            raise ValueError(f"check {self.label!r}: a tolerance goes with 'within' and '±' only")
        if self.relation == "true" and not isinstance(self.value, bool):
            raise TypeError(f"check {self.label!r}: 'true' takes a bool, got {type(self.value).__name__}")

    @property
    def met(self) -> bool:
        value, bound = self.value, self.bound
        if self.relation == "true":
            return value
        if self.relation == "=":
            return bool(value == bound)
        if value is None:  # not measured: nothing to meet the bound with
            return False
        if self.relation in _ORDERED:
            return bool(_ORDERED[self.relation](value, bound))
        if self.relation == "within":
            return bool(abs(value - bound) <= self.tolerance * abs(bound))
        if self.relation == "±":
            return bool(abs(value - bound) <= self.tolerance)
        low, high = bound  # "between"
        return bool(low < value < high)

    @property
    def text(self) -> str:
        """'label: relation bound', as `expected` states it."""
        if self.relation == "true":
            return self.label
        if self.relation == "between":
            low, high = self.bound
            return f"{self.label}: between {self.bound_text or f'{_shown(low)} and {_shown(high)}'}"
        bound = self.bound_text or _shown(self.bound)
        if self.relation == "=":
            return f"{self.label}: exactly {bound}"
        if self.relation == "within":
            return f"{self.label}: within {self.tolerance * 100:g} % of {bound}"
        if self.relation == "±":
            return f"{self.label}: {bound} ± {self.tolerance:g}"
        return f"{self.label}: {self.relation} {bound}"


def at_most(label: str, value, bound, bound_text: str | None = None) -> Check:
    return Check(label, value, "≤", bound, bound_text=bound_text)


def at_least(label: str, value, bound, bound_text: str | None = None) -> Check:
    return Check(label, value, "≥", bound, bound_text=bound_text)


def below(label: str, value, bound, bound_text: str | None = None) -> Check:
    return Check(label, value, "<", bound, bound_text=bound_text)


def above(label: str, value, bound, bound_text: str | None = None) -> Check:
    return Check(label, value, ">", bound, bound_text=bound_text)


def equals(label: str, value, bound, bound_text: str | None = None) -> Check:
    return Check(label, value, "=", bound, bound_text=bound_text)


def within(
    label: str,
    value,
    target,
    *,
    rel_tol: float | None = None,
    abs_tol: float | None = None,
    bound_text: str | None = None,
) -> Check:
    """|value − target| ≤ rel_tol·|target|, or ≤ abs_tol (one of the two), as math.isclose names them."""
    if (rel_tol is None) == (abs_tol is None):
        raise ValueError(f"check {label!r}: give rel_tol or abs_tol")
    relation, tolerance = ("within", rel_tol) if abs_tol is None else ("±", abs_tol)
    return Check(label, value, relation, target, tolerance, bound_text)


def between(label: str, value, low, high, bound_text: str | None = None) -> Check:
    """low < value < high, both ends excluded."""
    return Check(label, value, "between", (low, high), bound_text=bound_text)


def is_true(label: str, condition: bool) -> Check:
    """A condition that is not a comparison of one number; `label` states it."""
    return Check(label, condition, "true")


@dataclass(frozen=True)
class Rule:
    """The verdict from tiers of checks: "fails" unless every `needs` check is met; then "holds" when every
    `holds` check is met, else "partly" when every `partly` check is (none: "partly" as soon as `needs`
    are), else "fails". `all_met(*checks)` is the rule with `needs` only: "holds" or "fails"."""

    holds: tuple[Check, ...] = ()
    partly: tuple[Check, ...] = ()
    needs: tuple[Check, ...] = ()

    def __post_init__(self):
        if not (self.needs or self.holds):
            raise ValueError("a rule needs at least one check in `needs` or `holds`")
        if self.partly and not self.holds:
            raise ValueError("`partly` checks without `holds` checks would never decide")

    @property
    def checks(self) -> tuple[Check, ...]:
        return (*self.holds, *self.partly, *self.needs)

    @property
    def verdict(self) -> str:
        if not all(c.met for c in self.needs):
            return "fails"
        if all(c.met for c in self.holds):
            return "holds"
        return "partly" if all(c.met for c in self.partly) else "fails"

    @property
    def text(self) -> str:
        """The checks once each, tiers named where there are tiers: '<holds> for holds; <partly> for partly;
        either needs <needs>'."""
        if not self.holds:
            return "; ".join(c.text for c in self.needs)
        parts = [" and ".join(c.text for c in self.holds) + " for holds"]
        if self.partly:
            parts.append(" and ".join(c.text for c in self.partly) + " for partly")
        else:
            parts[0] += ", else partly"
        if self.needs:
            parts.append("either needs " + " and ".join(c.text for c in self.needs))
        return "; ".join(parts)


@dataclass(frozen=True)
class Graded:
    """The verdict by how many checks are met: all: "holds", some: "partly", none: "fails"."""

    checks: tuple[Check, ...]

    def __post_init__(self):
        if len(self.checks) < 2:
            raise ValueError("a graded rule needs two checks or more (one check: all_met)")

    @property
    def verdict(self) -> str:
        met = sum(c.met for c in self.checks)
        return "holds" if met == len(self.checks) else "partly" if met else "fails"

    @property
    def text(self) -> str:
        return "; ".join(c.text for c in self.checks) + " (holds if all are met, partly if some)"


def all_met(*checks: Check) -> Rule:
    """The plain rule: the verdict "holds" when every check is met, else "fails"."""
    return Rule(needs=checks)


def some_met(*checks: Check) -> Graded:
    """The graded rule: the verdict "holds" when every check is met, "partly" when some are, "fails" when none is."""
    return Graded(checks)


@dataclass(frozen=True)
class Outcome:
    """What a claim's measurement returns; the `claim` decorator makes it the ClaimResult. `expected` is
    written from the rule's checks: the first check's label says what `measured` is, or `measured_is` does
    (written first) where no check is on `measured` itself; `note` adds what the claim predicts or reports
    beyond the checks."""

    measured: float | int | str
    rule: Rule | Graded
    details: dict
    unit: str = "1"
    measured_is: str = ""
    note: str = ""

    @property
    def verdict(self) -> str:
        return self.rule.verdict

    @property
    def expected(self) -> str:
        measured_is = f"measured: {self.measured_is}" if self.measured_is else ""
        return "; ".join(part for part in (measured_is, self.rule.text, self.note) if part)
