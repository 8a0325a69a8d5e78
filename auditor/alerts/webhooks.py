"""Showing a webhook URL without its secrets.

Webhook URLs carry their credentials in the path (Slack's /services/T/B/<token>), the query (?token=,
?routing_key=) or the user info (https://user:pass@host). None of it is ever shown back, to any role: a URL
is shown as its scheme, host and port with the rest elided, beside a fingerprint (the first 16 hex digits of
the SHA-256 of the whole URL) that an operator who holds the URL can compute to tell which rule posts where.
Error messages from a delivery (httpx names the URL it failed on) are scrubbed of the same parts."""

from __future__ import annotations

import hashlib
from urllib.parse import unquote, urlsplit

ELIDED = "…"


def redact_url(url: str) -> str:
    """`https://hooks.example.net/…?…`: scheme, host and port kept; user info dropped; path and query elided."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port
    except ValueError:   # not a URL we can take apart: show none of it
        return ELIDED
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc += f":{port}"
    path = "/" + ELIDED if parts.path not in ("", "/") else parts.path
    return f"{parts.scheme}://{netloc}{path}" + (f"?{ELIDED}" if parts.query else "") + (
        f"#{ELIDED}" if parts.fragment else "")


def url_fingerprint(url: str) -> str:
    return hashlib.sha256(url.encode("utf-8")).hexdigest()[:16]


def scrub_url(text: str, url: str) -> str:
    """`text` with the URL, and each secret-bearing part of it (raw or percent-decoded), replaced."""
    text = text.replace(url, redact_url(url))
    try:
        parts = urlsplit(url)
    except ValueError:
        return text
    secrets = [parts.netloc.rpartition("@")[0], parts.path, parts.query, parts.fragment]
    for secret in sorted({s for v in secrets if v for s in (v, unquote(v))}, key=len, reverse=True):
        if len(secret) >= 4:   # "/" or "/v1" is no secret, and replacing it would garble the message
            text = text.replace(secret, ELIDED)
    return text
