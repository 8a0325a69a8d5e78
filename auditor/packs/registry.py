"""The rule-pack registry: register packs read from files, activate one per domain, load any by hash.

Which pack a domain uses is decided in the store, not per process: every process (server, workers, CLI)
reads the active pack from here (`auditor.packs.source`), so a reload on one machine reaches all of them,
and a re-audit job pins the packs active when it was created. Activations are chained events.

Rules for files (`sync_from_dir`): a pack whose content the store has never seen is registered and
activated; a pack the store already knows but that is not active (an older file left on some machine) is
activated only when forced (`auditor rules reload`, or `activate` by version for a rollback), so a worker
started from stale files cannot switch the service back.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, select, update
from sqlalchemy.exc import IntegrityError

from auditor.packs.models import RulePackVersion
from auditor.store.base import utcnow
from auditor.store.database import ChainKey, Database
from auditor.trail.access_log import Reader
from auditor.trail.chain import lock_ledger
from auditor.trail.events import append_event
from auditor.trail.ledgers import EVENTS
from rules import PackError, RulePack
from rules.packs import DOMAINS, PACK_DIR, load_pack, parse_pack

logger = logging.getLogger("auditor.packs")


class PackNotFound(LookupError):
    """No registered pack matches the domain and version or hash asked for."""


@dataclass(frozen=True, slots=True)
class PackRef:
    domain: str
    version: str
    hash: str

    def to_dict(self) -> dict[str, str]:
        return {"version": self.version, "hash": self.hash}


@dataclass(frozen=True, slots=True)
class SyncResult:
    domain: str
    version: str | None
    hash: str | None
    outcome: str          # activated | already_active | known_not_active | invalid | missing
    detail: str | None = None


@dataclass(frozen=True, slots=True)
class SystemActor:
    """Who activates a pack the file watch found: the service itself, named by host and process."""

    tenant: str = "(system)"
    key_id: str | None = None
    role: str = "system"
    tenant_scope: str | None = None


def pack_dir(configured: Path | None) -> Path:
    return configured if configured is not None else PACK_DIR


def pack_files(directory: Path) -> dict[str, Path]:
    return {domain: directory / f"{domain}.yaml" for domain in DOMAINS}


def active_refs(conn: Connection) -> dict[str, PackRef]:
    rows = conn.execute(select(RulePackVersion.domain, RulePackVersion.version, RulePackVersion.hash)
                        .where(RulePackVersion.active.is_(True))).all()
    return {row.domain: PackRef(row.domain, row.version, row.hash) for row in rows}


def active_hashes(conn: Connection) -> dict[str, str]:
    return {domain: ref.hash for domain, ref in active_refs(conn).items()}


def versions_by_hash(conn: Connection, hashes: set[str]) -> dict[str, str]:
    """The registered version of each pack hash (hashes the registry does not know are left out)."""
    if not hashes:
        return {}
    rows = conn.execute(select(RulePackVersion.hash, RulePackVersion.version).where(RulePackVersion.hash.in_(hashes)))
    return dict(rows.all())


def list_versions(conn: Connection, domain: str | None = None) -> list[Any]:
    query = select(RulePackVersion).order_by(RulePackVersion.domain, RulePackVersion.registered_at.desc())
    if domain is not None:
        query = query.where(RulePackVersion.domain == domain)
    return list(conn.execute(query.with_only_columns(
        RulePackVersion.id, RulePackVersion.domain, RulePackVersion.version, RulePackVersion.hash,
        RulePackVersion.source, RulePackVersion.registered_at, RulePackVersion.active, RulePackVersion.activated_at)))


def load_by_hash(conn: Connection, pack_hash: str) -> RulePack:
    body = conn.execute(select(RulePackVersion.body).where(RulePackVersion.hash == pack_hash).limit(1)).scalar()
    if body is None:
        raise PackNotFound(f"no registered rule pack with hash {pack_hash}")
    pack = parse_pack(body, origin=f"registered pack {pack_hash[:12]}")
    if pack.hash != pack_hash:   # the stored body was edited: refuse to judge with it
        raise PackNotFound(f"registered rule pack {pack_hash[:12]} no longer matches its hash")
    return pack


def find(conn: Connection, domain: str, version_or_hash: str) -> Any:
    """A registered pack of the domain by version, full hash or hash prefix (the newest if several match)."""
    rows = conn.execute(select(RulePackVersion.id, RulePackVersion.version, RulePackVersion.hash)
                        .where(RulePackVersion.domain == domain)
                        .order_by(RulePackVersion.registered_at.desc())).all()
    matches = [r for r in rows if version_or_hash in (r.version, r.hash)
               or (len(version_or_hash) >= 8 and r.hash.startswith(version_or_hash))]
    if not matches:
        raise PackNotFound(f"no registered {domain} rule pack {version_or_hash!r} (see `auditor rules list`)")
    return matches[0]


def register(conn: Connection, pack: RulePack, *, source: str | None, actor: Reader, key: ChainKey,
             activate: bool) -> str:
    """Store the pack if its content is new; activate it when asked. Returns the outcome (see SyncResult)."""
    exists = conn.execute(select(RulePackVersion.id, RulePackVersion.active).where(
        RulePackVersion.domain == pack.domain, RulePackVersion.hash == pack.hash).with_for_update()).one_or_none()
    if exists is None:
        conn.execute(RulePackVersion.__table__.insert().values(
            domain=pack.domain, version=pack.version, hash=pack.hash, body=pack.model_dump(mode="json"),
            source=source, registered_at=utcnow(), active=False))
    elif exists.active:
        return "already_active"
    if not activate:
        return "known_not_active"
    _activate(conn, pack.domain, pack.hash, actor=actor, key=key, reason=f"from {source}" if source else None)
    return "activated"


def activate(database: Database, domain: str, version_or_hash: str, *, actor: Reader, reason: str | None) -> PackRef:
    """Make a registered pack the domain's active one (a rollback, or a pack registered earlier)."""
    with database.write_connection() as conn:
        row = find(conn, domain, version_or_hash)
        _activate(conn, domain, row.hash, actor=actor, key=database.chain_key, reason=reason)
        return PackRef(domain, row.version, row.hash)


