"""Drug relations stated in prose: indications, contraindications, drug classes and brand names.

Closed-world rules (what the KG's curated label data is taken to be complete for, per relation):

- indicated_for: section 1 of a US label lists every approved indication. For a drug with curated
  indications, a claimed indication ("approved for", "indicated for", "prescribed to", "treats",
  "used to treat", a list under "approved uses:") of a known condition outside that list is
  contradicted (confidence 0.75, the labelled list as evidence); a denied indication outside it is
  supported; a denied indication on it is contradicted. A qualifier the label restricts ("mild" where
  the label says "moderate to severe", "on its own" where it says "adjunctive") contradicts. A use said
  to be off-label, "sometimes" or "may be" used is not a claim about the label: unverifiable.
- contraindicated_in: open world (curated contraindications are a selection of section 4): a listed
  contraindication is supported and denying it ("safe in", "not contraindicated") contradicted; an
  unlisted one is unverifiable, except a labelled indication, which is contradicted.
- in_class: a drug's established pharmacologic classes and every class above them (subclass_of) are
  complete: a claimed class that is a known class outside them is contradicted ("duloxetine is an SSRI").
- brand names: a brand and a generic that resolve to different labelled drugs contradict ("Namenda:
  donepezil"); the same drug supports; a salt or formulation the curated brand contradicts ("Toprol-XL is
  metoprolol tartrate") contradicts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from knowledge_graphs.model import Fact, KnowledgeGraph
from rules.claims import Document, Segment
from rules.mentions import Mention
from rules.report import Evidence
from rules.validators.base import Finding, kg_evidence, validator
from rules.validators.medical.context import (
    brand_fact,
    drug_for,
    drug_ids,
    facts_of,
    is_labelled,
    labelled_drug_ids,
    negated_between,
)

# -- indications and contraindications ----------------------------------------------------------------
_CONTRA_CUE = re.compile(r"contraindicat|should(?:n't| not) be (?:used|given|taken)|must not be (?:used|given|taken)|"
                         r"do not use|avoid(?:ed)? in\b|off limits", re.I)
_SAFE_CUE = re.compile(r"\b(?:safe|is fine|fine to use)\b[^.;]{0,30}\b(?:in|for|with)\b|"
                       r"\b(?:can be (?:safely )?(?:used|given|taken)|may be (?:used|given))\b[^.;]{0,30}\b(?:in|for|with)\b"
                       r"(?=[^.;]{0,40}\b(?:patients?|people|those|history|anyone|pregnan|someone))|"
                       r"not contraindicated|isn't contraindicated", re.I)
_INDICATION_CUE = re.compile(
    r"\b(?:indicat\w*|approved|approval|prescribed|treats?|treating|treated|treatment|used (?:for|to|in)|"
    r"labell?ed for|therapy for|first[- ]line|uses? (?:is|are|include)|manage(?:s|ment)? of)\b", re.I)
_HEDGED_USE = re.compile(r"off[- ]label|\bsometimes\b|\bmay be used\b|\bcan be used\b|\bunofficially\b|\bsome doctors\b", re.I)
_APPROVED_USES_HEADING = re.compile(r"\b(?:approved (?:uses|indications)|indicat(?:ed|ions)|is approved for|"
                                    r"approved for|is used for|treats)\b", re.I)
# a condition named as the cause or setting of another ("edema from heart failure") is no indication itself
_MODIFIER_BEFORE = re.compile(r"\b(?:from|due to|caused by|secondary to|associated with|related to)\s+$", re.I)
# "edema from heart failure or kidney disease": an item joined to a modifier is a modifier too; joined to an
# indication ("approved for hypertension and heart failure") it is an indication of its own
_JOINED_BEFORE = re.compile(r"(?:,\s*|\s+)(?:(?:and|or)\s+)?$", re.I)
# "edema due to cirrhosis and heart failure", where cirrhosis is no KG condition: still a list of causes
_CAUSES_BEFORE = re.compile(r"\b(?:from|due to|caused by|secondary to|associated with|related to)\s+[\w\s,'-]{0,60}?"
                            r"(?:,\s*|\s+)(?:and|or)\s+$", re.I)
_SEVERITY = re.compile(r"\b(mild|moderate|severe|all stages|early|advanced)\b", re.I)
_STANDALONE = re.compile(r"\b(?:on its own|alone|standalone|stand-alone|as monotherapy|by itself)\b", re.I)
_ADJUNCT = re.compile(r"\b(?:add-on|adjunct\w*|in combination|added to)\b", re.I)


@validator("medical.indication")
def indication(doc: Document, params: Mapping[str, Any]) -> list[Finding]:
    """Drug-condition claims (indications, contraindications) against the KG's label facts."""
    if doc.kg is None:
        return []
    closed_world = bool(params.get("closed_world_label_indications", True))
    findings: list[Finding] = []
    conditions = [m for m in doc.mentions(["condition"]) if not m.in_prompt]
    modifiers: set[int] = set()
    for index, condition in enumerate(conditions):
        clause = doc.clause_of(condition.start)
        seg = doc.segment_of(condition.start)
        before = doc.text[clause[0]:condition.start]
        if _MODIFIER_BEFORE.search(before) and _condition_before(conditions, clause, condition):
            modifiers.add(index)
            continue
        previous = index - 1
        if index and clause[0] <= conditions[previous].start and _CAUSES_BEFORE.search(
                doc.text[conditions[previous].end:condition.start]):
            modifiers.add(index)
            continue
        if previous in modifiers and clause[0] <= conditions[previous].start and _JOINED_BEFORE.fullmatch(
                doc.text[conditions[previous].end:condition.start]):
            modifiers.add(index)
            continue
        cue = _cue(doc, condition, before, seg)
        if cue is None:
            continue
        drug = drug_for(doc, condition.start)
        if drug is None:
            continue
        kind, start = cue
        earlier = [m for m in conditions if start <= m.start and m.end <= condition.start]
        if earlier:      # "approved for asthma and also for COPD": each condition is its own claim
            # past the earlier condition's own parenthetical ("bipolar disorder (manic episodes), and insomnia")
            start = earlier[-1].end + len(re.match(r"[\s,;)]*(?:\([^()]{0,120}\)[\s,;]*)?(?:(?:and|or|as well as)\s+)?",
                                                   doc.text[earlier[-1].end:]).group(0))
        span = (start, condition.end)
        if _outcome_of_indication(doc, conditions, condition, clause):
            continue
        negated = negated_between(doc, start, condition.start) or bool(
            re.search(r"\b(?:isn't|is not|aren't|not|never)\b[^.;,]{0,20}$", doc.text[clause[0]:start]))
        # what the exclusive claim allows: every condition its sentence names ("only for X and, as Y, for Z")
        named = {i for m in conditions if seg.start <= m.start < seg.end for i in m.entity_ids}
        exclusive = not negated and _EXCLUSIVE.search(doc.text[max(clause[0], start - 25):condition.start]) is not None
        if kind == "contraindication":
            others = [m for m in conditions if clause[0] <= m.start < clause[1] and m is not condition]
            if _pair_facts(doc, drug, condition, "indicated_for") and any(
                    _pair_facts(doc, drug, other, "contraindicated_in") for other in others):
                continue    # "contraindicated for migraine prevention in pregnant women": migraine qualifies
            found = _judge_contraindication(doc, drug, condition, span, asserted=not negated)
            findings.append(_exclusive(doc, drug, found, "contraindicated_in", named, condition) if exclusive else found)
        elif kind == "safe":
            findings.append(_judge_contraindication(doc, drug, condition, span, asserted=False))
        elif kind == "offlabel":
            findings.append(Finding(doc.text[span[0]:span[1]], span, "indication", "unverifiable", 0.5, [Evidence(
                kind="rule", description="a hedged or off-label use is not a claim about the label's indications")],
                subject=labelled_drug_ids(doc, drug)[0]))
        else:
            found = _judge_indication(doc, drug, condition, span, negated, closed_world, doc.text[clause[0]:clause[1]])
            findings.append(_exclusive(doc, drug, found, "indicated_for", named, condition) if exclusive else found)
    return findings


