"""KG versions in the audit store: import a file as an overlay, list, diff and roll back versions, and select
the records whose verdicts were made under a version older than a given one (or cite facts it withdrew).

A domain's current version is its `kg_versions` row with the highest seq. An import is parsed against the
current version (so its names resolve against what is served), then committed with a new version row in one
transaction, under a lock that serialises version changes; if another change landed while the file was being
read, it is read again against the new version. A file with any bad row changes nothing.

Every import and rollback is also a chained event, and every overlay read is checked against its keyed
digest and every version row against its chained event (`auditor.kg.anchors`): a row that fails is never
served, built on or rolled back to (`KgIntegrityError`).
"""

from __future__ import annotations

import getpass
import hashlib
import json
import socket
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import ColumnElement, Connection, and_, func, insert, or_, select, text

from auditor.kg import anchors
from auditor.kg.anchors import Check, KgTrust
from auditor.kg.errors import KgIntegrityError, KgVersionError
from auditor.kg.models import KgImport, KgVersion
from auditor.kg.withdrawn import cites_withdrawn
from auditor.store.base import new_id, utcnow
from auditor.store.database import Database
from auditor.trail.events import append_event
from auditor.trail.models import RecordVerdict
from knowledge_graphs import KnowledgeGraph
from knowledge_graphs.imports import (
    ImportStamp,
    Overlay,
    OverlayDiff,
    apply_overlays,
    diff_versions,
    parse_file,
)
from knowledge_graphs.imports.control_chars import control_in

MAX_FILE_BYTES = 256 * 1024 * 1024
_ATTEMPTS = 3


@dataclass(frozen=True, slots=True)
class VersionView:
    seq: int
    domain: str
    version_hash: str
    base_version: str
    action: str
    overlays: list[str]
    created_at: datetime
    created_by: str
    import_id: str | None = None
    rollback_to: int | None = None
    current: bool = False
    check: str = "ok"            # ok | unanchored | altered | forged | deleted, with why (`auditor.kg.anchors`)


@dataclass(slots=True)
class ImportResult:
    version: VersionView
    import_id: str
    rows: int
    entities: int
    facts: int
    supersedes: int
    new_entities: list[str] = field(default_factory=list)   # e.g. formulary drugs the KG did not know
    replaced: list[str] = field(default_factory=list)       # overlays of the same name this one replaced


def cli_actor() -> str:
    """Who imports from the command line when no API key names them."""
    return f"cli:{getpass.getuser()}@{socket.gethostname()}"[:200]


# -- reading ------------------------------------------------------------------------------------------


def current_version(conn: Connection, domain: str) -> KgVersion | None:
    query = select(KgVersion).where(KgVersion.domain == domain).order_by(KgVersion.seq.desc()).limit(1)
    return conn.execute(query).first()  # type: ignore[return-value]


def current_seqs(conn: Connection) -> dict[str, int]:
    """domain -> seq of its current version (one small query; what the live KGs poll)."""
    rows = conn.execute(select(KgVersion.domain, func.max(KgVersion.seq)).group_by(KgVersion.domain))
    return {domain: int(seq) for domain, seq in rows}


def load_overlays(conn: Connection, import_ids: Sequence[str], *, key: bytes | None = None,
                  trust: KgTrust | None = None, anchored: bool = False) -> list[Overlay]:
    """The overlays of a version, in order, each checked against its keyed digest (`KgIntegrityError`); read
    and parsed once per process for each stored digest. `anchored`: refuse overlays from before chaining too (a new
    version is about to be built on them)."""
    trust = trust or KgTrust.read(conn, _key(key))
    return [_overlay(conn, import_id, trust, anchored=anchored) for import_id in import_ids]


def _key(key: bytes | None) -> bytes:
    if not key:
        raise KgIntegrityError("KG versions are checked with the chain key; none was given")
    return key


