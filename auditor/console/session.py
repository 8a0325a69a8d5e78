"""The console's session cookie and CSRF tokens, signed with a key derived from AUDITOR_HMAC_KEY.

The cookie names the API key (its id, never the key itself), a random nonce and an expiry; the server looks
the key up on every request, so revoking a key ends its console sessions at once. CSRF tokens are an HMAC of
the session's nonce (a form from another session, or none, fails), and the login form's token is an HMAC of
a nonce in a short-lived cookie of its own (login CSRF)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass

SESSION_COOKIE = "auditor_console"
LOGIN_COOKIE = "auditor_console_login"
SESSION_TTL_S = 8 * 3600      # a working day; then log in again
LOGIN_TTL_S = 15 * 60


@dataclass(frozen=True, slots=True)
class ConsoleSession:
    key_id: str
    nonce: str
    expires_at: int


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class SessionSigner:
    def __init__(self, secret: bytes) -> None:
        # Its own key: a console cookie's MAC can never be mistaken for a chain signature.
        self._key = hmac.new(secret, b"auditor-console-session/1", hashlib.sha256).digest()

    def _mac(self, purpose: str, payload: str) -> str:
        return _b64(hmac.new(self._key, f"{purpose}:{payload}".encode(), hashlib.sha256).digest())

    def issue(self, key_id: str, *, ttl_s: int = SESSION_TTL_S, now: float | None = None) -> str:
        body = {"k": key_id, "n": secrets.token_urlsafe(16), "e": int((now or time.time()) + ttl_s)}
        payload = _b64(json.dumps(body, separators=(",", ":")).encode())
        return f"{payload}.{self._mac('session', payload)}"

    def read(self, cookie: str | None, *, now: float | None = None) -> ConsoleSession | None:
        """The session a cookie carries, or None (absent, forged, malformed or expired)."""
        if not cookie or cookie.count(".") != 1 or len(cookie) > 512:
            return None
        payload, mac = cookie.split(".")
        if not hmac.compare_digest(mac, self._mac("session", payload)):
            return None
        try:
            body = json.loads(_unb64(payload))
            session = ConsoleSession(str(body["k"]), str(body["n"]), int(body["e"]))
        except (ValueError, KeyError, TypeError):
            return None
        return session if session.expires_at > (now or time.time()) else None

    def csrf_token(self, nonce: str) -> str:
        return self._mac("csrf", nonce)

    def csrf_valid(self, nonce: str, token: str | None) -> bool:
        return bool(token) and hmac.compare_digest(str(token), self.csrf_token(nonce))
