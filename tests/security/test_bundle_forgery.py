"""Issue 43, findings 1-4: a regulator bundle that a forger edits, trims or re-labels, and one that is simply big.

The regulator trusts nothing from us but two values published out of band: the service's Ed25519 public key
and the SHA-256 of `verify_bundle.py`. So every check here runs the project's own copy of the checker (the one
whose hash is published), never the copy inside the bundle, as a plain subprocess. The forger knows every
algorithm (the code is open) and rewrites whatever a file-level check would catch: file hashes, counts, CSVs;
what the forger lacks is the HMAC key and the Ed25519 private key.

The bundle is made through the CLI (`auditor audits export --bundle`) on SQLite and PostgreSQL, from records,
evaluations and reviews written the way the service writes them."""

from __future__ import annotations

import csv
import hashlib
import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from sqlalchemy import text

from auditor.jobs import scoring
from auditor.jobs.scoring import Scored
from auditor.store.database import Database
from auditor.trail import reviews
from auditor.trail.access_log import CliOperator
from tests.auditor.scoring_doubles import append_output
from tests.security.conftest import HMAC_KEY, settings_for

pytestmark = pytest.mark.timeout(240)

# The regulator's own copy of the checker: the file whose SHA-256 the service publishes.
VERIFIER = Path(__file__).resolve().parents[2] / "auditor" / "trail" / "verify_bundle.py"
TABLES = ("records", "claims", "evidence", "gate_decisions", "evaluations", "reviews")
SANCTIONS_GATE = {"rule_id": "fin.sanctions", "severity": "critical", "on_fail": "block"}


class GateEvaluator:
    """Judges "[false]" sentences contradicted, annotated (as the rules evaluator does) with the rule they
    break: severity critical, the gate asked to block."""

    version = "gate-marker/1"

    def evaluate(self, *, text: str, domain: str | None, prompt: str | None) -> Scored:
        claims = []
        for sentence in (s.strip() for s in text.split(".")):
            if not sentence:
                continue
            false = "[false]" in sentence
            claim: dict[str, Any] = {
                "text": sentence.replace("[false]", "").strip(), "kind": "statement",
                "verdict": "contradicted" if false else "supported", "confidence": 0.9 if false else 0.8,
                "evidence": [{"kind": "rule", "description": "listed" if false else "fine", "source": "test list"}],
                "rule_ids": ["fin.sanctions"]}
            if false:
                claim["gate"] = dict(SANCTIONS_GATE)
            claims.append(claim)
        contradicted = sum(1 for c in claims if c["verdict"] == "contradicted")
        fer = contradicted / len(claims) if claims else None
        return Scored(claims=claims, fer=fer, citation_confidence=1.0, joint_score=None if fer is None else 1 - fer,
                      gate_action="block" if contradicted else "allow", kg_version="kg-test",
                      rule_pack_hash="pack-gate-1")


@dataclass
class Regulator:
    """What the regulator holds: the bundle, and the keys that reached them apart from it."""

    bundle: Path
    public_key_hex: str
    hmac_key_file: Path
    blocked_id: str          # a blocked (inline: critical sanctions hit), reviewed record
    evaluated_id: str        # a record whose current verdicts are an evaluation that blocks, reviewed
    export_output: str

    def check(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-I", str(VERIFIER), str(self.bundle), *args],
                              capture_output=True, text=True, timeout=120)

    def with_public_key(self) -> subprocess.CompletedProcess[str]:
        return self.check("--public-key", self.public_key_hex)

    def with_hmac_key(self) -> subprocess.CompletedProcess[str]:
        return self.check("--hmac-key-file", str(self.hmac_key_file))


def _key_file(folder: Path) -> tuple[Path, str]:
    key = Ed25519PrivateKey.generate()
    path = folder / "signing-key.pem"
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    public = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return path, public.hex()


