"""`finance.list_membership`: a country on (or off) the FATF call-for-action ("black") list, the FATF
increased-monitoring ("grey") list or the EU high-risk third-country list, against dated snapshots.

Each country is paired with the list named in its own clause (a list after "rather than" / "not" is a
denial: "Laos is on the grey list rather than the black list"), else in its row or line ("Turkey: on the
grey list", "| Panama | Grey list |"), else with the list an "it" / "the list" refers to (the nearest list
named before, the list heading, the question). The claim's date is its clause's, else its column
header's or heading's, else the question's; the snapshot in force at that date judges it.

Changes are claims about two snapshots: "added (to the grey list) in 2023" needs a snapshot published in
that period or in the stale window after it to list the country (an older or much later one says nothing of
it); "taken off in June 2025" needs the snapshot at that date not to list it and the one before to list it;
"remained" / "still" need the snapshot at the date to list it. A date no
snapshot covers is unverifiable (the evidence names the snapshots held).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, timedelta
from typing import Any

from rules.claims import Document, Segment
from rules.extraction.dates import DateMention, find_dates
from rules.mentions import Mention
from rules.report import Evidence
from rules.validators.base import Finding, kg_evidence, validator

DEFAULT_LIST_PATTERNS: dict[str, list[str]] = {
    "list:fatf_call_for_action": [r"black\s?-?list(?:ed)?", r"call (?:for|to) action", r"high[- ]risk jurisdictions subject"],
    "list:fatf_increased_monitoring": [r"gr[ae]y\s?-?list(?:ed)?", r"increased monitoring"],
    "list:eu_high_risk_third_countries": [r"\bEU\b[^.;|]{0,40}high[- ]risk", r"high[- ]risk third[- ]countr",
                                          r"2016/1675", r"European Commission'?s?[^.;]{0,30}list"],
}
_NEGATION = re.compile(r"\b(?:not|no longer|never|isn't|aren't|wasn't|weren't|neither|nor|rather than|instead of|"
                       r"off|removed|delisted|exited)\b|n't\b", re.I)
_REFERENCE = re.compile(r"\b(?:on|off|from|in|of|to)\s+(?:it|them|that list|the list|this list|the same list)\b|"
                        r"\bthe list\b|\bstill there\b", re.I)
_ADDED = re.compile(r"\b(?:added|moved onto|moved to|placed on|put on|grey-listed|greylisted|gray-listed|blacklisted|"
                    r"black-listed|listed)\b(?:[^.;]{0,40})\b(?:in|on|at|since)\s*$", re.I)
_REMOVED = re.compile(r"\b(?:removed|taken off|delisted|exited|came off|dropped)\b", re.I)

@dataclass(frozen=True, slots=True)
class _ListMention:
    start: int
    end: int
    list_id: str


def _list_mentions(doc: Document, params: Mapping[str, Any]) -> list[_ListMention]:
    if "list_mentions" not in doc.cache:
        patterns = {list_id: [re.compile(p, re.I) for p in ps]
                    for list_id, ps in (params.get("list_patterns") or DEFAULT_LIST_PATTERNS).items()}
        found = [_ListMention(m.start(), m.end(), list_id) for list_id, ps in patterns.items() for p in ps
                 for m in p.finditer(doc.text)]
        found += [_ListMention(m.start, m.end, m.entity_ids[0]) for m in doc.mentions(["risk_list"]) if not m.in_prompt]
        found.sort(key=lambda m: m.start)
        deduped: list[_ListMention] = []
        for mention in found:
            if deduped and mention.start < deduped[-1].end:
                continue
            deduped.append(mention)
        doc.cache["list_mentions"] = deduped
    return doc.cache["list_mentions"]


def _prompt_list(doc: Document, params: Mapping[str, Any]) -> str | None:
    if not doc.prompt:
        return None
    for list_id, ps in (params.get("list_patterns") or DEFAULT_LIST_PATTERNS).items():
        if any(re.search(p, doc.prompt, re.I) for p in ps):
            return list_id
    return None


@validator("finance.list_membership")
def list_membership(doc: Document, params: Mapping[str, Any]) -> list[Finding]:
    """"X is on the FATF black list": membership in the dated snapshot that applies to the claim's date."""
    if doc.kg is None:
        return []
    stale_days = int(params.get("stale_after_days", 180))
    lists = _list_mentions(doc, params)
    if not lists and not _prompt_list(doc, params):
        return []
    findings: list[Finding] = []
    countries = [m for m in doc.mentions(["country"]) if not m.in_prompt]
    countries += _referred_countries(doc, lists, countries)
    for country in countries:
        seg = doc.segment_of(country.start)
        clause = doc.clause_of(country.start)
        for list_id, negated in _lists_for(doc, params, seg, clause, country, lists):
            when = _claim_date(doc, seg, clause, country)
            findings.append(_judge(doc, country, list_id, negated, when, clause, stale_days))
    return findings


