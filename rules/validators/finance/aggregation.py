"""`finance.aggregation`: whether a reporting rule adds amounts together, stated in words: "multiple cash
deposits on the same business day are added together", "the FBAR looks at the combined value of all your
accounts, not each account separately", "each deposit is judged on its own".

The regulation is the one named in the sentence (a KG mention, "CTR", "FBAR"), else the one its words
describe (cash deposits or transactions and a business day: the CTR; foreign financial accounts: the FBAR),
else the nearest one named before. Whether it aggregates is read from its curated threshold facts (an
`aggregation` qualifier, or a measure that is aggregate, linked or related). Closed world only in that
direction: a rule the KG marks as aggregating makes "added together" supported and "separately"
contradicted; for a rule not so marked, no claim is made.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from knowledge_graphs.model import Fact
from rules.claims import Document
from rules.validators.base import Finding, kg_evidence, validator

_TOGETHER = re.compile(r"\b(?:added together|add(?:s|ed)? (?:them )?up|aggregat\w*|combined|in total|together|totall?(?:ed|ing)|"
                       r"summed|count(?:s|ed)? as (?:one|a single)|treat(?:s|ed)?\b[^.;]{0,80}\bas (?:one|a single)|linked transactions|"
                       r"related transactions)\b", re.I)
_APART = re.compile(r"\b(?:separately|individually|on (?:its|their) own|one at a time|per account|in isolation)\b", re.I)
# every cue of _TOGETHER and _APART contains one of these
_CUE_WORDS = ("together", "aggregat", "combined", "total", "summed", "count", "treat", "linked", "related",
              "separately", "individually", "own", "one at a time", "per account", "isolation", "add")
_NEGATION = re.compile(r"\b(?:not|never|no|n't|rather than|instead of)\W+(?:\w+\W+){0,3}$", re.I)
# a rule described rather than named: (pattern over the sentence, KG alias it means)
_DESCRIBED = [
    (re.compile(r"\b(?:cash|currency)\s+(?:deposits?|withdrawals?|transactions?)\b[^.;]*\bbusiness day\b|"
                r"\bbusiness day\b[^.;]*\b(?:cash|currency)\s+(?:deposits?|withdrawals?|transactions?)\b", re.I), "CTR"),
    (re.compile(r"\bforeign (?:financial |bank )?accounts?\b", re.I), "FBAR"),
]


@validator("finance.aggregation")
def aggregation(doc: Document, params: Mapping[str, Any]) -> list[Finding]:
    """Statements that a reporting rule adds amounts together (or judges each on its own), against the KG."""
    if doc.kg is None:
        return []
    findings: list[Finding] = []
    folded = doc.text.casefold()
    if not any(word in folded for word in _CUE_WORDS) or not (_TOGETHER.search(doc.text) or _APART.search(doc.text)):
        return findings     # substring tests, then one scan of the text, spare a scan per sentence
    for sentence in doc.sentences:
        said = _stated(sentence.text)
        if said is None:
            continue
        cue_at, aggregated = said
        fact = _aggregating_fact(doc, sentence.start, sentence.end, sentence.start + cue_at)
        if fact is None:
            continue
        clause = doc.clause_of(sentence.start + cue_at)
        start = clause[0] + len(re.match(r"^\W*(?:so\s+|and\s+|but\s+|also\s+)?", doc.text[clause[0]:clause[1]]).group(0))  # type: ignore[union-attr]
        end = clause[1] - (1 if doc.text[clause[1] - 1] in ".;," else 0)
        how = fact.qualifiers.get("aggregation") or fact.qualifiers.get("measure")
        findings.append(Finding(doc.text[start:end], (start, end), "threshold", "supported" if aggregated else "contradicted",
                                0.8, [kg_evidence(f"{fact.subject.split(':', 1)[1]} aggregates: {how}", fact.provenance)],
                                subject=fact.subject))
    return findings


def _stated(text: str) -> tuple[int, bool] | None:
    """(where the cue is, whether the text says the amounts are added together), or None without a cue."""
    for match in _APART.finditer(text):
        if not _NEGATION.search(text[max(0, match.start() - 40):match.start()]):
            return match.start(), False
    for match in _TOGETHER.finditer(text):
        negated = bool(_NEGATION.search(text[max(0, match.start() - 40):match.start()]))
        return match.start(), not negated
    return None


def _aggregating_fact(doc: Document, start: int, end: int, position: int) -> Fact | None:
    """The threshold fact of the rule the sentence is about, if the KG marks it as aggregating."""
    assert doc.kg is not None
    named = [m for m in doc.mentions(["regulation"]) if start <= m.start < end]
    ids: tuple[str, ...] = named[0].entity_ids if named else ()
    if not ids:
        text = doc.text[start:end]
        alias = next((a for pattern, a in _DESCRIBED if pattern.search(text)), None)
        if alias is None and re.search(r"\b(?:deposits?|transactions?|accounts?|payments?)\b", text, re.I):
            found = doc.antecedent(position, ["regulation"])
            ids = found.entity_ids if found is not None else ()
        elif alias is not None:
            ids = tuple(e.id for e in doc.kg.lookup(alias) if e.type == "regulation")
    for rid in ids:
        for fact in doc.kg.facts(rid, "threshold"):
            if fact.qualifiers.get("aggregation") or re.search(r"aggregat|linked|related", str(fact.qualifiers.get("measure", ""))):
                return fact
    return None
