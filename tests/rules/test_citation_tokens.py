"""The legal validators' eyecite tokenizer: eyecite's own prefilter and extractors, chosen without hashing reprs."""

from __future__ import annotations

import pytest

from rules.validators.legal.citation_tokens import citation_tokenizer

eyecite_tokenizers = pytest.importorskip("eyecite.tokenizers")

# citations in several reporters, spaced-out and case-insensitive forms, statutes and no citation at all;
# sentences written for this test
TEXTS = [
    "In Harlow v. Fitzgerald, 457 U.S. 800 (1982), the Court reshaped qualified immunity.",
    "See Jones v. Smith, 812 F.3d 1021 (7th Cir. 2016); cf. 44 N. Y. S. 2d 601.",
    "The panel relied on 123 P.3d 456 and on 99 So. 2d 12, id. at 15, and 5 Cal. 4th 300.",
    "Under 42 U.S.C. § 1983 and 28 C.F.R. § 35.130, the claim survives; in re Marriage of Doe.",
    "The statute was enacted at 98 Stat. 1837 and discussed in 97 Harv. L. Rev. 1.",
    "Nothing here is a citation, only a plain sentence about contracts.",
]


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


@pytest.mark.parametrize("text", TEXTS)
def test_same_citation_tokens_as_eyecite(text: str) -> None:
    def spans(tokenizer: object) -> list[tuple[int, int, dict[str, str]]]:
        _, tokens = tokenizer.tokenize(text)  # type: ignore[attr-defined]
        return [(token.start, token.end, token.groups) for _, token in tokens]

    assert spans(citation_tokenizer()) == spans(eyecite_tokenizers.default_tokenizer)


def test_it_finds_the_citations() -> None:
    _, tokens = citation_tokenizer().tokenize(TEXTS[1])
    assert [t.groups.get("volume") for _, t in tokens if "page" in t.groups] == ["812", "44"]
