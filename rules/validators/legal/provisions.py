"""`legal.statute`: statutes, rules, constitutional provisions and GDPR articles, and what the text attaches
to them: the act a section belongs to, the subject it is said to cover, and the numbers it sets.

That a provision exists and that it says what the sentence says are two checks (issue 19, pattern 13):
the citation's resolution goes into citation confidence; the verdict is the verdict on what is attached.
A provision cited with nothing attached is supported when it resolves. With something attached:

- act: "47 U.S.C. § 230 is part of the Digital Millennium Copyright Act", "Section 10(b) of the Securities
  Act of 1933", "15 U.S.C. § 1681: Fair Debt Collection Practices Act" against `part_of_act`;
- subject: "§ 1331: diversity jurisdiction", "Mail fraud is 18 U.S.C. § 1341", "hearsay is defined in
  Federal Rule of Evidence 803", "Right of access: Art. 17": the description is scored against every
  provision's heading and curated subject matter (content words, F1); the cited one must be the best or
  near it; another clearly better is a contradiction naming it; a vague description is unverifiable;
- values: "within 60 days of service", "up to twenty-eight days", "must exceed $50,000", "weigh three
  factors", "double their regular rate", "within 48 hours", "not below 12" against `sets_value` (unit, and
  the measure's words to choose among several); comparisons ("$80,000 is above the $75,000 threshold",
  "40 days after service is inside the removal period", "exactly $75,000 satisfies § 1332(a)") are
  judged arithmetically against the stated or the curated value.

A bare "§ 1956" takes its title from the nearest U.S.C. citation before it; "Article 17" is a GDPR article
when the answer or question is about the GDPR; "12(b)(6)" in a list under "Rule 12(b)" is that rule.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from knowledge_graphs.model import Entity, Fact, KnowledgeGraph
from rules.claims import Document, Segment
from rules.extraction.numbers import numeric_view
from rules.report import Evidence
from rules.units import find_money
from rules.validators.base import CitationCheck, Finding, kg_evidence, possible_fabrication, validator
from rules.validators.legal.citations import _statute_index, case_citations, statute_keys
from rules.validators.legal.code_coverage import absence_inside_coverage

_BARE_SECTION = re.compile(r"(?<![\w.])§§?\s*(?P<section>\d+[a-zA-Z]?(?:-\d+[a-z]?)?)(?P<sub>(?:\([a-zA-Z0-9]{1,4}\))*)(?:\s+et\s+seq\.)?")
_BARE_RULE = re.compile(r"\bRule\s+(?P<section>\d+)(?![\w-])(?P<sub>(?:\([a-zA-Z0-9]{1,4}\))*)")
_LIST_SUBRULE = re.compile(r"^\s*(?P<section>\d+)(?P<sub>(?:\([a-zA-Z0-9]{1,4}\))+)")
_ARTICLE = re.compile(r"\b(?:Article|Art\.)\s*(?P<n>\d{1,2}|\d{2,3})(?P<sub>(?:\(\d{1,2}\))*)(?!\s*,\s*Section)")
_CONSTITUTION = re.compile(r"\bArticle\s+(?P<art>[IVX]+),?\s+(?:Section|§)\s*(?P<sec>\d+)(?:,?\s+Clause\s+(?P<cl>\d+))?", re.I)
_GDPR = re.compile(r"\bGDPR\b|2016/679|General Data Protection Regulation", re.I)
_WORDS = re.compile(r"[a-z0-9]+")
_STOP = frozenset("""a an the of and or in on for to by with is are was be been its it this that under at as from
    their them any all also only one two section sections article art rule rules usc u s c cfr fed r civ p evid gdpr
    act statute provision provisions clause part codified defined set out found core key main federal sec et seq
    what which who covers cover governs gives lets allows bars prohibits provides requires targets deals
    usually generally typically normally commonly often mostly mainly primarily""".split())

# Nouns any provision may be said to impose: alone they do not point to one provision.
_GENERIC_NOUNS = frozenset("""duty obligation right requirement rule period limit standard test provision power
    procedure process step thing way issue question matter""".split())
# Words that say what kind of law a provision is, not what it is about: "a federal crime under 31 U.S.C. 5324",
# "a civil action under ...". A description made only of these names no subject to compare (issue 40, class 2).
_KIND_WORDS = frozenset("""federal state crime crimes criminal civil offense offence felony misdemeanor law statute
    section act action claim claims case cases liability violation penalty penalties remedy remedies illegal unlawful
    prohibited banned forbidden lawful legal""".split())

_EXPAND = [(re.compile(r"\bDPO\b"), "data protection officer"), (re.compile(r"\bDPIA\b"), "data protection impact assessment"),
           (re.compile(r"\bTRO\b"), "temporary restraining order"), (re.compile(r"\bSAR\b"), "suspicious activity report"),
           (re.compile(r"\bCTR\b"), "currency transaction report"), (re.compile(r"\bFOIA\b"), "freedom of information")]


def _content(text: str) -> frozenset[str]:
    for pattern, replacement in _EXPAND:
        text = pattern.sub(replacement, text)
    words = [w[:-1] if len(w) > 4 and w.endswith("s") and not w.endswith(("ss", "us", "is")) else w
             for w in _WORDS.findall(text.casefold())]
    return frozenset(w for w in words if w not in _STOP and not w.isdigit())


@dataclass(frozen=True, slots=True)
class _Ref:
    start: int
    end: int
    entity: Entity | None
    text: str
    sub: str = ""
    key: tuple[str, str, str] | None = None   # (code, title, section) of a U.S.C. / C.F.R. / Rules reference


@validator("legal.statute")
def statute(doc: Document, params: Mapping[str, Any]) -> list[Finding]:
    """Provisions cited, and the act, subject and numbers the text attaches to them."""
    if doc.kg is None:
        return []
    findings: list[Finding] = []
    refs = _references(doc)
    doc.cache["statute_refs"] = refs
    for ref in refs:
        findings += _judge_reference(doc, ref)
    return findings


@validator("legal.statute_exists")
def statute_exists(doc: Document, params: Mapping[str, Any]) -> list[Finding]:
    """Only the references an import's complete coverage proves absent: the same findings `legal.statute` makes
    for them, under a rule of their own so that a pack can block a fabricated section and annotate the rest."""
    if doc.kg is None:
        return []
    refs = doc.cache.get("statute_refs") or _references(doc)
    return [found for ref in refs if ref.entity is None and (found := _absent(doc, ref)) is not None]


def _absent(doc: Document, ref: _Ref) -> Finding | None:
    """A contradiction when the cited section lies in a title or part imported whole and the index lacks it."""
    assert doc.kg is not None
    if ref.key is None:
        return None
    why = absence_inside_coverage(doc.kg, list(_statute_index(id(doc.kg), doc.kg.version, doc.kg).sections), ref.key)
    if why is None:
        return None
    return Finding(ref.text, (ref.start, ref.end), "statute", "contradicted", 0.85,
                   [Evidence(kind="fabrication", description=why)], citation=CitationCheck("statute", "invalid", False))


# -- references ---------------------------------------------------------------------------------------------
def _references(doc: Document) -> list[_Ref]:
    assert doc.kg is not None
    index = _statute_index(id(doc.kg), doc.kg.version, doc.kg)
    refs: list[_Ref] = []
    taken: list[tuple[int, int]] = []

    def add(start: int, end: int, entity: Entity | None, sub: str = "", key: tuple[str, str, str] | None = None
            ) -> None:
        if any(s < end and start < e for s, e in taken):
            return
        taken.append((start, end))
        refs.append(_Ref(start, end, entity, doc.text[start:end], sub, key))

    last_title: str | None = None
    keys = statute_keys(doc.text)
    for start, end, key, sub in keys:
        et_seq = re.match(r"(?:\s+et\s+seq\.)?", doc.text[end:]).group(0)  # type: ignore[union-attr]
        entity = index.resolve(key, sub)
        if entity is None and et_seq:
            # "42 U.S.C. § 2000e et seq.": the sections that follow (2000e-2, ...) belong to the range
            entity = next((e for k, es in index.sections.items() if k[0] == key[0] and k[1] == key[1]
                           and k[2].startswith(key[2] + "-") for e in es), None)
        add(start, end + len(et_seq), entity, sub, key)
    for match in _CONSTITUTION.finditer(doc.text):
        name = f"U.S. Const. art. {match.group('art').upper()}, § {match.group('sec')}" + (
            f", cl. {match.group('cl')}" if match.group("cl") else "")
        entity = next((e for e in doc.kg.lookup(name) if e.type == "statute"), None) or _constitution(doc.kg, match)
        add(match.start(), match.end(), entity)
    gdpr = bool(_GDPR.search(doc.text) or (doc.prompt and _GDPR.search(doc.prompt)))
    for match in _ARTICLE.finditer(doc.text):
        if gdpr:
            entity = doc.kg.entity(f"statute:gdpr-art-{int(match.group('n'))}")
            add(match.start(), match.end(), entity, match.group("sub") or "")
    for match in _BARE_SECTION.finditer(doc.text):
        earlier = [k for k in keys if k[1] <= match.start() and k[2][0] == "usc"]
        title = earlier[-1][2][1] if earlier else last_title or _title_named(doc, match.start())
        entity = index.resolve(("usc", title, match.group("section").casefold()), (match.group("sub") or "").casefold()) if title else None
        add(match.start(), match.end(), entity, match.group("sub") or "")
    for match in _BARE_RULE.finditer(doc.text):
        code = "fre" if re.search(r"\bEvidence\b|\bFRE\b", doc.text[max(0, match.start() - 200):match.end() + 60]) else "frcp"
        entity = index.resolve((code, "", match.group("section")), (match.group("sub") or "").casefold())
        add(match.start(), match.end(), entity, match.group("sub") or "")
    for seg in doc.segments:
        heading_rule = re.search(r"\bRule\s+(\d+)", seg.heading)
        found = _LIST_SUBRULE.match(seg.text) if seg.kind == "item" else None
        if found and heading_rule and found.group("section") == heading_rule.group(1):
            entity = index.resolve(("frcp", "", found.group("section")), found.group("sub").casefold())
            add(seg.start + found.start("section"), seg.start + found.end("sub"), entity, found.group("sub"))
        if seg.cells and re.search(r"Rule of Evidence|\bFRE\b", seg.heading):
            first = seg.cells[0]
            if re.fullmatch(r"\d{3}", first.text.strip()):
                entity = index.resolve(("fre", "", first.text.strip()), "")
                add(first.start, first.end, entity)
    for mention in doc.mentions(["statute"]):
        if mention.in_prompt or re.search(r"U\.?S\.?C|C\.?F\.?R|§|\d", mention.text):
            continue
        entity = doc.kg.entity(mention.entity_ids[0])
        if entity is not None and (entity.id.startswith("statute:us-const") or "Clause" in mention.text or "Amendment" in mention.text):
            add(mention.start, mention.end, entity)
    return sorted(refs, key=lambda r: r.start)


_TITLE_WORDS = re.compile(r"\bTitle\s+(?P<title>\d{1,2})\b(?!\s+(?:VII|IX|IV)\b)|\b(?P<usc>\d{1,2})\s*U\.?\s?S\.?\s?C\.?(?:\s|$)", re.I)


def _title_named(doc: Document, position: int) -> str | None:
    """The U.S. Code title a bare "§ 101" is in when no citation gives it: "Title 35" earlier in the text, else
    a title the question names ("28 USC jurisdiction sections", "Title 35 sections")."""
    for text in (doc.text[:position], doc.prompt or ""):
        found = list(_TITLE_WORDS.finditer(text))
        if found:
            return found[-1].group("title") or found[-1].group("usc")
    return None


def _constitution(kg: KnowledgeGraph, match: re.Match[str]) -> Entity | None:
    art, sec, cl = match.group("art").upper(), match.group("sec"), match.group("cl")
    slug = f"statute:us-const-art-{art.casefold()}-{sec}" + (f"-cl-{cl}" if cl else "")
    return kg.entity(slug) or kg.entity(f"statute:us-const-art-{art.casefold()}-{sec}")


# -- what is attached -----------------------------------------------------------------------------------------
_AFTER_VERB = re.compile(r"^\W{0,3}(?:,\s*)?(?:which\s+)?(?:(?:is|are|was)\s+(?:the|a|an|for|about)|covers?|"
                         r"prohibits?|targets?|bars?|governs?|provides?|requires?|allows?|lets?|gives?|deals? with|makes?|"
                         r"sets? out|addresses|concerns?|defines?|creates?|for|is used (?:to|for)|used to|says(?: that)?|states(?: that)?|"
                         r"provides that)\b", re.I)
_BEFORE_VERB = re.compile(r"(?P<desc>[^;:]{3,140}?)\s+(?:(?:is|are|was)\s+(?:defined|set out|found|codified|contained|located|"
                          r"governed|covered|brought|made|filed|asserted|pleaded)?\s*(?:in|under|at|by)?|(?:defined|set out|found|codified|contained)\s+(?:in|at)|"
                          r"(?:arise|arises|lie|lies)\s+under)"
                          r"\s*(?:the\s+)?$", re.I)


def _attached(doc: Document, seg: Segment, ref: _Ref) -> tuple[str, tuple[int, int]] | None:
    """(description, its span) the text gives the provision, if any."""
    if seg.cells:
        own = seg.cell_at(ref.start)
        others = [c for c in seg.cells if c is not own and not re.search(r"\d{3}", c.text)]
        if others:
            return others[0].text, (others[0].start, others[0].end)
    if seg.label is not None and not _TRIVIAL_LABEL.match(doc.text[seg.label[0]:seg.label[1]]):
        if seg.label[0] <= ref.start < seg.label[1] + 2:
            start = seg.label[1] + 1
            while start < seg.end and doc.text[start] in " :":
                start += 1
            return doc.text[start:seg.end], (start, seg.end)
        own = _after_verb(doc, ref, doc.clause_of(ref.start)) if ref.start >= seg.label[1] else None
        if own is not None:
            return own      # "Both differ: § 2254 is for people in state custody": the clause's own description
        if ref.start >= seg.label[1]:
            return doc.text[seg.label[0]:seg.label[1]], seg.label
    clause = doc.clause_of(ref.start)
    after = doc.text[ref.end:clause[1]]
    before = doc.text[clause[0]:ref.start]
    own = _after_verb(doc, ref, clause)
    if own is not None:
        return own
    found = _BEFORE_VERB.search(before)
    if found and _content(found.group("desc")):
        desc = found.group("desc")
        start = clause[0] + found.start("desc")
        # "data portability is Article 20 and the right to object is Article 21": the description of the
        # second reference starts after the first one's
        if re.search(r"\d|§", desc):
            joints = list(re.finditer(r"(?:[,;]|\band\b|\bwhile\b|\bwhereas\b|\bbut\b)\s*", desc))
            if joints:
                start += joints[-1].end()
                desc = desc[joints[-1].end():]
        if _content(desc):
            return desc, (start, start + len(desc))
    # "You must notify the authority within 72 hours of a breach (Article 33)": the clause the reference closes
    if doc.text[ref.start - 1:ref.start] == "(" and re.match(r"^\)\s*(?:[.,;]|$)", doc.text[ref.end:ref.end + 3]):
        desc = doc.text[clause[0]:ref.start - 1].rstrip()
        desc = re.sub(r"^\W*(?:(?:yes|no|so|and|but)\b\W*)*", "", desc, flags=re.I)
        if _content(desc):
            start = ref.start - 1 - len(desc) - (len(doc.text[clause[0]:ref.start - 1]) - len(doc.text[clause[0]:ref.start - 1].rstrip()))
            return desc, (start, start + len(desc))
    possessive = _POSSESSIVE_AFTER.match(after)
    if possessive and _content(possessive.group("desc")):
        start = ref.end + possessive.start("desc")
        return possessive.group("desc"), (start, start + len(possessive.group("desc")))
    # The phrase after the last verb or article that still reads as a subject: "failed to show commonality
    # under", not "plaintiffs failed to show commonality under".
    for trigger in reversed(list(_PHRASE_START.finditer(before))):
        phrase = _NOUN_PHRASE_AFTER_START.match(before, trigger.end())
        if phrase and _content(phrase.group("desc")) and _subject_like(doc, phrase.group("desc")):
            start = clause[0] + phrase.start("desc")
            return phrase.group("desc"), (start, start + len(phrase.group("desc")))
    return None


# a colon after these frames the answer ("Yes: ...", "Short answer: ..."); it describes no provision
_TRIVIAL_LABEL = re.compile(r"^\W*(?:yes|no|sure|short answer|answer|note|in short)(?:\W+\w+ly)?\W*$", re.I)


def _after_verb(doc: Document, ref: _Ref, clause: tuple[int, int]) -> tuple[str, tuple[int, int]] | None:
    """"§ 2254 is for people in custody ...", "Rule 56 governs summary judgment": the description after the verb."""
    verb = _AFTER_VERB.match(doc.text[ref.end:clause[1]])
    if not (verb and verb.group(0).strip(" ,")):
        return None
    start = ref.end + verb.end()
    text = doc.text[start:clause[1]]
    cut = re.search(r"[;.]|\bwhich allows\b|,\s+(?:and|while|but)\s", text)
    text = text[:cut.start()] if cut else text
    return (text, (start, start + len(text))) if _content(text) else None


_NOT_SUBJECTS = frozenset("""arise arises arose apply applies applied available proper brought sued filed granted denied
    dismissed dismissal exist exists lie lies fall falls come comes relief liable action actions claim claims suit""".split())


def _subject_like(doc: Document, phrase: str) -> bool:
    """A phrase before "in"/"under" describes a provision when it is no verb or procedural word and some
    provision's text shares its words ("commonality", "agency action"), not "the claim arises"."""
    words = _content(phrase)
    if not words or (phrase.split()[-1].casefold().strip("'\"") in _NOT_SUBJECTS and not words - _NOT_SUBJECTS):
        return False
    assert doc.kg is not None
    texts = _provision_texts(id(doc.kg), doc.kg.version, doc.kg)
    return any(len(words & t) / len(words) >= 0.5 for t in texts.values())


