"""Hash chains: canonical digests, signed heads and checkpoints, appends and verification of any ledger.

A ledger is a table whose rows carry `seq` (gap-free from 1), `prev_hash`, `content_digest` and
`record_hash = sha256(f"{seq}:{prev_hash}:{content_digest}")`. The content digest covers a fixed list
of fields, with each sensitive text field replaced by its own SHA-256, so a retention purge can drop
the text and the chain still verifies (see `auditor.trail.ledgers` for the ledgers and their fields).

What an attacker without the HMAC key cannot do undetected (docs/security.md has the whole model):
- edit, delete, insert or reorder an entry: the hashes break at a named seq;
- cut entries off the end: the head is signed over (ledger, seq, hash, last checkpoint seq) and is
  required whenever the ledger holds entries;
- drop checkpoints: each is signed over its predecessor's seq, and the head names the last one.
With the key, everything can be re-signed; the external witness (`auditor.trail.witness`) catches that.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, Table, insert, select, update
from sqlalchemy.exc import IntegrityError

from auditor.trail.models import ChainHead, Checkpoint

GENESIS_HASH = "0" * 64


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=_json_default)


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return canonical_time(value)
    raise TypeError(f"not JSON-serialisable in an audit record: {type(value).__name__}")


def canonical_time(value: datetime) -> str:
    """UTC, microseconds: SQLite returns naive datetimes and PostgreSQL aware ones; both hash alike."""
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value.isoformat(timespec="microseconds") + "Z"


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def text_digest(value: Any) -> str | None:
    """The digest that stands in for a sensitive field: of the text itself, or of canonical JSON."""
    if value is None:
        return None
    return sha256_text(value if isinstance(value, str) else canonical_json(value))


def record_hash(seq: int, prev_hash: str, digest: str) -> str:
    return sha256_text(f"{seq}:{prev_hash}:{digest}")


def sign_head(key: bytes, ledger: int, seq: int, hash_: str, last_checkpoint_seq: int | None) -> str:
    return _hmac(key, f"head:v2:{ledger}:{seq}:{hash_}:{last_checkpoint_seq or 0}")


def sign_checkpoint(key: bytes, ledger: int, seq: int, hash_: str, prev_seq: int | None) -> str:
    return _hmac(key, f"checkpoint:v2:{ledger}:{seq}:{hash_}:{prev_seq or 0}")


def sign_legacy(key: bytes, seq: int, hash_: str) -> str:
    """The 0.1 form of head and checkpoint signatures (records ledger only): accepted, never written."""
    return _hmac(key, f"{seq}:{hash_}")


def _hmac(key: bytes, message: str) -> str:
    return hmac.new(key, message.encode(), hashlib.sha256).hexdigest()


@dataclass(frozen=True, slots=True)
class Ledger:
    """One hash-chained table: its number (the `chain_head` row and `checkpoints.ledger`), the fields its
    content digest covers (fixed: adding a column must not change old digests), fields added later that it
    covers only when set (so entries written before they existed keep their digests, while setting, changing
    or clearing one on any entry changes its digest), and its sensitive text fields (text field -> the
    digest field that stands in for it)."""

    number: int
    name: str
    table: Table
    hashed_fields: tuple[str, ...]
    sensitive_fields: Mapping[str, str] = field(default_factory=dict)
    optional_fields: tuple[str, ...] = ()

    def digest(self, values: Mapping[str, Any]) -> str:
        content = {name: values.get(name) for name in self.hashed_fields}
        content.update({name: values[name] for name in self.optional_fields if values.get(name) is not None})
        return sha256_text(canonical_json(content))

    def fill_sensitive_digests(self, values: dict[str, Any]) -> None:
        """Digest each sensitive text that has none yet (a hash-only entry arrives with its digest and no text)."""
        for text_field, digest_field in self.sensitive_fields.items():
            if values.get(digest_field) is None:
                values[digest_field] = text_digest(values.get(text_field))


# -- appending -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Link:
    seq: int
    record_hash: str


def chain_entries(conn: Connection, ledger: Ledger, entries: list[dict[str, Any]], *, hmac_key: bytes,
                  checkpoint_interval: int) -> list[Link]:
    """Give each entry (in order) its seq, prev_hash, content_digest and record_hash, write the checkpoints
    that fall among them and move the signed head. The caller inserts the entries in the same transaction;
    the head's row lock (PostgreSQL) or the write lock (SQLite) serialises writers, so seqs are gap-free."""
    head = _locked_head(conn, ledger)
    seq, prev, last_checkpoint = head.seq, head.record_hash, head.last_checkpoint_seq
    links = []
    for values in entries:
        seq += 1
        ledger.fill_sensitive_digests(values)
        digest = ledger.digest(values)
        hash_ = record_hash(seq, prev, digest)
        values.update(seq=seq, prev_hash=prev, content_digest=digest, record_hash=hash_)
        if seq % checkpoint_interval == 0:
            conn.execute(insert(Checkpoint), {
                "ledger": ledger.number, "seq": seq, "record_hash": hash_, "prev_seq": last_checkpoint or 0,
                "signature": sign_checkpoint(hmac_key, ledger.number, seq, hash_, last_checkpoint),
                "created_at": datetime.now(UTC),
            })
            last_checkpoint = seq
        links.append(Link(seq, hash_))
        prev = hash_
    conn.execute(update(ChainHead).where(ChainHead.id == ledger.number).values(
        seq=seq, record_hash=prev, last_checkpoint_seq=last_checkpoint,
        signature=sign_head(hmac_key, ledger.number, seq, prev, last_checkpoint)))
    return links


