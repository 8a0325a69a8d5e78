"""`finance.identifiers`: security, entity and account identifiers (ISIN, LEI, CUSIP, FIGI, SEDOL, IBAN,
BIC, ABA routing numbers), and what the text says about identifier formats.

Validity comes from python-stdnum and schwifty (check digits, structure, bank registries). A valid check
digit says nothing about who issued the identifier: when the text attributes a valid identifier to an
issuer ("Microsoft's ISIN is US0378331005", "Barclays PLC: 213800LBQA1Y9L22JB70", "Its CUSIP is ..."), the
curated issuer register judges it (`finance/issuers.py`); where the register cannot, the verdict is
unverifiable with the reason "no offline source holds the issuer"; only a statement about validity
itself ("passes the ABA checksum", "is a valid IBAN") is supported by a check digit. A BIC whose bank the
schwifty registry names is checked against the bank the text names.

Format statements ("ISINs are 12 characters long", "a CUSIP has nine characters", "A BIC is either 8 or 11
characters", "defined by ISO 6166") are judged against the curated identifier types (length, standard).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import cache, lru_cache
from types import ModuleType
from typing import Any

import pycountry
from schwifty import BIC, IBAN
from schwifty.exceptions import SchwiftyException
from stdnum import cusip, figi, isin, lei
from stdnum.exceptions import InvalidChecksum, ValidationError
from stdnum.gb import sedol
from stdnum.us import rtn

from knowledge_graphs.model import KnowledgeGraph
from rules.claims import Document, Sentence
from rules.report import Evidence, Resolution, Verdict
from rules.validators.base import CitationCheck, Finding, kg_evidence, package_source, validator
from rules.validators.finance.issuers import issuer_in_clause, judge_issuer

# -- identifiers ---------------------------------------------------------------------------------------
_STDNUM_MODULES: dict[str, ModuleType] = {"isin": isin, "lei": lei, "cusip": cusip, "figi": figi, "sedol": sedol,
                                          "aba_rtn": rtn}
_KEYWORDS = re.compile(r"\b(ISIN|LEI|CUSIP|FIGI|SEDOL|IBAN|BIC|SWIFT|routing numbers?|ABA|RTN)\b", re.I)
_KEYWORD_TYPES = {"swift": "bic", "routing number": "aba_rtn", "routing numbers": "aba_rtn", "aba": "aba_rtn",
                  "rtn": "aba_rtn"}
_CANDIDATES: list[tuple[str, re.Pattern[str]]] = [
    ("iban", re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,3})?\b")),
    ("lei", re.compile(r"\b[A-Z0-9]{18}\d{2}\b")),
    ("isin", re.compile(r"\b[A-Z]{2}[A-Z0-9]{9}\d\b")),
    ("figi", re.compile(r"\bBBG[A-Z0-9]{9}\b")),
    ("any", re.compile(r"\b(?=[A-Z0-9]*\d)[A-Z0-9]{6,34}\b")),     # declared by a keyword, shape unknown
]
_BIC = re.compile(r"\b[A-Z]{4}[A-Z]{2}[A-Z0-9]{2}(?:[A-Z0-9]{3})?\b")


def _bic_shaped(text: str) -> bool:
    """Eight or eleven capitals whose fifth and sixth letters are an ISO country code (not a shouted word)."""
    return len(text) in (8, 11) and text[4:6] in _iban_countries() | {"US", "CA", "JP", "CN", "AU", "IN", "SG", "HK"}


@validator("finance.identifiers")
def identifiers(doc: Document, params: Mapping[str, Any]) -> list[Finding]:
    """Format and check digits of security, entity and account identifiers (python-stdnum, schwifty)."""
    findings: list[Finding] = []
    bic_in_document = bool(re.search(r"\b(?:BIC|SWIFT)\b", doc.text))
    previous_keyword: str | None = None
    for sentence in doc.sentences:
        candidates = _identifier_candidates(sentence, bic_in_document)
        if not candidates and previous_keyword:
            # "... Bank of America's is 026009593. Wells Fargo's is 121000249.": the type named just before
            candidates = [(sentence.start + m.start(1), sentence.start + m.end(1), previous_keyword)
                          for m in re.finditer(r"['’]s(?:\s+is|:)\s+([A-Z0-9]{7,20})\b", sentence.text)]
        keywords = _KEYWORDS.findall(sentence.text)
        if keywords:
            previous_keyword = _KEYWORD_TYPES.get(keywords[-1].casefold(), keywords[-1].casefold())
        for start, end, declared in candidates:
            raw = doc.text[start:end]
            kind = declared or _shape_type(raw)
            if kind is None:
                continue
            if _issuer_prefix(doc, start):
                findings.append(_judge_issuer_prefix(doc, raw, (start, end)))
                continue
            finding = _check_schwifty(raw, kind) if kind in _SCHWIFTY_PARSERS else _check_stdnum(raw, kind)
            finding.span = (start, end)
            issuer = (_attributed_issuer(doc, sentence, start, end) or issuer_in_clause(doc, start)
                      if finding.verdict == "supported" else None)
            if issuer is not None and kind == "bic":
                finding = _bic_bank(finding, raw, issuer)
            elif issuer is not None:
                finding = judge_issuer(doc, finding, raw, kind, issuer, start) or _issuer_unverifiable(finding, issuer)
            findings.append(finding)
        findings.extend(_isin_cusip_mismatch(doc, [f for f in findings if sentence.start <= f.span[0] < sentence.end]))
    return findings


def _isin_cusip_mismatch(doc: Document, found: list[Finding]) -> list[Finding]:
    """A US/CA ISIN embeds the CUSIP (characters 3-11): both in one sentence must agree."""
    isins = [f for f in found if f.meta.get("type") == "isin" and f.verdict != "contradicted" and f.text[:2] in ("US", "CA")]
    cusips = [f for f in found if f.meta.get("type") == "cusip" and f.verdict != "contradicted"]
    out = []
    for cusip_finding in cusips:
        for isin_finding in isins:
            if isin_finding.text[2:11] != cusip_finding.text:
                later = max(isin_finding, cusip_finding, key=lambda f: f.span[0])
                out.append(Finding(later.text, later.span, "consistency", "contradicted", 0.9,
                                   [Evidence(kind="consistency", description=f"ISIN {isin_finding.text} embeds CUSIP "
                                             f"{isin_finding.text[2:11]}, not {cusip_finding.text}",
                                             source=package_source("python-stdnum"), locator="ISO 6166 (US/CA ISIN = "
                                             "country code + CUSIP + check digit)")]))
    return out


def _identifier_candidates(sentence: Sentence, bic_in_document: bool = False) -> list[tuple[int, int, str | None]]:
    """(start, end, declared type) in document offsets; the longest candidate wins an overlap."""
    keywords = [(m.start(), m.group(1).casefold()) for m in _KEYWORDS.finditer(sentence.text)]
    raw: list[tuple[int, int, str | None]] = []
    for shape, pattern in _CANDIDATES:
        for match in pattern.finditer(sentence.text):
            declared = _declared_type(keywords, match.start())
            if shape == "any" and declared is None:
                continue
            raw.append((match.start(), match.end(), declared))
    if any(k in ("bic", "swift") for _, k in keywords) or bic_in_document:
        for match in _BIC.finditer(sentence.text):
            # a BIC named in an answer about BICs ("DEUTDEFF is Deutsche Bank"), or declared by its keyword
            if _declared_type(keywords, match.start()) == "bic" or (bic_in_document and _bic_shaped(match.group(0))):
                raw.append((match.start(), match.end(), "bic"))
    raw.sort(key=lambda c: (c[0], -(c[1] - c[0])))
    out: list[tuple[int, int, str | None]] = []
    taken_until = -1
    for start, end, declared in raw:
        if start >= taken_until and (declared == "bic" or not sentence.text[start:end].isalpha()):
            out.append((sentence.start + start, sentence.start + end, declared))
            taken_until = end
    return out


def _declared_type(keywords: list[tuple[int, str]], position: int) -> str | None:
    """The identifier keyword closest before `position` within 60 characters ("SWIFT" means BIC)."""
    before = [(p, k) for p, k in keywords if p < position and position - p <= 60]
    if not before:
        # "021000021 passes the ABA checksum", "US0378331006 is a valid ISIN": the type named right after
        after = [(p, k) for p, k in keywords if position < p <= position + 45]
        return _KEYWORD_TYPES.get(after[0][1], after[0][1]) if after else None
    keyword = max(before)[1]
    return _KEYWORD_TYPES.get(keyword, keyword)


def _shape_type(raw: str) -> str | None:
    compact = raw.replace(" ", "")
    if compact[:2] in _iban_countries() and len(compact) >= 15 and compact[2:4].isdigit():
        return "iban"
    if compact.startswith("BBG") and len(compact) == 12:
        return "figi"
    if len(compact) == 12 and compact[:2].isalpha():
        return "isin"
    if len(compact) == 20:
        return "lei"
    return None


@cache
def _iban_countries() -> frozenset[str]:
    """Countries with an IBAN format in schwifty's spec registry."""
    from schwifty import registry

    countries: set[str] = set()
    for country in pycountry.countries:
        try:
            registry.get_iban_spec(country.alpha_2)
        except (KeyError, SchwiftyException):
            continue
        countries.add(country.alpha_2)
    return frozenset(countries)


