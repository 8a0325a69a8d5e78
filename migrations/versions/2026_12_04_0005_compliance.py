"""Compliance workflow: the events ledger, the current-verdict view, the rule-pack registry, legal holds by
matter, the access-read index, incremental verification, alert rules and alerts, planned re-audit jobs.

Existing records get their view rows (inline verdicts, then their evaluations), and existing access-log
entries their read index rows, here.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-04 09:00:00
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TS = sa.DateTime(timezone=True)
logger = logging.getLogger("alembic.runtime.migration")


def upgrade() -> None:
    _events()
    _verdict_view()
    _rule_packs()
    _holds()
    _access_reads()
    op.create_table(
        "chain_verifications",
        sa.Column("ledger", sa.Integer(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("record_hash", sa.String(64), nullable=False),
        sa.Column("verified_at", _TS, nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("signature", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("ledger", name=op.f("pk_chain_verifications")),
    )
    _alerts()
    with op.batch_alter_table("reaudit_jobs") as batch_op:
        batch_op.add_column(sa.Column("rule_packs", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("max_seq", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("planned_through", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("planned_at", _TS, nullable=True))
    op.execute("UPDATE reaudit_jobs SET planned_at = created_at")   # jobs before this revision froze their items at once
    op.create_index("ix_evaluations_rule_pack_hash", "evaluations", ["rule_pack_hash"])
    _backfill()


def _events() -> None:
    op.create_table(
        "trail_events",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("prev_hash", sa.String(64), nullable=False),
        sa.Column("content_digest", sa.String(64), nullable=False),
        sa.Column("record_hash", sa.String(64), nullable=False),
        sa.Column("at", _TS, nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("key_id", sa.String(64), nullable=True),
        sa.Column("tenant", sa.String(128), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("record_id", sa.String(36), nullable=True),
        sa.Column("subject", sa.String(128), nullable=True),
        sa.Column("payload", sa.JSON(), nullable=True),
        sa.Column("note", sa.Text(), nullable=True),
        sa.Column("note_sha256", sa.String(64), nullable=True),
        sa.Column("purged_at", _TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_trail_events")),
        sa.UniqueConstraint("seq", name=op.f("uq_trail_events_seq")),
    )
    for column in ("at", "kind", "record_id", "subject"):
        op.create_index(op.f(f"ix_trail_events_{column}"), "trail_events", [column])


def _verdict_view() -> None:
    op.create_table(
        "record_verdicts",
        sa.Column("record_id", sa.String(36), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("tenant", sa.String(128), nullable=False),
        sa.Column("domain", sa.String(64), nullable=True),
        sa.Column("intent", sa.String(64), nullable=True),
        sa.Column("model_id", sa.String(256), nullable=True),
        sa.Column("endpoint", sa.String(32), nullable=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("occurred_at", _TS, nullable=False),
        sa.Column("recorded_at", _TS, nullable=False),
        sa.Column("gate_action", sa.String(16), nullable=True),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("evaluation_id", sa.String(36), nullable=True),
        sa.Column("evaluated_at", _TS, nullable=True),
        sa.Column("evaluator_version", sa.String(64), nullable=True),
        sa.Column("rule_pack_hash", sa.String(64), nullable=True),
        sa.Column("kg_version", sa.String(64), nullable=True),
        sa.Column("n_supported", sa.Integer(), nullable=False),
        sa.Column("n_contradicted", sa.Integer(), nullable=False),
        sa.Column("n_unverifiable", sa.Integer(), nullable=False),
        sa.Column("fer", sa.Float(), nullable=True),
        sa.Column("citation_confidence", sa.Float(), nullable=True),
        sa.Column("joint_score", sa.Float(), nullable=True),
        sa.Column("implied_action", sa.String(16), nullable=True),
        sa.Column("max_severity", sa.String(16), nullable=True),
        sa.Column("min_confidence", sa.Float(), nullable=True),
        sa.Column("rule_ids", sa.Text(), nullable=True),
        sa.Column("search_text", sa.Text(), nullable=True),
        sa.Column("reviewed_ref", sa.String(36), nullable=True),
        sa.Column("disputed", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("record_id", name=op.f("pk_record_verdicts")),
        sa.UniqueConstraint("seq", name=op.f("uq_record_verdicts_seq")),
    )
    op.create_index("ix_record_verdicts_occurred", "record_verdicts", ["occurred_at", "seq"])
    op.create_index("ix_record_verdicts_domain_occurred", "record_verdicts", ["domain", "occurred_at", "seq"])
    op.create_index("ix_record_verdicts_tenant_occurred", "record_verdicts", ["tenant", "occurred_at", "seq"])
    if op.get_bind().dialect.name == "postgresql":
        _trigram_index()


def _trigram_index() -> None:
    """A trigram index makes the free-text filter (`q`, LIKE '%...%') an index lookup at millions of rows.
    pg_trgm ships with PostgreSQL; a role that may not create extensions gets a warning and no index."""
    bind = op.get_bind()
    try:
        with bind.begin_nested():
            bind.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS pg_trgm SCHEMA public")
    except sa.exc.DBAPIError as exc:
        logger.warning("pg_trgm is not available (%s): free-text search over claims will scan",
                       str(exc.orig).splitlines()[0])
        return
    bind.exec_driver_sql("CREATE INDEX ix_record_verdicts_search ON record_verdicts "
                         "USING gin (search_text public.gin_trgm_ops)")


def _rule_packs() -> None:
    op.create_table(
        "rule_packs",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("domain", sa.String(64), nullable=False),
        sa.Column("version", sa.String(64), nullable=False),
        sa.Column("hash", sa.String(64), nullable=False),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.Column("source", sa.String(512), nullable=True),
        sa.Column("registered_at", _TS, nullable=False),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("activated_at", _TS, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rule_packs")),
        sa.UniqueConstraint("domain", "hash", name=op.f("uq_rule_packs_domain_hash")),
    )
    for column in ("domain", "hash", "active"):
        op.create_index(op.f(f"ix_rule_packs_{column}"), "rule_packs", [column])


def _holds() -> None:
    with op.batch_alter_table("legal_holds") as batch_op:
        batch_op.add_column(sa.Column("matter_id", sa.String(128), nullable=True))
        batch_op.add_column(sa.Column("scope", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("placed_by", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("released_by", sa.JSON(), nullable=True))
        batch_op.add_column(sa.Column("release_reason", sa.Text(), nullable=True))
        batch_op.create_index(batch_op.f("ix_legal_holds_matter_id"), ["matter_id"])
    op.create_table(
        "legal_hold_records",
        sa.Column("hold_id", sa.Integer(), nullable=False),
        sa.Column("record_id", sa.String(36), nullable=False),
        sa.ForeignKeyConstraint(["hold_id"], ["legal_holds.id"], name=op.f("fk_legal_hold_records_hold_id_legal_holds")),
        sa.PrimaryKeyConstraint("hold_id", "record_id", name=op.f("pk_legal_hold_records")),
    )
    op.create_index(op.f("ix_legal_hold_records_record_id"), "legal_hold_records", ["record_id"])


def _access_reads() -> None:
    op.create_table(
        "access_reads",
        sa.Column("access_id", sa.Integer(), nullable=False),
        sa.Column("record_id", sa.String(36), nullable=False),
        sa.PrimaryKeyConstraint("access_id", "record_id", name=op.f("pk_access_reads")),
    )
    op.create_index(op.f("ix_access_reads_record_id"), "access_reads", ["record_id"])


def _alerts() -> None:
    op.create_table(
        "alert_rules",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("expression", sa.Text(), nullable=False),
        sa.Column("metric", sa.String(32), nullable=False),
        sa.Column("op", sa.String(2), nullable=False),
        sa.Column("threshold", sa.Float(), nullable=False),
        sa.Column("window_s", sa.Integer(), nullable=False),
        sa.Column("filters", sa.JSON(), nullable=True),
        sa.Column("webhook_url", sa.String(2048), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("cooldown_s", sa.Integer(), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.Column("created_by", sa.JSON(), nullable=True),
        sa.Column("next_check_at", _TS, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("last_value", sa.Float(), nullable=True),
        sa.Column("last_fired_at", _TS, nullable=True),
        sa.Column("watermark_seq", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alert_rules")),
    )
    op.create_table(
        "alerts",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("rule_id", sa.Integer(), nullable=False),
        sa.Column("fired_at", _TS, nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("details", sa.JSON(), nullable=True),
        sa.Column("event_id", sa.String(36), nullable=True),
        sa.Column("delivery", sa.String(16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", _TS, nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("delivered_at", _TS, nullable=True),
        sa.ForeignKeyConstraint(["rule_id"], ["alert_rules.id"], name=op.f("fk_alerts_rule_id_alert_rules")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alerts")),
    )
    op.create_index(op.f("ix_alerts_rule_id"), "alerts", ["rule_id"])
    op.create_index(op.f("ix_alerts_delivery"), "alerts", ["delivery"])


def _backfill() -> None:
    """View rows for existing records, read-index rows for existing access-log entries."""
    from auditor.trail import verdicts

    bind = op.get_bind()
    # the view's columns as this revision made them: later revisions add their own (and fill them)
    verdicts.rebuild(bind, active_packs={}, columns={c["name"] for c in sa.inspect(bind).get_columns("record_verdicts")})
    entries = bind.execute(sa.text("SELECT id, record_ids, target, action, result_count FROM access_log "
                                   "WHERE record_ids IS NOT NULL OR action = 'show'")).all()
    import json

    rows = []
    for entry in entries:
        ids = entry.record_ids if not isinstance(entry.record_ids, str) else json.loads(entry.record_ids)
        if entry.action == "show" and entry.result_count == 1 and entry.target:
            ids = [entry.target]
        rows += [{"access_id": entry.id, "record_id": rid} for rid in dict.fromkeys(ids or [])]
    if rows:
        bind.execute(sa.text("INSERT INTO access_reads (access_id, record_id) VALUES (:access_id, :record_id)"), rows)


def downgrade() -> None:
    op.drop_index("ix_evaluations_rule_pack_hash", table_name="evaluations")
    with op.batch_alter_table("reaudit_jobs") as batch_op:
        for name in ("rule_packs", "max_seq", "planned_through", "planned_at"):
            batch_op.drop_column(name)
    op.drop_table("alerts")
    op.drop_table("alert_rules")
    op.drop_table("chain_verifications")
    op.drop_table("access_reads")
    op.drop_table("legal_hold_records")
    with op.batch_alter_table("legal_holds") as batch_op:
        batch_op.drop_index("ix_legal_holds_matter_id")
        for name in ("matter_id", "scope", "placed_by", "released_by", "release_reason"):
            batch_op.drop_column(name)
    op.drop_table("rule_packs")
    op.drop_table("record_verdicts")
    op.drop_table("trail_events")
    op.execute("DELETE FROM chain_head WHERE id = 4")
    op.execute("DELETE FROM checkpoints WHERE ledger = 4")
