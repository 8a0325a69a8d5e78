"""asyncio front of LLMEngine: a background step loop and one async iterator of outputs per request.

The blocking `step()` runs in a one-thread executor so the event loop stays responsive. Requests
are validated at once (errors raise from `generate` before any compute) and handed to the engine
between steps, so the engine itself is only ever touched by one thread at a time.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from collections.abc import Sequence as Seq
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from engine.config import EngineConfig
from engine.errors import EngineDeadError
from engine.llm_engine import LLMEngine
from engine.outputs import RequestOutput
from engine.processors.logits_process import LogitsProcessor
from engine.sampling_params import InvalidRequestError, SamplingParams
from engine.sequence import Sequence
from engine.tokenizer import Tokenizer


class AsyncLLMEngine:
    def __init__(self, engine: LLMEngine) -> None:
        self.engine = engine
        self._queues: dict[str, asyncio.Queue[RequestOutput | BaseException]] = {}
        self._pending_adds: list[tuple[Sequence, str]] = []
        self._pending_aborts: list[str] = []
        self._wake = asyncio.Event()
        self._engine_lock = threading.Lock()   # step (worker thread) vs stats() (event loop)
        self._executor: ThreadPoolExecutor | None = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engine-step")
        self._loop_task: asyncio.Task[None] | None = None
        self._error: BaseException | None = None

    @classmethod
    def from_pretrained(
        cls, path: str | Path, config: EngineConfig | None = None, logits_processors: Seq[LogitsProcessor] = (),
        *, model_id: str | None = None,
    ) -> AsyncLLMEngine:
        return cls(LLMEngine.from_pretrained(path, config, logits_processors, model_id=model_id))

    # ---- passthroughs the service reads --------------------------------------------------------

    @property
    def tokenizer(self) -> Tokenizer:
        return self.engine.tokenizer

    @property
    def model_id(self) -> str:
        return self.engine.model_id

    @property
    def checkpoint_hash(self) -> str:
        return self.engine.checkpoint_hash

    @property
    def max_model_len(self) -> int:
        return self.engine.max_model_len

    def stats(self) -> dict[str, Any]:
        with self._engine_lock:
            return self.engine.stats()

    # ---- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        if self._loop_task is None or self._loop_task.done():
            if self._executor is None:  # restarted after shutdown()
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engine-step")
            self._wake = asyncio.Event()
            self._loop_task = asyncio.create_task(self._run(), name="engine-step-loop")

    async def shutdown(self) -> None:
        task, self._loop_task = self._loop_task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        for queue in self._queues.values():
            queue.put_nowait(EngineDeadError("engine shut down"))
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None

    # ---- requests ------------------------------------------------------------------------------

    async def generate(
        self, prompt: str | list[int], params: SamplingParams | None = None, *, request_id: str,
        intent: str | None = None, cache_salt: str | None = None, output_kind: str = "cumulative",
    ) -> AsyncIterator[RequestOutput]:
        """Incremental outputs of one request ("cumulative" or "delta", see RequestOutput); leaving the
        iterator early aborts the request."""
        if self._error is not None:
            raise EngineDeadError(f"engine step loop failed: {self._error}")
        if self._loop_task is None:
            await self.start()
        if request_id in self._queues:
            raise InvalidRequestError(f"request id {request_id!r} is already in use")
        # Off the event loop (tokenising and compiling a JSON grammar take milliseconds) and under the engine
        # lock (processors' caches are shared with the step thread).
        seq = await asyncio.to_thread(self._prepare_locked, request_id, prompt, params, intent, cache_salt)
        if request_id in self._queues:
            raise InvalidRequestError(f"request id {request_id!r} is already in use")
        queue: asyncio.Queue[RequestOutput | BaseException] = asyncio.Queue()
        self._queues[request_id] = queue
        self._pending_adds.append((seq, output_kind))
        self._wake.set()
        finished = False
        try:
            while True:
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise item
                finished = item.finished
                yield item
                if finished:
                    return
        finally:
            self._queues.pop(request_id, None)
            if not finished:
                self.abort(request_id)

    def _prepare_locked(self, request_id: str, prompt: str | list[int], params: SamplingParams | None,
                        intent: str | None, cache_salt: str | None) -> Sequence:
        with self._engine_lock:
            return self.engine.prepare_request(request_id, prompt, params, intent=intent, cache_salt=cache_salt)

    def abort(self, request_id: str) -> None:
        """Abort between steps; its KV blocks are freed before the next step runs."""
        self._pending_aborts.append(request_id)
        self._wake.set()

    # ---- the step loop -------------------------------------------------------------------------

    def _step_locked(self) -> list[RequestOutput]:
        with self._engine_lock:
            return self.engine.step()

    def _apply_pending(self) -> None:
        with self._engine_lock:
            adds, self._pending_adds = self._pending_adds, []
            for seq, output_kind in adds:
                self.engine.enqueue(seq, output_kind=output_kind)
            aborts, self._pending_aborts = self._pending_aborts, []
            for request_id in aborts:
                self.engine.abort(request_id)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                self._apply_pending()
                if not self.engine.has_unfinished():
                    self._wake.clear()
                    if not (self._pending_adds or self._pending_aborts):
                        await self._wake.wait()
                    continue
                assert self._executor is not None
                outputs = await loop.run_in_executor(self._executor, self._step_locked)
                for output in outputs:
                    queue = self._queues.get(output.request_id)
                    if queue is not None:
                        queue.put_nowait(output)
                await asyncio.sleep(0)  # let consumers run between steps
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - every waiter must hear that the engine died
            self._error = exc
            for queue in self._queues.values():
                queue.put_nowait(EngineDeadError(f"engine step loop failed: {exc!r}"))
            raise
