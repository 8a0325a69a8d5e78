"""Console logouts: sessions ended on the server, refused by every process until their cookie expires.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-08 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "console_logouts",
        sa.Column("session_id", sa.String(64), nullable=False),
        sa.Column("key_id", sa.String(32), nullable=False),
        sa.Column("logged_out_at", _TS, nullable=False),
        sa.Column("expires_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("session_id", name=op.f("pk_console_logouts")),
    )
    op.create_index(op.f("ix_console_logouts_expires_at"), "console_logouts", ["expires_at"])


def downgrade() -> None:
    op.drop_table("console_logouts")
