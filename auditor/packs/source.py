"""Where a process gets the rule pack to judge with: the store's active pack, refreshed every few seconds.

`StorePacks` is what the output gate and the evaluators hold. On each use, at most every `refresh_s`, it
re-reads which pack is active per domain (one small query) and, with `watch` on, looks at the pack files:
a file whose content changed is registered and activated (see `auditor.packs.registry`). So an edit, or
`auditor rules reload` on any machine, reaches every server and worker within `refresh_s`, without a
thread of its own and without a restart. `PinnedPacks` serves a re-audit job the exact packs it pinned.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from auditor.packs import registry
from auditor.packs.registry import PackRef, SystemActor
from auditor.settings import Settings
from auditor.store.database import Database
from rules import RulePack

logger = logging.getLogger("auditor.packs")


class PackSource(Protocol):
    def pack_for(self, domain: str) -> RulePack | None: ...


class StorePacks:
    def __init__(self, database: Database, *, directory: Path | None = None, refresh_s: float = 2.0,
                 watch: bool = True) -> None:
        self.database = database
        self.directory = registry.pack_dir(directory)
        self.refresh_s = refresh_s
        self.watch = watch
        self._lock = threading.Lock()
        self._checked_at = float("-inf")
        self._file_stamps: dict[str, tuple[int, int]] = {}
        self._active: dict[str, PackRef] = {}
        self._by_hash: dict[str, RulePack] = {}
        self._actor = SystemActor(tenant=f"(pack-watch {socket.gethostname()}:{os.getpid()})")

    def pack_for(self, domain: str) -> RulePack | None:
        self.refresh()
        ref = self._active.get(domain)
        return self._load(ref.hash) if ref is not None else None

    def refs(self) -> dict[str, PackRef]:
        self.refresh()
        return dict(self._active)

    def load(self, pack_hash: str) -> RulePack:
        return self._load(pack_hash)

    def refresh(self, *, force: bool = False) -> None:
        with self._lock:
            if not force and time.monotonic() - self._checked_at < self.refresh_s:
                return
            self._checked_at = time.monotonic()
            try:
                if self.watch:
                    self._sync_changed_files()
                with self.database.engine.connect() as conn:
                    active = registry.active_refs(conn)
            except Exception:   # the store may be briefly away: keep judging with the packs already loaded
                logger.exception("could not refresh the active rule packs")
                return
            for domain, ref in active.items():
                previous = self._active.get(domain)
                if previous is not None and previous.hash != ref.hash:
                    logger.info("rule pack %s: %s -> %s (%s)", domain, previous.version, ref.version, ref.hash[:12])
            self._active = active

    def _sync_changed_files(self) -> None:
        changed = []
        for domain, path in registry.pack_files(self.directory).items():
            try:
                stat = path.stat()
            except OSError:
                continue
            stamp = (stat.st_mtime_ns, stat.st_size)
            if self._file_stamps.get(domain) != stamp:
                self._file_stamps[domain] = stamp
                changed.append(domain)
        if changed:
            for result in registry.sync_from_dir(self.database, self.directory, actor=self._actor, force=False,
                                                 domains=tuple(changed)):
                if result.outcome == "invalid":
                    logger.error("rule pack file not loaded, the active pack stays: %s", result.detail)

    def _load(self, pack_hash: str) -> RulePack:
        pack = self._by_hash.get(pack_hash)
        if pack is None:
            with self.database.engine.connect() as conn:
                pack = registry.load_by_hash(conn, pack_hash)
            self._by_hash[pack_hash] = pack
        return pack


def store_packs(database: Database, settings: Settings) -> StorePacks:
    """The pack source a process builds from its settings (pack folder, refresh period, file watch)."""
    return StorePacks(database, directory=settings.rule_pack_dir, refresh_s=settings.rule_pack_refresh_s,
                      watch=settings.rule_pack_watch)


def pins_now(packs: StorePacks | None, evaluator_spec: str) -> dict[str, dict[str, str]]:
    """The packs a job created now will judge with (domain -> version and hash): the active ones, read
    fresh (a file changed a moment ago is picked up first). Only the rules evaluator judges by packs."""
    if packs is None or evaluator_spec != "rules":
        return {}
    packs.refresh(force=True)
    return {domain: ref.to_dict() for domain, ref in sorted(packs.refs().items())}


class PinnedPacks:
    """The packs a re-audit job pinned when it was created (domain -> hash); other domains use `base`."""

    def __init__(self, base: StorePacks, pins: Mapping[str, Mapping[str, str]]) -> None:
        self.base = base
        self.pins = {domain: pin["hash"] for domain, pin in pins.items()}

    def pack_for(self, domain: str) -> RulePack | None:
        pinned = self.pins.get(domain)
        return self.base.load(pinned) if pinned is not None else self.base.pack_for(domain)
