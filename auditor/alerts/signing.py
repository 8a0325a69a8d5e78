"""Signing webhook deliveries, as Stripe signs its own.

Each POST carries `Auditor-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<raw body>">`, keyed with
the rule's signing secret (`whsec_...`, made when the rule is created and shown that once). A receiver
recomputes the HMAC over the raw body it got, compares in constant time, and refuses a timestamp more than
`TOLERANCE_S` from its clock, so a captured delivery cannot be replayed later.

A secret per rule, not one for the service: a receiver (often a tenant's) holds only its own rule's secret, so
it can neither forge nor verify another rule's alerts, and one leaked secret is replaced by re-creating that
rule alone. The secret must be usable to sign, so it is stored, but sealed (AES-GCM under a key derived from
AUDITOR_HMAC_KEY): a copy of the database alone does not let anyone forge alerts."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
import time

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

HEADER = "Auditor-Signature"
TOLERANCE_S = 300
_PREFIX = "whsec_"
_SEALED = "v1:"
_SEAL_CONTEXT = b"auditor alert webhook signing secret v1"


def new_secret() -> str:
    return _PREFIX + secrets.token_urlsafe(32)


def signature_header(secret: str, body: bytes, *, timestamp: int | None = None) -> str:
    timestamp = int(time.time()) if timestamp is None else timestamp
    return f"t={timestamp},v1={_digest(secret, timestamp, body)}"


def verify(secret: str, body: bytes, header: str, *, now: float | None = None, tolerance_s: int = TOLERANCE_S) -> bool:
    """The receiver's check: a well-formed header, a fresh timestamp and a matching HMAC."""
    try:
        parts = dict(item.split("=", 1) for item in header.split(","))
        timestamp = int(parts["t"])
        given = parts["v1"]
    except (KeyError, ValueError):
        return False
    now = time.time() if now is None else now
    return abs(now - timestamp) <= tolerance_s and hmac.compare_digest(_digest(secret, timestamp, body), given)


def _digest(secret: str, timestamp: int, body: bytes) -> str:
    return hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def _sealing_key(hmac_key: bytes) -> bytes:
    return hmac.new(hmac_key, _SEAL_CONTEXT, hashlib.sha256).digest()


def seal(secret: str, hmac_key: bytes) -> str:
    nonce = os.urandom(12)
    sealed = AESGCM(_sealing_key(hmac_key)).encrypt(nonce, secret.encode(), _SEAL_CONTEXT)
    return _SEALED + base64.b64encode(nonce + sealed).decode("ascii")


def unseal(stored: str, hmac_key: bytes) -> str:
    """The secret back; raises ValueError when it was sealed under another key (AUDITOR_HMAC_KEY changed)."""
    if not stored.startswith(_SEALED):
        raise ValueError("unknown signing-secret format")
    raw = base64.b64decode(stored[len(_SEALED):])
    try:
        return AESGCM(_sealing_key(hmac_key)).decrypt(raw[:12], raw[12:], _SEAL_CONTEXT).decode()
    except Exception as exc:   # cryptography's InvalidTag says nothing more useful
        raise ValueError("the signing secret was sealed under another AUDITOR_HMAC_KEY") from exc
