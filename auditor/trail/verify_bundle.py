#!/usr/bin/env python3
"""Check an audit-trail bundle offline, with Python's standard library only.

    python3 verify_bundle.py BUNDLE_DIR [--hmac-key-file FILE] [--witness WITNESS.jsonl] [--quiet]

Exit status 0 when every check passes, 1 when any fails (each failure is printed), 2 on bad usage.

What is checked:
1. files: each file has the size and SHA-256 the manifest lists; none is missing;
2. rows: every record, evaluation and review row hashes (its chained fields, canonical JSON) to the content
   digest its ledger holds, and every stored text hashes to the digest that stands for it;
3. chain: every entry's link recomputes (sha256 of "seq:prev_hash:content_digest"), consecutive links
   join, and each run of links starts and ends at a listed signed checkpoint (or the signed head);
4. cells: every CSV cell equals the JSONL value its column's source names (columns.csv), rendered and
   neutralised as the exporter does; claims, evidence and gate decisions are exactly the lists the chained
   rows hold; each record's current verdicts agree with the evaluation (or inline verdicts) they name;
5. signatures (with --hmac-key-file): each checkpoint and head signature verifies under the key;
6. witness (with --witness): checkpoints and heads the witness also saw carry the same hashes.

Without 5 or 6 the bundle is shown to be internally consistent; that its checkpoints are the service's own
is what the key, or an independent copy of the witness, adds.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import hmac
import json
import sys
from collections import defaultdict
from pathlib import Path

FORMAT = "auditor-bundle/1"
GENESIS = "0" * 64
# The digests' field lists (the service's `auditor.trail.ledgers`); the manifest repeats them and must agree.
LEDGERS = {
    "records": {"number": 1, "hashed_fields": [
        "id", "kind", "created_at", "tenant", "key_id", "request_id", "endpoint", "intent", "domain",
        "model_id", "checkpoint_hash", "sampling_params", "kg_version", "rule_pack_hash", "content_mode",
        "prompt_sha256", "output_sha256", "delivered_sha256", "claims_sha256", "prompt_tokens",
        "completion_tokens", "timings", "logprob_summary", "kg_events", "gate_decisions", "gate_action",
        "rule_ids", "n_supported", "n_contradicted", "n_unverifiable", "fer", "finish_reason", "status",
        "error", "details"],
        "sensitive_fields": {"prompt": "prompt_sha256", "output": "output_sha256",
                             "delivered_output": "delivered_sha256", "claims": "claims_sha256"}},
    "evaluations": {"number": 2, "hashed_fields": [
        "id", "record_id", "job_id", "evaluator_version", "kg_version", "rule_pack_hash", "status",
        "failure_reason", "claims_sha256", "fer", "citation_confidence", "joint_score", "created_at"],
        "sensitive_fields": {"claims": "claims_sha256"}},
    "events": {"number": 4, "hashed_fields": [
        "id", "at", "kind", "key_id", "tenant", "role", "record_id", "subject", "payload", "note_sha256"],
        "sensitive_fields": {"note": "note_sha256"}},
}
TABLE_LEDGER = {"records": "records", "evaluations": "evaluations", "reviews": "events"}
# OWASP's CSV-injection guidance: cells a spreadsheet would read as a formula or a control start with these.
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


class Report:
    def __init__(self, quiet: bool) -> None:
        self.failures: list[str] = []
        self.notes: list[str] = []
        self.quiet = quiet

    def fail(self, message: str) -> None:
        self.failures.append(message)

    def ok(self, message: str) -> None:
        if not self.quiet:
            print(f"ok: {message}")

    def note(self, message: str) -> None:
        self.notes.append(message)
        if not self.quiet:
            print(f"note: {message}")


# -- the rules the service hashes and renders by ------------------------------------------------------------


def canonical_json(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256_text(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def text_digest(value):
    if value is None:
        return None
    return sha256_text(value if isinstance(value, str) else canonical_json(value))


def render(value):
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return str(value)


def neutralise(text):
    if text.startswith(_FORMULA_STARTS):
        try:
            float(text)
        except ValueError:
            return "'" + text
    return text


def lookup(row, path):
    value = row
    for part in path.split("."):
        if isinstance(value, dict):
            value = value.get(part)
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return None
    return value


def sign(key, message):
    return hmac.new(key, message.encode(), hashlib.sha256).hexdigest()


# -- reading -----------------------------------------------------------------------------------------------


def read_jsonl(path, report):
    rows = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            try:
                rows.append(json.loads(line))
            except ValueError:
                report.fail(f"{path.name} line {number}: not valid JSON")
    return rows


def check_files(folder, manifest, report):
    listed = manifest.get("files", {})
    for name, info in sorted(listed.items()):
        path = folder / name
        if not path.is_file():
            report.fail(f"{name}: missing (the manifest lists it)")
            continue
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest != info.get("sha256") or path.stat().st_size != info.get("bytes"):
            report.fail(f"{name}: SHA-256 or size differs from the manifest (the file was changed)")
    extra = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                   if p.is_file() and p.name != "manifest.json" and p.relative_to(folder).as_posix() not in listed)
    for name in extra:
        report.note(f"{name}: not part of the bundle as issued (not in the manifest); ignored")
    report.ok(f"{len(listed)} files match the manifest's SHA-256 and sizes")


# -- rows and the chain ------------------------------------------------------------------------------------


def check_rows(tables, report):
    """Each chained row's digest and stored texts; returns {ledger: {seq: (prev, digest, hash)}} of the rows."""
    claimed = defaultdict(dict)
    for table, ledger_name in TABLE_LEDGER.items():
        ledger = LEDGERS[ledger_name]
        for row in tables[table]:
            label = f"{table} {row.get('id')} (seq {row.get('seq')})"
            for text_field, digest_field in ledger["sensitive_fields"].items():
                text = row.get(text_field)
                if text is not None and text_digest(text) != row.get(digest_field):
                    report.fail(f"{label}: {text_field} does not match its chained digest {digest_field}")
            digest = sha256_text(canonical_json({name: row.get(name) for name in ledger["hashed_fields"]}))
            if digest != row.get("content_digest"):
                report.fail(f"{label}: its fields do not hash to its content digest (a value was changed)")
            claimed[ledger_name][row.get("seq")] = (row.get("prev_hash"), row.get("content_digest"), row.get("record_hash"))
        report.ok(f"{len(tables[table])} {table} rows hash to their content digests")
    return claimed


