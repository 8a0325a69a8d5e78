"""Ledgers: evaluations and the access log are hash-chained like records; heads are signed over their last
checkpoint and checkpoints over their predecessor; re-audit jobs name the tenants they covered; streamed
output is committed segment by segment before it is flushed.

Existing evaluations and access-log entries are chained here, oldest first. Their new heads are signed
when the upgrade runs with the HMAC key (`auditor db upgrade`, or the app's auto-migration); an upgrade
run by hand with bare Alembic leaves them unsigned, and verify-chain says so.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-03 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import context, op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TS = sa.DateTime(timezone=True)
_CHAIN_COLUMNS = ("seq", "prev_hash", "content_digest", "record_hash")


def _chain_columns(batch_op: Any) -> None:
    batch_op.add_column(sa.Column("seq", sa.BigInteger(), nullable=True))
    batch_op.add_column(sa.Column("prev_hash", sa.String(64), nullable=True))
    batch_op.add_column(sa.Column("content_digest", sa.String(64), nullable=True))
    batch_op.add_column(sa.Column("record_hash", sa.String(64), nullable=True))


def upgrade() -> None:
    with op.batch_alter_table("chain_head") as batch_op:
        batch_op.add_column(sa.Column("last_checkpoint_seq", sa.BigInteger(), nullable=True))
    with op.batch_alter_table("checkpoints", recreate="always") as batch_op:
        batch_op.add_column(sa.Column("ledger", sa.Integer(), nullable=False, server_default="1"))
        batch_op.add_column(sa.Column("prev_seq", sa.BigInteger(), nullable=True))
        batch_op.drop_constraint("pk_checkpoints", type_="primary")
        batch_op.create_primary_key("pk_checkpoints", ["ledger", "seq"])
    with op.batch_alter_table("evaluations") as batch_op:
        _chain_columns(batch_op)
        batch_op.add_column(sa.Column("claims_sha256", sa.String(64), nullable=True))
        batch_op.add_column(sa.Column("purged_at", _TS, nullable=True))
        batch_op.create_unique_constraint(batch_op.f("uq_evaluations_seq"), ["seq"])
    with op.batch_alter_table("access_log") as batch_op:
        _chain_columns(batch_op)
        batch_op.add_column(sa.Column("record_ids", sa.JSON(), nullable=True))
        batch_op.create_unique_constraint(batch_op.f("uq_access_log_seq"), ["seq"])
    with op.batch_alter_table("reaudit_jobs") as batch_op:
        batch_op.add_column(sa.Column("tenants_covered", sa.JSON(), nullable=True))

    op.create_table(
        "stream_segments",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("audit_id", sa.String(36), nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("tenant", sa.String(128), nullable=False),
        sa.Column("content_mode", sa.String(16), nullable=False),
        sa.Column("text", sa.Text(), nullable=True),
        sa.Column("text_sha256", sa.String(64), nullable=True),
        sa.Column("details", sa.JSON(), nullable=True),
        sa.Column("created_at", _TS, nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_stream_segments")),
        sa.UniqueConstraint("audit_id", "idx", name=op.f("uq_stream_segments_audit_id_idx")),
    )
    op.create_index(op.f("ix_stream_segments_audit_id"), "stream_segments", ["audit_id"])
    op.create_index(op.f("ix_stream_segments_created_at"), "stream_segments", ["created_at"])

    bind = op.get_bind()
    bind.execute(sa.text("UPDATE chain_head SET last_checkpoint_seq = (SELECT max(seq) FROM checkpoints) WHERE id = 1"))
    _chain_existing(bind)


def _chain_existing(bind: sa.Connection) -> None:
    """Chain the evaluations and access-log entries written before this revision, in their written order."""
    from auditor.trail.chain import GENESIS_HASH, record_hash, sign_head, text_digest
    from auditor.trail.ledgers import ACCESS, EVALUATIONS

    key: bytes | None = context.config.attributes.get("hmac_key")
    for ledger, order in ((EVALUATIONS, ("created_at", "id")), (ACCESS, ("id",))):
        table = ledger.table
        # Only the columns this revision knows, typed by the models (datetimes and JSON come back parsed).
        names = dict.fromkeys(("id", *order, *ledger.hashed_fields, *ledger.sensitive_fields))
        rows = bind.execute(sa.select(*(table.c[name] for name in names)).order_by(*(table.c[o] for o in order)))
        seq, prev = 0, GENESIS_HASH
        for row in rows.mappings().all():
            values = dict(row)
            for text_field, digest_field in ledger.sensitive_fields.items():
                values[digest_field] = text_digest(values[text_field])
            seq += 1
            digest = ledger.digest(values)
            hash_ = record_hash(seq, prev, digest)
            updates = {"seq": seq, "prev_hash": prev, "content_digest": digest, "record_hash": hash_,
                       **{d: values[d] for d in ledger.sensitive_fields.values()}}
            bind.execute(sa.update(table).where(table.c.id == row["id"]).values(**updates))
            prev = hash_
        signature = sign_head(key, ledger.number, seq, prev, None) if key is not None and seq else None
        bind.execute(sa.text("INSERT INTO chain_head (id, seq, record_hash, signature) VALUES (:id, :seq, :hash, :sig)"),
                     {"id": ledger.number, "seq": seq, "hash": prev, "sig": signature})


def downgrade() -> None:
    op.drop_table("stream_segments")
    bind = op.get_bind()
    bind.execute(sa.text("DELETE FROM chain_head WHERE id <> 1"))
    bind.execute(sa.text("DELETE FROM checkpoints WHERE ledger <> 1"))
    with op.batch_alter_table("reaudit_jobs") as batch_op:
        batch_op.drop_column("tenants_covered")
    with op.batch_alter_table("access_log") as batch_op:
        batch_op.drop_constraint("uq_access_log_seq", type_="unique")
        for name in (*_CHAIN_COLUMNS, "record_ids"):
            batch_op.drop_column(name)
    with op.batch_alter_table("evaluations") as batch_op:
        batch_op.drop_constraint("uq_evaluations_seq", type_="unique")
        for name in (*_CHAIN_COLUMNS, "claims_sha256", "purged_at"):
            batch_op.drop_column(name)
    with op.batch_alter_table("checkpoints", recreate="always") as batch_op:
        batch_op.drop_constraint("pk_checkpoints", type_="primary")
        batch_op.create_primary_key("pk_checkpoints", ["seq"])
        batch_op.drop_column("prev_seq")
        batch_op.drop_column("ledger")
    with op.batch_alter_table("chain_head") as batch_op:
        batch_op.drop_column("last_checkpoint_seq")
