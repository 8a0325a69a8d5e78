"""Legal KG: reporters (reporters-db), courts (courts-db), curated cases, statutes and fabricated citations.

Curated files in data/legal/:
- cases.yaml: `cases:` records {name, citation "347 U.S. 483", year, court (courts-db id), aliases?,
  source, locator, as_of}; the builder parses the citation and adds decided_by/reported_in/decided_in_year.
- statutes.yaml: generic `entities:` records of type statute.
- fabricated.yaml: `fabricated:` records {name, citation, found_in, order, documented_in?, source, locator,
  as_of}; `documented_in` (a case id from cases.yaml) adds a documented_in fact (fabricated -> case).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from knowledge_graphs.curated import (
    CuratedDataError,
    Manifest,
    iso_date,
    load_generic,
    load_manifest,
    provenance_of,
    read_yaml,
    records,
    require,
    slugify,
)
from knowledge_graphs.model import Entity, Fact, Provenance
from knowledge_graphs.sources.common import DomainData, package_provenance, package_versions

REPORTERS_DB = "reporters-db"
COURTS_DB = "courts-db"
# "347 U.S. 483", "925 F.3d 1339", "678 F. Supp. 3d 443": volume, reporter abbreviation, first page.
CITATION = re.compile(r"^(?P<volume>\d+) (?P<reporter>.+?) (?P<page>\d+)$")


def build(data_dir: Path) -> DomainData:
    manifest = load_manifest("legal", data_dir)
    folder = data_dir / "legal"
    out = DomainData(data_version=f"{manifest.version};{package_versions(REPORTERS_DB, COURTS_DB)}")
    out.entities += reporter_entities(manifest)
    out.entities += court_entities(manifest)
    reporters = {e.id for e in out.entities if e.type == "reporter"}
    courts = {e.id for e in out.entities if e.type == "court"}
    entities, facts = case_data(folder / "cases.yaml", manifest, reporters, courts)
    out.entities += entities
    out.facts += facts
    for filename in ("statutes.yaml", "statute_facts.yaml", "gdpr.yaml", "case_holdings.yaml"):
        statutes, statute_facts = load_generic(folder / filename, manifest)
        out.entities += statutes
        out.facts += statute_facts
    entities, facts = fabricated_data(folder / "fabricated.yaml", manifest, {e.id for e in out.entities if e.type == "case"})
    out.entities += entities
    out.facts += facts
    return out


def _date(value: Any) -> str | None:
    """reporters-db/courts-db dates are 'YYYY-MM-DDT00:00:00', 'YYYY-MM-DD' or null; keep the ISO date."""
    return str(value)[:10] if value else None


def reporter_entities(manifest: Manifest) -> list[Entity]:
    """One entity per edition abbreviation (U.S., F., F.2d, F.3d, ...), so `reporter:F.3d` resolves.

    `editions` holds every edition of the series the abbreviation belongs to; `start`/`end` are this
    edition's own dates. Variant spellings from reporters-db ("U. S.", "F. 3d") become aliases.
    """
    from reporters_db import REPORTERS

    provenance = package_provenance(REPORTERS_DB, "reporters_db/data/reporters.json (REPORTERS)", manifest, "reporters_db")
    by_edition: dict[str, Entity] = {}
    for series_key, series_list in REPORTERS.items():
        for series in series_list:
            editions = {abbr: {"start": _date(d.get("start")), "end": _date(d.get("end"))}
                        for abbr, d in series["editions"].items()}
            variations: dict[str, list[str]] = {}
            for variant, canonical in (series.get("variations") or {}).items():
                variations.setdefault(canonical, []).append(variant)
            for abbr, dates in editions.items():
                entity_id = f"reporter:{abbr}"
                if entity_id in by_edition:  # the same abbreviation in two series (e.g. regional reprints)
                    known = by_edition[entity_id]
                    known.aliases.extend(v for v in variations.get(abbr, []) if v not in known.aliases)
                    known.attributes["editions"].update({a: d for a, d in editions.items() if a not in known.attributes["editions"]})
                    continue
                by_edition[entity_id] = Entity(
                    entity_id, "reporter", abbr, list(dict.fromkeys(variations.get(abbr, []))),
                    {"name": series.get("name"), "series": series_key, "cite_type": series.get("cite_type"),
                     "start": dates["start"], "end": dates["end"], "editions": dict(editions)},
                    provenance)
    return list(by_edition.values())


def court_entities(manifest: Manifest) -> list[Entity]:
    from courts_db import courts

    provenance = package_provenance(COURTS_DB, "courts_db/data/courts.json", manifest, "courts_db")
    entities = []
    for court in courts:
        dates = [{"start": _date(d.get("start")), "end": _date(d.get("end"))} for d in court.get("dates") or []]
        starts = [d["start"] for d in dates if d["start"]]
        ends = [d["end"] for d in dates]
        aliases = [court["citation_string"]] if court.get("citation_string") else []
        if court.get("name_abbreviation"):
            aliases.append(court["name_abbreviation"])
        entities.append(Entity(
            f"court:{court['id']}", "court", court["name"], list(dict.fromkeys(aliases)),
            {"dates": dates, "start": min(starts) if starts else None,
             # A court still sitting has an open (null) end in one of its date ranges.
             "end": None if (not ends or None in ends) else max(e for e in ends if e),
             "jurisdiction": court.get("jurisdiction"), "level": court.get("level") or None,
             "system": court.get("system"), "court_type": court.get("type"), "location": court.get("location"),
             "citation_string": court.get("citation_string") or None},
            provenance))
    return entities


def parse_citation(citation: str, *, where: str) -> tuple[int, str, int]:
    match = CITATION.match(citation.strip())
    if match is None:
        raise CuratedDataError(f"{where}: citation {citation!r} is not 'volume reporter page'")
    return int(match["volume"]), match["reporter"], int(match["page"])


def case_data(path: Path, manifest: Manifest, reporters: set[str], courts: set[str]) -> tuple[list[Entity], list[Fact]]:
    entities: list[Entity] = []
    facts: list[Fact] = []
    seen: set[str] = set()
    for where, rec in records(read_yaml(path), "cases", path):
        require(rec, ("name", "citation", "year", "court"), where=where)
        provenance = provenance_of(rec, manifest, where=where)
        volume, reporter, page = parse_citation(rec["citation"], where=where)
        reporter_id, court_id = f"reporter:{reporter}", f"court:{rec['court']}"
        if reporter_id not in reporters:
            raise CuratedDataError(f"{where}: reporter {reporter!r} is not in {REPORTERS_DB}")
        if court_id not in courts:
            raise CuratedDataError(f"{where}: court {rec['court']!r} is not a {COURTS_DB} id")
        case_id = f"case:{rec.get('slug') or slugify(rec['name'])}"
        if case_id in seen:
            raise CuratedDataError(f"{where}: duplicate case id {case_id}; give one of them a 'slug'")
        seen.add(case_id)
        short_names = [str(n) for n in rec.get("short_names") or []]     # curated: match only when capitalised
        extra: dict[str, Any] = {"short_names": short_names} if short_names else {}
        if rec.get("decided"):
            decided = iso_date(rec["decided"], where=where)
            if int(decided[:4]) != int(rec["year"]):
                raise CuratedDataError(f"{where}: decided {decided} is not in year {rec['year']}")
            extra["decided"] = decided
        entity, case_facts = case_record(case_id, rec["name"], list(rec.get("aliases") or []) + short_names,
                                         rec["citation"], int(rec["year"]), rec["court"], provenance, extra or None)
        entities.append(entity)
        facts += case_facts
    _add_short_names(entities)
    return entities, facts


def case_record(case_id: str, name: str, aliases: list[str], citation: str, year: int, court: str,
                provenance: Provenance, attributes: dict[str, Any] | None = None) -> tuple[Entity, list[Fact]]:
    """A case entity and its decided_by / reported_in / decided_in_year facts (the legal validators read the
    attributes: citation, volume, reporter, page, year, court). `citation` must be well formed."""
    volume, reporter, page = parse_citation(citation, where=case_id)
    entity = Entity(case_id, "case", name, aliases, {"citation": citation, "volume": volume, "reporter": reporter,
                                                     "page": page, "year": year, "court": court, **(attributes or {})},
                    provenance)
    return entity, [
        Fact(case_id, "decided_by", f"court:{court}", provenance=provenance),
        Fact(case_id, "reported_in", f"reporter:{reporter}", qualifiers={"volume": volume, "page": page},
             provenance=provenance),
        Fact(case_id, "decided_in_year", value=year, provenance=provenance),
    ]


# Parties that never name a case on their own ("United States v. Nixon" is not "United").
_GENERIC_PARTIES = frozenset("""united states state people commonwealth city county district columbia new york texas
    california virginia ohio maryland washington arizona florida board national international american federal
    sec fcc ftc epa students trustees regents president securities exchange commission department in re ex parte
    matter inc co corp llc ltd the of bell""".split())


def _add_short_names(entities: list[Entity]) -> None:
    """Short names lawyers use for a case ("Gideon", "Twombly", "Palsgraf"): the first distinctive word of
    either party, unless it is generic, an ordinary English word (wordfreq; "Loving", "Brown") or shared by
    two cases. They match only when written with a capital (see `rules.mentions`)."""
    from wordfreq import zipf_frequency

    candidates: dict[str, list[Entity]] = {}
    for entity in entities:
        parties = re.split(r"\s+v\.?\s+", entity.name, maxsplit=1)
        if len(parties) != 2:
            continue
        for party in parties:
            words = [w for w in re.findall(r"[A-Za-z][A-Za-z'-]+", party) if w.casefold() not in _GENERIC_PARTIES]
            if words and len(words[0]) > 3 and zipf_frequency(words[0], "en") < 3.5:
                candidates.setdefault(words[0], []).append(entity)
    for name, owners in candidates.items():
        if len(owners) == 1 and name not in owners[0].aliases:
            owners[0].aliases.append(name)
            owners[0].attributes.setdefault("short_names", []).append(name)


def fabricated_data(path: Path, manifest: Manifest, cases: set[str] | None = None) -> tuple[list[Entity], list[Fact]]:
    entities: list[Entity] = []
    facts: list[Fact] = []
    for where, rec in records(read_yaml(path), "fabricated", path):
        require(rec, ("name", "citation", "found_in", "order"), where=where)
        provenance = provenance_of(rec, manifest, where=where)
        entity_id = f"fabricated:{rec.get('slug') or slugify(rec['name'])}"
        entities.append(Entity(entity_id, "fabricated_citation", rec["name"], list(rec.get("aliases") or []),
                               {"citation": rec["citation"], "found_in": rec["found_in"]}, provenance))
        facts.append(Fact(entity_id, "fabrication_documented_in", value=rec["order"], provenance=provenance))
        documented_in = rec.get("documented_in")
        if documented_in is not None:
            if cases is not None and documented_in not in cases:
                raise CuratedDataError(f"{where}: documented_in {documented_in!r} is not a case in cases.yaml")
            facts.append(Fact(entity_id, "documented_in", object=str(documented_in), provenance=provenance))
    return entities, facts
