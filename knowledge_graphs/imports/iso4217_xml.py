"""`iso4217-xml`: ISO 4217 List One (current currencies and funds) as SIX, the maintenance agency, publishes it.

<ISO_4217 Pblshd="2024-06-25"><CcyTbl><CcyNtry><CtryNm>AFGHANISTAN</CtryNm><CcyNm>Afghani</CcyNm><Ccy>AFN</Ccy>
<CcyNbr>971</CcyNbr><CcyMnrUnts>2</CcyMnrUnts></CcyNtry>...: an entry per country and currency; an entry without
a currency ("ANTARCTICA", "No universal currency") says so and adds nothing; `CcyNm IsFund="true"` marks a fund
(BOV, CLF, ...); minor units "N.A." (gold, SDR) means none. The list's publish date (`Pblshd`) is the as-of date
of every fact.

Each currency gets `numeric_code` and `minor_units` facts (a currency the KG does not hold becomes
`currency:<code>`), and each entry whose country name resolves to one of the KG's country entities (the list
writes "KOREA (THE REPUBLIC OF)", "BOLIVIA (PLURINATIONAL STATE OF)") a `uses_currency` fact. Entries for regions
and bodies that are not countries ("EUROPEAN UNION", "INTERNATIONAL MONETARY FUND (IMF)") add the currency only.
Coverage: the list is complete, so the currencies it names are recorded as the `iso4217` index.
"""

from __future__ import annotations

import datetime as dt
import re

from knowledge_graphs.imports.errors import ErrorLog, FieldError
from knowledge_graphs.imports.overlay import Overlay
from knowledge_graphs.imports.stamp import ImportStamp
from knowledge_graphs.imports.xml_records import XmlNode, child_text, xml_elements
from knowledge_graphs.model import Entity, Fact, KnowledgeGraph

DOMAIN = "finance"
SOURCE = "ISO 4217 List One (current currency & funds), SIX Financial Information (maintenance agency)"
_CODE = re.compile(r"^[A-Z]{3}$")
_NUMBER = re.compile(r"^\d{3}$")
_QUALIFIED = re.compile(r"^(?P<name>.+?)\s*\((?P<qualifier>[^()]+)\)$")      # "KOREA (THE REPUBLIC OF)"


def parse(data: bytes, *, stamp: ImportStamp, kg: KnowledgeGraph) -> Overlay:
    log = ErrorLog(stamp.file_name)
    overlay = Overlay(DOMAIN, stamp.overlay)
    currencies: dict[str, Entity] = {}
    numbered: dict[str, tuple[str, int]] = {}            # code -> (numeric code, line), each code's facts once
    published: list[str] = []
    for node, ancestors in xml_elements(data, log, {"CcyNtry"}):
        if not published:
            published.append(_published(ancestors, log))
        try:
            facts = _entry(node, published[0] or stamp.as_of, stamp, kg, currencies, numbered)
        except FieldError as exc:
            log.add(node.line, exc.field, str(exc))
            continue
        overlay.facts += facts
        overlay.rows += 1
    log.raise_if_any()
    overlay.entities += currencies.values()
    overlay.coverage = [{"index": "iso4217", "values": sorted(numbered)}] if numbered else []
    return overlay


def _published(ancestors: tuple[XmlNode, ...], log: ErrorLog) -> str:
    root = ancestors[0] if ancestors else None
    if root is None or root.tag != "ISO_4217":
        log.add(root.line if root else 1, None, "not an ISO 4217 list: the root element must be <ISO_4217>")
        return ""
    raw = root.attrib.get("Pblshd", "").strip()
    try:
        return dt.date.fromisoformat(raw).isoformat()
    except ValueError:
        log.add(root.line, "Pblshd", f"must be the publish date YYYY-MM-DD, got {raw!r}")
        return ""


def _entry(node: XmlNode, as_of: str, stamp: ImportStamp, kg: KnowledgeGraph, currencies: dict[str, Entity],
           numbered: dict[str, tuple[str, int]]) -> list[Fact]:
    country = child_text(node, "CtryNm")
    if country is None:
        raise FieldError("CtryNm", "is empty")
    code = child_text(node, "Ccy")
    if code is None:
        return []                                        # "No universal currency"
    if not _CODE.match(code):
        raise FieldError("Ccy", f"must be three capital letters, got {code!r}")
    name_node = node.find("CcyNm")
    name = name_node.text() if name_node is not None else ""
    if not name:
        raise FieldError("CcyNm", "is empty")
    number = child_text(node, "CcyNbr")
    if number is None or not _NUMBER.match(number):
        raise FieldError("CcyNbr", f"must be three digits, got {number!r}")
    minor = child_text(node, "CcyMnrUnts")
    if minor is None or not (minor.isdigit() or minor == "N.A."):
        raise FieldError("CcyMnrUnts", f"must be a digit or N.A., got {minor!r}")
    if code in numbered and numbered[code][0] != number:
        raise FieldError("CcyNbr", f"{code} is {numbered[code][0]} on line {numbered[code][1]}, here {number}")
    provenance = stamp.provenance(source=SOURCE, line=node.line, what=f"{country}, {code}", as_of=as_of)
    currency_id = f"currency:{code}"
    facts: list[Fact] = []
    if code not in numbered:
        numbered[code] = (number, node.line)
        if kg.entity(currency_id) is None:
            fund = name_node is not None and name_node.attrib.get("IsFund", "").casefold() == "true"
            currencies[currency_id] = Entity(currency_id, "currency", name, [code],
                                             {"alpha_3": code, "numeric": number, **({"fund": True} if fund else {})},
                                             provenance)
        facts.append(Fact(currency_id, "numeric_code", value=number, provenance=provenance))
        if minor != "N.A.":
            facts.append(Fact(currency_id, "minor_units", value=int(minor), provenance=provenance))
    country_id = _country(country, kg)
    if country_id is not None:
        facts.append(Fact(country_id, "uses_currency", currency_id, provenance=provenance))
    return facts


def _country(name: str, kg: KnowledgeGraph) -> str | None:
    """The KG's country the list's name means: as written, without "(THE)", or with its qualifier turned round
    ("KOREA (THE REPUBLIC OF)" -> "Republic of Korea", "Korea, Republic of")."""
    forms = [name]
    match = _QUALIFIED.match(name)
    if match:
        base, qualifier = match["name"], re.sub(r"^THE\s+", "", match["qualifier"], flags=re.I)
        forms += [base, f"{qualifier} {base}", f"{base}, {qualifier}"] if qualifier.casefold() != "the" else [base]
    for form in forms:
        ids = list(dict.fromkeys(e.id for e in kg.lookup(form) if e.type == "country"))
        if len(ids) == 1:
            return ids[0]
    return None
