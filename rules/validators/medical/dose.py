"""`medical.dose`: stated doses against the labelled maxima of the drug they are about.

Each amount with a unit ("80 mg a day", "eighty milligrams", "4 g in 24 hours", "10 to 40 mg", "two
500 mg tablets three times") is paired with its drug by the nearest-compatible-antecedent search, and
with the qualifiers that select the label's fact: population, route, formulation, OTC or prescription,
in- or outpatient, and the condition it is given for. Facts are filtered by those qualifiers; when the
statement names a qualifier the KG has no fact for ("Prilosec OTC", "for panic disorder" where only a
GAD maximum is curated), the verdict is unverifiable and the evidence says which fact is missing.

- A stated maximum (a cue before or after the amount, a "Max" column or a "maximums:" list heading)
  equal to a selected maximum is supported; different from every selected one, contradicted.
- A regimen (an amount with a frequency) whose daily total exceeds the largest selected maximum is
  contradicted; equal to a selected maximum, supported; below it, unverifiable: the label's maximum
  does not confirm a usual or starting dose.
- An amount with no frequency above the daily maximum is contradicted; otherwise unverifiable.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from knowledge_graphs.model import Fact
from rules.claims import Document, Segment
from rules.extraction.numbers import numeric_view
from rules.mentions import Mention
from rules.report import Evidence
from rules.units import Dose, find_doses, to_base
from rules.validators.base import Finding, kg_evidence, validator
from rules.validators.medical.context import (
    Qualifiers,
    drug_for,
    facts_of,
    labelled_drug_ids,
    qualifiers_at,
    weight_band,
)

_MAX_HEADER = re.compile(r"\b(max(?:imum|imums)?|ceiling|limit|highest)\b", re.I)
# an amount that is the subject of a comparison ("3,650 mg, which is above the daily limit") is judged by
# the comparison rule, not as a dose
_COMPARED_AFTER = re.compile(r"^[^.;,]{0,25}?(?:,\s*which\s+)?\b(?:is|are|would be|was|be|'s)\s+(?:\w+\s+){0,2}?"
                             r"(?P<op>above|over|under|below|more than|less than|higher than|lower than|within|past|beyond|"
                             r"greater than)\b(?P<rest>[^.;]{0,60})", re.I)
_ABOVE = ("above", "over", "more than", "higher than", "past", "beyond", "greater than")


def doses_in(doc: Document, seg: Segment) -> list[Dose]:
    """The doses of a segment in document offsets (numbers in words read through the numeric view)."""
    view = numeric_view(seg.text)
    out = []
    for amount in find_doses(view.text):
        start, end = view.span(amount.start, amount.end)
        out.append(replace(amount, start=seg.start + start, end=seg.start + end))
    return out


@validator("medical.dose")
def dose(doc: Document, params: Mapping[str, Any]) -> list[Finding]:
    """Stated doses against the KG's max_daily_dose / max_single_dose for the qualifiers that select them."""
    if doc.kg is None:
        return []
    tolerance = float(params.get("tolerance", 0.0))
    findings: list[Finding] = []
    for seg in doc.segments:
        for amount in doses_in(doc, seg):
            compared = _COMPARED_AFTER.match(doc.text[amount.end:amount.end + 100])
            if compared:
                drug = drug_for(doc, amount.start)
                if drug is not None:
                    findings.append(_judge_comparison(doc, drug, amount, compared))
                continue
            drug = drug_for(doc, amount.start)
            if drug is None:
                continue
            stated_max = amount.is_maximum or _max_by_structure(seg, amount.start)
            qualifiers = qualifiers_at(doc, amount.start, drug)
            judged = _judge(doc, drug, replace(amount, is_maximum=stated_max), qualifiers, tolerance)
            partner = _co_medication(doc, amount.start, drug)
            if judged.verdict == "contradicted" and partner is not None:
                judged = replace(judged, verdict="unverifiable", confidence=0.5, evidence=[Evidence(
                    kind="rule", description=f"unverifiable: the dose is stated for use with {partner.text}; labels set "
                    "lower limits with some co-medications, which the KG does not hold"), *judged.evidence])
            findings.append(judged)
    return findings


