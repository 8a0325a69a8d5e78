"""Rule packs in the store: new content activates, stale files on another machine cannot switch the service
back, reload and rollback are explicit and chained, every process follows within its refresh period, and a
broken file changes nothing."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest
import yaml
from sqlalchemy import select, text

from auditor.packs import registry
from auditor.packs.models import RulePackVersion
from auditor.packs.source import StorePacks
from auditor.store.database import Database
from auditor.trail.access_log import CliOperator
from auditor.trail.models import TrailEvent
from rules.packs import PACK_DIR

BUNDLED = yaml.safe_load((PACK_DIR / "medical.yaml").read_text())["version"]   # the packaged medical pack


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    shutil.copytree(PACK_DIR, tmp_path / "packs")
    return tmp_path / "packs"


def _bump(folder: Path, version: str, *, drop: str | None = None) -> None:
    path = folder / "medical.yaml"
    pack = yaml.safe_load(path.read_text())
    pack["version"] = version
    if drop:
        pack["rules"] = [r for r in pack["rules"] if r["id"] != drop]
    path.write_text(yaml.safe_dump(pack, sort_keys=False))


def _active(database: Database) -> dict[str, str]:
    with database.engine.connect() as conn:
        return {d: ref.version for d, ref in registry.active_refs(conn).items()}


def test_new_content_activates_and_stale_files_do_not_switch_back(database: Database, folder: Path, tmp_path: Path) -> None:
    stale = tmp_path / "stale-machine"
    shutil.copytree(folder, stale)               # another machine keeps the old files
    first = StorePacks(database, directory=folder, refresh_s=0)
    assert first.pack_for("medical") is not None and _active(database)["medical"] == BUNDLED
    _bump(folder, "test-2", drop="med.dose.max_daily")
    first.refresh()
    assert _active(database)["medical"] == "test-2"
    other = StorePacks(database, directory=stale, refresh_s=0)   # starts from the old, known content
    assert other.pack_for("medical").version == "test-2"      # follows the store, does not reactivate its file
    assert _active(database)["medical"] == "test-2"
    results = {r.domain: r.outcome for r in registry.sync_from_dir(database, stale, actor=CliOperator(), force=True)}
    assert results["medical"] == "activated" and _active(database)["medical"] == BUNDLED   # explicit reload
    with database.engine.connect() as conn:
        events = conn.execute(select(TrailEvent.payload).where(TrailEvent.kind == "pack_activated",
                                                               TrailEvent.subject == "medical").order_by(TrailEvent.seq)).scalars().all()
    assert [e["version"] for e in events] == [BUNDLED, "test-2", BUNDLED]
    assert events[1]["previous"]["version"] == BUNDLED


def test_every_process_follows_an_activation(database: Database, folder: Path) -> None:
    server, worker = (StorePacks(database, directory=folder, refresh_s=0, watch=False) for _ in range(2))
    registry.sync_from_dir(database, folder, actor=CliOperator(), force=False)
    assert server.pack_for("medical").version == worker.pack_for("medical").version == BUNDLED
    _bump(folder, "test-3")
    registry.sync_from_dir(database, folder, actor=CliOperator(), force=True)   # `auditor rules reload` elsewhere
    assert server.pack_for("medical").version == worker.pack_for("medical").version == "test-3"
    ref = registry.activate(database, "medical", BUNDLED, actor=CliOperator(), reason="roll back")
    assert ref.version == BUNDLED and worker.pack_for("medical").version == BUNDLED
    with pytest.raises(registry.PackNotFound):
        registry.activate(database, "medical", "no-such-version", actor=CliOperator(), reason=None)


def test_a_broken_pack_file_keeps_the_active_pack(database: Database, folder: Path) -> None:
    packs = StorePacks(database, directory=folder, refresh_s=0)
    assert packs.pack_for("medical").version == BUNDLED
    (folder / "medical.yaml").write_text("domain: medical\nversion: '9'\nrules:\n  - {id: bad}\n")
    assert packs.pack_for("medical").version == BUNDLED
    outcome = {r.domain: r for r in registry.sync_from_dir(database, folder, actor=CliOperator(), force=True)}
    assert outcome["medical"].outcome == "invalid" and "rules[0]" in outcome["medical"].detail


def test_an_edited_registered_body_is_refused(database: Database, folder: Path) -> None:
    packs = StorePacks(database, directory=folder, refresh_s=0)
    pack = packs.pack_for("legal")
    with database.engine.begin() as conn:   # someone with database access edits the stored pack
        conn.execute(text("UPDATE rule_packs SET body = :b WHERE hash = :h"),
                     {"b": pack.model_dump_json().replace('"block"', '"annotate"'), "h": pack.hash})
    with database.engine.connect() as conn, pytest.raises(registry.PackNotFound, match="no longer matches"):
        registry.load_by_hash(conn, pack.hash)


def test_two_processes_registering_the_same_file_make_one_version(database: Database, folder: Path) -> None:
    _bump(folder, "2026.12.4")
    errors: list[BaseException] = []

    def sync() -> None:
        try:
            registry.sync_from_dir(database, folder, actor=CliOperator(), force=False, domains=("medical",))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=sync) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    with database.engine.connect() as conn:
        rows = conn.execute(select(RulePackVersion.version, RulePackVersion.active)
                            .where(RulePackVersion.domain == "medical")).all()
        activations = conn.execute(select(TrailEvent.id).where(TrailEvent.kind == "pack_activated")).all()
    assert rows == [("2026.12.4", True)] and len(activations) == 1
