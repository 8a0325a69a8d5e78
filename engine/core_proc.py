"""The engine core in its own process (after vLLM V1's EngineCoreProc): a busy step loop that shares no
GIL with HTTP, validation or SQL.

Threads with one job each:
- the input thread owns the ROUTER socket clients talk to. It decodes requests and hands them to
- the preparing threads (`PREPARING_THREADS`), which prepare them (validation, the processors' per-request
  work such as a KG constraint's allowed-set view) before they reach the step loop, so admitting a request
  never stalls the batch, and a slow view (hundreds of ms for a large medical set) holds up only its own
  request, not every request behind it;
- the main thread runs the step loop: admit prepared requests and aborts, `step_core()`, hand each client
  its deltas; it blocks only when there is nothing to run;
- the output thread encodes and sends, overlapping the next step's compute (torch releases the GIL).
Several API processes may share one core: each says hello with the address it receives on, and gets only
its own requests' outputs there.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import sys
import threading
import time
import traceback
from collections import defaultdict
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

import zmq

from engine.affinity import pin_this_process
from engine.allocator import active_allocator
from engine.errors import refusal_to_wire
from engine.memory import malloc_trim
from engine.sampling_params import InvalidRequestError
from engine.serial import output_to_wire, pack, params_from_wire, unpack

if TYPE_CHECKING:   # torch: imported by the builder, not by the API processes that import this module
    from engine.llm_engine import LLMEngine

logger = logging.getLogger("engine.core")

_SHUTDOWN = object()
PREPARING_THREADS = 2   # more would only take more of the step loop's GIL


def run_engine_core(builder: Callable[[], LLMEngine], input_address: str, ready: Connection,
                    stats_interval_s: float = 0.5, trim_interval_s: float = 30.0,
                    cpus: frozenset[int] | None = None) -> None:
    """Process entry point: build the engine, say ready (or why not) on `ready`, then serve until told to stop.
    `cpus`: the CPUs this process runs on (`engine.affinity`), taken before any thread or torch starts."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)   # the API process decides when the core stops
    if cpus:
        pin_this_process(cpus)
    try:
        engine = builder()
        core = EngineCoreProc(engine, input_address, stats_interval_s=stats_interval_s,
                              trim_interval_s=trim_interval_s, watch_parent=True)
    except BaseException as exc:  # noqa: BLE001 - the parent must hear why, not wait for a timeout
        ready.send(("failed", f"{type(exc).__name__}: {exc}"))
        ready.close()
        sys.exit(1)
    ready.send(("ready", core.info))
    ready.close()
    _warm_up_processors(engine)
    code = core.run()
    # Leave without the interpreter's teardown: the core keeps nothing to flush beyond stdio, and native
    # libraries' static destructors (XGrammar's thread pool, nanobind's leak report) otherwise print
    # "terminate called without an active exception" or leak warnings when a thread is still alive.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _warm_up_processors(engine: LLMEngine) -> threading.Thread:
    """What the processors load on first use (JSON mode's XGrammar: ~1 CPU second), loaded now on a thread,
    after ready: a request that needs it sooner waits for the same work (a lock) and is served as it would be
    later; the step loop runs meanwhile (torch releases the GIL in its compute)."""
    def warm_up() -> None:
        for processor in engine.processors:
            warm = getattr(processor, "warm_up", None)
            if callable(warm):
                try:
                    warm()
                except Exception:   # noqa: BLE001 - the first request that needs it will say what is wrong
                    logger.exception("warming up %s failed", type(processor).__name__)

    thread = threading.Thread(target=warm_up, name="engine-core-warm-up", daemon=True)
    thread.start()
    return thread


