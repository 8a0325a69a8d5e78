"""Who an identifier belongs to: "Microsoft's ISIN is US0378331005", "Barclays PLC: 213800LBQA1Y9L22JB70",
"Chase's routing number is 021000021", judged against the curated issuer register
(`knowledge_graphs/data/finance/issuers.yaml`).

A valid check digit says nothing about the issuer; the register does, for the issuers it holds. The rules,
closed-world only where the identifier scheme makes them so:
- the identifier is registered to the issuer the text names: supported (a share class or ticker the text
  gives must be the registered one: Alphabet's Class A ISIN called Class C is contradicted);
- the identifier is registered to another issuer the text could not mean: contradicted. An identifier
  belongs to one issuer, so this holds whoever the text names, but only a name the register knows is
  compared (an unknown name may be an alias or a subsidiary we do not hold);
- a bank and its parent (one `group`) are not told apart: unverifiable;
- a legal entity has exactly one LEI (ISO 17442): a different LEI for a registered issuer is contradicted.
  An issuer has many ISINs, CUSIPs and routing numbers (share classes, bonds, branches), so an unregistered
  one for a known issuer stays unverifiable;
- anything else: unverifiable, saying what was missing.
US/CA ISINs embed the CUSIP (characters 3-11) and GB00 ISINs the SEDOL (characters 5-11), so CUSIPs and
SEDOLs are derived from the registered ISINs.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache

from knowledge_graphs.model import Entity, Fact, KnowledgeGraph
from rules.claims import Document
from rules.report import Evidence
from rules.validators.base import CitationCheck, Finding, kg_evidence

# Corporate suffixes and articles: "Apple Inc.", "The Coca-Cola Company" and "Coca-Cola" name one issuer.
_SUFFIXES = frozenset("""the inc incorporated corporation corp co company plc ag se sa nv na ltd limited llc
    group holdings holding""".split())
_CLASS = re.compile(r"\bClass\s+(?P<letter>[A-C])\b")
_TICKER = re.compile(r"\(\s*(?:ticker:?\s*)?(?P<ticker>[A-Z]{1,5}(?:\.[A-B])?)\s*\)|\bticker\s+(?P<word>[A-Z]{1,5}(?:\.[A-B])?)\b")
# what a name may carry besides the issuer: "Chase in New York", "Apple's common stock", "the LEI of ..."
_LEADING = re.compile(r"^\s*(?:(?:and|or|but|while|whereas)\s+)?(?:(?:the\s+)?(?:ISIN|LEI|CUSIP|SEDOL|FIGI|routing number|code|"
                      r"identifier)\s+(?:of|for)\s+)?", re.I)
_TRAILING = re.compile(r"\s+(?:in|at)\s+(?:New York|London|the U\.?S\.?|the US)\b.*$|\s+(?:common|ordinary)\s+(?:stock|shares?)\b.*$"
                       r"|\s+Class\s+[A-C]\b.*$", re.I)
_TYPE_LABELS = {"isin": "ISIN", "cusip": "CUSIP", "sedol": "SEDOL", "lei": "LEI", "aba_rtn": "ABA routing number"}


@dataclass(frozen=True, slots=True)
class Registered:
    """One identifier in the register (a CUSIP or SEDOL derived from its ISIN keeps the ISIN's fact)."""

    issuer: Entity
    kind: str
    value: str
    share_class: str | None
    ticker: str | None
    fact: Fact


@dataclass(frozen=True, slots=True)
class Register:
    by_value: dict[str, Registered]
    by_name: dict[str, tuple[Entity, ...]]          # normalised name -> issuers (no repeats)
    names: re.Pattern[str] | None                   # every name as written, longest first
    first_words: frozenset[str]                     # the first word of every name: a cheap test before `names`


@lru_cache(maxsize=4096)
def normalise_name(text: str) -> str:
    """'The Coca-Cola Company' -> 'coca cola'; 'JPMorgan Chase & Co.' -> 'jpmorgan chase'; 'Nestlé S.A.' -> 'nestle'."""
    text = unicodedata.normalize("NFKD", text)
    text = "".join(c for c in text if not unicodedata.combining(c)).casefold()
    text = re.sub(r"[.'’]", "", text.replace("&", " and "))
    words = [w for w in re.findall(r"[a-z0-9]+", text) if w not in _SUFFIXES]
    while words and words[-1] == "and":
        words.pop()
    return " ".join(words)


@lru_cache(maxsize=4)
def register(kg_id: int, kg_version: str, kg: KnowledgeGraph) -> Register:
    """The issuer register of a KG version (built once)."""
    by_value: dict[str, Registered] = {}
    by_name: dict[str, dict[str, Entity]] = {}     # normalised name -> {entity id: issuer}
    written: set[str] = set()
    for issuer in kg.entities("issuer"):
        for name in [issuer.name, *issuer.attributes.get("names", [])]:
            by_name.setdefault(normalise_name(name), {})[issuer.id] = issuer
            written.add(name)
        for fact in kg.facts(issuer.id, "has_identifier"):
            kind, value = str(fact.qualifiers["type"]), str(fact.value)
            share_class, ticker = fact.qualifiers.get("share_class"), fact.qualifiers.get("ticker")
            by_value[value] = Registered(issuer, kind, value, share_class, ticker, fact)
            if kind == "isin" and value[:2] in ("US", "CA"):
                by_value[value[2:11]] = Registered(issuer, "cusip", value[2:11], share_class, ticker, fact)
            if kind == "isin" and value.startswith("GB00"):
                by_value[value[4:11]] = Registered(issuer, "sedol", value[4:11], share_class, ticker, fact)
    ordered = sorted(written, key=len, reverse=True)
    names = re.compile(r"(?<![\w])(?:" + "|".join(re.escape(n) for n in ordered) + r")(?![\w])") if ordered else None
    first_words = frozenset(re.split(r"[\s,]", n, maxsplit=1)[0] for n in written)
    return Register(by_value, {k: tuple(v.values()) for k, v in by_name.items()}, names, first_words)


def named_issuers(reg: Register, said: str) -> tuple[Entity, ...]:
    """The registered issuers a name as written could mean: the name itself, else a name in its parentheses
    ("Chase (JPMorgan Chase Bank) in New York" -> JPMorgan Chase Bank, N.A.)."""
    bare = _TRAILING.sub("", _LEADING.sub("", re.sub(r"\s*\([^)]*\)", "", said))).strip(" ,:")
    found = {e.id: e for e in reg.by_name.get(normalise_name(bare), ())}
    for inner in re.findall(r"\(([^)]*)\)", said):
        found.update((e.id, e) for e in reg.by_name.get(normalise_name(inner), ()))
    return tuple(found.values())


def antecedent_issuer(doc: Document, reg: Register, position: int) -> str | None:
    """For "Its ISIN ...": the registered issuer named last before `position` (within 300 characters)."""
    if reg.names is None:
        return None
    window_start = max(0, position - 300)
    found = list(reg.names.finditer(doc.text, window_start, position))
    return found[-1].group(0) if found else None


def issuer_in_clause(doc: Document, start: int) -> str | None:
    """"Google Class A (GOOGL) trades under ISIN ...": the one registered issuer named in the identifier's clause
    before it (none when two are named: "Apple and Microsoft have ISINs X and Y" pairs them by order)."""
    if doc.kg is None:
        return None
    reg = register(id(doc.kg), doc.kg.version, doc.kg)
    if reg.names is None:
        return None
    clause = doc.clause_of(start)
    words = {w.rstrip(".") for w in re.findall(r"[\w&.'’-]+", doc.text[clause[0]:start])}
    if reg.first_words.isdisjoint(words | {w[:-2] for w in words if w.endswith(("'s", "’s"))}):
        return None
    found = {normalise_name(m.group(0)): m.group(0) for m in reg.names.finditer(doc.text, clause[0], start)}
    return next(iter(found.values())) if len(found) == 1 else None


def judge_issuer(doc: Document, finding: Finding, raw: str, kind: str, said: str, start: int) -> Finding | None:
    """The verdict on `raw` (a valid identifier of `kind`) credited to `said`, or None when the register
    cannot decide (the caller keeps its unverifiable)."""
    if doc.kg is None:
        return None
    reg = register(id(doc.kg), doc.kg.version, doc.kg)
    if said == "the company named before":
        said = antecedent_issuer(doc, reg, start) or said
    named = named_issuers(reg, said)
    owner = reg.by_value.get(raw.replace(" ", ""))
    if owner is not None and kind not in (owner.kind, "any"):
        owner = None
    label = _TYPE_LABELS.get(owner.kind if owner else kind, kind.upper())
    if owner is not None and named:
        if owner.issuer.id in {n.id for n in named}:
            return _same_issuer(doc, finding, owner, said, start, label)
        if owner.issuer.attributes.get("group") and any(
                n.attributes.get("group") == owner.issuer.attributes["group"] for n in named):
            return None     # a bank and its parent: the register does not tell which one the text means
        return _judged(finding, "contradicted", 0.85, kg_evidence(
            f"{raw} is the {label} of {owner.issuer.name}, not of {named[0].name}", owner.fact.provenance, kind="registry"))
    if owner is None and kind == "lei" and len(named) == 1:
        known = [f for f in doc.kg.facts(named[0].id, "has_identifier") if f.qualifiers.get("type") == "lei"]
        if known:
            return _judged(finding, "contradicted", 0.8, kg_evidence(
                f"the LEI of {named[0].name} is {known[0].value}, not {raw} (a legal entity has one LEI, ISO 17442)",
                known[0].provenance, kind="registry"))
    return None


def _same_issuer(doc: Document, finding: Finding, owner: Registered, said: str, start: int, label: str) -> Finding:
    """The registered issuer: supported unless the text gives another share class or ticker."""
    clause = doc.clause_of(start)
    context = f"{said} {doc.text[clause[0]:start]}"
    stated_class = _CLASS.search(context)
    tickers = [m.group("ticker") or m.group("word") for m in _TICKER.finditer(context)]
    which = f" ({owner.share_class}, {owner.ticker})" if owner.share_class else ""
    evidence = kg_evidence(f"{owner.value} is the {label} of {owner.issuer.name}{which}", owner.fact.provenance,
                           kind="registry")
    if owner.share_class and (
            (stated_class and f"Class {stated_class.group('letter')}" != owner.share_class)
            or (tickers and owner.ticker not in tickers)):
        return _judged(finding, "contradicted", 0.85, evidence)
    return _judged(finding, "supported", 0.9, evidence)


def _judged(finding: Finding, verdict: str, confidence: float, evidence: Evidence) -> Finding:
    finding.verdict = verdict       # type: ignore[assignment]
    finding.confidence = confidence
    finding.evidence.append(evidence)
    if finding.citation is not None:
        # the identifier exists (valid check digit); whether it supports the attribution is the verdict
        finding.citation = CitationCheck("identifier", "resolved", verdict == "supported")
    return finding
