"""`ecfr-xml`: the Code of Federal Regulations in eCFR's XML (a whole title, or the part or section the eCFR
API returns), for any domain (Regulation Z and 31 CFR Chapter X in finance, agency rules in legal).

<DIV1 N="12" TYPE="TITLE"> ... <DIV5 N="1026" TYPE="PART"><HEAD>PART 1026—TRUTH IN LENDING (REGULATION Z)</HEAD>
... <DIV8 N="§ 1026.1" TYPE="SECTION"><HEAD>§ 1026.1 Purpose, coverage, and liability.</HEAD><P>...</P></DIV8>.
The title number is the DIV1's N, else the first field of a NODE attribute ("12:8.0.2.9.8"), as the API
writes it on a part downloaded alone. Ranges of reserved sections (N="§§ 1026.37-1026.39") are skipped.

Each part becomes a `regulation` (`cfr:<title>-<part>`, "12 CFR Part 1026", with its heading's "(REGULATION Z)"
as an alias) and each section one (`cfr:<title>-<section>`, "12 CFR 1026.1", with its C.F.R. spellings), with a
`has_heading` fact, `part_of` its part, and a `threshold` fact (unit USD, qualifiers `comparison` and `measure`:
the sentence) for each dollar amount the section's text states with a comparison ("in excess of $10,000",
"$3,000 or more"), which the finance threshold checker reads. A section the KG already holds under the same
citation (the packaged `regulation:31-cfr-1010-311`) gets the facts on that entity instead of a second one.
Coverage: the titles (whole-title files) and parts the file holds.
"""

from __future__ import annotations

import re
from typing import Any

from knowledge_graphs.imports.errors import ErrorLog, FieldError
from knowledge_graphs.imports.overlay import Overlay
from knowledge_graphs.imports.stamp import ImportStamp
from knowledge_graphs.imports.xml_records import XmlNode, xml_elements
from knowledge_graphs.model import Entity, Fact, KnowledgeGraph, Provenance

SOURCE = "Electronic Code of Federal Regulations (eCFR)"
_PART = re.compile(r"^[0-9]+[A-Z]?$")
_SECTION = re.compile(r"^§\s*(?P<section>(?P<part>[0-9]+[A-Z]?)\.[0-9A-Za-z][0-9A-Za-z.\-]*)$")
_PART_HEAD = re.compile(r"^PART\s+(?P<part>[0-9]+[A-Z]?)\s*[—–-]+\s*(?P<heading>.+)$", re.I)
_NICKNAME = re.compile(r"\(REGULATION (?P<letters>[A-Z]{1,3}(?:-[0-9])?)\)", re.I)   # "(REGULATION Z)"
_MONEY = r"\$\s?(?P<amount>\d{1,3}(?:,\d{3})+|\d+)(?:\.(?P<fraction>\d{1,2}))?(?P<million>\s+million)?"
_BEFORE = {"in excess of": "more than", "more than": "more than", "greater than": "more than",
           "exceeds": "more than", "exceed": "more than", "exceeding": "more than", "over": "more than",
           "at least": "at least", "not less than": "at least", "a minimum of": "at least",
           "less than": "less than", "below": "less than", "under": "less than",
           "not more than": "at most", "not exceeding": "at most", "not to exceed": "at most", "not exceed": "at most",
           "no more than": "at most", "does not exceed": "at most", "up to": "at most", "at most": "at most",
           "a maximum of": "at most"}
_AFTER = {"or more": "at least", "or greater": "at least", "or less": "at most", "or fewer": "at most"}
_THRESHOLD = re.compile(
    r"\b(?P<before>" + "|".join(sorted(map(re.escape, _BEFORE), key=len, reverse=True)) + r")\s+" + _MONEY
    + "|" + _MONEY.replace("(?P<", "(?P<a_") + r"\s+(?P<after>" + "|".join(map(re.escape, _AFTER)) + r")\b", re.I)


def parse(data: bytes, *, stamp: ImportStamp, kg: KnowledgeGraph) -> Overlay:
    reader = _Reader(stamp, kg)
    for node, ancestors in xml_elements(data, reader.log, {"HEAD", "DIV8"}):
        try:
            if node.tag == "DIV8" and node.attrib.get("TYPE", "SECTION") == "SECTION":
                reader.section(node, ancestors)
            elif node.tag == "HEAD" and ancestors and ancestors[-1].tag == "DIV5":
                reader.part(node, ancestors)
        except FieldError as exc:
            reader.log.add(node.line, exc.field, str(exc))
    reader.log.raise_if_any()
    return reader.overlay(kg.domain)


