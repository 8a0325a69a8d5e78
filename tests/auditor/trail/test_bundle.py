"""The regulator bundle and its standalone checker: every kind of alteration a bundle can suffer in transit is
caught (a cell, a JSONL value with the manifest redone, a dropped claim, a forged checkpoint), formulas are
neutralised without breaking the check, and the checker runs on the standard library alone."""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from auditor.jobs import scoring
from auditor.store.database import Database
from auditor.trail import ledgers, reviews
from auditor.trail.access_log import CliOperator
from auditor.trail.bundle import BundleError, csv_value, write_bundle
from auditor.trail.bundle_columns import RECORD_COLUMNS, TABLES
from auditor.trail.chain import canonical_time
from auditor.trail.queries import get_shown, record_views
from auditor.trail.schemas import RecordFilter
from auditor.trail.verify_bundle import COLUMNS as CHECKER_COLUMNS
from auditor.trail.verify_bundle import LEDGERS as CHECKER_LEDGERS
from auditor.trail.witness import FileWitness, WitnessPublisher
from tests.auditor.conftest import TEST_HMAC_KEY
from tests.auditor.scoring_doubles import MarkerEvaluator, append_output


@dataclass(frozen=True)
class TenantReader:
    tenant: str
    key_id: str = "acme-auditor"
    role: str = "auditor"

    @property
    def tenant_scope(self) -> str:
        return self.tenant


