"""Small KG + two tokenizers trained on text full of its entity names (byte-level BPE and sentencepiece-style)."""

from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from knowledge_graphs.model import Entity, Fact, KnowledgeGraph, Provenance

SRC = Provenance("test fixture", "tests/knowledge_graphs/conftest.py", "2026-01-01")

# Names chosen for the hard cases: shared multi-token prefixes (Met-formin / Met-oprolol /
# Met-hotrexate), a name that is a prefix of another within one word (Estra / Estradiol), a name
# that is the suffix of a longer one (diabetes / type 2 diabetes), multiword names and acronyms.
ENTITIES = [
    Entity("drug:metformin", "drug", "Metformin", ["Glucophage"], provenance=SRC),
    Entity("drug:metoprolol", "drug", "Metoprolol", ["Lopressor"], provenance=SRC),
    Entity("drug:methotrexate", "drug", "Methotrexate", provenance=SRC),
    Entity("drug:aspirin", "drug", "Aspirin", ["ASA", "acetylsalicylic acid"], provenance=SRC),
    Entity("drug:estra", "drug", "Estra", provenance=SRC),
    Entity("drug:estradiol", "drug", "Estradiol", provenance=SRC),
    Entity("drug:ibuprofen", "drug", "Ibuprofen", ["Advil"], provenance=SRC),
    Entity("drug:warfarin", "drug", "Warfarin", ["Coumadin"], provenance=SRC),
    Entity("drug:atorvastatin", "drug", "Atorvastatin", ["Lipitor"], provenance=SRC),
    Entity("drug:helium", "drug", "Helium", ["He"], provenance=SRC),   # a 2-letter alias that is a word
    Entity("condition:t2d", "condition", "type 2 diabetes", ["T2DM"], provenance=SRC),
    Entity("condition:diabetes", "condition", "diabetes", provenance=SRC),
    Entity("condition:htn", "condition", "hypertension", ["high blood pressure"], provenance=SRC),
    Entity("icd10cm:E11.9", "icd10cm_code", "Type 2 diabetes mellitus without complications", ["E11.9"], provenance=SRC),
]
FACTS = [
    Fact("drug:metformin", "indicated_for", "condition:t2d", provenance=SRC),
    Fact("drug:metoprolol", "indicated_for", "condition:htn", provenance=SRC),
    Fact("drug:warfarin", "interacts_with", "drug:aspirin", qualifiers={"severity": "major"}, provenance=SRC),
    Fact("condition:t2d", "has_icd10cm_code", "icd10cm:E11.9", provenance=SRC),
]

_SENTENCES = [
    "The patient takes {} daily.", "Stop {} before surgery.", "{} was started last week.",
    "Is {} safe with alcohol?", "Dose of {}, twice a day.", "We switched from {} to {}.",
    "({}) and {}; {}: {}!", "no {}, more {} and {}",
]


def corpus() -> list[str]:
    names = [form for e in ENTITIES for form in e.surface_forms]
    lines = []
    for i, template in enumerate(_SENTENCES * 6):
        picks = [names[(i * 7 + k * 3) % len(names)] for k in range(template.count("{}"))]
        picks = [p.lower() if (i + k) % 3 == 0 else p.upper() if (i + k) % 5 == 0 else p for k, p in enumerate(picks)]
        lines.append(template.format(*picks))
    lines += ["the theory is that metals meet the standard of care", "Metro estate metadata advice"] * 3
    return lines


def medical_kg() -> KnowledgeGraph:
    return KnowledgeGraph("medical", ENTITIES, FACTS, data_version="test")


def byte_level_bpe() -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=420, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(corpus(), trainer)
    return tokenizer


def sentencepiece_bpe() -> Tokenizer:
    """Llama-style: Metaspace "▁" pieces, BPE with byte fallback (<0xNN> pieces for unseen bytes)."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always")
    trainer = trainers.BpeTrainer(vocab_size=360, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False)
    tokenizer.train_from_iterator(corpus(), trainer)
    state = json.loads(tokenizer.to_str())
    vocab: dict[str, int] = state["model"]["vocab"]
    for byte in range(256):
        vocab.setdefault(f"<0x{byte:02X}>", len(vocab))
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in state["model"]["merges"]]
    rebuilt = Tokenizer(models.BPE(vocab=vocab, merges=merges, byte_fallback=True, unk_token="<unk>"))
    rebuilt.add_special_tokens(["<unk>", "<s>", "</s>"])
    rebuilt.pre_tokenizer = tokenizer.pre_tokenizer
    rebuilt.decoder = decoders.Sequence([
        decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0),
    ])
    return rebuilt


@pytest.fixture(scope="session")
def kg() -> KnowledgeGraph:
    return medical_kg()


@pytest.fixture(scope="session", params=["byte_level_bpe", "sentencepiece_bpe"])
def tokenizer(request: pytest.FixtureRequest) -> Tokenizer:
    return {"byte_level_bpe": byte_level_bpe, "sentencepiece_bpe": sentencepiece_bpe}[request.param]()
