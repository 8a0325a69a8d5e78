"""The time a statement refers to: "the 2024 limit", "for tax year 2025", "as of 2023", "in 2019".

A fact with a validity period is judged at the time its claim refers to; a claim that names no time is judged
at the record's time. Two different years named around one value make the time ambiguous, and the claim says so
instead of picking one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_REFERENCE = re.compile(
    r"\b(?:in|for|during|as of|since|from|effective|through|until|by|of|fy|tax year|plan year|calendar year|"
    r"the|year|before|after)\s+(?:(?:the\s+)?(?:tax|calendar|plan|fiscal)\s+year\s+)?(?P<a>(?:19|20)\d{2})\b(?!\s*(?:U\.S\.|S\. ?Ct\.|F\.\d?d))"
    r"|\b(?P<b>(?:19|20)\d{2})(?:\s+|-)(?:tax\s+year|limits?|caps?|contribution|figures?|amounts?|plan\s+year|"
    r"calendar\s+year|numbers?|rules?|threshold|max(?:imum)?|deferral|exclusion|wage\s+base)\b"
    r"|\((?P<c>(?:19|20)\d{2})\)",
    re.I)


@dataclass(frozen=True, slots=True)
class TimeReference:
    years: tuple[int, ...]     # distinct years named, in order

    @property
    def year(self) -> int | None:
        return self.years[0] if len(self.years) == 1 else None

    @property
    def ambiguous(self) -> bool:
        return len(self.years) > 1


def time_reference(text: str, *, skip: tuple[int, int] | None = None) -> TimeReference:
    """The years `text` refers to (a year inside `skip`, the value's own span, is not a time reference)."""
    years: list[int] = []
    for match in _REFERENCE.finditer(text):
        group = next(g for g in ("a", "b", "c") if match.group(g))
        if skip is not None and skip[0] <= match.start(group) < skip[1]:
            continue
        year = int(match.group(group))
        if year not in years:
            years.append(year)
    return TimeReference(tuple(years))
