"""`find_dates` skips the patterns a text cannot match (no year, no month name, ...): the skip must never lose a date."""

from __future__ import annotations

import re

import pytest

from rules.extraction import dates
from rules.extraction.numbers import numeric_view

# every form the patterns read, and texts with none, in sentences not taken from any benchmark file
SENTENCES = [
    "The lease was signed on 2019-03-14 and renewed a year later.",
    "Payment fell due on September 3rd, 2021, according to the ledger.",
    "She filed the appeal on the 9th of Feb. 2004 in the district court.",
    "The merger closed in March of 1998 after a long review.",
    "Rates peaked in Oct '08 before the rescue package passed.",
    "By the winter of 2011 the fund had been wound down.",
    "Enforcement grew stricter in the late 1970s and again in the 1990S.",
    "A statute amended in 1934 still governs the exchange.",
    "The class of ’97 sued over the tuition refund.",
    "Nineteen sixty-six was the year the warnings became mandatory.",
    "Section 2000 of the code and Rule 1006 say nothing about timing.",
    "Take one tablet twice a day with food and plenty of water.",
    "The court may award fees; it usually does not.",
    "mid-2013 saw the first filings, and June 7 2016 the last.",
]


@pytest.mark.parametrize("text", SENTENCES)
def test_every_match_has_what_its_pattern_needs(text: str) -> None:
    """The invariant the skip rests on: a pattern matches only where its needs' probes also match."""
    view = numeric_view(text).text
    for _, needs, pattern in dates._PATTERNS:
        if pattern.search(view):
            assert all(dates._NEEDS[need].search(view) for need in needs), (pattern.pattern, text)


@pytest.mark.parametrize("text", SENTENCES)
def test_skipping_changes_no_result(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    found = dates.find_dates.__wrapped__(text)
    anything = re.compile("")          # a probe that always matches: every pattern runs
    monkeypatch.setattr(dates, "_NEEDS", {need: anything for need in dates._NEEDS})
    assert dates.find_dates.__wrapped__(text) == found


def test_the_forms_are_still_found() -> None:
    years = [[d.year for d in dates.find_dates.__wrapped__(text)] for text in SENTENCES[:10]]
    assert years == [[2019], [2021], [2004], [1998], [2008], [2011], [1970, 1990], [1934], [1997], [1966]]
    assert dates.find_dates.__wrapped__(SENTENCES[11]) == ()
