"""What the medical validators share: which drug a value is about, and the qualifiers that select a fact.

Drugs: a mention of a drug the KG holds a label for (curated facts), found by the nearest-compatible-
antecedent search; a brand and the generic in parentheses after it ("Tylenol (acetaminophen)") are one
drug. An ordinary word or an unlabelled substance ("serotonin", "cholesterol") is never the subject when
a labelled drug is in reach.

Qualifiers select the fact a statement is about ("for hypertension", "extended-release", "over the
counter", "for patients over 60", "the injection"): they are read from the value's clause, the drug's
own name ("Glucophage XR", "Prilosec OTC"), the "Label" of its line, the other cells of its table row,
its column header and the line that introduces its list or table.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import lru_cache

from knowledge_graphs.model import Fact, KnowledgeGraph
from rules.claims import Document
from rules.extraction import polarity
from rules.mentions import Mention

# relations a curated label gives a drug; a drug with any of them "has a label"
LABEL_RELATIONS = ("max_daily_dose", "max_single_dose", "indicated_for", "contraindicated_in", "in_class",
                   "interacts_with")


def labelled_ids(kg: KnowledgeGraph) -> frozenset[str]:
    return _labelled_ids(id(kg), kg.version, kg)


@lru_cache(maxsize=8)
def _labelled_ids(kg_id: int, kg_version: str, kg: KnowledgeGraph) -> frozenset[str]:
    subjects = {f.subject for f in kg.facts() if f.relation in LABEL_RELATIONS}
    partners = {f.object for f in kg.facts() if f.relation in ("interacts_with", "no_interaction_with") and f.object}
    return frozenset(i for i in subjects | partners if i.startswith("drug:"))


def is_labelled(doc: Document, mention: Mention) -> bool:
    known: dict[tuple[int, int, bool], bool] = doc.cache.setdefault("labelled_mentions", {})
    key = (mention.start, mention.end, mention.in_prompt)
    if key not in known:
        known[key] = doc.kg is not None and any(i in labelled_ids(doc.kg) for i in drug_ids(doc, mention))
    return known[key]


def drug_ids(doc: Document, mention: Mention) -> tuple[str, ...]:
    """The mention's ids plus those of a drug named in parentheses right after it (or it in theirs)."""
    partners = _parenthetical_partners(doc)
    ids = list(mention.entity_ids)
    for other in partners.get((mention.start, mention.end), ()):
        ids.extend(i for i in other.entity_ids if i not in ids)
    return tuple(ids)


def labelled_drug_ids(doc: Document, mention: Mention) -> tuple[str, ...]:
    assert doc.kg is not None
    labelled = labelled_ids(doc.kg)
    return tuple(i for i in drug_ids(doc, mention) if i in labelled) or drug_ids(doc, mention)


_OPEN_PAREN = re.compile(r"^\s*\(\s*(?:the\s+|a\s+|an\s+)?(?:active ingredient in\s+|brand\s+|generic\s+)?", re.I)


def _parenthetical_partners(doc: Document) -> dict[tuple[int, int], list[Mention]]:
    if "drug_partners" not in doc.cache:
        partners: dict[tuple[int, int], list[Mention]] = {}
        mentions = [m for m in doc.mentions(["drug"]) if not m.in_prompt]
        for index, mention in enumerate(mentions[:-1]):
            following = mentions[index + 1]
            gap = doc.text[mention.end:following.start]
            if _OPEN_PAREN.fullmatch(gap) and "(" in gap:
                partners.setdefault((mention.start, mention.end), []).append(following)
                partners.setdefault((following.start, following.end), []).append(mention)
        doc.cache["drug_partners"] = partners
    return doc.cache["drug_partners"]


def drug_for(doc: Document, position: int) -> Mention | None:
    """The labelled drug a value at `position` is about (nearest compatible antecedent); a drug that only names
    a condition ("aspirin-induced asthma") is not a subject."""
    if doc.kg is None:
        return None
    return doc.antecedent(position, ["drug"],
                          accept=lambda m: is_labelled(doc, m) and not modifies_a_condition(doc.text, m))


_CONDITION_MODIFIER = re.compile(r"[-\u2010\u2011 ](?:induced|sensitive|sensitivity|exacerbated|intoleran\w*|"
                                 r"associated|related|allerg\w*|hypersensitivity|resistant|naive|refractory)\b", re.I)


