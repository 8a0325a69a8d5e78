"""The API-key table: only the SHA-256 of a key is stored, with the tenant and role it grants."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import String
from sqlalchemy.orm import Mapped, mapped_column

from auditor.store.base import Base, utcnow


class ApiKey(Base):
    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(128), index=True)
    role: Mapped[str] = mapped_column(String(16))        # client | auditor | admin
    name: Mapped[str | None] = mapped_column(String(128))
    prefix: Mapped[str] = mapped_column(String(16))      # shown in listings, never enough to authenticate
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)   # sha256 of the full key
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None]


class ConsoleLogout(Base):
    """A console session ended by logout, so that its cookie (still signed, still unexpired) is refused by every
    API process on the store. Rows are needed only until the session would have expired anyway."""

    __tablename__ = "console_logouts"

    session_id: Mapped[str] = mapped_column(String(64), primary_key=True)   # sha256 of the session's nonce
    key_id: Mapped[str] = mapped_column(String(32))
    logged_out_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(index=True)   # the cookie's own expiry: purged after it