def _locked_head(conn: Connection, ledger: Ledger) -> Any:
    query = select(ChainHead.seq, ChainHead.record_hash, ChainHead.last_checkpoint_seq).where(
        ChainHead.id == ledger.number).with_for_update()
    head = conn.execute(query).one_or_none()
    if head is not None:
        return head
    # A store created outside the migrations: start the ledger. Two first writers may race here; the
    # loser's insert fails on the primary key inside a savepoint and it then waits on the winner's lock.
    try:
        with conn.begin_nested():
            conn.execute(insert(ChainHead).values(id=ledger.number, seq=0, record_hash=GENESIS_HASH))
    except IntegrityError:
        pass
    return conn.execute(query).one()


# -- verifying -------------------------------------------------------------------------------------


@dataclass(slots=True)
class ChainProblem:
    kind: str          # altered | deleted | reordered | unauthorised_purge | bad_checkpoint | unsigned | witness
    seq: int
    record_id: str | None
    detail: str
    ledger: str = "records"

    def line(self) -> str:
        entry = "record" if self.ledger == "records" else f"{self.ledger} entry"
        target = f"{entry} {self.record_id} (seq {self.seq})" if self.record_id else f"{self.ledger} seq {self.seq}"
        return f"{self.kind}: {target}: {self.detail}"


@dataclass(slots=True)
class LedgerReport:
    ok: bool
    entries_checked: int
    checkpoints_checked: int
    last_seq: int
    last_hash: str
    problem: ChainProblem | None = None


# (row, ledger) -> a problem the generic walk cannot see (e.g. content removed without a purge)
RowCheck = Callable[[Any], ChainProblem | None]


def verify_ledger(conn: Connection, ledger: Ledger, hmac_key: bytes, *, row_check: RowCheck | None = None,
                  start: Link | None = None) -> LedgerReport:
    """Walk the ledger in seq order and report the first problem. `start` (a seq and hash already verified,
    e.g. a signed checkpoint) skips the entries up to it; the default walks from genesis."""
    checkpoints = {cp.seq: cp for cp in conn.execute(
        select(Checkpoint.__table__).where(Checkpoint.ledger == ledger.number).order_by(Checkpoint.seq))}
    walk = _Walk(ledger, hmac_key, checkpoints, start)
    table = ledger.table
    query = select(table).order_by(table.c.seq)
    if start is not None:
        query = query.where(table.c.seq > start.seq)
    # Core rows, not ORM objects: verification walks whole tables and needs no identity map.
    for row in conn.execute(query.execution_options(yield_per=1000)):
        problem = walk.step(conn, row) or (row_check(row) if row_check else None)
        if problem is not None:
            return walk.report(problem)
    return walk.report(walk.finish(conn))