def modifies_a_condition(text: str, mention: Mention) -> bool:
    """"aspirin-induced asthma", "NSAID-sensitive", "penicillin allergy": the drug names a condition here, not a
    drug taken (the subject of a dose, a partner of an interaction)."""
    return not mention.in_prompt and bool(_CONDITION_MODIFIER.match(text, mention.end))


def facts_of(doc: Document, ids: Iterable[str], relation: str) -> list[Fact]:
    assert doc.kg is not None
    return [f for entity_id in ids for f in doc.kg.facts(entity_id, relation)]


# -- qualifiers ---------------------------------------------------------------------------------------
_POPULATIONS: list[tuple[str, re.Pattern[str]]] = [
    ("pediatric", re.compile(r"\b(child|children|pediatric|paediatric|infants?|adolescents?|kids?|toddlers?|"
                             r"\d{1,2}[- ]year[- ]old (?:son|daughter|boy|girl|child))\b", re.I)),
    ("elderly", re.compile(r"\b(elderly|older adults?|geriatric|over (?:6[05]|7[05])|older than (?:6[05]|7[05])|"
                           r"(?:6[05]|7[05]) (?:and|or) (?:older|over)|aged? (?:6[05]|7[05]))\b", re.I)),
    ("renal_impairment", re.compile(r"\b(renal|kidney) (impairment|failure|disease|function)\b|\beGFR\b|\bCrCl\b", re.I)),
    ("hepatic_impairment", re.compile(r"\b(hepatic|liver) (impairment|failure|disease)\b", re.I)),
]
_ROUTES: list[tuple[str, re.Pattern[str]]] = [
    ("intravenous", re.compile(r"\b(intravenous(ly)?|IV|i\.v\.|infusion)\b")),
    ("subcutaneous", re.compile(r"\b(subcutaneous(ly)?|SC|SQ|injections?|injectable|shots?|autoinjector)\b", re.I)),
    ("intramuscular", re.compile(r"\b(intramuscular(ly)?|IM)\b")),
    ("oral", re.compile(r"\b(oral(ly)?|by mouth|PO|tablets?|capsules?|pills?)\b", re.I)),
]
# formulation families: the suffix or words that name them
_FORMULATIONS: list[tuple[str, re.Pattern[str]]] = [
    ("extended-release", re.compile(r"\b(extended[- ]release|XR|ER|XL|24[- ]hour|once[- ]daily formulation|"
                                    r"sustained[- ]release|SR|CR|controlled[- ]release|long[- ]acting|LA)\b")),
    ("immediate-release", re.compile(r"\b(immediate[- ]release|IR|regular[- ]release)\b", re.I)),
]
_SETTINGS: list[tuple[str, re.Pattern[str]]] = [
    ("over-the-counter", re.compile(r"\b(?i:over[- ]the[- ]counter|nonprescription|non-prescription)\b|\b(?:OTC|IB)\b")),
    ("prescription", re.compile(r"\b(prescription(?:[- ]strength)?|Rx)\b", re.I)),
]
_CARE: list[tuple[str, re.Pattern[str]]] = [
    ("outpatient", re.compile(r"\boutpatients?\b", re.I)),
    ("inpatient", re.compile(r"\b(inpatients?|hospitali[sz]ed)\b", re.I)),
]


@dataclass(slots=True)
class Qualifiers:
    population: str = "adult"
    route: str | None = None
    formulation: str | None = None        # extended-release | immediate-release (XL/SR kept in `suffix`)
    suffix: str | None = None             # the exact formulation word: XL, SR, XR, ER, CR
    setting: str | None = None            # over-the-counter | prescription
    care: str | None = None               # outpatient | inpatient
    conditions: list[Mention] = field(default_factory=list)   # conditions named for the statement
    indication: str = ""                  # the indication a brand name implies ("Revatio": PAH)
    coadministered: list[Mention] = field(default_factory=list)   # other drugs the statement is made with
    weight_kg: float | None = None        # the patient's body weight (statement, else the question)
    any_weight: bool = False              # "regardless of body weight": the claim denies a weight band
    text: str = ""                        # the words the qualifiers were read from

    def describe(self) -> str:
        parts = [self.population]
        parts += [p for p in (self.formulation, self.setting, self.route, self.care) if p]
        parts += [m.text for m in self.conditions]
        if self.weight_kg is not None:
            parts.append(f"body weight {self.weight_kg:g} kg")
        return ", ".join(parts)


