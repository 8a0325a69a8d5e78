#!/usr/bin/env python3
"""Check an audit-trail bundle offline: Python 3.9+, the standard library, and (for --public-key) the
`cryptography` package.

    python3 verify_bundle.py BUNDLE_DIR --public-key KEY [--hmac-key-file FILE] [--witness WITNESS.jsonl] [--quiet]

KEY is the service's Ed25519 public key (64 hex digits, its base64, or a file holding either or a PEM), as
published apart from the bundle; so is this script's SHA-256, which it prints first. Use your own copy of this
script, checked against that hash, not the one inside a bundle.

Exit status 0: the manifest's signature verifies under the key given and every check passes; 1: any check
fails (each failure is printed); 2: bad usage; 3: internally consistent, but no key was given, so nothing
ties the bundle to the service.

What is checked:
1. signatures: the manifest's Ed25519 signature under --public-key, its HMAC under --hmac-key-file (and,
   with the HMAC key, every checkpoint and head signature);
2. files: each file has the size and SHA-256 the signed manifest lists; none is missing;
3. entries: the rows are exactly the records, evaluations and reviews the manifest lists (id and chain
   position), and the chain links cover exactly the windows it lists, without a gap;
4. rows: every record, evaluation and review row hashes (its chained fields, canonical JSON) to the content
   digest its ledger holds, and every stored text hashes to the digest that stands for it;
5. chain: every entry's link recomputes (sha256 of "seq:prev_hash:content_digest"), consecutive links
   join, and each run of links starts and ends at a listed signed checkpoint (or the signed head);
6. derived fields: each record's current verdicts (which verdict set, action, severity, counts, reviewed,
   disputed, ...) are rebuilt here from the chained record, evaluations and reviews, and must be what the
   bundle says; claims, evidence and gate decisions are exactly the lists the chained rows hold;
7. cells: every CSV column is the one this script defines (COLUMNS, not columns.csv) and every cell equals
   the JSONL value that column's source names, rendered and neutralised as the exporter does;
8. witness (with --witness): checkpoints and heads the witness also saw carry the same hashes.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import csv
import hashlib
import hmac
import json
import sys
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

FORMAT = "auditor-bundle/2"
SIGNATURE_FILE = "manifest.sig"
# What is signed: this prefix, then manifest.json's bytes (the prefix keeps a bundle signature from being
# mistaken for any other message the key signs).
SIGNED_PREFIX = b"auditor-bundle/2 manifest\n"
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
                             "delivered_output": "delivered_sha256", "claims": "claims_sha256"},
        "optional_fields": []},
    "evaluations": {"number": 2, "hashed_fields": [
        "id", "record_id", "job_id", "evaluator_version", "kg_version", "rule_pack_hash", "status",
        "failure_reason", "claims_sha256", "fer", "citation_confidence", "joint_score", "created_at"],
        "sensitive_fields": {"claims": "claims_sha256"},
        "optional_fields": ["details"]},
    "events": {"number": 4, "hashed_fields": [
        "id", "at", "kind", "key_id", "tenant", "role", "record_id", "subject", "payload", "note_sha256"],
        "sensitive_fields": {"note": "note_sha256"},
        "optional_fields": []},
}
TABLE_LEDGER = {"records": "records", "evaluations": "evaluations", "reviews": "events"}
TABLES = ("records", "claims", "evidence", "gate_decisions", "evaluations", "reviews")
# Every CSV column and the JSONL value (a dotted path into the row) it shows. Fixed here, so a bundle cannot
# re-label its columns: columns.csv, which repeats this with types and descriptions, must agree.
COLUMNS = {
    "records": (
        ("id", "id"), ("seq", "seq"), ("occurred_at", "occurred_at"), ("recorded_at", "created_at"),
        ("kind", "kind"), ("tenant", "tenant"), ("key_id", "key_id"), ("request_id", "request_id"),
        ("endpoint", "endpoint"), ("intent", "intent"), ("domain", "domain"), ("model_id", "model_id"),
        ("checkpoint_hash", "checkpoint_hash"), ("kg_version", "kg_version"), ("rule_pack_hash", "rule_pack_hash"),
        ("status", "status"), ("finish_reason", "finish_reason"), ("gate_action", "gate_action"),
        ("temperature", "sampling_params.temperature"), ("top_p", "sampling_params.top_p"),
        ("max_tokens", "sampling_params.max_tokens"), ("seed", "sampling_params.seed"),
        ("presence_penalty", "sampling_params.presence_penalty"),
        ("frequency_penalty", "sampling_params.frequency_penalty"), ("stop", "sampling_params.stop"),
        ("response_format", "sampling_params.response_format.type"), ("prompt_tokens", "prompt_tokens"),
        ("completion_tokens", "completion_tokens"), ("content_mode", "content_mode"), ("prompt", "prompt"),
        ("output", "output"), ("delivered_output", "delivered_output"), ("error", "error"),
        ("purged_at", "purged_at"), ("current_source", "current.source"),
        ("current_evaluation_id", "current.evaluation_id"),
        ("current_rule_pack_version", "current.rule_pack.version"),
        ("current_rule_pack_hash", "current.rule_pack.hash"), ("current_rule_pack_active", "current.rule_pack.active"),
        ("current_supported", "current.n_supported"), ("current_contradicted", "current.n_contradicted"),
        ("current_unverifiable", "current.n_unverifiable"), ("current_fabrications", "current.n_fabrication"),
        ("current_fer", "current.fer"),
        ("current_citation_confidence", "current.citation_confidence"),
        ("current_verdict_action", "current.verdict_action"), ("current_max_severity", "current.max_severity"),
        ("current_reviewed", "current.reviewed"), ("current_disputed", "current.disputed"),
        ("record_hash", "record_hash")),
    "claims": (
        ("record_id", "record_id"), ("source", "source"), ("evaluation_id", "evaluation_id"),
        ("claim_index", "claim_index"), ("verdict", "claim.verdict"), ("kind", "claim.kind"), ("text", "claim.text"),
        ("confidence", "claim.confidence"), ("span_start", "claim.span.0"), ("span_end", "claim.span.1"),
        ("rule_ids", "claim.rule_ids"), ("gate_rule_id", "claim.gate.rule_id"),
        ("gate_severity", "claim.gate.severity"), ("gate_on_fail", "claim.gate.on_fail"),
        ("subject", "claim.subject")),
    "evidence": (
        ("record_id", "record_id"), ("evaluation_id", "evaluation_id"), ("claim_index", "claim_index"),
        ("evidence_index", "evidence_index"), ("kind", "evidence.kind"), ("description", "evidence.description"),
        ("source", "evidence.source"), ("locator", "evidence.locator"), ("as_of", "evidence.as_of"),
        ("rule_id", "evidence.rule_id")),
    "gate_decisions": (
        ("record_id", "record_id"), ("decision_index", "decision_index"), ("stage", "decision.stage"),
        ("rule_id", "decision.rule_id"), ("action", "decision.action"), ("reason", "decision.reason")),
    "evaluations": (
        ("id", "id"), ("record_id", "record_id"), ("seq", "seq"), ("current", "current"), ("job_id", "job_id"),
        ("evaluator_version", "evaluator_version"), ("rule_pack_version", "rule_pack_version"),
        ("rule_pack_hash", "rule_pack_hash"), ("kg_version", "kg_version"), ("status", "status"),
        ("failure_reason", "failure_reason"), ("fer", "fer"), ("citation_confidence", "citation_confidence"),
        ("joint_score", "joint_score"), ("created_at", "created_at"), ("record_hash", "record_hash")),
    "reviews": (
        ("id", "id"), ("seq", "seq"), ("at", "at"), ("record_id", "record_id"), ("reviewer_key_id", "key_id"),
        ("reviewer_tenant", "tenant"), ("reviewer_role", "role"), ("verdict_set", "payload.verdict_ref"),
        ("disputed", "payload.disputed"), ("items", "payload.items"), ("note", "note"),
        ("record_hash", "record_hash")),
}
# OWASP's CSV-injection guidance: cells a spreadsheet would read as a formula or a control start with these.
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
# The service's verdict rules (`auditor.trail.verdicts`), which the current verdicts are rebuilt by.
GATE_ACTIONS = ("allow", "annotate", "redact", "block", "refuse")
SEVERITIES = ("low", "medium", "high", "critical")
APPLIED_STATUSES = ("done", "not_applicable")


class Report:
    def __init__(self, quiet: bool) -> None:
        self.failures: list[str] = []
        self.notes: list[str] = []
        self.quiet = quiet
        self.authenticated = False   # a key given vouched for the manifest

    def fail(self, message: str) -> None:
        self.failures.append(message)

    def ok(self, message: str) -> None:
        if not self.quiet:
            print(f"ok: {message}")

    def note(self, message: str) -> None:
        self.notes.append(message)
        if not self.quiet:
            print(f"note: {message}")


class UsageError(ValueError):
    """A key or option this script cannot use."""


# -- the rules the service hashes and renders by ------------------------------------------------------------


def canonical_json(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256_text(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def text_digest(value):
    if value is None:
        return None
    return sha256_text(value if isinstance(value, str) else canonical_json(value))


def content_digest(row, ledger):
    content = {name: row.get(name) for name in ledger["hashed_fields"]}
    content.update({name: row[name] for name in ledger["optional_fields"] if row.get(name) is not None})
    return sha256_text(canonical_json(content))


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


def manifest_hmac(key, manifest_bytes):
    return hmac.new(key, SIGNED_PREFIX + manifest_bytes, hashlib.sha256).hexdigest()


def canonical_time(moment):
    """UTC with microseconds, as the chain writes times ("2026-01-02T03:04:05.000000Z")."""
    if moment.tzinfo is not None:
        moment = moment.astimezone(timezone.utc).replace(tzinfo=None)  # noqa: UP017 - Python 3.9 has no datetime.UTC
    return moment.isoformat(timespec="microseconds") + "Z"


# -- the current verdicts, rebuilt from the chained rows ------------------------------------------------------


def summarise_claims(claims):
    """Counts, the action and severity the claims' gate annotations ask for, the least confidence."""
    counts = {"supported": 0, "contradicted": 0, "unverifiable": 0}
    actions, severities, confidences = [], [], []
    fabrications = 0
    for claim in claims or []:
        if not isinstance(claim, dict):
            continue
        # a reference no index holds (the service's verdicts.is_fabrication)
        fabrications += any(isinstance(e, dict) and e.get("kind") in ("possible_fabrication", "fabrication")
                            for e in claim.get("evidence") or [])
        if claim.get("verdict") in counts:
            counts[claim["verdict"]] += 1
        gate = claim.get("gate")
        if isinstance(gate, dict):
            if gate.get("on_fail") in GATE_ACTIONS:
                actions.append(gate["on_fail"])
            if gate.get("severity") in SEVERITIES:
                severities.append(gate["severity"])
        if isinstance(claim.get("confidence"), (int, float)):
            confidences.append(float(claim["confidence"]))
    if actions:
        implied = max(actions, key=GATE_ACTIONS.index)
    else:
        implied = None if counts["contradicted"] else "allow"
    return {"n_supported": counts["supported"], "n_contradicted": counts["contradicted"],
            "n_unverifiable": counts["unverifiable"], "n_fabrication": fabrications, "implied_action": implied,
            "max_severity": max(severities, key=SEVERITIES.index) if severities else None,
            "min_confidence": min(confidences) if confidences else None}


