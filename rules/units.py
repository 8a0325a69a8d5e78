"""Parsing of quantities in free text: doses (unit + frequency -> amount per day), money, month/year dates."""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import date

# Mass units normalised to milligrams; "units" and weight-based doses are kept apart (not convertible).
MASS_TO_MG: dict[str, float] = {"mcg": 0.001, "mg": 1.0, "g": 1000.0}
_UNIT_ALIASES: dict[str, str] = {
    "mcg": "mcg", "µg": "mcg", "μg": "mcg", "ug": "mcg", "microgram": "mcg", "micrograms": "mcg",
    "mg": "mg", "milligram": "mg", "milligrams": "mg",
    "g": "g", "gram": "g", "grams": "g", "gm": "g",
    "unit": "units", "units": "units", "iu": "units",
    "mg/kg": "mg/kg",
}
_NUMBER = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
DOSE = re.compile(
    rf"(?:(?P<low>{_NUMBER})\s*(?:-|–|to)\s*)?(?P<value>{_NUMBER})\s*"
    r"(?P<unit>mg/kg|micrograms?|milligrams?|grams?|mcg|µg|μg|ug|mg|gm|g|units?|IU)(?![A-Za-z])",
    re.IGNORECASE,
)
_TIMES = {"once": 1, "twice": 2, "thrice": 3, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
_FREQUENCIES: list[tuple[re.Pattern[str], int | None]] = [
    (re.compile(r"^\W{0,3}(?:by mouth |orally |po |iv |intravenously )?(?:once|1 time|one time)s? (?:daily|a day|per day|each day|every day)", re.I), 1),
    (re.compile(r"^\W{0,3}(?:by mouth |orally |po )?(?:twice|2 times|two times) (?:daily|a day|per day|each day)|^\W{0,3}(?:b\.?i\.?d\.?)\b", re.I), 2),
    (re.compile(r"^\W{0,3}(?:by mouth |orally |po )?(?:three times|3 times|thrice) (?:daily|a day|per day|each day)|^\W{0,3}t\.?i\.?d\.?\b", re.I), 3),
    (re.compile(r"^\W{0,3}(?:by mouth |orally |po )?(?:four times|4 times) (?:daily|a day|per day|each day)|^\W{0,3}q\.?i\.?d\.?\b", re.I), 4),
    (re.compile(r"^\W{0,3}(?:by mouth |orally |po )?(?:daily|a day|per day|/day|/ day|each day|every day|q\.?d\.?\b|"
                r"in (?:divided|\d+) doses|(?:in|per|every|within|over) (?:any |a )?24[- ]?h(?:ours?|r)?|/24 ?h)", re.I), 1),
]
_N_TIMES = re.compile(r"^\W{0,3}(?:by mouth |orally |po )?(?P<n>\d+|one|two|three|four|five|six|seven|eight|nine|ten) times? "
                      r"(?:daily|a day|per day|each day|every day)", re.I)
_NUMBER_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}
_EVERY_HOURS = re.compile(r"^\W{0,3}(?:by mouth |orally |po )?(?:every (?P<h1>\d+)(?:\s*(?:-|to)\s*(?P<h2>\d+))? ?h(?:ou)?rs?|q(?P<h3>\d+)h)", re.I)
_PER_DOSE = re.compile(r"^\W{0,3}(?:per dose|as a single dose|at a time|in a single dose)", re.I)
_MAXIMUM_BEFORE = re.compile(
    r"(?:max(?:imum|\.)?|highest|not (?:to )?exceed|no more than|up to|limit(?:ed)? (?:of|to)|ceiling of|cap(?:ped)? at)"
    r"[^.;]{0,60}$", re.I,
)
_SINGLE_BEFORE = re.compile(r"(?:single|per) dose[^.;]{0,40}$", re.I)
_DAILY_BEFORE = re.compile(r"(?:daily|per day|a day|/day|24[- ]hours?)\b[^.;]{0,80}$", re.I)


@dataclass(frozen=True, slots=True)
class Dose:
    start: int
    end: int                      # span of amount + frequency in the sentence's coordinates
    value: float                  # the number as written, in `unit`
    unit: str                     # mcg | mg | g | units | mg/kg
    times_per_day: float | None   # None when the frequency is not stated
    per: str | None               # "day" (frequency known) | "dose" (explicitly one dose) | None
    is_maximum: bool              # stated as a maximum ("maximum daily dose is ...", "do not exceed ...")

    @property
    def family(self) -> str:
        return "mass" if self.unit in MASS_TO_MG else self.unit

    def in_base_unit(self, value: float | None = None) -> float:
        """The amount in mg for mass units, unchanged otherwise."""
        value = self.value if value is None else value
        return value * MASS_TO_MG[self.unit] if self.unit in MASS_TO_MG else value

    @property
    def daily_amount(self) -> float | None:
        """Amount per day in the base unit, when the text says enough to compute it."""
        if self.per != "day" or self.times_per_day is None:
            return None
        return self.in_base_unit() * self.times_per_day


def parse_number(text: str) -> float:
    return float(text.replace(",", ""))