# "the right to erasure in Article 17", "commonality under Rule 23(b)(3)", "agency action under 5 U.S.C. § 553":
# the last few words before "in"/"under", after a verb, an article or a comma
_PHRASE_START = re.compile(
    r"^|\b(?:show|shows|showed|set|sets|file|files|filed|bring|brought|sue|sued|apply|applies|applied|claim|claims|"
    r"is|are|was|were|be|that's|it's|called|rely on|relies on|with|and|so|the)\s+|[,(]\s*", re.I)
_NOUN_PHRASE_AFTER_START = re.compile(r"(?P<desc>(?:['\"\w-]+\s+){0,4}['\"\w-]+),?\s+(?:in|under)\s+(?:the\s+)?$", re.I)
# "the Sixth Amendment's Confrontation Clause", "Rule 23's numerosity requirement"
_POSSESSIVE_AFTER = re.compile(r"^['’]s\s+(?P<desc>(?:[A-Z][\w-]*\s+){0,3}[A-Z][\w-]*|(?:[\w-]+\s+){0,3}"
                               r"(?:clause|requirement|prong|element|right|protection|guarantee))\b")


# -- provision texts ------------------------------------------------------------------------------------------
@lru_cache(maxsize=8)
def _provision_texts(kg_id: int, kg_version: str, kg: KnowledgeGraph) -> dict[str, frozenset[str]]:
    """Entity id -> content words of its heading, aliases and curated subject matter."""
    out: dict[str, frozenset[str]] = {}
    for entity in [*kg.entities("statute"), *kg.entities("gdpr_article")]:
        parts = [str(entity.attributes.get("title", ""))]
        parts += [a for a in entity.aliases if not re.search(r"\d", a)]
        parts += [str(f.value) for f in kg.facts(entity.id, "subject_matter")]
        out[entity.id] = _content(" ".join(parts))
    return out