def check_chain(links, anchors, claimed, report):
    by_ledger = defaultdict(dict)
    for link in links:
        by_ledger[link["ledger"]][link["seq"]] = link
    for name, entries in sorted(by_ledger.items()):
        checkpoints = {a["seq"]: a for a in anchors if a["ledger"] == name and a["kind"] == "checkpoint"}
        heads = [a for a in anchors if a["ledger"] == name and a["kind"] == "head"]
        problems = 0
        for seq in sorted(entries):
            link = entries[seq]
            if sha256_text(f"{seq}:{link['prev_hash']}:{link['content_digest']}") != link["record_hash"]:
                report.fail(f"chain {name} seq {seq}: the link does not recompute")
                problems += 1
            previous = entries.get(seq - 1)
            if previous is not None:
                expected = previous["record_hash"]
            elif seq == 1:
                expected = GENESIS
            elif seq - 1 in checkpoints:
                expected = checkpoints[seq - 1]["record_hash"]
            else:
                report.fail(f"chain {name} seq {seq}: a run of links starts without a listed checkpoint before it")
                problems += 1
                continue
            if link["prev_hash"] != expected:
                report.fail(f"chain {name} seq {seq}: prev_hash does not match the entry before it")
                problems += 1
            if seq + 1 not in entries:   # the end of a run: a checkpoint or the head must vouch for it
                anchor = checkpoints.get(seq) or next((h for h in heads if h["seq"] == seq), None)
                if anchor is None:
                    report.fail(f"chain {name} seq {seq}: a run of links ends without a listed checkpoint or head")
                    problems += 1
                elif anchor["record_hash"] != link["record_hash"]:
                    report.fail(f"chain {name} seq {seq}: the link differs from the signed {anchor['kind']}")
                    problems += 1
        for seq, values in claimed.get(name, {}).items():
            link = entries.get(seq)
            if link is None:
                report.fail(f"{name} seq {seq}: no chain link in the bundle for this entry")
            elif (link["prev_hash"], link["content_digest"], link["record_hash"]) != values:
                report.fail(f"{name} seq {seq}: the row's hashes differ from its chain link")
        if not problems:
            report.ok(f"chain {name}: {len(entries)} links join and end at signed checkpoints")
    for name in claimed:
        if claimed[name] and name not in by_ledger:
            report.fail(f"{name}: rows but no chain links")