class _Reader:
    def __init__(self, stamp: ImportStamp, kg: KnowledgeGraph) -> None:
        self.stamp, self.kg = stamp, kg
        self.log = ErrorLog(stamp.file_name)
        self.entities: dict[str, Entity] = {}
        self.facts: list[Fact] = []
        self.seen: dict[str, int] = {}
        self.titles: set[str] = set()                 # whole titles in the file
        self.parts: dict[str, None] = {}
        self.rows = 0

    def overlay(self, domain: str) -> Overlay:
        overlay = Overlay(domain, self.stamp.overlay, list(self.entities.values()), self.facts, rows=self.rows)
        coverage: list[dict[str, Any]] = []
        if self.titles:
            coverage.append({"index": "cfr_title", "values": sorted(map(int, self.titles))})
        if self.parts:
            coverage.append({"index": "cfr_part", "values": list(self.parts)})
        overlay.coverage = coverage
        return overlay

    def part(self, head: XmlNode, ancestors: tuple[XmlNode, ...]) -> None:
        division = ancestors[-1]
        title = _title(ancestors, self.titles)
        part = division.attrib.get("N", "").strip()
        if not _PART.match(part):
            raise FieldError("N", f"the part number must be like 1026, got {part!r}")
        written = head.text()
        match = _PART_HEAD.match(written)
        if match is None or match["part"] != part:
            raise FieldError("HEAD", f"must read 'PART {part}—<heading>', got {written[:80]!r}")
        part_id = f"cfr:{title}-{part}"
        self._unique(part_id, head.line, "N")
        heading = match["heading"].strip().rstrip(".")
        provenance = self._provenance(head.line, f"{title} CFR Part {part}")
        aliases = [f"{title} C.F.R. Part {part}", f"{title} CFR {part}", f"{title} C.F.R. {part}"]
        aliases += [f"Regulation {nickname['letters'].upper()}" for nickname in _NICKNAME.finditer(heading)]
        self.entities[part_id] = Entity(part_id, "regulation", f"{title} CFR Part {part}", aliases,
                                        {"cfr_title": title, "part": part, "title": heading}, provenance)
        self.facts.append(Fact(part_id, "has_heading", value=heading, provenance=provenance))
        self.parts[f"{title}-{part}"] = None
        self.rows += 1

    def section(self, node: XmlNode, ancestors: tuple[XmlNode, ...]) -> None:
        written = node.attrib.get("N", "").strip()
        if written.startswith("§§"):
            return                                    # a range of reserved sections
        match = _SECTION.match(written)
        if match is None:
            raise FieldError("N", f"must be a section like '§ 1026.1', got {written!r}")
        title = _title((*ancestors, node), self.titles)
        section, part = match["section"], match["part"]
        head = node.find("HEAD")
        heading = head.text() if head is not None else ""
        heading = re.sub(r"^§+\s*" + re.escape(section) + r"\s*", "", heading).strip().rstrip(".")
        if not heading:
            raise FieldError("HEAD", "is empty: a section needs its heading")
        citation = f"{title} CFR {section}"
        known = [e.id for e in self.kg.lookup(citation) if e.type == "regulation"]
        section_id = known[0] if len(known) == 1 else f"cfr:{title}-{section}"
        self._unique(section_id, node.line, "N")
        provenance = self._provenance(node.line, citation)
        if not known:
            aliases = [f"{title} C.F.R. § {section}", f"{title} C.F.R. {section}", f"{title} CFR § {section}"]
            self.entities[section_id] = Entity(section_id, "regulation", citation, aliases,
                                               {"cfr_title": title, "part": part, "section": section, "title": heading},
                                               provenance)
        self.facts.append(Fact(section_id, "has_heading", value=heading, provenance=provenance))
        part_id = f"cfr:{title}-{part}"
        if part_id in self.entities or self.kg.entity(part_id) is not None:
            self.facts.append(Fact(section_id, "part_of", part_id, provenance=provenance))
        self.facts += [Fact(section_id, "threshold", value=value, unit="USD", qualifiers=qualifiers,
                            provenance=provenance) for value, qualifiers in thresholds(node.text())]
        self.rows += 1

    def _unique(self, entity_id: str, line: int, field_name: str) -> None:
        if entity_id in self.seen:
            raise FieldError(field_name, f"{entity_id} already appears on line {self.seen[entity_id]}")
        self.seen[entity_id] = line

    def _provenance(self, line: int, what: str) -> Provenance:
        return self.stamp.provenance(source=SOURCE, line=line, what=what)


def thresholds(text: str) -> list[tuple[int | float, dict[str, str]]]:
    """(amount, {comparison, measure}) for each dollar amount `text` states with a comparison, once each."""
    found: dict[tuple[int | float, str], dict[str, str]] = {}
    for match in _THRESHOLD.finditer(text):
        prefix = "" if match["before"] else "a_"
        phrase = (match["before"] or match["after"]).casefold()
        comparison = _BEFORE.get(phrase) or _AFTER[phrase]
        amount = float(match[prefix + "amount"].replace(",", "") + "." + (match[prefix + "fraction"] or "0"))
        if match[prefix + "million"]:
            amount *= 1_000_000
        value = int(amount) if amount.is_integer() else amount
        found.setdefault((value, comparison), {"comparison": comparison, "measure": _sentence(text, match.start())})
    return [(value, qualifiers) for (value, _), qualifiers in found.items()]


def _sentence(text: str, position: int) -> str:
    start = max(text.rfind(". ", 0, position), text.rfind("; ", 0, position))
    end = min(i for i in (text.find(". ", position), text.find("; ", position), len(text)) if i >= 0)
    sentence = text[start + 2 if start >= 0 else 0:end].strip()
    return sentence if len(sentence) <= 300 else sentence[:299].rstrip() + "…"


def _title(nodes: tuple[XmlNode, ...], titles: set[str]) -> str:
    for node in nodes:
        if node.tag == "DIV1" and node.attrib.get("TYPE") == "TITLE" and node.attrib.get("N", "").strip().isdigit():
            titles.add(node.attrib["N"].strip())
            return node.attrib["N"].strip()
    for node in reversed(nodes):
        title = node.attrib.get("NODE", "").split(":", 1)[0].strip()
        if title.isdigit():
            return title
    raise FieldError("NODE", "no title number: neither a <DIV1 TYPE=\"TITLE\" N=...> above it nor a NODE attribute")
