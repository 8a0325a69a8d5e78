"""KG changes in the trail: every import, rollback and anchoring is a chained event, and every stored overlay
carries a keyed digest, so someone with database access cannot change what the service serves unnoticed.

- An import's overlay digest (`kg_imports.digest`) is an HMAC, with the chain's key, of the overlay's content
  hash and the row's identity (id, domain, name, file hash): editing the overlay and recomputing a plain
  SHA-256, or moving an overlay to another row, no longer matches.
- Each `kg_versions` row written is recorded in a chained event (`kg_imported`, `kg_rolled_back`) with an HMAC
  over all its fields; a row no event records, one that differs from its event, or an event whose row is gone
  is a forgery, an alteration or a deletion.
- Rows from before KG changes were chained have no event and a plain digest: they are *unanchored*. A row no
  event records is taken for one only when its seq is below the first version an import or rollback chained;
  above that it is forged. `auditor kg anchor` (an admin's explicit act) chains them in one `kg_anchored` event.

`KgTrust` answers, for one connection, whether a version row or an overlay may be served; `check_store` is
the cross-check `auditor audit verify-chain` runs over both tables.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, select, update

from auditor.kg.errors import KgIntegrityError
from auditor.kg.models import KgImport, KgVersion
from auditor.trail.chain import ChainProblem, canonical_json, canonical_time
from auditor.trail.models import TrailEvent

logger = logging.getLogger("auditor.kg")

CREATED = ("kg_imported", "kg_rolled_back")        # events that record a version row as it is written
KG_EVENT_KINDS = (*CREATED, "kg_anchored")
ANCHOR_HINT = "check them and anchor them with `auditor kg anchor` (an admin)"
_VERSION_FIELDS = ("seq", "domain", "version_hash", "base_version", "overlays", "action", "import_id", "rollback_to",
                   "created_at", "created_by")


# -- keys: what only the service can compute -----------------------------------------------------------------


def _hmac(key: bytes, message: str) -> str:
    return hmac.new(key, message.encode(), hashlib.sha256).hexdigest()


def content_sha256(canonical: bytes) -> str:
    return hashlib.sha256(canonical).hexdigest()


def keyed_digest(key: bytes, row: Any, content: str) -> str:
    """The digest stored in `kg_imports.digest`: binds the overlay's content hash to the row it belongs to."""
    return _hmac(key, f"kg-overlay:v1:{row.id}:{row.domain}:{row.name}:{row.file_sha256}:{content}")


def version_entry(row: Any) -> dict[str, Any]:
    """A version row's fields as chained (times canonical, so SQLite and PostgreSQL rows hash alike)."""
    entry = {name: getattr(row, name) for name in _VERSION_FIELDS}
    entry["overlays"] = list(entry["overlays"] or [])
    if isinstance(entry["created_at"], datetime):
        entry["created_at"] = canonical_time(entry["created_at"])
    return entry


def version_mac(key: bytes, entry: dict[str, Any]) -> str:
    return _hmac(key, "kg-version:v1:" + canonical_json({k: entry.get(k) for k in _VERSION_FIELDS}))


def event_payload(key: bytes, versions: Iterable[Any], imports: Iterable[Any]) -> dict[str, Any]:
    """What a KG event chains: each version row with its MAC, each import with its keyed digest."""
    return {"versions": [{**(entry := version_entry(row)), "mac": version_mac(key, entry)} for row in versions],
            "imports": [{"id": row.id, "domain": row.domain, "name": row.name, "file_sha256": row.file_sha256,
                         "digest": row.digest} for row in imports]}


@dataclass(frozen=True, slots=True)
class KgActor:
    """Who changes the KG, as the events ledger names them (an admin key, or the CLI operator)."""

    key_id: str | None
    tenant: str
    role: str = "admin"
    tenant_scope: str | None = None


_KEY_ACTOR = re.compile(r"^key:(?P<id>[^ ]{1,64}) \((?P<tenant>.{1,128})\)$")


def actor_named(by: str) -> KgActor:
    """The actor a `created_by` / `imported_by` string names ("key:<id> (<tenant>)", else the CLI)."""
    match = _KEY_ACTOR.match(by)
    return KgActor(match["id"], match["tenant"]) if match else KgActor(None, "(cli)")


