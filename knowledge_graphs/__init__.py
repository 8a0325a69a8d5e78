"""Domain knowledge graphs with provenance: `load_kg("medical" | "finance" | "legal")`."""

from knowledge_graphs.curated import CuratedDataError
from knowledge_graphs.model import Entity, Fact, KnowledgeGraph, Provenance, normalise_alias
from knowledge_graphs.registry import (
    DOMAINS,
    UnknownDomainError,
    activate,
    build_kg,
    clear_cache,
    keep_snapshots,
    load_kg,
    load_snapshot,
    packaged_kg,
)

__all__ = [
    "DOMAINS", "CuratedDataError", "Entity", "Fact", "KnowledgeGraph", "Provenance", "UnknownDomainError",
    "activate", "build_kg", "clear_cache", "keep_snapshots", "load_kg", "load_snapshot", "normalise_alias",
    "packaged_kg",
]
