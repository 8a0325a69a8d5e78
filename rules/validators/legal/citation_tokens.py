"""eyecite's citation tokens, with its reporter prefilter, but a cheaper and deterministic candidate set.

eyecite's `AhocorasickTokenizer` runs only the extractors whose reporter strings occur in the text. It
gathers them in a `set`, and `TokenExtractor.__hash__` is `hash(repr(self))`: the repr of a dataclass
holding a long regex, computed once per automaton hit. That was about a fifth of a legal answer's verify
time. Here the same automata select the same extractors, deduplicated by identity and run in eyecite's
own list order: a set's order followed PYTHONHASHSEED, and the order decides which of two tokens with
the same span survives.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

_WHITESPACE = re.compile(r"\s+")        # eyecite's own pattern for its whitespace-free prefilter text


def _tokenizer_class() -> type:
    # eyecite is imported lazily (its reporter regexes compile on import, ~1 CPU second); see
    # citation_parsing.find_case_citations
    from eyecite.tokenizers import AhocorasickTokenizer

    class IdentityPrefilterTokenizer(AhocorasickTokenizer):
        """eyecite's default tokenizer's automata and extractors, with `get_extractors` replaced."""

        def __init__(self, base: AhocorasickTokenizer) -> None:  # no __post_init__: reuse base's automata
            self.extractors = base.extractors
            self.unfiltered_extractors = base.unfiltered_extractors
            self.case_sensitive_filter = base.case_sensitive_filter
            self.case_insensitive_filter = base.case_insensitive_filter
            self._position = {id(extractor): index for index, extractor in enumerate(base.extractors)}

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

    return IdentityPrefilterTokenizer


@cache
def citation_tokenizer() -> Any:
    """The tokenizer to use in place of `eyecite.tokenizers.default_tokenizer` (same extractors, same data)."""
    from eyecite.tokenizers import default_tokenizer

    return _tokenizer_class()(default_tokenizer)