_CITATION_RESOLUTION: dict[Verdict, Resolution] = {
    "supported": "resolved", "contradicted": "invalid", "unverifiable": "unconfirmed"}


def _identifier_finding(raw: str, kind: str, verdict: Verdict, confidence: float, evidence: list[Evidence]) -> Finding:
    """A finding on identifier `raw` of `kind` (the caller sets its span)."""
    return Finding(raw, (0, 0), "identifier", verdict, confidence, evidence,
                   citation=CitationCheck("identifier", _CITATION_RESOLUTION[verdict], None), meta={"type": kind})


def _check_stdnum(raw: str, kind: str) -> Finding:
    module = _STDNUM_MODULES[kind]
    source = package_source("python-stdnum")
    label = kind.upper()
    locator = f"stdnum.{module.__name__.split('stdnum.')[-1]}"
    try:
        module.validate(raw)
    except InvalidChecksum:
        return _identifier_finding(raw, kind, "contradicted", 0.99, [Evidence(
            kind="checksum", description=f"{raw} fails the {label} check-digit test", source=source, locator=locator)])
    except ValidationError as exc:
        return _identifier_finding(raw, kind, "contradicted", 0.95, [Evidence(
            kind="checksum", description=f"{raw} is not a valid {label}: {exc}", source=source, locator=locator)])
    return _identifier_finding(raw, kind, "supported", 0.9, [Evidence(
        kind="checksum", description=f"{raw} is a well-formed {label} with a valid check digit", source=source,
        locator=locator)])      # who issued it is a separate check (`issuers.py`), with its own evidence