def output_actions(gate_decisions):
    """The strongest output-stage action the gate took (allow when none) and the highest severity it named."""
    actions, severities = [], []
    for decision in gate_decisions or []:
        if isinstance(decision, dict) and decision.get("stage") == "output" and decision.get("action") in GATE_ACTIONS:
            actions.append(decision["action"])
            detail = decision.get("detail")
            severity = detail.get("severity") if isinstance(detail, dict) else None
            if severity in SEVERITIES:
                severities.append(severity)
    return (max(actions, key=GATE_ACTIONS.index) if actions else "allow",
            max(severities, key=SEVERITIES.index) if severities else None)


def had_gate(record):
    """Imported outputs never passed the service's gate."""
    return record.get("kind", "record") == "record" and record.get("endpoint") != "import"


def occurred_at(record):
    """When the output was produced: an import's own timestamp, else when the record was written."""
    details = record.get("details")
    stamp = details.get("timestamp") if isinstance(details, dict) else None
    if record.get("endpoint") == "import" and isinstance(stamp, str):
        try:
            moment = datetime.fromisoformat(stamp[:-1] + "+00:00" if stamp.endswith("Z") else stamp)
        except ValueError:
            pass
        else:
            return canonical_time(moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc))  # noqa: UP017
    return record.get("created_at")


