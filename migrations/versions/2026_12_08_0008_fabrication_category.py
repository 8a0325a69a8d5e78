"""Possible fabrications as their own category: record_verdicts.n_fabrication, filled for existing rows.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-08 11:00:00
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BATCH = 2000


def upgrade() -> None:
    with op.batch_alter_table("record_verdicts") as table:
        table.add_column(sa.Column("n_fabrication", sa.Integer(), nullable=False, server_default="0"))
    _backfill()


def _backfill() -> None:
    """Count each existing row's fabrication claims from the claims its current verdicts come from (the
    evaluation's, else the record's inline ones); the rest of the row is left as it is."""
    from auditor.trail.verdicts import summarise_claims

    bind = op.get_bind()
    after = -1
    while True:
        rows = bind.execute(sa.text(
            "SELECT v.seq, v.record_id, COALESCE(e.claims, r.claims) AS claims FROM record_verdicts v "
            "LEFT JOIN evaluations e ON v.source = 'evaluation' AND e.id = v.evaluation_id "
            "LEFT JOIN audit_records r ON v.source = 'inline' AND r.id = v.record_id "
            "WHERE v.seq > :after ORDER BY v.seq LIMIT :batch"), {"after": after, "batch": _BATCH}).all()
        if not rows:
            return
        after = rows[-1].seq
        updates = []
        for row in rows:
            claims = json.loads(row.claims) if isinstance(row.claims, str) else row.claims
            count = summarise_claims(claims if isinstance(claims, list) else None).n_fabrication
            if count:
                updates.append({"record_id": row.record_id, "n": count})
        if updates:
            bind.execute(sa.text("UPDATE record_verdicts SET n_fabrication = :n WHERE record_id = :record_id"), updates)


def downgrade() -> None:
    with op.batch_alter_table("record_verdicts") as table:
        table.drop_column("n_fabrication")