# kind: (schwifty's class, confidence and evidence kind of the finding when it cannot parse the value, locator)
_SCHWIFTY_PARSERS: dict[str, tuple[type[IBAN] | type[BIC], float, str, str]] = {
    "iban": (IBAN, 0.99, "checksum", "schwifty.IBAN"),
    "bic": (BIC, 0.95, "registry", "schwifty.BIC (ISO 9362 structure)"),
}


def _check_schwifty(raw: str, kind: str) -> Finding:
    """An IBAN or a BIC: what schwifty cannot parse (structure, country, check digits) is invalid;
    a parsed value is judged by its kind."""
    parse, confidence, evidence_kind, locator = _SCHWIFTY_PARSERS[kind]
    source = package_source("schwifty")
    try:
        parsed = parse(raw)
    except SchwiftyException as exc:
        return _identifier_finding(raw, kind, "contradicted", confidence, [Evidence(
            kind=evidence_kind, description=f"{raw} is not a valid {kind.upper()}: {exc}", source=source,
            locator=locator)])
    return _judge_iban(raw, parsed, source) if isinstance(parsed, IBAN) else _judge_bic(raw, parsed, source)


def _judge_iban(raw: str, iban: IBAN, source: str) -> Finding:
    evidence = [Evidence(kind="checksum", description=f"{iban.formatted}: valid IBAN structure and check digits for "
                         f"{iban.country_code}", source=source, locator="schwifty.IBAN")]
    bank = iban.bank
    if bank:
        evidence.append(Evidence(kind="registry", description=f"bank code {iban.bank_code} belongs to {bank.get('name')}",
                                 source=source, locator="schwifty bank registry"))
    return _identifier_finding(raw, "iban", "supported", 0.95, evidence)


