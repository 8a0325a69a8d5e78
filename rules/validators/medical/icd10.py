"""`medical.icd10cm`: ICD-10-CM codes exist, are billable when said to be, and match what they are given for.

Codes are found anywhere in medical text (no cue word needed: "For a type 2 diabetic with no
complications, bill E11.9"); a string that is not a valid code counts only next to a cue ("ICD", "code",
"bill"), so "A1C" or "T2D" are not read as codes.

What a code is given for is read from its structure and phrasing, first hit wins: the other cells of its
table row; the "Label" of its "Label: code" line; a parenthesis right after it ("G43.009 (migraine without
aura)"); "for <description>" after it; "<description> is / is coded <code>" before it; "<code> is
<description>" after it; a leading "For / When <description>," of its sentence; else the question.

The description is matched against every code's ICD-10-CM description and inclusion terms (an inverted
index over simple-icd-10-cm's tabular data, abbreviations such as GERD, AF, BPH and LUTS expanded, a drug
named in it read as its classes: "long-term Eliquis" -> anticoagulants). Scores: coverage (share of the
description's words the code's text holds) and precision (share of the code's words the description
states), combined as F1. The claimed code is

- supported when it scores at or near the best (or is an ancestor or descendant of the best) and covers at
  least COVERAGE_MIN of the description;
- contradicted when another, unrelated code covers at least COVERAGE_MIN and beats it by MARGIN (the
  evidence names that code and both descriptions);
- unverifiable otherwise (a valid code whose description is vague or absent).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

import simple_icd_10_cm as icd

from rules.claims import Document, Segment
from rules.extraction.polarity import negated_before
from rules.report import Evidence
from rules.validators.base import CitationCheck, Finding, package_source, validator
from rules.validators.medical.context import is_labelled, labelled_drug_ids
from rules.validators.medical.relations import class_closure

COVERAGE_MIN = 0.6
MARGIN = 0.1
_CODE = re.compile(r"(?<![\w*/-])([A-TV-Z]\d[0-9A-Z](?:\.[0-9A-Z]{1,4})?)(?![\w-])")
_CUE = re.compile(r"ICD|diagnosis code|\bcode[sd]?\b|billable|\bbill\b|\bdx\b", re.I)
_STOPWORDS = frozenset("""a an and the of or in on for to by as is are be been due use used using code codes coded
    icd cm diagnosis billable bill report add you'd you would should could it its it's this that which which's
    your patient pt visit usual choice would the same also then than instead just only plus pair fallback
    documented documentation chart note notes say says anything provider if when both their them they get up
    gets itself alone own condition conditions diagnosis dx""".split())
# abbreviations and lay terms -> the words ICD-10-CM uses
_EXPANSIONS: list[tuple[re.Pattern[str], str]] = [(re.compile(p, re.I), r) for p, r in [
    (r"\bT2DM\b|\btype 2 DM\b|\btype 2 diabetic\b|\btype II diabetes\b", "type 2 diabetes mellitus"),
    (r"\bT1DM\b|\btype 1 DM\b|\btype 1 diabetic\b|\btype I diabetes\b", "type 1 diabetes mellitus"),
    (r"\bDM\b", "diabetes mellitus"), (r"\bdiabetic\b", "diabetes"),
    (r"\bHTN\b", "hypertension"), (r"\bGERD\b", "gastro-esophageal reflux disease"),
    (r"\bA-?fib\b|\bAF\b", "atrial fibrillation"), (r"\bCHF\b", "congestive heart failure"), (r"\bHF\b", "heart failure"),
    (r"\bCOPD\b", "chronic obstructive pulmonary disease"), (r"\bUTI\b", "urinary tract infection"),
    (r"\bBPH\b", "benign prostatic hyperplasia"), (r"\bLUTS\b", "lower urinary tract symptoms"),
    (r"\bPTSD\b", "post-traumatic stress disorder"), (r"\bADHD\b", "attention-deficit hyperactivity disorder"),
    (r"\bOCD\b", "obsessive-compulsive disorder"), (r"\bGAD\b", "generalized anxiety disorder"),
    (r"\bMDD\b", "major depressive disorder"), (r"\bCKD\b", "chronic kidney disease"),
    (r"\bDVT\b", "deep vein thrombosis"), (r"\bIDA\b", "iron deficiency anemia"), (r"\bRLS\b", "restless legs syndrome"),
    (r"\bn/v\b", "nausea vomiting"), (r"\bMI\b", "myocardial infarction"), (r"\bRA\b", "rheumatoid arthritis"),
    (r"\bOSA\b", "obstructive sleep apnea"), (r"\bhigh cholesterol\b", "hypercholesterolemia"),
    (r"\b(?:night(?:time)? urination|urinat\w* at night|gets? up at night(?: to urinate)?)\b", "nocturia"),
    (r"\bpositive rapid strep\b", "streptococcal pharyngitis"), (r"\bstrep throat\b|\bstrep\b", "streptococcal pharyngitis"), (r"\bear infection\b", "otitis media"),
    (r"\bheart attack\b", "myocardial infarction"), (r"\bhigh blood pressure\b", "hypertension"),
    (r"\b(?:no|without) complications?\b", "without complications"),
    (r"\b(?:not|isn't|is not|aren't|wasn't) (?:documented|specified|stated)\b|\bwithout further detail\b|"
     r"\bno further detail\b|\bnot otherwise specified\b|\bNOS\b|\btype (?:is )?not documented\b", "unspecified"),
    (r"\bno abnormal findings\b|\beverything normal\b|\bnormal findings\b", "without abnormal findings"),
    (r"\bphysical\b|\bcheck-?up\b|\bwell(?:ness)? visit\b", "general medical examination"),
    (r"\bsingle episode\b|\bfirst episode\b|\bfirst \(single\) episode\b", "single episode"),
    (r"\bearly[- ]onset\b", "early onset"), (r"\blate[- ]onset\b", "late onset"),
    (r"\bsevere obesity\b|\bmorbid obesity\b", "morbid severe obesity"),
    (r"\bLDL\b", "cholesterol"),
]]
# one pass tells whether any expansion applies: most of ICD-10-CM's 60k texts need none (the index is 5x faster)
_ANY_EXPANSION = re.compile("|".join(f"(?:{pattern.pattern})" for pattern, _ in _EXPANSIONS), re.I)
_UNITS = {"i": "1", "ii": "2", "iii": "3", "iv": "4"}


def _stem(word: str) -> str:
    word = _UNITS.get(word, word)
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 4 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


@lru_cache(maxsize=8192)
def content_words(text: str) -> frozenset[str]:
    """The description's words, abbreviations expanded, stopwords removed, crudely stemmed."""
    if _ANY_EXPANSION.search(text):
        for pattern, replacement in _EXPANSIONS:
            text = pattern.sub(f" {replacement} ", text)
    words = re.findall(r"[a-z0-9]+(?:\.[0-9]+)?", text.casefold().replace("'s", ""))
    return frozenset(_stem(w) for w in words if w not in _STOPWORDS)


