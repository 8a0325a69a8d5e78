"""An OpenAI-compatible upstream (vLLM, a hosted API) as a generation backend.

The upstream is read as a stream by default, whether or not the client streams: the output gate then
sees sentences as they arrive (and a refusal closes the upstream request early), and a stall is caught
between chunks instead of at the end. Every failure becomes an `UpstreamError` with the status the
client gets and a stable code:

| what happened                                  | status | code                     |
|------------------------------------------------|--------|--------------------------|
| no connection within connect_timeout_s, no chunk within read_timeout_s, answer longer than total_timeout_s, no free pooled connection | 504 | upstream_timeout |
| a body over max_body_bytes, a stream line over max_line_bytes, an answer over max_tokens x max_chars_per_token | 502 | upstream_too_large |
| connection refused / reset before the request was sent (after `connect_retries`) | 502 | upstream_unreachable |
| the upstream answered 5xx                      | 502    | upstream_error           |
| the upstream refused us (401, 403, 404, ...)   | 502    | upstream_refused         |
| the upstream rejected the request itself (400, 413, 422) | 400 | upstream_rejected_request |
| the upstream rate-limited us (429)             | 429    | upstream_rate_limited    |
| the connection died mid-answer                 | 502    | upstream_disconnected    |
| a reply that is not the OpenAI wire format     | 502    | upstream_malformed       |

Bounds: `total_timeout_s` holds for the whole exchange (connecting, the headers, the body, every stream
line), however slowly the upstream dribbles bytes; nothing the upstream sends is buffered past its cap.

The upstream's own words (an error body, an `error` event, a malformed event) are untrusted and may hold
anyone's PII: the client gets our summary of the failure (with a PII-redacted, capped excerpt only where the
upstream rejected the client's own request), and the record keeps them under the request's content mode
(`UpstreamError.upstream_words`).

Retries: a generation request is not idempotent (it costs upstream compute, and a sampled answer
differs each time), so it is retried only when the connection never opened, i.e. the upstream cannot
have seen it. Idempotent calls (`list_models`) are also retried on 5xx and timeouts.
"""

from __future__ import annotations

import asyncio
import json
import time
import unicodedata
from collections.abc import AsyncIterator, Awaitable
from contextlib import aclosing
from typing import Any, TypeVar

import httpx

from auditor.gate.pii import redact_pii
from auditor.serving.registry import UpstreamConfig
from auditor.serving.upstream_health import CANCELLED, OK, UpstreamHealth
from auditor.trail.chain import sha256_text
from engine.outputs import RequestOutput, RequestStats, TokenLogprob
from engine.sampling_params import SamplingParams

_ERROR_BODY_BYTES = 4096
_SAID_CHARS = 1000           # the most of the upstream's own words an error keeps
_EXCERPT_CHARS = 200         # the most of them a client sees (redacted), where it sees any
_RETRY_BACKOFF_S = (0.1, 0.3, 1.0, 2.0)
_NOT_CONSTRAINED = "upstream model: decoding runs outside this service, so the KG constraint was not applied"
_T = TypeVar("_T")


class UpstreamError(Exception):
    """The upstream failed the request; `status_code`, `code` and `message` are what the client gets.

    `summary` is this service's account of the failure; `said` the upstream's own words (an error body or
    event, a malformed event), which are untrusted: they reach the client only as a redacted excerpt, and only
    when `share_excerpt` (the upstream rejected the client's own request, which the client must be able to fix)."""

    def __init__(self, status_code: int, code: str, summary: str, *, headers: dict[str, str] | None = None,
                 said: str | None = None, share_excerpt: bool = False) -> None:
        super().__init__(summary)
        self.status_code, self.code, self.summary = status_code, code, summary
        self.said = said[:_SAID_CHARS] if said else None
        excerpt = _client_excerpt(self.said) if share_excerpt and self.said else ""
        self.message = summary + (f": {excerpt}" if excerpt else "")
        self.headers = headers or {}
        self.audit_id: str | None = None       # set once the failed request is recorded

    def upstream_words(self, content_mode: str) -> str:
        """The upstream's words as a record's `error` field may keep them (chained and never purged): as they
        were ("raw"), PII-redacted ("redacted"), or only their digest ("hash"); "" when it said nothing."""
        if not self.said:
            return ""
        if content_mode == "raw":
            return f"; the upstream said: {self.said}"
        if content_mode == "redacted":
            return f"; the upstream said: {redact_pii(self.said)[0]}"
        return f"; the upstream's words are not kept (content mode {content_mode}, sha256 {sha256_text(self.said)})"