def _judge_bic(raw: str, bic: BIC, source: str) -> Finding:
    names = bic.bank_names
    if bic.exists or names:
        return _identifier_finding(raw, "bic", "supported", 0.9, [Evidence(
            kind="registry", description=f"{raw} is in the BIC registry: {names[0] if names else ''}",
            source=source, locator="schwifty BIC registry")])
    # schwifty's registry covers a few dozen countries: absence is "unknown", never "fabricated"
    return _identifier_finding(raw, "bic", "unverifiable", 0.5, [Evidence(
        kind="registry", description=f"{raw} is well-formed but absent from the offline BIC registry",
        source=source, locator="schwifty BIC registry")])




# -- issuers ---------------------------------------------------------------------------------------------
_VALIDITY_CLAIM = re.compile(r"\b(?:valid|check(?:s)? out|checksum|check digit|passes|is well-formed|mod[- ]?97|"
                             r"correct format|legitimate)\b", re.I)
_PROPER_NAME = re.compile(r"\b(?:[A-Z][\w&.'’-]*[a-z&][\w&.'’-]*|[A-Z]{2,}[a-z]*)(?:\s+(?:&\s+)?(?:[A-Z][\w&.'’-]*|of|and))*")
_NOT_ISSUERS = frozenset("""the a an its it it's their yes no like for commonly sure here this that these those both all
    isin lei cusip figi sedol iban bic swift aba rtn iso us uk eu gb de class shares share common stock
    as also and or with in on at by from to of is are was were be has have had can will may must
    each every one two three four five six seven eight nine ten first second third
    international securities identification number legal entity identifier identifier
    bank banks check checks digit digits valid note however""".split())


