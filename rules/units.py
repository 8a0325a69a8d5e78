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
    rf"(?:(?:between|from)\s+)?(?:(?P<low>{_NUMBER})\s*(?:-|–|to|or|and)\s*)?(?P<value>{_NUMBER})\s*"
    r"(?P<unit>mg/kg|micrograms?|milligrams?|grams?|mcg|µg|μg|ug|mg|gm|g|units?|IU)(?![A-Za-z])",
    re.IGNORECASE,
)
_TIMES = {"once": 1, "twice": 2, "thrice": 3, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6}
_LEAD = (r"^\W{0,3}(?:(?:by mouth|orally|po|iv|intravenously|with (?:food|meals?|breakfast|water)|for [\w\s]{1,20}?|"
         r"of [A-Z][\w-]*(?:\s*\([\w\s-]+\))?)[,\s]+)?")
_FREQUENCIES: list[tuple[re.Pattern[str], int | None]] = [
    (re.compile(_LEAD + r"(?:once|1 time|one time)s? (?:daily|a day|per day|each day|every day|each morning|every morning|"
                r"each evening|every evening|a night|nightly|at bedtime)", re.I), 1),
    (re.compile(_LEAD + r"(?:twice|2 times|two times) (?:daily|a day|per day|each day)|^\W{0,3}(?:b\.?i\.?d\.?)\b", re.I), 2),
    (re.compile(_LEAD + r"(?:three times|3 times|thrice) (?:daily|a day|per day|each day)|^\W{0,3}t\.?i\.?d\.?\b", re.I), 3),
    (re.compile(_LEAD + r"(?:four times|4 times) (?:daily|a day|per day|each day)|^\W{0,3}q\.?i\.?d\.?\b", re.I), 4),
    (re.compile(_LEAD + r"(?:daily|a day|per day|/ ?day|/d\b|each day|every day|q\.?d\.?\b|each morning|every morning|"
                r"in the morning|each evening|every evening|at bedtime|nightly|a night|per night|"
                r"in (?:divided|\d+) doses|(?:in|per|every|within|over) (?:any |a |one )?24[- ]?h(?:ours?|r|rs)?(?: period)?|"
                r"/ ?24 ?h)", re.I), 1),
]
_N_TIMES = re.compile(_LEAD + r"(?P<n>\d+|one|two|three|four|five|six|seven|eight|nine|ten) times? "
                      r"(?:daily|a day|per day|each day|every day)", re.I)
_NUMBER_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}
_EVERY_HOURS = re.compile(_LEAD + r"(?:every (?P<h1>\d+)(?:\s*(?:-|to)\s*(?P<h2>\d+))? ?h(?:ou)?rs?|q(?P<h3>\d+)h)", re.I)
_PER_DOSE = re.compile(r"^\W{0,3}(?:per dose|as a single dose|at a time|in a single dose|at once)", re.I)
# a maximum stated before the amount ("capped at", "no more than", "the ceiling is the same") ...
_MAXIMUM_BEFORE = re.compile(
    r"(?:\bmax(?:imum|\.)?\b|highest|exceed|no more than|not more than|up to|limit(?:s|ed)?\b|ceiling|"
    r"\bcaps?\b|capped|tops? out|\b(?:top|largest|biggest) (?:[\w-]+ ){0,2}?(?:dose|amount)\b|go above|go over|above|no higher than|at most|upper limit)"
    r"[^.;,]{0,50}$", re.I,
)
# ... or after it ("60 mg/day ceiling", "15 mg/day max", "60 mg being the maximum", "the 4 g limit")
_MAXIMUM_AFTER = re.compile(r"^\W{0,3}(?:(?:is|being|as) (?:the |its )?)?(?:max(?:imum)?|ceiling|cap|limit|at most)\b", re.I)
# "up to twice a day at 100 mg each": the frequency stated before the amount
_FREQUENCY_BEFORE = re.compile(r"\b(?P<n>once|twice|three times|four times|\d+ times) (?:a|per|each) day(?: at| of)?\s*$", re.I)
_SINGLE_BEFORE = re.compile(r"(?:single|per) dose[^.;]{0,40}$", re.I)
_DAILY_BEFORE = re.compile(r"(?:daily|per day|a day|/day|24[- ]hours?)\b[^.;]{0,80}$", re.I)
# "two 500 mg tablets", "one 10 mg tablet": a count of units of a strength
_UNIT_FORM = re.compile(r"^\s*(?:[A-Za-z-]+\s+){0,2}?(?:tablets?|capsules?|caplets?|pills?|softgels?|patch(?:es)?)\b", re.I)
_COUNT_BEFORE = re.compile(r"\b(?:(?P<low>\d+|one|two|three|four|five)\s+(?:or|to)\s+)?(?P<count>\d+|one|two|three|four|five|six)"
                           r"\s+(?:of (?:the )?)?$", re.I)


