"""Jobs: outbox in-flight deliveries, re-audit jobs/items/chunks, JSONL imports, and a unique index
that makes live (job-less) scoring idempotent.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02 11:10:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "outbox_inflight",
        sa.Column("outbox_id", sa.Integer(), nullable=False),
        sa.Column("dispatched_at", _TS, nullable=False),
        sa.Column("deliveries", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["outbox_id"], ["outbox.id"], name=op.f("fk_outbox_inflight_outbox_id_outbox")),
        sa.PrimaryKeyConstraint("outbox_id", name=op.f("pk_outbox_inflight")),
    )
    op.create_index(op.f("ix_outbox_inflight_dispatched_at"), "outbox_inflight", ["dispatched_at"])

    op.create_table(
        "reaudit_jobs",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("tenant", sa.String(128), nullable=False),
        sa.Column("tenant_scope", sa.String(128), nullable=True),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("filters", sa.JSON(), nullable=True),
        sa.Column("import_id", sa.String(36), nullable=True),
        sa.Column("evaluator_version", sa.String(64), nullable=False),
        sa.Column("chunk_size", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("started_at", _TS, nullable=False),
        sa.Column("cancelled_at", _TS, nullable=True),
        sa.Column("finished_at", _TS, nullable=True),
        sa.Column("summary", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_reaudit_jobs")),
    )
    op.create_index(op.f("ix_reaudit_jobs_tenant"), "reaudit_jobs", ["tenant"])
    op.create_index(op.f("ix_reaudit_jobs_status"), "reaudit_jobs", ["status"])

    op.create_table(
        "reaudit_items",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(36), nullable=False),
        sa.Column("record_id", sa.String(36), nullable=False),
        sa.Column("chunk", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("evaluation_id", sa.String(36), nullable=True),
        sa.Column("before_evaluation_id", sa.String(36), nullable=True),
        sa.Column("gate_action_after", sa.String(16), nullable=True),
        sa.Column("failure_reason", sa.Text(), nullable=True),
        sa.Column("finished_at", _TS, nullable=True),
        sa.ForeignKeyConstraint(["job_id"], ["reaudit_jobs.id"], name=op.f("fk_reaudit_items_job_id_reaudit_jobs")),
        sa.ForeignKeyConstraint(["record_id"], ["audit_records.id"],
                                name=op.f("fk_reaudit_items_record_id_audit_records")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_reaudit_items")),
        sa.UniqueConstraint("job_id", "record_id", name=op.f("uq_reaudit_items_job_id_record_id")),
    )
    op.create_index("ix_reaudit_items_job_chunk_status", "reaudit_items", ["job_id", "chunk", "status"])
    op.create_index("ix_reaudit_items_job_status_finished", "reaudit_items", ["job_id", "status", "finished_at"])

    op.create_table(
        "reaudit_chunks",
        sa.Column("job_id", sa.String(36), nullable=False),
        sa.Column("chunk", sa.Integer(), nullable=False),
        sa.Column("enqueued_at", _TS, nullable=False),
        sa.Column("heartbeat_at", _TS, nullable=True),
        sa.Column("deliveries", sa.Integer(), nullable=False),
        sa.Column("finished_at", _TS, nullable=True),
        sa.ForeignKeyConstraint(["job_id"], ["reaudit_jobs.id"], name=op.f("fk_reaudit_chunks_job_id_reaudit_jobs")),
        sa.PrimaryKeyConstraint("job_id", "chunk", name=op.f("pk_reaudit_chunks")),
    )

    op.create_table(
        "imports",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("tenant", sa.String(128), nullable=False),
        sa.Column("filename", sa.String(512), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("strict", sa.Boolean(), nullable=False),
        sa.Column("lines", sa.Integer(), nullable=False),
        sa.Column("imported", sa.Integer(), nullable=False),
        sa.Column("skipped", sa.Integer(), nullable=False),
        sa.Column("errors", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("finished_at", _TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_imports")),
    )
    op.create_index(op.f("ix_imports_tenant"), "imports", ["tenant"])

    op.create_table(
        "imported_outputs",
        sa.Column("import_id", sa.String(36), nullable=False),
        sa.Column("line", sa.Integer(), nullable=False),
        sa.Column("record_id", sa.String(36), nullable=False),
        sa.ForeignKeyConstraint(["import_id"], ["imports.id"], name=op.f("fk_imported_outputs_import_id_imports")),
        sa.ForeignKeyConstraint(["record_id"], ["audit_records.id"],
                                name=op.f("fk_imported_outputs_record_id_audit_records")),
        sa.PrimaryKeyConstraint("import_id", "line", name=op.f("pk_imported_outputs")),
        sa.UniqueConstraint("record_id", name=op.f("uq_imported_outputs_record_id")),
    )

    # NULLs are distinct in UNIQUE constraints, so uq(record_id, evaluator_version, job_id) does not stop
    # two live (job_id NULL) evaluations of one record; this partial index does.
    op.create_index(
        "uq_evaluations_live_record_version", "evaluations", ["record_id", "evaluator_version"], unique=True,
        sqlite_where=sa.text("job_id IS NULL"), postgresql_where=sa.text("job_id IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("uq_evaluations_live_record_version", table_name="evaluations")
    op.drop_table("imported_outputs")
    op.drop_index(op.f("ix_imports_tenant"), table_name="imports")
    op.drop_table("imports")
    op.drop_table("reaudit_chunks")
    op.drop_index("ix_reaudit_items_job_status_finished", table_name="reaudit_items")
    op.drop_index("ix_reaudit_items_job_chunk_status", table_name="reaudit_items")
    op.drop_table("reaudit_items")
    op.drop_index(op.f("ix_reaudit_jobs_status"), table_name="reaudit_jobs")
    op.drop_index(op.f("ix_reaudit_jobs_tenant"), table_name="reaudit_jobs")
    op.drop_table("reaudit_jobs")
    op.drop_index(op.f("ix_outbox_inflight_dispatched_at"), table_name="outbox_inflight")
    op.drop_table("outbox_inflight")
