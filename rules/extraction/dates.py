"""Dates in the forms chatbots write them, with offsets: "June 26, 2015", "26 June 2015", "2015-06-26",
"June 2015", "December '87", "the fall of 2006", "mid-2025", "in 2016", "(1964)", "'09", "the 1960s",
"nineteen sixty-six" (read through the numeric view).

Each `DateMention` says how precise it is (day, month, year, decade): a claim is checked only to the
precision it states, so "decided in the mid-1960s" holds for 1966 and "June 2023" for June 22, 2023.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from functools import lru_cache

from rules.extraction.numbers import numeric_view

_MONTHS = {name.casefold(): index for index, name in enumerate(calendar.month_name) if name}
_MONTHS.update({name.casefold(): index for index, name in enumerate(calendar.month_abbr) if name})
_MONTHS["sept"] = 9
_MONTH = r"(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_YEAR = r"(?P<year>1[6-9]\d{2}|20\d{2})"
_SHORT_YEAR = r"[’'](?P<short>\d{2})\b"
# What each pattern cannot match without: a four-digit year, a month name (every name and abbreviation starts
# with one of these), an apostrophe before two digits, a decade's "0s". A text lacking one skips the patterns
# that need it: most sentences hold no date, and the month patterns cost the most (an alternation under re.I).
_NEEDS: dict[str, re.Pattern[str]] = {
    "year": re.compile(r"1[6-9]\d{2}|20\d{2}"),
    "month": re.compile(r"jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec", re.I),
    "short": re.compile(r"[’']\d{2}"),
    "decade": re.compile(r"\d0s", re.I),
}
_PATTERNS: list[tuple[str, tuple[str, ...], re.Pattern[str]]] = [
    ("day", ("year",), re.compile(r"\b(?P<year>1[6-9]\d{2}|20\d{2})-(?P<m>\d{2})-(?P<d>\d{2})\b")),
    ("day", ("year", "month"), re.compile(rf"\b{_MONTH}\s+(?P<day>\d{{1,2}})(?:st|nd|rd|th)?,?\s+{_YEAR}\b", re.I)),
    ("day", ("year", "month"),
     re.compile(rf"\b(?P<day>\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?{_MONTH},?\s+{_YEAR}\b", re.I)),
    ("month", ("year", "month"), re.compile(rf"\b{_MONTH}\s+(?:of\s+)?{_YEAR}\b", re.I)),
    ("month", ("short", "month"), re.compile(rf"\b{_MONTH}\s+{_SHORT_YEAR}", re.I)),
    ("season", ("year",),
     re.compile(rf"\b(?P<season>spring|summer|fall|autumn|winter|early|late|mid|middle)(?:\s+of)?[\s-]+{_YEAR}\b", re.I)),
    ("decade", ("decade",),
     re.compile(r"\b(?:the\s+)?(?P<part>early|mid|late)?-?\s*(?P<decade>1[6-9]\d0|20\d0)s\b", re.I)),
    ("year", ("year",), re.compile(rf"(?<![\d,.$€£-]){_YEAR}(?!\d|,\d|%)")),
    ("year", ("short",), re.compile(rf"(?<!\w){_SHORT_YEAR}")),
]


_NOT_A_YEAR = re.compile(r"(?:§+|\bU\.?S\.?C\.?A?|\bC\.?F\.?R\.?|\bsections?|\bart(?:icle)?\.?|\brules?|\bno\.|"
                         r"\bnumber|\bform|\bchapter|\btitle|\bp\.|\bat|\bvol\.)\s*$", re.I)


@dataclass(frozen=True, slots=True)
class DateMention:
    start: int
    end: int
    year: int
    month: int | None = None
    day: int | None = None
    precision: str = "year"          # day | month | year | decade
    decade_part: str | None = None   # early | mid | late (decades only)

    def matches(self, year: int, month: int | None = None, day: int | None = None) -> bool:
        """Does this mention (to its own precision) agree with the given date?"""
        if self.precision == "decade":
            low, high = {"early": (0, 3), "mid": (3, 7), "late": (7, 9)}.get(self.decade_part or "", (0, 9))
            return self.year + low <= year <= self.year + high
        if self.year != year:
            return False
        if self.month is not None and month is not None and self.month != month:
            return False
        return not (self.day is not None and day is not None and self.day != day)

    def describe(self) -> str:
        if self.precision == "decade":
            return f"{self.decade_part + ' ' if self.decade_part else ''}{self.year}s"
        if self.day is not None and self.month is not None:
            return f"{self.year:04d}-{self.month:02d}-{self.day:02d}"
        if self.month is not None:
            return f"{calendar.month_name[self.month]} {self.year}"
        return str(self.year)


def _short_year(two: str) -> int:
    value = int(two)
    return 2000 + value if value <= 40 else 1900 + value


@lru_cache(maxsize=2048)
def find_dates(text: str) -> tuple[DateMention, ...]:
    """Every date in `text`, most precise form first where forms overlap."""
    view = numeric_view(text)
    out: list[DateMention] = []
    taken: list[tuple[int, int]] = []
    present = {need for need, probe in _NEEDS.items() if probe.search(view.text)}
    if not present:
        return ()
    for precision, needs, pattern in _PATTERNS:
        if not present.issuperset(needs):
            continue
        for match in pattern.finditer(view.text):
            if any(s < match.end() and match.start() < e for s, e in taken):
                continue
            groups = match.groupdict()
            month = day = None
            part = None
            if groups.get("m"):
                month, day = int(groups["m"]), int(groups["d"])
            elif groups.get("month"):
                month = _MONTHS[groups["month"].casefold().rstrip(".")]
                day = int(groups["day"]) if groups.get("day") else None
            if groups.get("decade"):
                year, part = int(groups["decade"]), (groups.get("part") or None)
            elif groups.get("short"):
                year = _short_year(groups["short"])
            else:
                year = int(groups["year"])
            if month is not None and not 1 <= month <= 12:
                continue
            if precision == "year" and _NOT_A_YEAR.search(view.text[max(0, match.start() - 16):match.start()]):
                continue     # "42 U.S.C. § 1983", "Section 2000", "Rule 1006", "No. 1462": a number, not a year
            kind = {"season": "year"}.get(precision, precision)
            start, end = view.span(match.start(), match.end())
            out.append(DateMention(start, end, year, month, day, kind, part.casefold() if part else None))
            taken.append(match.span())
    return tuple(sorted(out, key=lambda d: d.start))
