"""The memo caches keyed by the text of an answer or of one of its segments, in one place.

A serving process meets each answer once: these caches help only when the same text is verified again (a
stream's sentences, then the whole answer). A benchmark that verifies the same answers on every repeat
would measure them instead of the verifier, so it clears them before each answer (`clear_text_caches`).
Caches keyed by a phrase or a word (a court's name, an ICD-10-CM description, a candidate drug name, a
word's frequency) stay: a process meets the same phrases again and again across answers.
"""

from __future__ import annotations

from rules.extraction.dates import find_dates
from rules.extraction.numbers import numeric_view
from rules.extraction.reading import reading_view

TEXT_CACHES = (numeric_view, find_dates, reading_view)


def clear_text_caches() -> None:
    """Forget every memo keyed by a whole answer or segment, as if the next text were new."""
    for memo in TEXT_CACHES:
        memo.cache_clear()
