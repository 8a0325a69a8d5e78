"""`finance.iban_length`: the length of a country's IBAN, and whether a country uses IBANs at all, against
schwifty's IBAN registry (the SWIFT IBAN registry; aspirational entries are not official IBANs).

A length (digits or words, "22 characters", "at 16", "twenty-one characters long", a table cell under an
"IBAN length" column, "Ireland: 22" when the question asks about IBAN lengths) is paired with the country
named nearest before it in its clause (adjectives count: "Dutch IBANs", "a Cypriot one"), else its row or
label, else earlier. Ranges over several countries ("between 20 and 22 characters") are not a claim about
one country. "The United States doesn't use the IBAN system" holds for a country the registry does not list.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache
from typing import Any

from schwifty import registry
from schwifty.exceptions import SchwiftyException

from rules.claims import Document, Segment
from rules.mentions import Mention
from rules.report import Evidence
from rules.validators.base import Finding, package_source, validator
from rules.validators.finance.identifiers import _view_index

_IBAN = re.compile(r"\bIBANs?\b|\bInternational Bank Account Numbers?\b", re.I)
_LENGTH = re.compile(r"(?<![\d.,])(?P<n>1[4-9]|2\d|3[0-4])(?![\d.,]\d)(?P<unit>\s*(?:characters?|chars?|digits?|long)\b)?")
_NO_IBAN = re.compile(r"\b(?:do(?:es)?n't|do(?:es)? not|never)\s+(?:use|have|issue)\b[^.;]{0,20}\bIBAN|"
                      r"\bno IBANs?\b|\bnot (?:part of|in) the IBAN\b", re.I)


@cache
def iban_spec(country: str) -> Any:
    try:
        spec = registry.get_iban_spec(country)
    except (KeyError, SchwiftyException):
        return None
    return None if getattr(spec, "aspirational", False) else spec


@validator("finance.iban_length")
def iban_length(doc: Document, params: Mapping[str, Any]) -> list[Finding]:
    """A country's IBAN length, and whether it uses IBANs, against the IBAN registry."""
    if doc.kg is None:
        return []
    asked = bool(doc.prompt and _IBAN.search(doc.prompt))
    about_ibans = asked or bool(_IBAN.search(doc.text))
    findings: list[Finding] = []
    view = doc.view
    for seg in doc.segments:
        for clause in doc.clauses(seg):
            text = doc.text[clause[0]:clause[1]]
            with_unit = bool(re.search(r"\b(?:characters?|chars?)\b", text))
            if not (_IBAN.search(text) or _IBAN.search(seg.heading) or _IBAN.search(doc.text[seg.start:seg.end])
                    or (asked and seg.kind in ("item", "row", "line")) or (about_ibans and with_unit)
                    or (about_ibans and re.search(r"\b(?:range|length)\b", text))):
                continue
            if _NO_IBAN.search(text):
                findings += _judge_no_iban(doc, clause)
                continue
            low, high = _view_index(view, clause[0]), _view_index(view, clause[1])
            for match in _LENGTH.finditer(view.text[low:high]):
                start, end = view.span(low + match.start(), low + match.end())
                if not _is_length(doc, seg, clause, start, end, bool(match.group("unit"))):
                    continue
                country = doc.antecedent(start, ["country"], accept=lambda m: not _inside_code(doc, m))
                if country is None:
                    continue
                findings.append(_judge(doc, country, int(match.group("n")), (start, end)))
    return findings


def _inside_code(doc: Document, mention: Mention) -> bool:
    """"NL" in "NL91 ABNA ..." is part of an IBAN, not a country named."""
    return bool(re.match(r"\d{2}\s?[A-Z0-9]{4}", doc.text[mention.end:mention.end + 8]))


def _is_length(doc: Document, seg: Segment, clause: tuple[int, int], start: int, end: int, has_unit: bool) -> bool:
    before = doc.text[max(clause[0], start - 30):start]
    after = doc.text[end:end + 12]
    if re.search(r"\bbetween\s*$", before, re.I) or re.match(r"\s*(?:and|to|-)\s*\d", after):
        return False      # a range over several countries
    if re.search(r"\b(?:and|to|-)\s*$", before) and re.search(r"\bbetween\b", doc.text[clause[0]:start], re.I):
        return False
    if re.match(r"\s*(?:\d|[A-Z]{4})", after) or re.search(r"[A-Z]{2}$", before):
        return False      # part of an IBAN or an account number
    cell = seg.cell_at(start) if seg.cells else None
    if cell is not None:
        return bool(re.fullmatch(r"\s*\d{2}\s*", cell.text)) and bool(_IBAN.search(cell.header + seg.heading) or doc.prompt)
    if seg.label is not None and seg.label[1] <= start and re.fullmatch(r"\s*\d{2}\s*", doc.text[seg.label[1] + 1:seg.end]):
        return True
    return has_unit or bool(re.search(r"\b(?:at|is|are|has|have|of)\s*\(?$", before)) or bool(re.search(r"\(\s*$", before))


def _judge(doc: Document, country: Mention, claimed: int, span: tuple[int, int]) -> Finding:
    code = next((i.split(":", 1)[1] for i in country.entity_ids if i.startswith("country:")), "")
    spec = iban_spec(code)
    source, locator = package_source("schwifty"), "schwifty IBAN registry (SWIFT IBAN registry)"
    text = doc.text[span[0]:span[1]]
    if spec is None:
        return Finding(text, span, "iban_length", "contradicted", 0.85, [Evidence(
            kind="registry", description=f"{country.text} ({code}) has no IBAN format in the IBAN registry",
            source=source, locator=locator)], subject=f"country:{code}")
    verdict = "supported" if spec.iban_length == claimed else "contradicted"
    return Finding(text, span, "iban_length", verdict, 0.95, [Evidence(
        kind="registry", description=f"{country.text} ({code}) IBANs are {spec.iban_length} characters "
        f"({spec.iban_spec})", source=source, locator=locator)], subject=f"country:{code}")


def _judge_no_iban(doc: Document, clause: tuple[int, int]) -> list[Finding]:
    out = []
    for country in [m for m in doc.mentions(["country"]) if clause[0] <= m.start < clause[1]][:1]:
        code = next((i.split(":", 1)[1] for i in country.entity_ids if i.startswith("country:")), "")
        spec = iban_spec(code)
        end = clause[1] - (1 if doc.text[clause[1] - 1] in ".;," else 0)
        cut = re.search(r",\s*(?:so|and|but)\b", doc.text[clause[0]:end])
        span = (clause[0], clause[0] + cut.start() if cut else end)
        out.append(Finding(doc.text[span[0]:span[1]], span, "iban_length", "supported" if spec is None else "contradicted",
                           0.9, [Evidence(kind="registry", description=f"{country.text} ({code}) "
                                          f"{'has no' if spec is None else 'has an'} IBAN format in the IBAN registry",
                                          source=package_source("schwifty"), locator="schwifty IBAN registry")],
                           subject=f"country:{code}"))
    return out
