"""`finance.thresholds`: reporting thresholds (CTR, SAR, Form 8300, CMIR, FBAR, travel rule, monetary
instrument log, EU cash rules) stated for a regulation, and amounts compared with them.

Each amount ("$10,000", "ten thousand dollars", "$15k", "€15,000") is either a threshold statement or a
comparison. Its regulation is the one named in its clause, row, label or list heading, else the nearest
one before it (coreference: "that line", "the threshold", "it"), else the question's. A family name
("SAR", "CTR") is narrowed by the institution named with it: banks, money services businesses, casinos.

- Threshold statements are checked for value and comparison: "more than $10,000" and "$10,000 or more"
  are different rules, so the comparison the text states must be the regulation's ("CTR: $10,000 or more"
  is contradicted). A range ("between $3,000 and $10,000") must match both ends.
- Comparisons ("$12,500 is above that line", "$9,500 is above the CTR threshold", "the total of $10,500
  would trigger a CTR", "exactly $10,000 would be reported", "exactly €10,000 is fine") are judged by
  the regulation's own comparison: reportable iff the amount is more than (or at least) the threshold.
- "applies from 10 July 2028" is checked against the regulation's application date.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

from knowledge_graphs.model import Fact, KnowledgeGraph
from rules.claims import Document, Segment
from rules.extraction.dates import find_dates
from rules.extraction.numbers import numeric_view
from rules.report import Evidence
from rules.units import Money, find_money
from rules.validators.base import Finding, kg_evidence, validator
from rules.validators.finance.codes import iso_currency_codes

_GT_BEFORE = re.compile(r"\b(?:more than|over|above|exceed(?:s|ing)?|in excess of|tops?|greater than|beyond)\s+(?:a\s+|the\s+)?"
                        r"(?:total of\s+|combined\s+)?$", re.I)
_GE_BEFORE = re.compile(r"\b(?:at least|a minimum of|starting at|no less than)\s+$", re.I)
_GE_AFTER = re.compile(r"^\s*(?:or more|or above|and above|and up|or greater|or higher|and over|or over)\b", re.I)
_RANGE = re.compile(r"^\s*(?:to|-|–|and|through)\s*$", re.I)
_COMPARISON = re.compile(
    r"^[^.;]{0,40}?\b(?:is|are|was|would be|'s|be)\s+(?:not\s+|still\s+|already\s+|well\s+|just\s+)?"
    r"(?P<op>above|over|more than|higher than|greater than|below|under|less than|lower than|within|beyond|past)\b"
    r"|^\s*(?P<op2>exceeds?|tops?)\b|^[^.;]{0,40}?\bwould\s+(?P<op3>fall below|fall under|exceed)\b", re.I)
_TRIGGERS = re.compile(r"\b(?:would|will|does|must|has to|have to|needs? to|is required to)?\s*(?:trigger|require|be reported|"
                       r"be reportable|file|need to (?:file|declare)|must (?:file|declare|be declared)|declare)\b", re.I)
_NO_TRIGGER = re.compile(r"\b(?:won't|will not|doesn't|does not|don't|do not|wouldn't|would not|isn't|is not|not)\b[^.;]{0,30}"
                         r"\b(?:trigger|require|reported|file|declare|need)|\bis fine\b|\bavoids?\b|\bno need\b|"
                         r"\bnot (?:required|reportable)\b|\bdon't need to\b", re.I)
_EXACTLY = re.compile(r"\bexactly\s+$", re.I)
_APPLIES = re.compile(r"\b(?:applies|apply|applying|kicks? in|takes? effect|starts?|begins?|effective|in force|from)\b", re.I)
_INSTITUTIONS: list[tuple[str, re.Pattern[str]]] = [
    ("casino", re.compile(r"\bcasinos?\b|\bcard clubs?\b|\bgaming day\b", re.I)),
    ("msb", re.compile(r"\bmoney services? business(?:es)?\b|\bMSBs?\b|\bmoney transmitters?\b", re.I)),
    ("bank", re.compile(r"\bbanks?\b|\bdepository institutions?\b", re.I)),
]
# a family name plus an institution -> the KG alias of the regulation meant (resolved through the KG)
_FAMILIES: dict[str, dict[str, str]] = {
    "sar": {"bank": "bank SAR", "msb": "MSB SAR", "casino": "casino SAR"},
    "ctr": {"casino": "casino CTR"},
}
_FAMILY_WORDS = {"sar": re.compile(r"\bSARs?\b|\bsuspicious activity reports?\b|\bsuspicious (?:transactions?|activity)\b", re.I),
                 "ctr": re.compile(r"\bCTRs?\b|\bcurrency transaction reports?\b", re.I)}


# A regulation described rather than named, in the amount's own clause: (KG alias it means, the description).
# Cross-border cash: carrying cash across a border (US: CMIR) or into/out of the EU (EU cash controls); cash
# accepted by traders in goods in the EU (AMLR cash limit).
_EU = re.compile(r"\b(?:EU\b|E\.U\.|European Union\b|the Union\b)")
_CARRY_ACROSS = re.compile(r"\b(?:carry\w*|bring\w*|brought|transport\w*|tak(?:e|es|ing)|travel\w*|cross\w*)\b"
                           r"[^.;]{0,60}\b(?:across|into|out of|through|leaving|entering|border)\b|"
                           r"\b(?:cash|currency)\s+(?:entering|leaving|crossing)\b|\bcash declaration\b|"
                           r"\b(?:declare|report)\w*\s+(?:the\s+)?cash\b[^.;]{0,30}\b(?:border|customs|entering|leaving)\b",
                           re.I)
_TRADERS_CASH = re.compile(r"\b(?:traders?|dealers?|sellers?|merchants?|shops?)\b[^.;]{0,40}\b(?:accept|take|receiv)\w*"
                           r"[^.;]{0,25}\bcash\b|\bcash payments?\b[^.;]{0,40}\b(?:goods|services)\b", re.I)
# The AML directive, not the AMLR cap: traders in goods *become obliged entities* (are covered, must apply due
# diligence) at a cash amount; "occasional transactions" are the directive's due-diligence trigger. A cap
# ("cannot accept", "limit", "ban") stays the AMLR's.
_TRADERS_IN_GOODS = re.compile(r"\b(?:traders?|persons? trading|dealers?) in goods\b", re.I)
_OBLIGED = re.compile(r"\b(?:obliged entit\w+|covered|AML (?:directive|framework|rules)|anti-money laundering (?:directive|rules)|"
                      r"AMLD\d?|directive|due diligence|become subject)\b", re.I)
_CAP = re.compile(r"\b(?:cap|caps|capped|limit\w*|bans?|banned|prohibit\w*|cannot|can't|may not|must not|no longer|AMLR|"
                  r"regulation \(EU\) 2024/1624)\b", re.I)
_OCCASIONAL = re.compile(r"\boccasional transactions?\b", re.I)


def _described(doc: Document, clause: tuple[int, int]) -> tuple[str, ...]:
    """The regulation a clause describes without naming it (see `_CARRY_ACROSS`, `_TRADERS_CASH`)."""
    assert doc.kg is not None
    text = doc.text[clause[0]:clause[1]]
    eu = bool(_EU.search(text))
    eu_answer = eu or bool(_EU.search(doc.text) or (doc.prompt and _EU.search(doc.prompt)))
    alias = None
    if eu_answer and not _CAP.search(text) and (_OCCASIONAL.search(text) or _TRADERS_IN_GOODS.search(text) and _OBLIGED.search(text)):
        alias = "occasional transaction CDD threshold" if _OCCASIONAL.search(text) else "traders in goods cash threshold"
    elif _CARRY_ACROSS.search(text):
        alias = "EU cash declaration" if eu else ("CMIR" if re.search(r"\b(?:US\b|U\.S\.|United States\b|America\b)", text)
                                                  else None)
    elif eu and _TRADERS_CASH.search(text):
        alias = "EU cash limit"
    return tuple(e.id for e in doc.kg.lookup(alias) if e.type == "regulation") if alias else ()


@dataclass(frozen=True, slots=True)
class _Regulation:
    ids: tuple[str, ...]
    text: str
    start: int
    by_institution: bool = False     # a family named earlier, narrowed by the institution named at the amount
    by_antecedent: bool = False      # named only in an earlier sentence or the question


@validator("finance.thresholds")
def thresholds(doc: Document, params: Mapping[str, Any]) -> list[Finding]:
    """Monetary thresholds stated for a regulation, and amounts compared with them, against the KG."""
    if doc.kg is None:
        return []
    findings: list[Finding] = []
    codes = set(iso_currency_codes())
    for seg in doc.segments:
        view = numeric_view(seg.text)
        amounts = [replace(m, start=seg.start + view.span(m.start, m.end)[0], end=seg.start + view.span(m.start, m.end)[1])
                   for m in find_money(view.text, known_codes=codes)]
        for index, money in enumerate(amounts):
            previous = amounts[index - 1] if index else None
            if previous is not None and _RANGE.match(doc.text[previous.end:money.start]):
                continue     # the upper end of a range is judged with its lower end
            following = amounts[index + 1] if index + 1 < len(amounts) else None
            upper = following if following is not None and _RANGE.match(doc.text[money.end:following.start]) else None
            finding = _judge_amount(doc, seg, money, upper)
            if finding is not None:
                findings.append(finding)
        findings += _application_dates(doc, seg)
    return findings


def _regulation_for(doc: Document, seg: Segment, position: int) -> _Regulation | None:
    """The regulation an amount belongs to, narrowed by the institution named with it."""
    clause = doc.clause_of(position)
    scopes = [clause]
    if seg.label is not None:
        scopes.append(seg.label)
    if seg.cells:
        scopes += [(c.start, c.end) for c in seg.cells]
    scope_text = " ".join(doc.text[s:e] for s, e in scopes) + " " + seg.heading
    for family, words in _FAMILY_WORDS.items():
        if words.search(scope_text) or (seg.cells and words.search(seg.heading)):
            institution = next((name for name, pattern in _INSTITUTIONS if pattern.search(scope_text)), None)
            ids = _family_member(doc, family, institution)
            if ids:
                return _Regulation(ids, family.upper(), clause[0])
    named = [m for m in doc.mentions(["regulation"]) if any(s <= m.start < e for s, e in scopes)]
    if named:
        nearest = min(named, key=lambda m: abs(m.start - position))
        return _Regulation(_implementing(doc, nearest.entity_ids), nearest.text, nearest.start)
    described = _described(doc, clause)
    if described:
        return _Regulation(described, doc.text[clause[0]:clause[1]].strip(), clause[0])
    # only a regulation that sets thresholds can be what an amount is about ("structuring is a crime under ...,
    # which creates currency transaction reporting. Banks file those reports for cash over $10,000")
    found = doc.antecedent(position, ["regulation"], accept=lambda m: any(
        doc.kg.facts(i, "threshold") for i in m.entity_ids if doc.kg is not None))
    if found is not None:
        return _Regulation(found.entity_ids, found.text, found.start if not found.in_prompt else -1, by_antecedent=True)
    # a family named earlier, and an institution now ("Casinos use $5,000 as well")
    institution = next((name for name, pattern in _INSTITUTIONS if pattern.search(scope_text)), None)
    earlier = doc.text[:clause[0]] + " " + (doc.prompt or "")
    for family, words in _FAMILY_WORDS.items():
        ids = _family_member(doc, family, institution) if institution and words.search(earlier) else ()
        if ids:
            return _Regulation(ids, family.upper(), -1, by_institution=True)
    return None


def _implementing(doc: Document, ids: tuple[str, ...]) -> tuple[str, ...]:
    """A statute's thresholds are set by the regulation implementing it ("31 U.S.C. 5313" -> 31 CFR 1010.311)."""
    assert doc.kg is not None
    out = list(ids)
    for rid in ids:
        entity = doc.kg.entity(rid)
        out += [i for i in (entity.attributes.get("implemented_by") or [] if entity else []) if i not in out]
    return tuple(out)