# "Do not exceed 20 mg daily with amlodipine", "limit to 5 mg when taken with cyclosporine": a limit for a combination
_WITH_PARTNER = re.compile(r"\b(?:with|alongside|plus|combined with|together with|when taking|if taking|on)\s+(?:\w+\s+){0,2}$",
                           re.I)


def _co_medication(doc: Document, position: int, drug: Mention) -> Mention | None:
    """Another drug named with "with ..." in the dose's clause: the dose may be that combination's own limit."""
    clause = doc.clause_of(position)
    for other in doc.mentions(["drug"]):
        if other.in_prompt or not (clause[0] <= other.start < clause[1]) or set(other.entity_ids) & set(drug.entity_ids):
            continue
        if _WITH_PARTNER.search(doc.text[max(clause[0], other.start - 30):other.start]):
            return other
    return None


def _judge_comparison(doc: Document, drug: Mention, amount: Dose, compared: re.Match[str]) -> Finding:
    """"3,650 mg, which is above the daily limit", "two 10 mg tablets would be over the limit", "300 mg is well
    under its 800 mg daily maximum": the amount against the stated reference, else the selected maximum."""
    op = compared.group("op").casefold()
    rest = compared.group("rest")
    end = amount.end + compared.end()
    span = (amount.start, end - (len(rest) - len(rest.rstrip(" ,")) if rest else 0))
    stated = amount.daily_amount if amount.daily_amount is not None else amount.in_base_unit() * amount.count
    reference = [d for d in find_doses(numeric_view(rest).text) if d.start < 12]
    ids = labelled_drug_ids(doc, drug)
    if reference:
        limit = reference[0].in_base_unit()
        why = f"{stated:g} mg against the stated {limit:g} mg"
        evidence = [Evidence(kind="rule", description=f"comparison: {why}")]
    else:
        qualifiers = qualifiers_at(doc, amount.start, drug)
        qualifiers.conditions = qualifiers.conditions or [m for m in doc.mentions(["condition"])
                                                          if amount.end <= m.start < end]
        daily, missing = select(facts_of(doc, ids, "max_daily_dose"), qualifiers, amount.family)
        if not daily:
            return Finding(doc.text[span[0]:span[1]], span, "dose", "unverifiable", 0.5,
                           [_missing(drug, qualifiers, missing)], subject=ids[0])
        fact = max(daily, key=_base)
        limit = _base(fact)
        evidence = [kg_evidence(f"{drug.text}: maximum daily dose {fact.value:g} {fact.unit} ({_describe_qualifiers(fact)})",
                                fact.provenance), Evidence(kind="rule", description=f"comparison: {stated:g} mg against "
                                                           f"the labelled {limit:g} mg")]
    above = stated > limit * 1.0001
    holds = above if op in _ABOVE else not above
    return Finding(doc.text[span[0]:span[1]], span, "dose", "supported" if holds else "contradicted", 0.85, evidence,
                   subject=ids[0])


def _max_by_structure(seg: Segment, position: int) -> bool:
    """A "Max daily dose" column or a "Labeled adult maximums:" heading makes a bare amount a maximum."""
    cell = seg.cell_at(position) if seg.cells else None
    if cell is not None and _MAX_HEADER.search(cell.header):
        return True
    return seg.kind in ("item", "row", "line") and bool(_MAX_HEADER.search(seg.heading))


def _claim_span(doc: Document, amount: Dose) -> tuple[int, int]:
    return amount.start, amount.end


def _only_for_unnamed_indication(matches: list[Fact], daily: list[Fact], qualifiers: Qualifiers) -> bool:
    """"Adults can take up to 40 mg of tadalafil": 40 mg is the PAH maximum (another product's label), the ED
    maximum is 20 mg, and the text names no indication: equal to one reading is no support."""
    if qualifiers.conditions or qualifiers.indication:
        return False
    main = _label_name(daily[0]) if len({_label_name(f) for f in daily}) == 1 else _most_common_label(daily)
    others = [f for f in daily if f not in matches]
    return bool(others) and all(f.qualifiers.get("indication") and _label_name(f) != main for f in matches)


