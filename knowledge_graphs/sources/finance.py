"""Finance KG: countries and currencies (pycountry) plus curated currency use, risk lists, thresholds.

Curated files in data/finance/:
- country_aliases.yaml, regulations.yaml, identifier_types.yaml, issuers.yaml: generic `entities:`/`facts:` records.
- currencies.yaml: `uses_currency:` records, each {source, locator, as_of, countries: {alpha-2: ISO 4217}}.
- risk_lists.yaml: `lists:` (the list entities) and `snapshots:` (one dated membership list each).
"""

from __future__ import annotations

from pathlib import Path

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
)
from knowledge_graphs.model import Entity, Fact
from knowledge_graphs.sources.common import DomainData, package_provenance, package_versions

PYCOUNTRY = "pycountry"
# ISO codes that are also everyday English words: as aliases they would make every "and", "can" or
# "all" in a text link to Andorra, Canada or the Albanian lek. They stay in attributes.
WORD_LIKE_CODES = frozenset({
    "ALL", "AND", "ARE", "BEL", "BEN", "BOB", "CAN", "COD", "COM", "CUB", "CUP", "DOM", "FIN", "GEL", "GIN",
    "GUY", "HUN", "JAM", "LIE", "MAC", "MAF", "MAR", "MOP", "NIC", "PAN", "PEN", "PER", "SOM", "SOS", "TOP",
    "TON", "TRY", "TUN", "WAS", "WON",
})


def build(data_dir: Path) -> DomainData:
    manifest = load_manifest("finance", data_dir)
    folder = data_dir / "finance"
    out = DomainData(data_version=f"{manifest.version};{package_versions(PYCOUNTRY)}")
    out.entities += country_entities(manifest)
    out.entities += currency_entities(manifest)
    for filename in ("country_aliases.yaml", "currency_aliases.yaml", "withdrawn_currencies.yaml", "regulations.yaml",
                     "identifier_types.yaml", "issuers.yaml"):
        entities, facts = load_generic(folder / filename, manifest)
        out.entities += entities
        out.facts += facts
    known = {e.id for e in out.entities}
    out.facts += currency_use_facts(folder / "currencies.yaml", manifest, known)
    list_entities, list_facts = risk_list_data(folder / "risk_lists.yaml", manifest, known)
    out.entities += list_entities
    out.facts += list_facts
    _check_references(out, folder)
    _check_identifiers(out, folder)
    return out


def _aliases(*forms: str | None) -> list[str]:
    return list(dict.fromkeys(f for f in forms if f and f not in WORD_LIKE_CODES))


def country_entities(manifest: Manifest) -> list[Entity]:
    import pycountry

    provenance = package_provenance(PYCOUNTRY, "ISO 3166-1 (pycountry.countries)", manifest, "pycountry")
    entities = []
    for country in pycountry.countries:
        official = getattr(country, "official_name", None)
        common = getattr(country, "common_name", None)
        entities.append(Entity(
            f"country:{country.alpha_2}", "country", country.name, _aliases(official, common, country.alpha_3),
            {"alpha_2": country.alpha_2, "alpha_3": country.alpha_3, "numeric": country.numeric,
             **({"official_name": official} if official else {}), **({"common_name": common} if common else {})},
            provenance))
    return entities


def currency_entities(manifest: Manifest) -> list[Entity]:
    import pycountry

    provenance = package_provenance(PYCOUNTRY, "ISO 4217 (pycountry.currencies)", manifest, "pycountry")
    return [Entity(f"currency:{c.alpha_3}", "currency", c.name, _aliases(c.alpha_3),
                   {"alpha_3": c.alpha_3, "numeric": getattr(c, "numeric", None)}, provenance)
            for c in pycountry.currencies]