def _family_member(doc: Document, family: str, institution: str | None) -> tuple[str, ...]:
    alias = _FAMILIES.get(family, {}).get(institution or "")
    if alias is None or doc.kg is None:
        return ()
    return tuple(e.id for e in doc.kg.lookup(alias) if e.type == "regulation")


@lru_cache(maxsize=8)   # per KG version: `entities(type)` walks every entity, 10k more after an SDN import
def _regulation_ids(kg_id: int, kg_version: str, kg: KnowledgeGraph) -> tuple[str, ...]:
    return tuple(e.id for e in kg.entities("regulation"))


def _facts(doc: Document, regulation: _Regulation, currency: str, clause_text: str) -> list[Fact]:
    """The thresholds the amount may be stated for: the regulation's, and its sibling articles' (a directive is
    named by one article's alias), narrowed to those whose measure the clause describes best."""
    assert doc.kg is not None
    ids = list(regulation.ids)
    for rid in regulation.ids:
        if "-art-" in rid:
            prefix = rid.split("-art-")[0] + "-art-"
            ids += [rid for rid in _regulation_ids(id(doc.kg), doc.kg.version, doc.kg)
                    if rid.startswith(prefix) and rid not in ids]
    facts = [f for rid in ids for f in doc.kg.facts(rid, "threshold") if str(f.unit).upper() == currency]
    if not re.search(r"no suspect|regardless of (?:whether )?a suspect|without a suspect|cannot be identified", clause_text, re.I):
        facts = [f for f in facts if not f.qualifiers.get("condition")] or facts
    if len(facts) > 1:
        said = _words(clause_text)
        scores = [len(_words(str(f.qualifiers.get("measure", ""))) & said) for f in facts]
        if max(scores) > 0:
            facts = [f for f, score in zip(facts, scores, strict=True) if score == max(scores)]
        else:
            facts = [f for f in facts if f.subject in regulation.ids] or facts
    return facts


