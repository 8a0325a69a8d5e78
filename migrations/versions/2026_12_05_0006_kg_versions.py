"""KG versions: imported overlays (kg_imports) and the append-only version history (kg_versions).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-05 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "kg_imports",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("domain", sa.String(32), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("format", sa.String(32), nullable=False),
        sa.Column("file_name", sa.String(512), nullable=False),
        sa.Column("file_sha256", sa.String(64), nullable=False),
        sa.Column("as_of", sa.String(10), nullable=False),
        sa.Column("rows", sa.Integer(), nullable=False),
        sa.Column("entities", sa.Integer(), nullable=False),
        sa.Column("facts", sa.Integer(), nullable=False),
        sa.Column("supersedes", sa.Integer(), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("overlay", sa.LargeBinary(), nullable=False),
        sa.Column("imported_at", _TS, nullable=False),
        sa.Column("imported_by", sa.String(200), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_kg_imports")),
    )
    op.create_index(op.f("ix_kg_imports_domain"), "kg_imports", ["domain"])
    op.create_index(op.f("ix_kg_imports_file_sha256"), "kg_imports", ["file_sha256"])
    op.create_table(
        "kg_versions",
        sa.Column("seq", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("domain", sa.String(32), nullable=False),
        sa.Column("version_hash", sa.String(64), nullable=False),
        sa.Column("base_version", sa.String(64), nullable=False),
        sa.Column("overlays", sa.JSON(), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("import_id", sa.String(36), nullable=True),
        sa.Column("rollback_to", sa.BigInteger(), nullable=True),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("created_by", sa.String(200), nullable=False),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_kg_versions")),
    )
    op.create_index(op.f("ix_kg_versions_domain"), "kg_versions", ["domain"])
    op.create_index(op.f("ix_kg_versions_version_hash"), "kg_versions", ["version_hash"])


def downgrade() -> None:
    op.drop_table("kg_versions")
    op.drop_table("kg_imports")
