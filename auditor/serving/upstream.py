"""An OpenAI-compatible upstream (vLLM, a hosted API) as a generation backend.

The upstream is read as a stream by default, whether or not the client streams: the output gate then
sees sentences as they arrive (and a refusal closes the upstream request early), and a stall is caught
between chunks instead of at the end. Every failure becomes an `UpstreamError` with the status the
client gets and a stable code:

| what happened                                  | status | code                     |
|------------------------------------------------|--------|--------------------------|
| no connection within connect_timeout_s, no chunk within read_timeout_s, answer longer than total_timeout_s, no free pooled connection | 504 | upstream_timeout |
| connection refused / reset before the request was sent (after `connect_retries`) | 502 | upstream_unreachable |
| the upstream answered 5xx                      | 502    | upstream_error           |
| the upstream refused us (401, 403, 404, ...)   | 502    | upstream_refused         |
| the upstream rejected the request itself (400, 413, 422) | 400 | upstream_rejected_request |
| the upstream rate-limited us (429)             | 429    | upstream_rate_limited    |
| the connection died mid-answer                 | 502    | upstream_disconnected    |
| a reply that is not the OpenAI wire format     | 502    | upstream_malformed       |

Retries: a generation request is not idempotent (it costs upstream compute, and a sampled answer
differs each time), so it is retried only when the connection never opened, i.e. the upstream cannot
have seen it. Idempotent calls (`list_models`) are also retried on 5xx and timeouts.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx

from auditor.serving.registry import UpstreamConfig
from engine.outputs import RequestOutput, RequestStats, TokenLogprob
from engine.sampling_params import SamplingParams

_ERROR_BODY_BYTES = 4096
_RETRY_BACKOFF_S = (0.1, 0.3, 1.0, 2.0)
_NOT_CONSTRAINED = "upstream model: decoding runs outside this service, so the KG constraint was not applied"


class UpstreamError(Exception):
    """The upstream failed the request; `status_code` and `code` are what the client gets."""

    def __init__(self, status_code: int, code: str, message: str, *, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status_code, self.code, self.message = status_code, code, message
        self.headers = headers or {}
        self.audit_id: str | None = None       # set once the failed request is recorded


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

    # -- lifecycle -------------------------------------------------------------------------------------
    async def start(self) -> None:
        if self._client is not None:
            return
        config = self.config
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
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
                       trace: dict[str, Any], **_engine_kwargs: Any) -> AsyncIterator[RequestOutput]:
        """Outputs like the engine's (`text` cumulative, `new_text` and `logprobs` the delta); `trace` gets the
        upstream's response id and timings."""
        chat = isinstance(prompt, list)
        payload = request_payload(prompt, params, model=self.config.model, stream=self.config.stream)
        started = time.perf_counter()
        deadline = time.monotonic() + self.config.total_timeout_s
        reply = _Reply(request_id, chat)
        upstream = trace.setdefault("upstream", {})
        try:
            async with self._open("/chat/completions" if chat else "/completions", payload) as response:
                upstream["status"] = response.status_code
                upstream["ttfb_s"] = round(time.perf_counter() - started, 6)
                await _raise_for_status(response)
                if _is_event_stream(response):
                    async for out in reply.read_events(response, deadline):
                        yield out
                else:
                    yield reply.read_body(json.loads(await _read_bounded(response)))
        except json.JSONDecodeError as exc:
            raise UpstreamError(502, "upstream_malformed", f"the upstream answered with invalid JSON ({exc.msg})") from exc
        except httpx.TimeoutException as exc:
            raise _timeout(exc, self.config) from exc
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            raise UpstreamError(502, "upstream_disconnected", "the upstream closed the connection after "
                                f"{len(reply.text)} characters of its answer ({type(exc).__name__})") from exc
        finally:
            upstream["response_id"] = reply.response_id
            upstream["elapsed_s"] = round(time.perf_counter() - started, 6)

    # -- idempotent calls ------------------------------------------------------------------------------
    async def list_models(self) -> list[str]:
        """The upstream's model ids (GET /models): a readiness probe, retried on 5xx and timeouts."""
        client = self._require_client()
        for attempt in range(self.config.connect_retries + 1):
            try:
                response = await client.get("/models")
                if response.status_code < 500 or attempt == self.config.connect_retries:
                    await _raise_for_status(response)
                    return [str(item.get("id")) for item in response.json().get("data", []) if isinstance(item, dict)]
            except (httpx.TimeoutException, httpx.TransportError) as exc:
                if attempt == self.config.connect_retries:
                    raise _transport_error(exc, self.config) from exc
            await asyncio.sleep(_RETRY_BACKOFF_S[min(attempt, len(_RETRY_BACKOFF_S) - 1)])
        raise AssertionError("unreachable")

    # -- plumbing --------------------------------------------------------------------------------------
    def _require_client(self) -> httpx.AsyncClient:
        if self._client is None:
            raise UpstreamError(502, "upstream_unreachable", f"the client for {self.model_id} is not started")
        return self._client

    def _open(self, path: str, payload: dict[str, Any]) -> _Opened:
        return _Opened(self, path, payload)


