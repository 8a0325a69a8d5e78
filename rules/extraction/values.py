"""Values of a given kind in a stretch of text, with offsets: what a relation's value is compared against.

Each reader runs on the numeric view of the stretch (number words as digits: "two and a half percent" -> "2.5
percent", "fifteen grand" -> "$15000"), and reports offsets in the stretch itself. Kinds are those of
`knowledge_graphs.model.RelationSpec`: money, percent, quantity, duration, count, year, date.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from rules.extraction.numbers import numeric_view
from rules.units import find_money, parse_number

_NUMBER = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
_PERCENT = re.compile(rf"(?P<n>{_NUMBER})\s?(?:%|percent\b|per cent\b|pct\b)", re.I)
_DURATION = re.compile(rf"(?P<n>{_NUMBER})(?:\s|-)(?P<unit>(?:business|calendar|working)[\s-]days?|days?|weeks?|"
                       r"months?|years?|hours?)\b", re.I)
_QUANTITY = re.compile(rf"(?P<n>{_NUMBER})\s?(?P<unit>mcg|µg|micrograms?|mg|milligrams?|g|grams?|mL|ml|milliliters?|"
                       r"units?|IU)\b", re.I)
_YEAR = re.compile(r"(?<![\d$€£.,/-])(?P<n>1[6-9]\d{2}|20\d{2})(?![\d%,]|\.\d)")
_COUNT = re.compile(rf"(?<![\d$€£.,/-])(?P<n>{_NUMBER})(?![\d%])")
_DURATION_UNITS = {"day": "days", "week": "weeks", "month": "months", "year": "years", "hour": "hours"}
_MASS_MG = {"mcg": 0.001, "µg": 0.001, "microgram": 0.001, "mg": 1.0, "milligram": 1.0, "g": 1000.0, "gram": 1000.0}


@dataclass(frozen=True, slots=True)
class Value:
    start: int
    end: int
    amount: float
    unit: str | None       # ISO 4217 code, "%", a duration or quantity unit; None for counts and years


@cache
def _currency_codes() -> frozenset[str]:
    import pycountry

    return frozenset(c.alpha_3 for c in pycountry.currencies)


def find_values(text: str, kind: str) -> list[Value]:
    """Every value of `kind` in `text`, in order (offsets into `text`)."""
    view = numeric_view(text)
    found: list[Value] = []
    if kind == "money":
        for money in find_money(view.text, known_codes=set(_currency_codes())):
            found.append(Value(*view.span(money.start, money.end), money.amount, money.currency))
    elif kind == "percent":
        found = [Value(*view.span(*m.span()), parse_number(m.group("n")), "%") for m in _PERCENT.finditer(view.text)]
    elif kind == "duration":
        for m in _DURATION.finditer(view.text):
            amount, unit = duration_in_base(parse_number(m.group("n")), m.group("unit"))
            found.append(Value(*view.span(*m.span()), amount, unit))
    elif kind == "quantity":
        for m in _QUANTITY.finditer(view.text):
            found.append(Value(*view.span(*m.span()), parse_number(m.group("n")), m.group("unit")))
    elif kind == "year":
        found = [Value(*view.span(*m.span()), float(m.group("n")), None) for m in _YEAR.finditer(view.text)]
    elif kind == "count":
        found = [Value(*view.span(*m.span()), parse_number(m.group("n")), None) for m in _COUNT.finditer(view.text)]
    return sorted(found, key=lambda v: v.start)


def duration_in_base(amount: float, unit: str) -> tuple[float, str]:
    """(amount, unit) with weeks as days and "business day" / "calendar day" kept apart from plain days."""
    words = re.split(r"[\s-]+", unit.casefold())
    if words[0] in ("business", "working"):
        return amount, "business days"
    if words[0] == "calendar":
        return amount, "days"
    base = _DURATION_UNITS.get(words[-1].rstrip("s"), words[-1])
    if base == "weeks":
        return amount * 7, "days"
    return amount, base


def same_quantity(stated: Value, value: float, unit: str | None) -> bool | None:
    """Whether a stated quantity equals (value, unit); None when the units cannot be compared."""
    if stated.unit is None or unit is None:
        return None
    mine, theirs = _mass(stated.unit), _mass(unit)
    if mine is not None and theirs is not None:
        return abs(stated.amount * mine - value * theirs) <= 1e-6 * max(1.0, value * theirs)
    if stated.unit.casefold().rstrip("s") == unit.casefold().rstrip("s"):
        return abs(stated.amount - value) <= 1e-9 * max(1.0, abs(value))
    return None


def _mass(unit: str) -> float | None:
    key = unit.casefold()
    return _MASS_MG.get(key) or _MASS_MG.get(key.rstrip("s"))