@lru_cache(maxsize=8)
def _provisions_with_word(kg_id: int, kg_version: str, kg: KnowledgeGraph) -> dict[str, frozenset[str]]:
    """Content word -> the provisions whose texts hold it."""
    index: dict[str, set[str]] = {}
    for entity_id, words in _provision_texts(kg_id, kg_version, kg).items():
        for word in words:
            index.setdefault(word, set()).add(entity_id)
    return {word: frozenset(ids) for word, ids in index.items()}


@lru_cache(maxsize=8)
def _provision_parts(kg_id: int, kg_version: str, kg: KnowledgeGraph) -> dict[str, tuple[frozenset[str], ...]]:
    """Entity id -> content words of each of its texts apart (heading, each alias, each subject matter)."""
    out: dict[str, tuple[frozenset[str], ...]] = {}
    for entity in [*kg.entities("statute"), *kg.entities("gdpr_article")]:
        parts = [str(entity.attributes.get("title", ""))]
        parts += [a for a in entity.aliases if not re.search(r"\d", a)]
        parts += [str(f.value) for f in kg.facts(entity.id, "subject_matter")]
        out[entity.id] = tuple(p for p in (_content(part) for part in parts) if p)
    return out


def _fit(words: frozenset[str], union: frozenset[str], parts: tuple[frozenset[str], ...]) -> tuple[float, float]:
    """(F1 with the closest of the provision's texts, coverage of the description by all of them): a provision
    described in the words of one alias or subject-matter line fits it, however long its other texts are."""
    f1 = max((_score(words, part)[0] for part in parts), default=0.0)
    return f1, _score(words, union)[1]