def _weight_dependent(daily: list[Fact], matches: list[Fact]) -> bool:
    """The selected maxima differ by body weight band (so one band's value is not the label's answer)."""
    banded = [f for f in daily if weight_band(f) is not None]
    return len({_base(f) for f in banded}) > 1 and bool(matches or banded)


def _label_name(fact: Fact) -> str:
    """The product label a fact was read from (its locator before the section)."""
    return str(fact.provenance.locator if fact.provenance else "").split(", section")[0]


def _most_common_label(facts: list[Fact]) -> str:
    names = [_label_name(f) for f in facts]
    # over the list, not a set: a tie goes to the label listed first (the drug's own), the same in every
    # process (a set's order of strings changes with PYTHONHASHSEED)
    return max(names, key=names.count)


def _judge(doc: Document, drug: Mention, amount: Dose, qualifiers: Qualifiers, tolerance: float) -> Finding:
    span = _claim_span(doc, amount)
    text = doc.text[span[0]:span[1]]
    ids = labelled_drug_ids(doc, drug)
    subject = ids[0]
    daily, daily_missing = select(facts_of(doc, ids, "max_daily_dose"), qualifiers, amount.family)
    single, _ = select(facts_of(doc, ids, "max_single_dose"), qualifiers, amount.family)

    def finding(verdict: str, confidence: float, evidence: list[Evidence], assertion: Any = None) -> Finding:
        return Finding(text, span, "dose", verdict, confidence, evidence, subject=subject,  # type: ignore[arg-type]
                       assertion=assertion)

    def describe(fact: Fact, what: str) -> Evidence:
        return kg_evidence(f"{drug.text}: {what} {fact.value:g} {fact.unit} ({_describe_qualifiers(fact)})",
                           fact.provenance)

    stated = amount.in_base_unit() * amount.count
    if not daily and not single:
        return finding("unverifiable", 0.5, [_missing(drug, qualifiers, daily_missing)])
    if amount.is_maximum and amount.per != "dose":
        if not daily:
            return finding("unverifiable", 0.5, [_missing(drug, qualifiers, daily_missing)])
        per_day = amount.daily_amount if amount.daily_amount is not None else stated
        assertion = (subject, f"max_daily_dose:{qualifiers.population}", per_day)
        matches = [f for f in daily if _close(_base(f), per_day, 0.01)]
        banded = _weight_dependent(daily, matches)
        if banded and (qualifiers.any_weight or qualifiers.weight_kg is None):
            # the label's maximum depends on body weight: "regardless of weight" denies it, and a match with one
            # band's maximum, the weight unstated, confirms nothing
            bands = [describe(f, "maximum daily dose") for f in daily]
            if qualifiers.any_weight:
                return finding("contradicted", 0.85, [*bands, Evidence(kind="rule", description="the text says the "
                               "maximum does not depend on body weight; the label's maximum differs by body weight")],
                               assertion)
            return finding("unverifiable", 0.5, [*bands, Evidence(kind="rule", description="the label's maximum "
                           "differs by body weight and neither the text nor the question states the patient's weight")],
                           assertion)
        if matches and _only_for_unnamed_indication(matches, daily, qualifiers):
            return finding("unverifiable", 0.5, [describe(f, "maximum daily dose") for f in daily] + [Evidence(
                kind="rule", description="the stated maximum is the label's for another indication than the drug's "
                "others, and the text names no indication")], assertion)
        if matches:
            return finding("supported", 0.95, [describe(matches[0], "maximum daily dose"), _why(qualifiers)], assertion)
        return finding("contradicted", 0.9, [*(describe(f, "maximum daily dose") for f in daily), _why(qualifiers),
                                             Evidence(kind="rule", description=f"stated maximum {per_day:g} "
                                                      f"{_base_unit(amount)}/day matches no labelled maximum")],
                       assertion)
    if amount.is_maximum:
        if not single:
            return finding("unverifiable", 0.5, [_missing(drug, qualifiers, "max_single_dose")])
        matches = [f for f in single if _close(_base(f), stated, 0.01)]
        if matches:
            return finding("supported", 0.95, [describe(matches[0], "maximum single dose")])
        return finding("contradicted", 0.9, [describe(f, "maximum single dose") for f in single])
    # a regimen or an amount: judged against the largest selected maximum
    if daily:
        limit_fact = max(daily, key=_base)
        limit = _base(limit_fact) * (1 + tolerance)
        per_day = amount.daily_amount
        if per_day is not None:
            if per_day > limit and amount.mildest_daily is not None and amount.mildest_daily <= limit:
                # Directions given as ranges are capped separately on labels ("do not exceed 6 tablets in 24 hours"):
                # only their mildest reading exceeding the maximum contradicts it.
                return finding("unverifiable", 0.5, [describe(limit_fact, "maximum daily dose"), Evidence(
                    kind="rule", description=f"directions given as ranges: {amount.mildest_daily:g} to {per_day:g} "
                    f"{_base_unit(amount)}/day; labels cap such directions separately, so only the daily cap stated "
                    "with them can be judged")])
            if per_day > limit:
                return finding("contradicted", 0.9, [describe(limit_fact, "maximum daily dose"), Evidence(
                    kind="rule", description=f"stated regimen is {per_day:g} {_base_unit(amount)}/day")])
            equal = [f for f in daily if _close(_base(f), per_day, 0.01)]
            if equal:
                return finding("supported", 0.85, [describe(equal[0], "maximum daily dose"), Evidence(
                    kind="rule", description=f"stated regimen is {per_day:g} {_base_unit(amount)}/day, the labelled maximum")])
            return finding("unverifiable", 0.5, [describe(limit_fact, "within maximum daily dose"), Evidence(
                kind="rule", description=f"stated regimen is {per_day:g} {_base_unit(amount)}/day, below the labelled "
                "maximum; the KG holds no usual or starting dose to confirm it")])
        if stated > limit:
            return finding("contradicted", 0.9, [describe(limit_fact, "an amount above the maximum daily dose")])
    if single:
        limit_fact = max(single, key=_base)
        if stated > _base(limit_fact) * (1 + tolerance):
            return finding("contradicted", 0.9, [describe(limit_fact, "maximum single dose")])
    return finding("unverifiable", 0.5, [Evidence(kind="rule", description="an amount without a frequency or a "
                                                  "maximum: the daily total cannot be computed")])