_MEASURE_STOP = frozenset("amount amounts made received person more than with from into that this which their".split())


def _words(text: str) -> set[str]:
    return {w.rstrip("s") for w in re.findall(r"[a-z]{4,}", text.casefold())} - _MEASURE_STOP


def _stated_comparison(doc: Document, money: Money, clause: tuple[int, int]) -> str | None:
    before = doc.text[max(clause[0], money.start - 40):money.start]
    after = doc.text[money.end:money.end + 20]
    if _GE_AFTER.match(after) or _GE_BEFORE.search(before):
        return "at least"
    if _GT_BEFORE.search(before):
        return "more than"
    return None


def _judge_amount(doc: Document, seg: Segment, money: Money, upper: Money | None) -> Finding | None:
    clause = doc.clause_of(money.start)
    clause_text = doc.text[clause[0]:clause[1]]
    after = doc.text[money.end:clause[1]]
    before = doc.text[clause[0]:money.start]
    regulation = _regulation_for(doc, seg, money.start)
    if regulation is None:
        return None
    facts = _facts(doc, regulation, money.currency, clause_text)
    if not facts:
        others = [f for rid in regulation.ids for f in doc.kg.facts(rid, "threshold")] if doc.kg else []
        if not others:
            return None
        span = (money.start, money.end)
        units = ", ".join(sorted({str(f.unit) for f in others}))
        return Finding(doc.text[span[0]:span[1]], span, "threshold", "unverifiable", 0.5, [Evidence(
            kind="kg_fact", description=f"{regulation.text}: thresholds are in {units}; no conversion between currencies")],
            subject=regulation.ids[0])
    compared = _COMPARISON.match(after)
    if compared and not re.match(r"^\s*(?:or|and)\b", after):
        return _judge_comparison(doc, money, facts, compared, clause)
    handled = doc.cache.setdefault("threshold_consequences", set())
    if clause in handled:
        return None      # another amount of a clause already judged as one consequence
    # "depositing $10,500 would trigger a CTR" is a consequence of one amount; "carrying more than $10,000 ...
    # must be declared" states the rule itself (the comparison before the amount), judged as a statement
    states_rule = bool(_GT_BEFORE.search(before) or _GE_BEFORE.search(before) or _GE_AFTER.match(after))
    if _EXACTLY.search(before) or re.search(r"\b(?:deposit(?:ing)?|withdraw\w*|carry\w*|purchase|payment|transfer)\b[^.;]{0,20}$", before, re.I) \
            and (_TRIGGERS.search(after) or _NO_TRIGGER.search(after)) and not states_rule:
        handled.add(clause)
        amount, how = _consequence_amount(doc, money, facts, clause)
        return _judge_consequence(doc, amount, how, facts, clause)
    if not _states_a_threshold(doc, seg, money, upper, clause, regulation):
        return None
    return _judge_statement(doc, money, upper, facts, clause, regulation)