def claims_known(row):
    """Whether a verdict set's claims are in the bundle (not purged or kept as a hash only)."""
    return row.get("claims") is not None or row.get("claims_sha256") is None


def current_verdicts(record, evaluations, reviews, active_packs, pack_versions):
    """What the service holds as the record's current verdicts, from chained rows alone: among the gate's inline
    verdicts (records that passed the gate) and each applied evaluation, the one ranked highest by (made under
    the active rule pack of the record's domain, when made), a later one winning a tie. Values that only
    purged or hash-only claims could give are None. Reviewed: the record's last review covered this set."""
    active = (active_packs.get(record.get("domain") or "") or {}).get("hash")
    chosen, rank = None, None
    if had_gate(record):
        chosen, rank = "inline", (active is not None and record.get("rule_pack_hash") == active, record.get("created_at") or "")
    applied = [e for e in evaluations if e.get("status") in APPLIED_STATUSES]
    for evaluation in sorted(applied, key=lambda e: (e.get("created_at") or "", e.get("seq") or 0)):
        candidate = (active is not None and evaluation.get("rule_pack_hash") == active, evaluation.get("created_at") or "")
        if rank is None or candidate >= rank:
            chosen, rank = evaluation, candidate
    if chosen is None:
        current = {"source": "none", "evaluation_id": None, "evaluated_at": None, "evaluator_version": None,
                   "rule_pack_hash": None, "kg_version": None, "n_supported": 0, "n_contradicted": 0,
                   "n_unverifiable": 0, "n_fabrication": 0, "fer": None, "citation_confidence": None,
                   "joint_score": None, "verdict_action": None, "max_severity": None, "min_confidence": None}
    elif chosen == "inline":
        summary = summarise_claims(record.get("claims"))
        known = claims_known(record)
        action, severity = output_actions(record.get("gate_decisions"))
        current = {"source": "inline", "evaluation_id": None, "evaluated_at": record.get("created_at"),
                   "evaluator_version": None, "rule_pack_hash": record.get("rule_pack_hash"),
                   "kg_version": record.get("kg_version"), "n_supported": record.get("n_supported") or 0,
                   "n_contradicted": record.get("n_contradicted") or 0,
                   "n_unverifiable": record.get("n_unverifiable") or 0,
                   "n_fabrication": summary["n_fabrication"] if known else None, "fer": record.get("fer"),
                   "citation_confidence": None, "joint_score": None, "verdict_action": action,
                   "max_severity": severity or (summary["max_severity"] if known else None),
                   "min_confidence": summary["min_confidence"] if known else None}
    else:
        summary = summarise_claims(chosen.get("claims"))
        if not claims_known(chosen):
            summary = dict.fromkeys(summary)
        current = {"source": "evaluation", "evaluation_id": chosen.get("id"), "evaluated_at": chosen.get("created_at"),
                   "evaluator_version": chosen.get("evaluator_version"), "rule_pack_hash": chosen.get("rule_pack_hash"),
                   "kg_version": chosen.get("kg_version"), "n_supported": summary["n_supported"],
                   "n_contradicted": summary["n_contradicted"], "n_unverifiable": summary["n_unverifiable"],
                   "n_fabrication": summary["n_fabrication"],
                   "fer": chosen.get("fer"), "citation_confidence": chosen.get("citation_confidence"),
                   "joint_score": chosen.get("joint_score"), "verdict_action": summary["implied_action"],
                   "max_severity": summary["max_severity"], "min_confidence": summary["min_confidence"]}
    pack_hash = current.pop("rule_pack_hash")
    current["rule_pack"] = None if not pack_hash else {
        "version": pack_versions.get(pack_hash), "hash": pack_hash, "active": active == pack_hash}
    last = max(reviews, key=lambda r: r.get("seq") or 0) if reviews else None
    payload = (last or {}).get("payload") or {}
    current["had_gate"] = had_gate(record)
    current["reviewed"] = last is not None and payload.get("verdict_ref") == (current["evaluation_id"] or "inline")
    current["disputed"] = payload.get("disputed", 0) if last is not None else 0
    return current


