"""Claims of a reproduction: what a paper states, as data, and our number beside it.

A :class:`ClaimSpec` is the static part of one quantitative statement (its key, section,
wording, the paper's value, the agreement rule and the template of its note); the code that
measures gives, per key, a :class:`Measured` (our value and the numbers its note quotes), and
:func:`fill_claims` joins the two into :class:`Claim` s, in the table's order.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["BOUND_SIGNS", "Bound", "Claim", "ClaimSpec", "Measured", "fill_claims"]

Bound = Literal["about", "at_most", "at_least", "below", "above"]
BOUND_SIGNS = {"at_most": "≤ ", "at_least": "≥ ", "below": "< ", "above": "> "}
"""How a report writes each bound before the paper's value."""


@dataclass(frozen=True, slots=True)
class Claim:
    """A number of the paper and ours."""

    key: str
    section: str
    claim: str
    paper: float
    ours: float
    unit: str
    rel_tol: float
    note: str = ""
    bound: str = "about"
    """``about``: ours within ``rel_tol`` of the paper's; ``at_most`` / ``at_least``: the
    paper states a bound ("under 0.5 %", "higher"); ``below`` / ``above``: a strict one
    ("fewer", "more"), by more than ``rel_tol`` (a ratio within it of 1 is "the same")."""

    @property
    def agrees(self) -> bool:
        if self.bound == "at_most":
            return self.ours <= self.paper * (1 + self.rel_tol)
        if self.bound == "at_least":
            return self.ours >= self.paper * (1 - self.rel_tol)
        if self.bound == "below":
            return self.ours < self.paper * (1 - self.rel_tol)
        if self.bound == "above":
            return self.ours > self.paper * (1 + self.rel_tol)
        return math.isclose(self.ours, self.paper, rel_tol=self.rel_tol)


@dataclass(frozen=True, slots=True)
class Measured:
    """What a measurement gives one claim: our value and the named numbers its note quotes
    (a number, or for a field the spec lists in ``series``, a sequence of tuples)."""

    ours: float
    fields: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ClaimSpec:
    """The static description of one claim: everything but our value."""

    key: str
    section: str
    claim: str
    paper: float
    unit: str
    rel_tol: float
    note: str = ""
    """A :meth:`str.format` template, filled with the measurement's fields."""
    bound: Bound = "about"
    series: tuple[tuple[str, str], ...] = ()
    """(field, item template): the field is a sequence of tuples, each written with the
    template (positional fields) and joined with ", " before the note is filled."""

    def fill(self, measured: Measured) -> Claim:
        values = dict(measured.fields)
        for name, item in self.series:
            values[name] = ", ".join(item.format(*x) for x in values[name])
        return Claim(
            key=self.key,
            section=self.section,
            claim=self.claim,
            paper=self.paper,
            ours=measured.ours,
            unit=self.unit,
            rel_tol=self.rel_tol,
            note=self.note.format(**values),
            bound=self.bound,
        )


def fill_claims(table: Sequence[ClaimSpec], measured: Mapping[str, Measured]) -> list[Claim]:
    """The claims of ``table`` that were measured, in the table's order.

    A measurement may leave a claim out (its figure lacks the points it needs); a measured
    key the table lacks is an error.
    """
    unknown = set(measured) - {spec.key for spec in table}
    if unknown:
        raise KeyError(f"measured claims not in the table: {sorted(unknown)}")
    return [spec.fill(measured[spec.key]) for spec in table if spec.key in measured]
