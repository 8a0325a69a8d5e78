"""Concurrent encode calls share forwards (`knowledge_graphs.detection.coalescing`): each caller gets its own
texts' vectors in its own order, a bad text fails only its caller, and a lone call is not held back."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from knowledge_graphs.detection.coalescing import CoalescingEncoder
from knowledge_graphs.minilm import PADDING_BUDGET_TOKENS, _length_chunks, load_encoder


class SlowEncoder:
    """Vectors that spell their text (its length and first character), and a first forward held until released,
    so that other calls queue behind it."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.batches: list[list[str]] = []

    def __call__(self, texts: list[str]) -> np.ndarray:
        if not self.batches:
            self.started.set()
            self.release.wait(5)
        self.batches.append(list(texts))
        if any(text == "poison" for text in texts):
            raise ValueError("cannot encode poison")
        return np.array([[len(text), ord(text[0])] for text in texts], dtype=np.float32)


def _expected(texts: list[str]) -> list[list[float]]:
    return [[len(text), ord(text[0])] for text in texts]


def _queue_behind_first(encoder: CoalescingEncoder, slow: SlowEncoder, calls: list[list[str]]) -> list:
    with ThreadPoolExecutor(len(calls) + 1) as pool:
        first = pool.submit(encoder, ["held"])
        assert slow.started.wait(5)                                     # the worker runs the first call
        futures = [pool.submit(encoder, texts) for texts in calls]
        deadline = time.monotonic() + 5
        while encoder._jobs.qsize() < len(calls) and time.monotonic() < deadline:   # all of them wait behind it
            time.sleep(0.001)
        assert encoder._jobs.qsize() == len(calls)
        slow.release.set()
        assert first.result(5).tolist() == _expected(["held"])
        return [f.exception(5) or f.result(5) for f in futures]


def test_calls_waiting_together_share_one_forward_and_get_their_own_vectors() -> None:
    slow = SlowEncoder()
    encoder = CoalescingEncoder(slow)
    calls = [["alpha", "be"], ["c"], ["delta", "echo", "foxtrot"], ["golf"]]
    results = _queue_behind_first(encoder, slow, calls)
    for texts, vectors in zip(calls, results, strict=True):
        assert vectors.tolist() == _expected(texts)
    assert len(slow.batches) == 2 and sorted(slow.batches[1]) == sorted(t for c in calls for t in c)
    assert encoder.forwards == 2 and encoder.texts == 8


def test_a_bad_text_fails_its_own_caller_only() -> None:
    slow = SlowEncoder()
    encoder = CoalescingEncoder(slow)
    calls = [["fine", "also fine"], ["poison"], ["ok"]]
    results = _queue_behind_first(encoder, slow, calls)
    assert results[0].tolist() == _expected(calls[0]) and results[2].tolist() == _expected(calls[2])
    assert isinstance(results[1], ValueError) and "poison" in str(results[1])
    assert encoder(["after"]).tolist() == _expected(["after"])   # the worker lives on


def test_a_forward_takes_at_most_max_texts_from_the_queue() -> None:
    slow = SlowEncoder()
    encoder = CoalescingEncoder(slow, max_texts=3)
    calls = [["a1", "a2"], ["b1", "b2"], ["c1"], ["d1", "d2", "d3", "d4"]]
    results = _queue_behind_first(encoder, slow, calls)
    for texts, vectors in zip(calls, results, strict=True):
        assert vectors.tolist() == _expected(texts)
    # after the held one: [a, b] (4 texts reach the limit), then [c, d]; a single call over the limit is never split
    assert [len(batch) for batch in slow.batches] == [1, 4, 5]


def test_minilm_vectors_are_the_same_coalesced_or_alone() -> None:
    texts = ["Is warfarin safe with aspirin?", "Hello.", "Which court decided Miranda v. Arizona in 1966?",
             "Sanctions on Iran", "ok"]
    direct = load_encoder().encode
    alone = np.concatenate([direct([text]) for text in texts])
    encoder = CoalescingEncoder(direct)
    with ThreadPoolExecutor(len(texts)) as pool:
        together = np.concatenate(list(pool.map(lambda text: encoder([text]), texts)))
    assert np.abs(alone - together).max() < 1e-5


@pytest.mark.parametrize("lengths", [[5], [12, 12, 12, 13], [5, 40, 6, 41, 7, 200], list(range(3, 90, 7)), []])
def test_length_chunks_cover_every_text_once_and_bound_padding(lengths: list[int]) -> None:
    chunks = _length_chunks(lengths, batch_size=4)
    assert sorted(i for chunk in chunks for i in chunk) == list(range(len(lengths)))
    for chunk in chunks:
        assert 1 <= len(chunk) <= 4
        padded = [max(lengths[i] for i in chunk) - lengths[i] for i in chunk]
        # every step up in length was within budget for the rows already in the chunk
        assert sum(padded) <= PADDING_BUDGET_TOKENS * (len(chunk) - 1) or len(chunk) == 1
    assert len(_length_chunks([10, 10, 10], batch_size=32)) == 1
    assert len(_length_chunks([10, 100], batch_size=32)) == 2
