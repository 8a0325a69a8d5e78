"""`uslm-xml`: the United States Code in USLM XML, as the Office of the Law Revision Counsel publishes each title.

<uscDoc identifier="/us/usc/t42"> ... <section identifier="/us/usc/t42/s1983"><num value="1983">§ 1983.</num>
<heading>Civil action for deprivation of rights</heading><content>...</content><notes>...</notes></section>.
A section is read by its identifier (`/us/usc/t<title>/s<section>`); sections quoted inside notes and
amendments (`quotedContent`) are text of another section, not sections of the Code, and are skipped. A
repealed or transferred section (`status="repealed"`) is imported with its status.

Each section becomes a `statute` (`usc:<title>-<section>`, "42 U.S.C. § 1983", with its other spellings as
aliases) with a `has_heading` fact; a section the KG already holds under the same citation (the packaged
`statute:42-usc-1983`) gets the heading on that entity instead of a second one. Coverage: the titles in the
file (`usc_title`), each complete as published.
"""

from __future__ import annotations

import re

from knowledge_graphs.imports.errors import ErrorLog, FieldError
from knowledge_graphs.imports.overlay import Overlay
from knowledge_graphs.imports.stamp import ImportStamp
from knowledge_graphs.imports.xml_records import XmlNode, child_text, xml_elements
from knowledge_graphs.model import Entity, Fact, KnowledgeGraph

DOMAIN = "legal"
SOURCE = "United States Code (Office of the Law Revision Counsel), USLM XML"
_IDENTIFIER = re.compile(r"^/us/usc/t(?P<title>[0-9]+a?)/s(?P<section>[0-9]+[A-Za-z0-9\-–]*)$")


def parse(data: bytes, *, stamp: ImportStamp, kg: KnowledgeGraph) -> Overlay:
    log = ErrorLog(stamp.file_name)
    overlay = Overlay(DOMAIN, stamp.overlay)
    seen: dict[str, int] = {}
    titles: dict[str, None] = {}
    for node, ancestors in xml_elements(data, log, {"section"}):
        if any(a.tag in ("quotedContent", "notes", "note") for a in ancestors):
            continue
        try:
            entity, facts = _section(node, stamp, kg, seen, titles)
        except FieldError as exc:
            log.add(node.line, exc.field, str(exc))
            continue
        if entity is not None:
            overlay.entities.append(entity)
        overlay.facts += facts
        overlay.rows += 1
    log.raise_if_any()
    if titles:
        overlay.coverage = [{"index": "usc_title", "values": [int(t) if t.isdigit() else t for t in titles]}]
    return overlay


def _section(node: XmlNode, stamp: ImportStamp, kg: KnowledgeGraph, seen: dict[str, int],
             titles: dict[str, None]) -> tuple[Entity | None, list[Fact]]:
    identifier = node.attrib.get("identifier", "").strip()
    match = _IDENTIFIER.match(identifier)
    if match is None:
        raise FieldError("identifier", f"must be like /us/usc/t42/s1983, got {identifier!r}")
    title, section = match["title"], match["section"].replace("–", "-")
    number = child_text(node, "num")
    if number is None:
        raise FieldError("num", "is empty")
    heading = (child_text(node, "heading") or "").strip().rstrip(".")
    status = node.attrib.get("status", "").strip()
    if not heading and not status:
        raise FieldError("heading", "is empty")
    citation = f"{title} U.S.C. § {section}"
    known = [e.id for e in kg.lookup(citation) if e.type == "statute"]
    section_id = known[0] if len(known) == 1 else f"usc:{title}-{section}"
    if section_id in seen:
        raise FieldError("identifier", f"{identifier} already appears on line {seen[section_id]}")
    seen[section_id] = node.line
    titles[title] = None
    provenance = stamp.provenance(source=SOURCE, line=node.line, what=citation)
    facts = [Fact(section_id, "has_heading", value=heading or status, provenance=provenance)]
    if known:
        return None, facts
    attributes = {"usc_title": title, "section": section, "title": heading or status}
    if status:
        attributes["status"] = status
    aliases = [f"{title} USC {section}", f"{title} U.S.C. {section}", f"{title} U.S.C. §{section}",
               f"{title} USC § {section}"]
    return Entity(section_id, "statute", citation, aliases, attributes, provenance), facts