def _overlay(conn: Connection, import_id: str, trust: KgTrust, *, anchored: bool = False) -> Overlay:
    row = conn.execute(select(KgImport.id, KgImport.domain, KgImport.name, KgImport.file_sha256, KgImport.digest)
                       .where(KgImport.id == import_id)).first()
    if row is None:
        raise KgIntegrityError(f"KG integrity check failed: deleted: the overlay {import_id} of a KG version is "
                               "missing from kg_imports")
    cached = _overlay_cache((import_id, row.digest))   # an edited digest is a new key: read and checked again
    if cached is not None:
        return cached
    blob = conn.execute(select(KgImport.overlay).where(KgImport.id == import_id)).scalar_one()
    try:
        canonical = zlib.decompress(blob)
    except zlib.error:
        canonical = b""
    check = trust.overlay(row, anchors.content_sha256(canonical))
    _require(trust, check, anchored=anchored)
    overlay = Overlay.from_json(json.loads(canonical))
    _overlay_cache.store((import_id, row.digest), overlay)
    return overlay


def _require(trust: KgTrust, check: Check, *, anchored: bool) -> None:
    if anchored and check.status == "unanchored":
        raise KgVersionError(f"no new KG version is built on an unanchored overlay: {check.detail}")
    trust.require(check)


class _OverlayCache:
    """Overlays never change once stored: keep the few most recent parsed ones per process, by import id and
    stored digest (checked when first read)."""

    def __init__(self, size: int = 16) -> None:
        self.size, self.items = size, {}  # type: ignore[var-annotated]

    def __call__(self, import_id: tuple[str, str]) -> Overlay | None:
        return self.items.get(import_id)

    def store(self, import_id: tuple[str, str], overlay: Overlay) -> None:
        self.items[import_id] = overlay
        while len(self.items) > self.size:
            self.items.pop(next(iter(self.items)))


_overlay_cache = _OverlayCache()


def kg_for(conn: Connection, packaged: KnowledgeGraph, version: KgVersion | None, *, key: bytes | None = None,
           trust: KgTrust | None = None, anchored: bool = False) -> KnowledgeGraph:
    """The KG of `version` (None: the packaged one), once the version row and its overlays pass their
    integrity checks (`KgIntegrityError` otherwise)."""
    if version is None:
        return packaged
    trust = trust or KgTrust.read(conn, _key(key))
    trust.require(trust.version(version))
    if not version.overlays:
        return packaged
    return apply_overlays(packaged, load_overlays(conn, version.overlays, trust=trust, anchored=anchored))


def list_versions(database: Database, *, domain: str | None = None) -> list[VersionView]:
    """The history, each row with the outcome of its integrity check (its own and its overlays')."""
    with database.engine.connect() as conn:
        query = select(KgVersion).order_by(KgVersion.seq)
        if domain is not None:
            query = query.where(KgVersion.domain == domain)
        rows = list(conn.execute(query))
        latest = current_seqs(conn)
        checks = _checks(conn, database.chain_key.hmac_key, rows)
    return [_view(row, current=latest.get(row.domain) == row.seq, check=checks[row.seq]) for row in rows]


def _checks(conn: Connection, key: bytes, rows: list[Any]) -> dict[int, str]:
    trust = KgTrust.read(conn, key)
    ids = sorted({i for row in rows for i in row.overlays or []})
    overlays: dict[str, Check] = {}
    for imported in conn.execute(select(KgImport.id, KgImport.domain, KgImport.name, KgImport.file_sha256,
                                        KgImport.digest, KgImport.overlay).where(KgImport.id.in_(ids))):
        try:
            content = anchors.content_sha256(zlib.decompress(imported.overlay))
        except zlib.error:
            content = ""
        overlays[imported.id] = trust.overlay(imported, content)
    rank = ("ok", "unanchored", "altered", "forged", "deleted")
    out = {}
    for row in rows:
        found = [trust.version(row), *(overlays.get(i, Check("deleted", f"KG import {i} is missing"))
                                       for i in row.overlays or [])]
        worst = max(found, key=lambda c: rank.index(c.status))
        out[row.seq] = worst.status if worst.status == "ok" else f"{worst.status}: {worst.detail}"
    return out