def check_signatures(anchors, key, report):
    bad = 0
    for anchor in anchors:
        number = LEDGERS[anchor["ledger"]]["number"]
        if anchor["kind"] == "head":
            expected = sign(key, f"head:v2:{number}:{anchor['seq']}:{anchor['record_hash']}:"
                                 f"{anchor.get('last_checkpoint_seq') or 0}")
        else:
            expected = sign(key, f"checkpoint:v2:{number}:{anchor['seq']}:{anchor['record_hash']}:"
                                 f"{anchor.get('prev_seq') or 0}")
        legacy = number == 1 and hmac.compare_digest(sign(key, f"{anchor['seq']}:{anchor['record_hash']}"),
                                                     anchor.get("signature") or "")
        if not (legacy or hmac.compare_digest(expected, anchor.get("signature") or "")):
            report.fail(f"{anchor['ledger']} {anchor['kind']} seq {anchor['seq']}: the signature does not verify")
            bad += 1
    if not bad:
        report.ok(f"{len(anchors)} checkpoint and head signatures verify under the key")


def check_witness(anchors, path, report):
    seen = {}
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            try:
                entry = json.loads(line)
            except ValueError:
                continue   # a torn last line
            seen[(entry.get("ledger"), entry.get("seq"))] = entry.get("record_hash")
    matched = 0
    for anchor in anchors:
        witnessed = seen.get((anchor["ledger"], anchor["seq"]))
        if witnessed is None:
            continue
        matched += 1
        if witnessed != anchor["record_hash"]:
            report.fail(f"{anchor['ledger']} {anchor['kind']} seq {anchor['seq']}: differs from what the witness saw")
    if matched:
        report.ok(f"{matched} of {len(anchors)} checkpoints and heads match the witness")
    else:
        report.note("the witness holds none of the bundle's checkpoints (published later, or another store)")


# -- cells and cross-references -------------------------------------------------------------------------------


def check_csv(folder, tables, columns, report):
    for table, rows in tables.items():
        spec = [(c["column"], c["source"]) for c in columns if c["file"] == f"{table}.csv"]
        with (folder / f"{table}.csv").open(encoding="utf-8", newline="") as handle:
            reader = csv.reader(handle)
            header = next(reader, [])
            if header != [column for column, _ in spec]:
                report.fail(f"{table}.csv: its header differs from columns.csv")
                continue
            count, bad = 0, 0
            for index, cells in enumerate(reader):
                count += 1
                if index >= len(rows):
                    continue
                for (column, source), cell in zip(spec, cells):  # noqa: B905 - Python 3.9 has no strict=
                    if cell != neutralise(render(lookup(rows[index], source))):
                        report.fail(f"{table}.csv row {index + 1} column {column}: {cell!r} differs from the "
                                    f"chained value")
                        bad += 1
                if len(cells) != len(spec):
                    report.fail(f"{table}.csv row {index + 1}: {len(cells)} cells, expected {len(spec)}")
            if count != len(rows):
                report.fail(f"{table}.csv has {count} rows, {table}.jsonl {len(rows)}")
            elif not bad:
                report.ok(f"{table}.csv: {count} rows, every cell matches its source")


def check_references(tables, report):
    records = {r["id"]: r for r in tables["records"]}
    evaluations = {e["id"]: e for e in tables["evaluations"]}
    claims = defaultdict(list)
    for row in tables["claims"]:
        claims[row["record_id"]].append(row)
    for record_id, record in records.items():
        current = record.get("current") or {}
        evaluation_id = current.get("evaluation_id")
        if current.get("source") == "evaluation":
            evaluation = evaluations.get(evaluation_id)
            if evaluation is None:
                report.fail(f"record {record_id}: its current evaluation {evaluation_id} is not in the bundle")
                continue
            expected, fer = evaluation.get("claims"), evaluation.get("fer")
        else:
            expected, fer = record.get("claims"), record.get("fer")
        rows = sorted(claims.get(record_id, []), key=lambda r: r["claim_index"])
        if [r["claim"] for r in rows] != list(expected or []) or any(
                r["evaluation_id"] != (evaluation_id if current.get("source") == "evaluation" else None) for r in rows):
            report.fail(f"record {record_id}: claims.jsonl differs from the claims its verdicts hold")
        if current.get("source") in ("evaluation", "inline") and current.get("fer") != fer:
            report.fail(f"record {record_id}: current FER {current.get('fer')} differs from its verdicts' {fer}")
        if current.get("source") == "evaluation":
            counts = {v: sum(1 for c in expected or [] if isinstance(c, dict) and c.get("verdict") == v)
                      for v in ("supported", "contradicted", "unverifiable")}
            if (current.get("n_supported"), current.get("n_contradicted"), current.get("n_unverifiable")) != \
                    (counts["supported"], counts["contradicted"], counts["unverifiable"]):
                report.fail(f"record {record_id}: current verdict counts differ from its evaluation's claims")
    _check_items(tables["evidence"], claims, "evidence", lambda row: (row["record_id"], row["claim_index"]),
                 lambda claim_row: claim_row["claim"].get("evidence") if isinstance(claim_row["claim"], dict) else None,
                 "evidence_index", report)
    decisions = defaultdict(list)
    for row in tables["gate_decisions"]:
        decisions[row["record_id"]].append(row)
    for record_id, record in records.items():
        rows = sorted(decisions.get(record_id, []), key=lambda r: r["decision_index"])
        if [r["decision"] for r in rows] != list(record.get("gate_decisions") or []):
            report.fail(f"record {record_id}: gate_decisions.jsonl differs from the record's gate decisions")
    for evaluation in tables["evaluations"]:
        if evaluation["record_id"] not in records:
            report.fail(f"evaluation {evaluation['id']}: its record is not in the bundle")
    for review in tables["reviews"]:
        if review.get("record_id") not in records:
            report.fail(f"review {review['id']}: its record is not in the bundle")
    report.ok("claims, evidence and gate decisions are exactly the chained lists; current verdicts agree")