def verdict_claims(record, current, evaluations_by_id):
    """The claims of the current verdict set (None when there are none, or they were purged)."""
    if current["source"] == "evaluation":
        return evaluations_by_id[current["evaluation_id"]].get("claims")
    return record.get("claims") if current["source"] == "inline" else None


def derived_rows(records, evaluations, reviews, active_packs, pack_versions):
    """Per record id: its current verdicts and occurred_at; per evaluation id: whether it is current."""
    evaluations_of, reviews_of = defaultdict(list), defaultdict(list)
    for evaluation in evaluations:
        evaluations_of[evaluation.get("record_id")].append(evaluation)
    for review in reviews:
        reviews_of[review.get("record_id")].append(review)
    currents = {}
    for record in records:
        currents[record.get("id")] = current_verdicts(record, evaluations_of.get(record.get("id"), []),
                                                      reviews_of.get(record.get("id"), []), active_packs, pack_versions)
    current_ids = {c["evaluation_id"] for c in currents.values() if c["evaluation_id"]}
    return currents, current_ids


# -- reading -----------------------------------------------------------------------------------------------


def read_jsonl(path, report):
    rows = []
    if not path.is_file():
        report.fail(f"{path.name}: missing")
        return rows
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            try:
                row = json.loads(line)
            except ValueError:
                report.fail(f"{path.name} line {number}: not valid JSON")
                continue
            if isinstance(row, dict):
                rows.append(row)
            else:
                report.fail(f"{path.name} line {number}: not a JSON object")
    return rows


def file_sha256(path):
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_files(folder, manifest, report):
    listed = manifest.get("files") or {}
    for name, info in sorted(listed.items()):
        path = folder / name
        if not path.is_file():
            report.fail(f"{name}: missing (the manifest lists it)")
            continue
        if file_sha256(path) != info.get("sha256") or path.stat().st_size != info.get("bytes"):
            report.fail(f"{name}: SHA-256 or size differs from the manifest (the file was changed)")
    for name in TABLES:
        for suffix in ("jsonl", "csv"):
            if f"{name}.{suffix}" not in listed:
                report.fail(f"{name}.{suffix}: not listed in the manifest")
    own = file_sha256(Path(__file__)) if Path(__file__).is_file() else None
    if (listed.get("verify_bundle.py") or {}).get("sha256") not in (None, own):
        report.note("the bundle's verify_bundle.py is not this script (another version, or replaced): "
                    "check with your own copy, whose SHA-256 the service publishes")
    extra = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                   if p.is_file() and p.relative_to(folder).as_posix() not in listed
                   and p.name not in ("manifest.json", SIGNATURE_FILE))
    for name in extra:
        report.note(f"{name}: not part of the bundle as issued (not in the manifest); ignored")
    report.ok(f"{len(listed)} files match the manifest's SHA-256 and sizes")


# -- signatures ------------------------------------------------------------------------------------------------


def parse_public_key(value):
    """Raw Ed25519 public key bytes from hex, base64, a PEM, or a file holding one of these."""
    text = value
    path = Path(value)
    try:
        if path.is_file():
            text = path.read_text(encoding="utf-8").strip()
    except (OSError, ValueError):
        raise UsageError(f"cannot read the public key file {value}") from None
    if "BEGIN PUBLIC KEY" in text:
        body = "".join(line for line in text.splitlines() if line and not line.startswith("-----"))
        try:
            der = base64.b64decode(body, validate=True)
        except (binascii.Error, ValueError):
            raise UsageError("the PEM public key is not valid base64") from None
        # An Ed25519 SubjectPublicKeyInfo is a fixed 12-byte header and the 32-byte key.
        if len(der) == 44 and der[:12] == bytes.fromhex("302a300506032b6570032100"):
            return der[12:]
        raise UsageError("the PEM public key is not an Ed25519 key")
    text = text.strip()
    if len(text) == 64:
        try:
            return bytes.fromhex(text)
        except ValueError:
            pass
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) == 32:
        return raw
    raise UsageError("--public-key: expected the Ed25519 public key as 64 hex digits, base64, a PEM, "
                     "or a file holding one")