def _referred_countries(doc: Document, lists: list[_ListMention], named: list[Mention]) -> list[Mention]:
    """"It was still on the FATF list ...", "as of mid-2025 it's still there": a clause about a list whose
    country is a pronoun; the country is its antecedent, the claim spans the pronoun."""
    out: list[Mention] = []
    for seg in doc.segments:
        for clause in doc.clauses(seg):
            text = doc.text[clause[0]:clause[1]]
            pronoun = re.search(r"\b(?:it|it's)\b", text, re.I)
            if not pronoun or any(clause[0] <= m.start < clause[1] for m in named):
                continue
            if not (any(clause[0] <= m.start < clause[1] for m in lists) or _REFERENCE.search(text)):
                continue
            country = doc.antecedent(clause[0], ["country"], accept=lambda m, at=clause[0]: m.end <= at)
            if country is None or country.in_prompt:
                continue
            start = clause[0] + pronoun.start()
            out.append(Mention(start, clause[0] + pronoun.end(), doc.text[start:clause[0] + pronoun.end()],
                               country.entity_ids, "country"))
    return out


def _lists_for(doc: Document, params: Mapping[str, Any], seg: Segment, clause: tuple[int, int], country: Mention,
               lists: list[_ListMention]) -> list[tuple[str, bool]]:
    """The lists a country is said to be on (False) or off (True)."""
    spans = [clause]
    if seg.label is not None:
        spans.append((seg.start, seg.end))
    if seg.cells:
        spans.append((seg.start, seg.end))
    named = [m for m in lists if any(s <= m.start < e for s, e in spans)]
    out: list[tuple[str, bool]] = []
    for mention in named:
        if mention.start < country.start and clause[0] <= mention.start and seg.label is None:
            # "the list covers Iran, North Korea ...": the list before the country, polarity around it
            between = doc.text[mention.end:country.start]
            negated = bool(re.search(r"\b(?:not|no longer|isn't|aren't)\b", between)) or bool(
                re.match(r"[^.;]{0,30}\b(?:is not|isn't|are not|aren't|was not|wasn't)\b", doc.text[country.end:clause[1]]))
        else:
            lo, hi = sorted((country.end, mention.start))
            between = doc.text[lo:hi]
            negated = bool(_NEGATION.search(between)) or bool(re.search(r"\b(?:not|isn't)\s+on\b", doc.text[country.end:mention.start]))
        out.append((mention.list_id, negated))
    if out:
        return list(dict.fromkeys(out))
    rest = doc.text[country.end:clause[1]] + (doc.text[seg.label[1]:seg.end] if seg.label else "")
    if re.match(r"^\W*(?:is|are|was)(?:\s+not|n't)?(?:\s+either|\s+too|\s+as well)?\W*$", rest):
        # "..., but Germany is not": the list of the clause before, denied (or repeated: "Kenya is too")
        earlier = [m for m in lists if seg.start <= m.start < clause[0]]
        if earlier:
            return [(earlier[-1].list_id, bool(re.search(r"\bnot\b|n't", rest)))]
    if _REFERENCE.search(doc.text[clause[0]:clause[1]]) or (seg.label and _REFERENCE.search(rest)):
        referent = [m for m in lists if m.end <= clause[0]]
        list_id = referent[-1].list_id if referent else _prompt_list(doc, params)
        if list_id:
            negated = bool(re.search(r"\b(?:not|no longer|isn't|aren't|off)\b", rest if seg.label else doc.text[clause[0]:clause[1]]))
            return [(list_id, negated)]
    return []


def _claim_date(doc: Document, seg: Segment, clause: tuple[int, int], country: Mention) -> DateMention | None:
    """The date the claim is about: its clause's (a parenthetical aside aside), its segment's, its column
    header's or list heading's, the question's."""
    for text in (_unbracketed(doc.text[clause[0]:clause[1]]), _unbracketed(seg.text),
                 " | ".join(c.header for c in seg.cells) + " " + seg.heading, doc.prompt or ""):
        dates = find_dates(text)
        if dates:
            return dates[-1]
    return None


def _unbracketed(text: str) -> str:
    """Parenthetical asides blanked out, offsets kept ("UAE: not on it (removed in February 2024)")."""
    return re.sub(r"\([^()]*\)", lambda m: " " * len(m.group(0)), text)


def list_snapshots(doc: Document, list_id: str) -> dict[str, set[str]]:
    """as_of date -> countries listed in that snapshot (cached per document)."""
    assert doc.kg is not None
    cache_key = f"snapshots:{list_id}"
    if cache_key not in doc.cache:
        snapshots: dict[str, set[str]] = {}
        for fact in doc.kg.facts(relation="listed_on", object=list_id):
            snapshots.setdefault(str(fact.qualifiers.get("as_of", "")), set()).add(fact.subject)
        doc.cache[cache_key] = snapshots
    return doc.cache[cache_key]


def _claim_span(doc: Document, country: Mention, clause: tuple[int, int]) -> tuple[int, int]:
    """The country alone when its clause names several ("covers Iran, North Korea and Myanmar"); else the
    country with what the clause says about it ("Croatia ... was taken off the list in June 2025")."""
    others = [m for m in doc.mentions(["country"]) if clause[0] <= m.start < clause[1] and m.start != country.start]
    if others:
        return country.start, country.end
    end = clause[1]
    while end > country.end and doc.text[end - 1] in " .;,":
        end -= 1
    return country.start, end