# What makes an amount a statement of the rule's threshold rather than an example, a penalty or another measure:
# a comparison or a threshold word at the amount, the rule named where the amount is (its clause, label or row) or
# referred to as "the threshold", and no word of another measure in the clause (issue 40: memos and emails).
_FROM = re.compile(r"\b(?:from|starting at|beginning at)\s+$", re.I)
_THRESHOLD_WORDS = re.compile(r"\b(?:thresholds?|limits?|line|triggers?|triggered|kicks? in|reportable|reporting|caps?|capped|"
                              r"due diligence|CDD|declar\w*|"
                              r"ceiling|maximum|minimum|report(?:ed|s)?\s+(?:for|when|on|if)|applies|cutoff|cut-off|bar|"
                              r"(?:must|has to|have to|needs? to|required to|should)\s+(?:be\s+)?\w+)\b", re.I)
_OTHER_MEASURE = re.compile(r"\b(?:penalt\w*|fines?|fined|forfeit\w*|prison|imprison\w*|jail|face (?:amount|value)|greater of|"
                            r"per violation|per day|balances?|salar\w*|wages?|fees?|price\w*|costs?|worth|valued|net worth|"
                            r"income|insur\w*|coverage|deductible|bond|bail|reward|award\w*|damages|premium|"
                            r"paid|pays|paying|bought|spent|sold|charged|loan\w*)\b", re.I)