def load_ed25519(raw):
    try:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    except ImportError:
        raise UsageError("--public-key needs the Python package 'cryptography' (pip install cryptography)") from None
    return Ed25519PublicKey.from_public_bytes(raw)


def check_manifest_signatures(folder, manifest_bytes, manifest, public_key, hmac_key, report):
    """Returns whether a key given authenticated the manifest."""
    path = folder / SIGNATURE_FILE
    try:
        signatures = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        report.fail(f"{SIGNATURE_FILE}: missing or not JSON: the manifest is unsigned")
        return False
    if not isinstance(signatures, dict):
        report.fail(f"{SIGNATURE_FILE}: not a JSON object")
        return False
    authenticated = True
    if public_key is not None:
        stated = ((manifest.get("signing") or {}).get("ed25519") or {}).get("public_key")
        try:
            signature = bytes.fromhex(signatures.get("ed25519") or "")
            public_key.verify(signature, SIGNED_PREFIX + manifest_bytes)
        except Exception:   # cryptography's InvalidSignature, or a signature that is not hex
            hint = "" if stated is None or stated == public_key_hex(public_key) else \
                " (the manifest names another public key: signed by someone else)"
            report.fail(f"the manifest's Ed25519 signature does not verify under the public key given{hint}")
            authenticated = False
        else:
            report.ok("the manifest's Ed25519 signature verifies under the public key given")
    if hmac_key is not None:
        if hmac.compare_digest(manifest_hmac(hmac_key, manifest_bytes), str(signatures.get("hmac_sha256") or "")):
            report.ok("the manifest's HMAC signature verifies under the key")
        else:
            report.fail("the manifest's HMAC signature does not verify under the key")
            authenticated = False
    return authenticated and (public_key is not None or hmac_key is not None)


def public_key_hex(public_key):
    from cryptography.hazmat.primitives import serialization

    return public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw).hex()


def check_signatures(anchors, key, report):
    bad = 0
    for anchor in anchors:
        number = LEDGERS.get(anchor.get("ledger"), {}).get("number")
        if anchor.get("kind") == "head":
            expected = sign(key, f"head:v2:{number}:{anchor.get('seq')}:{anchor.get('record_hash')}:"
                                 f"{anchor.get('last_checkpoint_seq') or 0}")
        else:
            expected = sign(key, f"checkpoint:v2:{number}:{anchor.get('seq')}:{anchor.get('record_hash')}:"
                                 f"{anchor.get('prev_seq') or 0}")
        legacy = number == 1 and hmac.compare_digest(sign(key, f"{anchor.get('seq')}:{anchor.get('record_hash')}"),
                                                     str(anchor.get("signature") or ""))
        if not (legacy or hmac.compare_digest(expected, str(anchor.get("signature") or ""))):
            report.fail(f"{anchor.get('ledger')} {anchor.get('kind')} seq {anchor.get('seq')}: the signature does not verify")
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
        witnessed = seen.get((anchor.get("ledger"), anchor.get("seq")))
        if witnessed is None:
            continue
        matched += 1
        if witnessed != anchor.get("record_hash"):
            report.fail(f"{anchor.get('ledger')} {anchor.get('kind')} seq {anchor.get('seq')}: differs from what the witness saw")
    if matched:
        report.ok(f"{matched} of {len(anchors)} checkpoints and heads match the witness")
    else:
        report.note("the witness holds none of the bundle's checkpoints (published later, or another store)")


# -- entries, rows and the chain --------------------------------------------------------------------------------


def check_entries(manifest, tables, report):
    """The rows are exactly the entries the signed manifest lists, in its order."""
    listed_all = manifest.get("entries") or {}
    counts = manifest.get("counts") or {}
    for table in TABLE_LEDGER:
        listed = [tuple(entry) for entry in listed_all.get(table) or [] if isinstance(entry, list) and len(entry) == 2]
        present = [(row.get("seq"), row.get("id")) for row in tables[table]]
        if listed == present:
            continue
        label = "record" if table == "records" else table[:-1]
        for seq, entry_id in sorted(set(listed) - set(present), key=str):
            report.fail(f"{label} {entry_id} (seq {seq}) is listed in the signed manifest but missing from {table}.jsonl")
        for seq, entry_id in sorted(set(present) - set(listed), key=str):
            report.fail(f"{label} {entry_id} (seq {seq}) is in {table}.jsonl but not listed in the manifest")
        if set(listed) == set(present):
            report.fail(f"{table}.jsonl: its rows are not in the manifest's order")
    for table in TABLES:
        if counts.get(table) != len(tables[table]):
            report.fail(f"{table}.jsonl has {len(tables[table])} rows, the manifest counts {counts.get(table)}")
    report.ok("the rows are exactly the records, evaluations and reviews the manifest lists")


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
            if content_digest(row, ledger) != row.get("content_digest"):
                report.fail(f"{label}: its fields do not hash to its content digest (a value was changed)")
            claimed[ledger_name][row.get("seq")] = (row.get("prev_hash"), row.get("content_digest"), row.get("record_hash"))
        report.ok(f"{len(tables[table])} {table} rows hash to their content digests")
    return claimed


