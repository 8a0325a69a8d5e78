"""The legal validators' eyecite tokenizer: eyecite's own prefilter and extractors, and the same tokens."""

from __future__ import annotations

import random
import re
from typing import Any

import pytest

from rules.validators.legal.citation_tokens import citation_tokenizer, is_digit_anchored, matches_at

eyecite_tokenizers = pytest.importorskip("eyecite.tokenizers")

# citations in several reporters, spaced-out and case-insensitive forms, statutes, text starting with a
# citation, and no citation at all; sentences written for this test
TEXTS = [
    "In Harlow v. Fitzgerald, 457 U.S. 800 (1982), the Court reshaped qualified immunity.",
    "See Jones v. Smith, 812 F.3d 1021 (7th Cir. 2016); cf. 44 N. Y. S. 2d 601.",
    "The panel relied on 123 P.3d 456 and on 99 So. 2d 12, id. at 15, and 5 Cal. 4th 300.",
    "Under 42 U.S.C. § 1983 and 28 C.F.R. § 35.130, the claim survives; in re Marriage of Doe.",
    "The statute was enacted at 98 Stat. 1837 and discussed in 97 Harv. L. Rev. 1.",
    "531 U.S. 98 settled the recount;(2000) and 1998 WL 12345 followed,\n7 F.4th 88 too.",
    "Nothing here is a citation, only a plain sentence about contracts.",
]


def _eyecite_in_list_order() -> Any:
    """eyecite's own tokenizer, with its chosen extractors run in list order rather than a set's hash order
    (which follows PYTHONHASHSEED and decides ties between tokens of the same span)."""

    class ListOrder(eyecite_tokenizers.AhocorasickTokenizer):
        def get_extractors(self, text: str) -> list[Any]:
            position = {id(e): i for i, e in enumerate(self.extractors)}
            return sorted(super().get_extractors(text), key=lambda e: position[id(e)])

    return ListOrder()


def _tokens(tokenizer: Any, text: str) -> list[tuple[Any, ...]]:
    _, tokens = tokenizer.tokenize(text)
    return [(token.start, token.end, type(token).__name__, token.groups) for _, token in tokens]


@pytest.mark.parametrize("text", TEXTS)
def test_same_extractors_as_eyecite(text: str) -> None:
    ours = citation_tokenizer().get_extractors(text)
    theirs = eyecite_tokenizers.default_tokenizer.get_extractors(text)
    assert {id(e) for e in ours} == {id(e) for e in theirs}
    assert len(ours) == len({id(e) for e in ours})          # each once


@pytest.mark.parametrize("text", TEXTS)
def test_extractors_run_in_eyecites_list_order(text: str) -> None:
    position = {id(e): i for i, e in enumerate(eyecite_tokenizers.default_tokenizer.extractors)}
    order = [position[id(e)] for e in citation_tokenizer().get_extractors(text)]
    assert order == sorted(order)


def test_same_tokens_as_eyecite() -> None:
    reference = _eyecite_in_list_order()
    # and strings built to probe the edges: a citation at offset 0, digits after letters or accented
    # letters, zeros, newlines, neighbouring citations with no space between them
    rng = random.Random(19)
    pieces = ["1", "12", "347 U.S. 483", " ", ",", "(", "U.S.", "F.3d", "v.", "0", "9th Cir.", "\n", "é", "1999",
              "S. Ct.", "a", "Id.", "§", "P.2d", "2d", "-", "99 F. Supp. 2d 12", "٣"]
    probes = ["".join(rng.choice(pieces) for _ in range(rng.randint(1, 30))) for _ in range(400)]
    for text in TEXTS + probes:
        assert _tokens(citation_tokenizer(), text) == _tokens(reference, text), text


def test_matches_at_the_starts_equal_finditer() -> None:
    pattern = re.compile(r"(?:^|[^a-zA-Z0-9])((?P<volume>[1-9]\d*) (?P<reporter>U\.S\.) (?P<page>\d+))")
    text = "1 U.S. 2 and 3 U.S. 4,5 U.S. 6 x7 U.S. 8 (9 U.S. 10)"
    starts = [m.start() for m in re.finditer(r"(?:^|[^a-zA-Z0-9])(?=[1-9])", text)]
    assert [m.span() for m in matches_at(pattern, text, starts)] == [m.span() for m in pattern.finditer(text)]
    assert len(list(pattern.finditer(text))) == 4            # "x7 U.S. 8" is not a citation


def test_most_extractors_take_the_shortcut() -> None:
    extractors = eyecite_tokenizers.default_tokenizer.extractors
    assert sum(map(is_digit_anchored, extractors)) > 0.8 * len(extractors)


def test_it_finds_the_citations() -> None:
    _, tokens = citation_tokenizer().tokenize(TEXTS[1])
    assert [t.groups.get("volume") for _, t in tokens if "page" in t.groups] == ["812", "44"]
