"""`load_kg(domain)`: build a domain's knowledge graph once per process and hand out the cached graph; with
`keep_snapshots(directory)`, built once per change of its inputs and read back from there (`snapshot`)."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path

from knowledge_graphs import snapshot
from knowledge_graphs.curated import DATA_DIR
from knowledge_graphs.model import KnowledgeGraph
from knowledge_graphs.sources import finance, legal, medical
from knowledge_graphs.sources.common import DomainData

BUILDERS: dict[str, Callable[[Path], DomainData]] = {
    "finance": finance.build,
    "legal": legal.build,
    "medical": medical.build,
}
DOMAINS: tuple[str, ...] = tuple(sorted(BUILDERS))
_snapshot_dir: Path | None = None


class UnknownDomainError(ValueError):
    """Asked for a domain that has no knowledge graph."""


def build_kg(domain: str, data_dir: Path = DATA_DIR) -> KnowledgeGraph:
    """Build `domain`'s KG from installed packages + curated files under `data_dir` (uncached)."""
    if domain not in BUILDERS:
        raise UnknownDomainError(f"unknown KG domain {domain!r}; known domains: {', '.join(DOMAINS)}")
    data = BUILDERS[domain](data_dir)
    return KnowledgeGraph(domain, data.entities, data.facts, data_version=data.data_version)


def keep_snapshots(directory: Path | None) -> None:
    """From now on `load_kg` reads built KGs from `directory`, and keeps them there (None: builds them)."""
    global _snapshot_dir
    _snapshot_dir = directory


def load_snapshot(domain: str, directory: Path) -> KnowledgeGraph:
    """`domain`'s KG from its snapshot in `directory` (built and kept there when absent or stale), uncached."""
    if domain not in BUILDERS:   # before any file is named after it
        raise UnknownDomainError(f"unknown KG domain {domain!r}; known domains: {', '.join(DOMAINS)}")
    return snapshot.load_kg(domain, directory, lambda: build_kg(domain))


@cache
def load_kg(domain: str) -> KnowledgeGraph:
    """The shared, cached KG for `domain` ("finance", "medical", "legal"). Treat it as read-only."""
    return build_kg(domain) if _snapshot_dir is None else load_snapshot(domain, _snapshot_dir)


def clear_cache() -> None:
    """Forget cached graphs (tests, or after the data files changed on disk)."""
    load_kg.cache_clear()