def check_windows(manifest, links, report):
    """The links are exactly the chain positions the manifest's windows cover: none missing, none extra."""
    chain = manifest.get("chain") or {}
    for name in LEDGERS:
        windows = (chain.get(name) or {}).get("windows") or []
        expected = set()
        for window in windows:
            if not (isinstance(window, list) and len(window) == 2 and all(isinstance(v, int) for v in window)):
                report.fail(f"chain {name}: the manifest's window {window!r} is not [start, end]")
                continue
            expected.update(range(window[0] + 1, window[1] + 1))
        present = [link.get("seq") for link in links if link.get("ledger") == name]
        for seq in sorted(expected - set(present)):
            report.fail(f"chain {name} seq {seq}: missing from links.jsonl (a gap in a window the manifest lists)")
        for seq in sorted(set(present) - expected, key=str):
            report.fail(f"chain {name} seq {seq}: a link outside the windows the manifest lists")
        if len(present) != len(set(present)):
            report.fail(f"chain {name}: a link appears twice")
    report.ok("the chain links cover exactly the manifest's windows")


def check_chain(links, anchors, claimed, report):
    by_ledger = defaultdict(dict)
    for link in links:
        by_ledger[link.get("ledger")][link.get("seq")] = link
    for name, entries in sorted(by_ledger.items(), key=lambda item: str(item[0])):
        checkpoints = {a.get("seq"): a for a in anchors if a.get("ledger") == name and a.get("kind") == "checkpoint"}
        heads = [a for a in anchors if a.get("ledger") == name and a.get("kind") == "head"]
        problems = 0
        for seq in sorted(s for s in entries if isinstance(s, int)):
            link = entries[seq]
            if sha256_text(f"{seq}:{link.get('prev_hash')}:{link.get('content_digest')}") != link.get("record_hash"):
                report.fail(f"chain {name} seq {seq}: the link does not recompute")
                problems += 1
            previous = entries.get(seq - 1)
            if previous is not None:
                expected = previous.get("record_hash")
            elif seq == 1:
                expected = GENESIS
            elif seq - 1 in checkpoints:
                expected = checkpoints[seq - 1].get("record_hash")
            else:
                report.fail(f"chain {name} seq {seq}: a run of links starts without a listed checkpoint before it")
                problems += 1
                continue
            if link.get("prev_hash") != expected:
                report.fail(f"chain {name} seq {seq}: prev_hash does not match the entry before it")
                problems += 1
            if seq + 1 not in entries:   # the end of a run: a checkpoint or the head must vouch for it
                anchor = checkpoints.get(seq) or next((h for h in heads if h.get("seq") == seq), None)
                if anchor is None:
                    report.fail(f"chain {name} seq {seq}: a run of links ends without a listed checkpoint or head")
                    problems += 1
                elif anchor.get("record_hash") != link.get("record_hash"):
                    report.fail(f"chain {name} seq {seq}: the link differs from the signed {anchor.get('kind')}")
                    problems += 1
        for seq, values in claimed.get(name, {}).items():
            link = entries.get(seq)
            if link is None:
                report.fail(f"{name} seq {seq}: no chain link in the bundle for this entry")
            elif (link.get("prev_hash"), link.get("content_digest"), link.get("record_hash")) != values:
                report.fail(f"{name} seq {seq}: the row's hashes differ from its chain link")
        if not problems:
            report.ok(f"chain {name}: {len(entries)} links join and end at signed checkpoints")
    for name in claimed:
        if claimed[name] and name not in by_ledger:
            report.fail(f"{name}: rows but no chain links")


# -- derived fields, cross-references and cells -------------------------------------------------------------------


def check_derived(manifest, tables, report):
    versions = manifest.get("versions") or {}
    active_packs = versions.get("rule_packs_active") or {}
    pack_versions = versions.get("rule_packs_used") or {}
    records = tables["records"]
    evaluations_by_id = {e.get("id"): e for e in tables["evaluations"]}
    currents, current_ids = derived_rows(records, tables["evaluations"], tables["reviews"], active_packs, pack_versions)
    bad = 0
    for record in records:
        record_id = record.get("id")
        expected, stated = currents[record_id], record.get("current")
        if not isinstance(stated, dict):
            report.fail(f"record {record_id}: no current verdicts")
            bad += 1
            continue
        for name in sorted(set(expected) | set(stated)):
            if stated.get(name) != expected.get(name) or (name in stated) != (name in expected):
                report.fail(f"record {record_id}: current.{name} is {stated.get(name)!r}, the chained verdicts give "
                            f"{expected.get(name)!r}")
                bad += 1
        if record.get("occurred_at") != occurred_at(record):
            report.fail(f"record {record_id}: occurred_at {record.get('occurred_at')!r} is not the chained "
                        f"{occurred_at(record)!r}")
            bad += 1
    for evaluation in tables["evaluations"]:
        if evaluation.get("current") is not (evaluation.get("id") in current_ids):
            report.fail(f"evaluation {evaluation.get('id')}: current is {evaluation.get('current')!r}, the chained "
                        f"verdicts say {evaluation.get('id') in current_ids!r}")
            bad += 1
        if evaluation.get("rule_pack_version") != pack_versions.get(evaluation.get("rule_pack_hash") or ""):
            report.fail(f"evaluation {evaluation.get('id')}: rule_pack_version differs from the signed manifest's")
            bad += 1
    if not bad:
        report.ok(f"{len(records)} records' current verdicts follow from their chained verdicts and reviews")
    check_references(tables, currents, evaluations_by_id, report)


