"""What every domain builder returns, and provenance for data that comes from an installed package."""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import metadata

from knowledge_graphs.curated import CuratedDataError, Manifest
from knowledge_graphs.model import Entity, Fact, Provenance, RelationSpec


@dataclass(slots=True)
class DomainData:
    entities: list[Entity] = field(default_factory=list)
    facts: list[Fact] = field(default_factory=list)
    data_version: str = "0"
    relations: list[RelationSpec] = field(default_factory=list)


def package_provenance(distribution: str, locator: str, manifest: Manifest, source_id: str) -> Provenance:
    """`package==version` as source (the installed one, so an upgrade changes provenance and KG version);
    as_of from the manifest entry for that package (data release date or the date it was read)."""
    if source_id not in manifest.sources:
        raise CuratedDataError(f"{manifest.path}: no source {source_id!r} for package {distribution}")
    version = metadata.version(distribution)
    return Provenance(f"{distribution}=={version}", locator, manifest.sources[source_id].as_of)


def package_versions(*distributions: str) -> str:
    """Part of the data version: the exact package versions the package-derived entities came from."""
    return ",".join(f"{d}=={metadata.version(d)}" for d in distributions)