# "contraindicated only in X", "approved only for X", "its only indication is X": the claim excludes the rest
_EXCLUSIVE = re.compile(r"(?<!\bnot )\bonly\b(?!\s+(?:if|when|after|once|under)\b)(?=[^.;]*$)|\b(?:sole|single|one)\s+"
                        r"(?:labell?ed\s+|approved\s+)?(?:indication|contraindication|approved use|use)\b", re.I)


def _exclusive(doc: Document, drug: Mention, found: Finding, relation: str, named: set[str],
               condition: Mention) -> Finding:
    """An exclusive claim holds only when the label lists nothing of the relation beyond what the clause
    names: another labelled condition contradicts it, whatever the verdict on the named one. Naming only a
    part of a labelled condition ("only in NYHA class IV" where the label says class III or IV) excludes the
    rest of it, so it contradicts the label too."""
    if found.verdict == "contradicted":
        return found
    part = _part_of_labelled(doc, drug, condition, relation) if found.verdict == "supported" else None
    if part is not None:
        fact, whole = part
        return Finding(found.text, found.span, found.kind, "contradicted", 0.8, [*found.evidence, kg_evidence(
            f"the label's {relation.replace('_', ' ')} fact is {whole}; '{condition.text}' names only part of it",
            fact.provenance), Evidence(kind="rule", description="the text says 'only' and names part of a labelled "
                                       "condition: the label's condition is broader than the claim allows")],
            subject=found.subject)
    others = [f for f in facts_of(doc, labelled_drug_ids(doc, drug), relation) if f.object not in named]
    if not others:
        return found
    listed = ", ".join(sorted({_name(doc.kg, f.object) for f in others})[:6])  # type: ignore[arg-type]
    what = "contraindications" if relation == "contraindicated_in" else "indications"
    return Finding(found.text, found.span, found.kind, "contradicted", 0.8, [*found.evidence, kg_evidence(
        f"the label also lists as {what} of {drug.text}: {listed}", others[0].provenance), Evidence(
        kind="rule", description=f"the text says 'only'; the label's {what} are not limited to what it names")],
        subject=found.subject)


