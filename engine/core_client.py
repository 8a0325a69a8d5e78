"""The API side of the engine-core process boundary (after vLLM V1's AsyncMPClient).

`EngineCoreClient` has AsyncLLMEngine's interface (`generate`, `abort`, `stats`, `tokenizer`, `model_id`,
`start`, `shutdown`), but the step loop runs in a process of its own (`engine.core_proc`). Prompts are
tokenised here; the core sends token-id deltas, and the output processor here makes the text, finds stop
strings and fills logprob texts, so detokenisation never stalls the step loop.

If the core process dies, every request in flight ends with EngineDeadError at once, and a new core is
started; until it is ready, new requests fail at once with EngineDeadError too (nothing waits on a dead
process).

`EngineCoreClient.connect(address, tokenizer)` joins a core that runs on its own (`auditor engine-core`), which
several API processes may share. Such a core is not ours to restart: its heartbeat (a stats report at least
once a second) is watched instead, and when it stops, requests in flight fail and the client keeps saying hello
until a core answers at that address again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, Any

import zmq
import zmq.asyncio

from engine.affinity import CpuSplit, pin_this_process
from engine.allocator import preloaded
from engine.core_proc import run_engine_core
from engine.errors import EngineDeadError, refusal_from_wire
from engine.output_processor import OutputProcessor
from engine.outputs import RequestOutput, merge_deltas
from engine.priority import LaunchThread, lower_process_priority
from engine.sampling_params import InvalidRequestError, SamplingParams
from engine.serial import output_from_wire, pack, params_to_wire, unpack
from engine.tokenizer import Tokenizer

if TYPE_CHECKING:   # torch: an API process that talks to a core has no use for it
    from engine.llm_engine import LLMEngine

logger = logging.getLogger("engine.client")
# Prompts up to this many characters are tokenised on the event loop (tens of microseconds under load against a
# thread hop that waits for the GIL); longer ones on a worker thread.
INLINE_TOKENIZE_CHARS = 2048


class EngineCoreClient:
    def __init__(self, builder: Callable[[], LLMEngine] | None, tokenizer: Tokenizer, *, restart: bool = True,
                 startup_timeout_s: float = 600.0, restart_backoff_s: float = 1.0,
                 heartbeat_timeout_s: float = 10.0, preload: str | None = None,
                 cpus: CpuSplit | None = None) -> None:
        """builder: picklable (a module-level function or a functools.partial of one); it runs in the core
        process and returns the LLMEngine to serve (None: see `connect`). tokenizer: the same checkpoint's.
        cpus: the core's CPUs and this process's (`engine.affinity`); None: the scheduler places both."""
        self.builder = builder
        self.cpus = cpus
        self.preload = preload   # a malloc library the core starts with (`engine.allocator`); None: glibc's
        self.heartbeat_timeout_s = heartbeat_timeout_s
        self._external_address: str | None = None
        self._last_message = 0.0
        self._info_arrived: asyncio.Event | None = None
        self._watchdog_task: asyncio.Task[None] | None = None
        self.tokenizer = tokenizer
        self.restart = restart
        self.startup_timeout_s = startup_timeout_s
        self.restart_backoff_s = restart_backoff_s
        self.info: dict[str, Any] = {}
        self.restarts = 0
        self._processor = OutputProcessor(tokenizer)
        self._queues: dict[str, asyncio.Queue[RequestOutput | BaseException]] = {}
        self._stats: dict[str, Any] = {}
        self._dir = tempfile.mkdtemp(prefix="engine-core-")
        # the core starts from here, at this process's priority as it is now (see `yield_cpu`)
        self._launcher = LaunchThread("engine-core-launcher") if builder is not None else None
        self._identity = uuid.uuid4().bytes
        self._output_address = f"ipc://{self._dir}/out-{self._identity.hex()[:12]}"
        self._sync_context = zmq.Context()
        self._async_context = zmq.asyncio.Context()
        self._input: zmq.Socket | None = None
        self._output: zmq.asyncio.Socket | None = None
        self._proc: BaseProcess | None = None
        self._ready: Connection | None = None
        self._input_address = ""
        self._incarnation = 0
        self._available = False
        self._closing = False
        self._unavailable_reason = "engine core not started"
        self._reader_task: asyncio.Task[None] | None = None
        self._restart_task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def connect(cls, address: str, tokenizer: Tokenizer, **kwargs: Any) -> EngineCoreClient:
        """A client of a core that runs on its own at `address` (e.g. ipc:///run/auditor/engine)."""
        client = cls(None, tokenizer, restart=False, **kwargs)
        client._external_address = address
        return client

    # ---- what the service reads ------------------------------------------------------------------

    @property
    def model_id(self) -> str:
        return self.info.get("model_id", "")

    @property
    def checkpoint_hash(self) -> str:
        return self.info.get("checkpoint_hash", "")

    @property
    def dtype(self) -> str | None:
        """The dtype the core's weights are held in, for the audit records (None until the core is up)."""
        return self.info.get("dtype")

    @property
    def allocator(self) -> str | None:
        """The malloc the core runs on, "jemalloc" or "system" (None until the core is up)."""
        return self.info.get("allocator")

    @property
    def core_cpus(self) -> list[int] | None:
        """The CPUs the core runs on, as it reported them (None until the core is up)."""
        return self.info.get("cpus")

    @property
    def max_model_len(self) -> int:
        return int(self.info.get("max_model_len", 0))

    @property
    def kv_cache_settings(self) -> dict[str, Any] | None:
        """The core's KV cache dtype, strategy and layout (None until it said hello)."""
        return self.info.get("kv_cache")

    @property
    def available(self) -> bool:
        """A core is running and taking requests (False while one restarts)."""
        return self._available

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else self.info.get("pid")

    def stats(self) -> dict[str, Any]:
        """The core's counters as of its latest report (sent twice a second while it works, and when idle)."""
        return {**self._stats, "engine_core_restarts": self.restarts, "engine_core_available": int(self._available)}

    # ---- lifecycle -------------------------------------------------------------------------------

    def launch(self) -> None:
        """Start the core process without waiting for it (the caller may load other things meanwhile)."""
        if self._proc is not None and self._proc.is_alive():
            return
        self._incarnation += 1
        os.makedirs(self._dir, mode=0o700, exist_ok=True)   # removed by an earlier shutdown
        self._input_address = f"ipc://{self._dir}/in-{self._incarnation}"
        context = multiprocessing.get_context("spawn")   # no fork: the API process has threads and sockets
        parent_end, child_end = context.Pipe(duplex=False)
        self._proc = context.Process(target=run_engine_core, args=(self.builder, self._input_address, child_end),
                                     kwargs={"cpus": self.cpus.core if self.cpus else None},
                                     name=f"engine-core-{self._incarnation}", daemon=True)
        assert self._launcher is not None, "a client of a core it did not start cannot launch one"
        process = self._proc

        def start() -> None:
            with preloaded(self.preload):
                process.start()

        self._launcher.run(start)
        child_end.close()
        self._ready = parent_end

    def yield_cpu(self, steps: int) -> int:
        """This (API) process's threads off the core's CPUs where they are split (`engine.affinity`; a core,
        first or restarted, takes its own CPUs as it starts), and `steps` nice values below the core it started,
        as SCHED_BATCH (`engine.priority`); a core restarted later still starts at the process's first priority.
        Nothing for a core this client does not own. Returns how many threads changed priority."""
        if self._launcher is None or self._external_address is not None:
            return 0
        if self.cpus is not None:
            pin_this_process(self.cpus.api)
        return lower_process_priority(steps, keep={self._launcher.native_id})

    async def start(self) -> None:
        """Launch (if not yet) and wait until the core is ready; raises EngineDeadError if it cannot start."""
        if self._available:
            return
        self._loop = asyncio.get_running_loop()
        self._closing = False
        if self._output is None:
            os.makedirs(self._dir, mode=0o700, exist_ok=True)   # removed by an earlier shutdown
            self._output = self._async_context.socket(zmq.PULL)
            self._output.setsockopt(zmq.LINGER, 0)
            self._output.bind(self._output_address)
        if self._reader_task is None or self._reader_task.done():
            self._reader_task = asyncio.create_task(self._read_outputs(), name="engine-core-outputs")
        if self._external_address is not None:
            await self._join_external()
            return
        self.launch()
        await asyncio.to_thread(self._wait_ready)
        self._connect()

    async def _join_external(self) -> None:
        """Say hello until the core answers with its info (a core started later is waited for)."""
        assert self._external_address is not None
        self._input_address = self._external_address
        self._info_arrived = asyncio.Event()
        deadline = time.monotonic() + self.startup_timeout_s
        while True:
            self._open_input()
            try:
                await asyncio.wait_for(self._info_arrived.wait(), 1.0)
                break
            except TimeoutError:
                if time.monotonic() > deadline:
                    raise EngineDeadError(f"no engine core answers at {self._external_address}") from None
        self._available = True
        self._last_message = time.monotonic()
        if self._watchdog_task is None or self._watchdog_task.done():
            self._watchdog_task = asyncio.create_task(self._watch_heartbeat(), name="engine-core-heartbeat")
        logger.info("joined engine core at %s (pid %s)", self._external_address, self.info.get("pid"))

    async def _watch_heartbeat(self) -> None:
        """A shared core: lost when it stops reporting (or says it died); then say hello until one answers."""
        assert self._info_arrived is not None
        while not self._closing:
            if self._available:
                await asyncio.sleep(self.heartbeat_timeout_s / 4)
                if time.monotonic() - self._last_message >= self.heartbeat_timeout_s:
                    self._lose_external(f"engine core stopped answering for {self.heartbeat_timeout_s:.0f} s")
                continue
            self._info_arrived.clear()
            self._open_input()
            try:
                await asyncio.wait_for(self._info_arrived.wait(), 1.0)
            except TimeoutError:
                continue
            self._last_message = time.monotonic()
            self._available = True
            self.restarts += 1
            logger.info("engine core at %s answers again (pid %s)", self._external_address, self.info.get("pid"))

    def _lose_external(self, reason: str) -> None:
        self._available = False
        self._unavailable_reason = f"{reason}; reconnecting to {self._external_address}"
        logger.error("%s", self._unavailable_reason)
        self._fail_all(EngineDeadError(reason))

    def _wait_ready(self) -> None:
        assert self._proc is not None and self._ready is not None
        deadline = time.monotonic() + self.startup_timeout_s
        while not self._ready.poll(0.2):
            if not self._proc.is_alive():
                raise EngineDeadError(f"engine core exited while starting (exit code {self._proc.exitcode})")
            if time.monotonic() > deadline:
                self._proc.kill()
                raise EngineDeadError(f"engine core not ready after {self.startup_timeout_s:.0f} s")
        try:
            status, detail = self._ready.recv()
        except EOFError:
            raise EngineDeadError("engine core exited while starting") from None
        finally:
            self._ready.close()
            self._ready = None
        if status != "ready":
            self._proc.join(5)
            raise EngineDeadError(f"engine core failed to start: {detail}")
        self.info = detail

    def _open_input(self) -> None:
        """A fresh DEALER to the core's input (nothing queued for a dead core is sent to the next), and hello."""
        if self._input is not None:
            self._input.close(linger=0)
        self._input = self._sync_context.socket(zmq.DEALER)
        self._input.setsockopt(zmq.IDENTITY, self._identity)
        self._input.setsockopt(zmq.LINGER, 0)
        self._input.setsockopt(zmq.SNDHWM, 0)
        self._input.connect(self._input_address)
        self._input.send(pack(["hello", self._output_address]))

    def _connect(self) -> None:
        assert self._proc is not None and self._loop is not None
        self._open_input()
        self._loop.add_reader(self._proc.sentinel, self._on_core_exit, self._proc)
        self._available = True
        logger.info("engine core %d ready (pid %s)", self._incarnation, self._proc.pid)

    async def shutdown(self) -> None:
        self._closing = True
        self._available = False
        self._unavailable_reason = "engine shut down"
        for task in (self._restart_task, self._reader_task, self._watchdog_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        self._restart_task = self._reader_task = self._watchdog_task = None
        proc = self._proc
        if proc is not None:
            if self._loop is not None:
                with contextlib.suppress(Exception):   # that loop may be closed already
                    self._loop.remove_reader(proc.sentinel)
            if proc.is_alive() and self._input is not None:
                with contextlib.suppress(zmq.ZMQError):
                    self._input.send(pack(["shutdown"]), zmq.NOBLOCK)
            await asyncio.to_thread(_stop_process, proc)
        self._fail_all(EngineDeadError("engine shut down"))
        for socket in (self._input, self._output):
            if socket is not None:
                socket.close(linger=0)
        self._input = self._output = None
        self._proc = None
        # the sockets' folder: `__del__` alone left one behind per server run (a process that exits does not
        # collect its objects), and a host that restarts its service often piles them up in /tmp
        shutil.rmtree(self._dir, ignore_errors=True)

    def __del__(self) -> None:
        shutil.rmtree(getattr(self, "_dir", ""), ignore_errors=True)

    # ---- requests --------------------------------------------------------------------------------

    async def generate(
        self, prompt: str | list[int], params: SamplingParams | None = None, *, request_id: str,
        intent: str | None = None, cache_salt: str | None = None, output_kind: str = "cumulative",
    ) -> AsyncIterator[RequestOutput]:
        """Incremental outputs of one request; leaving the iterator early aborts it in the core."""
        params = params or SamplingParams()
        self._require_available()
        if request_id in self._queues:
            raise InvalidRequestError(f"request id {request_id!r} is already in use")
        params.validate()
        if not isinstance(prompt, str):
            token_ids = list(prompt)
        elif len(prompt) <= INLINE_TOKENIZE_CHARS:   # well under a millisecond: cheaper than a thread hop
            token_ids = self.tokenizer.encode(prompt)
        else:                                        # a long prompt must not stall the event loop
            token_ids = await asyncio.to_thread(self.tokenizer.encode, prompt)
        self._require_available()
        if request_id in self._queues:
            raise InvalidRequestError(f"request id {request_id!r} is already in use")
        queue: asyncio.Queue[RequestOutput | BaseException] = asyncio.Queue()
        self._queues[request_id] = queue
        self._processor.add_request(request_id, token_ids, params, output_kind=output_kind)
        finished = False
        try:
            self._send(["add", request_id, token_ids, params_to_wire(params), intent, cache_salt])
            carried: RequestOutput | BaseException | None = None
            while True:
                item = carried if carried is not None else await queue.get()
                carried = None
                if isinstance(item, BaseException):
                    finished = True   # the core has already dropped it (refused, or dead)
                    raise item
                # deltas that queued up while the consumer was busy go out as one (one wake-up, one gate pass)
                while output_kind == "delta" and not item.finished and not queue.empty():
                    following = queue.get_nowait()
                    if isinstance(following, BaseException):
                        carried = following
                        break
                    item = merge_deltas(item, following)
                finished = item.finished
                yield item
                if finished:
                    return
        finally:
            self._queues.pop(request_id, None)
            self._processor.remove(request_id)
            if not finished:
                self.abort(request_id)

    def abort(self, request_id: str, reason: str = "abort") -> None:
        """Free the request in the core; a core that is gone has freed it already."""
        if self._available:
            with contextlib.suppress(EngineDeadError):
                self._send(["abort", [request_id], reason])

    def _require_available(self) -> None:
        if not self._available:
            raise EngineDeadError(self._unavailable_reason)

    def _send(self, message: list[Any]) -> None:
        assert self._input is not None
        try:
            self._input.send(pack(message), zmq.NOBLOCK)
        except zmq.ZMQError as exc:   # no peer and nowhere to queue: treat as a dead core
            raise EngineDeadError(f"engine core unreachable: {exc}") from exc

    # ---- outputs ---------------------------------------------------------------------------------

    async def _read_outputs(self) -> None:
        assert self._output is not None
        while True:
            message = unpack(await self._output.recv())
            self._last_message = time.monotonic()
            kind = message[0]
            if kind == "out":
                processed = self._processor.process([output_from_wire(values) for values in message[1]])
                for out in processed.outputs:
                    queue = self._queues.get(out.request_id)
                    if queue is not None:
                        queue.put_nowait(out)
                for request_id in processed.stopped:   # a stop string ended it here: free it in the core
                    self.abort(request_id, "stop")
            elif kind in ("err", "fail"):   # refused (bad input), or a bug while preparing it
                queue = self._queues.get(message[1])
                if queue is not None:
                    queue.put_nowait(refusal_from_wire(message[2:]) if kind == "err" else RuntimeError(message[2]))
            elif kind == "stats":
                self._stats = message[1]
            elif kind == "info":
                self.info = message[1]
                if self._info_arrived is not None:
                    self._info_arrived.set()
            elif kind == "dead":
                if self._external_address is not None:
                    self._lose_external(message[1])
                else:   # ours: its exit restarts it (`_on_core_exit`)
                    logger.error("%s", message[1])
                    self._fail_all(EngineDeadError(message[1]))

    def _fail_all(self, error: EngineDeadError) -> None:
        for request_id, queue in list(self._queues.items()):
            queue.put_nowait(error)
            self._processor.remove(request_id)

    # ---- a core that died ------------------------------------------------------------------------

    def _on_core_exit(self, proc: BaseProcess) -> None:
        assert self._loop is not None
        self._loop.remove_reader(proc.sentinel)
        if self._closing or proc is not self._proc:
            return
        proc.join(5)   # it has exited (its sentinel fired): this only reaps it
        self._proc = None
        self._available = False
        self._unavailable_reason = f"engine core exited (exit code {proc.exitcode}); restarting"
        logger.error("engine core %d (pid %s) exited with code %s", self._incarnation, proc.pid, proc.exitcode)
        self._fail_all(EngineDeadError(f"engine core process exited (exit code {proc.exitcode})"))
        if self.restart:
            self._restart_task = asyncio.create_task(self._restart(), name="engine-core-restart")
        else:
            self._unavailable_reason = f"engine core exited (exit code {proc.exitcode})"

    async def _restart(self) -> None:
        delay = self.restart_backoff_s
        while not self._closing:
            try:
                self.launch()
                await asyncio.to_thread(self._wait_ready)
                self._connect()
                self.restarts += 1
                return
            except Exception as exc:  # noqa: BLE001 - keep trying; requests meanwhile get a clear 503
                logger.error("engine core restart failed: %s; retrying in %.0f s", exc, delay)
                self._unavailable_reason = f"engine core restart failed ({exc}); retrying"
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)


def _stop_process(proc: BaseProcess) -> None:
    """Ask nicely (the shutdown message was sent), then terminate, then kill."""
    proc.join(5)
    if proc.is_alive():
        proc.terminate()
        proc.join(5)
    if proc.is_alive():
        proc.kill()
        proc.join(5)
    with contextlib.suppress(Exception):
        os.waitpid(proc.pid, os.WNOHANG)  # type: ignore[arg-type]