class _Opened:
    """`async with`: POST and stream the response, retrying only connections that never opened."""

    def __init__(self, backend: UpstreamBackend, path: str, payload: dict[str, Any]) -> None:
        self.backend, self.path, self.payload = backend, path, payload
        self._context: Any = None

    async def __aenter__(self) -> httpx.Response:
        client = self.backend._require_client()
        config = self.backend.config
        for attempt in range(config.connect_retries + 1):
            self._context = client.stream("POST", self.path, json=self.payload)
            try:
                return await self._context.__aenter__()
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
            await asyncio.sleep(_RETRY_BACKOFF_S[min(attempt, len(_RETRY_BACKOFF_S) - 1)])
        raise AssertionError("unreachable")

    async def __aexit__(self, *exc_info: Any) -> None:
        if self._context is not None:
            await self._context.__aexit__(*exc_info)


class _Reply:
    """Accumulates one upstream answer and checks that each piece is the OpenAI wire format."""

    def __init__(self, request_id: str, chat: bool) -> None:
        self.request_id, self.chat = request_id, chat
        self.text = ""
        self.finish_reason: str | None = None
        self.response_id: str | None = None
        self.stats = RequestStats(arrival_time=time.time())
        self.logprobs: list[TokenLogprob] = []
        self._logprobs_sent = 0
        self._started = time.perf_counter()

    async def read_events(self, response: httpx.Response, deadline: float) -> AsyncIterator[RequestOutput]:
        done = False
        async for line in response.aiter_lines():
            if time.monotonic() > deadline:
                raise UpstreamError(504, "upstream_timeout", "the upstream's answer took longer than total_timeout_s")
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
            raise UpstreamError(502, "upstream_error", f"the upstream reported an error: {str(error.get('message'))[:500]}")
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
        raise UpstreamError(502, "upstream_malformed", f"a stream event is not JSON ({exc.msg}): {data[:80]!r}") from exc
    if not isinstance(value, dict):
        raise UpstreamError(502, "upstream_malformed", "a stream event is not a JSON object")
    return value


def _optional_str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value >= 0 else 0


def _is_event_stream(response: httpx.Response) -> bool:
    return response.headers.get("content-type", "").split(";")[0].strip() == "text/event-stream"


async def _read_bounded(response: httpx.Response, limit: int | None = None) -> bytes:
    body = b""
    async for piece in response.aiter_bytes():
        body += piece
        if limit is not None and len(body) >= limit:
            break
    return body


async def _raise_for_status(response: httpx.Response) -> None:
    if response.status_code < 300:
        return
    detail = _error_message(await _read_bounded(response, _ERROR_BODY_BYTES))
    status = response.status_code
    said = f"the upstream answered {status}" + (f": {detail}" if detail else "")
    if status >= 500:
        raise UpstreamError(502, "upstream_error", said)
    if status == 429:
        retry_after = response.headers.get("retry-after")
        raise UpstreamError(429, "upstream_rate_limited", said,
                            headers={"Retry-After": retry_after} if retry_after and retry_after.isdigit() else None)
    if status in (400, 413, 422):
        raise UpstreamError(400, "upstream_rejected_request", said)
    raise UpstreamError(502, "upstream_refused", said)


def _error_message(body: bytes) -> str:
    try:
        value = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return body[:200].decode("utf-8", errors="replace").strip()
    error = value.get("error") if isinstance(value, dict) else None
    if isinstance(error, dict):
        return str(error.get("message", ""))[:500]
    return str(error or value)[:200]


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
