"""KG mention finding: statute-code tokens ("U.S.C.", "U.S. Code") are not country mentions."""

import pytest

from knowledge_graphs.model import Entity, KnowledgeGraph
from rules.mentions import MentionFinder, statute_code_spans


def finder() -> MentionFinder:
    entities = [
        Entity("country:US", "country", "United States", ["U.S.", "USA"]),
        Entity("regulation:26-usc-6050i", "regulation", "26 U.S.C. 6050I", ["Form 8300"]),
    ]
    return MentionFinder(KnowledgeGraph("finance", entities, [], data_version="test"))


@pytest.mark.parametrize(
    "text",
    ["See 31 U.S.C. 5313.", "See 31 U.S.C. § 5313.", "See 26 U.S.C.A. 6050I.", "See 26 U.S.C.S. 6050I.",
     "See 26 U. S. C. 6050I.", "See Title 31 of the U.S. Code.", "See Title 31, United States Code, section 5313."],
)
def test_statute_code_is_not_a_country(text: str) -> None:
    assert [m for m in finder().find(text, ["country"])] == []


@pytest.mark.parametrize("text", ["The U.S. uses the dollar.", "The United States uses the dollar.",
                                  "The U.S. Court of Appeals ruled.", "The U.S. C-suite is worried."])
def test_the_country_is_still_found(text: str) -> None:
    assert [m.entity_ids for m in finder().find(text, ["country"])] == [("country:US",)]


def test_a_mention_covering_the_whole_citation_is_kept() -> None:
    mentions = finder().find("Under 26 U.S.C. 6050I a business files Form 8300.", ["regulation", "country"])
    assert [(m.text, m.entity_type) for m in mentions] == [("26 U.S.C. 6050I", "regulation"), ("Form 8300", "regulation")]


def test_statute_code_spans() -> None:
    text = "26 U.S.C. 6050I and the U.S. Code, not the U.S. Court."
    assert [text[s:e] for s, e in statute_code_spans(text)] == ["U.S.C.", "U.S. Code"]