def _activate(conn: Connection, domain: str, pack_hash: str, *, actor: Reader, key: ChainKey,
              reason: str | None) -> None:
    lock_ledger(conn, EVENTS)   # activations serialise here, so a domain never ends with two active packs
    previous = active_refs(conn).get(domain)
    if previous is not None and previous.hash == pack_hash:
        return
    version = conn.execute(select(RulePackVersion.version).where(
        RulePackVersion.domain == domain, RulePackVersion.hash == pack_hash)).scalar_one()
    conn.execute(update(RulePackVersion).where(RulePackVersion.domain == domain, RulePackVersion.active.is_(True))
                 .values(active=False))
    conn.execute(update(RulePackVersion).where(RulePackVersion.domain == domain, RulePackVersion.hash == pack_hash)
                 .values(active=True, activated_at=utcnow()))
    append_event(conn, actor, key=key, kind="pack_activated", subject=domain, note=reason, payload={
        "domain": domain, "version": version, "hash": pack_hash,
        "previous": previous.to_dict() if previous is not None else None})
    logger.info("rule pack %s %s (%s) is now active", domain, version, pack_hash[:12])


def sync_from_dir(database: Database, directory: Path, *, actor: Reader, force: bool,
                  domains: tuple[str, ...] = DOMAINS) -> list[SyncResult]:
    """Register the packs in `directory` (one `<domain>.yaml` each) and activate them by the rules in the
    module docstring. An invalid file changes nothing and is reported."""
    results = []
    for domain in domains:
        path = directory / f"{domain}.yaml"
        if not path.is_file():
            results.append(SyncResult(domain, None, None, "missing", f"no file {path}"))
            continue
        try:
            pack = load_pack(path)
        except PackError as exc:
            results.append(SyncResult(domain, None, None, "invalid", str(exc)))
            continue
        if pack.domain != domain:
            results.append(SyncResult(domain, pack.version, pack.hash, "invalid",
                                      f"{path} holds the {pack.domain} pack, not {domain}"))
            continue
        for attempt in (1, 2):   # two processes registering the same new file: one insert wins, retry once
            try:
                with database.write_connection() as conn:
                    lock_ledger(conn, EVENTS)
                    new = conn.execute(select(RulePackVersion.id).where(
                        RulePackVersion.domain == domain, RulePackVersion.hash == pack.hash)).first() is None
                    outcome = register(conn, pack, source=str(path), actor=actor, key=database.chain_key,
                                       activate=force or new)
                break
            except IntegrityError:
                if attempt == 2:
                    raise
        results.append(SyncResult(domain, pack.version, pack.hash, outcome))
    return results
