"""Issue 43, findings 5 and 15: the KG tables edited by someone with database access, and KG names that
carry terminal control sequences.

Finding 5: an OFAC SDN list is imported through the CLI, then the attacker changes what the service serves
with plain SQL (the code is open, so they know the overlay format and its unkeyed SHA-256): they edit the
overlay and recompute its digest, delete the import, roll back by inserting a version row, or make an old
version current by renumbering it. Each must be caught by `auditor audit verify-chain`, and the doctored KG
must not be served: a starting service refuses it, a running one keeps the version it verified, and
`auditor verify` refuses to judge with it instead of dropping the sanctions claim. Rows written before KG
changes were chained are reported as unanchored until an admin anchors them with `auditor kg anchor`.

Finding 15: an SDN name with ESC, BEL or bidi controls is refused at import with one line naming the row;
names stored before that check (a legacy import) are escaped in `auditor kg diff` and `auditor kg list`."""

from __future__ import annotations

import hashlib
import json
import re
import zlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, insert, text

from auditor.kg.live import LiveKnowledgeGraphs
from auditor.kg.models import KgImport, KgVersion
from auditor.store.database import Database
from knowledge_graphs import packaged_kg
from knowledge_graphs.imports import ImportStamp, Overlay, apply_overlays, parse_file
from knowledge_graphs.registry import deactivate
from tests.security.conftest import settings_for

pytestmark = pytest.mark.timeout(300)

SDN = Path(__file__).parents[1] / "knowledge_graphs" / "imports" / "fixtures" / "sdn.csv"
SANCTIONED = "Teodor Zavoransky is not sanctioned."
PARTY = "sdn:9001"
# What must never reach a terminal raw: C0 (but tab and newline), DEL, C1, and the bidi controls.
UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


# -- the service's side: import, judge, verify, serve -------------------------------------------------------


def _import_sdn(cli, url: str, path: Path = SDN, *extra: str) -> dict[str, Any]:
    status, out, err = cli(url, "kg", "import", "--domain", "finance", "--format", "ofac-sdn", str(path),
                           "--as-of", "2026-12-01", "--json", *extra)
    assert status == 0, err
    return json.loads(out)


def _judge(cli, url: str, tmp_path: Path) -> tuple[int, str, str]:
    answer = tmp_path / "answer.txt"
    answer.write_text(SANCTIONED)
    return cli(url, "verify", "--domain", "finance", "--json", str(answer))


def _contradicted(out: str) -> bool:
    return any(c["verdict"] == "contradicted" and c["kind"] == "sanctions" for c in json.loads(out)["claims"])


def _verify_chain(cli, url: str) -> tuple[int, dict[str, Any]]:
    status, out, err = cli(url, "audit", "verify-chain", "--json")
    assert "Traceback" not in err, err
    return status, json.loads(out)


def _kg_problem(cli, url: str) -> dict[str, Any]:
    """verify-chain exits 1 and names a problem in the KG history (not a side effect in another ledger)."""
    status, report = _verify_chain(cli, url)
    assert status == 1, report
    assert report["problem"] is not None and report["problem"]["ledger"] == "kg", report["problem"]
    return report["problem"]


def _fresh_process_serves(url: str) -> str:
    """What a process starting now would serve for finance: its KG version, or why it refuses."""
    database = Database.from_settings(settings_for(url))
    live = LiveKnowledgeGraphs(database, ["finance"], refresh_s=0)
    try:
        live.refresh()
        return str(live.versions()["finance"]["version"])
    except Exception as exc:   # noqa: BLE001 - the refusal is the answer
        return f"refused: {type(exc).__name__}: {exc}"
    finally:
        deactivate("finance")
        database.dispose()


def _genuine_store(cli, url: str, tmp_path: Path) -> dict[str, Any]:
    imported = _import_sdn(cli, url)
    status, out, err = _judge(cli, url, tmp_path)
    assert status == 1 and _contradicted(out), out + err          # the listed party is contradicted: block
    assert _verify_chain(cli, url)[0] == 0
    assert _fresh_process_serves(url) == imported["version"]
    return imported


def _assert_not_served(cli, url: str, tmp_path: Path) -> None:
    """The doctored KG is not served: a starting process refuses it, and `auditor verify` refuses to judge
    with it (one line, exit 2) rather than answering without the sanctions claim."""
    served = _fresh_process_serves(url)
    assert served.startswith("refused:") and "integrity" in served, served
    status, out, err = _judge(cli, url, tmp_path)
    assert status == 2, out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err and "finance" in lines[0], err


# -- the attacker's side: plain SQL -------------------------------------------------------------------------