class _Walk:
    """The state of one verification walk: where the chain is, and which checkpoints it has passed."""

    def __init__(self, ledger: Ledger, key: bytes, checkpoints: dict[int, Any], start: Link | None) -> None:
        self.ledger, self.key, self.checkpoints = ledger, key, checkpoints
        self.expected_seq = (start.seq if start else 0) + 1
        self.prev = start.record_hash if start else GENESIS_HASH
        self.checked = 0
        self.last_checkpoint: int | None = max((s for s in checkpoints if start and s <= start.seq), default=None)
        self.checkpoints_checked = 0
        self.legacy_allowed = ledger.number == 1   # 0.1 stores signed record checkpoints in the old form

    def report(self, problem: ChainProblem | None) -> LedgerReport:
        return LedgerReport(problem is None, self.checked, self.checkpoints_checked, self.expected_seq - 1,
                            self.prev, problem)

    def _problem(self, kind: str, seq: int, row_id: Any, detail: str) -> ChainProblem:
        return ChainProblem(kind, seq, None if row_id is None else str(row_id), detail, self.ledger.name)

    def step(self, conn: Connection, row: Any) -> ChainProblem | None:
        problem = self._check_links(conn, row) or self._check_content(row)
        if problem is None and row.seq in self.checkpoints:
            problem = self._check_checkpoint(self.checkpoints[row.seq], row)
        if problem is None:
            self.checked += 1
            self.expected_seq, self.prev = row.seq + 1, row.record_hash
        return problem

    def _check_links(self, conn: Connection, row: Any) -> ChainProblem | None:
        if row.seq != self.expected_seq:
            missing = f"{self.expected_seq}" if row.seq == self.expected_seq + 1 else f"{self.expected_seq}..{row.seq - 1}"
            return self._problem("deleted", self.expected_seq, None,
                                 f"seq {missing} missing before entry {row.id} (seq {row.seq})")
        if row.prev_hash != self.prev:
            table = self.ledger.table
            moved = conn.execute(select(table.c.seq).where(table.c.record_hash == row.prev_hash)).scalar()
            if moved is not None:
                return self._problem("reordered", row.seq, row.id,
                                     f"prev_hash names seq {moved}, expected seq {row.seq - 1}")
            return self._problem("altered", row.seq, row.id, "prev_hash does not match the previous entry")
        return None

    def _check_content(self, row: Any) -> ChainProblem | None:
        values = {name: getattr(row, name) for name in (*self.ledger.hashed_fields, *self.ledger.optional_fields)}
        for text_field, digest_field in self.ledger.sensitive_fields.items():
            text = getattr(row, text_field)
            if text is not None and text_digest(text) != values[digest_field]:
                return self._problem("altered", row.seq, row.id, f"{text_field} does not match {digest_field}")
        if self.ledger.digest(values) != row.content_digest:
            return self._problem("altered", row.seq, row.id, "stored fields do not match content_digest")
        if record_hash(row.seq, row.prev_hash, row.content_digest) != row.record_hash:
            return self._problem("altered", row.seq, row.id, "record_hash does not match seq, prev_hash and content")
        return None

    def _check_checkpoint(self, cp: Any, row: Any) -> ChainProblem | None:
        if cp.prev_seq is None and self.legacy_allowed:
            valid = hmac.compare_digest(sign_legacy(self.key, cp.seq, cp.record_hash), cp.signature)
        else:
            self.legacy_allowed = False   # no legacy checkpoint may follow a current one
            valid = hmac.compare_digest(
                sign_checkpoint(self.key, self.ledger.number, cp.seq, cp.record_hash, cp.prev_seq), cp.signature)
            if valid and (cp.prev_seq or None) != self.last_checkpoint:
                return self._problem("deleted", cp.seq, row.id,
                                     f"signed checkpoint at seq {cp.seq} follows seq {cp.prev_seq or 0}, but the "
                                     f"previous checkpoint present is seq {self.last_checkpoint or 0}")
        if not valid:
            return self._problem("bad_checkpoint", cp.seq, row.id, "checkpoint signature does not verify")
        if cp.record_hash != row.record_hash:
            return self._problem("altered", cp.seq, row.id,
                                 "record_hash differs from the signed checkpoint (chain rewritten)")
        self.last_checkpoint = cp.seq
        self.checkpoints_checked += 1
        return None

    def finish(self, conn: Connection) -> ChainProblem | None:
        last_seq = self.expected_seq - 1
        for seq in sorted(s for s in self.checkpoints if s > last_seq):
            return self._problem("deleted", seq, None, f"signed checkpoint names seq {seq} but the ledger ends at {last_seq}")
        head = conn.execute(select(ChainHead.__table__).where(ChainHead.id == self.ledger.number)).one_or_none()
        if head is None:
            if last_seq == 0:
                return None
            return self._problem("deleted", last_seq, None, "the signed chain head is missing")
        if head.signature is None:
            if head.seq == 0 and last_seq == 0:
                return None   # an empty ledger has nothing to protect yet
            return self._problem("unsigned", head.seq, None, "the chain head carries no signature")
        if not self._head_signature_valid(head):
            return self._problem("bad_checkpoint", head.seq, None, "chain head signature does not verify")
        if head.seq > last_seq:
            return self._problem("deleted", last_seq + 1, None,
                                 f"chain head is at seq {head.seq} but the last entry is seq {last_seq}")
        if head.seq != last_seq or head.record_hash != self.prev:
            return self._problem("altered", last_seq, None, "chain head does not match the last entry")
        if head.last_checkpoint_seq is not None and head.last_checkpoint_seq != self.last_checkpoint:
            return self._problem("deleted", head.last_checkpoint_seq or 0, None,
                                 f"the head names checkpoint seq {head.last_checkpoint_seq}, the last present is "
                                 f"seq {self.last_checkpoint or 0}")
        return None

    def _head_signature_valid(self, head: Any) -> bool:
        if self.ledger.number == 1 and hmac.compare_digest(
                sign_legacy(self.key, head.seq, head.record_hash), head.signature):
            return True   # a 0.1 store not yet appended to since the upgrade
        expected = sign_head(self.key, self.ledger.number, head.seq, head.record_hash, head.last_checkpoint_seq)
        return hmac.compare_digest(expected, head.signature)


@dataclass(slots=True)
class ChainReport:
    """Every ledger's verification; `ok` only when all of them verify. The top-level counts and problem
    are the records ledger's (the first problem found in any ledger when records are fine)."""

    ok: bool
    records_checked: int
    checkpoints_checked: int
    last_seq: int
    problem: ChainProblem | None = None
    ledgers: dict[str, dict[str, Any]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def combine(reports: Iterable[tuple[str, LedgerReport]]) -> ChainReport:
    reports = list(reports)
    by_name = dict(reports)
    records = by_name["records"]
    problem = records.problem or next((r.problem for _, r in reports if r.problem is not None), None)
    return ChainReport(
        ok=all(r.ok for _, r in reports), records_checked=records.entries_checked,
        checkpoints_checked=sum(r.checkpoints_checked for _, r in reports), last_seq=records.last_seq,
        problem=problem,
        ledgers={name: {"ok": r.ok, "entries_checked": r.entries_checked, "checkpoints_checked": r.checkpoints_checked,
                        "last_seq": r.last_seq, "last_hash": r.last_hash,
                        "problem": asdict(r.problem) if r.problem else None} for name, r in reports},
    )
