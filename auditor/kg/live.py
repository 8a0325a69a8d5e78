"""The KG versions a process serves, following the store: an import or rollback on any machine reaches every
API replica and worker within `AUDITOR_KG_REFRESH_S` seconds, or at once with `POST /v1/kg/reload`.

Each check is one small query (the current seq per domain). When a domain's version changed, the new KG is
built here (the packaged KG plus the version's overlays, a copy that shares the packaged objects), warmed
(linker, validator indexes, the decoding constraint's masks) off the request path, and only then swapped
in: requests already running finish on the version they started with; new ones get the new one.

A version that fails its integrity check (`auditor.kg.anchors`: a doctored overlay, a forged, altered or
deleted version row) is never served, and never replaced by a KG without its overlays: silently dropping a
sanctions list would turn "contradicted" into "no claim". A process that already serves a verified version
of the domain keeps it and logs why (`versions()` reports the refusal); one that has none yet refuses to
start (`refresh` raises `KgIntegrityError`), as the API server and the workers then do.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from sqlalchemy import select

from auditor.kg.anchors import KgTrust
from auditor.kg.errors import KgIntegrityError
from auditor.kg.models import KgVersion
from auditor.kg.versions import current_seqs, kg_for
from auditor.store.database import Database
from knowledge_graphs import KnowledgeGraph, activate, load_kg, packaged_kg
from knowledge_graphs.registry import deactivate

logger = logging.getLogger("auditor.kg")

Listener = Callable[[KnowledgeGraph], None]


class LiveKnowledgeGraphs:
    """Which KG version this process serves per domain, and the thread that keeps it current."""

    def __init__(self, database: Database, domains: Iterable[str], *, refresh_s: float,
                 listeners: Iterable[Listener] = (), packaged: Callable[[str], KnowledgeGraph] = packaged_kg,
                 key: bytes | None = None) -> None:
        self.database, self.refresh_s, self.packaged = database, refresh_s, packaged
        self.key = key   # the chain key the store's KG rows are checked with (default: the database's)
        self.domains = tuple(domains)
        self.listeners = list(listeners)
        self.applied: dict[str, int | None] = {domain: None for domain in self.domains}
        self.verified: set[str] = set()            # domains this process has served a checked version of
        self.refused: dict[str, str] = {}          # domain -> why the store's current version is not served
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def versions(self) -> dict[str, dict[str, Any]]:
        return {domain: {"version": load_kg(domain).version if self.applied[domain] else None,
                         "seq": self.applied[domain],
                         **({"refused": self.refused[domain]} if domain in self.refused else {})}
                for domain in self.domains}

    def refresh(self) -> list[str]:
        """Follow the store now; returns the domains whose version changed. Raises `KgIntegrityError` when a
        domain's current version fails its check and this process has no checked version of it to keep."""
        with self._lock:
            built, refused = [], {}
            with self.database.engine.connect() as conn:
                latest = current_seqs(conn)
                pending = [d for d in self.domains if latest.get(d) != self.applied[d] or d not in self.verified]
                trust = KgTrust.read(conn, self.key or self.database.chain_key.hmac_key) if pending else None
                for domain in pending:
                    try:
                        if latest.get(domain) is None and self.applied[domain] is None:
                            # packaged only, and already what this process serves: check that no chained version
                            # was deleted, without building (and holding) a KG nobody asked for
                            assert trust is not None
                            trust.require(trust.missing_newest(conn, domain, None))
                            self.verified.add(domain)
                            self.refused.pop(domain, None)
                            continue
                        built.append((domain, *self._build(conn, domain, latest.get(domain), trust)))
                    except KgIntegrityError as exc:
                        refused[domain] = str(exc)
            changed = []
            for domain, seq, kg in built:
                self.verified.add(domain)
                self.refused.pop(domain, None)
                if seq == self.applied[domain]:
                    continue                             # checked, and already what this process serves
                for listener in self.listeners:          # warm and hand over before anyone is sent to it
                    listener(kg)
                activate(kg)
                self.applied[domain] = seq
                changed.append(domain)
                logger.info("KG %s: now version %s (store seq %s)", domain, kg.version, seq)
            self._refuse(refused)
            return changed

    def _refuse(self, refused: dict[str, str]) -> None:
        for domain, reason in refused.items():
            if domain in self.verified and self.refused.get(domain) != reason:   # once per reason
                logger.error("KG %s: the store's current version is not served: %s; still serving the checked "
                             "version %s", domain, reason, load_kg(domain).version)
            self.refused[domain] = reason
        unserved = [domain for domain in refused if domain not in self.verified]
        if unserved:
            raise KgIntegrityError(f"the {unserved[0]} KG is not served: {refused[unserved[0]]}")

    def _build(self, conn: Any, domain: str, seq: int | None,
               trust: KgTrust | None) -> tuple[int | None, KnowledgeGraph]:
        assert trust is not None
        trust.require(trust.missing_newest(conn, domain, seq))    # the newest chained version must still be there
        row = conn.execute(select(KgVersion).where(KgVersion.seq == seq)).first() if seq is not None else None
        kg = kg_for(conn, self.packaged(domain), row, trust=trust)
        if row is not None and row.version_hash != kg.version:
            logger.warning("KG %s: the store's version %s was built on packaged %s; this process's packaged KG is "
                           "%s, so it serves %s", domain, row.version_hash, row.base_version,
                           self.packaged(domain).version, kg.version)
        return seq, kg

    # -- the follower thread ------------------------------------------------------------------------------
    def start(self) -> LiveKnowledgeGraphs:
        if self.refresh_s > 0 and self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="auditor-kg-follower", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop following; this process goes back to the packaged KGs."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        for domain in self.domains:
            if self.applied[domain] is not None:
                deactivate(domain)

    def _loop(self) -> None:
        while not self._stop.wait(self.refresh_s):
            try:
                self.refresh()
            except Exception:   # the store may be briefly away: keep serving the version already loaded
                logger.exception("could not follow the KG versions in the store")