def _attributed_issuer(doc: Document, sentence: Sentence, start: int, end: int) -> str | None:
    """The issuer the text credits the identifier to, if any: a possessive ("Tesla's CUSIP is", "Its ISIN"),
    "of <Name>" / "for <Name>", a "Name: identifier" line, or another cell of its table row."""
    seg = doc.segment_of(start)
    if seg.cells:
        own = seg.cell_at(start)
        names = [c.text for c in seg.cells if c is not own and not re.search(r"\d{4}", c.text)]
        if names:
            return names[0]
    if seg.label is not None and seg.label[1] <= start:
        label = doc.text[seg.label[0]:seg.label[1]]
        if _name_in(label):
            return label
    clause = doc.clause_of(start)
    before = doc.text[clause[0]:start]
    after = doc.text[end:clause[1]]
    possessive = re.search(r"(?:\b(?:[Ii]ts|[Tt]heir)\b|(?P<name>[\w&.'’ -]{2,60}?)['’]s)\s+(?:[\w-]+\s+){0,4}?"
                           r"(?:ISIN|LEI|CUSIP|SEDOL|FIGI|routing number|code|identifier|ticker)?[^.;]{0,25}$", before)
    if possessive:
        name = possessive.group("name")
        if name is None or _name_in(name):
            return (name or "the company named before").strip()
    ownership = re.match(r"^\s*(?:belongs to|belonged to|is (?:owned by|issued to|assigned to|registered to))\s+(?P<name>[^.;]{2,60})", after)
    if ownership:
        return ownership.group("name").strip()
    owner = re.match(r"^[^.;]{0,30}?\b(?:of|for|belongs to|issued to|assigned to|is)\s+(?P<name>(?:the\s+)?[A-Z][^,.;()]{1,60})", after)
    if owner and _name_in(owner.group("name")) and not _VALIDITY_CLAIM.search(owner.group(0)):
        return owner.group("name").strip()
    of_name = re.search(r"\b(?:ISIN|LEI|CUSIP|SEDOL|FIGI|routing number|identifier)s?\s+(?:of|for)\s+(?P<name>[^,;:()]{2,60}?)"
                        r"\s*(?:is|are|:|=)?\s*$", before)
    if of_name and _name_in(of_name.group("name")):
        return of_name.group("name").strip()
    # "The Tesla ISIN US88160R1014", "Apple Inc. CUSIP: 037833100": the name used as a modifier.
    modifier = re.search(r"(?P<name>[A-Z][\w&.'’-]*(?:\s+(?:&\s+)?[A-Z][\w&.'’-]*)*)\s+(?:ISIN|LEI|CUSIP|SEDOL|FIGI)"
                         r"(?:\s+(?:code|number))?\s*(?:is|:|=)?\s*$", before)
    if modifier and _name_in(modifier.group("name")):
        return modifier.group("name").strip()
    name = re.search(r"(?P<name>[A-Z][^,.;:()]{1,60}?)\s+(?:carries|has|uses|trades? under|is listed with)\b", before)
    if name and _name_in(name.group("name")):
        return name.group("name").strip()
    return None


def _name_in(text: str) -> bool:
    """Does the text name a company or institution (a capitalised word that is not an identifier term)?"""
    for match in _PROPER_NAME.finditer(text):
        words = [w for w in re.findall(r"[\w&'’.-]+", match.group(0)) if w.casefold().strip(".'’") not in _NOT_ISSUERS]
        if words:
            return True
    return False


def _bic_bank(finding: Finding, raw: str, issuer: str) -> Finding:
    """A BIC the registry knows, credited to a bank: the registry's bank name must match the text's."""
    try:
        names = BIC(raw).bank_names
    except SchwiftyException:
        names = []
    if not names:
        return _issuer_unverifiable(finding, issuer)
    said = set(re.findall(r"[a-z]{3,}", issuer.casefold())) - {"bank", "the", "and", "group", "plc", "ag", "inc"}
    known = set(re.findall(r"[a-z]{3,}", " ".join(names).casefold()))
    if said & known:
        return finding
    finding.verdict = "contradicted"
    finding.confidence = 0.8
    finding.evidence.append(Evidence(kind="registry", description=f"{raw} belongs to {names[0]}, not {issuer}",
                                     source=package_source("schwifty"), locator="schwifty BIC registry"))
    return finding


def _issuer_unverifiable(finding: Finding, issuer: str) -> Finding:
    label = str(finding.meta.get("type", "identifier")).upper()
    finding.verdict = "unverifiable"
    finding.confidence = 0.5
    finding.evidence.append(Evidence(kind="rule", description=f"the text attributes this {label} to {issuer}; no "
                                     f"offline source holds the issuer of a {label}, so a valid check digit is no "
                                     "evidence that the attribution is right"))
    if finding.citation is not None:
        finding.citation = CitationCheck("identifier", "resolved", None)
    return finding