def _review(database: Database, record_id: str) -> None:
    reviews.submit_review(database, CliOperator(), record_id,
                          reviews.ReviewIn(claims=[reviews.ClaimReview(claim_index=0, decision="confirm")]))


def _export(store_url: str, cli: Callable[..., tuple[int, str, str]], tmp_path: Path, *,
            big_output: str | None = None) -> Regulator:
    key_path, public_hex = _key_file(tmp_path)
    settings = settings_for(store_url, signing_key_file=str(key_path))
    database = Database.from_settings(settings)
    database.upgrade(hmac_key=HMAC_KEY.encode())
    try:
        blocked = append_output(
            database, "Acme Trading is cleared to receive the transfer.", tenant="acme", fer=1.0,
            claims=[{"text": "Acme Trading is cleared", "kind": "sanctions", "verdict": "contradicted",
                     "confidence": 0.95, "gate": dict(SANCTIONS_GATE), "rule_ids": ["fin.sanctions"],
                     "evidence": [{"kind": "list_snapshot", "description": "on the SDN list", "source": "OFAC"}]}],
            gate_decisions=[{"stage": "output", "rule_id": "fin.sanctions", "action": "block",
                             "reason": "sanctioned party", "detail": {"severity": "critical"}}])
        evaluated = append_output(database, "[false] Acme Trading is cleared. Gold is a metal.", tenant="acme")
        fine = append_output(database, "Bonds are debt. Stocks are equity.", tenant="beta")
        others = [append_output(database, f"Statement {i}.", tenant="acme") for i in range(4)]
        if big_output is not None:
            others.append(append_output(database, big_output, tenant="acme"))
        for record_id in (evaluated, fine, *others):
            scoring.score_record(database, GateEvaluator(), scoring.ScoreRequest(record_id))
        _review(database, blocked)
        _review(database, evaluated)
        append_output(database, "Not in the bundle.", domain="legal")   # a later record: the chain goes on
    finally:
        database.dispose()
    folder = tmp_path / "bundle"
    status, out, err = cli(store_url, "audits", "export", "--domain", "finance", "--bundle", str(folder),
                           AUDITOR_SIGNING_KEY_FILE=str(key_path))
    assert status == 0, err
    hmac_file = tmp_path / "hmac.key"
    hmac_file.write_text(HMAC_KEY)
    return Regulator(folder, public_hex, hmac_file, blocked, evaluated, out + err)


@pytest.fixture
def regulator(store_url: str, cli: Callable[..., tuple[int, str, str]], tmp_path: Path) -> Regulator:
    return _export(store_url, cli, tmp_path)


# -- what a forger does --------------------------------------------------------------------------------------


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n" for row in rows),
                    encoding="utf-8")


def _read_csv(path: Path) -> list[list[str]]:
    csv.field_size_limit(1 << 30)
    with path.open(encoding="utf-8", newline="") as handle:
        return list(csv.reader(handle))


def _write_csv(path: Path, rows: list[list[str]]) -> None:
    with path.open("w", encoding="utf-8", newline="") as handle:
        csv.writer(handle).writerows(rows)


def _redo_manifest(folder: Path, counts: dict[str, int] | None = None) -> None:
    """Recompute every file's hash and size (and the counts) in the manifest, and drop from it whatever lists
    the exported entries the forger removed: all a forger without the keys can do."""
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    for name, info in manifest["files"].items():
        data = (folder / name).read_bytes()
        info.update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data), lines=data.count(b"\n"))
    if counts:
        manifest["counts"].update(counts)
        entries = manifest.get("entries") or {}
        for table in entries:
            present = [[row["seq"], row["id"]] for row in _read_jsonl(folder / f"{table}.jsonl")]
            entries[table] = present
    (folder / "manifest.json").write_text(json.dumps(manifest, ensure_ascii=False, indent=2, sort_keys=True),
                                          encoding="utf-8")