def imports_by_id(database: Database, ids: Sequence[str]) -> dict[str, Any]:
    with database.engine.connect() as conn:
        query = select(KgImport.id, KgImport.name, KgImport.format, KgImport.file_name, KgImport.file_sha256,
                       KgImport.rows, KgImport.imported_at, KgImport.imported_by).where(KgImport.id.in_(list(ids)))
        return {row.id: row for row in conn.execute(query)}


def resolve(conn: Connection, reference: str) -> KgVersion:
    """A version by its hash (or a unique prefix of at least 6 characters), or by `<domain>@<seq>`; a hash
    that several rows carry (a rollback restores an older hash) names its first appearance."""
    reference = reference.strip()
    if "@" in reference:
        domain, _, number = reference.partition("@")
        row = conn.execute(select(KgVersion).where(KgVersion.domain == domain, KgVersion.seq == int(number))
                           ).first() if number.isdigit() else None
    else:
        if len(reference) < 6 or not all(c in "0123456789abcdef" for c in reference.lower()):
            raise KgVersionError(f"{reference!r} is not a KG version hash (6+ hex characters) or domain@seq")
        rows = list(conn.execute(select(KgVersion).where(KgVersion.version_hash.startswith(reference.lower()))
                                 .order_by(KgVersion.seq)))
        if len({r.version_hash for r in rows}) > 1:
            raise KgVersionError(f"{reference!r} is the prefix of several KG versions; give more of it")
        row = rows[0] if rows else None
    if row is None:
        raise KgVersionError(f"no KG version {reference!r} (see `auditor kg list`)")
    return row  # type: ignore[return-value]


def diff(database: Database, packaged: Callable[[str], KnowledgeGraph], before: str, after: str) -> tuple[
        VersionView, VersionView, OverlayDiff]:
    with database.engine.connect() as conn:
        old, new = resolve(conn, before), resolve(conn, after)
        if old.domain != new.domain:
            raise KgVersionError(f"{before} is a {old.domain} version and {after} a {new.domain} one")
        base = packaged(old.domain)
        trust = KgTrust.read(conn, database.chain_key.hmac_key)
        for row in (old, new):
            trust.require(trust.version(row))
        changes = diff_versions(base, load_overlays(conn, old.overlays or [], trust=trust),
                                load_overlays(conn, new.overlays or [], trust=trust))
    return _view(old), _view(new), changes


# -- changing -----------------------------------------------------------------------------------------


def import_file(database: Database, packaged: KnowledgeGraph, *, fmt: str, path: Path | None = None,
                data: bytes | None = None, file_name: str | None = None, name: str | None = None,
                as_of: str | None = None, imported_by: str) -> ImportResult:
    """Parse a file against the domain's current KG and commit it as a new version; `ImportFileError` (every
    bad line and field) or `KgVersionError` leave the store as it was."""
    if data is None:
        assert path is not None
        if path.stat().st_size > MAX_FILE_BYTES:
            raise KgVersionError(f"{path} is larger than {MAX_FILE_BYTES // 2**20} MiB")
        data = path.read_bytes()
    file_name = file_name or (path.name if path is not None else "upload")
    domain = packaged.domain
    key = database.chain_key.hmac_key
    if name is not None and (bad := control_in(name)):
        raise KgVersionError(f"the overlay name {bad}")
    now = utcnow()
    stamp = ImportStamp(name or fmt, fmt, file_name, hashlib.sha256(data).hexdigest(), now.isoformat(),
                        imported_by, as_of or now.date().isoformat())
    for _ in range(_ATTEMPTS):
        with database.engine.connect() as conn:
            base_row = current_version(conn, domain)
            trust = KgTrust.read(conn, key)
            if base_row is not None:
                trust.require(trust.version(base_row))
            overlays = load_overlays(conn, base_row.overlays or [], trust=trust, anchored=True) \
                if base_row is not None else []
        kept = [o for o in overlays if o.name != stamp.overlay]          # same name: this import replaces it
        overlay = parse_file(fmt, data, domain=domain, stamp=stamp, kg=apply_overlays(packaged, kept))
        if overlay.rows == 0:
            raise KgVersionError(f"{file_name}: no rows to import")
        new_kg = apply_overlays(packaged, [*kept, overlay])               # fails here, not in a serving process
        result = _commit_import(database, packaged, base_row, overlays, overlay, stamp, new_kg, now)
        if result is not None:
            return result
    raise KgVersionError(f"the {domain} KG kept changing while {file_name} was read; try again")


