"""The verdict builder: a claim's bounds, each once in a `Check`, and the rule that makes them a verdict."""

from __future__ import annotations

import operator
from dataclasses import dataclass

_ORDERED = {"≤": operator.le, "≥": operator.ge, "<": operator.lt, ">": operator.gt}
RELATIONS = (*_ORDERED, "=", "within", "±", "between", "true")


def _shown(value, digits: int = 6) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return f"{value:,}" if isinstance(value, int) else f"{value:.{digits}g}"


SHOWN_MAX_CHARS = 60
_WORDS = {"≤": "at most", "≥": "at least", "<": "below", ">": "above"}


@dataclass(frozen=True)
class Check:
    """One comparison: `label` (in words), the measured `value`, a `relation` of RELATIONS and its `bound`
    ("within": relative `tolerance`, "±": absolute, "between": (low, high) exclusive, "true": `value` is the
    condition). `bound_text` writes a bound its number alone would not say. None or NaN meets no bound but "=" None."""

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
        low, high = bound
        return bool(low < value < high)

    def _wanted(self, in_words: bool) -> str:
        if self.relation == "between":
            low, high = self.bound
            return f"between {self.bound_text or f'{_shown(low)} and {_shown(high)}'}"
        bound = self.bound_text or _shown(self.bound)
        if self.relation == "=":
            return f"exactly {bound}"
        if self.relation == "within":
            return f"within {self.tolerance * 100:g} % of {bound}"
        if self.relation == "±":
            return f"{bound} ± {self.tolerance:g}"
        return f"{_WORDS[self.relation] if in_words else self.relation} {bound}"

    @property
    def text(self) -> str:
        return self.label if self.relation == "true" else f"{self.label}: {self._wanted(in_words=False)}"

    @property
    def sentence(self) -> str:
        met = "met" if self.met else "not met"
        if self.relation == "true":
            return f"{self.label}: {'yes' if self.value else 'no'} ({'as expected' if self.value else 'expected yes'})"
        wanted = self._wanted(in_words=True)
        shown = _shown(self.value, 4)
        if len(shown) > SHOWN_MAX_CHARS:  # a table of values: only whether it is the expected one
            return f"{self.label}: expected {wanted}: {met}"
        return f"{self.label} is {shown}, expected {wanted}: {met}"


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
    """|value − target| ≤ rel_tol·|target|, or ≤ abs_tol (one of the two)."""
    if (rel_tol is None) == (abs_tol is None):
        raise ValueError(f"check {label!r}: give rel_tol or abs_tol")
    relation, tolerance = ("within", rel_tol) if abs_tol is None else ("±", abs_tol)
    return Check(label, value, relation, target, tolerance, bound_text)


def between(label: str, value, low, high, bound_text: str | None = None) -> Check:
    return Check(label, value, "between", (low, high), bound_text=bound_text)


def is_true(label: str, condition: bool) -> Check:
    return Check(label, condition, "true")


@dataclass(frozen=True)
class Rule:
    """ "fails" unless every `needs` is met; "holds" when every `holds` is; else "partly" if every `partly` is."""

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
    """ "holds" when every check is met, "partly" when some are, "fails" when none is."""

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
    """ "holds" when every check is met, else "fails"."""
    return Rule(needs=checks)


def some_met(*checks: Check) -> Graded:
    """The graded rule (`Graded`)."""
    return Graded(checks)


@dataclass(frozen=True)
class Outcome:
    """What a claim's measurement returns; `expected` is written from the rule's checks, `note` adds the rest."""

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