# "unspecified ear" and the like: laterality defaults a description never states
_LATERALITY = re.compile(r",?\s*unspecified (?:ear|eye|side|arm|leg|hand|foot|knee|hip|shoulder|lung|kidney|breast|"
                         r"upper limb|lower limb|ovary|testis|orbit|eyelid)s?\b", re.I)


@dataclass(frozen=True, slots=True)
class _Entry:
    code: str
    texts: tuple[frozenset[str], ...]     # description, then inclusion terms


_index_lock = threading.Lock()


def _index() -> tuple[dict[str, _Entry], dict[str, list[str]]]:
    """code -> entry; word -> codes whose description or inclusion terms hold it (non-extended codes).
    Built once per process; threads that ask meanwhile wait for it rather than build it again."""
    with _index_lock:
        return _build_index()


@cache
def _build_index() -> tuple[dict[str, _Entry], dict[str, list[str]]]:
    entries: dict[str, _Entry] = {}
    postings: dict[str, list[str]] = {}
    for code in icd.get_all_codes(True):
        if icd.is_chapter_or_block(code) or icd.is_extended_subcategory(code):
            continue
        texts = tuple(content_words(_LATERALITY.sub("", t)) for t in [icd.get_description(code), *icd.get_inclusion_term(code)])
        entries[code] = _Entry(code, texts)
        for word in set().union(*texts):
            postings.setdefault(word, []).append(code)
    return entries, postings


