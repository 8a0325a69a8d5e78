"""`medical.interaction`: claims that two drugs interact, or do not, against the KG.

The partners of a clause are the labelled drugs and curated classes named in it ("an SSRI like
sertraline", "MAO inhibitor", "alcohol"); a clause that names one partner and refers to the other ("it
has no effect on warfarin", "It's also fine to combine with cyclosporine") takes the other from the
nearest compatible antecedent, and "Together they ..." takes the last two drugs of the sentence before.
A "Label: value" item ("Tramadol + sertraline: no meaningful interaction") reads its partners from the
label. Classes expand both ways: a drug stands for its classes (and the classes above them), a class for
its member drugs, so "carbapenem antibiotics like meropenem" meets a valproate-carbapenem fact.

Verdicts: a curated interaction supports an asserted interaction and contradicts a denial (or a major
one called "minor"); a curated "studied, no interaction" finding supports a denial and contradicts an
assertion; with neither, unverifiable (absence of a curated interaction is no evidence of safety).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from knowledge_graphs.model import Fact
from rules.claims import Document
from rules.extraction.polarity import negated_before
from rules.mentions import Mention
from rules.report import Evidence
from rules.validators.base import Finding, kg_evidence, validator
from rules.validators.medical.context import is_labelled, labelled_drug_ids, modifies_a_condition
from rules.validators.medical.relations import class_closure

_DENIAL = re.compile(
    r"\bno (?:known |significant |clinically (?:significant|relevant|meaningful) |major |meaningful |real |notable )*"
    r"(?:drug )?interactions?\b|\b(?:do|does|did)(?:n't| not) (?:interact|affect|change|alter)|\bhas no effect on\b|"
    r"\bno effect on\b|\bsafe(?:ly)? (?:to )?(?:be )?(?:take|taken|use|used|combine|combined|co-?administer)|"
    r"\b(?:is|are|it's|generally|perfectly|completely) (?:\w+ )?(?:fine|safe|ok|okay)\b|\bfine (?:together|to (?:use|take|combine))\b|"
    r"\bcan be (?:safely )?(?:taken|used|combined|given) together\b|\bwithout (?:any )?(?:risk|interaction)|"
    r"\bno (?:interaction|problem|issue)s? (?:worth|to worry)|\bnot an issue\b|\bno need to (?:avoid|separate)\b|"
    r"\bdoesn't (?:need|require)\b|^\s*(?:safe|fine|ok)\b|\b(?:does|do)(?:n't| not) have (?:a|any) (?:\w+ )?(?:interaction|effect)|"
    r"\bshouldn't need (?:any )?(?:extra|additional)?|\bno (?:extra|additional) (?:INR|monitoring|checks)|"
    r"\b(?:is|are) (?:considered )?safe\b|\bfine alongside\b", re.I)
_ASSERTION = re.compile(
    r"interact|contraindicat|must not be (?:combined|taken|used)|should(?:n't| not) be (?:combined|taken|used)|"
    r"\bavoid|off limits|\brais\w* (?:the )?risk|increas\w* (?:the )?(?:risk|levels?|bleeding|exposure|INR)|"
    r"reduc\w* (?:\w+ )?(?:levels?|absorption|effect)|decreas\w* (?:\w+ )?(?:absorption|levels?)|can cause|"
    r"disulfiram|serotonin syndrome|bleeding|hypotension|toxicity|drop in blood pressure|don't (?:combine|mix)|"
    r"never (?:combine|mix)|not be (?:combined|used together)|dangerous", re.I)
_MINOR = re.compile(r"\b(?:minor|mild|negligible|trivial|insignificant)\b", re.I)
_TOGETHER = re.compile(r"^\W*(?:together|combined|in combination)\b|\b(?:together they|the combination|combining them|"
                       r"the two together|taken together)\b", re.I)
_REFERS = re.compile(r"\b(?:it|it's|its|this drug|the drug|this medication|the medication|they|them|that)\b", re.I)
PARTNER_TYPES = ("drug", "drug_class")
_CONTRAINDICATION = re.compile(r"\bcontraindicat\w*", re.I)



@validator("medical.interaction")
def interaction(doc: Document, params: Mapping[str, Any]) -> list[Finding]:
    """Drug-drug interaction claims (and claims of no interaction) against the KG."""
    if doc.kg is None:
        return []
    findings: list[Finding] = []
    seen: set[tuple[tuple[str, ...], tuple[str, ...], tuple[int, int]]] = set()
    for seg in doc.segments:
        named = [m for m in _merged(doc) if seg.start <= m.start < seg.end]
        together = bool(_TOGETHER.search(seg.text))
        if not named and not together:
            continue     # no drug or class named: no interaction claim (the cheap test first)
        for clause in doc.clauses(seg):
            if not together and not any(clause[0] <= m.start < clause[1] for m in named) and not (
                    seg.label is not None and any(seg.label[0] <= m.start < seg.label[1] for m in named)):
                continue
            text = doc.text[clause[0]:clause[1]]
            denies = bool(_DENIAL.search(text)) or _negated_contraindication(text)
            asserts = bool(_ASSERTION.search(text))
            if not denies and not asserts:
                continue
            partners, focus = _partners(doc, seg, clause)
            if len(partners) < 2:
                continue
            span = _span(doc, seg, clause)
            pairs = [(focus, other) for other in partners if other is not focus] if focus is not None else [
                (first, second) for index, first in enumerate(partners) for second in partners[index + 1:]]
            for first, second in pairs:
                if True:
                    key = (first.entity_ids, second.entity_ids, span)
                    if key in seen or set(first.entity_ids) & set(second.entity_ids) or _member_of(doc, first, second):
                        continue
                    seen.add(key)
                    finding = _judge(doc, first, second, span, denies, text)
                    if finding is not None:
                        findings.append(finding)
    return findings


def _is_partner(doc: Document, mention: Mention) -> bool:
    if mention.entity_type == "drug_class":
        return True
    return is_labelled(doc, mention)


def _partners(doc: Document, seg: Any, clause: tuple[int, int]) -> tuple[list[Mention], Mention | None]:
    """Distinct partners named in the clause (plus its label), and the drug the clause is about when it is
    named by reference ("it", an elided subject): then only pairs with that drug are claims."""
    spans = [clause]
    if seg.label is not None and not (seg.label[0] >= clause[0] and seg.label[1] <= clause[1]):
        spans.append(seg.label)
    named = [m for m in _merged(doc) if any(s <= m.start and m.end <= e for s, e in spans) and _is_partner(doc, m)]
    partners = _without_covered_classes(doc, _distinct(doc, named))
    text = doc.text[clause[0]:clause[1]]
    if _TOGETHER.search(text) and len(partners) < 2 and not _PRONOUN_SUBJECT.match(text):
        previous = [s for s in doc.segments if s.end <= seg.start]
        if previous:
            earlier = _without_covered_classes(doc, _distinct(doc, [
                m for m in _merged(doc) if previous[-1].start <= m.start and m.end <= previous[-1].end and _is_partner(doc, m)]))
            return _distinct(doc, [*earlier[:2], *partners]), None
        return partners, None
    pronoun = _PRONOUN_SUBJECT.match(text)
    primary = [m for m in partners if m.entity_type == "drug" and _has_own_label(doc, m)]
    if partners and (pronoun or not primary or (len(partners) == 1 and not _starts_with_subject(doc, clause, partners[0]))):
        referent = _antecedent_before(doc, clause, partners)
        if referent is not None:
            return _distinct(doc, [referent, *partners]), referent
    return partners, None


_PRONOUN_SUBJECT = re.compile(r"^\W*(?:[^,;]{0,40},\s*)?(?:and\s+|but\s+|so\s+|also\s+)?(?:it|it's|this drug|the drug|this medication|"
                              r"the medication|this one|that one)\b", re.I)


def _member_of(doc: Document, first: Mention, second: Mention) -> bool:
    """A drug and a class it belongs to ("azithromycin" and "antibiotics") make no interaction pair."""
    if first.entity_type == second.entity_type:
        return False
    drug, group = (first, second) if first.entity_type == "drug" else (second, first)
    return bool(set(group.entity_ids) & _expand(doc, drug))


def _has_own_label(doc: Document, mention: Mention) -> bool:
    """A drug with its own curated label (not only named as another drug's interaction partner)."""
    assert doc.kg is not None
    return any(f.relation in ("max_daily_dose", "indicated_for", "in_class", "contraindicated_in")
               for i in labelled_drug_ids(doc, mention) for f in doc.kg.facts(i))


def _without_covered_classes(doc: Document, partners: list[Mention]) -> list[Mention]:
    """"SSRIs such as fluoxetine and sertraline", "carbapenem antibiotics like meropenem": the named members
    stand for the class."""
    drugs = [m for m in partners if m.entity_type == "drug"]
    out = []
    for mention in partners:
        if mention.entity_type == "drug_class" and any(set(mention.entity_ids) & _expand(doc, d) for d in drugs):
            continue
        out.append(mention)
    return out


def _starts_with_subject(doc: Document, clause: tuple[int, int], mention: Mention) -> bool:
    return not doc.text[clause[0]:mention.start].strip(" ,;:-*(")


def _antecedent_before(doc: Document, clause: tuple[int, int], partners: list[Mention]) -> Mention | None:
    """The drug an elided or pronoun subject refers to: the nearest drug with its own label before the
    clause (the previous sentence's subject first) that is none of the partners already named."""
    named: set[str] = set()
    for partner in partners:
        named |= set(labelled_drug_ids(doc, partner)) if partner.entity_type == "drug" else set(partner.entity_ids)
    referent = doc.antecedent(clause[0], ["drug"],
                              accept=lambda m: _has_own_label(doc, m) and not set(labelled_drug_ids(doc, m)) & named
                              and m.end <= clause[0])
    return referent


def _negated_contraindication(text: str) -> bool:
    """"is not contraindicated with", "isn't contraindicated", "no contraindication to": a denial, read by the
    shared polarity rules (a contraindication stated under a negation cue)."""
    return any(negated_before(text, m.start(), words=3) for m in _CONTRAINDICATION.finditer(text))


def _merged(doc: Document) -> list[Mention]:
    """Drug and class mentions, one per span ("nitrates" is both a drug synonym and a class)."""
    if "interaction_mentions" not in doc.cache:
        merged: dict[tuple[int, int], Mention] = {}
        for mention in doc.mentions(PARTNER_TYPES):
            if mention.in_prompt or modifies_a_condition(doc.text, mention):
                continue
            known = merged.get((mention.start, mention.end))
            if known is None or (known.entity_type == "drug" and not is_labelled(doc, known)):
                merged[(mention.start, mention.end)] = mention
        doc.cache["interaction_mentions"] = sorted(merged.values(), key=lambda m: m.start)
    return doc.cache["interaction_mentions"]


def _distinct(doc: Document, mentions: list[Mention]) -> list[Mention]:
    """One mention per drug: a brand and its generic in parentheses are the same partner."""
    out: list[Mention] = []
    seen: set[str] = set()
    for mention in mentions:
        ids = set(labelled_drug_ids(doc, mention)) if mention.entity_type == "drug" else set(mention.entity_ids)
        if ids & seen:
            continue
        seen |= ids
        out.append(mention)
    return out


def _span(doc: Document, seg: Any, clause: tuple[int, int]) -> tuple[int, int]:
    start, end = clause
    while start < end and doc.text[start] in " ,;:-*":
        start += 1
    words = re.match(r"(?:and|but|while|whereas|so)\s+", doc.text[start:end], re.I)
    if words:
        start += words.end()
    while end > start and doc.text[end - 1] in " .,;:*":
        end -= 1
    return start, end


def _expand(doc: Document, mention: Mention) -> set[str]:
    """A drug's ids plus its classes and the classes above them; a class's ids plus its member drugs."""
    assert doc.kg is not None
    ids = set(labelled_drug_ids(doc, mention)) if mention.entity_type == "drug" else set(mention.entity_ids)
    classes = {f.object for i in ids for f in doc.kg.facts(i, "in_class") if f.object}
    out = ids | class_closure(doc.kg, classes | {i for i in ids if i.startswith("drug_class:")})
    for class_id in [i for i in ids if i.startswith("drug_class:")]:
        out |= {f.subject for f in doc.kg.facts(relation="in_class", object=class_id)}
    return out


def _facts_between(doc: Document, left: Iterable[str], right: set[str], relation: str) -> list[Fact]:
    assert doc.kg is not None
    return [f for s in left for f in doc.kg.facts(s, relation) if f.object in right]


def _judge(doc: Document, first: Mention, second: Mention, span: tuple[int, int], denies: bool,
           clause_text: str) -> Finding | None:
    text = doc.text[span[0]:span[1]]
    left, right = _expand(doc, first), _expand(doc, second)
    facts = _facts_between(doc, left, right, "interacts_with") or _facts_between(doc, right, left, "interacts_with")
    studied = _facts_between(doc, left, right, "no_interaction_with")
    subject = (labelled_drug_ids(doc, first) if first.entity_type == "drug" else first.entity_ids)[0]
    if facts:
        fact = max(facts, key=lambda f: f.qualifiers.get("severity") == "major")
        severity = str(fact.qualifiers.get("severity", ""))
        evidence = [kg_evidence(f"{first.text} interacts_with {second.text}: {severity} "
                                f"({fact.qualifiers.get('effect', '')})", fact.provenance)]
        if denies:
            return Finding(text, span, "interaction", "contradicted", 0.9, [*evidence, Evidence(
                kind="rule", description="the text denies or downplays an interaction the label states")], subject=subject)
        if severity == "major" and _MINOR.search(clause_text):
            return Finding(text, span, "interaction", "contradicted", 0.8,
                           [*evidence, Evidence(kind="rule", description="the text calls a major interaction minor")],
                           subject=subject)
        return Finding(text, span, "interaction", "supported", 0.9, evidence, subject=subject)
    if studied:
        fact = studied[0]
        evidence = [kg_evidence(f"{first.text} / {second.text}: {fact.qualifiers.get('finding', 'no interaction')}",
                                fact.provenance)]
        return Finding(text, span, "interaction", "supported" if denies else "contradicted", 0.8, evidence,
                       subject=subject)
    if first.entity_type == "drug_class" and second.entity_type == "drug_class":
        return None
    return Finding(text, span, "interaction", "unverifiable", 0.5, [Evidence(
        kind="kg_fact", description=f"no curated interaction between {first.text} and {second.text}; absence of an "
        "interaction in the KG is not evidence that the combination is safe")], subject=subject)
