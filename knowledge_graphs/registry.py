"""`load_kg(domain)`: the domain's knowledge graph this process serves: the packaged graph, built once per
process (with `keep_snapshots(directory)`, built once per change of its inputs and read back from there,
`snapshot`), or the version `activate` made current (the packaged graph plus imported overlays)."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from pathlib import Path

from knowledge_graphs import snapshot
from knowledge_graphs.curated import DATA_DIR
from knowledge_graphs.fact_files import add_fact_files
from knowledge_graphs.model import KgOutline, KnowledgeGraph
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
    add_fact_files(data, domain, data_dir)
    return KnowledgeGraph(domain, data.entities, data.facts, data_version=data.data_version, relations=data.relations)


def keep_snapshots(directory: Path | None) -> None:
    """From now on `load_kg` reads built KGs from `directory`, and keeps them there (None: builds them)."""
    global _snapshot_dir
    _snapshot_dir = directory


def load_snapshot(domain: str, directory: Path) -> KnowledgeGraph:
    """`domain`'s KG from its snapshot in `directory` (built and kept there when absent or stale), uncached."""
    if domain not in BUILDERS:   # before any file is named after it
        raise UnknownDomainError(f"unknown KG domain {domain!r}; known domains: {', '.join(DOMAINS)}")
    return snapshot.load_kg(domain, directory, lambda: build_kg(domain))


def load_snapshot_outline(domain: str, directory: Path) -> KgOutline | None:
    """The outline of `domain`'s KG snapshot in `directory` (`snapshot.load_outline`), or None."""
    if domain not in BUILDERS:
        raise UnknownDomainError(f"unknown KG domain {domain!r}; known domains: {', '.join(DOMAINS)}")
    return snapshot.load_outline(domain, directory)


@cache
def packaged_kg(domain: str) -> KnowledgeGraph:
    """The KG `domain` ships with (packages + curated files), built once per process. Treat it as read-only."""
    return build_kg(domain) if _snapshot_dir is None else load_snapshot(domain, _snapshot_dir)


# Per domain, the KG version this process serves when it is not the packaged one (an import's overlays on
# it, see knowledge_graphs.imports); set by whoever follows the store's versions (auditor/kg/live.py).
_active: dict[str, KnowledgeGraph] = {}


def activate(kg: KnowledgeGraph) -> None:
    """From now on `load_kg(kg.domain)` answers `kg` in this process (validators, linking, scoring)."""
    _active[kg.domain] = kg


def deactivate(domain: str) -> None:
    """Back to the packaged KG for `domain` in this process."""
    _active.pop(domain, None)


def load_kg(domain: str) -> KnowledgeGraph:
    """The KG for `domain` ("finance", "medical", "legal") this process serves: the active version, else the
    packaged one. Treat it as read-only."""
    active = _active.get(domain)
    return active if active is not None else packaged_kg(domain)


def clear_cache() -> None:
    """Forget cached and activated graphs (tests, or after the data files changed on disk)."""
    packaged_kg.cache_clear()
    _active.clear()
