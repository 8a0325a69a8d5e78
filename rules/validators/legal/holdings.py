"""`legal.case_holding`: what a text says a landmark case held, against the curated holdings
(`knowledge_graphs/data/legal/case_holdings.yaml`, relation `holding`).

A description is attached to a case named in prose in three shapes: a label ("Terry v. Ohio: stop and frisk
on reasonable suspicion"), a verb after the name ("Mapp v. Ohio (1961) applied the exclusionary rule to the
states", "Gideon held that ...") and a source after the description ("'Imminent lawless action' is the
standard from Brandenburg v. Ohio"). Its content words (stemmed, names of cases and legal filler removed) are
scored against every curated holding, as statute subjects are (`provisions.py`):

- supported: at least two words and half of the description are in the case's own holding, no other holding
  covers clearly more, and the description does not reverse the holding's polarity ("kept" where the holding
  says "eliminated", "upheld" where it says "struck down");
- contradicted: another case's holding covers the description clearly better (two words and half of it, and a
  third more than the case's own): the text credits the case with another case's holding; or the description
  shares two words with the case's own holding and reverses its polarity or negates it ("did not address
  transgender employees");
- unverifiable: anything else (a holding we hold no words for, a vague description). A case without a curated
  holding gives no claim. The curated holding is the main one only; a true statement of a secondary point can
  come out unverifiable, never contradicted unless another case's holding fits it clearly better.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from knowledge_graphs.model import Fact, KnowledgeGraph
from rules.claims import Document
from rules.mentions import Mention
from rules.report import Evidence
from rules.validators.base import Finding, kg_evidence, validator

_WORDS = re.compile(r"[a-z0-9]+")
_SUFFIXES = (("ations", ""), ("ation", ""), ("ies", "y"), ("ied", "y"), ("ings", ""), ("ing", ""), ("edly", ""),
             ("ed", ""), ("ly", ""), ("s", ""))
# the same thing in the words chatbots and the reports use
_SYNONYMS = {"lawyer": "counsel", "lawyers": "counsel", "attorney": "counsel", "attorneys": "counsel",
             "guns": "firearm", "gun": "firearm", "cellphone": "cell", "frisking": "frisk", "worker": "employee",
             "workers": "employee", "employees": "employee"}
_STOP = frozenset("""a an the of and or in on for to by with is are was were be been its it this that these those
    at as from their them they there any all also only one two its his her he she who whom which what when where
    court courts supreme case cases decision decisions ruling held hold holds holding established establish landmark
    opinion justice justices majority famous known famously basically essentially said says stands about
    than more most such other same into under over before after while whether because so can may must""".split())
# verbs that say what a holding did, with their polarity: a description that keeps what the holding removed
# (or the reverse) says the opposite about the same thing
_AFFIRM = ("upheld", "uphold", "kept", "keep", "retain", "preserv", "reaffirm", "sustain", "validat")
_REVERSE = ("struck", "strik", "invalidat", "unconstitutional", "overrul", "eliminat", "abolish", "reject",
            "retir", "halt", "refus")
_NEGATED = re.compile(r"\b(?:not|never|no longer|didn't|did not|doesn't|does not|wasn't|isn't|hasn't|neither|nor)\b",
                      re.I)

# "Terry v. Ohio: ...", "Terry v. Ohio (1968) — ..."
_LABEL_AFTER = re.compile(r"\s*(?:\([^()]{0,40}\))?\s*[:—–]\s*|\s+-\s+")   # used with .match(text, pos)
# "Mapp v. Ohio, 367 U.S. 643 (1961), applied ...", "Gideon held that ...", "Brown is the case that rejected ..."
_VERB_AFTER = re.compile(
    r"(?:,?\s*\d{1,4}\s+[A-Z][A-Za-z0-9. ]{0,12}?\s+\d{1,5})?(?:\s*\([^()]{0,40}\))?,?"   # its citation, its year
    r"(?:[^.;:]{0,60}?)\s*\b(?:(?:famously|also|first|later|then|essentially|basically)\s+)?"
    r"(?P<verb>held|holds?|establish(?:ed|es)?|recogni[sz]e[ds]?|struck down|strikes? down|upheld|upholds?|"
    r"ruled|found|requir(?:es|ed|e)|made|set out|set up|creat(?:ed|es|e)|announced|extend(?:ed|s)?|appl(?:ied|ies|y)|"
    r"reject(?:ed|s)?|overrul(?:ed|es|e)|guarantee[ds]?|allow(?:ed|s)?|barred|bars?|prohibit(?:ed|s)?|kept|keeps?|"
    r"retain(?:ed|s)?|reaffirm(?:ed|s)?|halted|eliminat(?:ed|es|e)|replaced|adopted|approved|introduced|"
    r"concern(?:ed|s)?|address(?:ed|es)?|is about|was about|is the case (?:on|about|that)|is known for|stands for|"
    r"gave us|supplie[sd]|provide[sd]?|decided|"
    r"wrote\s+(?:for\s+(?:a|the)\s+(?:[\w-]+\s+)?(?:Court|majority)|the\s+(?:[\w-]+\s+)?opinion)(?=,?\s+(?:that|holding)))"
    r"\b(?:,?\s+(?:holding\s+)?that)?\s*", re.I)
# "X is the standard from Brandenburg", "X comes from Katz", "X was established in Gideon"
_SOURCE_BEFORE = re.compile(
    r"(?P<desc>[^;:]{6,160}?)\s*,?\s+(?:(?:is|was|are|were)\s+(?:the\s+)?(?:[\w-]+\s+){0,2}?(?:from|in|of)|"
    r"comes? from|came from|set out in|traces? to|(?:was\s+|were\s+)?(?:established|announced|recogni[sz]ed|"
    r"adopted|created) (?:in|by))\s*$", re.I)
_DESCRIPTION_END = re.compile(r"[;\n]|\.(?:\s|$)|,\s+(?:and|but|while|whereas)\s|\s+(?:but|while|whereas)\s")


def stem(word: str) -> str:
    """A crude suffix stripper, the same on both sides of a comparison: "applies", "applied" -> "apply";
    "requires", "required", "require" -> "requir"; "felonies" -> "felony"."""
    word = _SYNONYMS.get(word, word)
    for suffix, replacement in _SUFFIXES:
        if suffix == "s" and word.endswith(("ss", "us", "is")):
            continue
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)] + replacement
            break
    return word[:-1] if word.endswith("e") and len(word) > 4 else word


def content_words(text: str) -> frozenset[str]:
    return frozenset(stem(w) for w in _WORDS.findall(text.casefold().replace("'s ", " ")) if w not in _STOP
                     and not w.isdigit())


# "the Seventh Amendment": a description naming another amendment than the holding is wrong about it
_AMENDMENT = re.compile(r"\b(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|"
                        r"thirteenth|fourteenth|fifteenth|\d{1,2}(?:st|nd|rd|th))\s+amendment\b", re.I)
_ORDINALS = {str(i + 1): word for i, word in enumerate(
    "first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth thirteenth fourteenth "
    "fifteenth".split())}


def amendments(text: str) -> set[str]:
    return {_ORDINALS.get(re.sub(r"\D", "", m.group(1)), m.group(1).casefold()) for m in _AMENDMENT.finditer(text)}


@lru_cache(maxsize=8)
def _holdings(kg_id: int, kg_version: str, kg: KnowledgeGraph) -> dict[str, tuple[frozenset[str], Fact]]:
    out = {}
    for entity in kg.entities("case"):
        facts = kg.facts(entity.id, "holding")
        if facts:
            out[entity.id] = (content_words(" ".join(str(f.value) for f in facts)), facts[0])
    return out


_INDEXES: dict[int, dict[str, list[str]]] = {}


def _word_index(key: int, holdings: dict[str, tuple[frozenset[str], Fact]]) -> dict[str, list[str]]:
    """Word -> ids of the cases whose holding has it (built once per holdings table)."""
    if key not in _INDEXES:
        index: dict[str, list[str]] = {}
        for case_id, (words, _) in holdings.items():
            for word in words:
                index.setdefault(word, []).append(case_id)
        _INDEXES[key] = index
    return _INDEXES[key]


@lru_cache(maxsize=8)
def _rejected(kg_id: int, kg_version: str, kg: KnowledgeGraph) -> dict[str, tuple[frozenset[str], Fact]]:
    """Case id -> content words of a proposition the case rejected (relation `holding_rejects`)."""
    out = {}
    for entity in kg.entities("case"):
        facts = kg.facts(entity.id, "holding_rejects")
        if facts:
            out[entity.id] = (content_words(" ".join(str(f.value) for f in facts)), facts[0])
    return out


@validator("legal.case_holding")
def case_holding(doc: Document, params: Mapping[str, Any]) -> list[Finding]:
    """Holdings stated in prose for landmark cases against the curated holdings."""
    if doc.kg is None:
        return []
    holdings = _holdings(id(doc.kg), doc.kg.version, doc.kg)
    cases = [m for m in doc.mentions(["case"]) if not m.in_prompt]
    findings: list[Finding] = []
    taken: list[tuple[int, int]] = []
    for mention in cases:
        own_id = next((i for i in mention.entity_ids if i in holdings), None)
        if own_id is None:
            continue
        found = _description(doc, mention, cases)
        if found is None or any(s < found[1] and found[0] < e for s, e in taken):
            continue
        start, end = found
        names = [m for m in cases if start <= m.start and m.end <= end]
        text = doc.text[start:end]
        for other in names:
            text = text.replace(doc.text[other.start:other.end], " ")
        words = content_words(text) - content_words(doc.text[mention.start:mention.end])
        if len(words) < 2:
            continue
        taken.append((start, end))
        # cases named together in the clause share what is said ("comes from Twombly and Iqbal"): none of them
        # is "another case" whose holding would contradict the claim
        clause = doc.clause_of(mention.start)
        together = {i for m in cases if clause[0] <= m.start < clause[1] for i in m.entity_ids}
        findings.append(_judge(doc, mention, own_id, holdings, words, (start, end), together=together,
                               # a negation between the name and the verb ("did not address"); a "not" inside
                               # the description ("a witness who did not appear") is part of what was held
                               negated=bool(start > mention.end and _NEGATED.search(doc.text[mention.end:start]))))
        findings += _continued(doc, mention, own_id, holdings, end, taken, cases)
    findings += _pronoun_holdings(doc, cases, holdings, taken)
    return findings


# "It established ...", "The Court held that ...", "The decision did not address ...": a holding whose subject is
# the case named in the sentence before (coreference to the nearest case, at most one segment back)
_PRONOUN_SUBJECT = re.compile(r"\W*(?:It|The (?:Supreme )?Court|The (?:decision|ruling|case|opinion|majority)|"
                              r"(?:That|This) (?:case|decision|ruling)|There,? the Court|"
                              r"(?:Chief\s+)?Justice\s+(?-i:[A-Z][\w.]*(?:\s+[A-Z][\w.]*){0,2}))\b", re.I)
# ", but the decision did not address ...", ", while holding that ...": a second thing said of the same case
_CONTINUATION = re.compile(
    r",?\s*(?:but|while|whereas|and)\s+(?:(?:the|this|that)\s+(?:decision|court|ruling|opinion|majority)\s+|it\s+)?"
    r"(?P<neg>(?:did|does|has|had|was|is)\s+not\s+|didn't\s+|doesn't\s+|never\s+)?"
    r"(?P<verb>holding|held|found|ruled|address(?:ed|es)?|decided|struck down|upheld|reject(?:ed|s)?|recogni[sz]ed)\b"
    r"(?:\s+that)?\s*", re.I)
# "Under Strickland v. Washington, 466 U.S. 668 (1984), a defendant ... must show ...": the rule the case stands for
_UNDER_BEFORE = re.compile(r"\b(?:Under|Per|According to|Following)\s+$")
_AFTER_NAME = re.compile(r"(?:,?\s*\d{1,4}\s+[A-Z][A-Za-z0-9. ]{0,12}?\s+\d{1,5})?(?:\s*\([^()]{0,40}\))?\s*,\s*")


def _pronoun_holdings(doc: Document, cases: list[Mention], holdings: dict[str, tuple[frozenset[str], Fact]],
                      taken: list[tuple[int, int]]) -> list[Finding]:
    out: list[Finding] = []
    for index, seg in enumerate(doc.segments):
        for clause in doc.clauses(seg):
            subject = _PRONOUN_SUBJECT.match(doc.text, clause[0], clause[1])
            if subject is None or any(clause[0] <= m.start < clause[1] for m in cases):
                continue
            window = doc.segments[max(0, index - 1)].start
            earlier = [m for m in cases if window <= m.start < clause[0]]
            if not earlier or len({i for m in earlier[-1:] for i in m.entity_ids}) != len(earlier[-1].entity_ids):
                continue
            case = earlier[-1]
            own_id = next((i for i in case.entity_ids if i in holdings), None)
            verb = _VERB_AFTER.match(doc.text, subject.end(), clause[1])
            if own_id is None or verb is None:
                continue
            stop = _DESCRIPTION_END.search(doc.text, verb.start("verb"), seg.end)
            span = _trim(doc, verb.start("verb"), min(stop.start() if stop else seg.end, seg.end))
            if span is None or any(s < span[1] and span[0] < e for s, e in taken):
                continue
            words = content_words(doc.text[span[0]:span[1]]) - content_words(case.text)
            if len(words) < 2:
                continue
            taken.append(span)
            out.append(_judge(doc, case, own_id, holdings, words, span,
                              negated=bool(_NEGATED.search(doc.text[subject.end():span[0]]))))
    return out


def _continued(doc: Document, mention: Mention, own_id: str, holdings: dict[str, tuple[frozenset[str], Fact]], end: int,
               taken: list[tuple[int, int]], cases: list[Mention]) -> list[Finding]:
    """What the sentence goes on to say of the same case after its first description ends."""
    seg = doc.segment_of(mention.start)
    more = _CONTINUATION.match(doc.text, end, seg.end)
    if more is None or any(end <= m.start < seg.end for m in cases):
        return []
    stop = _DESCRIPTION_END.search(doc.text, more.end(), seg.end)
    span = _trim(doc, more.start("verb"), stop.start() if stop else seg.end)
    if span is None or any(s < span[1] and span[0] < e for s, e in taken):
        return []
    words = content_words(doc.text[span[0]:span[1]]) - content_words(mention.text)
    if len(words) < 2:
        return []
    taken.append(span)
    return [_judge(doc, mention, own_id, holdings, words, span, negated=bool(more.group("neg")))]


def _description(doc: Document, mention: Mention, cases: list[Mention]) -> tuple[int, int] | None:
    """The span of what the text says the case held, if it says anything."""
    seg = doc.segment_of(mention.start)
    after_start = mention.end
    label = _LABEL_AFTER.match(doc.text, after_start, seg.end)
    # the verb stands within ~140 characters of the name (citation, year and a short aside in between)
    verb = None if label else _VERB_AFTER.match(doc.text, after_start, min(seg.end, after_start + 160))
    if label or verb:
        # a verb is part of what is said ("kept the inquiry" against a holding that eliminated it)
        start = label.end() if label else verb.start("verb")  # type: ignore[union-attr]
        if verb is not None and any(after_start <= m.start < start for m in cases):
            return None     # another case named between the name and the verb: the verb is that case's
        stop = _DESCRIPTION_END.search(doc.text, start, seg.end)
        end = stop.start() if stop else seg.end
        following = [m.start for m in cases if start < m.start < end]
        if following and label:
            end = min(following)
        return _trim(doc, start, end)
    if _UNDER_BEFORE.search(doc.text[seg.start:mention.start]):
        after_name = _AFTER_NAME.match(doc.text, mention.end, seg.end)
        if after_name is not None and not any(after_name.end() <= m.start < seg.end for m in cases):
            stop = _DESCRIPTION_END.search(doc.text, after_name.end(), seg.end)
            return _trim(doc, after_name.end(), stop.start() if stop else seg.end)
    clause = doc.clause_of(mention.start)
    before = _SOURCE_BEFORE.search(doc.text[clause[0]:mention.start])
    if before:
        start = clause[0] + before.start("desc")
        return _trim(doc, start, clause[0] + before.end("desc"))
    return None


def _trim(doc: Document, start: int, end: int) -> tuple[int, int] | None:
    while start < end and doc.text[start] in " ,:;-—–'\"*":
        start += 1
    while end > start and doc.text[end - 1] in " ,:;.-—–'\"*":
        end -= 1
    return (start, end) if end - start >= 8 else None


def _polarity(words: frozenset[str]) -> set[str]:
    out = set()
    for word in words:
        if word.startswith(_AFFIRM):
            out.add("affirm")
        if word.startswith(_REVERSE):
            out.add("reverse")
    return out


def _judge(doc: Document, mention: Mention, own_id: str, holdings: dict[str, tuple[frozenset[str], Fact]],
           words: frozenset[str], span: tuple[int, int], *, negated: bool,
           together: set[str] | frozenset[str] = frozenset()) -> Finding:
    own_words, own_fact = holdings[own_id]
    own_shared = words & own_words
    own_cover = len(own_shared) / len(words)
    shared_counts: dict[str, int] = {}
    for word in words:     # an inverted index: only holdings sharing a word are counted
        for case_id in _word_index(id(holdings), holdings).get(word, ()):
            shared_counts[case_id] = shared_counts.get(case_id, 0) + 1
    ranked = sorted(((count, -len(holdings[case_id][0]), case_id) for case_id, count in shared_counts.items()
                     if case_id != own_id and case_id not in together), reverse=True)
    best_shared, _, best_id = ranked[0] if ranked else (0, 0, "")
    best_cover = best_shared / len(words)
    name = doc.kg.entity(own_id).name if doc.kg is not None and doc.kg.entity(own_id) else mention.text
    evidence = [kg_evidence(f"{name} held: {own_fact.value}", own_fact.provenance),
                Evidence(kind="rule", description=f"the text says it held: {doc.text[span[0]:span[1]]!r}")]

    def finding(verdict: str, confidence: float, why: str) -> Finding:
        return Finding(doc.text[span[0]:span[1]], span, "case_holding", verdict, confidence,  # type: ignore[arg-type]
                       [*evidence, Evidence(kind="rule", description=why)], subject=own_id)

    if best_shared >= 2 and best_cover >= 0.5 and best_cover - own_cover >= 0.34:
        other_words, other_fact = holdings[best_id]
        other = doc.kg.entity(best_id) if doc.kg is not None else None
        evidence.append(kg_evidence(f"{other.name if other else best_id} held: {other_fact.value}", other_fact.provenance))
        return finding("contradicted", 0.8, "the description is another case's holding")
    assert doc.kg is not None
    rejected = _rejected(id(doc.kg), doc.kg.version, doc.kg).get(own_id)
    if rejected is not None and len(words & rejected[0]) >= 2 and len(words & rejected[0]) / len(words) >= 0.5 \
            and len(words & rejected[0]) >= len(own_shared):
        evidence.append(kg_evidence(f"{name} rejected: {rejected[1].value}", rejected[1].provenance))
        return finding("contradicted", 0.75, "the description is what the case rejected")
    stated_amendments, held_amendments = amendments(doc.text[span[0]:span[1]]), amendments(str(own_fact.value))
    if stated_amendments and held_amendments and not stated_amendments & held_amendments and len(own_shared) >= 2:
        return finding("contradicted", 0.75, f"the holding rests on the {', '.join(sorted(held_amendments))} "
                       f"Amendment, not the {', '.join(sorted(stated_amendments))}")
    if len(own_shared) >= 2 and own_cover >= 0.5:
        stated, curated = _polarity(words), _polarity(own_words)
        reversed_ = bool(stated) and bool(curated) and not stated & curated
        if negated or reversed_:
            return finding("contradicted", 0.7, "the text " + ("negates" if negated else "reverses") +
                           " what the case held")
        if best_cover - own_cover < 0.15 or best_shared <= len(own_shared):
            return finding("supported", 0.8, "the description matches the curated holding")
    return finding("unverifiable", 0.5, "the description matches no curated holding clearly enough to judge")