def _part_of_labelled(doc: Document, drug: Mention, condition: Mention, relation: str) -> tuple[Fact, str] | None:
    """The labelled fact and its condition's name when `condition` was written as one of that condition's
    `part_aliases` (KG attribute: aliases naming a subset of the entity, such as one NYHA class of two)."""
    text = condition.text.casefold()
    for fact in _pair_facts(doc, drug, condition, relation):
        entity = doc.kg.entity(str(fact.object)) if doc.kg is not None else None
        parts = [str(p).casefold() for p in (entity.attributes.get("part_aliases", []) if entity else [])]
        if entity is not None and text in parts:
            return fact, entity.name
    return None


_RISK_OF = re.compile(r"\b(?:risk of|prevent\w*(?: of)?|reduc\w* (?:the )?(?:risk|incidence|chance) of)\s+$", re.I)
_IN_PATIENTS_WITH = re.compile(r"^[^.;]{0,60}?\bin (?:patients|people|adults|those|anyone) (?:with|who have)\b", re.I)


def _outcome_of_indication(doc: Document, conditions: list[Mention], condition: Mention, clause: tuple[int, int]) -> bool:
    """"to reduce the risk of stroke in patients with atrial fibrillation": stroke is the outcome, the
    condition after "in patients with" is the indication."""
    if not _RISK_OF.search(doc.text[max(clause[0], condition.start - 40):condition.start]):
        return False
    after = _IN_PATIENTS_WITH.match(doc.text[condition.end:clause[1]])
    return bool(after) and any(condition.end < m.start < clause[1] for m in conditions)


def _condition_before(conditions: list[Mention], clause: tuple[int, int], condition: Mention) -> bool:
    return any(clause[0] <= m.start and m.end <= condition.start for m in conditions)