def _states_a_threshold(doc: Document, seg: Segment, money: Money, upper: Money | None, clause: tuple[int, int],
                        regulation: _Regulation) -> bool:
    text = doc.text[clause[0]:clause[1]]
    before = doc.text[max(clause[0], money.start - 40):money.start]
    after = doc.text[money.end:min(clause[1], money.end + 20)]
    cued = bool(_GT_BEFORE.search(before) or _GE_BEFORE.search(before) or _GE_AFTER.match(after) or _FROM.search(before)) \
        or upper is not None \
        or seg.label is not None or bool(seg.cells) or regulation.by_institution or bool(_THRESHOLD_WORDS.search(text))
    return cued and not _OTHER_MEASURE.search(text)


_TOTAL_BEFORE = re.compile(r"\b(?:total(?:\s+of)?|combined|altogether|in all|sum of|aggregate(?:\s+of)?)\s+$", re.I)


def _consequence_amount(doc: Document, money: Money, facts: list[Fact], clause: tuple[int, int]) -> tuple[float, str]:
    """The amount a consequence is about: a total the text states ("the total of $10,500 would trigger"), else
    the sum of several amounts when the rule aggregates them ("$9,500 in the morning and $600 in the afternoon":
    one person, one business day), else the amount itself."""
    view = numeric_view(doc.text[clause[0]:clause[1]])
    amounts = [replace(m, start=clause[0] + view.span(m.start, m.end)[0], end=clause[0] + view.span(m.start, m.end)[1])
               for m in find_money(view.text, known_codes=set(iso_currency_codes())) if m.currency == money.currency]
    total = next((m for m in amounts if _TOTAL_BEFORE.search(doc.text[max(clause[0], m.start - 20):m.start])), None)
    if total is not None:
        return total.amount, f"the stated total {total.amount:,.0f} {money.currency}"
    aggregates = any(f.qualifiers.get("aggregation") or re.search(r"aggregat|linked|related transactions", str(f.qualifiers.get("measure", "")))
                     for f in facts)
    joined = [m for m in amounts if m.start >= money.start]
    if aggregates and len(joined) > 1 and all(re.search(r"\b(?:and|plus|then)\b", doc.text[a.end:b.start])
                                              for a, b in zip(joined, joined[1:], strict=False)):
        parts = " + ".join(f"{m.amount:,.0f}" for m in joined)
        return sum(m.amount for m in joined), f"{parts} = {sum(m.amount for m in joined):,.0f} {money.currency} (aggregated)"
    return money.amount, f"{money.amount:,.0f} {money.currency}"


def _describe(fact: Fact) -> str:
    upper = fact.qualifiers.get("upper")
    extent = f" up to {upper:,.0f}" if upper else ""
    return f"{fact.subject.split(':', 1)[1]}: {fact.qualifiers.get('comparison', '')} {fact.value:,.0f}{extent} {fact.unit} ({fact.qualifiers.get('measure', '')})"


def _span(doc: Document, start: int, end: int, clause: tuple[int, int]) -> tuple[int, int]:
    return max(start, clause[0]), min(end, clause[1])


