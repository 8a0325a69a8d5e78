"""Curated YAML data: loading, provenance validation, and the generic entities/facts record format.

Every curated record must say where it came from (source, locator, as_of). A record without them does
not load: the error names the file and the record, so whoever edits the data sees what to fix.

Each domain folder holds a `manifest.yaml` (version + sources {id: {name, url, as_of}}); a record's
`source` is one of those ids and becomes the manifest's `name` in the record's Provenance.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from knowledge_graphs.model import Entity, Fact, Provenance

DATA_DIR = Path(__file__).parent / "data"
PROVENANCE_FIELDS = ("source", "locator", "as_of")
# libyaml's CSafeLoader parses the curated files several times faster than the pure-Python SafeLoader.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


class CuratedDataError(ValueError):
    """A curated data file is missing, malformed, or has a record without provenance."""


@dataclass(frozen=True, slots=True)
class Source:
    id: str
    name: str
    url: str
    as_of: str


@dataclass(frozen=True, slots=True)
class Manifest:
    domain: str
    version: str
    sources: dict[str, Source]
    path: Path


def read_yaml(path: Path) -> dict[str, Any]:
    """Parse one YAML file into a mapping, or raise CuratedDataError naming the file."""
    try:
        with path.open(encoding="utf-8") as handle:
            loaded = yaml.load(handle, Loader=_LOADER)   # a safe loader (see _LOADER)
    except FileNotFoundError as exc:
        raise CuratedDataError(f"{path}: curated data file not found") from exc
    except yaml.YAMLError as exc:
        raise CuratedDataError(f"{path}: invalid YAML: {exc}") from exc
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise CuratedDataError(f"{path}: top level must be a mapping, got {type(loaded).__name__}")
    return loaded


def iso_date(value: Any, *, where: str) -> str:
    """YAML turns 2025-06-13 into a date; accept that or a 'YYYY-MM-DD' string, return the string."""
    if isinstance(value, dt.datetime):
        return value.date().isoformat()
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, str) and _ISO_DATE.match(value):
        try:
            dt.date.fromisoformat(value)
        except ValueError:
            pass
        else:
            return value
    raise CuratedDataError(f"{where}: as_of must be an ISO date YYYY-MM-DD, got {value!r}")


def load_manifest(domain: str, data_dir: Path = DATA_DIR) -> Manifest:
    path = data_dir / domain / "manifest.yaml"
    raw = read_yaml(path)
    version = raw.get("version")
    if not version:
        raise CuratedDataError(f"{path}: manifest needs a non-empty 'version'")
    sources: dict[str, Source] = {}
    for source_id, body in (raw.get("sources") or {}).items():
        where = f"{path}: source {source_id!r}"
        if not isinstance(body, dict) or not body.get("name") or not body.get("url"):
            raise CuratedDataError(f"{where}: needs 'name', 'url' and 'as_of'")
        sources[str(source_id)] = Source(str(source_id), str(body["name"]), str(body["url"]),
                                         iso_date(body.get("as_of"), where=where))
    if not sources:
        raise CuratedDataError(f"{path}: manifest lists no sources")
    return Manifest(domain, str(version), sources, path)


def describe(record: Any, index: int) -> str:
    """A short human label for a record in error messages: its position plus an identifying field."""
    if isinstance(record, dict):
        for key in ("id", "name", "drug", "subject", "country", "citation"):
            if record.get(key):
                return f"record #{index} ({key}={record[key]!r})"
    return f"record #{index}"


def provenance_of(record: dict[str, Any], manifest: Manifest, *, where: str, locator_key: str = "locator") -> Provenance:
    """Build a record's Provenance, failing with a message naming `where` if any part is missing."""
    missing = [f for f in ("source", locator_key, "as_of") if record.get(f) in (None, "")]
    if missing:
        raise CuratedDataError(f"{where}: missing provenance field(s) {', '.join(missing)}")
    source_id = str(record["source"])
    if source_id not in manifest.sources:
        known = ", ".join(sorted(manifest.sources))
        raise CuratedDataError(f"{where}: unknown source {source_id!r}; manifest {manifest.path} lists: {known}")
    return Provenance(manifest.sources[source_id].name, str(record[locator_key]), iso_date(record["as_of"], where=where))


def records(raw: dict[str, Any], key: str, path: Path) -> list[tuple[str, dict[str, Any]]]:
    """The list under `key`, each paired with a 'file: record #i (...)' label; non-mappings are errors."""
    items = raw.get(key) or []
    if not isinstance(items, list):
        raise CuratedDataError(f"{path}: '{key}' must be a list")
    out = []
    for index, item in enumerate(items):
        where = f"{path}: {key} {describe(item, index)}"
        if not isinstance(item, dict):
            raise CuratedDataError(f"{where}: must be a mapping")
        out.append((where, item))
    return out


def require(record: dict[str, Any], fields: tuple[str, ...], *, where: str) -> None:
    missing = [f for f in fields if record.get(f) in (None, "", [])]
    if missing:
        raise CuratedDataError(f"{where}: missing field(s) {', '.join(missing)}")


def load_generic(path: Path, manifest: Manifest) -> tuple[list[Entity], list[Fact]]:
    """The generic format: top-level `entities:` and `facts:` lists, each record with its provenance."""
    raw = read_yaml(path)
    entities: list[Entity] = []
    facts: list[Fact] = []
    for where, rec in records(raw, "entities", path):
        require(rec, ("id", "type", "name"), where=where)
        entities.append(Entity(str(rec["id"]), str(rec["type"]), str(rec["name"]),
                               [str(a) for a in rec.get("aliases") or []], dict(rec.get("attributes") or {}),
                               provenance_of(rec, manifest, where=where)))
    for where, rec in records(raw, "facts", path):
        require(rec, ("subject", "relation"), where=where)
        if rec.get("object") is None and rec.get("value") is None:
            raise CuratedDataError(f"{where}: a fact needs an 'object' or a 'value'")
        facts.append(Fact(str(rec["subject"]), str(rec["relation"]), rec.get("object"), rec.get("value"),
                          rec.get("unit"), dict(rec.get("qualifiers") or {}), provenance_of(rec, manifest, where=where)))
    return entities, facts


def slugify(text: str) -> str:
    """'Brown v. Board of Education' -> 'brown-v-board-of-education' (stable ids for curated entities)."""
    return "-".join(re.findall(r"[a-z0-9]+", text.casefold()))
