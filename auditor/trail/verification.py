"""Verifying the whole trail, fully or incrementally from the last verified signed checkpoint.

A full verify walks every ledger from genesis (minutes at millions of entries). After any successful
verify, the last signed checkpoint each ledger walk passed is remembered (`chain_verifications`, signed
with the HMAC key), and an incremental verify starts there: it re-checks that checkpoint (its signature,
and that the entry at its seq still carries its hash) and walks only what came after. Memory stays
bounded either way: rows stream from a server-side cursor, and purged ids are kept as 8-byte digests.

What incremental does not re-read: entries before its starting checkpoint. Someone with database access
who edits an old entry without touching the checkpoint's entry is caught by the next full verify (or the
witness), not by an incremental one; run a full verify on a schedule (e.g. nightly) and incremental ones
in between.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any, Literal

from sqlalchemy import Connection, delete, insert, select

from auditor.store.base import utcnow
from auditor.store.database import Database
from auditor.trail.chain import ChainReport, Link, sign_checkpoint
from auditor.trail.ledgers import LEDGERS, verify_trail
from auditor.trail.models import ChainVerification, Checkpoint
from auditor.trail.witness import Witness, check_against_witness

VerifyMode = Literal["full", "incremental"]
_BY_NAME = {ledger.name: ledger for ledger in LEDGERS}


def _sign(key: bytes, ledger: int, seq: int, record_hash: str) -> str:
    return hmac.new(key, f"verified:v1:{ledger}:{seq}:{record_hash}".encode(), hashlib.sha256).hexdigest()


def verify_store(database: Database, *, hmac_key: bytes, witness: Witness | None = None,
                 mode: VerifyMode = "full") -> ChainReport:
    witnessed = list(witness.entries()) if witness is not None else None   # before the snapshot: see the check
    with database.snapshot() as conn:
        starts, notes = _starts(conn, hmac_key) if mode == "incremental" else ({}, {})
        report = verify_trail(conn, hmac_key, starts=starts)
        report.extra["mode"] = mode
        _check_kg(conn, hmac_key, report)
        if mode == "incremental":
            report.extra["started_after"] = {name: link.seq for name, link in starts.items()}
            if notes:
                report.extra["full_walk_because"] = notes
        if witnessed is not None:
            problem, read = check_against_witness(conn, witnessed, hmac_key)
            report.extra["witness_entries"] = read
            if problem is not None:
                report.ok, report.problem = False, report.problem or problem
        reached = _last_checkpoints(conn, report) if report.ok else {}
    if reached:
        _remember(database, reached, hmac_key, mode)
    return report


def _check_kg(conn: Connection, key: bytes, report: ChainReport) -> None:
    """The KG versions and imports against the chained KG events (`auditor.kg.anchors.check_store`); a problem
    there fails the verification like a broken ledger (its `ledger` is "kg")."""
    from auditor.kg.anchors import check_store  # the KG tables live beside the trail, not in it

    kg = check_store(conn, key)
    report.extra["kg"] = kg.summary()
    if kg.problem is not None:
        report.ok = False
        report.problem = report.problem or kg.problem


def _starts(conn: Connection, key: bytes) -> tuple[dict[str, Link], dict[str, str]]:
    """Where each ledger's incremental walk may start, and why a ledger walks from genesis instead."""
    starts: dict[str, Link] = {}
    notes: dict[str, str] = {}
    remembered = {row.ledger: row for row in conn.execute(select(ChainVerification.__table__))}
    for ledger in LEDGERS:
        row = remembered.get(ledger.number)
        if row is None:
            notes[ledger.name] = "never verified before"
            continue
        if not hmac.compare_digest(_sign(key, ledger.number, row.seq, row.record_hash), row.signature):
            notes[ledger.name] = "the remembered verification is not signed by this key"
            continue
        checkpoint = conn.execute(select(Checkpoint.__table__).where(
            Checkpoint.ledger == ledger.number, Checkpoint.seq == row.seq)).one_or_none()
        entry_hash = conn.execute(select(ledger.table.c.record_hash).where(ledger.table.c.seq == row.seq)).scalar()
        if checkpoint is None or checkpoint.record_hash != row.record_hash or entry_hash != row.record_hash or \
                not hmac.compare_digest(sign_checkpoint(key, ledger.number, checkpoint.seq, checkpoint.record_hash,
                                                        checkpoint.prev_seq), checkpoint.signature):
            notes[ledger.name] = f"the checkpoint at seq {row.seq} no longer matches the last verification"
            continue
        starts[ledger.name] = Link(row.seq, row.record_hash)
    return starts, notes


def _last_checkpoints(conn: Connection, report: ChainReport) -> dict[int, Any]:
    """The last signed checkpoint each verified ledger walk reached."""
    reached = {}
    for name, info in report.ledgers.items():
        ledger = _BY_NAME[name]
        row = conn.execute(select(Checkpoint.seq, Checkpoint.record_hash).where(
            Checkpoint.ledger == ledger.number, Checkpoint.seq <= info["last_seq"])
            .order_by(Checkpoint.seq.desc()).limit(1)).one_or_none()
        if row is not None:
            reached[ledger.number] = row
    return reached


def _remember(database: Database, reached: dict[int, Any], key: bytes, mode: str) -> None:
    with database.write_connection() as conn:
        for number, row in reached.items():
            conn.execute(delete(ChainVerification).where(ChainVerification.ledger == number))
            conn.execute(insert(ChainVerification), {
                "ledger": number, "seq": row.seq, "record_hash": row.record_hash, "verified_at": utcnow(),
                "mode": mode, "signature": _sign(key, number, row.seq, row.record_hash)})


def chain_status(database: Database) -> list[dict[str, Any]]:
    """Per ledger: its last signed checkpoint and where (and when) the last successful verification ended."""
    with database.session() as session:
        conn = session.connection()
        verified = {row.ledger: row for row in conn.execute(select(ChainVerification))}
        status = []
        for ledger in LEDGERS:
            checkpoint = conn.execute(select(Checkpoint.seq, Checkpoint.created_at).where(
                Checkpoint.ledger == ledger.number).order_by(Checkpoint.seq.desc()).limit(1)).one_or_none()
            last = verified.get(ledger.number)
            status.append({"ledger": ledger.name,
                           "checkpoint_seq": checkpoint.seq if checkpoint else None,
                           "checkpoint_at": checkpoint.created_at if checkpoint else None,
                           "verified_seq": last.seq if last else None,
                           "verified_at": last.verified_at if last else None,
                           "verified_mode": last.mode if last else None})
        return status