class EngineCoreProc:
    def __init__(self, engine: LLMEngine, input_address: str, *, stats_interval_s: float = 0.5,
                 trim_interval_s: float = 30.0, watch_parent: bool = False) -> None:
        """watch_parent: stop when the process that started this one is gone (a core an API process owns);
        a standalone core (`auditor engine-core`) serves whoever connects until it is stopped."""
        self.engine = engine
        self.stats_interval_s = stats_interval_s
        self.trim_interval_s = trim_interval_s
        self.inputs: queue.Queue[Any] = queue.Queue()     # input thread -> step loop
        self.outputs: queue.Queue[Any] = queue.Queue()    # step loop / input thread -> output thread
        self.owners: dict[str, bytes] = {}                # request id -> the client that sent it
        self.to_prepare: queue.SimpleQueue[tuple[bytes, list[Any]]] = queue.SimpleQueue()   # input -> preparing
        # requests handed to a preparing thread and not yet queued for the step loop, and those of them aborted
        # meanwhile (an abort must not overtake its request: the step loop would not know the id yet)
        self._preparing: set[str] = set()
        self._aborted_while_preparing: set[str] = set()
        self._preparing_lock = threading.Lock()
        self.context = zmq.Context()
        self.input_socket = self.context.socket(zmq.ROUTER)
        self.input_socket.setsockopt(zmq.LINGER, 0)
        self.input_socket.bind(input_address)
        self._parent = os.getppid() if watch_parent else None
        self.info = {"model_id": engine.model_id, "checkpoint_hash": engine.checkpoint_hash,
                     "max_model_len": engine.max_model_len, "dtype": engine.dtype, "pid": os.getpid(),
                     "kv_cache": engine.kv_cache_settings, "allocator": active_allocator(),
                     "cpus": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None}

    # ---- the step loop (main thread) -------------------------------------------------------------

    def run(self) -> int:
        threading.Thread(target=self._input_loop, name="engine-core-input", daemon=True).start()
        threading.Thread(target=self._output_loop, name="engine-core-output", daemon=True).start()
        for index in range(PREPARING_THREADS):
            threading.Thread(target=self._prepare_loop, name=f"engine-core-prepare-{index}", daemon=True).start()
        last_stats = last_trim = time.monotonic()
        active = False
        try:
            while True:
                if not self._admit(block=not self.engine.has_unfinished()):
                    return 0
                if self.engine.has_unfinished():
                    self._send_outputs(self.engine.step_core())
                    active = True
                now = time.monotonic()
                idle = not self.engine.has_unfinished()
                # the stats double as a heartbeat: at least once a second, even with nothing to run
                if (active and (idle or now - last_stats >= self.stats_interval_s)) or now - last_stats >= 1.0:
                    self.outputs.put(("broadcast", ["stats", _scalar_stats(self.engine.stats())]))
                    last_stats, active = now, not idle
                if now - last_trim >= self.trim_interval_s:
                    malloc_trim()   # hand freed pages back to the OS (a few ms, twice a minute)
                    last_trim = now
        except BaseException as exc:  # noqa: BLE001 - every client must hear that the core died
            if isinstance(exc, KeyboardInterrupt):
                message = "engine core stopped"
            else:
                message = f"engine core step failed: {type(exc).__name__}: {exc}"
                traceback.print_exc()
            self.outputs.put(("broadcast", ["dead", message]))
            self.outputs.put(_SHUTDOWN)
            time.sleep(0.2)   # let the output thread send it
            return 0 if isinstance(exc, KeyboardInterrupt) else 1
        finally:
            self.outputs.put(_SHUTDOWN)

    def _admit(self, *, block: bool) -> bool:
        """Move prepared requests and aborts into the engine; False once told to shut down."""
        try:
            item = self.inputs.get(timeout=1.0) if block else self.inputs.get_nowait()
        except queue.Empty:
            return True
        while True:
            kind = item[0]
            if kind == "add":
                _, identity, seq = item
                self.owners[seq.request_id] = identity
                try:
                    self.engine.enqueue(seq, output_kind=None)
                except InvalidRequestError as exc:
                    self.owners.pop(seq.request_id, None)
                    self.outputs.put(("send", identity, ["err", seq.request_id, *refusal_to_wire(exc)]))
            elif kind == "abort":
                for request_id in item[1]:
                    self.owners.pop(request_id, None)
                    self.engine.abort(request_id, item[2])
            elif kind == "shutdown":
                return False
            try:
                item = self.inputs.get_nowait()
            except queue.Empty:
                return True

    def _send_outputs(self, outputs: list[Any]) -> None:
        by_client: dict[bytes, list[Any]] = defaultdict(list)
        for out in outputs:
            identity = self.owners.get(out.request_id)
            if identity is None:
                continue
            if out.finished:
                del self.owners[out.request_id]
            by_client[identity].append(out)
        for identity, batch in by_client.items():
            self.outputs.put(("outputs", identity, batch))

    # ---- the input thread ------------------------------------------------------------------------

    def _input_loop(self) -> None:
        poller = zmq.Poller()
        poller.register(self.input_socket, zmq.POLLIN)
        while True:
            if not poller.poll(1000):
                if self._parent is not None and os.getppid() != self._parent:   # our API process is gone
                    self.inputs.put(("shutdown",))
                    return
                continue
            identity, payload = self.input_socket.recv_multipart()
            message = unpack(payload)
            kind = message[0]
            if kind == "add":
                with self._preparing_lock:
                    self._preparing.add(message[1])
                self.to_prepare.put((identity, message))
            elif kind == "abort":
                with self._preparing_lock:
                    self._aborted_while_preparing.update(r for r in message[1] if r in self._preparing)
                self.inputs.put(("abort", message[1], message[2]))
            elif kind == "hello":
                self.outputs.put(("connect", identity, message[1]))
                self.outputs.put(("send", identity, ["info", self.info]))
            elif kind == "shutdown":
                self.inputs.put(("shutdown",))
                return

    def _prepare_loop(self) -> None:
        while True:
            identity, message = self.to_prepare.get()
            self._prepare(identity, message)

    def _prepare(self, identity: bytes, message: list[Any]) -> None:
        _, request_id, prompt_token_ids, params, intent, cache_salt = message
        seq = None
        try:
            seq = self.engine.prepare_request(request_id, prompt_token_ids, params_from_wire(params),
                                              intent=intent, cache_salt=cache_salt)
        except InvalidRequestError as exc:
            self.outputs.put(("send", identity, ["err", request_id, *refusal_to_wire(exc)]))
        except TypeError as exc:   # unknown sampling parameter names
            self.outputs.put(("send", identity, ["err", request_id, str(exc)]))
        except Exception as exc:  # noqa: BLE001 - a bug in preparing one request fails that request, not the core
            logger.exception("preparing request %s failed", request_id)
            self.outputs.put(("send", identity, ["fail", request_id, f"{type(exc).__name__}: {exc}"]))
        with self._preparing_lock:   # queued under the lock: an abort arriving now lands behind it
            self._preparing.discard(request_id)
            aborted = request_id in self._aborted_while_preparing
            self._aborted_while_preparing.discard(request_id)
            if seq is not None and not aborted:
                self.inputs.put(("add", identity, seq))

    # ---- the output thread -----------------------------------------------------------------------

    def _output_loop(self) -> None:
        clients: dict[bytes, zmq.Socket] = {}
        while True:
            item = self.outputs.get()
            if item is _SHUTDOWN:
                break
            kind = item[0]
            if kind == "connect":
                _, identity, address = item
                if identity in clients:   # the client says hello again (it reconnects): a fresh socket
                    clients.pop(identity).close()
                socket = self.context.socket(zmq.PUSH)
                socket.setsockopt(zmq.LINGER, 1000)
                socket.connect(address)
                clients[identity] = socket
            elif kind == "outputs":
                socket = clients.get(item[1])
                if socket is not None:
                    socket.send(_pack_outputs(item[2]))
            elif kind == "send":
                socket = clients.get(item[1])
                if socket is not None:
                    socket.send(pack(item[2]))
            elif kind == "broadcast":
                payload = pack(item[1])
                for socket in clients.values():
                    socket.send(payload)
        for socket in clients.values():
            socket.close()


def _pack_outputs(outputs: list[Any]) -> bytes:
    """One step's deltas for one client. An output that cannot be encoded (a processor put something odd in
    an event) fails its own request rather than this thread, which every client depends on."""
    try:
        return pack(["out", [output_to_wire(out) for out in outputs]])
    except (TypeError, ValueError, OverflowError):
        logger.exception("encoding a step's outputs failed")
    wire = []
    for out in outputs:
        try:
            pack(output_to_wire(out))
            wire.append(output_to_wire(out))
        except (TypeError, ValueError, OverflowError) as exc:
            out.new_events, out.finish_reason = [], out.finish_reason or "abort"
            wire.append(output_to_wire(out))
            logger.error("request %s: output not encodable (%s)", out.request_id, exc)
    return pack(["out", wire])


def _scalar_stats(stats: dict[str, Any]) -> dict[str, Any]:
    """What crosses the boundary: counters and gauges, the KV cache's settings and maps of numbers (finish
    reasons, queue depth per priority), not the latency lists behind them."""
    return {name: value for name, value in stats.items()
            if isinstance(value, int | float) or name == "kv_cache"
            or (isinstance(value, dict) and all(isinstance(v, int | float) for v in value.values()))}