def _drop_party_from_overlay(engine: Engine, party: str = PARTY) -> None:
    """Edit the SDN overlay so the party is no longer listed, and recompute the unkeyed digest."""
    with engine.begin() as conn:
        row = conn.execute(text("SELECT id, overlay FROM kg_imports WHERE format = 'ofac-sdn'")).one()
        data = json.loads(zlib.decompress(bytes(row.overlay)))
        data["entities"] = [e for e in data["entities"] if e["id"] != party]
        data["facts"] = [f for f in data["facts"] if f["subject"] != party]
        canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        conn.execute(text("UPDATE kg_imports SET overlay = :overlay, digest = :digest WHERE id = :id"),
                     {"overlay": zlib.compress(canonical), "digest": hashlib.sha256(canonical).hexdigest(),
                      "id": row.id})


def _delete_import(engine: Engine) -> None:
    with engine.begin() as conn:
        import_id = conn.execute(text("SELECT id FROM kg_imports WHERE format = 'ofac-sdn'")).scalar_one()
        conn.execute(text("DELETE FROM kg_versions WHERE import_id = :id"), {"id": import_id})
        conn.execute(text("DELETE FROM kg_imports WHERE id = :id"), {"id": import_id})


def _rollback_by_sql(engine: Engine) -> None:
    """A new current version row that restores the packaged finance KG, as `kg rollback` would write it."""
    with engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO kg_versions (domain, version_hash, base_version, overlays, action, import_id, rollback_to, "
            "created_at, created_by) SELECT domain, version_hash, base_version, overlays, 'rollback', NULL, seq, "
            "created_at, created_by FROM kg_versions WHERE domain = 'finance' AND action = 'packaged'"))


def _make_packaged_current(engine: Engine) -> None:
    """Swap the active version: renumber the packaged row past the import, so it is the current one."""
    with engine.begin() as conn:
        conn.execute(text("UPDATE kg_versions SET seq = 1000 WHERE domain = 'finance' AND action = 'packaged'"))


ATTACKS = {"overlay edited, unkeyed digest recomputed": _drop_party_from_overlay,
           "import and its version deleted": _delete_import,
           "rollback inserted by SQL": _rollback_by_sql,
           "packaged version made current by renumbering": _make_packaged_current}


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_finding_5_kg_tampering_is_caught_and_not_served(cli, sql, store_url: str, tmp_path: Path,
                                                          attack: str) -> None:
    _genuine_store(cli, store_url, tmp_path)
    ATTACKS[attack](sql(store_url))
    problem = _kg_problem(cli, store_url)
    assert problem["kind"] in ("altered", "deleted", "forged"), problem
    _assert_not_served(cli, store_url, tmp_path)


def test_finding_5_kg_list_flags_a_doctored_overlay(cli, sql, store_url: str, tmp_path: Path) -> None:
    _genuine_store(cli, store_url, tmp_path)
    _drop_party_from_overlay(sql(store_url))
    status, out, err = cli(store_url, "kg", "list", "--domain", "finance", "--json")
    assert status == 0, err
    rows = json.loads(out)
    assert rows[-1]["current"] and rows[-1]["check"].startswith("altered"), rows[-1]
    assert rows[0]["check"] == "ok"


def test_finding_5_downgrading_a_keyed_digest_to_the_unkeyed_one_is_caught(cli, sql, store_url: str,
                                                                           tmp_path: Path) -> None:
    """The overlay untouched, its digest replaced by the plain SHA-256 an import before chaining stored."""
    _genuine_store(cli, store_url, tmp_path)
    with sql(store_url).begin() as conn:
        row = conn.execute(text("SELECT id, overlay FROM kg_imports")).one()
        plain = hashlib.sha256(zlib.decompress(bytes(row.overlay))).hexdigest()
        conn.execute(text("UPDATE kg_imports SET digest = :d WHERE id = :id"), {"d": plain, "id": row.id})
    assert _kg_problem(cli, store_url)["kind"] == "altered"
    _assert_not_served(cli, store_url, tmp_path)


@pytest.mark.parametrize("attack", ["rollback inserted by SQL", "import and its version deleted"])
def test_finding_5_a_running_service_keeps_the_version_it_verified(app_on, cli, sql, store_url: str,
                                                                  tmp_path: Path, attack: str) -> None:
    imported = _genuine_store(cli, store_url, tmp_path)
    client = app_on(store_url, kg_refresh_s=0)
    assert client.post("/v1/kg/reload").json()["domains"]["finance"]["version"] == imported["version"]
    ATTACKS[attack](sql(store_url))
    reloaded = client.post("/v1/kg/reload")
    assert reloaded.status_code == 200, reloaded.text
    finance = reloaded.json()["domains"]["finance"]
    assert finance["version"] == imported["version"], finance
    assert "integrity" in (finance.get("refused") or ""), finance