def _score(words: frozenset[str], text: frozenset[str]) -> tuple[float, float]:
    shared = len(words & text)
    if not shared:
        return 0.0, 0.0
    coverage, precision = shared / len(words), shared / len(text)
    return 2 * coverage * precision / (coverage + precision), coverage


def _judge_reference(doc: Document, ref: _Ref) -> list[Finding]:
    assert doc.kg is not None
    seg = doc.segment_of(ref.start)
    if ref.entity is None:
        wrong = _named_elsewhere(doc, ref)
        if wrong is not None:
            return [Finding(ref.text, (ref.start, ref.end), "statute", "contradicted", 0.85,
                            [kg_evidence(f"{wrong.name} is not {ref.text}", wrong.provenance)], subject=wrong.id,
                            citation=CitationCheck("statute", "unconfirmed", False))]
        absent = _absent(doc, ref)
        if absent is not None:
            return [absent]
        return [Finding(ref.text, (ref.start, ref.end), "statute", "unverifiable", 0.5,
                        [possible_fabrication(ref.text, "KG's statute index"),
                         Evidence(kind="kg_fact", description=f"{ref.text} is not in the KG's statute index")],
                        citation=CitationCheck("statute", "unconfirmed", None))]
    out: list[Finding] = []
    act = _act_claim(doc, seg, ref)
    if act is not None:
        out.append(act)
    values = _value_claims(doc, seg, ref)
    out += values
    items = _enumerated_items(doc, ref)
    out += items
    attached = None if items else _attached(doc, seg, ref)
    # the act a section belongs to and the subject it is said to cover are two checks: "courts set aside
    # arbitrary agency action under the APA's § 553" names the right act and the wrong section
    act_words = frozenset().union(*(_content(m.text) for m in doc.mentions(["act"]) if seg.start <= m.start < seg.end)) \
        if act is not None else frozenset()
    if attached is not None and _content(attached[0]) - _content(ref.entity.name) - _NOT_SUBJECTS - act_words:
        subject = _subject_claim(doc, ref, attached)
        if act is None or subject.verdict == "contradicted":
            out.append(subject)
    if not out:
        out.append(_bare_reference(doc, ref))
    return out


# Words that frame a reference without saying anything of it ("See 15 U.S.C. § 1, as amended", "X and Y apply").
_FRAMING = frozenset("""see cf also generally e g eg i ie pursuant codified amended current version text full
    note notes source sources citation citations reference references relevant applicable law apply applies
    applied govern governs governed control controls both""".split())


def _without(text: str, start: int, end: int, spans: list[tuple[int, int]]) -> str:
    """text[start:end] with the spans of other references blanked (their words say nothing of this one)."""
    chars = list(text[start:end])
    for s, e in spans:
        for i in range(max(s, start), min(e, end)):
            chars[i - start] = " "
    return "".join(chars)