def _check_items(items, claims_by_record, name, key, expected_list, index_field, report):
    grouped = defaultdict(list)
    for row in items:
        grouped[key(row)].append(row)
    for record_id, claim_rows in claims_by_record.items():
        for claim_row in claim_rows:
            rows = sorted(grouped.pop((record_id, claim_row["claim_index"]), []), key=lambda r: r[index_field])
            if [r[name] for r in rows] != list(expected_list(claim_row) or []):
                report.fail(f"record {record_id} claim {claim_row['claim_index']}: {name}.jsonl differs from the claim")
    for (record_id, index) in grouped:
        report.fail(f"{name}.jsonl names claim {index} of record {record_id}, which the bundle does not hold")


# -- main ---------------------------------------------------------------------------------------------------


def verify(folder, key=None, witness=None, quiet=False):
    report = Report(quiet)
    manifest_path = folder / "manifest.json"
    if not manifest_path.is_file():
        report.fail("manifest.json is missing: not a bundle")
        return report
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    if manifest.get("format") != FORMAT:
        report.fail(f"unknown bundle format {manifest.get('format')!r} (this checker reads {FORMAT})")
        return report
    for name, ledger in LEDGERS.items():
        stated = manifest.get("ledgers", {}).get(name, {})
        if stated.get("hashed_fields") != ledger["hashed_fields"] or stated.get("sensitive_fields") != ledger["sensitive_fields"]:
            report.fail(f"the manifest's field list of the {name} ledger differs from this checker's")
    check_files(folder, manifest, report)
    tables = {name: read_jsonl(folder / f"{name}.jsonl", report)
              for name in ("records", "claims", "evidence", "gate_decisions", "evaluations", "reviews")}
    claimed = check_rows(tables, report)
    links = read_jsonl(folder / "chain" / "links.jsonl", report)
    anchors = read_jsonl(folder / "chain" / "checkpoints.jsonl", report)
    check_chain(links, anchors, claimed, report)
    with (folder / "columns.csv").open(encoding="utf-8", newline="") as handle:
        columns = list(csv.DictReader(handle))
    check_csv(folder, tables, columns, report)
    check_references(tables, report)
    if key is not None:
        check_signatures(anchors, key, report)
    else:
        report.note("checkpoint signatures not checked (no --hmac-key-file); use --witness or the key to tie the "
                    "checkpoints to the service")
    if witness is not None:
        check_witness(anchors, witness, report)
    return report


def main(argv=None):
    parser = argparse.ArgumentParser(description="Check an audit-trail bundle offline.")
    parser.add_argument("bundle", type=Path, help="the bundle folder")
    parser.add_argument("--hmac-key-file", type=Path, help="a file holding the service's HMAC key")
    parser.add_argument("--witness", type=Path, help="a copy of the chain witness (JSON lines)")
    parser.add_argument("--quiet", action="store_true", help="print failures only")
    args = parser.parse_args(argv)
    if not args.bundle.is_dir():
        print(f"{args.bundle}: not a folder", file=sys.stderr)
        return 2
    key = args.hmac_key_file.read_bytes().strip() if args.hmac_key_file else None
    report = verify(args.bundle, key=key, witness=args.witness, quiet=args.quiet)
    for failure in report.failures[:50]:
        print(f"FAILED: {failure}")
    if len(report.failures) > 50:
        print(f"... and {len(report.failures) - 50} more failures")
    print("bundle verified" if not report.failures else f"bundle NOT verified: {len(report.failures)} problem(s)")
    return 0 if not report.failures else 1


if __name__ == "__main__":
    sys.exit(main())
