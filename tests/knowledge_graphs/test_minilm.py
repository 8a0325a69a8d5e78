"""Our MiniLM, on OpenVINO, on ONNX Runtime and in numpy, gives sentence-transformers' vectors (what the detector's
classifier was trained on): the same in fp32, within a cosine of 1e-4 in bf16. It counts tokens as its tokenizer
does, picks bf16 only where the CPU computes it natively, and loads without torch."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from knowledge_graphs import minilm_openvino
from knowledge_graphs.minilm import MAX_SEQ_LENGTH, MiniLMEncoder, check_dtype, load_encoder, model_path

NATIVE_BF16 = minilm_openvino.native_bf16()
needs_bf16 = pytest.mark.skipif(not NATIVE_BF16, reason="this CPU does not compute bf16 natively")

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


VARIANTS = [("onnxruntime", "float32"), ("numpy", "float32"), ("openvino", "float32"),
            pytest.param(("openvino", "bfloat16"), marks=needs_bf16)]


@pytest.fixture(scope="module", params=VARIANTS, ids=lambda variant: "-".join(variant))
def encoder(request: pytest.FixtureRequest) -> MiniLMEncoder:
    backend, dtype = request.param
    built = MiniLMEncoder(model_path(), backend=backend, dtype=dtype)
    assert (built.backend, built.dtype) == (backend, dtype)
    return built


def test_the_vectors_are_sentence_transformers_vectors(reference, encoder) -> None:
    expected = reference.encode(TEXTS, normalize_embeddings=True, convert_to_numpy=True, batch_size=3)
    found = encoder.encode(TEXTS, batch_size=3)   # several batches, each padded to its own longest
    assert found.shape == expected.shape == (len(TEXTS), 384) and found.dtype == np.float32
    assert np.isfinite(found).all()
    if encoder.dtype == "float32":
        assert np.abs(found - expected).max() < 1e-5
    else:   # bf16 products (8 bits of mantissa), fp32 sums: the same direction to a cosine of 1e-4
        assert (found * expected).sum(axis=1).min() > 0.9999
        assert np.abs(found - expected).max() < 5e-3
    assert np.allclose(np.linalg.norm(found, axis=1), 1.0, atol=1e-5)


def test_a_text_gets_the_same_vector_alone_or_padded_in_a_batch(encoder) -> None:
    # padding is masked out in every precision (fp32's most negative score would be -inf in bf16, and 0 * -inf NaN)
    alone = encoder.encode([TEXTS[3]])
    batched = encoder.encode(TEXTS)[3:4]
    assert np.abs(alone - batched).max() < (1e-5 if encoder.dtype == "float32" else 1e-3)


def test_token_counts_are_the_tokenizers_before_truncation(reference, encoder) -> None:
    expected = [len(ids) for ids in reference.tokenizer(TEXTS, add_special_tokens=True)["input_ids"]]
    assert encoder.token_counts(TEXTS) == expected
    assert max(expected) > MAX_SEQ_LENGTH


def test_no_texts_is_an_empty_matrix(encoder) -> None:
    assert encoder.encode([]).shape == (0, 384)


def test_the_process_encoder_is_bf16_only_where_the_cpu_computes_it_and_the_backends_agree(encoder) -> None:
    expected = ("openvino", "bfloat16") if NATIVE_BF16 else ("onnxruntime", "float32")
    assert (load_encoder().backend, load_encoder().dtype) == expected
    assert (load_encoder("float32").backend, load_encoder("float32").dtype) == ("onnxruntime", "float32")
    texts = [f"Patient {i} takes {i * 5} mg of drug number {i} daily." for i in range(40)]   # two forwards
    found = load_encoder("float32").encode(texts, batch_size=32)
    ours = encoder.encode(texts, batch_size=32)
    if encoder.dtype == "float32":
        assert np.abs(found - ours).max() < 1e-5
    else:
        assert (found * ours).sum(axis=1).min() > 0.9999


def test_a_cpu_without_native_bf16_keeps_fp32_and_refuses_bf16_in_one_line(monkeypatch) -> None:
    monkeypatch.setattr(minilm_openvino, "native_bf16", lambda: False)
    chosen = MiniLMEncoder(model_path())
    assert (chosen.backend, chosen.dtype) == ("onnxruntime", "float32")
    with pytest.raises(ValueError, match="natively") as refused:
        MiniLMEncoder(model_path(), dtype="bfloat16")
    assert "\n" not in str(refused.value)
    with pytest.raises(ValueError, match="natively"):
        check_dtype("bfloat16")
    check_dtype("auto")
    check_dtype("float32")
    # OpenVINO asked for by name still runs, in the precision the CPU has
    assert MiniLMEncoder(model_path(), backend="openvino").dtype == "float32"


def test_openvino_is_asked_about_bf16_only_where_the_cpu_lists_a_bf16_feature(monkeypatch, tmp_path, request) -> None:
    asked = []

    class Core:
        def get_property(self, device, name):
            asked.append((device, name))
            return ["FP32", "BF16"]

    monkeypatch.setattr(minilm_openvino, "import_openvino", lambda: type("openvino", (), {"Core": Core}))
    read_flags = minilm_openvino.cpu_flags
    request.addfinalizer(minilm_openvino.native_bf16.cache_clear)   # no patched answer outlives the test
    for flags, expected, asks in [("fpu sse2 avx avx2 fma avx512f", False, 0),      # AVX2 / AVX-512 without bf16
                                  ("fpu avx2 avx512f avx512_bf16", True, 1),        # Zen 4, Cooper Lake
                                  ("fpu avx2 avx512_bf16 amx_bf16 amx_tile", True, 1),   # Sapphire Rapids
                                  ("fpu avx2 avx_vnni avx_ne_convert", True, 1),    # AVX2 with AVX-NE-CONVERT
                                  (None, True, 1)]:                                  # nothing to read: OpenVINO decides
        cpuinfo = tmp_path / "cpuinfo"
        cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {flags}\n" if flags else "Features\t: fp asimd\n")
        monkeypatch.setattr(minilm_openvino, "cpu_flags", lambda c=cpuinfo: read_flags(c))
        minilm_openvino.native_bf16.cache_clear()
        asked.clear()
        assert minilm_openvino.native_bf16() is expected, flags
        assert len(asked) == asks, flags


@pytest.mark.parametrize(("backend", "dtype", "message"), [
    ("tensorflow", "auto", "backend"), ("auto", "float16", "dtype"), ("onnxruntime", "bfloat16", "openvino backend"),
    ("numpy", "bfloat16", "openvino backend")])
def test_unknown_or_impossible_choices_are_refused(backend: str, dtype: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        MiniLMEncoder(model_path(), backend=backend, dtype=dtype)
    if backend == "auto":
        with pytest.raises(ValueError, match=message):
            check_dtype(dtype)


def test_it_loads_without_torch() -> None:
    code = ("import sys; from knowledge_graphs.minilm import load_encoder; encoder = load_encoder(); "
            "encoder.encode(['a b']); print('torch' in sys.modules, 'transformers' in sys.modules, encoder.backend)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.split() == ["False", "False", "openvino" if NATIVE_BF16 else "onnxruntime"]


def test_openvino_pads_inputs_to_a_few_shapes_without_changing_the_vectors() -> None:
    # each input shape costs OpenVINO compiled kernels (memory, and time when first seen): lengths share buckets
    from knowledge_graphs.minilm_openvino import LENGTH_BUCKET, bucketed_length

    assert [bucketed_length(n) for n in (1, LENGTH_BUCKET, LENGTH_BUCKET + 1, MAX_SEQ_LENGTH)] == [
        LENGTH_BUCKET, LENGTH_BUCKET, 2 * LENGTH_BUCKET, MAX_SEQ_LENGTH]
    unpadded = MiniLMEncoder(model_path(), backend="onnxruntime")
    padded = MiniLMEncoder(model_path(), backend="openvino", dtype="float32")
    texts = ["ok", "A sentence of some seventeen or eighteen word pieces, give or take a few here.", TEXTS[0]]
    assert np.abs(padded.encode(texts) - unpadded.encode(texts)).max() < 1e-5


def test_warm_up_prepares_the_common_shapes_on_every_backend_and_changes_no_vector(encoder) -> None:
    before = encoder.encode(TEXTS[:3])
    encoder.warm_up()
    assert np.array_equal(encoder.encode(TEXTS[:3]), before)