def _bare_reference(doc: Document, ref: _Ref) -> Finding:
    """A reference nothing judged is attached to: it resolves, which supports it when the clause says nothing
    more of it; when the clause does say more (a holding, a standard), the reference alone does not support that."""
    assert doc.kg is not None and ref.entity is not None
    description = ref.entity.attributes.get("title") or ""
    evidence = [kg_evidence(f"{ref.entity.name}: {description}".rstrip(": "), ref.entity.provenance)]
    seg = doc.segment_of(ref.start)
    scope = seg.cell_at(ref.start) if seg.cells else None
    start, end = (scope.start, scope.end) if scope is not None else doc.clause_of(ref.start)
    others = sorted((m.start, m.end) for m in [*doc.mentions(["case", "statute", "act"]), *case_citations(doc)]
                    if start <= m.start < end and not (ref.start <= m.start < ref.end))
    rest = _without(doc.text, start, ref.start, others) + " " + _without(doc.text, ref.end, end, others)
    said = _content(rest) - _content(ref.entity.name) - _FRAMING - _NOT_SUBJECTS
    if not said:
        return Finding(ref.text, (ref.start, ref.end), "statute", "supported", 0.9, evidence, subject=ref.entity.id,
                       citation=CitationCheck("statute", "resolved", None))
    evidence.append(Evidence(kind="rule", description=f"the reference resolves; what the text says with it "
                             f"({' '.join(sorted(said)[:6])}) is not something the KG holds"))
    return Finding(ref.text, (ref.start, ref.end), "statute", "unverifiable", 0.6, evidence, subject=ref.entity.id,
                   citation=CitationCheck("statute", "resolved", None))


def _named_statutes(doc: Document, ref: _Ref) -> list[Entity]:
    """Statutes named by name in the ref's clause ("The Computer Fraud and Abuse Act, 18 U.S.C. § 1031")."""
    assert doc.kg is not None
    clause = doc.clause_of(ref.start)
    out: list[Entity] = []
    for mention in doc.mentions(["statute"]):
        if mention.in_prompt or not (clause[0] <= mention.start < clause[1]) or re.search(r"\d|§", mention.text):
            continue
        if ref.start <= mention.start < ref.end:
            continue
        entity = doc.kg.entity(mention.entity_ids[0])
        if entity is not None and not entity.id.startswith(("statute:us-const", "statute:gdpr")):
            out.append(entity)
    return out


def _cites_sections_after(doc: Document, ref: _Ref) -> bool:
    """"42 U.S.C. § 2000e et seq." cites the section and those after it: what any of them says is not wrong."""
    return bool(re.search(r"\bet\s+seq\b", doc.text[ref.start:ref.end + 12]))


def _named_elsewhere(doc: Document, ref: _Ref) -> Entity | None:
    """An unknown section named as an act whose section in the same title is another one."""
    keys = statute_keys(ref.text)
    for entity in _named_statutes(doc, ref):
        entity_keys = [k for _, _, k, _ in statute_keys(entity.name)]
        if keys and any(k[0] == keys[0][2][0] and k[1] == keys[0][2][1] for k in entity_keys):
            return entity
    return None


def _contains(provision: Entity, ref: _Ref) -> bool:
    """Whether a named provision holds the cited one: "Regulation Z" (12 C.F.R. Part 1026) holds § 1026.1."""
    if ref.key is None:
        return False
    code, title, section = ref.key
    return any(key[0] == code and key[1] == title and section.startswith(key[2] + ".")
               for form in provision.surface_forms for _, _, key, _ in statute_keys(form))


def _act_claim(doc: Document, seg: Segment, ref: _Ref) -> Finding | None:
    assert doc.kg is not None and ref.entity is not None
    named = [e for e in _named_statutes(doc, ref) if not e.id.startswith("act:")]
    if named and len(statute_keys(doc.text[doc.clause_of(ref.start)[0]:doc.clause_of(ref.start)[1]])) <= 1:
        holds = any(e.id == ref.entity.id or _contains(e, ref) for e in named)
        if not holds and _cites_sections_after(doc, ref):
            return None     # "§ 2000e et seq." names the sections after § 2000e too: another one of them is no error
        other = next((e for e in named if e.id != ref.entity.id), named[0])
        # the claim is the pairing: its span runs from the reference to the name it is given
        ids = {e.id for e in named}
        names = [m for m in doc.mentions(["statute"]) if set(m.entity_ids) & ids and doc.clause_of(m.start) == doc.clause_of(ref.start)]
        span = (min([ref.start, *(m.start for m in names)]), max([ref.end, *(m.end for m in names)]))
        return Finding(doc.text[span[0]:span[1]], span, "statute", "supported" if holds else "contradicted", 0.85,
                       [kg_evidence(f"{ref.text} is {ref.entity.name}" + ("" if holds else f"; {other.name} is a different "
                                    "provision"), ref.entity.provenance)], subject=ref.entity.id,
                       citation=CitationCheck("statute", "resolved", holds))
    clause = doc.clause_of(ref.start)
    spans = [clause] + ([(seg.start, seg.end)] if seg.label is not None or seg.cells else [])
    acts = [m for m in doc.mentions(["act"]) if any(s <= m.start < e for s, e in spans) and not m.in_prompt
            and not (ref.start <= m.start < ref.end)]
    if not acts and re.match(r"^\W*(?:It|This|That|The act|The statute|The law)\b[^.;]{0,30}\b(?:at|in|under|is)\s*$",
                             doc.text[clause[0]:ref.start]):
        referent = doc.antecedent(clause[0], ["act"], accept=lambda m, at=clause[0]: m.end <= at)
        acts = [referent] if referent is not None else []
    if not acts:
        return None
    act = min(acts, key=lambda m: abs(m.start - ref.start))
    between = doc.text[min(act.end, ref.end):max(act.start, ref.start)] if act.end <= clause[1] and act.start >= clause[0] else ""
    if re.search(r"[;]|\bwhile\b|\bwhereas\b", between):
        return None
    belongs = {f.object for f in doc.kg.facts(ref.entity.id, "part_of_act")}
    if not belongs:
        return None
    span = (min(act.start, ref.start), max(act.end, ref.end)) if act.start >= clause[0] else (clause[0], ref.end)
    while span[0] < span[1] and doc.text[span[0]] in " .,;":
        span = (span[0] + 1, span[1])
    holds = bool(belongs & set(act.entity_ids))
    names = ", ".join(sorted(doc.kg.entity(b).name for b in belongs if b and doc.kg.entity(b)))  # type: ignore[union-attr]
    fact = doc.kg.facts(ref.entity.id, "part_of_act")[0]
    return Finding(doc.text[span[0]:span[1]], span, "statute", "supported" if holds else "contradicted", 0.9,
                   [kg_evidence(f"{ref.entity.name} is part of the {names}", fact.provenance)],
                   subject=ref.entity.id, citation=CitationCheck("statute", "resolved", holds))