def _commit_import(database: Database, packaged: KnowledgeGraph, base_row: KgVersion | None,
                   overlays: list[Overlay], overlay: Overlay, stamp: ImportStamp, new_kg: KnowledgeGraph,
                   now: datetime) -> ImportResult | None:
    canonical = overlay.canonical()
    key = database.chain_key
    with database.write_connection() as conn:
        _lock_versions(conn)
        latest = current_version(conn, packaged.domain)
        if (latest.seq if latest else None) != (base_row.seq if base_row else None):
            return None                                                  # another change landed: read again
        trust = KgTrust.read(conn, key.hmac_key)
        if latest is not None:
            trust.require(trust.version(latest))                         # what this version is built on
        written = []
        if latest is None:
            written.append(_insert_version(conn, packaged, [], "packaged", stamp.imported_by, now))
        base_ids = list(latest.overlays or []) if latest is not None else []
        kept_ids = [i for i, o in zip(base_ids, overlays, strict=True) if o.name != stamp.overlay]
        import_id = new_id()
        imported = anchors.ImportRef(import_id, packaged.domain, stamp.overlay, stamp.file_sha256, "")
        digest = anchors.keyed_digest(key.hmac_key, imported, anchors.content_sha256(canonical))
        conn.execute(insert(KgImport), {
            "id": import_id, "domain": packaged.domain, "name": stamp.overlay, "format": stamp.format,
            "file_name": stamp.file_name[:512], "file_sha256": stamp.file_sha256, "as_of": stamp.as_of,
            "rows": overlay.rows, "entities": len(overlay.entities), "facts": len(overlay.facts),
            "supersedes": len(overlay.supersedes), "digest": digest,
            "overlay": zlib.compress(canonical, 6), "imported_at": now, "imported_by": stamp.imported_by,
        })
        seq = _insert_version(conn, packaged, [*kept_ids, import_id], "import", stamp.imported_by, now,
                              version_hash=new_kg.version, import_id=import_id)
        written.append(seq)
        rows = list(conn.execute(select(KgVersion).where(KgVersion.seq.in_(written)).order_by(KgVersion.seq)))
        append_event(conn, anchors.actor_named(stamp.imported_by), key=key, kind="kg_imported",
                     subject=packaged.domain, payload=anchors.event_payload(
                         key.hmac_key, rows, [anchors.ImportRef(import_id, packaged.domain, stamp.overlay,
                                                                 stamp.file_sha256, digest)]))
        version = rows[-1]
    _overlay_cache.store((import_id, digest), overlay)
    known = {e.id for e in packaged.entities()}
    return ImportResult(_view(version, current=True), import_id, overlay.rows, len(overlay.entities),
                        len(overlay.facts), len(overlay.supersedes),
                        new_entities=[e.id for e in overlay.entities if e.id not in known and e.type == "drug"],
                        replaced=[o.name for o in overlays if o.name == stamp.overlay])


def rollback(database: Database, packaged: Callable[[str], KnowledgeGraph], reference: str, *,
             by: str) -> VersionView:
    """Make the KG of version `reference` current again, as a new version row (history is never rewritten)."""
    key = database.chain_key
    with database.write_connection() as conn:
        _lock_versions(conn)
        target = resolve(conn, reference)
        latest = current_version(conn, target.domain)
        if latest is not None and latest.version_hash == target.version_hash:
            raise KgVersionError(f"{target.domain} is already at {target.version_hash}")
        base = packaged(target.domain)
        kg = kg_for(conn, base, target, key=key.hmac_key, anchored=True)   # never back to a doctored version
        seq = _insert_version(conn, base, list(target.overlays or []), "rollback", by, utcnow(),
                              version_hash=kg.version, rollback_to=target.seq)
        row = conn.execute(select(KgVersion).where(KgVersion.seq == seq)).one()
        append_event(conn, anchors.actor_named(by), key=key, kind="kg_rolled_back", subject=target.domain,
                     payload=anchors.event_payload(key.hmac_key, [row], []))
        return _view(row, current=True)