def _check(folder: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    # -I -S: isolated, without site-packages: with the HMAC key the checker needs nothing but the standard library.
    return subprocess.run([sys.executable, "-I", "-S", str(folder / "verify_bundle.py"), str(folder), *extra],
                          capture_output=True, text=True, timeout=120)


def _check_with_key(folder: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    key = folder.parent / "hmac.key"
    key.write_text(TEST_HMAC_KEY)
    return _check(folder, "--hmac-key-file", str(key), *extra)


@pytest.fixture
def bundle(database: Database, tmp_path: Path) -> Path:
    records = [append_output(database, "[false] Rates rose in 2022. Gold is a metal.", tenant="acme"),
               append_output(database, "=HYPERLINK(\"http://evil\") is what it said.", tenant="acme"),
               append_output(database, "Bonds are debt.", tenant="other"),
               append_output(database, "Legal text.", domain="legal", tenant="acme")]
    for record in records[:3]:
        scoring.score_record(database, MarkerEvaluator(), scoring.ScoreRequest(record))
    folder = tmp_path / "bundle"
    manifest = write_bundle(database, CliOperator(), RecordFilter(domain="finance"), folder)
    assert manifest["counts"]["records"] == 3 and manifest["counts"]["evaluations"] == 3
    return folder


def _redo_manifest(folder: Path) -> None:
    """What a careful forger does after editing a file: recompute its hash in the manifest."""
    manifest = json.loads((folder / "manifest.json").read_text())
    for name, info in manifest["files"].items():
        data = (folder / name).read_bytes()
        info.update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
    (folder / "manifest.json").write_text(json.dumps(manifest))


def test_an_intact_bundle_verifies_with_the_key(bundle: Path, tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_text(TEST_HMAC_KEY)
    result = _check(bundle, "--hmac-key-file", str(key))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "bundle verified" in result.stdout and "signatures verify under the key" in result.stdout
    wrong = tmp_path / "wrong"
    wrong.write_text("not-the-service-key-0123456789abcdef")
    forged = _check(bundle, "--hmac-key-file", str(wrong))
    assert forged.returncode == 1 and "signature does not verify" in forged.stdout


def test_one_altered_csv_cell_fails(bundle: Path) -> None:
    path = bundle / "records.csv"
    rows = list(csv.reader(path.open(encoding="utf-8", newline="")))
    column = rows[0].index("current_fer")
    rows[1][column] = "0.123" if rows[1][column] != "0.123" else "0.5"
    with path.open("w", encoding="utf-8", newline="") as handle:
        csv.writer(handle).writerows(rows)
    result = _check(bundle)
    assert result.returncode == 1
    assert "records.csv: SHA-256 or size differs" in result.stdout
    assert "records.csv row 1 column current_fer" in result.stdout
    _redo_manifest(bundle)   # even with the manifest redone, the cell no longer matches its chained source
    again = _check(bundle)
    assert again.returncode == 1 and "records.csv row 1 column current_fer" in again.stdout


def test_an_altered_jsonl_value_fails_its_digest_even_with_the_manifest_redone(bundle: Path) -> None:
    path = bundle / "evaluations.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[0]["fer"] = 0.0
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    _redo_manifest(bundle)
    result = _check(bundle)
    assert result.returncode == 1 and "do not hash to its content digest" in result.stdout


def test_a_dropped_claim_row_fails(bundle: Path) -> None:
    for name in ("claims.jsonl", "claims.csv"):
        path = bundle / name
        lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
        path.write_text("".join(lines[:-1]), encoding="utf-8")
    _redo_manifest(bundle)
    result = _check(bundle)
    assert result.returncode == 1 and "claims.jsonl differs from the claims its verdicts hold" in result.stdout


def _rewrite_record(bundle: Path, *, relink: bool) -> None:
    """Edit the first record's tenant and recompute its digest; with `relink`, also every link after it and
    the checkpoint or head that ends its window, as a forger without the key would."""
    path = bundle / "records.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    row = rows[0]
    row["tenant"] = "someone-else"
    fields = CHECKER_LEDGERS["records"]["hashed_fields"]
    canonical = json.dumps({f: row.get(f) for f in fields}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    row["content_digest"] = hashlib.sha256(canonical.encode()).hexdigest()
    if relink:
        links = [json.loads(line) for line in (bundle / "chain" / "links.jsonl").read_text().splitlines()]
        by_seq = {link["seq"]: link for link in links if link["ledger"] == "records"}
        by_seq[row["seq"]]["content_digest"] = row["content_digest"]
        for seq in sorted(s for s in by_seq if s >= row["seq"]):
            link = by_seq[seq]
            if seq - 1 in by_seq:
                link["prev_hash"] = by_seq[seq - 1]["record_hash"]
            link["record_hash"] = hashlib.sha256(f"{seq}:{link['prev_hash']}:{link['content_digest']}".encode()).hexdigest()
        for other in rows:
            if other["seq"] in by_seq:
                other.update(prev_hash=by_seq[other["seq"]]["prev_hash"], record_hash=by_seq[other["seq"]]["record_hash"])
        (bundle / "chain" / "links.jsonl").write_text("".join(json.dumps(link) + "\n" for link in links))
        anchors = [json.loads(line) for line in (bundle / "chain" / "checkpoints.jsonl").read_text().splitlines()]
        for anchor in anchors:
            if anchor["ledger"] == "records" and anchor["seq"] in by_seq:
                anchor["record_hash"] = by_seq[anchor["seq"]]["record_hash"]
        (bundle / "chain" / "checkpoints.jsonl").write_text("".join(json.dumps(a) + "\n" for a in anchors))
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    _redo_manifest(bundle)


def test_a_rewritten_record_fails_at_its_chain_link(bundle: Path) -> None:
    _rewrite_record(bundle, relink=False)
    result = _check(bundle)
    assert result.returncode == 1 and "the row's hashes differ from its chain link" in result.stdout


def test_a_rewritten_chain_is_caught_by_the_signatures_not_by_consistency(bundle: Path, tmp_path: Path) -> None:
    # Rewriting the whole window (links and the checkpoint hash) keeps the bundle self-consistent, apart from
    # the CSV cell: what ties the checkpoints to the service is the HMAC key (or the witness), as documented.
    _rewrite_record(bundle, relink=True)
    rows = [json.loads(line) for line in (bundle / "records.jsonl").read_text().splitlines()]
    with (bundle / "records.csv").open("w", encoding="utf-8", newline="") as handle:   # the flat file redone too
        writer = csv.writer(handle)
        writer.writerow([column for column, *_ in RECORD_COLUMNS])
        writer.writerows([csv_value(row, source) for _, source, *_ in RECORD_COLUMNS] for row in rows)
    _redo_manifest(bundle)
    consistent = _check(bundle)   # consistent, but without a key nothing says it is the service's
    assert consistent.returncode == 3 and "NOT authenticated" in consistent.stdout, consistent.stdout
    key = tmp_path / "key"
    key.write_text(TEST_HMAC_KEY)
    result = _check(bundle, "--hmac-key-file", str(key))
    assert result.returncode == 1 and "the signature does not verify" in result.stdout


def test_formulas_are_neutralised_and_still_verify(bundle: Path) -> None:
    cells = [cell for row in csv.reader((bundle / "claims.csv").open(encoding="utf-8", newline="")) for cell in row]
    assert "'=HYPERLINK(\"http://evil\") is what it said." in cells
    assert not any(cell.startswith(("=", "@")) for cell in cells)
    assert _check_with_key(bundle).returncode == 0


def test_the_witness_vouches_for_the_checkpoints(database: Database, tmp_path: Path) -> None:
    for i in range(7):
        append_output(database, f"Statement {i}.")
    witness_path = tmp_path / "witness.jsonl"
    WitnessPublisher(database, FileWitness(witness_path)).publish_once()
    folder = tmp_path / "b"
    write_bundle(database, CliOperator(), RecordFilter(), folder)
    result = _check_with_key(folder, "--witness", str(witness_path))
    assert result.returncode == 0 and "match the witness" in result.stdout
    lines = [json.loads(line) for line in witness_path.read_text().splitlines()]
    for line in lines:
        line["record_hash"] = "f" * 64
    forged = tmp_path / "forged-witness.jsonl"
    forged.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert "differs from what the witness saw" in _check(folder, "--witness", str(forged)).stdout


def test_a_tenants_auditor_bundles_only_its_own_records(database: Database, tmp_path: Path) -> None:
    append_output(database, "Acme statement.", tenant="acme")
    append_output(database, "Other statement.", tenant="other")
    manifest = write_bundle(database, TenantReader("acme"), RecordFilter(), tmp_path / "acme")
    assert manifest["counts"]["records"] == 1 and manifest["created_by"]["tenant"] == "acme"
    assert _check_with_key(tmp_path / "acme").returncode == 0
    with pytest.raises(BundleError):
        write_bundle(database, CliOperator(), RecordFilter(), tmp_path / "acme")   # a folder that is not empty


def test_the_checkers_field_lists_are_the_ledgers() -> None:
    for ledger in (ledgers.RECORDS, ledgers.EVALUATIONS, ledgers.EVENTS):
        checker = CHECKER_LEDGERS[ledger.name]
        assert checker["number"] == ledger.number
        assert checker["hashed_fields"] == list(ledger.hashed_fields)
        assert checker["sensitive_fields"] == dict(ledger.sensitive_fields)
        assert checker["optional_fields"] == list(ledger.optional_fields)


def test_the_checkers_columns_are_the_column_dictionary() -> None:
    # The checker fixes each column's source itself; columns.csv (written from bundle_columns) must say the same.
    assert set(CHECKER_COLUMNS) == set(TABLES)
    for table, columns in TABLES.items():
        assert list(CHECKER_COLUMNS[table]) == [(column, source) for column, source, *_ in columns]


def test_the_bundles_verdicts_are_the_services(database: Database, bundle: Path, tmp_path: Path) -> None:
    # The bundle derives each record's current verdicts with the checker's rules; on genuine data they are
    # what the service's own view says (reviews included).
    claims = [json.loads(line) for line in (bundle / "claims.jsonl").read_text().splitlines()]
    supported = next(c for c in claims if c["claim"]["verdict"] == "supported")
    first = supported["record_id"]
    reviews.submit_review(database, CliOperator(), first, reviews.ReviewIn(claims=[
        reviews.ClaimReview(claim_index=supported["claim_index"], decision="false_negative")]))
    folder = tmp_path / "reviewed"
    write_bundle(database, CliOperator(), RecordFilter(domain="finance"), folder)
    rows = {row["id"]: row for row in (json.loads(line) for line in (folder / "records.jsonl").read_text().splitlines())}
    assert rows[first]["current"]["reviewed"] is True and rows[first]["current"]["disputed"] == 1
    with database.session() as session:
        shown = [get_shown(session, record_id, tenant_scope=None) for record_id in rows]
        views = record_views(session.connection(), shown)
    for view in views:
        service = view.current.model_dump(mode="json", exclude={"claims", "kg_stale", "kg_stale_reason", "evaluated_at"})
        assert {k: v for k, v in rows[view.id]["current"].items() if k != "evaluated_at"} == service
        assert rows[view.id]["occurred_at"] == canonical_time(view.occurred_at)


def test_evaluations_with_optional_chained_fields_verify(database: Database, tmp_path: Path) -> None:
    class DetectingEvaluator(MarkerEvaluator):
        def evaluate(self, **kwargs: Any) -> scoring.Scored:
            return dataclasses.replace(super().evaluate(**kwargs), details={"domains": ["finance"], "detected": True})

    record = append_output(database, "[false] Rates rose. Gold is a metal.")
    scoring.score_record(database, DetectingEvaluator(), scoring.ScoreRequest(record))
    folder = tmp_path / "b"
    write_bundle(database, CliOperator(), RecordFilter(), folder)
    [evaluation] = [json.loads(line) for line in (folder / "evaluations.jsonl").read_text().splitlines()]
    assert evaluation["details"] == {"domains": ["finance"], "detected": True}
    result = _check_with_key(folder)
    assert result.returncode == 0, result.stdout