def _cue(doc: Document, condition: Mention, before: str, seg: Any) -> tuple[str, int] | None:
    """What the clause says about the condition, and where that statement starts."""
    clause_start = doc.clause_of(condition.start)[0]
    whole = doc.text[clause_start:doc.clause_of(condition.start)[1]]
    for kind, pattern in (("contraindication", _CONTRA_CUE), ("safe", _SAFE_CUE)):
        found = list(pattern.finditer(before))
        if found:
            return kind, clause_start + found[-1].start()
    if _HEDGED_USE.search(whole):
        return "offlabel", clause_start
    found = list(_INDICATION_CUE.finditer(before))
    if found:
        return "indication", clause_start + found[-1].start()
    # "Some of its approved uses:" followed by one condition per list item
    if seg.kind == "item" and _APPROVED_USES_HEADING.search(seg.heading or ""):
        return "indication", seg.start
    if seg.kind == "item" and _CONTRA_CUE.search(seg.heading or ""):
        return "contraindication", seg.start
    return None


def _pair_facts(doc: Document, drug: Mention, condition: Mention, relation: str) -> list[Fact]:
    return [f for f in facts_of(doc, labelled_drug_ids(doc, drug), relation) if f.object in condition.entity_ids]


def _judge_contraindication(doc: Document, drug: Mention, condition: Mention, span: tuple[int, int],
                            asserted: bool) -> Finding:
    text = doc.text[span[0]:span[1]]
    subject = labelled_drug_ids(doc, drug)[0]
    facts = _pair_facts(doc, drug, condition, "contraindicated_in")
    if facts:
        evidence = [kg_evidence(f"{drug.text} contraindicated_in {condition.text}", facts[0].provenance)]
        return Finding(text, span, "contraindication", "supported" if asserted else "contradicted", 0.9, evidence,
                       subject=subject)
    indicated = _pair_facts(doc, drug, condition, "indicated_for")
    if indicated and asserted:
        return Finding(text, span, "contraindication", "contradicted", 0.8,
                       [kg_evidence(f"{condition.text} is a labelled indication of {drug.text}, not a contraindication",
                                    indicated[0].provenance)], subject=subject)
    return Finding(text, span, "contraindication", "unverifiable", 0.5, [Evidence(
        kind="kg_fact", description=f"no contraindicated_in fact for {drug.text} / {condition.text}; the curated "
        "contraindications are a selection of the label's section 4, so absence is not evidence")], subject=subject)


def _judge_indication(doc: Document, drug: Mention, condition: Mention, span: tuple[int, int], negated: bool,
                      closed_world: bool, clause_text: str) -> Finding:
    text = doc.text[span[0]:span[1]]
    subject = labelled_drug_ids(doc, drug)[0]
    facts = _pair_facts(doc, drug, condition, "indicated_for")
    labelled = facts_of(doc, labelled_drug_ids(doc, drug), "indicated_for")
    names = ", ".join(sorted({_name(doc.kg, f.object) for f in labelled}))  # type: ignore[arg-type]

    def finding(verdict: str, confidence: float, evidence: list[Evidence]) -> Finding:
        return Finding(text, span, "indication", verdict, confidence, evidence, subject=subject)  # type: ignore[arg-type]

    if facts:
        fact = facts[0]
        evidence = [kg_evidence(f"{drug.text} indicated_for {condition.text}"
                                + (f" ({_qualifier_text(fact)})" if _qualifier_text(fact) else ""), fact.provenance)]
        conflict = _qualifier_conflict(fact, clause_text)
        if negated:
            return finding("contradicted", 0.85, evidence)
        if conflict:
            return finding("contradicted", 0.8, [*evidence, Evidence(kind="rule", description=conflict)])
        return finding("supported", 0.9, evidence)
    contra = _pair_facts(doc, drug, condition, "contraindicated_in")
    if contra and not negated:
        return finding("contradicted", 0.9, [kg_evidence(f"{drug.text} is contraindicated in {condition.text}",
                                                         contra[0].provenance)])
    if not labelled or not closed_world:
        return finding("unverifiable", 0.5, [Evidence(kind="kg_fact", description=f"no labelled indications of "
                                                      f"{drug.text} in the KG")])
    evidence = [kg_evidence(f"labelled indications of {drug.text}: {names}", labelled[0].provenance),
                Evidence(kind="rule", description="section 1 of a US label lists every approved indication "
                         f"(closed world): {condition.text} is not among them")]
    return finding("supported" if negated else "contradicted", 0.75, evidence)