def test_finding_5_kg_changes_are_chained_events(cli, sql, store_url: str, tmp_path: Path) -> None:
    imported = _genuine_store(cli, store_url, tmp_path)
    packaged = packaged_kg("finance").version
    status, _, err = cli(store_url, "kg", "rollback", packaged)
    assert status == 0, err
    with sql(store_url).connect() as conn:
        events = conn.execute(text("SELECT kind, subject, payload FROM trail_events ORDER BY seq")).all()
    kinds = [(e.kind, e.subject) for e in events]
    assert kinds == [("kg_imported", "finance"), ("kg_rolled_back", "finance")], kinds
    payload = events[0].payload if isinstance(events[0].payload, dict) else json.loads(events[0].payload)
    [entry] = payload["imports"]
    assert entry["id"] == imported["import_id"] and len(entry["digest"]) == 64
    assert _verify_chain(cli, store_url)[0] == 0


# -- rows from before KG changes were chained ---------------------------------------------------------------


def _legacy_import(url: str, *, name: str = "ofac-sdn", party_name: str | None = None) -> None:
    """What `kg import` wrote before this change: a packaged row, an import row whose digest is the plain
    SHA-256 of its overlay, a version row, and no chained event. `name` and `party_name` go in as the old code
    stored them, unchecked."""
    packaged = packaged_kg("finance")
    now = datetime.now(UTC)
    data = SDN.read_bytes()
    stamp = ImportStamp("ofac-sdn", "ofac-sdn", "sdn.csv", hashlib.sha256(data).hexdigest(), now.isoformat(),
                        "cli:old@host", "2026-01-01")
    stored = parse_file("ofac-sdn", data, domain="finance", stamp=stamp, kg=packaged).to_json()
    stored["name"] = name
    for entity in stored["entities"]:
        if entity["id"] == PARTY and party_name is not None:
            entity["name"] = party_name
    overlay = Overlay.from_json(stored)
    canonical = overlay.canonical()
    database = Database(url)
    try:
        database.upgrade()
        with database.engine.begin() as conn:
            conn.execute(insert(KgVersion), {"domain": "finance", "version_hash": packaged.version,
                                             "base_version": packaged.version, "overlays": [], "action": "packaged",
                                             "created_at": now, "created_by": "cli:old@host"})
            conn.execute(insert(KgImport), {
                "id": "legacy-import-1", "domain": "finance", "name": name, "format": "ofac-sdn", "file_name": "sdn.csv",
                "file_sha256": stamp.file_sha256, "as_of": "2026-01-01", "rows": overlay.rows,
                "entities": len(overlay.entities), "facts": len(overlay.facts), "supersedes": 0,
                "digest": hashlib.sha256(canonical).hexdigest(), "overlay": zlib.compress(canonical),
                "imported_at": now, "imported_by": "cli:old@host"})
            conn.execute(insert(KgVersion), {"domain": "finance", "version_hash": apply_overlays(packaged, [overlay]).version,
                                             "base_version": packaged.version, "overlays": ["legacy-import-1"],
                                             "action": "import", "import_id": "legacy-import-1", "created_at": now,
                                             "created_by": "cli:old@host"})
    finally:
        database.dispose()


def test_finding_5_unchained_rows_are_unanchored_until_an_admin_anchors_them(cli, sql, store_url: str,
                                                                             tmp_path: Path) -> None:
    """An upgraded store: verify-chain reports the old rows as unanchored; `kg anchor` anchors them (a chained
    event); from then on, editing them is caught like any other KG change."""
    _legacy_import(store_url)
    problem = _kg_problem(cli, store_url)
    assert problem["kind"] == "unanchored" and "kg anchor" in problem["detail"], problem
    status, out, err = _judge(cli, store_url, tmp_path)
    assert status == 1 and _contradicted(out), out + err           # still served (with a warning) until anchored
    status, out, err = cli(store_url, "kg", "anchor", "--dry-run")
    assert status == 0 and "would anchor 2 KG version(s) and 1 import(s)" in out, out + err
    assert _verify_chain(cli, store_url)[0] == 1
    status, out, err = cli(store_url, "kg", "anchor")
    assert status == 0 and "anchored 2 KG version(s) and 1 import(s)" in out, out + err
    assert _verify_chain(cli, store_url)[0] == 0
    with sql(store_url).connect() as conn:
        assert conn.execute(text("SELECT kind FROM trail_events")).scalars().all() == ["kg_anchored"]
    _drop_party_from_overlay(sql(store_url))
    assert _kg_problem(cli, store_url)["kind"] == "altered"
    _assert_not_served(cli, store_url, tmp_path)