def select(facts: list[Fact], qualifiers: Qualifiers, family: str) -> tuple[list[Fact], str]:
    """The facts the statement's qualifiers select, and (when none) which qualifier found no fact."""
    pool = [f for f in facts if to_base(float(f.value), str(f.unit))[1] == family]
    if not pool:
        return [], "max_daily_dose"
    steps: list[tuple[str, Any]] = [
        ("population", lambda f: str(f.qualifiers.get("population", "adult")).startswith(qualifiers.population)),
        ("route", lambda f: qualifiers.route is None or _route_matches(f, qualifiers.route)),
        ("setting", lambda f: _setting_matches(f, qualifiers)),
        ("care", lambda f: qualifiers.care is None or f.qualifiers.get("setting") in (None, qualifiers.care)),
        ("formulation", lambda f: _formulation_matches(f, qualifiers)),
    ]
    for name, keep in steps:
        pool = [f for f in pool if keep(f)]
        if not pool:
            return [], name
    # a limit stated for use with another drug ("with amlodipine, no more than 20 mg") is its own fact
    if any(f.qualifiers.get("coadministered") for f in pool):
        names = {n for m in qualifiers.coadministered for n in _names(m)}
        if names:
            pool = [f for f in pool if str(f.qualifiers.get("coadministered", "")).casefold() in names]
            if not pool:
                return [], "coadministered drug"
        else:
            pool = [f for f in pool if not f.qualifiers.get("coadministered")]
    if qualifiers.indication and not qualifiers.conditions:
        implied = [f for f in pool if qualifiers.indication.casefold() in str(f.qualifiers.get("indication", "")).casefold()]
        pool = implied or pool
    if qualifiers.weight_kg is not None and any(weight_band(f) is not None for f in pool):
        weight = qualifiers.weight_kg
        pool = [f for f in pool if (band := weight_band(f)) is None or band[0] <= weight <= band[1]]
        if not pool:
            return [], "body weight"
    if qualifiers.conditions:
        named = [f for f in pool if _indication_matches(f, qualifiers.conditions)]
        unqualified = [f for f in pool if not f.qualifiers.get("indication")]
        if named:
            pool = named
        elif unqualified:
            pool = unqualified
        else:
            return [], "indication"
    return pool, ""


