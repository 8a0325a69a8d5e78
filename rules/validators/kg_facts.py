"""`kg.facts`: any KG fact whose relation is declared with aliases, checked in free text without new code.

For each phrase that names a declared relation ("insured up to", "reversal agent", "ratified in"):
1. the subject: the nearest mention before the phrase in its clause of an entity that has facts of that relation,
   else after it, else the clause's structure and earlier sentences (`Document.antecedent`);
2. the value: of the relation's kind (money, percent, duration, quantity, count, year, date, entity, text),
   nearest after the phrase in the clause, else before it;
3. the facts that apply: those valid at the time the sentence refers to ("the 2024 limit"), or today when it
   names none; then those whose qualifiers the segment names ("large accelerated filer"), when they differ;
4. the verdict, read with the shared polarity rules: a value equal to the fact is supported (contradicted when
   negated); a different value of a functional relation is contradicted (supported when negated); anything
   ambiguous (two years named, facts that differ by a qualifier the text does not name, a unit that cannot be
   compared, a relation that lists several values) is unverifiable, with the reason in the evidence.

Precision first: this validator never guesses. Relations handled by a validator of their own (dose maxima,
thresholds, list memberships, citations) are not declared with aliases and so never reach it.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from knowledge_graphs.model import Fact, KnowledgeGraph, RelationSpec, normalise_alias
from rules.claims import Document
from rules.extraction.polarity import negated_before, negated_between
from rules.extraction.time_reference import time_reference
from rules.extraction.values import Value, duration_in_base, find_values, same_quantity
from rules.mentions import Mention
from rules.report import Evidence
from rules.validators.base import Finding, kg_evidence, validator

# Qualifier keys that describe a fact rather than select it.
_DESCRIPTIVE = frozenset({"note", "comparison", "value_aliases", "tax_year", "as_of", "source_note"})


@dataclass(frozen=True, slots=True)
class _Phrase:
    start: int
    end: int
    spec: RelationSpec


@dataclass(frozen=True, slots=True)
class _RelationIndex:
    phrases: dict[str, list[tuple[tuple[str, ...], tuple[RelationSpec, ...]]]]   # first stem -> (stems, specs), longest first
    subject_types: dict[str, tuple[str, ...]]          # relation -> entity types of its subjects
    values_by_relation: dict[str, dict[str, set[str]]]  # text relations: normalised value -> subject ids


_TOKEN = re.compile(r"[A-Za-z0-9]+(?:['’-][A-Za-z0-9]+)*")


@lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    """A word without its inflection, so that an alias reads "insures", "insured" and "insure" alike (memoised:
    an answer's words recur across answers, and this runs once per word)."""
    word = word.casefold()
    if len(word) < 5 or not word.isalpha() or word.endswith("ss"):
        return word
    return re.sub(r"(?:ing|ed|es|s|e)$", "", word)


def _stems(text: str) -> tuple[str, ...]:
    return tuple(_stem(m.group(0)) for m in _TOKEN.finditer(text))


@lru_cache(maxsize=8)
def _index(kg_key: tuple[int, str], kg: KnowledgeGraph) -> _RelationIndex:
    del kg_key
    by_alias: dict[tuple[str, ...], list[RelationSpec]] = {}
    for spec in kg.relations.values():
        for alias in (*spec.aliases, spec.label.casefold()):
            stems = _stems(alias)
            if stems and spec not in by_alias.setdefault(stems, []):
                by_alias[stems].append(spec)
    phrases: dict[str, list[tuple[tuple[str, ...], tuple[RelationSpec, ...]]]] = {}
    for stems in sorted(by_alias, key=len, reverse=True):
        phrases.setdefault(stems[0], []).append((stems, tuple(by_alias[stems])))
    subject_types: dict[str, set[str]] = {name: set() for name in kg.relations}
    values: dict[str, dict[str, set[str]]] = {}
    for fact in kg.facts():
        spec = kg.relations.get(fact.relation)
        if spec is None:
            continue
        entity = kg.entity(fact.subject)
        if entity is not None:
            subject_types[fact.relation].add(entity.type)
        if spec.value == "text":
            for form in _text_forms(fact):
                values.setdefault(fact.relation, {}).setdefault(form, set()).add(fact.subject)
    return _RelationIndex(phrases, {k: tuple(sorted(v)) for k, v in subject_types.items()}, values)


def _phrases(text: str, index: _RelationIndex) -> list[tuple[int, int, tuple[RelationSpec, ...]]]:
    """Every relation phrase in `text` (longest at a position, then past it), as token sequences of stems: one pass
    with a dictionary lookup per word, whatever the number of aliases."""
    tokens = [(m.start(), m.end(), _stem(m.group(0))) for m in _TOKEN.finditer(text)]
    found = []
    i = 0
    while i < len(tokens):
        for stems, specs in index.phrases.get(tokens[i][2], ()):
            if tuple(t[2] for t in tokens[i:i + len(stems)]) == stems:
                found.append((tokens[i][0], tokens[i + len(stems) - 1][1], specs))
                i += len(stems) - 1
                break
        i += 1
    return found


def _text_forms(fact: Fact) -> list[str]:
    forms = [str(fact.value), *(fact.qualifiers.get("value_aliases") or [])]
    return [f for f in (normalise_alias(form) for form in forms) if f]


@validator("kg.facts")
def kg_facts(doc: Document, params: Mapping[str, Any]) -> list[Finding]:
    kg = doc.kg
    if kg is None or not kg.relations:
        return []
    index = _index((id(kg), kg.version), kg)
    if not index.phrases:
        return []
    today = str(params.get("as_of") or dt.date.today().isoformat())
    findings: list[Finding] = []
    seen: set[tuple[int, int]] = set()
    for start, end, specs in _phrases(doc.text, index):
        for spec in specs:
            phrase = _Phrase(start, end, spec)
            finding = _judge(doc, kg, index, phrase, today)
            if finding is not None and finding.span not in seen:
                seen.add(finding.span)
                findings.append(finding)
                break
    return findings


def _judge(doc: Document, kg: KnowledgeGraph, index: _RelationIndex, phrase: _Phrase, today: str) -> Finding | None:
    spec = phrase.spec
    clause = doc.clause_of(phrase.start)
    types = index.subject_types.get(spec.name, ())
    if not types:
        return None
    has_facts = lambda m: any(kg.facts(i, spec.name) for i in m.entity_ids)  # noqa: E731
    subject = _subject(doc, phrase, clause, types, has_facts)
    if subject is None:
        return None
    # a subject named only in an earlier sentence (or the question) may confirm a value, never contradict it: which
    # entity "the Twenty-second" or "it" means is a guess (precision first)
    local = subject.in_prompt is False and clause[0] <= subject.start < clause[1] or _in_structure(doc, phrase, subject)
    facts = [f for i in subject.entity_ids for f in kg.facts(i, spec.name)]
    if spec.value == "entity":
        return _judge_entity(doc, kg, phrase, clause, subject, facts)
    if spec.value == "text":
        return _judge_text(doc, index, phrase, clause, subject, facts, local)
    value = _value(doc, phrase, clause, spec, subject)
    if value is None:
        return None
    span = (min(phrase.start, value.start), max(phrase.end, value.end))
    negated = negated_before(doc.text, phrase.start, floor=clause[0]) or negated_between(
        doc.text, min(phrase.end, value.start), max(phrase.end, value.start))
    seg = doc.segment_of(phrase.start)
    when = time_reference(doc.text[seg.start:seg.end], skip=(value.start - seg.start, value.end - seg.start))
    if not when.years and doc.prompt and spec.value not in ("year", "date"):
        when = time_reference(doc.prompt)
    if when.ambiguous and spec.value not in ("year", "date"):
        return _unverifiable(doc, span, spec, subject, f"the sentence names several years ({', '.join(map(str, when.years))}): "
                             "which one the value is for is ambiguous")
    applicable = _valid_at(facts, when.year, today) if spec.value not in ("year", "date") else facts
    if not applicable:
        period = f"in {when.year}" if when.year else f"on {today}"
        return _unverifiable(doc, span, spec, subject, f"no {spec.label} fact of {_name(kg, subject)} is valid {period}")
    applicable = _selected_by_qualifiers(doc.text[seg.start:seg.end], applicable)
    matching = [f for f in applicable if _equal(value, f, spec)]
    comparable = [f for f in applicable if _equal(value, f, spec) is not None]
    distinct = {(f.value, f.unit) for f in applicable}
    if matching:
        # a value that matches one of several facts differing by a qualifier the text does not name is true in that
        # reading (reported with less confidence); a negated one may be true in another, so it says nothing
        several = len(distinct) > 1 and spec.functional
        if several and negated:
            return _unverifiable(doc, span, spec, subject, "the value matches one of several facts that differ by "
                                 f"qualifiers the text does not name: {_describe_all(kg, applicable)}", facts=applicable)
        verdict = "contradicted" if negated else "supported"
        confidence = 0.7 if several else 0.9 if not negated else 0.75
        return _finding(doc, span, spec, subject, verdict, confidence, matching[:1], kg)
    if not comparable:
        return _unverifiable(doc, span, spec, subject, f"the stated unit cannot be compared with {_describe_all(kg, applicable)}",
                             facts=applicable)
    if not local:
        return _unverifiable(doc, span, spec, subject, f"{_name(kg, subject)} is named only in another sentence: the "
                             f"value may be about something else ({_describe_all(kg, applicable)})", facts=applicable)
    if not spec.functional or len(distinct) > 1 or negated:
        reason = ("the KG lists this relation's values without claiming the list is complete" if not spec.functional
                  else f"facts differ by qualifiers the text does not name: {_describe_all(kg, applicable)}"
                  if len(distinct) > 1 else "a negated value that differs from the fact says nothing certain "
                  f"(\"not up to X\" is not \"up to Y\"): {_describe_all(kg, applicable)}")
        return _unverifiable(doc, span, spec, subject, reason, facts=applicable)
    return _finding(doc, span, spec, subject, "contradicted", 0.85, applicable[:1], kg)


def _subject(doc: Document, phrase: _Phrase, clause: tuple[int, int], types: tuple[str, ...], has_facts: Any) -> Mention | None:
    pool = [m for m in doc.mentions(types) if not m.in_prompt and has_facts(m)]
    before = [m for m in pool if clause[0] <= m.start and m.end <= phrase.start]
    if before:
        return before[-1]
    after = [m for m in pool if phrase.end <= m.start and m.end <= clause[1]]
    if after:
        return after[0]
    return doc.antecedent(phrase.start, types, accept=has_facts)


def _in_structure(doc: Document, phrase: _Phrase, subject: Mention) -> bool:
    """The subject is the label of the phrase's "Label: value" line or a cell of its table row."""
    seg = doc.segment_of(phrase.start)
    if subject.in_prompt or not (seg.start <= subject.start < seg.end):
        return False
    return seg.label is not None and seg.label[0] <= subject.start < seg.label[1] or bool(seg.cells)


def _value(doc: Document, phrase: _Phrase, clause: tuple[int, int], spec: RelationSpec, subject: Mention) -> Value | None:
    text = doc.text[clause[0]:clause[1]]
    kind = "year" if spec.value == "date" else spec.value
    values = [Value(v.start + clause[0], v.end + clause[0], v.amount, v.unit) for v in find_values(text, kind)]
    values = [v for v in values if not (subject.start <= v.start < subject.end) and not (phrase.start <= v.start < phrase.end)]
    # the value a phrase states stands right after it ("ratified in 1791", "insured up to $250,000") or right before
    # it ("$250,000 of deposit insurance"); a value further away belongs to something else the sentence says
    after = [v for v in values if v.start >= phrase.end and _words_between(doc.text, phrase.end, v.start) <= _NEAR_AFTER]
    if after:
        return after[0]
    before = [v for v in values if v.end <= phrase.start and _words_between(doc.text, v.end, phrase.start) <= _NEAR_BEFORE]
    return before[-1] if before else None


_NEAR_AFTER, _NEAR_BEFORE = 6, 3


def _words_between(text: str, start: int, end: int) -> int:
    return len(re.findall(r"[\w$€£%]+", text[start:end]))


def _valid_at(facts: list[Fact], year: int | None, today: str) -> list[Fact]:
    if year is None:
        return [f for f in facts if f.valid_on(today)]
    start, end = f"{year}-01-01", f"{year + 1}-01-01"
    overlapping = [f for f in facts if (f.valid_from is None or f.valid_from < end) and (f.valid_to is None or f.valid_to > start)]
    by_tax_year = [f for f in overlapping if str(f.qualifiers.get("tax_year", "")) == str(year)]
    return by_tax_year or overlapping


def _selected_by_qualifiers(segment: str, facts: list[Fact]) -> list[Fact]:
    """The facts whose selecting qualifiers the segment names, when naming them narrows the choice."""
    if len({(f.value, f.unit) for f in facts}) <= 1:
        return facts
    said = f" {normalise_alias(segment)} "
    named: dict[int, str] = {}
    for index, fact in enumerate(facts):
        for key, value in fact.qualifiers.items():
            form = normalise_alias(str(value)) if key not in _DESCRIPTIVE and isinstance(value, str) else ""
            if len(form) > 2 and (f" {form} " in said or f" {form}s " in said):
                named[index] = max(named.get(index, ""), form, key=len)
    # "non-accelerated filer" names "accelerated filer" too: a match inside a longer match does not count
    longest = {i: form for i, form in named.items() if not any(form != other and form in other for other in named.values())}
    return [facts[i] for i in sorted(longest)] or facts


def _equal(stated: Value, fact: Fact, spec: RelationSpec) -> bool | None:
    """Whether the stated value is the fact's value; None when they cannot be compared."""
    if not isinstance(fact.value, int | float) or isinstance(fact.value, bool):
        if spec.value == "date" and isinstance(fact.value, str):
            return int(stated.amount) == int(fact.value[:4])
        return None
    if spec.value == "money":
        if stated.unit != fact.unit:
            return None
        return abs(stated.amount - fact.value) <= max(0.5, 0.001 * abs(fact.value))
    if spec.value == "percent":
        return abs(stated.amount - fact.value) <= 0.01
    if spec.value == "duration":
        if fact.unit is None or stated.unit is None:
            return None
        amount, unit = duration_in_base(float(fact.value), fact.unit)
        if unit != stated.unit:
            return None
        return abs(stated.amount - amount) < 1e-9
    if spec.value == "quantity":
        return same_quantity(stated, float(fact.value), fact.unit)
    return abs(stated.amount - float(fact.value)) < 1e-9


def _judge_entity(doc: Document, kg: KnowledgeGraph, phrase: _Phrase, clause: tuple[int, int], subject: Mention,
                  facts: list[Fact]) -> Finding | None:
    spec = phrase.spec
    object_types = spec.object_types or tuple({e.type for f in facts if (e := kg.entity(f.object or "")) is not None})
    candidates = [m for m in doc.mentions(object_types) if clause[0] <= m.start < clause[1] and not m.in_prompt
                  and not set(m.entity_ids) & set(subject.entity_ids)]
    if not candidates:
        return None
    stated = min(candidates, key=lambda m: abs(m.start - phrase.end))
    span = (min(phrase.start, stated.start, subject.start if subject.start >= clause[0] else phrase.start),
            max(phrase.end, stated.end))
    negated = negated_before(doc.text, phrase.start, floor=clause[0])
    objects = {f.object for f in facts}
    inverse = [f for i in stated.entity_ids for f in kg.facts(i, spec.name) if f.object in subject.entity_ids]
    hits = [f for f in facts if f.object in stated.entity_ids] + inverse
    if hits and not _other_time(doc, clause, hits):
        return _finding(doc, span, spec, subject, "contradicted" if negated else "supported", 0.85, hits[:1], kg)
    if hits:
        return _unverifiable(doc, span, spec, subject, "the sentence dates the fact to a year its KG period does not "
                             f"cover: {_describe_all(kg, hits)}", facts=hits)
    # Precision first: a different entity named near the phrase may be the object of another statement, or another
    # name of the same thing the KG holds under two ids; it is never taken as proof that the claim is wrong.
    reason = ("not among the KG's listed values of this relation, which are not claimed complete" if not spec.functional
              else f"the KG names {', '.join(_name_of(kg, o) for o in objects)}; whether {stated.text!r} is another "
                   "name of it or a different entity is not certain")
    return _unverifiable(doc, span, spec, subject, reason, facts=facts)


def _judge_text(doc: Document, index: _RelationIndex, phrase: _Phrase, clause: tuple[int, int], subject: Mention,
                facts: list[Fact], local: bool) -> Finding | None:
    """A text value ("C-IV", a rule's heading, a boxed warning) said next to the phrase: the subject's own value
    confirms it; another subject's value of a functional relation contradicts it, when the subject is named here."""
    spec = phrase.spec
    own = {form for f in facts for form in _text_forms(f)}
    known = index.values_by_relation.get(spec.name, {})
    stated = _nearest_form(doc, phrase, clause, [*own, *(form for form in known if len(form) > 6)])
    if stated is None:
        return None
    form, (start, end) = stated
    span = _trim(doc, (min(phrase.start, start), max(phrase.end, end)))
    if form in own:
        if not local or _other_time(doc, clause, facts):
            return _unverifiable(doc, span, spec, subject, f"{_name_of(doc.kg, subject.entity_ids[0])} is named only in "  # type: ignore[arg-type]
                                 "another sentence, or the sentence dates the fact to another time", facts=facts)
        return _finding(doc, span, spec, subject, "supported", 0.8, facts[:1], doc.kg)  # type: ignore[arg-type]
    if spec.functional and local and not known.get(form, set()) & set(subject.entity_ids):
        return _finding(doc, span, spec, subject, "contradicted", 0.75, facts[:1], doc.kg)  # type: ignore[arg-type]
    return None


def _nearest_form(doc: Document, phrase: _Phrase, clause: tuple[int, int], forms: list[str]
                  ) -> tuple[str, tuple[int, int]] | None:
    """The value form written closest after the phrase (within a few words), else right before it. Forms and text
    are compared as word sequences (`normalise_alias` words), looked up by their first word."""
    by_first: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
    for form in set(forms):
        words = tuple(form.split())
        if words:
            by_first.setdefault(words[0], []).append((form, words))
    tokens = [(m.start() + clause[0], m.end() + clause[0], m.group(0).casefold())
              for m in _WORD.finditer(doc.text[clause[0]:clause[1]])]
    best: tuple[int, int, str, tuple[int, int]] | None = None
    for i, (start, _, word) in enumerate(tokens):
        for form, words in by_first.get(word, ()):
            if tuple(t[2] for t in tokens[i:i + len(words)]) != words:
                continue
            end = tokens[i + len(words) - 1][1]
            if start >= phrase.end and _words_between(doc.text, phrase.end, start) <= _NEAR_AFTER:
                rank = _words_between(doc.text, phrase.end, start)
            elif end <= phrase.start and _words_between(doc.text, end, phrase.start) <= _NEAR_BEFORE:
                rank = 100 + _words_between(doc.text, end, phrase.start)
            else:
                continue
            if best is None or (rank, -len(words)) < (best[0], -best[1]):
                best = (rank, len(words), form, (start, end))
    return None if best is None else (best[2], best[3])


# the words `normalise_alias` keeps (letters and digits), with their offsets
_WORD = re.compile(r"[^\W_]+")


def _other_time(doc: Document, clause: tuple[int, int], facts: list[Fact]) -> bool:
    """Whether the clause dates the statement ("acquired a boxed warning in 2021") to a year in which none of the
    facts held: a claim that is right about what but wrong about when is not supported."""
    years = time_reference(doc.text[clause[0]:clause[1]]).years
    if not years or not any(f.valid_from or f.valid_to for f in facts):
        return False
    return not any(_valid_at([f], year, "") for f in facts for year in years)


def _trim(doc: Document, span: tuple[int, int]) -> tuple[int, int]:
    start, end = span
    while end > start and doc.text[end - 1] in " .,;:*\n":
        end -= 1
    return start, end


def _finding(doc: Document, span: tuple[int, int], spec: RelationSpec, subject: Mention, verdict: str, confidence: float,
             facts: list[Fact], kg: KnowledgeGraph) -> Finding:
    evidence = [kg_evidence(_describe(kg, f), f.provenance) for f in facts]
    return Finding(doc.text[span[0]:span[1]], span, spec.name, verdict, confidence, evidence,  # type: ignore[arg-type]
                   subject=subject.entity_ids[0])


def _unverifiable(doc: Document, span: tuple[int, int], spec: RelationSpec, subject: Mention, reason: str,
                  facts: Sequence[Fact] = ()) -> Finding:
    """No verdict, with the reason first and the facts that were weighed after it (a reviewer sees both)."""
    evidence = [Evidence(kind="rule", description=f"unverifiable: {reason}")]
    if doc.kg is not None:
        evidence += [kg_evidence(_describe(doc.kg, f), f.provenance) for f in facts[:3]]
    return Finding(doc.text[span[0]:span[1]], span, spec.name, "unverifiable", 0.5, evidence, subject=subject.entity_ids[0])


def _name_of(kg: KnowledgeGraph, entity_id: str | None) -> str:
    entity = kg.entity(entity_id or "")
    return entity.name if entity is not None else str(entity_id)


def _name(kg: KnowledgeGraph, mention: Mention) -> str:
    entity = kg.entity(mention.entity_ids[0])
    return entity.name if entity is not None else mention.text


def _describe(kg: KnowledgeGraph, fact: Fact) -> str:
    subject = kg.entity(fact.subject)
    spec = kg.relations.get(fact.relation)
    numeric = isinstance(fact.value, int | float) and not isinstance(fact.value, bool)
    grouped = numeric and not (spec is not None and spec.value in ("year", "count", "date"))
    target = (kg.entity(fact.object).name if fact.object and kg.entity(fact.object) else fact.object) or (
        f"{fact.value:,}" if grouped else str(fact.value))
    unit = f" {fact.unit}" if fact.unit else ""
    qualifiers = ", ".join(f"{k} {v}" for k, v in fact.qualifiers.items() if k != "value_aliases")
    period = ""
    if fact.valid_from or fact.valid_to:
        period = f", valid {fact.valid_from or '...'} to {fact.valid_to or 'now'}"
    return (f"{subject.name if subject else fact.subject}: {spec.label if spec else fact.relation} {target}{unit}"
            f"{f' ({qualifiers})' if qualifiers else ''}{period}")


def _describe_all(kg: KnowledgeGraph, facts: list[Fact]) -> str:
    return "; ".join(_describe(kg, f) for f in facts[:4])