def check_references(tables, currents, evaluations_by_id, report):
    records = {r.get("id"): r for r in tables["records"]}
    claims = defaultdict(list)
    for row in tables["claims"]:
        claims[row.get("record_id")].append(row)
    for record_id, record in records.items():
        current = currents[record_id]
        expected = verdict_claims(record, current, evaluations_by_id)
        source = current["source"] if current["source"] in ("evaluation", "inline") else None
        rows = sorted(claims.get(record_id, []), key=_index_of("claim_index"))
        if [r.get("claim") for r in rows] != list(expected or []) or any(
                r.get("evaluation_id") != current["evaluation_id"] or r.get("source") != source
                or r.get("claim_index") != index for index, r in enumerate(rows)):
            report.fail(f"record {record_id}: claims.jsonl differs from the claims its verdicts hold")
    for record_id in set(claims) - set(records):
        report.fail(f"claims.jsonl names record {record_id}, which the bundle does not hold")
    _check_items(tables["evidence"], claims, "evidence", lambda row: (row.get("record_id"), row.get("claim_index")),
                 lambda claim_row: claim_row.get("claim", {}).get("evidence") if isinstance(claim_row.get("claim"), dict)
                 else None, "evidence_index", report)
    decisions = defaultdict(list)
    for row in tables["gate_decisions"]:
        decisions[row.get("record_id")].append(row)
    for record_id, record in records.items():
        rows = sorted(decisions.pop(record_id, []), key=_index_of("decision_index"))
        if [r.get("decision") for r in rows] != list(record.get("gate_decisions") or []) or any(
                r.get("decision_index") != index for index, r in enumerate(rows)):
            report.fail(f"record {record_id}: gate_decisions.jsonl differs from the record's gate decisions")
    for record_id in decisions:
        report.fail(f"gate_decisions.jsonl names record {record_id}, which the bundle does not hold")
    for evaluation in tables["evaluations"]:
        if evaluation.get("record_id") not in records:
            report.fail(f"evaluation {evaluation.get('id')}: its record is not in the bundle")
    for review in tables["reviews"]:
        if review.get("record_id") not in records or review.get("kind") != "review":
            report.fail(f"review {review.get('id')}: not a review of a record in the bundle")
    report.ok("claims, evidence and gate decisions are exactly the chained lists of the current verdicts")


def _index_of(field):
    return lambda row: row.get(field) if isinstance(row.get(field), int) else -1


def _check_items(items, claims_by_record, name, key, expected_list, index_field, report):
    grouped = defaultdict(list)
    for row in items:
        grouped[key(row)].append(row)
    for record_id, claim_rows in claims_by_record.items():
        for claim_row in claim_rows:
            rows = sorted(grouped.pop((record_id, claim_row.get("claim_index")), []), key=_index_of(index_field))
            if [r.get(name) for r in rows] != list(expected_list(claim_row) or []) or any(
                    r.get(index_field) != index or r.get("evaluation_id") != claim_row.get("evaluation_id")
                    for index, r in enumerate(rows)):
                report.fail(f"record {record_id} claim {claim_row.get('claim_index')}: {name}.jsonl differs from the claim")
    for (record_id, index) in grouped:
        report.fail(f"{name}.jsonl names claim {index} of record {record_id}, which the bundle does not hold")


def check_columns(folder, report):
    """columns.csv, which people read to know what a column shows, must say what this script checks."""
    try:
        with (folder / "columns.csv").open(encoding="utf-8", newline="") as handle:
            stated = [(row.get("file"), row.get("column"), row.get("source")) for row in csv.DictReader(handle)]
    except (OSError, csv.Error, UnicodeDecodeError):
        report.fail("columns.csv: missing or not readable")
        return
    expected = [(f"{table}.csv", column, source) for table, columns in COLUMNS.items() for column, source in columns]
    if stated == expected:
        report.ok("columns.csv names the sources this checker fixes")
        return
    for (file, column, source) in sorted(set(stated) - set(expected), key=str):
        report.fail(f"columns.csv: {file} column {column} is said to show {source!r}, which is not its source")
    if set(stated) == set(expected):
        report.fail("columns.csv: its rows are out of order")
    elif not set(stated) - set(expected):
        report.fail("columns.csv: columns are missing")