def _names(mention: Mention) -> set[str]:
    return {mention.text.casefold()}


def _route_matches(fact: Fact, route: str) -> bool:
    stated = str(fact.qualifiers.get("route") or "")
    note = str(fact.qualifiers.get("note") or "")
    if route == "oral":
        return stated in ("", "oral")
    return stated == route or ("inject" in note and route in ("subcutaneous", "intramuscular"))


def _setting_matches(fact: Fact, qualifiers: Qualifiers) -> bool:
    setting = fact.qualifiers.get("setting")
    if qualifiers.setting == "over-the-counter":
        return setting == "over-the-counter"
    if qualifiers.setting == "prescription":
        return setting in (None, "prescription", "outpatient", "inpatient")
    return True


_SUFFIX_FAMILY = {"XL": "xl", "XR": "er", "ER": "er", "SR": "sr", "CR": "er", "LA": "er", "IR": "ir"}


def _formulation_matches(fact: Fact, qualifiers: Qualifiers) -> bool:
    stated = str(fact.qualifiers.get("formulation") or "").casefold()
    if not stated or qualifiers.formulation is None:
        # a fact for every formulation applies; an unqualified statement may mean any formulation
        return True
    if qualifiers.formulation == "immediate-release":
        return "immediate" in stated
    if "immediate" in stated:
        return False
    # bupropion XL and SR have different maxima: when both the fact and the statement name one, they must agree
    fact_suffix = re.search(r"\((xl|sr|er|xr)\)", stated)
    if fact_suffix and qualifiers.suffix:
        return _SUFFIX_FAMILY.get(qualifiers.suffix, "") == {"xr": "er"}.get(fact_suffix.group(1), fact_suffix.group(1))
    return True


def _indication_matches(fact: Fact, conditions: list[Mention]) -> bool:
    indication = str(fact.qualifiers.get("indication") or "").casefold()
    if not indication:
        return False
    words = set(re.findall(r"[a-z0-9]+", indication))
    for mention in conditions:
        names = {mention.text.casefold(), *(i.split(":", 1)[1].replace("-", " ") for i in mention.entity_ids)}
        for name in names:
            tokens = set(re.findall(r"[a-z0-9]+", name)) - {"disorder", "disease", "the", "of"}
            if tokens and tokens <= words | _ABBREVIATIONS.get(name, set()):
                return True
            if name in indication:
                return True
    return False


_ABBREVIATIONS: dict[str, set[str]] = {}


def _describe_qualifiers(fact: Fact) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(fact.qualifiers.items()))


def _why(qualifiers: Qualifiers) -> Evidence:
    return Evidence(kind="rule", description=f"fact selected for: {qualifiers.describe()}")


def _missing(drug: Mention, qualifiers: Qualifiers, what: str) -> Evidence:
    if what in ("max_daily_dose", "max_single_dose", ""):
        description = f"no maximum dose for {drug.text} in the KG"
    else:
        description = (f"no maximum dose for {drug.text} with the stated {what} ({qualifiers.describe()}) in the KG; "
                       "a maximum for another qualifier is not evidence")
    return Evidence(kind="kg_fact", description=description)


def _base(fact: Fact) -> float:
    return to_base(float(fact.value), str(fact.unit))[0]


def _base_unit(amount: Dose) -> str:
    return "mg" if amount.family == "mass" else amount.unit


def _close(a: float, b: float, relative: float) -> bool:
    return abs(a - b) <= relative * max(abs(a), abs(b))