def normalise_unit(unit: str) -> str:
    return _UNIT_ALIASES[unit.casefold()]


def to_base(value: float, unit: str) -> tuple[float, str]:
    """(value in mg, "mass") for mass units, else (value, unit)."""
    unit = normalise_unit(unit)
    if unit in MASS_TO_MG:
        return value * MASS_TO_MG[unit], "mass"
    return value, unit


def find_doses(sentence: str) -> list[Dose]:
    doses: list[Dose] = []
    for match in DOSE.finditer(sentence):
        unit = normalise_unit(match.group("unit"))
        value = parse_number(match.group("value"))
        after = sentence[match.end():match.end() + 60]
        before = sentence[max(0, match.start() - 80):match.start()]
        times, per, consumed = _frequency(after)
        is_maximum = bool(_MAXIMUM_BEFORE.search(before))
        if per is None:
            if _SINGLE_BEFORE.search(before):
                per = "dose"
            elif _DAILY_BEFORE.search(before):
                times, per = 1.0, "day"   # "the maximum daily dose is 4 g"
        doses.append(Dose(match.start(), match.end() + consumed, value, unit, times, per, is_maximum))
    return doses


def _frequency(after: str) -> tuple[float | None, str | None, int]:
    """(times per day, "day" | "dose" | None, characters consumed) from the words after an amount."""
    found = _N_TIMES.search(after)
    if found:
        n = found.group("n").casefold()
        return float(_NUMBER_WORDS.get(n) or int(n)), "day", found.end()
    for pattern, times in _FREQUENCIES:
        found = pattern.search(after)
        if found:
            return float(times or 1), "day", found.end()
    found = _EVERY_HOURS.search(after)
    if found:
        # "every 4-6 hours": the most frequent schedule (the lower bound) is the worst case for a daily total
        hours = float(found.group("h1") or found.group("h3"))
        return 24.0 / hours, "day", found.end()
    found = _PER_DOSE.search(after)
    if found:
        return None, "dose", found.end()
    return None, None, 0


# -- money ---------------------------------------------------------------------------------------------
_CURRENCY_SYMBOLS = {"$": "USD", "us$": "USD", "€": "EUR", "£": "GBP", "¥": "JPY"}
_CURRENCY_WORDS = {"dollars": "USD", "dollar": "USD", "euros": "EUR", "euro": "EUR", "pounds": "GBP"}
_MULTIPLIERS = {"k": 1e3, "thousand": 1e3, "m": 1e6, "million": 1e6, "mn": 1e6, "bn": 1e9, "billion": 1e9}
MONEY = re.compile(
    rf"(?P<sym>US\$|\$|€|£|¥)\s?(?P<num1>{_NUMBER})(?:\s?(?P<mult1>k|thousand|million|mn|m|billion|bn)\b)?"
    rf"|(?P<code>\b[A-Z]{{3}})\s?(?P<num2>{_NUMBER})(?:\s?(?P<mult2>k|thousand|million|mn|m|billion|bn)\b)?"
    rf"|(?P<num3>{_NUMBER})(?:\s?(?P<mult3>thousand|million|billion))?\s?(?P<code3>[A-Z]{{3}}\b|dollars?\b|euros?\b|pounds\b)",
)


@dataclass(frozen=True, slots=True)
class Money:
    start: int
    end: int
    amount: float
    currency: str   # ISO 4217 code as written (validated elsewhere)


def find_money(text: str, *, known_codes: set[str]) -> list[Money]:
    out: list[Money] = []
    for match in MONEY.finditer(text):
        if match.group("sym"):
            currency = _CURRENCY_SYMBOLS[match.group("sym").casefold()]
            number, mult = match.group("num1"), match.group("mult1")
        elif match.group("code"):
            currency, number, mult = match.group("code"), match.group("num2"), match.group("mult2")
            if currency not in known_codes:
                continue
        else:
            raw = match.group("code3")
            currency = _CURRENCY_WORDS.get(raw.casefold(), raw)
            number, mult = match.group("num3"), match.group("mult3")
            if currency not in known_codes:
                continue
        amount = parse_number(number) * (_MULTIPLIERS[mult.casefold()] if mult else 1.0)
        out.append(Money(match.start(), match.end(), amount, currency))
    return out


# -- dates ---------------------------------------------------------------------------------------------
_MONTHS = {name.casefold(): index for index, name in enumerate(calendar.month_name) if name}
_MONTHS.update({name.casefold(): index for index, name in enumerate(calendar.month_abbr) if name})
STATED_DATE = re.compile(
    r"\b(?:(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?\s+)?(?P<year>(?:19|20)\d{2})\b",
    re.I,
)


def stated_date(text: str) -> date | None:
    """The latest month/year the text names, as the last day of that period ("June 2025" -> 2025-06-30)."""
    best: date | None = None
    for match in STATED_DATE.finditer(text):
        year = int(match.group("year"))
        month_name = match.group("month")
        if month_name:
            month = _MONTHS[month_name.casefold()]
            when = date(year, month, calendar.monthrange(year, month)[1])
        else:
            when = date(year, 12, 31)
        best = when if best is None or when > best else best
    return best
