"""Worker heartbeats: one row per live scoring worker, so that /ready can tell when scoring has none.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-08 12:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "worker_heartbeats",
        sa.Column("worker_id", sa.String(128), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("started_at", _TS, nullable=False),
        sa.Column("beat_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("worker_id", name=op.f("pk_worker_heartbeats")),
    )
    op.create_index(op.f("ix_worker_heartbeats_beat_at"), "worker_heartbeats", ["beat_at"])


def downgrade() -> None:
    op.drop_table("worker_heartbeats")