def _client_excerpt(said: str) -> str:
    """PII redacted first (a cut could leave part of a number that no longer reads as one), then control and
    format characters dropped, then cut."""
    redacted = redact_pii(said)[0]
    printable = "".join(c if unicodedata.category(c)[0] != "C" else " " for c in redacted)
    return " ".join(printable.split())[:_EXCERPT_CHARS]


class UpstreamBackend:
    """One upstream endpoint with a pooled, kept-alive HTTP client (opened by `start`, closed by `aclose`)."""

    kg_constrained = False
    checkpoint_hash = None

    def __init__(self, model_id: str, config: UpstreamConfig, *, api_key: str | None,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.model_id = model_id
        self.config = config
        self._api_key = api_key
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self.health = UpstreamHealth()   # outcomes of the requests made anyway: /ready and the metrics read them

    # -- lifecycle -------------------------------------------------------------------------------------
    async def start(self) -> None:
        if self._client is not None:
            return
        config = self.config
        # identity: a compressed reply would be inflated a network read at a time, past what the caps see
        headers = {"Accept-Encoding": "identity"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        self._client = httpx.AsyncClient(
            base_url=config.base_url, headers=headers, transport=self._transport,
            timeout=httpx.Timeout(connect=config.connect_timeout_s, read=config.read_timeout_s,
                                  write=config.read_timeout_s, pool=config.connect_timeout_s),
            limits=httpx.Limits(max_connections=config.max_connections,
                                max_keepalive_connections=config.max_connections, keepalive_expiry=60.0),
        )

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    # -- the backend protocol ----------------------------------------------------------------------------
    def render(self, messages: list[dict[str, Any]], **_template_kwargs: Any) -> list[dict[str, Any]]:
        """The upstream applies its own chat template: the messages go as they are (tools are refused before
        this for upstream models, so there are no template arguments to carry)."""
        return messages

    def record_details(self) -> dict[str, Any]:
        return {"upstream": {"base_url": self.config.base_url, "model": self.config.model},
                "decoding": {"kg_constrained": False, "reason": _NOT_CONSTRAINED}}

    async def generate(self, prompt: str | list[dict[str, str]], params: SamplingParams, *, request_id: str,
                       trace: dict[str, Any], **engine_kwargs: Any) -> AsyncIterator[RequestOutput]:
        """`_generate`, its outcome and latency told to `self.health` (ok, cancelled or the UpstreamError code)."""
        started, outcome = time.perf_counter(), CANCELLED
        try:
            # aclosing: a consumer that stops early (a gate refusal) closes the upstream request now, not at GC
            async with aclosing(self._generate(prompt, params, request_id=request_id, trace=trace,
                                               **engine_kwargs)) as outputs:
                async for out in outputs:
                    yield out
            outcome = OK
        except UpstreamError as exc:
            outcome = exc.code
            raise
        except Exception:
            outcome = "internal_error"
            raise
        finally:
            self.health.observe(outcome, time.perf_counter() - started)

    async def _generate(self, prompt: str | list[dict[str, str]], params: SamplingParams, *, request_id: str,
                        trace: dict[str, Any], **_engine_kwargs: Any) -> AsyncIterator[RequestOutput]:
        """Outputs like the engine's (`text` cumulative, `new_text` and `logprobs` the delta); `trace` gets the
        upstream's response id and timings."""
        chat = isinstance(prompt, list)
        payload = request_payload(prompt, params, model=self.config.model, stream=self.config.stream)
        started = time.perf_counter()
        config = self.config
        deadline = _Deadline(config.total_timeout_s)
        reply = _Reply(request_id, chat, max_chars=params.max_tokens * config.max_chars_per_token,
                       max_logprobs=params.max_tokens)
        upstream = trace.setdefault("upstream", {})
        try:
            async with self._open("/chat/completions" if chat else "/completions", payload, deadline) as response:
                upstream["status"] = response.status_code
                upstream["ttfb_s"] = round(time.perf_counter() - started, 6)
                await _raise_for_status(response, deadline)
                if _is_event_stream(response):
                    async for out in reply.read_events(_lines(response, deadline, config.max_line_bytes), deadline):
                        yield out
                else:
                    yield reply.read_body(json.loads(await _read_body(response, deadline, config.max_body_bytes)))
        except json.JSONDecodeError as exc:
            raise UpstreamError(502, "upstream_malformed", f"the upstream answered with invalid JSON ({exc.msg})") from exc
        except httpx.TimeoutException as exc:
            raise _timeout(exc, self.config) from exc
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            raise UpstreamError(502, "upstream_disconnected", "the upstream closed the connection after "
                                f"{len(reply.text)} characters of its answer ({type(exc).__name__})") from exc
        finally:
            deadline.close()
            upstream["response_id"] = reply.response_id
            upstream["elapsed_s"] = round(time.perf_counter() - started, 6)

    # -- idempotent calls ------------------------------------------------------------------------------
    async def list_models(self) -> list[str]:
        """The upstream's model ids (GET /models): a readiness probe, retried on 5xx and timeouts, each attempt
        bounded like a generation (total_timeout_s, max_body_bytes)."""
        client = self._require_client()
        config = self.config
        for attempt in range(config.connect_retries + 1):
            final = attempt == config.connect_retries
            deadline = _Deadline(config.total_timeout_s)
            try:
                ids = await deadline.within(self._model_ids(client, deadline, final=final))
                if ids is not None:
                    return ids
            except (httpx.TimeoutException, httpx.TransportError) as exc:
                if final:
                    raise _transport_error(exc, config) from exc
            except UpstreamError as exc:
                if exc.code != "upstream_timeout" or final:
                    raise
            finally:
                deadline.close()
            await asyncio.sleep(_RETRY_BACKOFF_S[min(attempt, len(_RETRY_BACKOFF_S) - 1)])
        raise AssertionError("unreachable")

    async def _model_ids(self, client: httpx.AsyncClient, deadline: _Deadline, *, final: bool) -> list[str] | None:
        """One GET /models; None: a 5xx worth another attempt."""
        async with client.stream("GET", "/models") as response:
            if response.status_code >= 500 and not final:
                return None
            await _raise_for_status(response, deadline)
            try:
                listing = json.loads(await _read_body(response, deadline, self.config.max_body_bytes))
            except json.JSONDecodeError as exc:
                raise UpstreamError(502, "upstream_malformed", "the upstream's model list is not JSON") from exc
        data = listing.get("data") if isinstance(listing, dict) else None
        return [str(item.get("id")) for item in data or [] if isinstance(item, dict)]

    # -- plumbing --------------------------------------------------------------------------------------
    def _require_client(self) -> httpx.AsyncClient:
        if self._client is None:
            raise UpstreamError(502, "upstream_unreachable", f"the client for {self.model_id} is not started")
        return self._client

    def _open(self, path: str, payload: dict[str, Any], deadline: _Deadline) -> _Opened:
        return _Opened(self, path, payload, deadline)


class _Deadline:
    """The upstream's total_timeout_s, held across every read of one exchange (a read timeout alone lets a
    dribble run forever). One timer for the exchange: when it fires, it cancels the read in progress, if any,
    and every read after it fails at once. Only reads are cancelled, never the caller's work between them (the
    gate, store commits), so `within` wraps awaits that never span a yield to the caller. (asyncio.timeout per
    read does the same at about 15 us a read, several times the cost of parsing the event.)"""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.at = time.monotonic() + seconds
        self._timer: asyncio.TimerHandle | None = None
        self._reader: asyncio.Task[Any] | None = None     # the task waiting in a read
        self._fired = False

    def expired(self) -> UpstreamError:
        return UpstreamError(504, "upstream_timeout",
                             f"the upstream's answer took longer than total_timeout_s ({self.seconds:g}s)")

    def check(self) -> None:
        if time.monotonic() >= self.at:
            raise self.expired()

    async def within(self, step: Awaitable[_T]) -> _T:
        """`step` (a read), cancelled if the deadline passes while it waits: UpstreamError upstream_timeout."""
        if self._fired or time.monotonic() >= self.at:
            if asyncio.iscoroutine(step):
                step.close()
            raise self.expired()
        if self._timer is None:
            # call_later: a loop's own clock (uvloop's) need not be time.monotonic
            self._timer = asyncio.get_running_loop().call_later(self.at - time.monotonic(), self._fire)
        previous, self._reader = self._reader, asyncio.current_task()
        try:
            return await step
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if self._fired and task is not None and task.uncancel() == 0:   # ours, not a caller's cancel
                raise self.expired() from None
            raise
        finally:
            self._reader = previous

    def _fire(self) -> None:
        self._fired = True
        if self._reader is not None:
            self._reader.cancel()

    def close(self) -> None:
        """The exchange is over: the timer goes (it would keep this object alive until the deadline)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class _Opened:
    """`async with`: POST and stream the response (headers read within the deadline), retrying only
    connections that never opened."""

    def __init__(self, backend: UpstreamBackend, path: str, payload: dict[str, Any], deadline: _Deadline) -> None:
        self.backend, self.path, self.payload, self.deadline = backend, path, payload, deadline
        self._context: Any = None

    async def __aenter__(self) -> httpx.Response:
        client = self.backend._require_client()
        config = self.backend.config
        for attempt in range(config.connect_retries + 1):
            self._context = client.stream("POST", self.path, json=self.payload)
            try:
                return await self.deadline.within(self._context.__aenter__())
            except UpstreamError:
                self._context = None
                raise
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:   # the upstream never saw the request
                self._context = None
                if attempt == config.connect_retries:
                    raise _transport_error(exc, config) from exc
            except httpx.TimeoutException as exc:
                self._context = None
                raise _timeout(exc, config) from exc
            except httpx.TransportError as exc:      # sent, then lost: not retried
                self._context = None
                raise UpstreamError(502, "upstream_disconnected",
                                    f"the upstream connection failed ({type(exc).__name__})") from exc
            await self.deadline.within(asyncio.sleep(_RETRY_BACKOFF_S[min(attempt, len(_RETRY_BACKOFF_S) - 1)]))
        raise AssertionError("unreachable")

    async def __aexit__(self, *exc_info: Any) -> None:
        if self._context is not None:
            await self._context.__aexit__(*exc_info)


class _Reply:
    """Accumulates one upstream answer and checks that each piece is the OpenAI wire format."""

    def __init__(self, request_id: str, chat: bool, *, max_chars: int, max_logprobs: int) -> None:
        self.request_id, self.chat = request_id, chat
        self.max_chars, self.max_logprobs = max_chars, max_logprobs
        self.text = ""
        self.finish_reason: str | None = None
        self.response_id: str | None = None
        self.stats = RequestStats(arrival_time=time.time())
        self.logprobs: list[TokenLogprob] = []
        self._logprobs_sent = 0
        self._started = time.perf_counter()

    async def read_events(self, lines: AsyncIterator[str], deadline: _Deadline) -> AsyncIterator[RequestOutput]:
        done = False
        async for line in lines:
            deadline.check()      # the reads are bounded; this also counts the time the gate took between them
            if not line.startswith("data:"):
                continue          # SSE comments, event names, blank separators
            data = line[5:].strip()
            if data == "[DONE]":
                done = True
                break
            out = self._absorb(_json_object(data))
            if out is not None:
                yield out
        if not done and self.finish_reason is None:
            raise UpstreamError(502, "upstream_disconnected",
                                f"the upstream's stream ended without finishing, after {len(self.text)} characters")
        yield self._output("", finished=True)

    def read_body(self, body: Any) -> RequestOutput:
        if not isinstance(body, dict):
            raise UpstreamError(502, "upstream_malformed", "the upstream's answer is not a JSON object")
        self._absorb(body, whole=True)
        return self._output(self.text, finished=True)

    def _absorb(self, chunk: dict[str, Any], *, whole: bool = False) -> RequestOutput | None:
        if "error" in chunk:
            error = chunk["error"] if isinstance(chunk["error"], dict) else {"message": str(chunk["error"])}
            raise UpstreamError(502, "upstream_error", "the upstream reported an error in its answer",
                                said=str(error.get("message")))
        self.response_id = self.response_id or _optional_str(chunk.get("id"))
        self._usage(chunk.get("usage"))
        choices = chunk.get("choices")
        if not isinstance(choices, list) or (whole and not choices):
            raise UpstreamError(502, "upstream_malformed", "the upstream's answer has no 'choices' list")
        if not choices:
            return None           # the usage-only chunk at the end of a stream
        choice = choices[0]
        if not isinstance(choice, dict):
            raise UpstreamError(502, "upstream_malformed", "a choice in the upstream's answer is not an object")
        delta = _choice_text(choice, chat=self.chat, whole=whole)
        self.finish_reason = _optional_str(choice.get("finish_reason")) or self.finish_reason
        self._logprobs(choice.get("logprobs"))
        if len(self.text) + len(delta) > self.max_chars:
            raise UpstreamError(502, "upstream_too_large", f"the upstream's answer is longer than {self.max_chars} "
                                "characters (max_tokens x max_chars_per_token)")
        if whole:
            self.text = delta
            return None
        self.text += delta
        if self.stats.first_token_time is None and delta:
            self.stats.first_token_time = time.time()
            self.stats.time_to_first_token_seconds = time.perf_counter() - self._started
        return self._output(delta, finished=False) if delta else None

    def _usage(self, usage: Any) -> None:
        if isinstance(usage, dict):
            self.stats.num_prompt_tokens = _count(usage.get("prompt_tokens"))
            self.stats.num_generated_tokens = _count(usage.get("completion_tokens"))

    def _logprobs(self, logprobs: Any) -> None:
        if not self.chat or not isinstance(logprobs, dict) or not isinstance(logprobs.get("content"), list):
            return
        for entry in logprobs["content"]:
            if len(self.logprobs) >= self.max_logprobs:
                raise UpstreamError(502, "upstream_too_large",
                                    f"the upstream sent logprobs for more than max_tokens ({self.max_logprobs}) tokens")
            if isinstance(entry, dict) and isinstance(entry.get("logprob"), int | float):
                top = [(-1, str(t.get("token")), float(t.get("logprob", 0.0))) for t in entry.get("top_logprobs") or []
                       if isinstance(t, dict) and isinstance(t.get("logprob"), int | float)]
                self.logprobs.append(TokenLogprob(-1, str(entry.get("token", "")), float(entry["logprob"]), top))

    def _output(self, delta: str, *, finished: bool) -> RequestOutput:
        if finished:
            self.stats.e2e_request_latency_seconds = time.perf_counter() - self._started
            self.stats.num_generated_tokens = self.stats.num_generated_tokens or len(self.logprobs)
        new_logprobs, self._logprobs_sent = self.logprobs[self._logprobs_sent:], len(self.logprobs)
        return RequestOutput(
            request_id=self.request_id, prompt_token_ids=[], token_ids=[], text=self.text, new_token_ids=[],
            new_text=delta, finished=finished, finish_reason=(self.finish_reason or "stop") if finished else None,
            logprobs=new_logprobs or None, stats=self.stats,
        )


def request_payload(prompt: str | list[dict[str, str]], params: SamplingParams, *, model: str,
                    stream: bool) -> dict[str, Any]:
    """The OpenAI request body for the upstream: the client's validated sampling parameters, nothing of ours
    (the KG constraint's per-request arguments stay here: a vLLM with the plugin would take them through
    `vllm_xargs`, see docs/upstream.md)."""
    payload: dict[str, Any] = {"model": model, "max_tokens": params.max_tokens, "temperature": params.temperature,
                               "top_p": params.top_p, "stream": stream}
    payload["messages" if isinstance(prompt, list) else "prompt"] = prompt
    if stream:
        payload["stream_options"] = {"include_usage": True}
    for name in ("presence_penalty", "frequency_penalty"):
        if getattr(params, name):
            payload[name] = getattr(params, name)
    if params.seed is not None:
        payload["seed"] = params.seed
    if params.stop:
        payload["stop"] = list(params.stop)
    if params.response_format is not None:
        payload["response_format"] = params.response_format
    if params.extra_args.get("logit_bias"):   # token ids of the upstream's own tokenizer, as the client meant
        payload["logit_bias"] = {str(token): bias for token, bias in params.extra_args["logit_bias"].items()}
    if params.logprobs is not None:
        if isinstance(prompt, list):
            payload["logprobs"], payload["top_logprobs"] = True, params.logprobs
        else:
            payload["logprobs"] = params.logprobs
    return payload


def _choice_text(choice: dict[str, Any], *, chat: bool, whole: bool) -> str:
    if chat:
        holder = choice.get("message" if whole else "delta")
        if not isinstance(holder, dict):
            raise UpstreamError(502, "upstream_malformed",
                                f"a chat choice without a '{'message' if whole else 'delta'}' object")
        text = holder.get("content")
    else:
        text = choice.get("text")
    if text is None:
        return ""
    if not isinstance(text, str):
        raise UpstreamError(502, "upstream_malformed", "the upstream's text is not a string")
    return text


def _json_object(data: str) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except json.JSONDecodeError as exc:
        raise UpstreamError(502, "upstream_malformed", f"a stream event is not JSON ({exc.msg})",
                            said=data[:_SAID_CHARS]) from exc
    if not isinstance(value, dict):
        raise UpstreamError(502, "upstream_malformed", "a stream event is not a JSON object")
    return value


def _optional_str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value >= 0 else 0


def _is_event_stream(response: httpx.Response) -> bool:
    return response.headers.get("content-type", "").split(";")[0].strip() == "text/event-stream"


def _too_large(what: str, limit: int, setting: str) -> UpstreamError:
    return UpstreamError(502, "upstream_too_large", f"the upstream's {what} is larger than {limit} bytes ({setting})")


async def _read_body(response: httpx.Response, deadline: _Deadline, limit: int, *, truncate: bool = False) -> bytes:
    """The body, read within the deadline; past `limit` bytes: cut there (`truncate`) or 502 upstream_too_large."""
    announced = response.headers.get("content-length", "")
    if not truncate and announced.isdigit() and int(announced) > limit:
        raise _too_large("body", limit, "max_body_bytes")
    body = bytearray()
    pieces = response.aiter_bytes()
    while (piece := await deadline.within(anext(pieces, None))) is not None:
        body += piece
        if len(body) > limit:
            if truncate:
                return bytes(body[:limit])
            raise _too_large("body", limit, "max_body_bytes")
    return bytes(body)


async def _lines(response: httpx.Response, deadline: _Deadline, limit: int) -> AsyncIterator[str]:
    """An event stream's lines (ended by CRLF, LF or CR), each read within the deadline; a line of more than
    `limit` bytes is 502 upstream_too_large before it is buffered whole."""
    pending: list[bytes] = []   # the reads since the last line end
    pending_bytes = 0
    skip_lf = False             # the last read ended with CR: a LF first in the next one belongs to that end
    pieces = response.aiter_bytes()
    while (piece := await deadline.within(anext(pieces, None))) is not None:
        if skip_lf and piece.startswith(b"\n"):
            piece = piece[1:]
        skip_lf = False
        if b"\n" not in piece and b"\r" not in piece:      # the usual dribble: no line ends yet
            pending.append(piece)
            pending_bytes += len(piece)
            if pending_bytes > limit:
                raise _too_large("event-stream line", limit, "max_line_bytes")
            continue
        lines = b"".join((*pending, piece)).splitlines(keepends=True)   # bytes: only CRLF, LF and CR end lines
        rest = b"" if lines[-1].endswith((b"\n", b"\r")) else lines.pop()
        skip_lf = not rest and lines[-1].endswith(b"\r")
        for line in lines:
            text = line[:-2] if line.endswith(b"\r\n") else line[:-1]
            if len(text) > limit:
                raise _too_large("event-stream line", limit, "max_line_bytes")
            yield text.decode("utf-8", errors="replace")
        pending, pending_bytes = ([rest], len(rest)) if rest else ([], 0)
        if pending_bytes > limit:
            raise _too_large("event-stream line", limit, "max_line_bytes")
    if pending:
        yield b"".join(pending).decode("utf-8", errors="replace")


async def _raise_for_status(response: httpx.Response, deadline: _Deadline) -> None:
    if response.status_code < 300:
        return
    said = _error_message(await _read_body(response, deadline, _ERROR_BODY_BYTES, truncate=True))
    status = response.status_code
    summary = f"the upstream answered {status}"
    if status >= 500:
        raise UpstreamError(502, "upstream_error", summary, said=said)
    if status == 429:
        retry_after = response.headers.get("retry-after")
        raise UpstreamError(429, "upstream_rate_limited", summary, said=said,
                            headers={"Retry-After": retry_after} if retry_after and retry_after.isdigit() else None)
    if status in (400, 413, 422):   # the client's own request: it needs the reason to fix it
        raise UpstreamError(400, "upstream_rejected_request", summary, said=said, share_excerpt=True)
    raise UpstreamError(502, "upstream_refused", summary, said=said)


def _error_message(body: bytes) -> str:
    """The upstream's own words in an error body (its `error.message` where it has one)."""
    try:
        value = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return body[:_SAID_CHARS].decode("utf-8", errors="replace").strip()
    error = value.get("error") if isinstance(value, dict) else None
    if isinstance(error, dict):
        return str(error.get("message", ""))[:_SAID_CHARS]
    return str(error or value)[:_SAID_CHARS]


def _timeout(exc: httpx.TimeoutException, config: UpstreamConfig) -> UpstreamError:
    which = {httpx.ConnectTimeout: f"no connection within {config.connect_timeout_s:g}s",
             httpx.ReadTimeout: f"no data within {config.read_timeout_s:g}s",
             httpx.WriteTimeout: f"could not send within {config.read_timeout_s:g}s",
             httpx.PoolTimeout: f"no free connection within {config.connect_timeout_s:g}s"}.get(type(exc), str(exc))
    return UpstreamError(504, "upstream_timeout", f"the upstream timed out: {which}")


def _transport_error(exc: Exception, config: UpstreamConfig) -> UpstreamError:
    if isinstance(exc, httpx.TimeoutException):
        return _timeout(exc, config)
    return UpstreamError(502, "upstream_unreachable", f"cannot connect to the upstream after "
                         f"{config.connect_retries + 1} attempt(s) ({type(exc).__name__})")