# "95 kg", "a 60-kg patient", "weighs 70 kilograms", "over 85 kg" (never the "kg" of "mg/kg")
_WEIGHT = re.compile(r"(?<![/\w.])(?:(?P<op>over|above|more than|heavier than|greater than|under|below|less than|"
                     r"lighter than|up to|at most)\s+)?(?P<value>\d{2,3}(?:\.\d+)?)\s?-?(?:kg|kilo(?:gram)?s?)\b(?!\s*/)",
                     re.I)
_ANY_WEIGHT = re.compile(r"\b(?:regardless of|irrespective of|independent of|whatever|no matter)\s+(?:the\s+|"
                         r"(?:his|her|their|your|a|the patient's)\s+)?(?:body\s*)?weight\b|\b(?:at|for) (?:any|all|every) "
                         r"(?:body\s*)?weights?\b|\bnot (?:adjusted|based) (?:for|on) (?:body\s*)?weight\b", re.I)


def stated_weight(text: str) -> float | None:
    """A body weight in kg stated in `text`; a bound ("over 85 kg") becomes a weight just past it."""
    match = _WEIGHT.search(text)
    if match is None:
        return None
    value = float(match.group("value"))
    op = (match.group("op") or "").casefold()
    if op in ("over", "above", "more than", "heavier than", "greater than"):
        return value + 0.01
    if op in ("under", "below", "less than", "lighter than"):
        return value - 0.01
    return value


def weight_band(fact: Fact) -> tuple[float, float] | None:
    """The body-weight range a fact applies to, from its `body_weight` qualifier ("up to 85 kg", "over 85 kg",
    "50 kg and over", "under 50 kg"), or None for a fact without one."""
    band = str(fact.qualifiers.get("body_weight") or "").casefold()
    number = re.search(r"\d+(?:\.\d+)?", band)
    if not band or number is None:
        return None
    value = float(number.group())
    if re.search(r"\b(?:over|above|more than)\b|and over|or more", band):
        return (value + (0.0 if "and over" in band or "or more" in band else 0.001), float("inf"))
    return (0.0, value if re.search(r"\bup to\b|or less|at most", band) else value - 0.001)


_NAME_MODIFIER = re.compile(r"^(?:[-\s]?(?:XR|ER|XL|SR|CR|LA|IR|OTC|IB|ODT)\b|\s+(?:extended|immediate|sustained|delayed|"
                            r"controlled)[- ]release\b|\s+(?:OTC|IB)\b)")


def drug_name_text(doc: Document, drug: Mention) -> str:
    """The drug's name as written, with a formulation or OTC modifier right after it ("Glucotrol XL",
    "glipizide extended-release", "Prilosec OTC"), for it and for a drug in parentheses with it."""
    names = [drug] + [m for m in _partners(doc, drug)]
    out = []
    for name in names:
        if name.in_prompt:
            continue
        modifier = _NAME_MODIFIER.match(doc.text[name.end:name.end + 30])
        out.append(doc.text[name.start:name.end] + (modifier.group(0) if modifier else ""))
    return " ".join(out)


def _partners(doc: Document, drug: Mention) -> list[Mention]:
    return list(_parenthetical_partners(doc).get((drug.start, drug.end), ()))


def _local_clause(doc: Document, position: int) -> str:
    """The value's clause up to the value, plus what follows it up to the next comma or semicolon:
    "100 mg once daily, with lower doses for reduced kidney function" qualifies the lower doses, not 100 mg."""
    clause = doc.clause_of(position)
    rest = doc.text[position:clause[1]]
    cut = re.search(r"[,;]\s", rest)
    return doc.text[clause[0]:position + (cut.start() if cut else len(rest))]


def scope_text(doc: Document, position: int, drug: Mention | None) -> str:
    """The words that qualify a value at `position`: its clause, its drug's name, its structure."""
    seg = doc.segment_of(position)
    parts = [_local_clause(doc, position)]
    if drug is not None:
        parts.append(drug_name_text(doc, drug))
    if seg.label is not None:
        parts.append(doc.text[seg.label[0]:seg.label[1]])
    if seg.cells:
        own = seg.cell_at(position)
        parts += [c.text for c in seg.cells if c is not own]
        if own is not None:
            parts.append(own.header)
    if seg.heading:
        parts.append(seg.heading)
    return " | ".join(parts)