def _assert_rejected(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode == 1, result.stdout + result.stderr
    assert "bundle NOT verified" in result.stdout and "Traceback" not in result.stderr
    for needle in needles:
        assert needle in result.stdout, result.stdout


def test_a_genuine_bundle_verifies_with_the_public_key_the_hmac_key_or_both(regulator: Regulator) -> None:
    for result in (regulator.with_public_key(), regulator.with_hmac_key(),
                   regulator.check("--public-key", regulator.public_key_hex,
                                   "--hmac-key-file", str(regulator.hmac_key_file))):
        assert result.returncode == 0, result.stdout + result.stderr
        assert "bundle verified" in result.stdout
    assert "Ed25519 signature verifies" in regulator.with_public_key().stdout
    # Without a key nothing ties the bundle to the service: internally consistent, not verified.
    bare = regulator.check()
    assert bare.returncode == 3 and "NOT authenticated" in bare.stdout, bare.stdout
    # Someone else's key: refused.
    other = Ed25519PrivateKey.generate().public_key().public_bytes(serialization.Encoding.Raw,
                                                                   serialization.PublicFormat.Raw)
    _assert_rejected(regulator.check("--public-key", other.hex()), "Ed25519 signature does not verify")


def test_one_altered_byte_anywhere_fails(regulator: Regulator) -> None:
    files = sorted(p for p in regulator.bundle.rglob("*") if p.is_file())
    assert {p.name for p in files} >= {"manifest.json", "manifest.sig", "records.csv", "links.jsonl"}
    for path in files:
        original = path.read_bytes()
        position = len(original) // 2
        flipped = bytes([original[position] ^ 0x01])
        path.write_bytes(original[:position] + flipped + original[position + 1:])
        try:
            result = regulator.with_public_key()
            assert result.returncode == 1, f"{path.name}: {result.stdout}{result.stderr}"
        finally:
            path.write_bytes(original)
    assert regulator.with_public_key().returncode == 0


# -- finding 1: derived fields ---------------------------------------------------------------------------------


def _forge_verdicts(bundle: Path, record_id: str) -> None:
    """block -> allow, critical -> empty, in records.jsonl and records.csv; the file hashes redone."""
    rows = _read_jsonl(bundle / "records.jsonl")
    [row] = [r for r in rows if r["id"] == record_id]
    assert row["current"]["verdict_action"] == "block" and row["current"]["max_severity"] == "critical"
    row["current"].update(verdict_action="allow", max_severity=None)
    _write_jsonl(bundle / "records.jsonl", rows)
    table = _read_csv(bundle / "records.csv")
    header = table[0]
    for cells in table[1:]:
        if cells[header.index("id")] == record_id:
            cells[header.index("current_verdict_action")] = "allow"
            cells[header.index("current_max_severity")] = ""
    _write_csv(bundle / "records.csv", table)
    _redo_manifest(bundle)


@pytest.mark.parametrize("which", ["inline", "evaluation"])
def test_finding_1_forged_verdict_action_and_severity_fail(regulator: Regulator, which: str) -> None:
    target = regulator.blocked_id if which == "inline" else regulator.evaluated_id
    _forge_verdicts(regulator.bundle, target)
    for result in (regulator.with_hmac_key(), regulator.with_public_key()):
        _assert_rejected(result, f"record {target}: current.verdict_action")
    # Even with no key at all, the derived fields no longer follow from the chained verdicts.
    bare = regulator.check()
    _assert_rejected(bare, f"record {target}: current.verdict_action", "current.max_severity")


def test_finding_1_forged_reviewed_and_disputed_fail(regulator: Regulator) -> None:
    rows = _read_jsonl(regulator.bundle / "records.jsonl")
    [row] = [r for r in rows if r["id"] == regulator.blocked_id]
    assert row["current"]["reviewed"] is True and row["current"]["source"] == "inline"
    row["current"].update(reviewed=False, disputed=1, source="none")
    _write_jsonl(regulator.bundle / "records.jsonl", rows)
    table = _read_csv(regulator.bundle / "records.csv")
    header = table[0]
    for cells in table[1:]:
        if cells[header.index("id")] == regulator.blocked_id:
            cells[header.index("current_reviewed")] = "false"
            cells[header.index("current_disputed")] = "1"
            cells[header.index("current_source")] = "none"
    _write_csv(regulator.bundle / "records.csv", table)
    _redo_manifest(regulator.bundle)
    _assert_rejected(regulator.check(), "current.reviewed", "current.disputed", "current.source")
    _assert_rejected(regulator.with_public_key(), "current.reviewed")


# -- finding 2: a record deleted with all its rows ------------------------------------------------------------


def test_finding_2_a_deleted_blocked_reviewed_record_fails(regulator: Regulator) -> None:
    bundle, target = regulator.bundle, regulator.blocked_id
    counts = {}
    for table in TABLES:
        rows = _read_jsonl(bundle / f"{table}.jsonl")
        key = "id" if table == "records" else "record_id"
        kept = [row for row in rows if row.get(key) != target]
        assert table not in ("records", "reviews") or len(kept) < len(rows)
        _write_jsonl(bundle / f"{table}.jsonl", kept)
        grid = _read_csv(bundle / f"{table}.csv")
        column = grid[0].index("id" if table == "records" else "record_id")
        _write_csv(bundle / f"{table}.csv", [grid[0], *[c for c in grid[1:] if c[column] != target]])
        counts[table] = len(kept)
    _redo_manifest(bundle, counts)
    for result in (regulator.with_hmac_key(), regulator.with_public_key()):
        _assert_rejected(result, "signature")
    # The signed manifest names every exported record: put the original back and only the rows are gone.
    # (the forger cannot redo it; here the genuine manifest and its signature stay, the rows do not)


def test_finding_2_rows_missing_under_the_genuine_signed_manifest_fail(regulator: Regulator) -> None:
    bundle, target = regulator.bundle, regulator.blocked_id
    for table in TABLES:
        key = "id" if table == "records" else "record_id"
        _write_jsonl(bundle / f"{table}.jsonl", [r for r in _read_jsonl(bundle / f"{table}.jsonl") if r.get(key) != target])
    result = regulator.with_public_key()
    _assert_rejected(result, f"record {target}", "listed in the signed manifest")


def test_finding_2_the_manifest_lists_every_record_and_the_chain_positions(regulator: Regulator) -> None:
    manifest = json.loads((regulator.bundle / "manifest.json").read_text(encoding="utf-8"))
    records = _read_jsonl(regulator.bundle / "records.jsonl")
    assert manifest["entries"]["records"] == [[r["seq"], r["id"]] for r in records]
    assert [r["id"] for r in _read_jsonl(regulator.bundle / "reviews.jsonl")] == \
        [entry[1] for entry in manifest["entries"]["reviews"]]
    windows = manifest["chain"]["records"]["windows"]
    covered = {seq for start, end in windows for seq in range(start + 1, end + 1)}
    assert {r["seq"] for r in records} <= covered
    # A gap inside a window (a link taken out) fails, even though the remaining runs are anchored.
    links_path = regulator.bundle / "chain" / "links.jsonl"
    links = _read_jsonl(links_path)
    inner = next(link for link in links if link["ledger"] == "records"
                 and any(start < link["seq"] < end for start, end in windows))
    _write_jsonl(links_path, [link for link in links if link is not inner])
    _assert_rejected(regulator.check(), f"seq {inner['seq']}")


# -- finding 3: the column-to-source mapping, and the checker itself ----------------------------------------


def test_finding_3_swapped_column_sources_fail(regulator: Regulator) -> None:
    bundle = regulator.bundle
    columns = _read_csv(bundle / "columns.csv")
    header = columns[0]
    rows = {row[header.index("column")]: row for row in columns[1:] if row[0] == "records.csv"}
    supported, contradicted = rows["current_supported"], rows["current_contradicted"]
    source = header.index("source")
    supported[source], contradicted[source] = contradicted[source], supported[source]
    _write_csv(bundle / "columns.csv", columns)
    table = _read_csv(bundle / "records.csv")
    a, b = table[0].index("current_supported"), table[0].index("current_contradicted")
    swapped = 0
    for cells in table[1:]:
        swapped += cells[a] != cells[b]
        cells[a], cells[b] = cells[b], cells[a]
    assert swapped   # the swap shows different numbers to whoever reads the CSV
    _write_csv(bundle / "records.csv", table)
    _redo_manifest(bundle)
    for result in (regulator.check(), regulator.with_hmac_key(), regulator.with_public_key()):
        _assert_rejected(result, "columns.csv", "records.csv row")


def test_finding_3_the_checker_and_public_key_reach_the_regulator_apart_from_the_bundle(
        regulator: Regulator, store_url: str, cli: Callable[..., tuple[int, str, str]], tmp_path: Path) -> None:
    verifier_sha = hashlib.sha256(VERIFIER.read_bytes()).hexdigest()
    assert regulator.public_key_hex in regulator.export_output and verifier_sha in regulator.export_output
    status, out, err = cli(store_url, "audits", "bundle-keys",
                           AUDITOR_SIGNING_KEY_FILE=str(tmp_path / "signing-key.pem"))
    assert status == 0, err
    assert regulator.public_key_hex in out and verifier_sha in out
    # The checker takes the public key as a file too.
    key_file = tmp_path / "public.key"
    key_file.write_text(regulator.public_key_hex + "\n")
    assert regulator.check("--public-key", str(key_file)).returncode == 0
    # A forger replaces the bundle's own checker with one that always agrees: its hash is not the published
    # one, and the regulator's copy rejects the bundle.
    fake = "print('bundle verified')\n"
    (regulator.bundle / "verify_bundle.py").write_text(fake)
    _redo_manifest(regulator.bundle)
    assert hashlib.sha256(fake.encode()).hexdigest() != verifier_sha
    _assert_rejected(regulator.with_public_key(), "verify_bundle.py")


def test_finding_3_public_key_values_that_are_not_keys_are_a_usage_error(regulator: Regulator) -> None:
    result = regulator.check("--public-key", "not-a-key")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert len((result.stdout + result.stderr).strip().splitlines()) == 1
    # Where `cryptography` is not installed (-S: no site-packages), one line says what to install.
    bare = subprocess.run([sys.executable, "-I", "-S", str(VERIFIER), str(regulator.bundle),
                           "--public-key", regulator.public_key_hex], capture_output=True, text=True, timeout=60)
    assert bare.returncode == 2 and bare.stderr.strip() == \
        "verify_bundle.py: --public-key needs the Python package 'cryptography' (pip install cryptography)"


# -- finding 4: big cells -------------------------------------------------------------------------------------


def test_finding_4_a_bundle_with_a_160k_cell_verifies(store_url: str, cli: Callable[..., tuple[int, str, str]],
                                                      tmp_path: Path) -> None:
    big = "Gold is a metal " + "x" * 160_000 + "."
    regulator = _export(store_url, cli, tmp_path, big_output=big)
    assert any(len(cell) > 131_072 for row in _read_csv(regulator.bundle / "records.csv") for cell in row)
    for result in (regulator.with_hmac_key(), regulator.with_public_key()):
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        assert "bundle verified" in result.stdout


# -- the signing key: configured, made in development and test, required in production ------------------------


def test_a_signing_key_is_made_once_in_the_data_directory_outside_production(
        sqlite_store: str, cli: Callable[..., tuple[int, str, str]], tmp_path: Path) -> None:
    status, first, err = cli(sqlite_store, "audits", "bundle-keys", "--json")
    assert status == 0, err
    key_file = tmp_path / "ed25519-signing-key.pem"   # beside the SQLite database
    assert key_file.is_file() and key_file.stat().st_mode & 0o077 == 0
    status, second, _ = cli(sqlite_store, "audits", "bundle-keys", "--json")
    assert json.loads(first) == json.loads(second)   # every process on the store signs with the same key
    assert json.loads(first)["verify_bundle_sha256"] == hashlib.sha256(VERIFIER.read_bytes()).hexdigest()


def test_production_signs_only_with_a_configured_key(sqlite_store: str, cli: Callable[..., tuple[int, str, str]],
                                                     app_on: Callable[..., Any], tmp_path: Path) -> None:
    production = {"AUDITOR_ENVIRONMENT": "production"}
    status, out, err = cli(sqlite_store, "audits", "export", "--bundle", str(tmp_path / "b"), **production)
    assert status == 2 and "AUDITOR_SIGNING_KEY_FILE" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "b").exists() or not any((tmp_path / "b").iterdir())
    status, _, err = cli(sqlite_store, "audits", "bundle-keys", **production)
    assert status == 2 and "AUDITOR_SIGNING_KEY_FILE" in err
    # Through the API: a 503 in the OpenAI error shape, never a 500.
    status, out, _ = cli(sqlite_store, "keys", "create", "--tenant", "acme", "--role", "auditor")
    api_key = next(line.split(": ", 1)[1] for line in out.splitlines() if line.startswith("key: "))
    client = app_on(sqlite_store, environment="production")
    response = client.get("/v1/audits/bundle", headers={"Authorization": f"Bearer {api_key}"})
    assert response.status_code == 503, response.text
    assert response.json()["error"]["code"] == "bundle_not_signed"
    # `auditor keys gen-signing-key` writes one (never over an existing file); production then signs with it.
    key_file = tmp_path / "keys" / "signing.pem"
    status, out, err = cli(sqlite_store, "keys", "gen-signing-key", str(key_file))
    assert status == 0, err
    public = out.split("ed25519 public key: ", 1)[1].split()[0]
    assert cli(sqlite_store, "keys", "gen-signing-key", str(key_file))[0] == 2
    production["AUDITOR_SIGNING_KEY_FILE"] = str(key_file)
    status, out, err = cli(sqlite_store, "audits", "export", "--bundle", str(tmp_path / "c"), **production)
    assert status == 0 and public in out, err
    result = subprocess.run([sys.executable, "-I", str(VERIFIER), str(tmp_path / "c"), "--public-key", public],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout
    # A key file that is not an Ed25519 key is one line too.
    bad = tmp_path / "bad.pem"
    bad.write_text("not a key")
    status, _, err = cli(sqlite_store, "audits", "bundle-keys", AUDITOR_SIGNING_KEY_FILE=str(bad))
    assert status == 2 and "not an unencrypted PEM private key" in err and "Traceback" not in err


def test_no_bundle_is_signed_over_a_checkpoint_the_hmac_key_does_not_vouch_for(
        store_url: str, cli: Callable[..., tuple[int, str, str]], sql: Callable[[str], Any], tmp_path: Path) -> None:
    _export(store_url, cli, tmp_path)   # a store with records, checkpoints and reviews
    with sql(store_url).begin() as conn:
        conn.execute(text("UPDATE checkpoints SET signature = :forged"), {"forged": "0" * 64})
    status, _, err = cli(store_url, "audits", "export", "--domain", "finance", "--bundle", str(tmp_path / "again"),
                         AUDITOR_SIGNING_KEY_FILE=str(tmp_path / "signing-key.pem"))
    assert status == 2 and "does not verify under the HMAC key" in err and len(err.strip().splitlines()) == 1
    assert not any((tmp_path / "again").iterdir())   # nothing half-written is left to be mistaken for a bundle
