"""One streamed chat request, timed as a client sees it (as vLLM's `benchmark_serving` times them):

- TTFT: from sending the request to the first chunk with content;
- ITL: the gaps between consecutive content chunks (the service releases gated sentences, so a gap covers
  the tokens of one sentence);
- TPOT: (e2e - TTFT) / (completion tokens - 1), the time per output token after the first;
- e2e: from sending to the end of the stream.

Only loopback addresses are ever contacted (`require_loopback`): a load generator must not be pointed at
someone else's service by a typo.
"""

from __future__ import annotations

import ipaddress
import json
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import httpx

from auditor.loadgen.workload import PlannedRequest


class NotLoopback(ValueError):
    """The target is not this machine."""


def require_loopback(url: str) -> str:
    """The base URL, normalised; raises NotLoopback unless its host is 127.0.0.0/8, ::1 or localhost."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise NotLoopback(f"{url!r} is not an http(s) URL")
    host = parts.hostname
    if host != "localhost":
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise NotLoopback(f"{host} is not a loopback address: loadgen sends traffic to 127.0.0.1 (or ::1) only")
    return url.rstrip("/")


@dataclass(slots=True)
class Result:
    index: int
    intent: str
    sent_at: float                      # seconds since the run started
    status: int = 0                     # HTTP status; 0: no answer (connection failed, timed out, cancelled)
    error: str | None = None            # the error code (OpenAI shape), or the exception's name
    audit_id: str | None = None
    ttft_s: float | None = None
    e2e_s: float = 0.0
    chunk_gaps: list[float] = field(default_factory=list)
    completion_tokens: int = 0
    prompt_tokens: int = 0

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.error is None

    @property
    def tpot_s(self) -> float | None:
        if self.ttft_s is None or self.completion_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.completion_tokens - 1)

    @property
    def itl_s(self) -> float | None:
        """The request's worst gap: an SLA on inter-token latency guards against stalls."""
        return max(self.chunk_gaps) if self.chunk_gaps else None

    def value(self, metric: str) -> float | None:
        return {"ttft": self.ttft_s, "itl": self.itl_s, "tpot": self.tpot_s, "e2e": self.e2e_s}[metric]


async def send(client: httpx.AsyncClient, request: PlannedRequest, *, model: str, max_tokens: int,
               started: float) -> Result:
    """Send one request and read its stream to the end; never raises for a failed request (it is a Result)."""
    sent = time.perf_counter()
    result = Result(request.index, request.intent, sent - started)
    last_chunk: float | None = None
    try:
        async with client.stream("POST", "/v1/chat/completions", json=request.body(model=model, max_tokens=max_tokens),
                                 headers=request.headers()) as response:
            result.status = response.status_code
            result.audit_id = response.headers.get("X-Audit-Id")
            if response.status_code != 200:
                result.error = _error_code(await response.aread()) or f"http_{response.status_code}"
                return result
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[6:])
                if "error" in chunk:   # an error event after the stream began
                    result.error = chunk["error"].get("code") or "stream_error"
                    continue
                now = time.perf_counter()
                choices = chunk.get("choices") or []
                if choices and choices[0].get("delta", {}).get("content"):
                    if result.ttft_s is None:
                        result.ttft_s = now - sent
                    elif last_chunk is not None:
                        result.chunk_gaps.append(now - last_chunk)
                    last_chunk = now
                if chunk.get("usage"):
                    result.completion_tokens = chunk["usage"].get("completion_tokens", 0)
                    result.prompt_tokens = chunk["usage"].get("prompt_tokens", 0)
    except (httpx.HTTPError, json.JSONDecodeError) as exc:
        result.error = type(exc).__name__
    finally:
        result.e2e_s = time.perf_counter() - sent
    return result


def _error_code(body: bytes) -> str | None:
    try:
        return json.loads(body)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None