@dataclass(frozen=True, slots=True)
class Dose:
    start: int
    end: int                      # span of amount + frequency in the sentence's coordinates
    value: float                  # the number as written, in `unit`
    unit: str                     # mcg | mg | g | units | mg/kg
    times_per_day: float | None   # None when the frequency is not stated
    per: str | None               # "day" (frequency known) | "dose" (explicitly one dose) | None
    is_maximum: bool              # stated as a maximum ("maximum daily dose is ...", "do not exceed ...")
    low: float | None = None      # lower end of a range ("10 to 40 mg"), in `unit`
    count: float = 1.0            # units of this strength per dose ("two 500 mg tablets")
    # The mildest reading of directions given as ranges ("1 or 2 tablets every 4 to 6 hours"): the smaller count
    # at the longer interval, per day in the base unit; None when the directions are no range.
    mildest_daily: float | None = None

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
        return self.in_base_unit() * self.count * self.times_per_day


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
    """Amounts with units in `sentence` (digits; see `rules.extraction.numbers` for words), with the
    frequency after them, whether they are stated as a maximum, and the count of tablets of a strength."""
    doses: list[Dose] = []
    for match in DOSE.finditer(sentence):
        unit = normalise_unit(match.group("unit"))
        value = parse_number(match.group("value"))
        low = parse_number(match.group("low")) if match.group("low") else None
        end = match.end()
        before = sentence[max(0, match.start() - 80):match.start()]
        count = count_low = 1.0
        form = _UNIT_FORM.match(sentence[end:end + 40])
        if form:       # "two 500 mg tablets three times": the strength of a unit, counted
            counted = _COUNT_BEFORE.search(before)
            if counted:
                count = _count(counted.group("count"))
                count_low = _count(counted.group("low")) if counted.group("low") else count
            end += form.end()
        after = sentence[end:end + 60]
        times, per, consumed = _frequency(after)
        interval = _EVERY_HOURS.match(after[:consumed]) if per == "day" else None
        longest = float(interval.group("h2")) if interval and interval.group("h2") else None
        mildest = None
        if longest is not None or count_low != count:
            hours = longest or 24.0 / (times or 1.0)
            mildest = (low if low is not None else value) * MASS_TO_MG.get(unit, 1.0) * count_low * 24.0 / hours
        if per is None and (stated_before := _FREQUENCY_BEFORE.search(before)):
            word = stated_before.group("n").split()[0].casefold()
            times, per = float(_TIMES.get(word) or int(word)), "day"
            if re.match(r"^\s*each\b", after):
                consumed = len(re.match(r"^\s*each\b", after).group(0))  # type: ignore[union-attr]
        is_maximum = bool(_MAXIMUM_BEFORE.search(before)) or bool(_MAXIMUM_AFTER.match(sentence[end + consumed:end + consumed + 40]))
        if per is None:
            if _SINGLE_BEFORE.search(before):
                per = "dose"
            elif _DAILY_BEFORE.search(before):
                times, per = 1.0, "day"   # "the maximum daily dose is 4 g"
        doses.append(Dose(match.start(), end + consumed, value, unit, times, per, is_maximum, low, count, mildest))
    return doses


def _count(word: str) -> float:
    return float(_NUMBER_WORDS.get(word.casefold()) or int(word))


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
