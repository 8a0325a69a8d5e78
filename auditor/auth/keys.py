"""API keys: created once (the plaintext is shown only then), stored as SHA-256, revocable."""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from typing import Literal

from sqlalchemy import select
from sqlalchemy.orm import Session

from auditor.auth.models import ApiKey
from auditor.store.base import utcnow

Role = Literal["client", "reviewer", "auditor", "admin", "metrics"]
# client: inference; reviewer: the review queue and the records in it; auditor: the whole trail of its tenant
# (lists, exports, re-audits, access log, trends); admin: every tenant, holds, keys, rule packs, alert rules;
# metrics: /metrics with every tenant's series and nothing else (a Prometheus scraper's key).
ROLES: tuple[Role, ...] = ("client", "reviewer", "auditor", "admin", "metrics")
KEY_PREFIX = "aud_"


class ApiKeyError(ValueError):
    """An unknown role, tenant or key id."""


def hash_key(plaintext: str) -> str:
    # Keys are 256-bit random tokens, so a plain SHA-256 is not brute-forceable (no need for scrypt).
    return hashlib.sha256(plaintext.encode()).hexdigest()


def create_key(session: Session, *, tenant: str, role: str, name: str | None = None) -> tuple[ApiKey, str]:
    """Store a new key and return it with its plaintext (never retrievable again)."""
    if role not in ROLES:
        raise ApiKeyError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    if not tenant or len(tenant) > 128:
        raise ApiKeyError("tenant must be 1-128 characters")
    plaintext = KEY_PREFIX + secrets.token_urlsafe(32)
    key = ApiKey(id=secrets.token_hex(8), tenant=tenant, role=role, name=name,
                 prefix=plaintext[:12], key_hash=hash_key(plaintext))
    session.add(key)
    session.flush()
    return key, plaintext


def list_keys(session: Session, *, tenant: str | None = None, include_revoked: bool = False) -> Sequence[ApiKey]:
    query = select(ApiKey).order_by(ApiKey.created_at)
    if tenant is not None:
        query = query.where(ApiKey.tenant == tenant)
    if not include_revoked:
        query = query.where(ApiKey.revoked_at.is_(None))
    return session.execute(query).scalars().all()


def revoke_key(session: Session, key_id: str) -> ApiKey:
    key = session.get(ApiKey, key_id)
    if key is None:
        raise ApiKeyError(f"no key with id {key_id!r}")
    if key.revoked_at is None:
        key.revoked_at = utcnow()
    return key


def find_active_key(session: Session, plaintext: str) -> ApiKey | None:
    query = select(ApiKey).where(ApiKey.key_hash == hash_key(plaintext), ApiKey.revoked_at.is_(None))
    return session.execute(query).scalar()


def keys_ever_created(session: Session) -> bool:
    """Whether any key, revoked or not, exists. Keys are revoked, never deleted, so once this is true the
    service requires a key for good (revoking the last key must not reopen development mode)."""
    return session.execute(select(ApiKey.id).limit(1)).first() is not None
