"""Signed alert webhooks: alert_rules.signing_secret (sealed) and severity; alerts that gave up are "dead",
and pending alerts already tried are "retrying".

Rules from before keep no secret (none was ever shown to their receivers) and deliver unsigned until re-created.

Revision ID: 0010
Revises: 0009 (worker heartbeats)
Create Date: 2026-12-08 14:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("alert_rules") as table:
        table.add_column(sa.Column("signing_secret", sa.Text(), nullable=True))
        table.add_column(sa.Column("severity", sa.String(16), nullable=True))
    op.execute("UPDATE alerts SET delivery = 'dead' WHERE delivery = 'failed'")
    op.execute("UPDATE alerts SET delivery = 'retrying' WHERE delivery = 'pending' AND attempts > 0")


def downgrade() -> None:
    op.execute("UPDATE alerts SET delivery = 'pending' WHERE delivery = 'retrying'")
    op.execute("UPDATE alerts SET delivery = 'failed' WHERE delivery = 'dead'")
    with op.batch_alter_table("alert_rules") as table:
        table.drop_column("severity")
        table.drop_column("signing_secret")
