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
from rules.mentions import Mention
from rules.report import Evidence
from rules.validators.base import Finding, kg_evidence, validator
from rules.validators.medical.context import drug_for, is_labelled, labelled_drug_ids
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


@validator("medical.interaction")
def interaction(doc: Document, params: Mapping[str, Any]) -> list[Finding]:
    """Drug-drug interaction claims (and claims of no interaction) against the KG."""
    if doc.kg is None:
        return []
    findings: list[Finding] = []
    seen: set[tuple[tuple[str, ...], tuple[str, ...], tuple[int, int]]] = set()
    for seg in doc.segments:
        for clause in doc.clauses(seg):
            text = doc.text[clause[0]:clause[1]]
            denies = bool(_DENIAL.search(text))
            asserts = bool(_ASSERTION.search(text))
            if not denies and not asserts:
                continue
            partners = _partners(doc, seg, clause)
            if len(partners) < 2:
                continue
            span = _span(doc, seg, clause)
            for index, first in enumerate(partners):
                for second in partners[index + 1:]:
                    key = (first.entity_ids, second.entity_ids, span)
                    if key in seen or set(first.entity_ids) & set(second.entity_ids):
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


def _partners(doc: Document, seg: Any, clause: tuple[int, int]) -> list[Mention]:
    """Distinct partners named in the clause (plus its label), completed by coreference when one is missing."""
    spans = [clause]
    if seg.label is not None and not (seg.label[0] >= clause[0] and seg.label[1] <= clause[1]):
        spans.append(seg.label)
    named = [m for m in _merged(doc) if any(s <= m.start and m.end <= e for s, e in spans) and _is_partner(doc, m)]
    partners = _distinct(doc, named)
    text = doc.text[clause[0]:clause[1]]
    if _TOGETHER.search(text) and len(partners) < 2:
        previous = [s for s in doc.segments if s.end <= seg.start]
        if previous:
            earlier = _distinct(doc, [m for m in _merged(doc) if previous[-1].start <= m.start and m.end <= previous[-1].end
                                      and _is_partner(doc, m)])
            partners = _distinct(doc, [*earlier[-2:], *partners])
    elif len(partners) == 1 and (_REFERS.search(text) or not _starts_with_subject(doc, clause, partners[0])):
        referent = drug_for(doc, clause[0]) if partners[0].start > clause[0] else None
        if referent is None or set(labelled_drug_ids(doc, referent)) & set(labelled_drug_ids(doc, partners[0])):
            referent = _antecedent_before(doc, clause, partners[0])
        if referent is not None:
            partners = _distinct(doc, [referent, *partners])
    return partners


def _starts_with_subject(doc: Document, clause: tuple[int, int], mention: Mention) -> bool:
    return not doc.text[clause[0]:mention.start].strip(" ,;:-*(")


def _antecedent_before(doc: Document, clause: tuple[int, int], other: Mention) -> Mention | None:
    """The nearest labelled drug before the clause that is not `other`."""
    others = set(labelled_drug_ids(doc, other)) if other.entity_type == "drug" else set(other.entity_ids)
    candidates = [m for m in doc.mentions(["drug"]) if not m.in_prompt and m.end <= clause[0] and is_labelled(doc, m)
                  and not set(labelled_drug_ids(doc, m)) & others]
    if candidates:
        return candidates[-1]
    asked = [m for m in doc.prompt_mentions(["drug"]) if is_labelled(doc, m) and not set(m.entity_ids) & others]
    return asked[-1] if asked else None


def _merged(doc: Document) -> list[Mention]:
    """Drug and class mentions, one per span ("nitrates" is both a drug synonym and a class)."""
    if "interaction_mentions" not in doc.cache:
        merged: dict[tuple[int, int], Mention] = {}
        for mention in doc.mentions(PARTNER_TYPES):
            if mention.in_prompt:
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