def _score(words: frozenset[str], entry: _Entry) -> tuple[float, float]:
    """(F1, coverage) of the description against the best of the code's texts."""
    best = (0.0, 0.0)
    for text in entry.texts:
        shared = len(words & text)
        if not shared or not text:
            continue
        coverage, precision = shared / len(words), shared / len(text)
        f1 = 2 * coverage * precision / (coverage + precision)
        best = max(best, (f1, coverage))
    return best


def best_codes(words: frozenset[str], limit: int = 3) -> list[tuple[float, float, str]]:
    """The codes whose texts best match the description: (F1, coverage, code), best first."""
    entries, postings = _index()
    if not words:
        return []
    ranked = sorted((w for w in words if w in postings), key=lambda w: len(postings[w]))
    if not ranked:
        return []
    candidates: set[str] = set()
    for word in ranked[:2]:
        candidates.update(postings[word][:5000])
    scored = [(*_score(words, entries[c]), c) for c in candidates]
    return sorted(scored, reverse=True)[:limit]


@validator("medical.icd10cm")
def icd10cm(doc: Document, params: Mapping[str, Any]) -> list[Finding]:
    """ICD-10-CM codes exist, match the condition they are given for, and are billable when said to be."""
    findings: list[Finding] = []
    for seg in doc.segments:
        cued = bool(_CUE.search(seg.text) or _CUE.search(seg.heading) or (doc.prompt and _CUE.search(doc.prompt)))
        for match in _CODE.finditer(seg.text):
            code = match.group(1)
            if not icd.is_valid_item(code) and not (cued and "." in code or _CUE.search(seg.text)):
                continue
            if not icd.is_valid_item(code) and not re.search(r"\d\.", code) and not _CUE.search(seg.text):
                continue
            span = (seg.start + match.start(1), seg.start + match.end(1))
            findings.append(_judge_code(doc, seg, code, span))
    return findings


