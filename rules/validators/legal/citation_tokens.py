"""eyecite's citation tokens from eyecite's own extractors and prefilter, found with less work.

eyecite's `AhocorasickTokenizer` runs only the extractors whose reporter strings occur in the text, and
each runs its regex over the whole text. Two costs are cut here, neither changing a token:

- Choosing the extractors. eyecite gathers them in a `set`, and `TokenExtractor.__hash__` is
  `hash(repr(self))`, the repr of a dataclass holding a long regex, once per automaton hit (~0.7 ms of a
  150-word answer's ~6 ms). Here the same automata pick the same extractors, kept by identity and run in
  eyecite's list order: a set's order followed PYTHONHASHSEED, and the order decides which of two tokens
  with the same span survives.
- Running them. About 90% of the extractors' regexes begin "(?:^|[^a-zA-Z0-9])((?P<volume>[1-9]..." (or a
  year starting with 1 or 2): a match can only start at the text's start or at a non-alphanumeric
  character, just before a digit 1-9. Those positions are found once per text (a few dozen), and such a
  regex is tried at them alone (`Pattern.match(text, pos)`), in order and without overlap, which yields
  exactly the matches `finditer` yields: `search` tries the same positions left to right and returns
  the first that `match` accepts. The other extractors run as eyecite runs them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import cache
from typing import Any

from rules.validators.legal import eyecite_import

_WHITESPACE = re.compile(r"\s+")        # eyecite's own pattern for its whitespace-free prefilter text
# regex openings after which the first character of a match's citation is a digit 1-9 (no flags)
_DIGIT_ANCHORED = ("(?:^|[^a-zA-Z0-9])((?P<volume>[1-9]", r"(?:^|[^a-zA-Z0-9])((?P<year>1\d{3}|20\d{2})",
                   r"(?:^|[^a-zA-Z0-9])((?P<volume>1[789]\d{2}|20\d{2})")
# where such a match can start: the start of the text before a digit, or one boundary character before it
_MATCH_STARTS = re.compile(r"(?:^|[^a-zA-Z0-9])(?=[1-9])")


def is_digit_anchored(extractor: Any) -> bool:
    """Can the extractor's matches only start where `_MATCH_STARTS` matches?"""
    eyecite_import.load()
    from eyecite.models import TokenExtractor

    return (extractor.flags == 0 and type(extractor).get_matches is TokenExtractor.get_matches
            and extractor.regex.startswith(_DIGIT_ANCHORED))


def matches_at(pattern: re.Pattern[str], text: str, starts: list[int]) -> Iterator[re.Match[str]]:
    """`pattern.finditer(text)` for a pattern whose matches can only start at `starts` (ascending)."""
    end = 0
    for start in starts:
        if start < end:
            continue            # inside the previous match: finditer resumes after it
        found = pattern.match(text, start)
        if found is not None:
            yield found
            end = max(found.end(), start + 1)


def _tokenizer_class() -> type:
    # eyecite is imported lazily (its reporter regexes compile on import, ~1 CPU second); see
    # citation_parsing.find_case_citations
    eyecite_import.load()
    from eyecite.tokenizers import AhocorasickTokenizer

    class CitationTokenizer(AhocorasickTokenizer):
        """eyecite's default tokenizer's automata and extractors, with `get_extractors` and
        `extract_tokens` replaced."""

        def __init__(self, base: AhocorasickTokenizer) -> None:  # no __post_init__: reuse base's automata
            self.extractors = base.extractors
            self.unfiltered_extractors = base.unfiltered_extractors
            self.case_sensitive_filter = base.case_sensitive_filter
            self.case_insensitive_filter = base.case_insensitive_filter
            self._position = {id(extractor): index for index, extractor in enumerate(base.extractors)}
            self._digit_anchored = {id(extractor) for extractor in base.extractors if is_digit_anchored(extractor)}

        def get_extractors(self, text: str) -> list[Any]:
            # mirrors AhocorasickTokenizer.get_extractors: whitespace-stripped text against the prefilter
            stripped = _WHITESPACE.sub("", text)
            # every hit of one prefilter string yields the same list object: keep each list once
            hit_lists = {id(found): found for _, found in self.case_sensitive_filter.iter(stripped)}
            hit_lists.update((id(found), found) for _, found in self.case_insensitive_filter.iter(stripped.lower()))
            chosen = {id(extractor): extractor for extractor in self.unfiltered_extractors}
            for found in hit_lists.values():
                chosen.update((id(extractor), extractor) for extractor in found)
            return sorted(chosen.values(), key=lambda extractor: self._position[id(extractor)])

        def extract_tokens(self, text: str) -> Iterator[Any]:
            starts = [found.start() for found in _MATCH_STARTS.finditer(text)]
            for extractor in self.get_extractors(text):
                if id(extractor) in self._digit_anchored:
                    found_all: Iterator[re.Match[str]] = matches_at(extractor.compiled_regex, text, starts)
                else:
                    found_all = extractor.get_matches(text)
                for match in found_all:
                    yield extractor.get_token(match)

    return CitationTokenizer


@cache
def citation_tokenizer() -> Any:
    """The tokenizer to use in place of `eyecite.tokenizers.default_tokenizer` (same extractors, same tokens)."""
    eyecite_import.load()
    from eyecite.tokenizers import default_tokenizer

    return _tokenizer_class()(default_tokenizer)