_ISSUER_PREFIX = re.compile(r"\bissuer\s+(?:prefix|number|code|id)\b[^.;\d]{0,15}$", re.I)


def _issuer_prefix(doc: Document, start: int) -> bool:
    return bool(_ISSUER_PREFIX.search(doc.text[max(0, start - 40):start]))


def _judge_issuer_prefix(doc: Document, raw: str, span: tuple[int, int]) -> Finding:
    """"CUSIP issuer prefix: 02079K": consistent with the CUSIPs and US/CA ISINs the answer gives."""
    embedding = [m.group(0) for m in re.finditer(r"\b(?:US|CA)?[0-9A-Z]{6}[0-9A-Z]{2,3}\d?\b", doc.text)
                 if m.group(0) != raw and raw in m.group(0)]
    source = package_source("python-stdnum")
    if embedding:
        return Finding(raw, span, "identifier", "supported", 0.8, [Evidence(
            kind="consistency", description=f"{raw} is the issuer number (first six CUSIP characters) of {embedding[0]} "
            "given in the same answer", source=source, locator="ANSI X9.6 (CUSIP issuer number)")],
            meta={"type": "cusip_issuer"})
    return Finding(raw, span, "identifier", "unverifiable", 0.5, [Evidence(
        kind="rule", description=f"{raw}: a CUSIP issuer number; no offline register of issuers")], meta={"type": "cusip_issuer"})


# -- formats -----------------------------------------------------------------------------------------------
_TYPE_WORDS = re.compile(r"\b(ISINs?|LEIs?|CUSIPs?|FIGIs?|SEDOLs?|IBANs?|BICs?|SWIFT(?: codes?)?|ABA routing numbers?|"
                         r"routing numbers?|Legal Entity Identifiers?|International Securities Identification Numbers?)\b")
_LENGTH = re.compile(r"(?P<low>\d{1,2})(?:\s*(?:or|to|-|–)\s*(?P<high>\d{1,2}))?[\s-]*(?:alphanumeric\s+)?"
                     r"(?:characters?|chars?|digits?|letters?)\b", re.I)
_STANDARD = re.compile(r"\bISO\s*(?P<number>\d{4,5})\b")


@validator("finance.identifier_formats")
def identifier_formats(doc: Document, params: Mapping[str, Any]) -> list[Finding]:
    """"An ISIN has twelve characters", "A BIC is either 8 or 11 characters", "defined by ISO 6166"."""
    if doc.kg is None:
        return []
    types = _identifier_types(id(doc.kg), doc.kg.version, doc.kg)
    findings: list[Finding] = []
    view = doc.view
    for seg in doc.segments:
        for clause in doc.clauses(seg):
            text = doc.text[clause[0]:clause[1]]
            for match in _LENGTH.finditer(view.text[_view_index(view, clause[0]):_view_index(view, clause[1])]):
                start, end = view.span(_view_index(view, clause[0]) + match.start(), _view_index(view, clause[0]) + match.end())
                if _length_of_a_part(doc.text, start, end):
                    continue
                entity = _identifier_type(doc, types, clause, start)
                if entity is None or entity.name == "IBAN" and _country_named(doc, clause):
                    continue     # a country's IBAN length is judged by finance.iban_length
                claimed = {int(match.group("low"))} | ({int(match.group("high"))} if match.group("high") else set())
                findings.append(_judge_length(doc, entity, claimed, (start, end), match.group(0), text))
            for match in _STANDARD.finditer(text):
                entity = _identifier_type(doc, types, clause, clause[0] + match.start())
                if entity is None or not entity.attributes.get("standard"):
                    continue
                span = (clause[0] + match.start(), clause[0] + match.end())
                stated = f"ISO {match.group('number')}"
                actual = str(entity.attributes["standard"])
                verdict = "supported" if actual.replace(" ", "") == stated.replace(" ", "") else "contradicted"
                findings.append(Finding(stated, span, "identifier_format", verdict, 0.9, [kg_evidence(
                    f"the {entity.name} standard is {actual}", entity.provenance, kind="registry")], subject=entity.id))
    return findings


