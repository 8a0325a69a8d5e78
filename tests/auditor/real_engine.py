"""The real engine on a tiny random checkpoint, with a tiny hand-built medical KG, for service tests."""

from __future__ import annotations

from pathlib import Path

from auditor.serving import runtime
from engine.synthetic import write_tiny_checkpoint
from knowledge_graphs.model import Entity, Fact, KnowledgeGraph, Provenance

_LABEL = Provenance("test fixture (hand-written)", "tests/auditor/real_engine.py", "2026-12-02")
_TEXTS = [
    "Metformin is indicated for type 2 diabetes. Warfarin interacts with aspirin.",
    "The patient was prescribed 500 mg of metformin twice daily.",
    '{"answer": "metformin", "dose_mg": 500, "daily": true, "notes": null}',
    "Hello world! How are you today? I am fine, thank you. 0123456789",
]


def tiny_medical_kg() -> KnowledgeGraph:
    entities = [
        Entity("drug:DB00331", "drug", "Metformin", ["Glucophage"], provenance=_LABEL),
        Entity("drug:DB00682", "drug", "Warfarin", ["Coumadin"], provenance=_LABEL),
        Entity("drug:DB00945", "drug", "Aspirin", [], provenance=_LABEL),
        Entity("condition:type-2-diabetes", "condition", "type 2 diabetes", ["T2DM"], provenance=_LABEL),
    ]
    facts = [
        Fact("drug:DB00331", "indicated_for", "condition:type-2-diabetes", provenance=_LABEL),
        Fact("drug:DB00682", "interacts_with", "drug:DB00945", provenance=_LABEL),
        Fact("drug:DB00331", "max_daily_dose", value=2550, unit="mg",
             qualifiers={"route": "oral", "population": "adult"}, provenance=_LABEL),
    ]
    return KnowledgeGraph("medical", entities, facts, data_version="auditor-test")


def write_checkpoint(path: Path) -> Path:
    return write_tiny_checkpoint(path, vocab_from_texts=_TEXTS, vocab_size=400, max_position_embeddings=512)


def build_real_runtime(checkpoint: Path) -> tuple[object, runtime.RulesVerifier, runtime.KgKnowledge]:
    """(engine, verifier, knowledge) on a tiny checkpoint folder (see `write_checkpoint`)."""
    kgs = {"medical": tiny_medical_kg()}
    return runtime.load_engine(checkpoint, kgs), runtime.RulesVerifier(kgs), runtime.KgKnowledge(kgs)
