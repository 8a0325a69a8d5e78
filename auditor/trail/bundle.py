"""The regulator export bundle: everything a regulator needs to read the matching records and to check,
offline, that nothing in it was altered, added or left out, trusting nothing from us but the service's
Ed25519 public key and the SHA-256 of `verify_bundle.py`, both published apart from any bundle.

    manifest.json        filter, time, who, counts, versions, every file's SHA-256, every exported entry
                         (id and chain position) and the chain windows the links cover
    manifest.sig         the manifest's Ed25519 signature (the service's signing key) and its HMAC
    columns.csv          the column dictionary: every CSV column, its type, where it comes from, what it means
    records.*            one row per record: the record as chained, plus its current verdicts
    claims.*             one row per claim of each record's current verdicts
    evidence.*           one row per evidence item of those claims
    gate_decisions.*     one row per gate decision
    evaluations.*        every evaluation of the records (the current one marked), with its chained fields
    reviews.*            every review of the records (chained events)
    chain/links.jsonl    the hash-chain links from the signed checkpoint before each exported entry to the
                         one after it (or the signed head), per ledger
    chain/checkpoints.jsonl   those checkpoints and heads with their HMAC signatures
    verify_bundle.py     the checker, for convenience only: a regulator runs their own copy, checked against
                         the published hash (`python3 verify_bundle.py BUNDLE --public-key KEY`)

Each `*.jsonl` row holds the exact chained values, so the checker recomputes every content digest and walks
every link up to a signed checkpoint. Everything else is derived, and the checker derives it again: a
record's current verdicts (which verdict set, action, severity, counts, reviewed, disputed) are computed here
from the chained record, evaluations and reviews by `verify_bundle.current_verdicts`, the very function the
checker runs, under the active rule packs the signed manifest names; values only purged text could give are
left empty. Each CSV cell is the JSONL value its column's source path names (fixed in the checker, not read
from columns.csv), rendered and neutralised against spreadsheet formulas.

The bundle reads one consistent snapshot of the store; every record it holds is logged as read (action
"bundle", in pages with their ids), and issuing it is a chained event that names the manifest's hash. The
checkpoints it includes are checked against the HMAC key before the manifest is signed.
"""

from __future__ import annotations

import csv
import hashlib
import hmac
import json
import shutil
import zipfile
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from sqlalchemy import Connection, select
from sqlalchemy.orm import Session

from auditor.packs.registry import active_refs, versions_by_hash
from auditor.store.base import new_id, utcnow
from auditor.store.database import Database
from auditor.store.signing_key import SigningKey, SigningKeyError
from auditor.trail.access_log import Reader, check_tenant_filter, log_access, logged_filters
from auditor.trail.bundle_columns import TABLES, Columns
from auditor.trail.chain import (
    Ledger,
    canonical_json,
    canonical_time,
    sign_checkpoint,
    sign_head,
    sign_legacy,
)
from auditor.trail.events import append_event
from auditor.trail.ledgers import EVALUATIONS, EVENTS, RECORDS
from auditor.trail.models import ChainHead, Checkpoint, Evaluation, TrailEvent
from auditor.trail.queries import Shown, iter_records
from auditor.trail.schemas import AuditFilters, RecordFilter
from auditor.trail.verify_bundle import (
    FORMAT,
    SIGNATURE_FILE,
    SIGNED_PREFIX,
    current_verdicts,
    lookup,
    manifest_hmac,
    neutralise,
    occurred_at,
    render,
)

VERIFY_SCRIPT = Path(__file__).with_name("verify_bundle.py")
_PAGE = 500


class BundleError(ValueError):
    """A bundle that cannot be written where asked."""


class BundleSigningError(BundleError):
    """A bundle that cannot be signed: no usable Ed25519 key, or a checkpoint the HMAC key does not vouch for."""


class BundleFilters(RecordFilter):
    """Which records go into a bundle (the compliance filters; purge markers never do)."""


