"""Console sessions ended on the server at logout.

A session cookie is signed and carries its own expiry, so deleting it in the browser does not end it: a copy
(and the CSRF token of its pages, an HMAC of the same nonce) would keep working until it expires. Logout
therefore records the session, by the SHA-256 of its nonce, in the store that every API process reads, and
every console request checks that record. A row is kept only until the cookie would have expired anyway."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

from sqlalchemy import delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from auditor.auth.models import ConsoleLogout
from auditor.console.session import ConsoleSession
from auditor.store.base import utcnow
from auditor.store.database import Database


def session_id(nonce: str) -> str:
    # the nonce seeds the session's CSRF tokens: store only its hash
    return hashlib.sha256(f"console-session:{nonce}".encode()).hexdigest()


def is_logged_out(session: Session, nonce: str) -> bool:
    return session.execute(select(ConsoleLogout.session_id).where(
        ConsoleLogout.session_id == session_id(nonce))).first() is not None


def log_out(database: Database, console_session: ConsoleSession) -> None:
    """End the session everywhere; expired logouts are purged on the way."""
    now = utcnow()
    try:
        with database.session(write=True) as session:
            session.execute(delete(ConsoleLogout).where(ConsoleLogout.expires_at < now))
            if not is_logged_out(session, console_session.nonce):
                session.add(ConsoleLogout(session_id=session_id(console_session.nonce), key_id=console_session.key_id,
                                          logged_out_at=now,
                                          expires_at=datetime.fromtimestamp(console_session.expires_at, UTC)))
    except IntegrityError:   # the same session logged out at the same moment in another process: already done
        pass