def _subject_claim(doc: Document, ref: _Ref, attached: tuple[str, tuple[int, int]]) -> Finding:
    assert doc.kg is not None and ref.entity is not None
    description, desc_span = attached
    words = _content(description) - _content(ref.entity.name)
    texts = _provision_texts(id(doc.kg), doc.kg.version, doc.kg)
    parts = _provision_parts(id(doc.kg), doc.kg.version, doc.kg)
    claimed = _fit(words, texts.get(ref.entity.id, frozenset()), parts.get(ref.entity.id, ()))
    # the provision sharing the most of the description's words, then the closest fit (F1): a short heading that
    # shares one word ("decisions") does not outrank one that shares two ("arbitrary", "capricious")
    # only provisions that share a word can rank above zero (an inverted index: the KG holds ~2,000 provisions)
    candidates = {i for w in words for i in _provisions_with_word(id(doc.kg), doc.kg.version, doc.kg).get(w, ())}
    ranked = sorted(((len(words & texts[i]), _score(words, texts[i]), i) for i in candidates if i != ref.entity.id),
                    reverse=True)
    _, best_score, best_id = ranked[0] if ranked else (0, (0.0, 0.0), "")
    best_score = _fit(words, texts[best_id], parts.get(best_id, ())) if best_id else best_score
    span = (min(ref.start, desc_span[0]), max(ref.end, desc_span[1]))
    while span[1] > span[0] and doc.text[span[1] - 1] in " .,;:":
        span = (span[0], span[1] - 1)
    evidence = [kg_evidence(f"{ref.entity.name}: {ref.entity.attributes.get('title', '')}", ref.entity.provenance),
                Evidence(kind="rule", description=f"the text attaches: {description.strip()!r}")]
    # A section and its own subsections describe each other ("Rule 23" and "Rule 23(a)"); siblings do not.
    related = best_id.startswith(ref.entity.id + "-") or ref.entity.id.startswith(best_id + "-")

    def finding(verdict: str, confidence: float, supports: bool | None) -> Finding:
        return Finding(doc.text[span[0]:span[1]], span, "statute", verdict, confidence, evidence,  # type: ignore[arg-type]
                       subject=ref.entity.id, citation=CitationCheck("statute", "resolved", supports))  # type: ignore[union-attr]

    if claimed[1] >= 0.6 and claimed[0] >= best_score[0] - 0.1:
        return finding("supported", 0.85, True)
    # Another provision is blamed only when it shares at least two of the words, or the head noun (the last word)
    # when that is specific and no other provision uses it: one modifier ("limitations period") or a generic
    # noun ("a separate duty") is how unrelated headings overlap.
    shared = words & texts.get(best_id, frozenset())
    head = _content(description.split()[-1]) if description.split() else frozenset()
    distinctive_head = (len(shared) == 1 and shared == head and not shared & _GENERIC_NOUNS
                        and sum(1 for t in texts.values() if shared <= t) == 1)
    clearly_better = ((len(shared) >= min(2, len(words)) or distinctive_head)
                      and (best_score[1] - claimed[1] >= 0.5 or (best_score[1] >= 0.6 and best_score[0] >= claimed[0] + 0.2
                                                                 and claimed[1] <= 0.5)))
    about_something = bool({w.rstrip("s") for w in words} - {w.rstrip("s") for w in _KIND_WORDS | _GENERIC_NOUNS})
    if clearly_better and not related and about_something and not _cites_sections_after(doc, ref):
        other = doc.kg.entity(best_id)
        evidence.append(kg_evidence(f"that describes {other.name}: {other.attributes.get('title', '')}" if other else best_id,
                                    other.provenance if other else None))
        return finding("contradicted", 0.8, False)
    evidence.append(Evidence(kind="rule", description="the description matches no provision clearly enough to judge; "
                             "the citation itself resolves"))
    return finding("unverifiable", 0.6, None)


# "has four prerequisites: numerosity, commonality, typicality and adequacy": each item is a claim of its own
_ENUMERATION = re.compile(r"\b(?:prerequisites|requirements|elements|factors|prongs|exemptions|exceptions|conditions)\b"
                          r"\s*(?::|are|include|includes|—|-)\s*(?P<items>[^.;:]+)", re.I)