def _judge_code(doc: Document, seg: Segment, code: str, span: tuple[int, int]) -> Finding:
    source = package_source("simple-icd-10-cm")
    locator = "ICD-10-CM tabular list (simple_icd_10_cm)"

    def finding(verdict: str, confidence: float, evidence: list[Evidence], supports: bool | None) -> Finding:
        resolution = "invalid" if verdict == "contradicted" and supports is None else "resolved"
        return Finding(code, span, "icd10cm_code", verdict, confidence, evidence,  # type: ignore[arg-type]
                       citation=CitationCheck("icd10cm_code", resolution, supports))  # type: ignore[arg-type]

    if not icd.is_valid_item(code):
        return finding("contradicted", 0.9, [Evidence(kind="registry", description=f"{code} is not an ICD-10-CM code",
                                                      source=source, locator=locator)], None)
    own = icd.get_description(code)
    evidence = [Evidence(kind="registry", description=f"{code}: {own}", source=source, locator=locator)]
    sentence = seg.text
    said = re.search(r"(?<!non-)\bbillable\b", sentence, re.I)
    # "no longer a valid billable code", "isn't billable": the shared polarity rules read the negation
    negated = said is not None and negated_before(sentence, said.start(), words=4)
    billable = said if said is not None and not negated else None
    not_billable = negated or re.search(r"non-billable|unbillable|cannot be billed", sentence, re.I)
    if billable and not not_billable and not icd.is_leaf(code):
        evidence.append(Evidence(kind="registry", description=f"{code} is a category with subcodes, not a billable leaf",
                                 source=source, locator=locator))
        return finding("contradicted", 0.9, evidence, False)
    if not_billable and icd.is_leaf(code):
        evidence.append(Evidence(kind="registry", description=f"{code} is a billable leaf code", source=source,
                                 locator=locator))
        return finding("contradicted", 0.85, evidence, False)
    description = described_as(doc, seg, span)
    words = content_words(_drugs_as_classes(doc, description)) if description else frozenset()
    if not words:
        evidence.append(Evidence(kind="rule", description="nothing in the text says what the code is given for"))
        return finding("unverifiable", 0.6, evidence, None)
    entries, _ = _index()
    claimed = _score(words, entries[code]) if code in entries else (0.0, 0.0)
    ranked = best_codes(words)
    best = ranked[0] if ranked else (0.0, 0.0, code)
    evidence.append(Evidence(kind="rule", description=f"the text gives it for: {description!r}"))
    exact = [c for f1, coverage, c in ranked if f1 >= 1.0 and not _related(code, c)]
    if exact and claimed[0] < 1.0:
        # another code's text is exactly the description ("Acute bronchitis, unspecified" is J20.9, not J40)
        evidence.append(Evidence(kind="registry", description=f"the description is exactly {exact[0]}: "
                                 f"{icd.get_description(exact[0])}", source=source, locator=locator))
        return finding("contradicted", 0.85, evidence, False)
    # a description whose every word the code's own text holds is consistent with it, however vague
    if claimed[1] >= 1.0 or (claimed[1] >= COVERAGE_MIN and (claimed[0] >= best[0] - 0.02 or _related(code, best[2]))):
        return finding("supported", 0.85 if claimed[0] >= 0.6 else 0.7, evidence, True)
    if best[1] >= COVERAGE_MIN and best[0] >= claimed[0] + MARGIN and not _related(code, best[2]):
        evidence.append(Evidence(kind="registry", description=f"the description matches {best[2]}: "
                                 f"{icd.get_description(best[2])}", source=source, locator=locator))
        return finding("contradicted", 0.8, evidence, False)
    evidence.append(Evidence(kind="rule", description="the description matches no code clearly enough to judge"))
    return finding("unverifiable", 0.6, evidence, None)


def _related(code: str, other: str) -> bool:
    """Same code, or one is an ancestor of the other (E11 ~ E11.9)."""
    if not icd.is_valid_item(other):
        return False
    return icd.remove_dot(code) == icd.remove_dot(other) or icd.is_ancestor(code, other) or icd.is_ancestor(other, code)


# -- what the code is given for --------------------------------------------------------------------------
_PAREN_AFTER = re.compile(r"^\s*\((?P<desc>[^)]+)\)")
_TEXT = r"(?P<desc>(?:[^;\n.]|\.(?=\d))+)"
_FOR_AFTER = re.compile(r"^\s*(?:for\s+(?:the\s+|a\s+|an\s+)?|is\s+(?:for\s+)?(?:the\s+code\s+for\s+)?|"
                        r",\s*which\s+is\s+(?:for\s+)?)" + _TEXT, re.I)
_IS_BEFORE = re.compile(r"(?P<desc>[^;:.\n]+?)\s+(?:is|are|=|is coded(?: as)?|is billed as|codes? (?:to|as)|gets?)\s+"
                        r"(?:coded\s+)?(?:as\s+)?(?:the\s+)?(?:ICD[- ]?10(?:[- ]CM)?\s+)?(?:diagnosis\s+)?(?:code\s+)?$", re.I)