def test_finding_5_anchor_refuses_a_legacy_overlay_that_does_not_match_its_digest(cli, sql, store_url: str) -> None:
    _legacy_import(store_url)
    with sql(store_url).begin() as conn:
        conn.execute(text("UPDATE kg_imports SET overlay = :o"), {"o": zlib.compress(b'{"domain":"finance"}')})
    status, out, err = cli(store_url, "kg", "anchor")
    assert status == 2 and "legacy-import-1" in err and len(err.strip().splitlines()) == 1, out + err
    assert _kg_problem(cli, store_url)["kind"] == "altered"


def test_finding_5_a_row_forged_after_chaining_began_is_not_unanchored(cli, sql, store_url: str,
                                                                       tmp_path: Path) -> None:
    """Once KG changes are chained, a version row without its event is a forgery, not a legacy row, and
    `kg anchor` does not bless it."""
    _genuine_store(cli, store_url, tmp_path)
    _rollback_by_sql(sql(store_url))
    assert _kg_problem(cli, store_url)["kind"] == "forged"
    status, out, err = cli(store_url, "kg", "anchor")
    assert status == 0 and "nothing to anchor" in out, out + err
    assert _kg_problem(cli, store_url)["kind"] == "forged"


# -- finding 15: control characters in KG names --------------------------------------------------------------

HOSTILE_NAMES = {"ESC and BEL (window title, clear screen)": "EVIL CORP\x1b]0;pwned\x07\x1b[2J",
                 "bidi override": "EVIL \u202eCORP",
                 "bidi isolate": "EVIL \u2066CORP\u2069",
                 "C1 control": "EVIL\x9b31mCORP"}


def _sdn_with_name(tmp_path: Path, name: str) -> Path:
    path = tmp_path / "sdn-hostile.csv"
    line = SDN.read_text().splitlines()[0]
    path.write_text(line + "\n" + line.replace("9001", "9010").replace("ZAVORANSKY, Teodor Ilyich", name) + "\n")
    return path


@pytest.mark.parametrize("case", list(HOSTILE_NAMES))
def test_finding_15_control_characters_are_refused_on_import(cli, store_url: str, tmp_path: Path, case: str) -> None:
    status, out, err = cli(store_url, "kg", "import", "--domain", "finance", "--format", "ofac-sdn",
                           str(_sdn_with_name(tmp_path, HOSTILE_NAMES[case])))
    assert status == 2, out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "line 2" in lines[0] and "SDN_Name" in lines[0] and "control character" in lines[0]
    assert not UNSAFE.search(err), err                             # the error names the character, escaped
    assert cli(store_url, "kg", "list", "--json")[1].strip() == "[]"   # nothing imported


def test_finding_15_control_characters_are_refused_in_any_format(cli, store_url: str, tmp_path: Path) -> None:
    triples = tmp_path / "triples.jsonl"
    triples.write_text(json.dumps({"subject": "org:evil", "subject_type": "organization",
                                   "subject_name": "Evil\u202e Corp", "relation": "listed_on",
                                   "object": "org:other", "object_type": "organization",
                                   "source": "x", "as_of": "2026-01-01"}) + "\n")
    status, out, err = cli(store_url, "kg", "import", "--domain", "finance", "--format", "triples", str(triples))
    assert status == 2 and "line 1" in err and "control character" in err and not UNSAFE.search(err), out + err
    status, out, err = cli(store_url, "kg", "import", "--domain", "finance", "--format", "ofac-sdn", str(SDN),
                           "--name", "sdn\x1b[2J")
    assert status == 2 and "control character" in err and not UNSAFE.search(err), out + err


def test_finding_15_kg_output_escapes_names_stored_before_the_check(cli, store_url: str, tmp_path: Path) -> None:
    """A legacy import (before names were checked) holding ESC, BEL and a bidi override, anchored by an admin:
    `kg diff` and `kg list` show the characters escaped, never raw."""
    hostile = HOSTILE_NAMES["ESC and BEL (window title, clear screen)"] + "\u202e"
    _legacy_import(store_url, name="sdn\x1b]0;x\x07", party_name=hostile)
    assert cli(store_url, "kg", "anchor")[0] == 0
    packaged = packaged_kg("finance").version
    status, out, err = cli(store_url, "kg", "diff", packaged[:8], "finance@2")
    assert status == 0, err
    assert "EVIL CORP" in out and not UNSAFE.search(out + err), repr(out)
    assert "\\x1b" in out and "\\u202e" in out
    for argv in (["kg", "list"], ["kg", "list", "--json"], ["kg", "stats", "--domain", "finance"]):
        status, out, err = cli(store_url, *argv)
        assert status == 0 and not UNSAFE.search(out + err), (argv, repr(out))
