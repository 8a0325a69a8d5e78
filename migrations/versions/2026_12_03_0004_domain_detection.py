"""Domain detection: per-tenant settings (the detection mode) and evaluation details (the domains an
evaluation was scored under, and how they were found).

`evaluations.details` is covered by the evaluations ledger only when it is set (`Ledger.optional_fields`),
so every evaluation chained before this revision keeps its digest.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03 12:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "tenant_settings",
        sa.Column("tenant", sa.String(128), nullable=False),
        sa.Column("domain_detection", sa.String(16), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_by", sa.String(128), nullable=True),
        sa.PrimaryKeyConstraint("tenant", name=op.f("pk_tenant_settings")),
    )
    with op.batch_alter_table("evaluations") as batch_op:
        batch_op.add_column(sa.Column("details", sa.JSON(none_as_null=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("evaluations") as batch_op:
        batch_op.drop_column("details")
    op.drop_table("tenant_settings")
