"""`finance.codes`: ISO 4217 currency codes (alphabetic and numeric) and ISO 3166-1 country codes
(alpha-2, alpha-3, numeric) against pycountry and the curated currency data.

A code is read as a claim when the text says it is one: a cue in its clause, line label, table header or
list heading ("ISO 4217", "currency code", "numeric", "ISO 3166", "alpha-2", "three-letter codes"), a code
in parentheses after a currency ("the Qatari riyal (QRR)"), "<code> is <number>" / "<code>: <number>"
for numeric codes, or a "Country: AT / AUT / 040" line. Its subject is the currency or country named
nearest before it in its clause, else in its row or label, else earlier (coreference), else the question;
a country stands for the currency it uses ("Sweden | krona | SEK").

Verdicts: the subject's code supports; another code contradicts, with what the claimed code really is
(a withdrawn code and its replacement, another country's code, nothing at all); "X is not an ISO code"
holds when X is no code of that kind. A withdrawn code stated as current ("Current ISO 4217 code |
MRO") is contradicted; stated as former ("replacing the kroon, EEK") it is judged as the former code.
Euro adoption dates ("Croatia switched to the euro on 1 January 2023", "Slovakia ... in '09") are
checked against ISO 4217 List Three withdrawal dates.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

import pycountry

from rules.claims import Document, Segment
from rules.extraction.dates import find_dates
from rules.mentions import Mention
from rules.report import Evidence
from rules.validators.base import CitationCheck, Finding, kg_evidence, package_source, validator

_ALPHA3 = re.compile(r"(?<![\w-])([A-Z]{3})(?![\w-])")
_ALPHA2 = re.compile(r"(?<![\w.-])([A-Z]{2})(?![\w-])(?!\.\w)")
_NUMERIC = re.compile(r"(?<![\w.,$€£-])(\d{3})(?![\w%-]|[.,]\d)")
# capitals that are parts of names or other acronyms, never a code claimed for something
_NOT_CODES = frozenset({"ISO", "CFA", "CFP", "IBAN", "BIC", "UAE", "USA", "FATF", "AML", "CTR", "MSB", "MSBS", "LEI", "SWIFT",
                        "ISIN", "FIGI", "ABA", "OTC", "GCC", "EEA", "IMF", "ECB", "SEC", "IRS", "CMIR", "FBAR", "KYC", "CDD",
                        "EDD", "PEP", "BSA", "NYSE", "FIU", "FAQ", "NOT", "THE", "AND", "FOR", "GMT", "UTC", "LSE"})
_CURRENCY_CUE = re.compile(r"ISO[- ]?4217|currency code|currency|currencies|ISO code|coded", re.I)
_COUNTRY_CUE = re.compile(r"ISO[- ]?3166|alpha[- ]?[23]\b|two[- ]letter|three[- ]letter|[23][- ]letter|country codes?\b", re.I)
_NUMERIC_CUE = re.compile(r"\bnumeric\b|\bnumber\b", re.I)
_NEGATED = re.compile(r"\b(?:is not|isn't|are not|aren't|not an?)\b[^.;]{0,20}\b(?:ISO|code|currency|country)", re.I)
_HISTORIC = re.compile(r"\b(?:replac\w*|former(?:ly)?|old|previous(?:ly)?|used to|before|until|withdrawn|retired|"
                       r"switched from|from the)\b", re.I)
_CURRENT = re.compile(r"\b(?:current(?:ly)?|today|now|still|present)\b", re.I)
_SUBJECT_TYPES = ("currency", "country")


@dataclass(frozen=True, slots=True)
class _Candidate:
    start: int
    end: int
    code: str
    kind: str          # currency_alpha | currency_numeric | country_alpha2 | country_alpha3 | country_numeric


@validator("finance.codes")
def codes(doc: Document, params: Mapping[str, Any]) -> list[Finding]:
    """Currency and country codes against ISO 4217 / ISO 3166-1 and the currency a country uses."""
    if doc.kg is None:
        return []
    findings: list[Finding] = []
    for seg in doc.segments:
        for candidate in _candidates(doc, seg):
            finding = _judge(doc, seg, candidate)
            if finding is not None:
                findings.append(finding)
    findings += _adoption_dates(doc)
    findings += _country_currency(doc)
    findings += _not_a_code_followups(doc)
    return findings


_USES = re.compile(r"\b(?:uses?|used|using|currency is|legal tender|adopted|pays? in|denominated in|runs on|"
                   r"switched to|is the currency of)\b", re.I)


_ABANDONED = re.compile(r"\b(?:abandon\w*|dropp\w*|gave up|giv\w* up|ditch\w*|scrapp\w*|replac\w*|phased out|swapp\w*|"
                        r"switched (?:away )?from|moved away from)\s+(?:the\s+|its\s+|their\s+)?(?:own\s+|old\s+|national\s+)?$",
                        re.I)


def _country_currency(doc: Document) -> list[Finding]:
    """"Liechtenstein uses the Swiss franc", "Ecuador has used the US dollar": each currency named after a
    use cue, paired with the country nearest before it in its clause."""
    assert doc.kg is not None
    findings: list[Finding] = []
    for currency in [m for m in doc.mentions(["currency"]) if not m.in_prompt]:
        if re.fullmatch(r"[A-Z]{3}", currency.text):
            continue     # a bare code is judged as a code claim
        clause = doc.clause_of(currency.start)
        before = doc.text[clause[0]:currency.start]
        if _ABANDONED.search(before):
            continue     # "since it abandoned the sucre": a currency given up is no claim of use
        after = re.match(r"\s+(?:is|was)\s+(?:the\s+)?(?:official\s+|legal\s+|national\s+)?currency\s+(?:of|in)\s+",
                         doc.text[currency.end:clause[1]], re.I)
        if after:      # "the euro is the currency of Germany"
            countries = [m for m in doc.mentions(["country"]) if currency.end + after.end() == m.start]
        elif _USES.search(before):
            countries = [m for m in doc.mentions(["country"]) if clause[0] <= m.start and m.end <= currency.start][-1:]
        else:
            continue
        if not countries:
            continue
        country = countries[-1]
        used = {f.object for i in country.entity_ids for f in doc.kg.facts(i, "uses_currency")}
        if not used:
            continue
        span = (min(country.start, currency.start), max(country.end, currency.end))
        holds = bool(used & set(currency.entity_ids))
        facts = [f for i in country.entity_ids for f in doc.kg.facts(i, "uses_currency")]
        negated = bool(re.search(r"\b(?:not|no longer|doesn't|does not|never)\b", before[country.end - clause[0]:], re.I))
        verdict = "supported" if holds != negated else "contradicted"
        names = ", ".join(sorted(o.split(":", 1)[1] for o in used if o))
        findings.append(Finding(doc.text[span[0]:span[1]], span, "country_currency", verdict, 0.9, [kg_evidence(
            f"{country.text} uses {names}", facts[0].provenance, kind="registry")], subject=country.entity_ids[0]))
    return findings


_NOT_A_CODE = re.compile(r"^\W*(?:and\s+)?(?:it|this|that)\s+(?:is not|isn't)\s+an?\s+(?:official\s+)?(?P<kind>ISO[- ]?4217|ISO[- ]?3166)", re.I)


def _not_a_code_followups(doc: Document) -> list[Finding]:
    """"CNH is a market convention ...; it is not an ISO 4217 code": the code is named earlier in the sentence."""
    findings: list[Finding] = []
    for seg in doc.segments:
        clauses = doc.clauses(seg)
        for index, clause in enumerate(clauses):
            found = _NOT_A_CODE.match(doc.text[clause[0]:clause[1]])
            if not found or index == 0:
                continue
            earlier = list(_ALPHA3.finditer(doc.text[seg.start:clause[0]]))
            earlier = [m for m in earlier if m.group(1) not in _NOT_CODES]
            if not earlier:
                continue
            code = earlier[-1].group(1)
            is_currency = "4217" in found.group("kind")
            valid = _is_currency(code) if is_currency else _country(code) is not None
            span = (clause[0] + found.start() + len(re.match(r"^\W*(?:and\s+)?", doc.text[clause[0]:]).group(0)), clause[1])
            span = (span[0], span[1] - (1 if doc.text[span[1] - 1] == "." else 0))
            findings.append(Finding(doc.text[span[0]:span[1]], span, "currency_code" if is_currency else "country_code",
                                    "contradicted" if valid else "supported", 0.85, [Evidence(
                                        kind="registry", description=f"{code} {'is' if valid else 'is not'} an "
                                        f"{found.group('kind')} code", source=package_source("pycountry"),
                                        locator="pycountry")]))
    return findings


def _scope(doc: Document, seg: Segment, position: int) -> str:
    clause = doc.clause_of(position)
    parts = [doc.text[clause[0]:clause[1]], seg.heading]
    if doc.prompt and re.match(r"^\W*(?:it's|it is|that's|that is|the answer is)\s+\S+\s*$", doc.text[clause[0]:position + 4], re.I):
        parts.append(doc.prompt)     # "It's CHE": the question says which code is meant
    if seg.label is not None:
        parts.append(doc.text[seg.label[0]:seg.label[1]])
    cell = seg.cell_at(position) if seg.cells else None
    if cell is not None:
        parts.append(cell.header)
    return " | ".join(parts)


def _candidates(doc: Document, seg: Segment) -> list[_Candidate]:
    out: list[_Candidate] = []
    prompt_cue = doc.prompt or ""
    code_line = _code_line(doc, seg)
    for match in _ALPHA3.finditer(seg.text):
        start, end = seg.start + match.start(1), seg.start + match.end(1)
        code = match.group(1)
        scope = _scope(doc, seg, start)
        after_currency = _after_currency(doc, start)
        if code in _NOT_CODES or _is_subject_code(doc, seg, start, end):
            continue
        known = _is_currency(code) or _country(code) is not None or (doc.kg is not None and
                                                                     doc.kg.entity(f"withdrawn_currency:{code}") is not None)
        if not known and not _placed_as_code(doc, seg, start):
            continue
        if _COUNTRY_CUE.search(scope) or (code_line and _COUNTRY_CUE.search(prompt_cue + " " + scope + " iso 3166")):
            if not _CURRENCY_CUE.search(_local(doc, start)) or _COUNTRY_CUE.search(_local(doc, start)):
                out.append(_Candidate(start, end, code, "country_alpha3"))
                continue
        clause = doc.clause_of(start)
        currency_named = any(clause[0] <= m.start and m.end <= start for m in doc.mentions(["currency"]))
        said_is = bool(re.search(r"\b(?:is|are|=)\s*$", doc.text[clause[0]:start]))
        if _CURRENCY_CUE.search(scope) or after_currency or (seg.cells and re.search(r"\bcode\b", _header(seg, start), re.I)) \
                or (currency_named and (said_is or re.search(r"\bcodes?\b", scope, re.I))):
            out.append(_Candidate(start, end, code, "currency_alpha"))
    for match in _ALPHA2.finditer(seg.text):
        start, end = seg.start + match.start(1), seg.start + match.end(1)
        scope = _scope(doc, seg, start)
        if _COUNTRY_CUE.search(scope) or code_line:
            out.append(_Candidate(start, end, match.group(1), "country_alpha2"))
    for match in _NUMERIC.finditer(seg.text):
        start, end = seg.start + match.start(1), seg.start + match.end(1)
        scope = _scope(doc, seg, start)
        before = doc.text[doc.clause_of(start)[0]:start]
        code_before = re.search(r"\b([A-Z]{3})\b(?:,[^,]{0,30},)?\s*(?:\(numeric|:|is|=|\|)\s*(?:numeric\s*)?$", before)
        if not (_NUMERIC_CUE.search(scope) or code_line or (code_before and _is_currency(code_before.group(1)))):
            continue
        country = bool(_COUNTRY_CUE.search(scope)) or (code_line and not _CURRENCY_CUE.search(scope))
        kind = "country_numeric" if country and not (code_before and _is_currency(code_before.group(1))) else "currency_numeric"
        out.append(_Candidate(start, end, match.group(1), kind))
    return out


def _placed_as_code(doc: Document, seg: Segment, position: int) -> bool:
    """An unknown capital string stated as a code: "code is QRR", "officially coded NZL", "the riyal (QRR)",
    a "code" column, "Germany: GER" under a codes heading, "Iceland's króna is ISL"."""
    before = doc.text[max(seg.start, position - 40):position]
    if re.search(r"(?:\bcode[sd]?|\bcoded|\bISO\b[^.;]{0,15}|\bis|\bare|:)\s*[\"'(]?\s*$", before, re.I):
        return True
    if _NEGATED.search(doc.text[position:doc.clause_of(position)[1]]):
        return True     # "GER, which you see at the Olympics, is not an ISO 3166 code"
    if _after_currency(doc, position) or (seg.cells and re.search(r"\bcode\b", _header(seg, position), re.I)):
        return True
    return seg.label is not None and seg.label[1] <= position and bool(_COUNTRY_CUE.search(seg.heading) or
                                                                      _CURRENCY_CUE.search(seg.heading))


def _local(doc: Document, position: int) -> str:
    clause = doc.clause_of(position)
    return doc.text[max(clause[0], position - 40):position]


def _header(seg: Segment, position: int) -> str:
    cell = seg.cell_at(position)
    return cell.header if cell is not None else ""


def _code_line(doc: Document, seg: Segment) -> bool:
    """"Austria: AT / AUT / 040", "South Korea is KR / KOR / 410": a country followed by a run of codes."""
    return bool(re.search(r"\b[A-Z]{2}\s*/\s*[A-Z]{3}(?:\s*/\s*\d{3})?\b", seg.text)) or (
        seg.label is not None and bool(re.fullmatch(r"\s*[A-Z]{2,3}\s*", doc.text[seg.label[1]:seg.end].lstrip(":").strip() or "x"))
        and _country_label(doc, seg))


def _country_label(doc: Document, seg: Segment) -> bool:
    assert seg.label is not None
    return any(seg.label[0] <= m.start and m.end <= seg.label[1] for m in doc.mentions(["country"]))


def _after_currency(doc: Document, position: int) -> bool:
    """A code in parentheses right after a currency name: "the Saudi riyal (SAR)", "the krone (DKK)"."""
    before = doc.text[max(0, position - 40):position]
    if not re.search(r"\(\s*$", before):
        return False
    return bool(re.search(r"\b(?:dollar|euro|pound|franc|krona|krone|króna|yen|yuan|renminbi|rupee|riyal|rial|dinar|"
                          r"dirham|lira|peso|real|rand|zloty|złoty|koruna|forint|leu|lev|shekel|won|baht|kroon|lats|litas|"
                          r"kuna|tolar|ruble|rouble|sucre|cedi|naira)s?\s*\(\s*$", before, re.I)) or any(
        m.end <= position and position - m.end <= 3 for m in doc.mentions(["currency"]))


def _is_subject_code(doc: Document, seg: Segment, start: int, end: int) -> bool:
    """"USD is 840", "EUR: 978", "RUB | 810": the alphabetic code is the subject of a numeric claim."""
    after = doc.text[end:end + 14]
    if re.match(r"\s*(?:is|:|=|\(numeric)\s*\d{3}\b", after):
        return True
    if seg.cells:
        cell = seg.cell_at(start)
        later = [c for c in seg.cells if cell is not None and c.column > cell.column]
        return bool(cell is not None and later and re.fullmatch(r"\d{3}", later[-1].text.strip())
                    and not re.search(r"\bcode\b", cell.header, re.I) and "alpha" not in cell.header.casefold())
    return False


@cache
def _currency_codes() -> dict[str, Any]:
    return {c.alpha_3: c for c in pycountry.currencies}


def iso_currency_codes() -> frozenset[str]:
    """Current ISO 4217 alphabetic codes (pycountry)."""
    return frozenset(_currency_codes())


def _is_currency(code: str) -> bool:
    return code in _currency_codes()


def _country(code: str) -> Any:
    for key in ("alpha_2", "alpha_3", "numeric"):
        try:
            found = pycountry.countries.get(**{key: code})
        except (KeyError, LookupError):
            found = None
        if found is not None:
            return found
    return None


# -- subjects --------------------------------------------------------------------------------------------
def _subject(doc: Document, seg: Segment, candidate: _Candidate) -> Mention | str | None:
    """The currency or country the code is given for (a Mention), or the alphabetic code a numeric code
    is given for (a str)."""
    if candidate.kind == "currency_numeric":
        clause = doc.clause_of(candidate.start)
        before = doc.text[clause[0]:candidate.start]
        code_before = list(re.finditer(r"\b([A-Z]{3})\b", before))
        if code_before and _is_currency(code_before[-1].group(1)):
            return code_before[-1].group(1)
        if seg.label is not None and re.fullmatch(r"[A-Z]{3}", doc.text[seg.label[0]:seg.label[1]]):
            return doc.text[seg.label[0]:seg.label[1]]
        if seg.cells:
            for cell in seg.cells:
                if re.fullmatch(r"[A-Z]{3}", cell.text.strip()) and _is_currency(cell.text.strip()):
                    return cell.text.strip()
    types = ["currency", "country"] if candidate.kind.startswith("currency") else ["country"]
    return doc.antecedent(candidate.start, types, accept=lambda m: not (candidate.start <= m.start < candidate.end))


def _subject_currencies(doc: Document, subject: Mention | str) -> set[str]:
    assert doc.kg is not None
    if isinstance(subject, str):
        return {subject}
    codes: set[str] = set()
    for entity_id in subject.entity_ids:
        if entity_id.startswith("currency:"):
            codes.add(entity_id.split(":", 1)[1])
        elif entity_id.startswith("country:"):
            codes |= {f.object.split(":", 1)[1] for f in doc.kg.facts(entity_id, "uses_currency") if f.object}
    return codes


# -- verdicts -------------------------------------------------------------------------------------------
def _judge(doc: Document, seg: Segment, candidate: _Candidate) -> Finding | None:
    assert doc.kg is not None
    clause = doc.clause_of(candidate.start)
    clause_text = doc.text[clause[0]:clause[1]]
    negated = bool(_NEGATED.search(doc.text[candidate.end:clause[1]]))
    if candidate.kind.startswith("country"):
        return _judge_country(doc, seg, candidate, negated)
    return _judge_currency(doc, seg, candidate, negated, clause_text)


def _finding(doc: Document, candidate: _Candidate, verdict: str, confidence: float, evidence: list[Evidence],
             supports: bool | None, subject: str | None = None) -> Finding:
    kind = "currency_code" if candidate.kind.startswith("currency") else "country_code"
    resolution = "resolved" if supports is not False or verdict != "contradicted" else "resolved"
    return Finding(candidate.code, (candidate.start, candidate.end), kind, verdict, confidence, evidence,  # type: ignore[arg-type]
                   subject=subject, citation=CitationCheck("identifier", resolution, supports))  # type: ignore[arg-type]


def _judge_currency(doc: Document, seg: Segment, candidate: _Candidate, negated: bool, clause_text: str) -> Finding | None:
    source, locator = package_source("pycountry"), "pycountry.currencies (ISO 4217)"
    code = candidate.code
    if candidate.kind == "currency_numeric":
        subject = _subject(doc, seg, candidate)
        if subject is None:
            return None
        wanted = sorted(_subject_currencies(doc, subject))
        numerics = {c: getattr(_currency_codes().get(c), "numeric", None) for c in wanted}
        named = subject if isinstance(subject, str) else subject.text
        if not any(numerics.values()):
            return _finding(doc, candidate, "unverifiable", 0.5, [Evidence(
                kind="registry", description=f"no ISO 4217 numeric code known for {named}")], None)
        if code in numerics.values():
            return _finding(doc, candidate, "supported", 0.95, [Evidence(
                kind="registry", description=f"{named}: ISO 4217 numeric code {code}", source=source, locator=locator)], True)
        actual = ", ".join(f"{c} {n}" for c, n in numerics.items() if n)
        return _finding(doc, candidate, "contradicted", 0.9, [Evidence(
            kind="registry", description=f"the ISO 4217 numeric code of {named} is {actual}, not {code}"
            + _what_numeric_is(code), source=source, locator=locator)], False)
    currency = _currency_codes().get(code)
    withdrawn = doc.kg.entity(f"withdrawn_currency:{code}")
    if negated:
        valid = currency is not None
        return _finding(doc, candidate, "contradicted" if valid else "supported", 0.9, [Evidence(
            kind="registry", description=f"{code} {'is' if valid else 'is not'} a current ISO 4217 code",
            source=source, locator=locator)], None)
    subject = _subject(doc, seg, candidate)
    wanted = _subject_currencies(doc, subject) if subject is not None else set()
    named = (subject if isinstance(subject, str) else subject.text) if subject is not None else ""
    historic = bool(_HISTORIC.search(clause_text)) and not _CURRENT.search(clause_text + _header(seg, candidate.start))
    if withdrawn is not None:
        replaced_by, when = withdrawn.attributes.get("replaced_by"), withdrawn.attributes.get("withdrawn")
        evidence = [kg_evidence(f"{code} ({withdrawn.name}) was withdrawn on {when}, replaced by {replaced_by}",
                                withdrawn.provenance, kind="registry")]
        if historic and subject is not None and _country_of_withdrawn(withdrawn) in _subject_countries(doc, subject):
            return _finding(doc, candidate, "supported", 0.85, evidence, True)
        return _finding(doc, candidate, "contradicted", 0.9, evidence, False)
    if currency is None:
        why = f"{code} is not an ISO 4217 currency code" + _what_alpha_is(code)
        if wanted:
            why += f"; the code of {named} is {', '.join(sorted(wanted))}"
        return _finding(doc, candidate, "contradicted", 0.9, [Evidence(kind="registry", description=why, source=source,
                                                                      locator=locator)], None)
    evidence = [Evidence(kind="registry", description=f"{code} is the ISO 4217 code of {currency.name}", source=source,
                         locator=locator)]
    if subject is None:
        return _finding(doc, candidate, "unverifiable", 0.5, [*evidence, Evidence(
            kind="rule", description="no currency or country is named for the code, so only its existence is known")], None)
    if code in wanted:
        return _finding(doc, candidate, "supported", 0.95, evidence, True)
    if not wanted:
        return _finding(doc, candidate, "unverifiable", 0.5, [*evidence, Evidence(
            kind="kg_fact", description=f"no current currency known for {named}")], None)
    return _finding(doc, candidate, "contradicted", 0.9, [*evidence, Evidence(
        kind="registry", description=f"the currency code of {named} is {', '.join(sorted(wanted))}", source=source,
        locator=locator)], False)


def _subject_countries(doc: Document, subject: Mention | str) -> set[str]:
    if isinstance(subject, str):
        return set()
    assert doc.kg is not None
    out = {i.split(":", 1)[1] for i in subject.entity_ids if i.startswith("country:")}
    for entity_id in subject.entity_ids:
        if entity_id.startswith("currency:"):
            out |= {f.subject.split(":", 1)[1] for f in doc.kg.facts(relation="uses_currency", object=entity_id)}
    return out


def _country_of_withdrawn(entity: Any) -> str:
    return str(entity.attributes.get("country", ""))


def _what_alpha_is(code: str) -> str:
    country = _country(code) if len(code) == 3 else None
    return f" ({code} is the ISO 3166 alpha-3 code of {country.name})" if country is not None else ""


def _what_numeric_is(code: str) -> str:
    country = _country(code)
    currency = next((c for c in pycountry.currencies if getattr(c, "numeric", None) == code), None)
    parts = []
    if currency is not None:
        parts.append(f"{code} is the numeric code of {currency.name} ({currency.alpha_3})")
    if country is not None:
        parts.append(f"{code} is the ISO 3166 numeric code of {country.name}")
    return ("; " + "; ".join(parts)) if parts else ""


def _judge_country(doc: Document, seg: Segment, candidate: _Candidate, negated: bool) -> Finding | None:
    source, locator = package_source("pycountry"), "pycountry.countries (ISO 3166-1)"
    code = candidate.code
    field = {"country_alpha2": "alpha_2", "country_alpha3": "alpha_3", "country_numeric": "numeric"}[candidate.kind]
    try:
        owner = pycountry.countries.get(**{field: code})
    except (KeyError, LookupError):
        owner = None
    label = {"alpha_2": "alpha-2", "alpha_3": "alpha-3", "numeric": "numeric"}[field]
    if negated:
        return _finding(doc, candidate, "contradicted" if owner is not None else "supported", 0.9, [Evidence(
            kind="registry", description=f"{code} {'is the ISO 3166-1 ' + label + ' code of ' + owner.name if owner else 'is not an ISO 3166-1 ' + label + ' code'}",
            source=source, locator=locator)], None)
    subject = _subject(doc, seg, candidate)
    countries = sorted(_subject_countries(doc, subject)) if subject is not None and not isinstance(subject, str) else []
    listed = _listed_countries(doc, seg, candidate)
    if listed:
        subject, countries = listed
    if not countries:
        if owner is None and _COUNTRY_CUE.search(_scope(doc, seg, candidate.start)):
            return _finding(doc, candidate, "contradicted", 0.85, [Evidence(
                kind="registry", description=f"{code} is not an ISO 3166-1 {label} code", source=source, locator=locator)], None)
        return None
    expected = {c: getattr(pycountry.countries.get(alpha_2=c), field, None) for c in countries}
    named = subject.text if isinstance(subject, Mention) else str(subject)
    if listed:
        expected = {c: v for c, v in expected.items() if v == code} or expected
    if code in expected.values():
        return _through_named_after(doc, _finding(doc, candidate, "supported", 0.95, [Evidence(
            kind="registry", description=f"{named}: ISO 3166-1 {label} {code}", source=source, locator=locator)], True,
            subject=f"country:{countries[0]}"), subject)
    what = f"{code} is the {label} code of {owner.name}" if owner is not None else f"{code} is not an ISO 3166-1 {label} code"
    finding = _finding(doc, candidate, "contradicted", 0.9, [Evidence(
        kind="registry", description=f"the ISO 3166-1 {label} code of {named} is {', '.join(str(v) for v in expected.values())}; "
        f"{what}", source=source, locator=locator)], False, subject=f"country:{countries[0]}")
    return _through_named_after(doc, finding, subject)


def _through_named_after(doc: Document, finding: Finding, subject: Mention | str | None) -> Finding:
    """"DE is the country code for Denmark": the claim runs from the code to the country named after it."""
    if isinstance(subject, Mention) and subject.start > finding.span[1] and doc.clause_of(subject.start) == doc.clause_of(finding.span[0]):
        finding.span = (finding.span[0], subject.end)
        finding.text = doc.text[finding.span[0]:subject.end]
    return finding


_CODE_LIST = re.compile(r"\b[A-Z]{2,3}\b(?:\s*(?:,|/|and|or)\s*\b[A-Z]{2,3}\b)+")


def _listed_countries(doc: Document, seg: Segment, candidate: _Candidate) -> tuple[str, list[str]] | None:
    """"Polish and Cypriot IBANs start with the country code (PL, CY)": codes given as a list answer the
    countries named before them as a list (either order), not each the nearest one."""
    clause = doc.clause_of(candidate.start)
    listing = next((m for m in _CODE_LIST.finditer(doc.text, clause[0], clause[1]) if m.start() <= candidate.start < m.end()), None)
    if listing is None:
        return None
    size = len(re.findall(r"\b[A-Z]{2,3}\b", listing.group(0)))
    named: list[Mention] = []
    paragraph = doc.text.rfind("\n\n", 0, listing.start()) + 1
    for mention in reversed(doc.mentions(["country", "currency"])):
        if max(paragraph, listing.start() - 400) <= mention.start < listing.start() and not mention.in_prompt:
            if not any(mention.entity_ids == m.entity_ids for m in named):
                named.append(mention)
        if len(named) == size:
            break
    if len(named) < size:
        return None
    countries = sorted({c for m in named for c in _subject_countries(doc, m)})
    return " and ".join(m.text for m in reversed(named)), countries


# -- euro (and other) adoption dates ----------------------------------------------------------------------
_ADOPTION = re.compile(r"\b(?:adopt\w*|switch\w*|join\w*|chang\w*|mov\w*|replac\w*|introduc\w*|went|converted|"
                       r"entered|eurozone|euro area)\b", re.I)


def _adoption_dates(doc: Document) -> list[Finding]:
    """"Croatia switched from the kuna to the euro on 1 January 2023", "Estonia: 1 January 2011": the date a
    country took up its current currency, against ISO 4217 List Three."""
    assert doc.kg is not None
    findings: list[Finding] = []
    context = (doc.prompt or "") + " " + doc.text
    if not _ADOPTION.search(context) or not re.search(r"\beuro\b|\badopt", context, re.I):
        return findings
    for seg in doc.segments:
        for date in find_dates(seg.text):
            start, end = seg.start + date.start, seg.start + date.end
            clause = doc.clause_of(start)
            text = doc.text[clause[0]:clause[1]]
            if not (_ADOPTION.search(text) or seg.label is not None or re.search(r"\bin\s*$", doc.text[clause[0]:start])):
                continue
            country = doc.antecedent(start, ["country"])
            if country is None:
                continue
            changes = [f for i in country.entity_ids for f in doc.kg.facts(i, "replaced_currency")]
            if not changes:
                continue
            fact = changes[-1]
            when = str(fact.qualifiers.get("date", ""))
            year, month, day = (int(x) for x in when.split("-"))
            span = (min(start, country.start) if country.start >= clause[0] and not country.in_prompt else start, end)
            verdict = "supported" if date.matches(year, month, day) else "contradicted"
            findings.append(Finding(doc.text[span[0]:span[1]], span, "currency_change", verdict, 0.9, [kg_evidence(
                f"{country.text} replaced {fact.qualifiers.get('former')} with {fact.object.split(':', 1)[1] if fact.object else ''} "
                f"on {when}; the text says {date.describe()}", fact.provenance, kind="registry")], subject=country.entity_ids[0]))
    return findings