# -- checking ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Check:
    status: str            # ok | unanchored | altered | forged | deleted
    detail: str = ""

    @property
    def servable(self) -> bool:
        return self.status in ("ok", "unanchored")


OK = Check("ok")


@dataclass(slots=True)
class KgTrust:
    """The chained KG history as one connection sees it, and the key: whether a row may be served."""

    key: bytes
    versions: dict[int, dict[str, Any]] = field(default_factory=dict)   # seq -> chained entry (with mac)
    imports: dict[str, dict[str, Any]] = field(default_factory=dict)    # import id -> chained entry
    first_created: int | None = None   # lowest seq an import or rollback chained: unchained rows above it are forged

    @classmethod
    def read(cls, conn: Connection, key: bytes) -> KgTrust:
        trust = cls(key)
        events = conn.execute(select(TrailEvent.kind, TrailEvent.payload)
                              .where(TrailEvent.kind.in_(KG_EVENT_KINDS)).order_by(TrailEvent.seq))
        for kind, payload in events:
            for entry in (payload or {}).get("versions", []):
                trust.versions[int(entry["seq"])] = entry
                if kind in CREATED:
                    trust.first_created = min(int(entry["seq"]), trust.first_created or int(entry["seq"]))
            for entry in (payload or {}).get("imports", []):
                trust.imports[entry["id"]] = entry
        return trust

    def version(self, row: Any) -> Check:
        chained = self.versions.get(row.seq)
        if chained is None:
            if self.first_created is None or row.seq < self.first_created:
                return Check("unanchored", f"KG version {row.domain}@{row.seq} is from before KG changes were "
                                           f"chained; {ANCHOR_HINT}")
            return Check("forged", f"KG version {row.domain}@{row.seq} ({row.action}) is in kg_versions, but no "
                                   "chained event records it")
        if not hmac.compare_digest(version_mac(self.key, version_entry(row)), str(chained.get("mac", ""))):
            return Check("altered", f"KG version {row.domain}@{row.seq} differs from the version its chained "
                                    "event records")
        return OK

    def overlay(self, row: Any, content: str) -> Check:
        """`row`: a kg_imports row (id, domain, name, file_sha256, digest); `content`: its overlay's SHA-256."""
        keyed = keyed_digest(self.key, row, content)
        chained = self.imports.get(row.id)
        if chained is not None:
            if hmac.compare_digest(keyed, row.digest) and hmac.compare_digest(keyed, str(chained.get("digest"))):
                return OK
            return Check("altered", f"the overlay of KG import {row.id} ({row.name}) no longer matches the keyed "
                                    "digest chained when it was imported")
        if hmac.compare_digest(keyed, row.digest):
            return Check("forged", f"KG import {row.id} ({row.name}) carries a keyed digest but no chained event "
                                   "records it")
        if hmac.compare_digest(content, row.digest):
            return Check("unanchored", f"KG import {row.id} ({row.name}) is from before KG changes were chained; "
                                       f"{ANCHOR_HINT}")
        return Check("altered", f"the overlay of KG import {row.id} ({row.name}) does not match its digest")

    def missing_newest(self, conn: Connection, domain: str, current_seq: int | None) -> Check:
        """A chained version of `domain` newer than the store's current one whose row is gone (a deletion that
        makes an older version current again)."""
        newer = sorted((s for s, e in self.versions.items() if e.get("domain") == domain and s > (current_seq or 0)),
                       reverse=True)
        if not newer:
            return OK
        present = set(conn.execute(select(KgVersion.seq).where(KgVersion.seq.in_(newer))).scalars())
        gone = [s for s in newer if s not in present]
        if gone:
            return Check("deleted", f"KG version {domain}@{gone[0]} is recorded by a chained event but is gone "
                                    "from kg_versions")
        return OK   # the store moved on while this was read: the next refresh serves it

    def require(self, check: Check) -> None:
        if not check.servable:
            raise KgIntegrityError(f"KG integrity check failed: {check.status}: {check.detail}")
        if check.status == "unanchored":
            logger.warning("%s", check.detail)


# -- the cross-check verify-chain runs -----------------------------------------------------------------------