_FOR_BEFORE = re.compile(r"\bfor\s+(?:an?\s+|the\s+)?(?P<desc>[^,;]+?)(?:,\s*|\s+)(?:you'?d\s+|you would\s+|we\s+)?"
                         r"(?:use|bill|code|report|add|pick|choose)\s+$", re.I)
_LEADING = re.compile(r"^\s*(?:for|when|with|in)\s+(?P<desc>[^,]{3,120}),", re.I)
_CODE_WORDS = re.compile(r"\b(?:that's|use|bill|report|code|it's|add|try)\s*$", re.I)
_SENTENCE_LABEL = re.compile(r"\b(?:I|I'd|you|you'd|we|here|like this|this|these|following)\b", re.I)


def _until_next_code(text: str) -> str:
    """A description ends where the next code begins ("..., I48.0 for ...", "... and Z79.02 for ...")."""
    found = _CODE.search(text)
    if found:
        text = re.sub(r"[,;]?\s*(?:and|plus)?\s*$", "", text[:found.start()])
    return text


def described_as(doc: Document, seg: Segment, span: tuple[int, int]) -> str:
    """The text the code is given for (see the module docstring for the order)."""
    if seg.cells:
        own = seg.cell_at(span[0])
        others = [c for c in seg.cells if c is not own and not _CODE.search(c.text)]
        if others:
            return others[0].text
    clause = doc.clause_of(span[0])
    after = doc.text[span[1]:clause[1]]
    paren = _PAREN_AFTER.match(after)
    label = doc.text[seg.label[0]:seg.label[1]] if seg.label is not None and seg.label[1] <= span[0] else ""
    if label and _SENTENCE_LABEL.search(label):
        label = ""       # "I'd code it like this: ..." introduces codes, it does not describe one
    if paren or label:
        return " ".join(t for t in (label, paren.group("desc") if paren else "") if t)
    found = _FOR_AFTER.match(after)
    if found:
        text = _until_next_code(found.group("desc"))
        desc = re.split(r"\s+since\s+", text)[0]
        since = re.search(r"\bsince\s+(.*)$", text)
        if since:
            desc += " " + since.group(1)
        if content_words(desc):
            leading = _LEADING.match(seg.text)
            if leading and len(content_words(desc)) <= 2:
                desc = leading.group("desc") + " " + desc     # "For ... severe obesity, code E66.9 for the obesity"
            return desc
    before = doc.text[clause[0]:span[0]]
    found = _IS_BEFORE.search(before)
    if found and (not _CODE_WORDS.search(before) or re.search(r"\b(?:is|are)\s+(?:the\s+)?(?:ICD[- ]?10(?:[- ]CM)?\s+)?(?:diagnosis\s+)?code\s*$", before, re.I)):
        desc = re.sub(r"^\W*(?:and|but|while|whereas)\s+", "", found.group("desc"))
        if content_words(desc):
            return desc
    found = _FOR_BEFORE.search(before)
    if found:
        return found.group("desc")
    leading = _LEADING.match(seg.text)
    if leading:
        return leading.group("desc")
    if doc.prompt and re.match(r"^\s*(?:That's|It's|Use|Bill|Code)\b", seg.text):
        return doc.prompt
    return ""


def _drugs_as_classes(doc: Document, text: str) -> str:
    """A drug named in a description stands for its classes ("long-term Eliquis" -> anticoagulant)."""
    if doc.kg is None or not text:
        return text
    from rules.mentions import mention_finder

    out = text
    for mention in mention_finder(doc.kg).find(text, ["drug"]):
        if not is_labelled(doc, mention):
            continue
        classes = {f.object for i in labelled_drug_ids(doc, mention) for f in doc.kg.facts(i, "in_class") if f.object}
        names = " ".join(_class_names(doc, class_closure(doc.kg, classes)))
        out = out.replace(mention.text, names)
    return out


def _class_names(doc: Document, ids: Iterable[str]) -> list[str]:
    assert doc.kg is not None
    return [e.name for e in (doc.kg.entity(i) for i in ids) if e is not None]
