"""The case index's name lookup: the records a linear scan of the plaintiff's bucket would return, in the
same order, while trying `names_equivalent` on only the records whose defendant shares a first letter."""

from __future__ import annotations

import random

import pytest

from knowledge_graphs import load_kg
from knowledge_graphs.model import Entity
from rules.validators.legal import citations
from rules.validators.legal.citations import CaseIndex, _parties, _party_words, names_equivalent

_SYLLABLES = ["ka", "ro", "mi", "tan", "vel", "dor", "sen", "qua", "zan", "pol", "rud", "fir", "hal", "nab"]


def _word(rng: random.Random) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 3))).capitalize()


def _index(rows: int = 3000, seed: int = 7) -> CaseIndex:
    """The packaged legal KG plus made-up cases, a third of them "United States v. ...", some with an
    abbreviated alias ("Bd. of Educ.") or another defendant, some documented fabrications: the shape of an imported SCDB table."""
    rng = random.Random(seed)
    kg = load_kg("legal")
    extra: list[Entity] = []
    for i in range(rows):
        plaintiff = "United States" if i % 3 == 0 else f"{_word(rng)} Board of Education" if i % 7 == 0 else _word(rng)
        name = f"{plaintiff} v. {_word(rng)} {_word(rng)}"
        aliases = [name.replace("Board of Education", "Bd. of Educ.")] if "Board" in name else []
        if i % 5 == 0:
            aliases.append(f"{plaintiff} v. {_word(rng)}")     # a form whose defendant differs from the name's
        kind = "fabricated_citation" if i % 97 == 0 else "case"
        extra.append(Entity(id=f"test-case-{i}", type=kind, name=name, aliases=aliases,
                            attributes={"volume": 700 + i % 300, "reporter": "U.S.", "page": i, "year": 1990}))
    return CaseIndex(kg.extended(extra, [], version="test-case-index"))


def _scan(index: CaseIndex, name: str, entity_type: str) -> list[Entity]:
    """The lookup as a linear scan: every record in the plaintiff's bucket, `names_equivalent` on each."""
    parties = _parties(name)
    words = _party_words(parties[0]) if parties else []
    if not words:
        return []
    return [e for e in index.by_word.get(words[0], []) if e.type == entity_type
            and any(names_equivalent(name, form) for form in e.surface_forms)]


@pytest.fixture(scope="module")
def index() -> CaseIndex:
    return _index()


def _queries(index: CaseIndex) -> list[str]:
    rng = random.Random(3)
    known = [form for e in rng.sample([*index.cases, *index.fabricated], 200) for form in e.surface_forms]
    shortened = [n.replace("Board of Education", "Bd. of Educ.") for n in known]
    first_words = [" v. ".join(p.split()[0] for p in n.split(" v. ")) for n in known if " v. " in n]
    return [*known, *shortened, *first_words, "United States v. Nixon", "United States v. Zzz Unknown",
            "Brown v. Bd. of Educ.", "Miranda v. Arizona", "Katz v. United States", "Nothing without versus",
            "The v. Of", "United States v.", "U.S. v. Lopez"]


def test_same_records_in_the_same_order_as_a_scan(index: CaseIndex) -> None:
    for name in _queries(index):
        assert index.cases_named(name) == _scan(index, name, "case"), name
        assert index.fabricated_named(name) == _scan(index, name, "fabricated_citation"), name


def test_a_common_plaintiff_is_not_scanned(index: CaseIndex, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = 0

    def counting(a: str, b: str) -> bool:
        nonlocal calls
        calls += 1
        return names_equivalent(a, b)

    monkeypatch.setattr(citations, "names_equivalent", counting)
    assert len(index.by_word["united"]) > 1000
    index.cases_named("United States v. Nixon")
    assert 0 < calls < len(index.by_word["united"]) / 5


def test_each_record_once_per_bucket(index: CaseIndex) -> None:
    for bucket in index.by_word.values():
        assert len({id(e) for e in bucket}) == len(bucket)