def _judge_statement(doc: Document, money: Money, upper: Money | None, facts: list[Fact], clause: tuple[int, int],
                     regulation: _Regulation) -> Finding:
    comparison = _stated_comparison(doc, money, clause)
    before = doc.text[max(clause[0], money.start - 40):money.start]
    cue = _GT_BEFORE.search(before) or _GE_BEFORE.search(before)
    start = money.start - (len(before) - cue.start()) if cue else money.start
    end = (upper.end if upper and facts[0].qualifiers.get("upper") else money.end) + (len(_GE_AFTER.match(doc.text[money.end:]).group(0)) if _GE_AFTER.match(doc.text[money.end:]) else 0)
    span = _span(doc, start, end, clause)
    text = doc.text[span[0]:span[1]]
    matching = [f for f in facts if abs(float(f.value) - money.amount) < 0.5]
    subject = facts[0].subject
    assertion = (subject, f"threshold:{money.currency}", money.amount)
    if not matching and _attribution_uncertain(doc, money, clause, regulation, facts):
        return Finding(text, span, "threshold", "unverifiable", 0.5, [Evidence(kind="rule", description=(
            f"unverifiable: {doc.text[money.start:money.end]} is not among the thresholds of {regulation.text}, but the "
            "rule is named only in another sentence, or another of its thresholds matches: which rule or measure the "
            "amount is stated for is ambiguous"))], subject=subject)
    if not matching:
        return Finding(text, span, "threshold", "contradicted", 0.9, [kg_evidence(
            f"{_describe(f)}; the text says {doc.text[money.start:money.end]}", f.provenance) for f in facts],
            subject=subject, assertion=assertion)
    fact = matching[0]
    evidence = [kg_evidence(_describe(fact), fact.provenance)]
    if upper is not None and fact.qualifiers.get("upper") is not None:
        # a rule that covers a range (the monetary instrument log) must match at both ends; for an open
        # threshold, "from $10,000 to $20,000" states the lower bound only
        limit = fact.qualifiers.get("upper")
        if abs(float(limit) - upper.amount) > 0.5:
            return Finding(text, span, "threshold", "contradicted", 0.85, [*evidence, Evidence(
                kind="rule", description=f"the range ends at {limit:,.0f} {fact.unit}")], subject=subject, assertion=assertion)
    rule = str(fact.qualifiers.get("comparison", ""))
    if comparison and rule and comparison != rule and rule in ("more than", "at least"):
        return Finding(text, span, "threshold", "contradicted", 0.85, [*evidence, Evidence(
            kind="rule", description=f"the regulation applies to amounts {rule} {fact.value:,.0f}; the text says "
            f"{comparison} (so exactly {fact.value:,.0f} is {'covered' if rule == 'at least' else 'not covered'})")],
            subject=subject, assertion=assertion)
    return Finding(text, span, "threshold", "supported", 0.9, evidence, subject=subject, assertion=assertion)


def _attribution_uncertain(doc: Document, money: Money, clause: tuple[int, int], regulation: _Regulation,
                           facts: list[Fact]) -> bool:
    """Precision first (issue 40): a mismatched amount is contradicted only when it is surely stated for this rule and
    measure: the rule named with the amount (or "the threshold" referred to), and no other threshold of the rule or
    its siblings equal to it."""
    assert doc.kg is not None
    text = doc.text[clause[0]:clause[1]]
    if regulation.by_antecedent and not (_ANAPHOR.search(text) or _PRONOUN_SUBJECT.match(text)):
        return True
    chosen = {f.subject for f in facts}
    same_rule = [f for rid in chosen for f in doc.kg.facts(rid, "threshold") if str(f.unit).upper() == money.currency]
    return any(abs(float(f.value) - money.amount) < 0.5 for f in same_rule)


_PRONOUN_SUBJECT = re.compile(r"^\W*(?:it|it's|its|this|that|they|these|the (?:report|form|rule|regulation|requirement|"
                              r"filing|obligation))\b", re.I)
# words that refer back to a rule's threshold named earlier ("the threshold is $5,000", "that line")
_ANAPHOR = re.compile(r"\b(?:the|that|this|its|their)\s+(?:(?:reporting|filing|dollar|cash)\s+)?(?:threshold|limit|line|"
                      r"cutoff|cut-off|trigger|amount)\b", re.I)


