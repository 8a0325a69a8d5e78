"""The numpy MiniLM gives sentence-transformers' vectors (what the detector's classifier was trained on), counts
tokens as its tokenizer does, and loads without torch."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from knowledge_graphs.minilm import MAX_SEQ_LENGTH, load_encoder

TEXTS = [
    "Which warfarin dose interacts with high-dose aspirin in elderly patients?",
    "Is Iran on the FATF high-risk list this year?",
    "Cite the Second Circuit case on fabricated citations.",
    "ok",
    "",
    "Ünïcödé façade, 東京 and an emoji 🙂 in one line.",
    "word " * 300,   # past the 256-token limit: cut there, as sentence-transformers cuts it
    "A short one.",
]


@pytest.fixture(scope="module")
def reference():
    sentence_transformers = pytest.importorskip("sentence_transformers")
    from knowledge_graphs.minilm import model_path

    return sentence_transformers.SentenceTransformer(str(model_path()), device="cpu")


def test_the_vectors_are_sentence_transformers_vectors(reference) -> None:
    expected = reference.encode(TEXTS, normalize_embeddings=True, convert_to_numpy=True, batch_size=3)
    found = load_encoder().encode(TEXTS, batch_size=3)   # several batches, each padded to its own longest
    assert found.shape == expected.shape == (len(TEXTS), 384) and found.dtype == np.float32
    assert np.abs(found - expected).max() < 1e-5
    assert np.allclose(np.linalg.norm(found, axis=1), 1.0, atol=1e-5)


def test_a_text_gets_the_same_vector_alone_or_padded_in_a_batch() -> None:
    encoder = load_encoder()
    alone = encoder.encode([TEXTS[3]])
    batched = encoder.encode(TEXTS)[3:4]
    assert np.abs(alone - batched).max() < 1e-5


def test_token_counts_are_the_tokenizers_before_truncation(reference) -> None:
    expected = [len(ids) for ids in reference.tokenizer(TEXTS, add_special_tokens=True)["input_ids"]]
    assert load_encoder().token_counts(TEXTS) == expected
    assert max(expected) > MAX_SEQ_LENGTH


def test_no_texts_is_an_empty_matrix() -> None:
    assert load_encoder().encode([]).shape == (0, 384)


def test_it_loads_without_torch() -> None:
    code = ("import sys; from knowledge_graphs.minilm import load_encoder; load_encoder().encode(['a b']); "
            "print('torch' in sys.modules, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.split() == ["False", "False"]