def _enumerated_items(doc: Document, ref: _Ref) -> list[Finding]:
    """Items of a list the provision is said to set out: an item in its own text is supported, one only another
    (unrelated) provision names is contradicted, anything else is unverifiable and left out."""
    assert doc.kg is not None and ref.entity is not None
    clause = doc.clause_of(ref.start)
    found = _ENUMERATION.search(doc.text, ref.end, doc.segment_of(ref.start).end)
    if found is None or found.start() > clause[1] + 1 and doc.clause_of(found.start())[0] != clause[1] + 1:
        return []
    texts = _provision_texts(id(doc.kg), doc.kg.version, doc.kg)
    own = texts.get(ref.entity.id, frozenset())
    out = []
    chunks = list(re.finditer(r"[^,]+", found.group("items")))
    # "a, b and c" ends in two items; with an Oxford comma ("a, b, and c") or none at all, "and" is inside an item
    # ("the purpose and character of the use")
    oxford = any(re.match(r"^\s*(?:and|or)\s", c.group(0)) for c in chunks)
    for index, item in enumerate(chunks):
        raw = re.sub(r"^\s*(?:and|or)\s+", "", item.group(0)).strip()
        last_without_oxford = index == len(chunks) - 1 and len(chunks) > 1 and not oxford
        parts = [p.strip() for p in re.split(r"\s+(?:and|or)\s+", raw) if p.strip()] if last_without_oxford else [raw]
        offset = found.start("items") + item.start()
        for part in parts:
            words = _content(part)
            if not words or len(part.split()) > 5:
                continue
            start = doc.text.index(part, offset)
            span = (start, start + len(part))
            subjects = "; ".join(str(f.value) for f in doc.kg.facts(ref.entity.id, "subject_matter"))
            evidence = [kg_evidence(f"{ref.entity.name}: {ref.entity.attributes.get('title', '')}"
                                    + (f" ({subjects})" if subjects else ""), ref.entity.provenance)]
            if words <= own:
                out.append(Finding(part, span, "statute", "supported", 0.8, evidence, subject=ref.entity.id,
                                   citation=CitationCheck("statute", "resolved", True)))
                continue
            elsewhere = [i for i, t in texts.items() if words <= t and i != ref.entity.id
                         and not i.startswith(ref.entity.id + "-") and not ref.entity.id.startswith(i + "-")]
            if elsewhere:
                other = doc.kg.entity(elsewhere[0])
                evidence.append(kg_evidence(f"{part} belongs to {other.name if other else elsewhere[0]}",
                                            other.provenance if other else None))
                out.append(Finding(part, span, "statute", "contradicted", 0.8, evidence, subject=ref.entity.id,
                                   citation=CitationCheck("statute", "resolved", False)))
    return out


# -- values -------------------------------------------------------------------------------------------------
_DURATION = re.compile(r"(?P<n>\d+(?:\.\d+)?)[\s-]*(?:(?:further|more|additional|extra|calendar|business)\s+)?"
                       r"(?P<unit>days?|hours?|months?|years?|weeks?)\b", re.I)
# "hours worked over 40 in a workweek": the unit before the number
_UNIT_BEFORE = re.compile(r"\b(?P<unit>hours|days|weeks|months|years)\s+(?:\w+\s+)?(?:over|above|beyond|past|in excess of|more than)\s+"
                          r"(?P<n>\d+(?:\.\d+)?)\b(?!\s*(?:%|percent|hours|days|weeks|months|years|\$))", re.I)
_COUNT = re.compile(r"(?P<n>\d+)\s+(?:\w+\s+)?(?P<unit>factors?|exemptions?|prerequisites?|requirements?|elements?)\b", re.I)
_TIMES = re.compile(r"(?P<n>\d+(?:\.\d+)?)\s+times\b|\b(?P<word>double|twice|triple)\b", re.I)
_PERCENT = re.compile(r"(?P<n>\d+(?:\.\d+)?)\s*(?:%|percent\b)")
_AGE = re.compile(r"\b(?:age|aged|years old)\b[^.;]{0,80}?\b(?:is|of|at|to)\s+(?P<n>\d{1,2})\b|\bnot below\s+(?P<n2>\d{1,2})\b", re.I)
_UNIT_NAMES = {"day": "days", "days": "days", "hour": "hours", "hours": "hours", "month": "months", "months": "months",
               "year": "years", "years": "years", "week": "weeks", "weeks": "weeks"}
_INSIDE = re.compile(r"\b(?:is|are|was|would be)\s+(?:still\s+|already\s+)?(?P<op>inside|within|past|beyond|outside|after|over|"
                     r"above|under|below|more than|less than)\b", re.I)


def _value_claims(doc: Document, seg: Segment, ref: _Ref) -> list[Finding]:
    """Numbers stated with a provision, against the values it sets."""
    assert doc.kg is not None and ref.entity is not None
    facts = doc.kg.facts(ref.entity.id, "sets_value")
    parent = _parent_of(doc, ref)
    if not facts and parent is not None:
        facts = doc.kg.facts(parent, "sets_value")
    every = facts
    if ref.sub and facts:
        narrowed = [f for f in facts if ref.sub in str(f.provenance.locator if f.provenance else "")]
        facts = narrowed or facts
    if not facts:
        return []
    spans = [doc.clause_of(ref.start)]
    if seg.label is not None or seg.kind in ("item", "row", "line"):
        spans.append((seg.start, seg.end))
    out = []
    for start, end in spans[-1:]:
        out += _values_in(doc, start, end, facts, ref)
    if seg.label is None and seg.kind not in ("item", "row", "line"):
        for start, end in _later_scopes(doc, seg, ref, spans[-1]):
            # a later sentence may speak of another subdivision ("an outer limit: ... more than 1 year")
            out += _values_in(doc, start, end, every, ref, by_measure=True)
    return out


_REFERRING_START = re.compile(r"^\W*(?:it|its|that|this|these|those|they|both|either|the (?:rule|statute|section|article|"
                              r"provision|period|deadline|window|limit|act|law|regulation|order))\b", re.I)


def _later_scopes(doc: Document, seg: Segment, ref: _Ref, own: tuple[int, int]) -> list[tuple[int, int]]:
    """Where else a provision's numbers may stand: the rest of its sentence when it names no other provision
    ("Under Rule 65(b)(2), a TRO ... expires at the time the court sets, which can be no more than 14 days"),
    and the next sentence when that one names none and refers back ("That period can be extended by two further
    months", "Member States can set a lower age, but not below 12")."""
    refs = doc.cache.get("statute_refs") or []
    def names_another(start: int, end: int) -> bool:
        return any(start <= r.start < end and r.start != ref.start for r in refs)
    scopes: list[tuple[int, int]] = []
    if own[1] < seg.end and not names_another(own[1], seg.end):
        scopes.append((own[1], seg.end))
    later = [s for s in doc.segments if s.start >= seg.end]
    if later and later[0].kind == seg.kind and not names_another(later[0].start, later[0].end) \
            and not names_another(seg.start, seg.end):
        scopes.append((later[0].start, later[0].end))
    return scopes


def _parent_of(doc: Document, ref: _Ref) -> str | None:
    """GDPR Article 83(5) -> the facts of Article 83; a rule's subdivision -> its rule."""
    return ref.entity.id if ref.entity is not None else None