@dataclass(slots=True)
class StoreCheck:
    versions_checked: int = 0
    imports_checked: int = 0
    problems: list[ChainProblem] = field(default_factory=list)
    unanchored: list[ChainProblem] = field(default_factory=list)

    @property
    def problem(self) -> ChainProblem | None:
        """The first problem; unanchored rows only when nothing worse was found."""
        return (self.problems or self.unanchored or [None])[0]

    def summary(self) -> dict[str, Any]:
        return {"versions_checked": self.versions_checked, "imports_checked": self.imports_checked,
                "problems": [p.line() for p in self.problems], "unanchored": [p.line() for p in self.unanchored]}


def check_store(conn: Connection, key: bytes) -> StoreCheck:
    """Every KG version and import against the key and the chained KG events (run inside verify-chain's
    snapshot)."""
    trust = KgTrust.read(conn, key)
    report = StoreCheck()
    rows = list(conn.execute(select(KgVersion).order_by(KgVersion.seq)))
    first_use: dict[str, int] = {}
    for row in rows:
        report.versions_checked += 1
        _note(report, trust.version(row), row.seq, f"{row.domain}@{row.seq}")
        for import_id in row.overlays or []:
            first_use.setdefault(import_id, row.seq)
    present = {row.seq for row in rows}
    for seq in sorted(set(trust.versions) - present):
        entry = trust.versions[seq]
        _note(report, Check("deleted", f"KG version {entry.get('domain')}@{seq} is recorded by a chained event but "
                                       "is gone from kg_versions"), seq, f"{entry.get('domain')}@{seq}")
    stored: set[str] = set()
    for row in conn.execute(select(KgImport.id, KgImport.domain, KgImport.name, KgImport.file_sha256,
                                   KgImport.digest, KgImport.overlay).execution_options(yield_per=16)):
        report.imports_checked += 1
        stored.add(row.id)
        try:
            content = content_sha256(zlib.decompress(row.overlay))
        except zlib.error:
            content = ""
        _note(report, trust.overlay(row, content), first_use.get(row.id, 0), f"import {row.id}")
    for import_id in sorted((set(trust.imports) | set(first_use)) - stored):
        _note(report, Check("deleted", f"KG import {import_id} is recorded by a chained event or named by a "
                                       "version but is gone from kg_imports"), first_use.get(import_id, 0),
              f"import {import_id}")
    return report


def _note(report: StoreCheck, check: Check, seq: int, name: str) -> None:
    if check.status == "ok":
        return
    problem = ChainProblem(check.status, seq, name, check.detail, "kg")
    (report.unanchored if check.status == "unanchored" else report.problems).append(problem)


# -- anchoring the rows from before chaining -----------------------------------------------------------------


@dataclass(slots=True)
class Unanchored:
    versions: list[Any]
    imports: list[Any]


def find_unanchored(conn: Connection, trust: KgTrust) -> Unanchored:
    """The rows an admin may anchor; an unanchored overlay that does not match its plain digest is refused."""
    versions = [row for row in conn.execute(select(KgVersion).order_by(KgVersion.seq))
                if trust.version(row).status == "unanchored"]
    imports = []
    for row in conn.execute(select(KgImport.id, KgImport.domain, KgImport.name, KgImport.file_sha256,
                                   KgImport.digest, KgImport.overlay).order_by(KgImport.imported_at)):
        if row.id in trust.imports:
            continue
        check = trust.overlay(row, content_sha256(zlib.decompress(row.overlay)))
        if check.status != "unanchored":
            raise KgIntegrityError(f"cannot anchor: {check.detail}")
        imports.append(row)
    return Unanchored(versions, imports)


def rekey_imports(conn: Connection, key: bytes, imports: list[Any]) -> list[Any]:
    """Replace each unanchored import's plain digest with its keyed one; returns the rows as now stored."""
    rekeyed = []
    for row in imports:
        digest = keyed_digest(key, row, row.digest)      # unanchored: the plain digest is the content hash
        conn.execute(update(KgImport).where(KgImport.id == row.id, KgImport.digest == row.digest).values(digest=digest))
        rekeyed.append(ImportRef(row.id, row.domain, row.name, row.file_sha256, digest))
    return rekeyed


@dataclass(frozen=True, slots=True)
class ImportRef:
    id: str
    domain: str
    name: str
    file_sha256: str
    digest: str