def check_csv(folder, tables, report):
    for table, rows in tables.items():
        spec = COLUMNS[table]
        try:
            handle = (folder / f"{table}.csv").open(encoding="utf-8", newline="")
        except OSError:
            report.fail(f"{table}.csv: missing")
            continue
        with handle:
            reader = csv.reader(handle)
            try:
                header = next(reader, [])
                if header != [column for column, _ in spec]:
                    report.fail(f"{table}.csv: its header is not this checker's columns")
                    continue
                count, bad = 0, 0
                for index, cells in enumerate(reader):
                    count += 1
                    if index >= len(rows):
                        continue
                    if len(cells) != len(spec):
                        report.fail(f"{table}.csv row {index + 1}: {len(cells)} cells, expected {len(spec)}")
                        bad += 1
                        continue
                    for (column, source), cell in zip(spec, cells):  # noqa: B905 - Python 3.9 has no strict=
                        if cell != neutralise(render(lookup(rows[index], source))):
                            report.fail(f"{table}.csv row {index + 1} column {column}: {cell[:80]!r} differs from "
                                        f"the JSONL value its column shows")
                            bad += 1
            except (csv.Error, UnicodeDecodeError) as exc:
                report.fail(f"{table}.csv: not readable as CSV ({exc})")
                continue
            if count != len(rows):
                report.fail(f"{table}.csv has {count} rows, {table}.jsonl {len(rows)}")
            elif not bad:
                report.ok(f"{table}.csv: {count} rows, every cell matches its source")


# -- main ---------------------------------------------------------------------------------------------------


def verify(folder, key=None, public_key=None, witness=None, quiet=False):
    """Every check; `report.authenticated` says whether a key given vouched for the manifest."""
    report = Report(quiet)
    manifest_path = folder / "manifest.json"
    if not manifest_path.is_file():
        report.fail("manifest.json is missing: not a bundle")
        return report
    manifest_bytes = manifest_path.read_bytes()
    try:
        manifest = json.loads(manifest_bytes.decode("utf-8"))
    except ValueError:
        report.fail("manifest.json is not JSON")
        return report
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        stated = manifest.get("format") if isinstance(manifest, dict) else None
        report.fail(f"unknown bundle format {stated!r} (this checker reads {FORMAT})")
        return report
    report.authenticated = check_manifest_signatures(folder, manifest_bytes, manifest, public_key, key, report)
    for name, ledger in LEDGERS.items():
        stated = (manifest.get("ledgers") or {}).get(name) or {}
        if stated.get("hashed_fields") != ledger["hashed_fields"] or stated.get("sensitive_fields") != ledger["sensitive_fields"] \
                or (stated.get("optional_fields") or []) != ledger["optional_fields"]:
            report.fail(f"the manifest's field list of the {name} ledger differs from this checker's")
    check_files(folder, manifest, report)
    tables = {name: read_jsonl(folder / f"{name}.jsonl", report) for name in TABLES}
    check_entries(manifest, tables, report)
    claimed = check_rows(tables, report)
    links = read_jsonl(folder / "chain" / "links.jsonl", report)
    anchors = read_jsonl(folder / "chain" / "checkpoints.jsonl", report)
    check_windows(manifest, links, report)
    check_chain(links, anchors, claimed, report)
    check_derived(manifest, tables, report)
    check_columns(folder, report)
    check_csv(folder, tables, report)
    if key is not None:
        check_signatures(anchors, key, report)
    if witness is not None:
        check_witness(anchors, witness, report)
    return report


def _raise_csv_limit():
    """Genuine cells can be any size (a long prompt or answer): lift the csv module's 128 KiB default."""
    limit = sys.maxsize
    while True:
        try:
            csv.field_size_limit(limit)
            return
        except OverflowError:
            limit //= 2


def main(argv=None):
    parser = argparse.ArgumentParser(description="Check an audit-trail bundle offline.")
    parser.add_argument("bundle", type=Path, help="the bundle folder")
    parser.add_argument("--public-key", help="the service's Ed25519 public key (hex, base64, PEM, or a file), "
                                             "as published apart from the bundle")
    parser.add_argument("--hmac-key-file", type=Path, help="a file holding the service's HMAC key")
    parser.add_argument("--witness", type=Path, help="a copy of the chain witness (JSON lines)")
    parser.add_argument("--quiet", action="store_true", help="print failures only")
    args = parser.parse_args(argv)
    _raise_csv_limit()
    try:
        public_key = load_ed25519(parse_public_key(args.public_key)) if args.public_key is not None else None
        key = args.hmac_key_file.read_bytes().strip() if args.hmac_key_file else None
    except UsageError as exc:
        print(f"verify_bundle.py: {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:
        print(f"verify_bundle.py: cannot use the key: {exc}", file=sys.stderr)
        return 2
    if not args.bundle.is_dir():
        print(f"verify_bundle.py: {args.bundle}: not a folder", file=sys.stderr)
        return 2
    if not args.quiet:
        own = Path(__file__)
        print(f"checker: {own.name} sha256 {file_sha256(own)} (compare with the hash the service publishes)")
    report = verify(args.bundle, key=key, public_key=public_key, witness=args.witness, quiet=args.quiet)
    for failure in report.failures[:50]:
        print(f"FAILED: {failure}")
    if len(report.failures) > 50:
        print(f"... and {len(report.failures) - 50} more failures")
    if report.failures:
        print(f"bundle NOT verified: {len(report.failures)} problem(s)")
        return 1
    if not report.authenticated:
        print("bundle consistent but NOT authenticated: nothing ties it to the service without a key "
              "(give --public-key, as the service publishes it)")
        return 3
    print("bundle verified")
    return 0


if __name__ == "__main__":
    sys.exit(main())