def _qualifier_text(fact: Fact) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(fact.qualifiers.items()) if k in ("severity", "therapy"))


def _qualifier_conflict(fact: Fact, clause_text: str) -> str | None:
    severity = str(fact.qualifiers.get("severity") or "").casefold()
    if severity and "mild" not in severity:
        claimed = {m.group(1).casefold() for m in _SEVERITY.finditer(clause_text)}
        if claimed and claimed <= {"mild", "early"}:
            return f"the label restricts this indication to {severity} disease; the text says {', '.join(sorted(claimed))}"
    therapy = str(fact.qualifiers.get("therapy") or "").casefold()
    if therapy == "adjunctive" and _STANDALONE.search(clause_text) and not _ADJUNCT.search(clause_text):
        return "the label approves this indication only as adjunctive treatment; the text says on its own"
    return None


def _name(kg: KnowledgeGraph, entity_id: str | None) -> str:
    entity = kg.entity(entity_id) if entity_id else None
    return entity.name if entity else str(entity_id)


# -- drug classes --------------------------------------------------------------------------------------
_CLASS_CUE_BEFORE = re.compile(
    r"(?:\b(?:is|are|was|'s|s)\s+(?:also\s+)?(?:not\s+)?(?:a|an|the|both)?\s*(?:\w+[- ])?$|"
    r"\bclass(?:ed|ified)? as\s+(?:an?\s+)?$|\b(?:type|kind|member) of (?:an?\s+)?$|\bbelongs? to (?:the\s+)?$|"
    r":\s*(?:an?\s+|the\s+)?$|,\s+(?:an?|the)\s+$|\bis the\s+$)", re.I)
_CLASS_HEADER = re.compile(r"\bclass\b", re.I)


@validator("medical.drug_class")
def drug_class(doc: Document, params: Mapping[str, Any]) -> list[Finding]:
    """"X is an SSRI", "Amoxicillin (Amoxil): a cephalosporin", a "Drug class" column: against in_class."""
    if doc.kg is None:
        return []
    findings: list[Finding] = []
    for mention in doc.mentions(["drug_class"]):
        if mention.in_prompt:
            continue
        clause = doc.clause_of(mention.start)
        seg = doc.segment_of(mention.start)
        before = doc.text[max(clause[0], mention.start - 60):mention.start]
        cell = seg.cell_at(mention.start) if seg.cells else None
        by_structure = cell is not None and _CLASS_HEADER.search(cell.header) is not None
        if not by_structure and not _CLASS_CUE_BEFORE.search(before):
            continue
        if re.search(r"\b(?:such as|like|including|other|with|any)\s*$", before, re.I) and not by_structure and \
                not re.search(r"\b(?:is|'s|are)\s+(?:an?\s+)?$", before, re.I):
            continue
        drug = drug_for(doc, mention.start)
        if drug is None or (not drug.in_prompt and drug.start > mention.start and drug.start - mention.end > 5):
            continue
        if _another_drug_is_nearer(doc, seg, drug):
            continue
        start = _claim_start(doc, mention, clause)
        negated = bool(re.search(r"\b(?:not|isn't|aren't|never)\b[^.;]{0,25}$", doc.text[clause[0]:mention.start], re.I))
        findings.append(_judge_class(doc, drug, mention, (start, mention.end), negated))
    return findings


def _another_drug_is_nearer(doc: Document, seg: Segment, drug: Mention) -> bool:
    """The labelled drug found lies outside the sentence while the sentence names a drug the KG has no label for
    ("tasimelteon (Hetlioz) is another melatonin agonist"): the class is about that one, not the earlier drug."""
    if drug.in_prompt or seg.start <= drug.start < seg.end:
        return False
    return any(seg.start <= m.start < seg.end and not m.in_prompt for m in doc.mentions(["drug"]))