def _end_of(when: DateMention) -> str:
    import calendar

    if when.precision == "decade":
        return f"{when.year + 9}-12-31"
    month = when.month or 12
    day = when.day or calendar.monthrange(when.year, month)[1]
    return f"{when.year:04d}-{month:02d}-{day:02d}"


def _start_of(when: DateMention) -> str:
    return f"{when.year:04d}-{(when.month or 1):02d}-{(when.day or 1):02d}"


def _judge(doc: Document, country: Mention, list_id: str, negated: bool, when: DateMention | None,
           clause: tuple[int, int], stale_days: int) -> Finding:
    assert doc.kg is not None
    country_id = next((i for i in country.entity_ids if i.startswith("country:")), country.entity_ids[0])
    span = _claim_span(doc, country, clause)
    text = doc.text[span[0]:span[1]]
    snapshots = list_snapshots(doc, list_id)
    list_entity = doc.kg.entity(list_id)
    list_name = list_entity.name if list_entity else list_id
    held = sorted(d for d in snapshots if d)
    clause_text = _unbracketed(doc.text[clause[0]:clause[1]])
    before_country = clause_text[:country.start - clause[0]]
    after_country = clause_text[country.end - clause[0]:]

    def finding(verdict: str, confidence: float, evidence: list[Evidence]) -> Finding:
        return Finding(text, span, "list_membership", verdict, confidence, evidence, subject=country_id,  # type: ignore[arg-type]
                       meta={"list": list_id})

    def snapshot_evidence(as_of: str, listed: bool) -> Evidence:
        fact = next((f for f in doc.kg.facts(country_id, "listed_on", list_id) if str(f.qualifiers.get("as_of")) == as_of), None)  # type: ignore[union-attr]
        provenance = fact.provenance if fact else (list_entity.provenance if list_entity else None)
        item = kg_evidence(f"{country.text} is {'on' if listed else 'not on'} {list_name} in the snapshot as of {as_of}",
                           provenance, kind="list_snapshot")
        item.as_of = as_of
        return item

    if not held:
        return finding("unverifiable", 0.5, [Evidence(kind="list_snapshot", description=f"{list_name}: no snapshot held")])
    change_added = _ADDED.search(clause_text[:clause_text.find(str(when.year))]) if when and str(when.year) in clause_text else None
    if when is not None and change_added and not negated:
        # Only snapshots published in the period or soon after it speak to an addition then: a later one may
        # list a country added since, an earlier one predates the change.
        horizon = (date.fromisoformat(_end_of(when)) + timedelta(days=stale_days)).isoformat()
        window = [d for d in held if _start_of(when) <= d <= horizon]
        if not window:
            return finding("unverifiable", 0.5, [Evidence(kind="list_snapshot", description=f"{list_name}: no snapshot "
                                                          f"published in or soon after {when.describe()} (held: {', '.join(held)})")])
        listing = next((d for d in window if country_id in snapshots[d]), None)
        shown = listing or window[-1]
        return finding("supported" if listing else "contradicted", 0.85 if listing else 0.8, [snapshot_evidence(shown, bool(listing)),
                       Evidence(kind="rule", description=f"a country added in {when.describe()} is on a snapshot published "
                                "then or within the following months")])
    if when is not None and _REMOVED.search(before_country + after_country):
        at = [d for d in held if d <= _end_of(when)]
        earlier = [d for d in held if d < _start_of(when)]
        if not at or not earlier:
            return finding("unverifiable", 0.5, [Evidence(kind="list_snapshot", description=f"{list_name}: no snapshots "
                                                          f"on both sides of {when.describe()} (held: {', '.join(held)})")])
        removed = country_id in snapshots[earlier[-1]] and country_id not in snapshots[at[-1]]
        return finding("supported" if removed else "contradicted", 0.85, [snapshot_evidence(earlier[-1], country_id in snapshots[earlier[-1]]),
                                                                           snapshot_evidence(at[-1], country_id in snapshots[at[-1]])])
    usable = [d for d in held if when is None or d <= _end_of(when)]
    if not usable:
        return finding("unverifiable", 0.5, [Evidence(kind="list_snapshot", description=f"{list_name}: no snapshot on or "
                                                      f"before {when.describe() if when else '?'} (held: {', '.join(held)})")])
    as_of = usable[-1]
    listed = country_id in snapshots[as_of]
    evidence = [snapshot_evidence(as_of, listed)]
    confidence = 0.95
    if when is not None and (date.fromisoformat(_end_of(when)) - date.fromisoformat(as_of)).days > stale_days:
        evidence.append(Evidence(kind="list_snapshot", description=f"the claim refers to {when.describe()}, later than "
                                 f"the newest snapshot ({as_of}); the list may have changed"))
        confidence = 0.7
    verdict = "supported" if listed != negated else "contradicted"
    return finding(verdict, confidence, evidence)