def currency_use_facts(path: Path, manifest: Manifest, known: set[str]) -> list[Fact]:
    facts = []
    for where, rec in records(read_yaml(path), "uses_currency", path):
        provenance = provenance_of(rec, manifest, where=where)
        require(rec, ("countries",), where=where)
        for alpha_2, codes in rec["countries"].items():
            if not isinstance(alpha_2, str):   # YAML 1.1 reads an unquoted NO (Norway) as False
                raise CuratedDataError(f"{where}: country key {alpha_2!r} is not a string; quote ISO codes")
            for code in codes if isinstance(codes, list) else [codes]:
                subject, target = f"country:{alpha_2}", f"currency:{code}"
                for entity_id in (subject, target):
                    if entity_id not in known:
                        raise CuratedDataError(f"{where}: {entity_id} is not a pycountry country/currency")
                facts.append(Fact(subject, "uses_currency", target, provenance=provenance))
    return facts


def risk_list_data(path: Path, manifest: Manifest, known: set[str]) -> tuple[list[Entity], list[Fact]]:
    """List entities, and one `listed_on` fact per (country, dated snapshot); the list's as_of is its newest."""
    raw = read_yaml(path)
    lists: dict[str, Entity] = {}
    for where, rec in records(raw, "lists", path):
        require(rec, ("id", "name", "publisher", "url"), where=where)
        lists[rec["id"]] = Entity(rec["id"], "risk_list", rec["name"], list(rec.get("aliases") or []),
                                  {"publisher": rec["publisher"], "url": rec["url"], "as_of": None, "snapshots": []},
                                  provenance_of(rec, manifest, where=where))
    facts = []
    for where, rec in records(raw, "snapshots", path):
        require(rec, ("list", "countries"), where=where)
        provenance = provenance_of(rec, manifest, where=where)
        risk_list = lists.get(rec["list"])
        if risk_list is None:
            raise CuratedDataError(f"{where}: unknown list {rec['list']!r}; known: {', '.join(sorted(lists))}")
        as_of = iso_date(rec["as_of"], where=where)
        risk_list.attributes["snapshots"].append(as_of)
        risk_list.attributes["as_of"] = max(risk_list.attributes["snapshots"])
        for alpha_2 in rec["countries"]:
            if not isinstance(alpha_2, str) or f"country:{alpha_2}" not in known:
                raise CuratedDataError(f"{where}: country {alpha_2!r} is not an ISO 3166-1 alpha-2 code in pycountry")
            qualifiers = {"as_of": as_of, **({"instrument": rec["instrument"]} if rec.get("instrument") else {})}
            facts.append(Fact(f"country:{alpha_2}", "listed_on", risk_list.id, qualifiers=qualifiers, provenance=provenance))
    return list(lists.values()), facts


def latest_snapshot(facts: list[Fact], list_id: str) -> str | None:
    """The newest as_of among `listed_on` facts for `list_id` (validators compare claims to this one)."""
    dates = [f.qualifiers["as_of"] for f in facts if f.relation == "listed_on" and f.object == list_id]
    return max(dates) if dates else None


def _check_references(out: DomainData, folder: Path) -> None:
    known = {e.id for e in out.entities}
    for fact in out.facts:
        for entity_id in (fact.subject, fact.object):
            if entity_id is not None and entity_id not in known:
                raise CuratedDataError(f"{folder}: fact {fact.subject} -{fact.relation}-> names unknown entity {entity_id}")


def _check_identifiers(out: DomainData, folder: Path) -> None:
    """Every registered issuer identifier passes its check-digit test (a typo in the register fails the load)."""
    from stdnum import isin, lei
    from stdnum.us import rtn

    validators = {"isin": isin, "lei": lei, "aba_rtn": rtn}
    for fact in out.facts:
        if fact.relation != "has_identifier":
            continue
        kind = str(fact.qualifiers.get("type"))
        if kind not in validators or not validators[kind].is_valid(str(fact.value)):
            raise CuratedDataError(f"{folder}: {fact.subject} has_identifier {fact.value!r}: not a valid {kind}")