def _claim_start(doc: Document, mention: Mention, clause: tuple[int, int]) -> int:
    """The article or copula right before the class name ("an SSRI", "is a statin")."""
    before = doc.text[clause[0]:mention.start]
    found = re.search(r"(?:\b(?:is|are|'s)\s+(?:also\s+)?(?:not\s+)?)?(?:\b(?:an?|the)\s+)?(?:\w+[- ]generation\s+)?$", before, re.I)
    return clause[0] + found.start() if found and found.group(0).strip() else mention.start


def class_closure(kg: KnowledgeGraph, class_ids: Iterable[str]) -> set[str]:
    """The classes and every class above them (subclass_of)."""
    out: set[str] = set()
    frontier = set(class_ids)
    while frontier:
        out |= frontier
        frontier = {f.object for c in frontier for f in kg.facts(c, "subclass_of") if f.object} - out
    return out


def _judge_class(doc: Document, drug: Mention, mention: Mention, span: tuple[int, int], negated: bool) -> Finding:
    assert doc.kg is not None
    text = doc.text[span[0]:span[1]]
    ids = labelled_drug_ids(doc, drug)
    facts = facts_of(doc, ids, "in_class")
    subject = ids[0]
    if not facts:
        return Finding(text, span, "drug_class", "unverifiable", 0.5, [Evidence(
            kind="kg_fact", description=f"no pharmacologic class for {drug.text} in the KG")], subject=subject)
    own = class_closure(doc.kg, [f.object for f in facts if f.object])
    claimed = set(mention.entity_ids)
    names = ", ".join(sorted(_name(doc.kg, c) for c in own))
    evidence = [kg_evidence(f"classes of {drug.text}: {names}", facts[0].provenance)]
    holds = bool(claimed & own)
    if holds != negated:
        return Finding(text, span, "drug_class", "supported", 0.9, evidence, subject=subject)
    evidence.append(Evidence(kind="rule", description=f"{mention.text} is {'' if negated else 'not '}among the "
                             "established pharmacologic classes of the label (and the classes above them)"))
    return Finding(text, span, "drug_class", "contradicted", 0.85, evidence, subject=subject)


# -- brand names -----------------------------------------------------------------------------------------
_SAME_CUE = re.compile(r"^\s*(?:is|are|=|:|\(|,)?\s*(?:just\s+|simply\s+|actually\s+)?(?:the\s+)?(?:brand(?:-name)?\s+(?:name\s+)?for\s+|"
                       r"generic\s+(?:name\s+)?(?:for\s+)?|same (?:drug|medication) as\s+)?$", re.I)
_SALTS = ("tartrate", "succinate", "sodium", "potassium", "hydrochloride", "hcl", "citrate", "maleate", "besylate",
          "mesylate", "magnesium", "calcium", "sulfate", "phosphate", "bromide")


@validator("medical.brand")
def brand(doc: Document, params: Mapping[str, Any]) -> list[Finding]:
    """"Zoloft is sertraline", "Namenda: donepezil", "Tylenol (acetaminophen)": brand and generic agree."""
    if doc.kg is None:
        return []
    findings: list[Finding] = []
    drugs = [m for m in doc.mentions(["drug"]) if not m.in_prompt and is_labelled(doc, m)]
    for index, first in enumerate(drugs[:-1]):
        second = drugs[index + 1]
        if doc.clause_of(first.start) != doc.clause_of(second.start) and doc.segment_of(first.start).kind == "sentence":
            continue
        gap = doc.text[first.end:second.start]
        brand_mention, generic = (first, second) if _is_brand(doc, first) else (second, first)
        if not _is_brand(doc, brand_mention) or _is_brand(doc, generic):
            continue
        if not (_SAME_CUE.match(gap) or re.fullmatch(r"\s*\((?:the\s+)?active ingredient in\s*", gap, re.I)):
            continue
        end = second.end
        close = re.match(r"[\w\s-]{0,25}?\)", doc.text[end:end + 30]) if "(" in gap else None
        span = (first.start, end + (close.end() if close else 0))
        judged = _judge_brand(doc, brand_mention, generic, span)
        # "Varenicline (Chantix) still carries ...": a right name in parentheses names the subject, it is not what
        # the sentence asserts, so it makes no claim of its own (a wrong one is still an error)
        if judged.verdict == "supported" and gap.strip().startswith("("):
            continue
        findings.append(judged)
    findings += _formulation_claims(doc, drugs)
    return findings


