"""The compiled KG-constraint index on disk: reused on a warm start, rebuilt when any key part changes,
ignored (and rebuilt) when the file is corrupt, and the masks are the same either way."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine.sampling_params import SamplingParams
from knowledge_graphs.decoding import constraint_masks
from knowledge_graphs.decoding.constraint import KGConstraintProcessor
from knowledge_graphs.model import Entity, KgOutline, KnowledgeGraph, Provenance
from tests.knowledge_graphs.conftest import ENTITIES, FACTS

ALLOWED = ["drug:metformin", "condition:t2d"]


def _processor(kg: KnowledgeGraph, tokenizer, cache_dir: Path | None) -> KGConstraintProcessor:
    eos = tokenizer.token_to_id("</s>") or 0
    return KGConstraintProcessor(tokenizer, vocab_size=tokenizer.get_vocab_size(), eos_token_ids=[eos],
                                 kgs={"medical": kg}, index_cache_dir=cache_dir)


def _first_masks(processor: KGConstraintProcessor, tokenizer, text: str) -> list[list[float]]:
    """The masked logits over the first tokens of `text`, as the engine would apply them."""
    params = SamplingParams(extra_args={"kg_constraint": {"domain": "medical", "allowed_entity_ids": ALLOWED}})
    processor.add_request("r", params, [1], [])
    rows = []
    for token_id in tokenizer.encode(text, add_special_tokens=False).ids[:6]:
        logits = torch.zeros(1, tokenizer.get_vocab_size())
        processor.apply(logits, ["r"])
        rows.append(logits[0].tolist())
        processor.accept_token("r", token_id)
    processor.remove_request("r")
    return rows


def _count_compiles(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    real = constraint_masks.compile_domain

    def counting(kg, *args, **kwargs):
        calls.append(kg.version)
        return real(kg, *args, **kwargs)

    monkeypatch.setattr("knowledge_graphs.decoding.constraint.compile_domain", counting)
    return calls


def test_a_warm_start_reads_the_index_and_masks_the_same(kg, tokenizer, tmp_path, monkeypatch) -> None:
    calls = _count_compiles(monkeypatch)
    cold = _processor(kg, tokenizer, tmp_path)
    assert len(calls) == 1 and len(list(tmp_path.glob("medical-*.kgidx"))) == 1
    warm = _processor(kg, tokenizer, tmp_path)
    assert len(calls) == 1   # read back, not compiled
    uncached = _processor(kg, tokenizer, None)
    text = " Metoprolol and metformin for type 2 diabetes"
    assert _first_masks(warm, tokenizer, text) == _first_masks(cold, tokenizer, text) == _first_masks(uncached, tokenizer, text)


def test_a_changed_kg_is_rebuilt_and_replaces_the_old_file(kg, tokenizer, tmp_path, monkeypatch) -> None:
    calls = _count_compiles(monkeypatch)
    _processor(kg, tokenizer, tmp_path)
    extra = Entity("drug:lisinopril", "drug", "Lisinopril", provenance=Provenance("test", "here", "2026-01-01"))
    changed = KnowledgeGraph("medical", [*ENTITIES, extra], FACTS, data_version="test")
    assert changed.version != kg.version
    processor = _processor(changed, tokenizer, tmp_path)
    assert calls == [kg.version, changed.version]
    assert "drug:lisinopril" in processor.domains["medical"].entity_ids
    assert len(list(tmp_path.glob("medical-*.kgidx"))) == 1   # the stale key is gone


def test_a_changed_code_version_is_a_new_key(kg, tokenizer, tmp_path, monkeypatch) -> None:
    calls = _count_compiles(monkeypatch)
    _processor(kg, tokenizer, tmp_path)
    monkeypatch.setattr("knowledge_graphs.decoding.index_cache.code_version", lambda: "another build")
    _processor(kg, tokenizer, tmp_path)
    assert len(calls) == 2


@pytest.mark.parametrize("damage", ["truncate", "flip_byte", "garbage", "empty", "wrong_pickle"])
def test_a_corrupt_file_is_ignored_and_rebuilt(kg, tokenizer, tmp_path, monkeypatch, damage) -> None:
    calls = _count_compiles(monkeypatch)
    _processor(kg, tokenizer, tmp_path)
    (path,) = tmp_path.glob("medical-*.kgidx")
    raw = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(raw[: len(raw) // 2])
    elif damage == "flip_byte":
        path.write_bytes(raw[:-10] + bytes([raw[-10] ^ 0xFF]) + raw[-9:])
    elif damage == "garbage":
        path.write_bytes(b"not a cache file at all")
    elif damage == "empty":
        path.write_bytes(b"")
    else:   # a well-formed file whose content is not an index (its digest matches what it holds)
        import hashlib
        import pickle

        payload = pickle.dumps({"something": "else"})
        path.write_bytes(b"kgidx1\n" + hashlib.sha256(payload).digest() + payload)
    processor = _processor(kg, tokenizer, tmp_path)
    assert len(calls) == 2 and "drug:metformin" in processor.domains["medical"].entity_ids
    assert _processor(kg, tokenizer, tmp_path) and len(calls) == 2   # the rebuilt file is good again


def test_an_unwritable_cache_dir_still_starts(kg, tokenizer, tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where the directory should be")
    processor = _processor(kg, tokenizer, blocker / "cache")
    assert "drug:metformin" in processor.domains["medical"].entity_ids


def test_registering_from_the_outline_reads_no_kg_when_the_index_is_on_disk(kg, tokenizer, tmp_path) -> None:
    cold = _processor(kg, tokenizer, tmp_path)   # compiles and writes the index
    reads: list[int] = []

    def whole_kg() -> KnowledgeGraph:
        reads.append(1)
        return kg

    eos = tokenizer.token_to_id("</s>") or 0
    warm = KGConstraintProcessor(tokenizer, vocab_size=tokenizer.get_vocab_size(), eos_token_ids=[eos],
                                 index_cache_dir=tmp_path)
    warm.register_outline(KgOutline.of(kg), whole_kg)
    assert reads == []
    assert warm.domains["medical"].kg_version == kg.version
    assert warm.domains["medical"].known_entity_ids == cold.domains["medical"].known_entity_ids
    text = " Metformin and metoprolol for type 2 diabetes"
    assert _first_masks(warm, tokenizer, text) == _first_masks(cold, tokenizer, text)
    elsewhere = KGConstraintProcessor(tokenizer, vocab_size=tokenizer.get_vocab_size(), eos_token_ids=[eos],
                                      index_cache_dir=tmp_path / "empty")
    elsewhere.register_outline(KgOutline.of(kg), whole_kg)   # no index there: the whole KG is read to compile it
    assert reads == [1] and _first_masks(elsewhere, tokenizer, text) == _first_masks(cold, tokenizer, text)
