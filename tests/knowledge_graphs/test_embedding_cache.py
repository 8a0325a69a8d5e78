"""The detector's sentence-vector cache: the encoder's own vectors, each piece encoded once while kept, bounded
by entries, never aliased to what callers receive; and a streamed detection followed by the scoring's
re-detection embeds nothing twice."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from knowledge_graphs.detection.embedding_cache import EmbeddingCache


class CountingEncoder:
    """A deterministic stand-in: each text's vector comes from its characters; every text encoded is counted."""

    def __init__(self) -> None:
        self.encoded: list[str] = []

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.encoded.extend(texts)
        return np.stack([np.array([len(t), sum(map(ord, t)) % 97, t.count("a")], dtype=np.float32) for t in texts])


def test_kept_vectors_are_the_encoders_and_each_piece_is_encoded_once() -> None:
    cache, encode = EmbeddingCache(16), CountingEncoder()
    first = cache.vectors(["alpha", "beta", "alpha"], encode)
    assert encode.encoded == ["alpha", "beta"]                   # a repeat within one call: encoded once
    np.testing.assert_array_equal(first, encode(["alpha", "beta", "alpha"]))
    encode.encoded.clear()
    again = cache.vectors(["beta", "gamma", "alpha"], encode)
    assert encode.encoded == ["gamma"]
    np.testing.assert_array_equal(again, CountingEncoder()(["beta", "gamma", "alpha"]))
    assert (cache.hits, cache.misses) == (3, 3)


def test_the_least_recently_used_piece_goes_first_and_the_bound_holds() -> None:
    cache, encode = EmbeddingCache(2), CountingEncoder()
    cache.vectors(["a"], encode)
    cache.vectors(["b"], encode)
    cache.vectors(["a"], encode)          # a is now the most recent
    cache.vectors(["c"], encode)          # so b goes
    assert len(cache) == 2
    encode.encoded.clear()
    cache.vectors(["a", "c", "b"], encode)
    assert encode.encoded == ["b"] and len(cache) == 2


def test_callers_cannot_alter_a_kept_vector() -> None:
    cache, encode = EmbeddingCache(4), CountingEncoder()
    out = cache.vectors(["dose"], encode)
    out += 100.0                          # DetectionState sums into its own arrays; this must not leak back
    np.testing.assert_array_equal(cache.vectors(["dose"], encode), CountingEncoder()(["dose"]))


def test_the_cache_keeps_digests_not_the_customers_sentences() -> None:
    cache, encode = EmbeddingCache(4), CountingEncoder()
    secret = "Patient Jane Roe, MRN 4471, takes 20 mg of warfarin."
    cache.vectors([secret], encode)
    assert all(isinstance(key, bytes) and len(key) == 16 and b"Jane" not in key for key in cache._vectors)
    assert secret not in repr(cache.__dict__)


def test_capacity_zero_keeps_nothing_and_negative_is_refused() -> None:
    cache, encode = EmbeddingCache(0), CountingEncoder()
    cache.vectors(["x"], encode)
    cache.vectors(["x"], encode)
    assert encode.encoded == ["x", "x"] and len(cache) == 0
    with pytest.raises(ValueError, match=">= 0"):
        EmbeddingCache(-1)


def test_threads_sharing_the_cache_get_correct_vectors_within_the_bound() -> None:
    cache, encode = EmbeddingCache(50), CountingEncoder()
    texts = [f"sentence {i % 80}" for i in range(400)]
    expected = CountingEncoder()(texts)

    def run(start: int) -> bool:
        chunk = texts[start : start + 40]
        return bool(np.array_equal(cache.vectors(chunk, encode), expected[start : start + 40]))

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(run, range(0, 400, 40)))
    assert len(cache) <= 50


def test_the_scorings_re_detection_embeds_nothing_the_stream_embedded() -> None:
    from knowledge_graphs import load_kg  # noqa: PLC0415
    from knowledge_graphs.detection import DomainDetector  # noqa: PLC0415

    detector = DomainDetector({d: load_kg(d) for d in ("finance", "legal", "medical")})
    prompt = "Can I take ibuprofen together with lisinopril for my blood pressure?"
    sentences = ["NSAIDs such as ibuprofen can blunt the effect of ACE inhibitors like lisinopril. ",
                 "They may also raise the risk of kidney injury, especially with a diuretic. ",
                 "Ask your pharmacist before combining them."]
    streamed = detector.start(prompt)
    for sentence in sentences:
        streamed.add(sentence)
    misses = detector.embeddings.misses
    again = detector.detect(prompt, "".join(sentences))          # what scoring does with the stored record
    assert detector.embeddings.misses == misses                  # every piece was already embedded
    assert again.domains == streamed.result().domains == ("medical",)
    assert again.scores == pytest.approx(streamed.result().scores, abs=1e-6)
