"""Our MiniLM, on ONNX Runtime and in numpy, gives sentence-transformers' vectors (what the detector's classifier
was trained on), counts tokens as its tokenizer does, and loads without torch."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from knowledge_graphs.minilm import MAX_SEQ_LENGTH, MiniLMEncoder, load_encoder, model_path

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


@pytest.fixture(scope="module", params=["onnxruntime", "numpy"])
def encoder(request: pytest.FixtureRequest) -> MiniLMEncoder:
    built = MiniLMEncoder(model_path(), backend=request.param)
    assert built.backend == request.param
    return built


def test_the_vectors_are_sentence_transformers_vectors(reference, encoder) -> None:
    expected = reference.encode(TEXTS, normalize_embeddings=True, convert_to_numpy=True, batch_size=3)
    found = encoder.encode(TEXTS, batch_size=3)   # several batches, each padded to its own longest
    assert found.shape == expected.shape == (len(TEXTS), 384) and found.dtype == np.float32
    assert np.abs(found - expected).max() < 1e-5
    assert np.allclose(np.linalg.norm(found, axis=1), 1.0, atol=1e-5)


def test_a_text_gets_the_same_vector_alone_or_padded_in_a_batch(encoder) -> None:
    alone = encoder.encode([TEXTS[3]])
    batched = encoder.encode(TEXTS)[3:4]
    assert np.abs(alone - batched).max() < 1e-5


def test_token_counts_are_the_tokenizers_before_truncation(reference, encoder) -> None:
    expected = [len(ids) for ids in reference.tokenizer(TEXTS, add_special_tokens=True)["input_ids"]]
    assert encoder.token_counts(TEXTS) == expected
    assert max(expected) > MAX_SEQ_LENGTH


def test_no_texts_is_an_empty_matrix(encoder) -> None:
    assert encoder.encode([]).shape == (0, 384)


def test_the_process_encoder_runs_on_onnxruntime_and_the_backends_agree(encoder) -> None:
    assert load_encoder().backend == "onnxruntime"
    texts = [f"Patient {i} takes {i * 5} mg of drug number {i} daily." for i in range(40)]   # two forwards
    assert np.abs(load_encoder().encode(texts, batch_size=32) - encoder.encode(texts, batch_size=32)).max() < 1e-5


def test_an_unknown_backend_is_refused() -> None:
    with pytest.raises(ValueError, match="backend"):
        MiniLMEncoder(model_path(), backend="tensorflow")


def test_it_loads_without_torch() -> None:
    code = ("import sys; from knowledge_graphs.minilm import load_encoder; encoder = load_encoder(); "
            "encoder.encode(['a b']); print('torch' in sys.modules, 'transformers' in sys.modules, encoder.backend)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.split() == ["False", "False", "onnxruntime"]
