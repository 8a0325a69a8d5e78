"""Concurrent encode calls share MiniLM forwards.

Why: the API process embeds each request's prompt and output sentences for domain detection, one short piece
at a time, from many request threads at once. A forward over one short sentence is mostly fixed cost (reading
the model's weights): 12 CPU ms for a 12-token sentence alone, about 7 ms each when four go together
(`knowledge_graphs.minilm.PADDING_BUDGET_TOKENS`). So one thread runs the forwards: whatever arrived while
the last one ran goes into the next, together. A call that finds the encoder idle waits for nobody.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

Encode = Callable[[list[str]], np.ndarray]

MAX_TEXTS_PER_FORWARD = 64   # what one forward takes from the queue; the rest wait for the next


@dataclass(slots=True)
class _Job:
    texts: list[str]
    done: threading.Event = field(default_factory=threading.Event)
    vectors: np.ndarray | None = None
    error: BaseException | None = None


class CoalescingEncoder:
    """Thread-safe: callers block until their vectors are ready. `forwards` and `texts` count the encoder calls
    made and the texts they carried."""

    def __init__(self, encode: Encode, *, max_texts: int = MAX_TEXTS_PER_FORWARD) -> None:
        self._encode = encode
        self.max_texts = max_texts
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._worker: threading.Thread | None = None
        self._start_lock = threading.Lock()
        self.forwards = 0
        self.texts = 0

    def __call__(self, texts: list[str]) -> np.ndarray:
        job = _Job(list(texts))
        self._ensure_worker()
        self._jobs.put(job)
        job.done.wait()
        if job.error is not None:
            raise job.error
        assert job.vectors is not None
        return job.vectors

    def _ensure_worker(self) -> None:
        # started on first use, and again in a forked child (threads do not survive a fork)
        if self._worker is not None and self._worker.is_alive():
            return
        with self._start_lock:
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(target=self._serve, name="minilm-coalescer", daemon=True)
                self._worker.start()

    def _serve(self) -> None:
        while True:
            jobs = [self._jobs.get()]
            count = len(jobs[0].texts)
            while count < self.max_texts:
                try:
                    job = self._jobs.get_nowait()
                except queue.Empty:
                    break
                jobs.append(job)
                count += len(job.texts)
            self._run(jobs)

    def _run(self, jobs: list[_Job]) -> None:
        try:
            vectors = self._forward([text for job in jobs for text in job.texts])
        except BaseException as exc:  # noqa: BLE001 - handed to the callers, never kills the worker
            if len(jobs) == 1:
                jobs[0].error = exc
                jobs[0].done.set()
            else:   # one caller's bad text must not fail the others: each alone
                for job in jobs:
                    self._run([job])
            return
        offset = 0
        for job in jobs:
            job.vectors = vectors[offset : offset + len(job.texts)]
            offset += len(job.texts)
            job.done.set()

    def _forward(self, texts: list[str]) -> np.ndarray:
        vectors = self._encode(texts)
        self.forwards += 1
        self.texts += len(texts)
        return vectors