def _is_brand(doc: Document, mention: Mention) -> bool:
    """The mention is written as a curated brand name of its drug (the label's title names it)."""
    written = _words(mention.text)
    return any(_words(str(f.value))[:len(written)] == written for f in facts_of(doc, labelled_drug_ids(doc, mention),
                                                                               "has_brand"))


def _words(text: str) -> list[str]:
    return re.sub(r"[^a-z0-9]+", " ", text.casefold()).split()


def _judge_brand(doc: Document, brand_mention: Mention, generic: Mention, span: tuple[int, int]) -> Finding:
    assert doc.kg is not None
    text = doc.text[span[0]:span[1]]
    brand_ids = set(drug_ids(doc, brand_mention) if not _parenthetical(doc, brand_mention, generic) else brand_mention.entity_ids)
    generic_ids = set(generic.entity_ids)
    subject = next(iter(sorted(generic_ids)))
    entity = doc.kg.entity(sorted(brand_mention.entity_ids)[0])
    evidence = [kg_evidence(f"{brand_mention.text} is a brand of {entity.name if entity else brand_mention.text}",
                            entity.provenance if entity else None, kind="registry")]
    if not brand_ids & generic_ids:
        return Finding(text, span, "brand_generic", "contradicted", 0.9, [*evidence, Evidence(
            kind="rule", description=f"{generic.text} is a different drug")], subject=subject)
    salt = _salt_after(doc, generic)
    fact = brand_fact(doc, brand_mention)
    if salt and fact is not None and fact.qualifiers.get("salt") and salt != str(fact.qualifiers["salt"]):
        return Finding(text, span, "brand_generic", "contradicted", 0.85, [kg_evidence(
            f"{fact.value} is {entity.name if entity else ''} {fact.qualifiers['salt']}, not {salt}", fact.provenance)],
            subject=subject)
    return Finding(text, span, "brand_generic", "supported", 0.9, evidence, subject=subject)


def _parenthetical(doc: Document, a: Mention, b: Mention) -> bool:
    return "(" in doc.text[min(a.end, b.end):max(a.start, b.start)]


def _salt_after(doc: Document, generic: Mention) -> str | None:
    """The salt written with the generic ("metoprolol tartrate"), inside the mention or right after it."""
    found = re.search(r"\b(" + "|".join(_SALTS) + r")\b", doc.text[generic.start:generic.end + 20], re.I)
    return found.group(1).casefold() if found and found.start() <= generic.end - generic.start + 1 else None


_FORM_CLAIM = re.compile(r"^\s*(?:is|are)\s+(?:the\s+)?(immediate|extended|sustained|delayed)[- ]release\b", re.I)


def _formulation_claims(doc: Document, drugs: list[Mention]) -> list[Finding]:
    """"Lopressor is the immediate-release form": the curated brand's formulation."""
    out = []
    for mention in drugs:
        found = _FORM_CLAIM.match(doc.text[mention.end:mention.end + 40])
        fact = brand_fact(doc, mention) if found else None
        if found is None or fact is None or not fact.qualifiers.get("formulation"):
            continue
        span = (mention.start, mention.end + found.end())
        stated = found.group(1).casefold()
        holds = stated in str(fact.qualifiers["formulation"]).casefold()
        out.append(Finding(doc.text[span[0]:span[1]], span, "brand_generic", "supported" if holds else "contradicted",
                           0.85, [kg_evidence(f"{fact.value}: {fact.qualifiers['formulation']}", fact.provenance)],
                           subject=labelled_drug_ids(doc, mention)[0]))
    return out