def _reportable(amount: float, fact: Fact) -> bool:
    value = float(fact.value)
    upper = fact.qualifiers.get("upper")
    if upper is not None and amount > float(upper):
        return False
    return amount > value if fact.qualifiers.get("comparison") == "more than" else amount >= value


def _judge_comparison(doc: Document, money: Money, facts: list[Fact], compared: re.Match[str], clause: tuple[int, int]) -> Finding:
    op = (compared.group("op") or compared.group("op2") or compared.group("op3") or "").casefold()
    negated = bool(re.search(r"\bnot\b|n't", compared.group(0)))
    end = money.end + compared.end()
    rest = doc.text[end:clause[1]]
    reference = find_money(numeric_view(rest).text, known_codes=set(iso_currency_codes()))
    above = op in ("above", "over", "more than", "higher than", "greater than", "beyond", "past", "exceed", "exceeds", "top", "tops")
    fact = facts[0]
    if reference and reference[0].start < 15:
        value = reference[0].amount
        holds = money.amount > value if above else money.amount < value if op not in ("within",) else money.amount <= value
        what = f"{money.amount:,.0f} vs the stated {value:,.0f}"
    else:
        value = float(fact.value)
        holds = _reportable(money.amount, fact) if above else not _reportable(money.amount, fact)
        what = f"{money.amount:,.0f} vs {_describe(fact)}"
    holds = holds != negated
    stop = re.search(r"[,;]|\s+(?:so|because|and)\b", rest)
    span = _span(doc, money.start, end + (stop.start() if stop else len(rest)), clause)
    return Finding(doc.text[span[0]:span[1]], span, "threshold", "supported" if holds else "contradicted", 0.85, [
        kg_evidence(_describe(fact), fact.provenance), Evidence(kind="rule", description=f"comparison: {what}")],
        subject=fact.subject)


def _judge_consequence(doc: Document, amount: float, how: str, facts: list[Fact], clause: tuple[int, int]) -> Finding:
    """"exactly $10,000 would be reported", "Depositing exactly ten thousand dollars won't trigger a CTR"."""
    fact = facts[0]
    after = doc.text[clause[0]:clause[1]]
    claims_reportable = not _NO_TRIGGER.search(after)
    holds = _reportable(amount, fact) == claims_reportable
    start = clause[0] + len(re.match(r"^\W*(?:so\s+|and\s+|but\s+)?", doc.text[clause[0]:clause[1]]).group(0))  # type: ignore[union-attr]
    end = clause[1] - (1 if doc.text[clause[1] - 1] in ".;," else 0)
    aggregation = fact.qualifiers.get("aggregation")
    return Finding(doc.text[start:end], (start, end), "threshold", "supported" if holds else "contradicted", 0.85, [
        kg_evidence(_describe(fact), fact.provenance), Evidence(
            kind="rule", description=f"{how} is {'' if _reportable(amount, fact) else 'not '}covered: the rule applies to "
            f"amounts {fact.qualifiers.get('comparison', '')} {fact.value:,.0f}" + (f"; {aggregation}" if aggregation else ""))],
        subject=fact.subject)


def _application_dates(doc: Document, seg: Segment) -> list[Finding]:
    """"The cap starts applying on 10 July 2026", "kicks in on 2027-07-10": against applies_from."""
    assert doc.kg is not None
    out: list[Finding] = []
    for date in find_dates(seg.text):
        start, end = seg.start + date.start, seg.start + date.end
        clause = doc.clause_of(start)
        before = doc.text[clause[0]:start]
        if not _APPLIES.search(before[-40:]):
            continue
        regulation = _regulation_for(doc, seg, start)
        if regulation is None or doc.kg is None:
            continue
        entity = next((doc.kg.entity(i) for i in regulation.ids if doc.kg.entity(i) is not None), None)
        applies = str(entity.attributes.get("applies_from", "")) if entity else ""
        if not applies:
            continue
        year, month, day = (int(x) for x in applies.split("-"))
        cue = list(_APPLIES.finditer(before))[-1]
        span = (clause[0] + cue.start(), end)
        out.append(Finding(doc.text[span[0]:span[1]], span, "threshold", "supported" if date.matches(year, month, day)
                           else "contradicted", 0.9, [kg_evidence(f"{entity.name} applies from {applies}", entity.provenance)],  # type: ignore[union-attr]
                           subject=entity.id if entity else None))
    return out