def _values_in(doc: Document, start: int, end: int, facts: list[Fact], ref: _Ref, by_measure: bool = False) -> list[Finding]:
    """The values in text[start:end] judged against `facts`; `by_measure`: away from the reference, only a value
    whose own clause, or the one before it, says what it measures (a word of the fact's measure)."""
    view = numeric_view(doc.text[start:end])
    found: list[tuple[int, int, float, str]] = []
    for match in _DURATION.finditer(view.text):
        found.append((*view.span(*match.span()), float(match.group("n")), _UNIT_NAMES[match.group("unit").casefold()]))
    for match in _UNIT_BEFORE.finditer(view.text):
        found.append((*view.span(match.start("n"), match.end("n")), float(match.group("n")), _UNIT_NAMES[match.group("unit").casefold()]))
    for match in _COUNT.finditer(view.text):
        found.append((*view.span(*match.span()), float(match.group("n")), "count"))
    for match in _TIMES.finditer(view.text):
        value = float(match.group("n")) if match.group("n") else {"double": 2.0, "twice": 2.0, "triple": 3.0}[match.group("word").casefold()]
        found.append((*view.span(*match.span()), value, "times"))
    for match in _PERCENT.finditer(view.text):
        found.append((*view.span(*match.span()), float(match.group("n")), "percent"))
    for match in _AGE.finditer(view.text):
        group = "n" if match.group("n") else "n2"
        found.append((*view.span(match.start(group), match.end(group)), float(match.group(group)), "years"))
    for money in find_money(view.text, known_codes={"USD", "EUR"}):
        found.append((*view.span(money.start, money.end), money.amount, money.currency))
    out = []
    seen: set[tuple[int, int]] = set()
    for s, e, value, unit in sorted(found):
        if (s, e) in seen or any(a <= s and e <= b and (a, b) != (s, e) for a, b, *_ in found):
            continue
        seen.add((s, e))
        candidates = [f for f in facts if str(f.unit) == unit]
        if not candidates:
            continue
        own = doc.segment_of(start + s)     # the words that say what a value measures stand in its own sentence
        text_around = doc.text[max(start, own.start, start + s - 80):min(own.end, start + e + 60)]
        fact = max(candidates, key=lambda f: len(_content(str(f.qualifiers.get("measure", ""))) & _content(text_around)))
        if by_measure and (not _measured_nearby(doc, start + s, fact)
                           or re.search(r"\w\s*(?:to|-|–)\s*$", doc.text[max(start, start + s - 12):start + s])):
            continue    # away from the reference: unmeasured, or the upper end of a range ("one to three months")
        out.append(_judge_value(doc, (start + s, start + e), value, unit, fact, ref))
    return out


_UNIT_WORDS = frozenset("day days month months year years hour hours time times percent count".split())


def _measured_nearby(doc: Document, position: int, fact: Fact) -> bool:
    clause = doc.clause_of(position)
    previous = doc.clause_of(clause[0] - 2) if clause[0] >= 2 else clause
    nearby = _content(doc.text[min(previous[0], clause[0]):position])
    return bool((_content(str(fact.qualifiers.get("measure", ""))) - _UNIT_WORDS) & nearby)


def _judge_value(doc: Document, span: tuple[int, int], value: float, unit: str, fact: Fact, ref: _Ref) -> Finding:
    clause = doc.clause_of(span[0])
    after = doc.text[span[1]:clause[1]]
    before = doc.text[clause[0]:span[0]]
    target = float(fact.value)
    comparison = str(fact.qualifiers.get("comparison", ""))
    inside = _INSIDE.search(after[:60])
    evidence = [kg_evidence(f"{ref.entity.name if ref.entity else ref.text}: {comparison} {target:g} {unit} "  # type: ignore[union-attr]
                            f"({fact.qualifiers.get('measure', '')})", fact.provenance)]
    if inside and not re.match(r"^\s*(?:or|and)\b", after):
        op = inside.group("op").casefold()
        stated_reference = re.search(r"\d", after[inside.end():inside.end() + 20])
        if stated_reference:
            return _span_finding(doc, span, after, inside, "supported", evidence, ref)   # arithmetic on the stated value: judged as text
        within = value < target if comparison == "more than" else value <= target
        if unit in ("USD", "EUR"):
            within = not (value > target if comparison == "more than" else value >= target)
        says_within = op in ("inside", "within", "under", "below", "less than")
        holds = within == says_within
        return _span_finding(doc, span, after, inside, "supported" if holds else "contradicted", evidence, ref)
    if re.search(r"\bexactly\s*$", before, re.I) and re.search(r"\bsatisf|\benough|\bqualif|\bmeets?\b", after, re.I):
        satisfies = value > target if comparison == "more than" else value >= target
        end = clause[1] - (1 if doc.text[clause[1] - 1] in ".;," else 0)
        start = span[0] - len(re.search(r"(?:a claim for\s+)?exactly\s*$", before, re.I).group(0))  # type: ignore[union-attr]
        return Finding(doc.text[start:end], (start, end), "statute_value", "supported" if satisfies else "contradicted", 0.85,
                       evidence, subject=ref.entity.id if ref.entity else None)
    holds = abs(value - target) < 1e-6
    cue = re.search(r"(?:\b(?:up to|no more than|not later than|within|exceed|at least|not below|over|more than|had|has|have|"
                    r"must exceed|to exceed|weigh|is|of)\s+)?$", before, re.I)
    start = span[0] - (len(cue.group(0)) if cue else 0)
    return Finding(doc.text[start:span[1]], (start, span[1]), "statute_value", "supported" if holds else "contradicted",
                   0.85, evidence, subject=ref.entity.id if ref.entity else None)


def _span_finding(doc: Document, span: tuple[int, int], after: str, inside: re.Match[str], verdict: str,
                  evidence: list[Evidence], ref: _Ref) -> Finding:
    end = span[1] + inside.end()
    rest = doc.text[end:doc.clause_of(span[0])[1]]
    stop = re.search(r"[,;.]|\s+(?:so|because|under)\b", rest)
    end += stop.start() if stop else len(rest)
    return Finding(doc.text[span[0]:end], (span[0], end), "statute_value", verdict, 0.85, evidence,  # type: ignore[arg-type]
                   subject=ref.entity.id if ref.entity else None)