# -- rendering: verify_bundle.py's own rules (it is standard-library only, so the writer imports them) ------


def csv_value(row: Mapping[str, Any], path: str) -> str:
    return neutralise(render(lookup(row, path)))


# -- writing ---------------------------------------------------------------------------------------------


class _Table:
    """One table as JSONL and CSV side by side."""

    def __init__(self, folder: Path, name: str, columns: Columns) -> None:
        self.name, self.columns, self.rows = name, columns, 0
        self.entries: list[list[Any]] = []   # [seq, id] of each chained row, for the manifest
        self.jsonl: IO[str] = (folder / f"{name}.jsonl").open("w", encoding="utf-8", newline="\n")
        self.csv_file: IO[str] = (folder / f"{name}.csv").open("w", encoding="utf-8", newline="")
        self.writer = csv.writer(self.csv_file)
        self.writer.writerow([column for column, *_ in columns])

    def write(self, row: dict[str, Any]) -> None:
        self.jsonl.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
        self.writer.writerow([csv_value(row, source) for _, source, *_ in self.columns])
        self.rows += 1
        if "record_hash" in row:
            self.entries.append([row["seq"], row["id"]])

    def close(self) -> None:
        self.jsonl.close()
        self.csv_file.close()


@dataclass(slots=True)
class _Windows:
    """Per ledger: the checkpoint windows that hold exported entries (bounded by the number of checkpoints)."""

    checkpoints: dict[int, list[int]]
    heads: dict[int, int]
    needed: dict[int, set[int]] = field(default_factory=dict)

    def add(self, ledger: Ledger, seq: int) -> None:
        points = self.checkpoints.get(ledger.number, [])
        index = bisect_left(points, seq)
        end = points[index] if index < len(points) else self.heads.get(ledger.number, seq)
        self.needed.setdefault(ledger.number, set()).add(end)

    def ranges(self, ledger: Ledger) -> Iterator[tuple[int, int]]:
        points = self.checkpoints.get(ledger.number, [])
        for end in sorted(self.needed.get(ledger.number, ())):
            index = bisect_left(points, end)
            start = points[index - 1] if index > 0 else 0
            yield start, end


def write_bundle(database: Database, reader: Reader, filters: RecordFilter, folder: Path) -> dict[str, Any]:
    """Write the bundle of the records `filters` matches into `folder` (which must not exist or be empty);
    returns the manifest. A bundle that cannot be finished (or signed) leaves no files behind."""
    filters = BundleFilters(**filters.model_dump(exclude_none=True, include=set(RecordFilter.model_fields)))
    signing_key = _signing_key(database)
    _prepare(folder)
    try:
        check_tenant_filter(database, reader, filters, "bundle")
        manifest_text = _write_files(database, reader, filters, folder, signing_key)
    except BaseException:
        _empty(folder)
        raise
    manifest = json.loads(manifest_text)
    with database.write_connection() as conn:   # issuing the bundle is itself on the record
        append_event(conn, reader, key=database.chain_key, kind="bundle_issued", subject=manifest["bundle_id"], payload={
            "manifest_sha256": hashlib.sha256(manifest_text.encode()).hexdigest(), "filter": manifest["filter"],
            "counts": manifest["counts"]})
    return manifest


