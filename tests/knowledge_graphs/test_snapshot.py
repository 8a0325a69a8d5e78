"""KG snapshots and what is derived from them, on disk between starts: read back on a warm start, rebuilt when
their key changes, ignored (and rebuilt) when damaged, never read for a KG that did not come from a snapshot."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from knowledge_graphs import disk_cache, snapshot
from knowledge_graphs.curated import DATA_DIR
from knowledge_graphs.linking import EntityLinker
from knowledge_graphs.model import KgOutline, KnowledgeGraph
from tests.knowledge_graphs.conftest import medical_kg

MAGIC = b"test1\n"


def _counting_build(calls: list[int]):
    def build() -> KnowledgeGraph:
        calls.append(1)
        return medical_kg()
    return build


def test_a_snapshot_is_built_once_and_read_back_equal(tmp_path: Path) -> None:
    calls: list[int] = []
    first = snapshot.load_kg("medical", tmp_path, _counting_build(calls))
    second = snapshot.load_kg("medical", tmp_path, _counting_build(calls))
    assert len(calls) == 1 and len(list(tmp_path.glob("medical-*.kg"))) == 1
    assert second is not first and second.version == first.version
    assert second.entity("drug:metformin").name == "Metformin"
    assert second.neighbours("drug:metformin") == first.neighbours("drug:metformin")


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "other_format"])
def test_a_damaged_snapshot_is_rebuilt_and_replaced(tmp_path: Path, damage: str) -> None:
    calls: list[int] = []
    snapshot.load_kg("medical", tmp_path, _counting_build(calls))
    [path] = tmp_path.glob("medical-*.kg")
    raw = bytearray(path.read_bytes())
    if damage == "flip":
        raw[len(raw) // 2] ^= 0xFF
    elif damage == "truncate":
        raw = raw[: len(raw) // 2]
    elif damage == "empty":
        raw = bytearray()
    else:
        raw[:4] = b"XXXX"
    path.write_bytes(bytes(raw))
    kg = snapshot.load_kg("medical", tmp_path, _counting_build(calls))
    assert len(calls) == 2 and kg.version == medical_kg().version
    snapshot.load_kg("medical", tmp_path, _counting_build(calls))
    assert len(calls) == 2   # the rebuilt file was written back whole


def test_changed_curated_data_is_a_new_key_and_the_old_file_goes(tmp_path: Path) -> None:
    data = tmp_path / "data"
    shutil.copytree(DATA_DIR / "finance", data / "finance")
    assert snapshot.kg_key("medical", data) == snapshot.kg_key("medical", data)
    before = snapshot.kg_key("medical", data)
    snapshot.kg_key.cache_clear()
    try:
        first = next(p for p in sorted((data / "finance").rglob("*")) if p.is_file())
        first.write_bytes(first.read_bytes() + b"\n# changed\n")
        assert snapshot.kg_key("medical", data) != before
        cache = tmp_path / "cache"
        calls: list[int] = []
        snapshot.load_kg("medical", cache, _counting_build(calls), data_dir=data)
        first.write_bytes(first.read_bytes() + b"# changed again\n")
        snapshot.kg_key.cache_clear()
        snapshot.load_kg("medical", cache, _counting_build(calls), data_dir=data)
        assert len(calls) == 2 and len(list(cache.glob("medical-*.kg"))) == 1
    finally:
        snapshot.kg_key.cache_clear()


def test_an_installed_package_changes_the_environment_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = disk_cache.environment_version()
    (tmp_path / "somepackage-1.0.dist-info").mkdir()
    monkeypatch.syspath_prepend(str(tmp_path))
    disk_cache.environment_version.cache_clear()
    try:
        assert disk_cache.environment_version() != before
    finally:
        disk_cache.environment_version.cache_clear()


def test_a_derived_index_is_read_back_and_points_at_the_loaded_kg(tmp_path: Path) -> None:
    built: list[int] = []

    def linker_of(kg: KnowledgeGraph):
        def build() -> EntityLinker:
            built.append(1)
            return EntityLinker(kg, types={"drug"})
        return build

    cold_kg = snapshot.load_kg("medical", tmp_path, medical_kg)
    cold = snapshot.derived(cold_kg, "linker.test", linker_of(cold_kg), kind=EntityLinker)
    warm_kg = snapshot.load_kg("medical", tmp_path, medical_kg)
    warm = snapshot.derived(warm_kg, "linker.test", linker_of(warm_kg), kind=EntityLinker)
    assert len(built) == 1
    assert warm.kg is warm_kg   # referred to, not a second copy of the KG inside the linker's file
    text = "She takes Glucophage and metoprolol for type 2 diabetes."
    assert [(m.entity_id, m.start, m.end) for m in warm.link(text)] == \
        [(m.entity_id, m.start, m.end) for m in cold.link(text)] != []


def test_a_kg_not_from_a_snapshot_is_never_read_from_disk(tmp_path: Path) -> None:
    snapshot.load_kg("medical", tmp_path, medical_kg)
    built: list[int] = []
    kg = medical_kg()   # same content, but built by the caller: its derived indices are built
    for _ in range(2):
        snapshot.derived(kg, "linker.test", lambda: built.append(1) or EntityLinker(kg), kind=EntityLinker)
    assert len(built) == 2 and not list(tmp_path.glob("*.kgsnap"))


def test_disk_cache_refuses_what_accept_refuses_and_unknown_references(tmp_path: Path) -> None:
    path = tmp_path / "x.bin"
    disk_cache.write(path, {"a": 1}, MAGIC)
    assert disk_cache.read(path, MAGIC, accept=lambda found: found == {"a": 1}) == {"a": 1}
    assert disk_cache.read(path, MAGIC, accept=lambda found: False) is None
    holder = {"kg": object()}
    disk_cache.write(path, [holder["kg"]], MAGIC, references=holder)
    assert disk_cache.read(path, MAGIC, accept=lambda found: True, references={}) is None   # refers to a missing one
    other = object()
    assert disk_cache.read(path, MAGIC, accept=lambda found: True, references={"kg": other}) == [other]


def test_an_unwritable_cache_directory_costs_a_rebuild_not_a_failure(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    value = disk_cache.load_or_build(blocker / "sub" / "x.bin", MAGIC, lambda: [1, 2], accept=lambda found: True)
    assert value == [1, 2]


def test_a_snapshot_keeps_an_outline_of_its_kg_that_goes_with_its_key(tmp_path: Path) -> None:
    assert snapshot.load_outline("medical", tmp_path) is None   # nothing built yet
    kg = snapshot.load_kg("medical", tmp_path, _counting_build([]))
    outline = snapshot.load_outline("medical", tmp_path)
    assert outline == KgOutline.of(kg) and outline.version == kg.version
    assert "drug:metformin" in outline.entity_ids and len(outline.entity_ids) == len(list(kg.entities()))
    [path] = tmp_path.glob("medical-*.kgoutline")
    path.write_bytes(path.read_bytes()[:-3])   # damaged: no outline, never a wrong one
    assert snapshot.load_outline("medical", tmp_path) is None
    snapshot.load_kg("medical", tmp_path, _counting_build([]))   # the next read of the KG writes it again
    assert snapshot.load_outline("medical", tmp_path) == outline


def test_changed_curated_data_has_no_outline_until_its_kg_is_read(tmp_path: Path) -> None:
    data = tmp_path / "data"
    shutil.copytree(DATA_DIR / "finance", data / "finance")
    cache = tmp_path / "cache"
    snapshot.kg_key.cache_clear()
    try:
        snapshot.load_kg("finance", cache, lambda: KnowledgeGraph("finance", [], []), data_dir=data)
        assert snapshot.load_outline("finance", cache, data_dir=data) is not None
        first = next(p for p in sorted((data / "finance").rglob("*")) if p.is_file())
        first.write_bytes(first.read_bytes() + b"\n# changed\n")
        snapshot.kg_key.cache_clear()
        assert snapshot.load_outline("finance", cache, data_dir=data) is None
    finally:
        snapshot.kg_key.cache_clear()