def qualifiers_at(doc: Document, position: int, drug: Mention | None) -> Qualifiers:
    text = scope_text(doc, position, drug)
    found = Qualifiers(text=text)
    found.population = next((name for name, pattern in _POPULATIONS if pattern.search(text)), None) or (
        "pediatric" if doc.prompt and _POPULATIONS[0][1].search(doc.prompt) else "adult")
    if found.population == "pediatric" and re.search(r"\badults?\b", text, re.I):
        found.population = "adult"     # "adults and children 6 and older": the adult dose is stated
    found.route = next((name for name, pattern in _ROUTES if pattern.search(text)), None)
    found.formulation = next((name for name, pattern in _FORMULATIONS if pattern.search(text)), None)
    suffix = re.search(r"\b(XR|ER|XL|SR|CR|LA|IR)\b", text)
    found.suffix = suffix.group(1) if suffix else None
    found.setting = next((name for name, pattern in _SETTINGS if pattern.search(text)), None)
    found.care = next((name for name, pattern in _CARE if pattern.search(text)), None)
    found.conditions = _conditions_in_scope(doc, position)
    if not found.conditions and drug is not None and not drug.in_prompt and \
            doc.segment_of(drug.start).start != doc.segment_of(position).start:
        # "For heart failure, carvedilol is started at ... The maximum is ...": the drug's own clause says
        # what it is given for when the value's sentence does not
        found.conditions = _conditions_in_scope(doc, drug.start)
    found.weight_kg = stated_weight(text)
    if found.weight_kg is None and doc.prompt:
        found.weight_kg = stated_weight(doc.prompt)
    found.any_weight = bool(_ANY_WEIGHT.search(text))
    if drug is not None:
        own = set(drug_ids(doc, drug))
        local = doc.clause_of(position)
        found.coadministered = [m for m in doc.mentions(["drug"]) if local[0] <= m.start and m.end <= local[1]
                                and not m.in_prompt and is_labelled(doc, m) and not set(drug_ids(doc, m)) & own]
    brand = brand_fact(doc, drug) if drug is not None else None
    if brand is not None:
        # what the brand name says about the product, unless the sentence says otherwise
        implied = brand.qualifiers
        formulation = str(implied.get("formulation") or "")
        if formulation and found.formulation is None:
            found.formulation = "immediate-release" if "immediate" in formulation else "extended-release"
            suffix = re.search(r"\((XL|SR|XR|ER)\)", formulation)
            found.suffix = found.suffix or (suffix.group(1) if suffix else None)
        found.setting = found.setting or implied.get("setting")
        found.indication = str(implied.get("indication") or "")
    return found


def brand_fact(doc: Document, drug: Mention) -> Fact | None:
    """The curated brand the drug is named by ("Toprol-XL", "Prilosec OTC", "Concerta"), if any."""
    if doc.kg is None:
        return None
    written = re.sub(r"[^a-z0-9]+", " ", drug_name_text(doc, drug).casefold()).split()
    best: Fact | None = None
    for fact in facts_of(doc, labelled_drug_ids(doc, drug), "has_brand"):
        name = re.sub(r"[^a-z0-9]+", " ", str(fact.value).casefold()).split()
        for start in range(len(written)):
            if written[start:start + len(name)] == name and (best is None or len(name) > len(str(best.value).split())):
                best = fact
    return best


def _conditions_in_scope(doc: Document, position: int) -> list[Mention]:
    seg = doc.segment_of(position)
    clause = doc.clause_of(position)
    spans = [clause]
    if seg.label is not None:
        spans.append(seg.label)
    own = seg.cell_at(position) if seg.cells else None
    spans += [(c.start, c.end) for c in seg.cells if c is not own]
    found = [m for m in doc.mentions(["condition"]) if any(s <= m.start and m.end <= e for s, e in spans)]
    if not found and seg.heading:
        found = [m for m in doc.mentions(["condition"])
                 if m.end <= seg.start and doc.text[m.start:m.end] in seg.heading
                 and doc.segment_of(m.start).text.rstrip().endswith(":")]
    return found


# -- negation (the shared polarity rules, `rules.extraction.polarity`) -------------------------------------
def negated_between(doc: Document, start: int, end: int) -> bool:
    return polarity.negated_between(doc.text, start, end)