# "a two-letter country code", "the first six characters", "a nine-character national code": the length of a
# part of the identifier, not of the identifier
_PART_BEFORE = re.compile(r"\b(?:first|last|next|final|middle|leading|trailing|remaining|other)\s+$", re.I)
_PART_AFTER = re.compile(r"^\s*(?:[\w-]+\s+){0,2}?(?:country|national|bank|branch|location|issuer|issue|check|"
                         r"institution|account|prefix|suffix|part|portion|segment|block|group)\b", re.I)


def _length_of_a_part(text: str, start: int, end: int) -> bool:
    return bool(_PART_BEFORE.search(text[max(0, start - 12):start]) or _PART_AFTER.match(text[end:end + 40])
                or re.match(r"^\s+(?:identify|identifies|are the|is the|make up|form)\b", text[end:end + 30], re.I))


def _view_index(view: Any, offset: int) -> int:
    """The view offset of a text offset (first view character at or after it)."""
    starts = view._starts
    lo, hi = 0, len(starts)
    while lo < hi:
        mid = (lo + hi) // 2
        if starts[mid] < offset:
            lo = mid + 1
        else:
            hi = mid
    return lo


@lru_cache(maxsize=8)   # per KG version: `entities(type)` walks every entity, 10k more after an SDN import
def _identifier_types(kg_id: int, kg_version: str, kg: KnowledgeGraph) -> dict[str, Any]:
    """The KG's identifier types by casefolded name (read-only)."""
    return {e.name.casefold(): e for e in kg.entities("identifier_type")}


def _identifier_type(doc: Document, types: dict[str, Any], clause: tuple[int, int], position: int) -> Any:
    """The identifier type named nearest before the value in its clause, else the one the sentence is about."""
    before = list(_TYPE_WORDS.finditer(doc.text[clause[0]:position]))
    found = before[-1] if before else None
    if found is None:
        seg = doc.segment_of(position)
        earlier = list(_TYPE_WORDS.finditer(doc.text[seg.start:position])) or list(_TYPE_WORDS.finditer(
            " ".join(s.text for s in doc.segments if s.end <= seg.start)[-300:]))
        found = earlier[-1] if earlier else None
    if found is None:
        return None
    word = re.sub(r"s$", "", found.group(1)).casefold()
    word = {"swift code": "bic", "swift": "bic", "aba routing number": "aba routing number",
            "routing number": "aba routing number", "legal entity identifier": "lei",
            "international securities identification number": "isin"}.get(word, word)
    return types.get(word)


def _country_named(doc: Document, clause: tuple[int, int]) -> bool:
    return any(clause[0] <= m.start < clause[1] for m in doc.mentions(["country"]))


def _judge_length(doc: Document, entity: Any, claimed: set[int], span: tuple[int, int], stated: str, text: str) -> Finding:
    spec = str(entity.attributes.get("length", ""))
    numbers = [int(n) for n in re.findall(r"\d+", spec)]
    if "-" in spec and len(numbers) == 2:
        allowed = set(range(numbers[0], numbers[1] + 1))
        holds = claimed <= allowed and (not re.search(r"\bat most|maximum|up to|longest\b", text, re.I) or max(claimed) == numbers[1])
    elif "up to" in spec:
        holds = max(claimed) <= numbers[0]
    else:
        holds = claimed == set(numbers) or (len(claimed) == 1 and claimed <= set(numbers) and "or" not in spec)
    evidence = [kg_evidence(f"{entity.name}: length {spec}", entity.provenance, kind="registry")]
    return Finding(doc.text[span[0]:span[1]], span, "identifier_format", "supported" if holds else "contradicted", 0.9,
                   evidence, subject=entity.id)
