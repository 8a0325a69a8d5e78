"""Verdicts that rest on withdrawn facts: evidence citing an imported fact that the current KG version no
longer holds, because a rollback withdrew its import or a later import under the same name replaced it.

An imported fact is cited by its provenance: evidence built from it carries the locator
`<file> line <n> (<what>); sha256 <12 hex>, imported <time> by <who>` (`ImportStamp.provenance`), so a
stored verdict names the file its fact came from. A cited file is withdrawn when none of the current
overlays of its import's domain was imported from a file with that SHA-256. The same test runs in SQL (to
select records for a re-audit: `cites_withdrawn`) and in Python (to mark a shown record stale, with the
version that withdrew the fact: `stale_reasons`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import ColumnElement, Connection, Text, and_, cast, exists, func, or_, select
from sqlalchemy.orm import aliased

from auditor.kg.models import KgImport, KgVersion
from auditor.trail.models import AuditRecord, Evaluation, RecordVerdict

_CITED = re.compile(r"; sha256 ([0-9a-f]{12}), imported ")   # the file hash an imported fact's locator names
_PREFIX = 12


def cites_withdrawn(domain: Any = None) -> ColumnElement[bool]:
    """Current-verdict view rows whose current verdicts (the evaluation's, else the gate's inline ones) cite an
    imported fact from a file that no current overlay of its domain (`domain` only, when given) holds."""
    withdrawn, held = aliased(KgImport), aliased(KgImport)
    # The current version's overlay ids as stored JSON text ('["id1","id2"]'): one LIKE tests membership on
    # SQLite and PostgreSQL alike. Subqueries name what they correlate with: auto-correlation reaches one level.
    current = (select(cast(KgVersion.overlays, Text)).where(KgVersion.domain == withdrawn.domain)
               .order_by(KgVersion.seq.desc()).limit(1).correlate(withdrawn).scalar_subquery())
    still_held = exists().where(held.domain == withdrawn.domain, held.file_sha256 == withdrawn.file_sha256,
                                current.like('%"' + held.id + '"%')).correlate(withdrawn)
    cited = "%; sha256 " + func.substr(withdrawn.file_sha256, 1, _PREFIX, type_=Text) + ", imported %"
    in_evaluation = exists().where(Evaluation.id == RecordVerdict.evaluation_id,
                                   cast(Evaluation.claims, Text).like(cited)).correlate(RecordVerdict, withdrawn)
    inline = and_(RecordVerdict.source == "inline",
                  exists().where(AuditRecord.id == RecordVerdict.record_id, cast(AuditRecord.claims, Text).like(cited))
                  .correlate(RecordVerdict, withdrawn))
    query = select(withdrawn.id).where(~still_held, or_(in_evaluation, inline)).correlate(RecordVerdict)
    if domain is not None:
        query = query.where(withdrawn.domain == domain)
    return query.exists()


def cited_files(claims: Iterable[Any] | None) -> set[str]:
    """The SHA-256 prefixes of the imported files whose facts these claims' evidence cites."""
    found: set[str] = set()
    for claim in claims or []:
        for evidence in (claim.get("evidence") or []) if isinstance(claim, dict) else []:
            locator = evidence.get("locator") if isinstance(evidence, dict) else None
            if isinstance(locator, str):
                found.update(_CITED.findall(locator))
    return found


def stale_reasons(conn: Connection, claims_by_key: Mapping[str, Iterable[Any] | None]) -> dict[str, str]:
    """key -> why its claims are stale, for the claim lists that cite a withdrawn imported fact (one query for
    the imports and one for the version history, and only when some evidence cites an import at all)."""
    cited = {key: files for key, claims in claims_by_key.items() if (files := cited_files(claims))}
    prefixes = set().union(*cited.values()) if cited else set()
    if not prefixes:
        return {}
    imports = conn.execute(select(KgImport.id, KgImport.domain, KgImport.name, KgImport.file_name,
                                  func.substr(KgImport.file_sha256, 1, _PREFIX).label("prefix"))
                           .where(func.substr(KgImport.file_sha256, 1, _PREFIX).in_(sorted(prefixes)))).all()
    history: dict[str, list[Any]] = {}
    for row in conn.execute(select(KgVersion.seq, KgVersion.domain, KgVersion.version_hash, KgVersion.action,
                                   KgVersion.overlays, KgVersion.import_id)
                            .where(KgVersion.domain.in_({i.domain for i in imports})).order_by(KgVersion.seq)):
        history.setdefault(row.domain, []).append(row)
    why = {prefix: reason for prefix in prefixes
           if (reason := _withdrawn(prefix, [i for i in imports if i.prefix == prefix], history))}
    return {key: "; ".join(why[p] for p in sorted(files) if p in why) for key, files in cited.items()
            if any(p in why for p in files)}


def _withdrawn(prefix: str, imports: list[Any], history: Mapping[str, list[Any]]) -> str | None:
    """Why the facts of file `prefix` are gone from the current version, or None while it holds them (or when
    the store never imported such a file: nothing to say about it)."""
    if not imports:
        return None
    ids = {i.id for i in imports}
    rows = history.get(imports[0].domain, [])
    if not rows or ids & set(rows[-1].overlays or []):
        return None
    last_held = max((n for n, row in enumerate(rows) if ids & set(row.overlays or [])), default=None)
    if last_held is None or last_held + 1 >= len(rows):
        return None
    change = rows[last_held + 1]
    # only a rollback or a later import under the same overlay name drops an overlay
    by = (f"rollback to {change.version_hash}" if change.action == "rollback"
          else f"a new import of {imports[0].name} ({change.version_hash})")
    return f"cites a fact withdrawn by {by} (seq {change.seq}): {imports[0].file_name}, sha256 {prefix}"
