"""An engine core's warm start (`build_engine` with domain names and an index cache): the KG-constraint indices
and the KGs' outlines are on disk, so no whole KG is read, and the constraint holds the same domain as a cold start
built."""

from __future__ import annotations

from pathlib import Path

import pytest

import knowledge_graphs
from auditor.serving.engine_loading import build_engine

pytestmark = pytest.mark.timeout(240)


def test_a_warm_build_reads_no_whole_kg_and_constrains_the_same(tiny_checkpoint: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "index"
    cold = build_engine(tiny_checkpoint, ["finance"], index_cache_dir=cache)
    assert list(cache.glob("finance-*.kgoutline")) and list(cache.glob("finance-*.kgidx"))
    reads: list[str] = []
    real = knowledge_graphs.load_snapshot

    def counting(domain: str, directory: Path) -> knowledge_graphs.KnowledgeGraph:
        reads.append(domain)
        return real(domain, directory)

    monkeypatch.setattr(knowledge_graphs, "load_snapshot", counting)
    warm = build_engine(tiny_checkpoint, ["finance"], index_cache_dir=cache)
    assert reads == []
    [cold_masks] = [p.domains["finance"] for p in cold.processors if hasattr(p, "domains")]
    [warm_masks] = [p.domains["finance"] for p in warm.processors if hasattr(p, "domains")]
    assert warm_masks.kg_version == cold_masks.kg_version
    assert warm_masks.known_entity_ids == cold_masks.known_entity_ids and warm_masks.entity_ids == cold_masks.entity_ids
    for path in cache.glob("finance-*.kgidx"):   # without its index the warm build reads the KG to compile it
        path.unlink()
    build_engine(tiny_checkpoint, ["finance"], index_cache_dir=cache)
    assert reads == ["finance"]