@dataclass(frozen=True, slots=True)
class AnchorResult:
    versions: list[VersionView]
    imports: list[str]


def anchor(database: Database, *, by: str, dry_run: bool = False) -> AnchorResult:
    """Chain the KG rows written before KG changes were chained (an admin's explicit act, once they have
    checked them): one `kg_anchored` event records every such version, and each such import's plain digest
    becomes its keyed one. An old overlay that no longer matches its plain digest is refused (`KgIntegrityError`);
    rows forged after chaining began are never anchored (they are not unanchored, see `auditor.kg.anchors`)."""
    key = database.chain_key
    with database.write_connection() as conn:
        _lock_versions(conn)
        trust = KgTrust.read(conn, key.hmac_key)
        found = anchors.find_unanchored(conn, trust)
        result = AnchorResult([_view(row, check="unanchored") for row in found.versions], [i.id for i in found.imports])
        if dry_run or not (found.versions or found.imports):
            return result
        imports = anchors.rekey_imports(conn, key.hmac_key, found.imports)
        append_event(conn, anchors.actor_named(by), key=key, kind="kg_anchored", subject=None,
                     payload=anchors.event_payload(key.hmac_key, found.versions, imports))
    _overlay_cache.items.clear()
    return result


def _insert_version(conn: Connection, packaged: KnowledgeGraph, overlays: list[str], action: str, by: str,
                    now: datetime, *, version_hash: str | None = None, import_id: str | None = None,
                    rollback_to: int | None = None) -> int:
    result = conn.execute(insert(KgVersion).returning(KgVersion.seq), {
        "domain": packaged.domain, "version_hash": version_hash or packaged.version,
        "base_version": packaged.version, "overlays": overlays, "action": action, "import_id": import_id,
        "rollback_to": rollback_to, "created_at": now, "created_by": by[:200],
    })
    return int(result.scalar_one())


def _lock_versions(conn: Connection) -> None:
    """Serialise version changes across processes (SQLite: the write connection already holds the lock)."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("LOCK TABLE kg_versions IN SHARE ROW EXCLUSIVE MODE"))


def _view(row: Any, *, current: bool = False, check: str = "ok") -> VersionView:
    return VersionView(row.seq, row.domain, row.version_hash, row.base_version, row.action, list(row.overlays or []),
                       row.created_at, row.created_by, row.import_id, row.rollback_to, current, check)


# -- records judged under older versions --------------------------------------------------------------


def judged_before(reference: str) -> ColumnElement[bool]:
    """Current-verdict view rows of the version's domain whose current verdicts (the latest done evaluation,
    else the output gate's own) were made under a KG version other than `reference` and those current since
    it (a hash a rollback made current again counts from its latest row), and, whatever version they were
    made under, those that cite an imported fact the domain's current version no longer holds (withdrawn by
    a rollback or replaced by a later import: `auditor.kg.withdrawn`). A reference no version row names
    matches nothing."""
    latest = select(func.max(KgVersion.seq)).where(KgVersion.version_hash == reference).scalar_subquery()
    domain = select(KgVersion.domain).where(KgVersion.version_hash == reference).limit(1).scalar_subquery()
    newer = select(KgVersion.version_hash).where(KgVersion.domain == domain, KgVersion.seq >= latest)
    judged_under = RecordVerdict.kg_version
    older = and_(judged_under.is_not(None), judged_under.not_in(newer))
    return and_(RecordVerdict.domain == domain, or_(older, cites_withdrawn(domain)))

