"""One signed POST of an alert payload, and what its answer means for the retries.

The body is the payload's JSON, signed as it goes out (`auditor.alerts.signing`). A 2xx delivers; 410 Gone
is the receiver saying "this hook is gone, stop"; any other status, a timeout or a refused connection is
retried. Error texts are scrubbed of the URL (its path and query carry the receiver's token)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

import httpx

from auditor.alerts.signing import HEADER, signature_header
from auditor.alerts.webhooks import scrub_url

GONE = 410


class Poster(Protocol):
    """POSTs `body` with `headers` and returns the HTTP status; raises on a network failure."""

    def __call__(self, url: str, body: bytes, headers: dict[str, str]) -> int: ...


def post_http(url: str, body: bytes, headers: dict[str, str]) -> int:
    return httpx.post(url, content=body, headers=headers, timeout=5.0).status_code


@dataclass(frozen=True, slots=True)
class Outcome:
    status: int | None      # the receiver's HTTP status; None: no answer
    error: str | None       # None: delivered

    @property
    def delivered(self) -> bool:
        return self.error is None

    @property
    def stop(self) -> bool:
        """The receiver asked for no more attempts."""
        return self.status == GONE


def encode(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, ensure_ascii=False, separators=(", ", ": ")).encode("utf-8")


def send(url: str, payload: dict[str, Any], secret: str | None, post: Poster) -> Outcome:
    body = encode(payload)
    headers = {"Content-Type": "application/json", "User-Agent": "auditor-alerts/1"}
    if secret is not None:
        headers[HEADER] = signature_header(secret, body)
    try:
        status = post(url, body, headers)
    except Exception as exc:   # connection refused, timeout, bad URL: all retried the same way
        # httpx names the URL it failed on; its token must not reach the stored error
        return Outcome(None, scrub_url(f"{type(exc).__name__}: {exc}", url)[:1000])
    if 200 <= status < 300:
        return Outcome(status, None)
    reason = "Gone: the receiver asked to stop" if status == GONE else "not a 2xx answer"
    return Outcome(status, f"HTTP {status} ({reason})")