def _write_files(database: Database, reader: Reader, filters: BundleFilters, folder: Path,
                 signing_key: SigningKey) -> str:
    bundle_id, created_at = new_id(), utcnow()
    tables = {name: _Table(folder, name, columns) for name, columns in TABLES.items()}
    try:
        with database.snapshot() as conn:
            windows = _Windows(_checkpoint_seqs(conn), _head_seqs(conn))
            versions = _Versions(conn)
            active_packs = {d: ref.to_dict() for d, ref in active_refs(conn).items()}
            session = Session(bind=conn)
            page_filters = AuditFilters(**filters.model_dump(exclude_none=True), kind="record", limit=_PAGE)
            for page in iter_records(session, page_filters, tenant_scope=reader.tenant_scope, batch_size=_PAGE):
                _log_page(database, reader, bundle_id, page, logged_filters(filters))
                _write_page(conn, page, tables, windows, versions, active_packs)
            (folder / "chain").mkdir()
            chain = _write_chain(conn, folder / "chain", windows, database.chain_key.hmac_key)
            packs_used = versions.used_packs()
    finally:
        for table in tables.values():
            table.close()
    _write_columns(folder)
    shutil.copyfile(VERIFY_SCRIPT, folder / "verify_bundle.py")
    (folder / "README.txt").write_text(_README, encoding="utf-8")
    counts = {name: table.rows for name, table in tables.items()}
    manifest = {
        "format": FORMAT, "bundle_id": bundle_id, "created_at": created_at.isoformat(),
        "created_by": {"key_id": reader.key_id, "tenant": reader.tenant, "role": reader.role},
        "filter": logged_filters(filters),
        "counts": counts,
        "entries": {name: tables[name].entries for name in ("records", "evaluations", "reviews")},
        "versions": {"rule_packs_active": active_packs, "rule_packs_used": packs_used,
                     "kg_versions": sorted(versions.kgs), "evaluators": sorted(versions.evaluators),
                     "service": _service_version()},
        "ledgers": {name: {"number": ledger.number, "hashed_fields": list(ledger.hashed_fields),
                           "sensitive_fields": dict(ledger.sensitive_fields),
                           "optional_fields": list(ledger.optional_fields)} for name, ledger in
                    (("records", RECORDS), ("evaluations", EVALUATIONS), ("events", EVENTS))},
        "chain": chain,
        "signing": {"ed25519": {"public_key": signing_key.public_hex, "fingerprint": signing_key.fingerprint},
                    "hmac": {"algorithm": "HMAC-SHA256", "key_fingerprint": hmac_fingerprint(database.chain_key.hmac_key)},
                    "verifier_sha256": verifier_sha256()},
        "files": _file_hashes(folder),
    }
    manifest_text = json.dumps(manifest, ensure_ascii=False, indent=2, sort_keys=True)
    manifest_bytes = manifest_text.encode("utf-8")
    (folder / "manifest.json").write_bytes(manifest_bytes)
    signatures = {"format": FORMAT, "manifest_sha256": hashlib.sha256(manifest_bytes).hexdigest(),
                  "ed25519": signing_key.sign(SIGNED_PREFIX + manifest_bytes).hex(),
                  "hmac_sha256": manifest_hmac(database.chain_key.hmac_key, manifest_bytes)}
    (folder / SIGNATURE_FILE).write_text(json.dumps(signatures, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return manifest_text


def _signing_key(database: Database) -> SigningKey:
    source = database.chain_key.signing_key
    if source is None:
        raise BundleSigningError("this audit store was opened without an Ed25519 signing key: bundles are signed")
    try:
        return source.load()
    except SigningKeyError as exc:
        raise BundleSigningError(str(exc)) from exc


def signing_public_key(database: Database) -> SigningKey:
    """The key bundles are signed with (its public half and fingerprint are what the service publishes)."""
    return _signing_key(database)


def hmac_fingerprint(key: bytes) -> str:
    return hmac.new(key, b"auditor key fingerprint", hashlib.sha256).hexdigest()[:16]


def verifier_sha256() -> str:
    """The SHA-256 of the checker, published with the public key so a regulator can check their copy."""
    return hashlib.sha256(VERIFY_SCRIPT.read_bytes()).hexdigest()


def _empty(folder: Path) -> None:
    for path in folder.iterdir():
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def _prepare(folder: Path) -> None:
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise BundleError(f"{folder} exists and is not an empty folder: a bundle is written into a new folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BundleError(f"cannot create {folder}: {exc.strerror or exc}") from exc


def _log_page(database: Database, reader: Reader, bundle_id: str, page: list[Shown], filters: dict[str, Any]) -> None:
    with database.session(write=True) as log_session:
        log_access(log_session, reader, key=database.chain_key, action="bundle", target=bundle_id, filters=filters,
                   result_count=len(page), record_ids=[shown.record.id for shown in page])


class _Versions:
    def __init__(self, conn: Connection) -> None:
        self.conn, self.packs, self.kgs, self.evaluators = conn, set[str](), set[str](), set[str]()

    def note(self, pack_hash: str | None, kg: str | None, evaluator: str | None) -> None:
        for bucket, value in ((self.packs, pack_hash), (self.kgs, kg), (self.evaluators, evaluator)):
            if value:
                bucket.add(value)

    def used_packs(self) -> dict[str, str | None]:
        known = versions_by_hash(self.conn, self.packs)
        return {pack_hash: known.get(pack_hash) for pack_hash in sorted(self.packs)}


def _write_page(conn: Connection, page: list[Shown], tables: dict[str, _Table], windows: _Windows,
                versions: _Versions, active_packs: dict[str, dict[str, str]]) -> None:
    ids = [shown.record.id for shown in page]
    evaluations = [_chained_row(EVALUATIONS, e) for e in conn.execute(
        select(Evaluation.__table__).where(Evaluation.record_id.in_(ids)).order_by(Evaluation.seq)).mappings()]
    reviews = [_chained_row(EVENTS, r) for r in conn.execute(
        select(TrailEvent.__table__).where(TrailEvent.kind == "review", TrailEvent.record_id.in_(ids))
        .order_by(TrailEvent.seq)).mappings()]
    records = [_chained_row(RECORDS, shown.record) for shown in page]
    pack_versions = versions_by_hash(conn, {r["rule_pack_hash"] for r in [*records, *evaluations] if r["rule_pack_hash"]})
    evaluations_of: dict[str, list[dict[str, Any]]] = {}
    reviews_of: dict[str, list[dict[str, Any]]] = {}
    for evaluation in evaluations:
        evaluations_of.setdefault(evaluation["record_id"], []).append(evaluation)
    for review in reviews:
        reviews_of.setdefault(review["record_id"], []).append(review)
    current_ids = set()
    by_id = {e["id"]: e for e in evaluations}
    for row in records:
        # Derived from the chained rows by the checker's own rules, never read from the (unchained) verdict view.
        current = current_verdicts(row, evaluations_of.get(row["id"], []), reviews_of.get(row["id"], []),
                                   active_packs, pack_versions)
        row.update(occurred_at=occurred_at(row), current=current)
        tables["records"].write(row)
        windows.add(RECORDS, row["seq"])
        versions.note(row["rule_pack_hash"], row["kg_version"], None)
        for index, decision in enumerate(row["gate_decisions"] or []):
            tables["gate_decisions"].write({"record_id": row["id"], "decision_index": index, "decision": decision})
        evaluation_id = current["evaluation_id"]
        current_ids.add(evaluation_id)
        claims = by_id[evaluation_id]["claims"] if evaluation_id else (row["claims"] if current["source"] == "inline" else None)
        _write_claims(tables, row["id"], evaluation_id, claims)
    for evaluation in evaluations:
        evaluation.update(current=evaluation["id"] in current_ids,
                          rule_pack_version=pack_versions.get(evaluation["rule_pack_hash"] or ""))
        tables["evaluations"].write(evaluation)
        windows.add(EVALUATIONS, evaluation["seq"])
        versions.note(evaluation["rule_pack_hash"], evaluation["kg_version"], evaluation["evaluator_version"])
    for review in reviews:
        tables["reviews"].write(review)
        windows.add(EVENTS, review["seq"])


def _write_claims(tables: dict[str, _Table], record_id: str, evaluation_id: str | None, claims: list[Any] | None) -> None:
    for index, claim in enumerate(claims or []):
        tables["claims"].write({"record_id": record_id, "source": "evaluation" if evaluation_id else "inline",
                                "evaluation_id": evaluation_id, "claim_index": index, "claim": claim})
        for evidence_index, evidence in enumerate((claim or {}).get("evidence") or [] if isinstance(claim, dict) else []):
            tables["evidence"].write({"record_id": record_id, "evaluation_id": evaluation_id, "claim_index": index,
                                      "evidence_index": evidence_index, "evidence": evidence})


def _chained_row(ledger: Ledger, source: Any) -> dict[str, Any]:
    """An entry as the chain hashed it: its hashed fields (times in canonical form), the optional fields it
    holds, the sensitive texts the digests stand for, and its links."""
    get = source.get if isinstance(source, Mapping) else (lambda name: getattr(source, name, None))
    row = {name: _canonical(get(name)) for name in ledger.hashed_fields}
    row.update({name: get(name) for name in ledger.optional_fields if get(name) is not None})
    for text_field in ledger.sensitive_fields:
        row[text_field] = get(text_field)
    row.update(seq=get("seq"), prev_hash=get("prev_hash"), content_digest=get("content_digest"),
               record_hash=get("record_hash"), purged_at=_canonical(get("purged_at")))
    return row


def _canonical(value: Any) -> Any:
    from datetime import datetime

    return canonical_time(value) if isinstance(value, datetime) else value


def _checkpoint_seqs(conn: Connection) -> dict[int, list[int]]:
    points: dict[int, list[int]] = {}
    for ledger, seq in conn.execute(select(Checkpoint.ledger, Checkpoint.seq).order_by(Checkpoint.ledger, Checkpoint.seq)):
        points.setdefault(ledger, []).append(seq)
    return points


def _head_seqs(conn: Connection) -> dict[int, int]:
    return dict(conn.execute(select(ChainHead.id, ChainHead.seq)).all())


def _write_chain(conn: Connection, folder: Path, windows: _Windows, hmac_key: bytes) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    wanted_checkpoints: dict[int, set[int]] = {}
    with (folder / "links.jsonl").open("w", encoding="utf-8", newline="\n") as links:
        for name, ledger in (("records", RECORDS), ("evaluations", EVALUATIONS), ("events", EVENTS)):
            ranges = list(windows.ranges(ledger))
            entries = 0
            table = ledger.table
            for start, end in ranges:
                query = (select(table.c.seq, table.c.prev_hash, table.c.content_digest, table.c.record_hash)
                         .where(table.c.seq > start, table.c.seq <= end).order_by(table.c.seq))
                for row in conn.execute(query.execution_options(yield_per=2000)):
                    links.write(json.dumps({"ledger": name, "seq": row.seq, "prev_hash": row.prev_hash,
                                            "content_digest": row.content_digest, "record_hash": row.record_hash},
                                           sort_keys=True) + "\n")
                    entries += 1
                wanted_checkpoints.setdefault(ledger.number, set()).update(s for s in (start, end) if s)
            summary[name] = {"windows": [[start, end] for start, end in ranges], "links": entries}
    names = {RECORDS.number: "records", EVALUATIONS.number: "evaluations", EVENTS.number: "events"}
    with (folder / "checkpoints.jsonl").open("w", encoding="utf-8", newline="\n") as out:
        for number, seqs in sorted(wanted_checkpoints.items()):
            rows = conn.execute(select(Checkpoint.__table__).where(Checkpoint.ledger == number,
                                                                   Checkpoint.seq.in_(sorted(seqs)))).all()
            for cp in rows:
                _check_anchor(hmac_key, names[number], "checkpoint", cp.seq, cp.record_hash, cp.prev_seq, cp.signature)
                out.write(json.dumps({"ledger": names[number], "kind": "checkpoint", "seq": cp.seq,
                                      "record_hash": cp.record_hash, "prev_seq": cp.prev_seq,
                                      "signature": cp.signature}, sort_keys=True) + "\n")
            head = conn.execute(select(ChainHead.__table__).where(ChainHead.id == number)).one_or_none()
            if head is not None and head.seq in seqs:
                _check_anchor(hmac_key, names[number], "head", head.seq, head.record_hash, head.last_checkpoint_seq,
                              head.signature)
                out.write(json.dumps({"ledger": names[number], "kind": "head", "seq": head.seq,
                                      "record_hash": head.record_hash, "last_checkpoint_seq": head.last_checkpoint_seq,
                                      "signature": head.signature}, sort_keys=True) + "\n")
    return summary


def _check_anchor(key: bytes, ledger: str, kind: str, seq: int, hash_: str, previous: int | None,
                  signature: str | None) -> None:
    """The service signs a bundle only over checkpoints its HMAC key vouches for."""
    number = {"records": RECORDS.number, "evaluations": EVALUATIONS.number, "events": EVENTS.number}[ledger]
    expected = (sign_head if kind == "head" else sign_checkpoint)(key, number, seq, hash_, previous)
    legacy = number == RECORDS.number and hmac.compare_digest(sign_legacy(key, seq, hash_), signature or "")
    if not (legacy or hmac.compare_digest(expected, signature or "")):
        raise BundleSigningError(f"the {ledger} ledger's {kind} at seq {seq} does not verify under the HMAC key: "
                                 "the chain was altered (run `auditor audit verify-chain`); no bundle is signed over it")


def _write_columns(folder: Path) -> None:
    with (folder / "columns.csv").open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["file", "column", "type", "source", "description"])
        for name, columns in TABLES.items():
            for column, source, kind, description in columns:
                writer.writerow([f"{name}.csv", column, kind, source, description])


def _file_hashes(folder: Path) -> dict[str, dict[str, Any]]:
    files = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != "manifest.json"):
        digest = hashlib.sha256()
        lines = 0
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
                lines += block.count(b"\n")
        files[path.relative_to(folder).as_posix()] = {"sha256": digest.hexdigest(), "bytes": path.stat().st_size,
                                                      "lines": lines}
    return files


def _service_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"hallucination-auditor=={version('hallucination-auditor')}"
    except PackageNotFoundError:
        return "hallucination-auditor (not installed)"


def zip_folder(folder: Path, archive: Path) -> Path:
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zipped:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            zipped.write(path, path.relative_to(folder.parent).as_posix())
    return archive


def canonical_digest(values: Mapping[str, Any], fields: Iterable[str]) -> str:
    """What the chain hashes (kept here so tests can show verify_bundle.py computes the same)."""
    return hashlib.sha256(canonical_json({name: values.get(name) for name in fields}).encode()).hexdigest()


_README = """This folder is an audit-trail bundle of the hallucination-auditor service.

Check it with your own copy of verify_bundle.py (Python 3.9+ and the `cryptography` package, no network),
whose SHA-256 and the service's Ed25519 public key you got from the service apart from this bundle:

    sha256sum verify_bundle.py                                   # must be the published hash
    python3 verify_bundle.py BUNDLE --public-key PUBLIC_KEY      # exit 0: "bundle verified"
    python3 verify_bundle.py BUNDLE --hmac-key-file KEY          # the service's own check (needs the HMAC key)
    python3 verify_bundle.py BUNDLE --public-key K --witness witness.jsonl   # also against the chain witness

The copy of verify_bundle.py in this folder is for convenience: whoever altered the bundle could replace it.

manifest.json names the filter, who exported it and when, the counts and versions, every file's SHA-256,
every exported record, evaluation and review with its chain position, and the chain windows the links cover;
manifest.sig holds its Ed25519 signature (and HMAC). columns.csv describes every CSV column. The CSV files
are the JSONL files flattened for spreadsheets: a cell that starts with = + - @ (and is not a number) is
prefixed with ' so a spreadsheet shows it as text.

The checker rebuilds every derived value (each record's current verdicts, whether it was reviewed, ...) from
the chained rows, and fixes which value each CSV column shows. Without a key it can only say the bundle is
internally consistent (exit 3): the signature under the published public key is what ties it to the service.
"""
