"""The bundle's column dictionary: every CSV column of a regulator bundle, the JSONL value it shows (a dotted
path into the row), its type and what it means. `columns.csv` in each bundle is written from this.
`verify_bundle.py` holds its own copy of the (column, source) pairs (`COLUMNS`), so that a bundle cannot
re-label its columns; tests/auditor/trail/test_bundle.py keeps the two the same."""

from __future__ import annotations

from collections.abc import Sequence

# (column, source path in the JSONL row, type, description)
Columns = Sequence[tuple[str, str, str, str]]

RECORD_COLUMNS: Columns = (
    ("id", "id", "text", "The audit id (X-Audit-Id of the response)"),
    ("seq", "seq", "integer", "Position in the records ledger"),
    ("occurred_at", "occurred_at", "time", "When the output was produced (an imported output's own timestamp)"),
    ("recorded_at", "created_at", "time", "When the record was written to the trail"),
    ("kind", "kind", "text", "record"),
    ("tenant", "tenant", "text", "The customer the request belonged to"),
    ("key_id", "key_id", "text", "The API key that made the request"),
    ("request_id", "request_id", "text", "The client's X-Request-Id (PII-redacted as stored)"),
    ("endpoint", "endpoint", "text", "chat, completions, or import (an output of another model)"),
    ("intent", "intent", "text", "X-Intent of the request"),
    ("domain", "domain", "text", "finance, medical or legal"),
    ("model_id", "model_id", "text", "The model that produced the output"),
    ("checkpoint_hash", "checkpoint_hash", "text", "Hash of the model's weights"),
    ("kg_version", "kg_version", "text", "Knowledge-graph version at generation"),
    ("rule_pack_hash", "rule_pack_hash", "text", "Rule pack the gate used at generation"),
    ("status", "status", "text", "completed, refused, blocked or error"),
    ("finish_reason", "finish_reason", "text", "Why generation stopped"),
    ("gate_action", "gate_action", "text", "What the output gate did (empty for imports: never gated)"),
    ("temperature", "sampling_params.temperature", "number", "Sampling temperature"),
    ("top_p", "sampling_params.top_p", "number", "Nucleus sampling threshold"),
    ("max_tokens", "sampling_params.max_tokens", "integer", "Token limit of the answer"),
    ("seed", "sampling_params.seed", "integer", "Sampling seed"),
    ("presence_penalty", "sampling_params.presence_penalty", "number", "Presence penalty"),
    ("frequency_penalty", "sampling_params.frequency_penalty", "number", "Frequency penalty"),
    ("stop", "sampling_params.stop", "json", "Stop sequences (JSON list)"),
    ("response_format", "sampling_params.response_format.type", "text", "json_object / json_schema when asked"),
    ("prompt_tokens", "prompt_tokens", "integer", "Prompt length in tokens"),
    ("completion_tokens", "completion_tokens", "integer", "Answer length in tokens"),
    ("content_mode", "content_mode", "text", "raw, redacted (PII removed) or hash (no text kept)"),
    ("prompt", "prompt", "text", "The prompt as stored (empty when purged or hash-only)"),
    ("output", "output", "text", "What the model generated, as stored"),
    ("delivered_output", "delivered_output", "text", "What the client received, as stored"),
    ("error", "error", "text", "Error, if the request failed"),
    ("purged_at", "purged_at", "time", "When retention removed the text (the digests remain)"),
    ("current_source", "current.source", "text", "Where the current verdicts come from: evaluation, inline (the gate's), none"),
    ("current_evaluation_id", "current.evaluation_id", "text", "The evaluation holding the current verdicts"),
    ("current_rule_pack_version", "current.rule_pack.version", "text", "Rule-pack version of the current verdicts"),
    ("current_rule_pack_hash", "current.rule_pack.hash", "text", "Rule-pack hash of the current verdicts"),
    ("current_rule_pack_active", "current.rule_pack.active", "boolean", "Whether that pack is the active one"),
    ("current_supported", "current.n_supported", "integer", "Claims supported by evidence"),
    ("current_contradicted", "current.n_contradicted", "integer", "Claims contradicted by evidence"),
    ("current_unverifiable", "current.n_unverifiable", "integer", "Claims that could not be checked offline"),
    ("current_fabrications", "current.n_fabrication", "integer",
     "Claims citing a reference no index holds: possible fabrications, or absent inside complete coverage"),
    ("current_fer", "current.fer", "number", "Factual error rate: contradicted / (supported + contradicted)"),
    ("current_citation_confidence", "current.citation_confidence", "number", "Share of citations that resolve"),
    ("current_verdict_action", "current.verdict_action", "text", "What the verdicts ask the gate to do"),
    ("current_max_severity", "current.max_severity", "text", "Highest severity among broken rules"),
    ("current_reviewed", "current.reviewed", "boolean", "Whether a person reviewed the current verdicts"),
    ("current_disputed", "current.disputed", "integer", "Claims that review disputed"),
    ("record_hash", "record_hash", "text", "The record's hash in the chain"),
)
CLAIM_COLUMNS: Columns = (
    ("record_id", "record_id", "text", "The record the claim was found in"),
    ("source", "source", "text", "evaluation or inline (the gate's own verdicts)"),
    ("evaluation_id", "evaluation_id", "text", "The evaluation that judged it (empty for inline)"),
    ("claim_index", "claim_index", "integer", "Position among the verdict set's claims"),
    ("verdict", "claim.verdict", "text", "supported, contradicted or unverifiable"),
    ("kind", "claim.kind", "text", "What sort of claim (dose, case_citation, identifier, ...)"),
    ("text", "claim.text", "text", "The claim as it appears in the output"),
    ("confidence", "claim.confidence", "number", "How sure the verdict is (0-1)"),
    ("span_start", "claim.span.0", "integer", "Character offset where the claim starts in the output"),
    ("span_end", "claim.span.1", "integer", "Character offset where it ends"),
    ("rule_ids", "claim.rule_ids", "json", "Rules that decided the verdict (JSON list)"),
    ("gate_rule_id", "claim.gate.rule_id", "text", "The rule a contradicted claim broke"),
    ("gate_severity", "claim.gate.severity", "text", "Its severity"),
    ("gate_on_fail", "claim.gate.on_fail", "text", "What the rule asks the gate to do"),
    ("subject", "claim.subject", "text", "Knowledge-graph entity the claim is about"),
)
EVIDENCE_COLUMNS: Columns = (
    ("record_id", "record_id", "text", "The record"),
    ("evaluation_id", "evaluation_id", "text", "The evaluation (empty for inline verdicts)"),
    ("claim_index", "claim_index", "integer", "The claim (see claims.csv)"),
    ("evidence_index", "evidence_index", "integer", "Position among the claim's evidence"),
    ("kind", "evidence.kind", "text", "kg_fact, registry, checksum, list_snapshot, rule, ..."),
    ("description", "evidence.description", "text", "What the evidence says"),
    ("source", "evidence.source", "text", "Where it comes from (package and version, label, list)"),
    ("locator", "evidence.locator", "text", "Section, table or URL in the source"),
    ("as_of", "evidence.as_of", "text", "Date of the source"),
    ("rule_id", "evidence.rule_id", "text", "The rule whose validator produced it"),
)
DECISION_COLUMNS: Columns = (
    ("record_id", "record_id", "text", "The record"),
    ("decision_index", "decision_index", "integer", "Position among the record's gate decisions"),
    ("stage", "decision.stage", "text", "input or output"),
    ("rule_id", "decision.rule_id", "text", "The gate rule"),
    ("action", "decision.action", "text", "allow, annotate, redact, block or refuse"),
    ("reason", "decision.reason", "text", "Why"),
)
EVALUATION_COLUMNS: Columns = (
    ("id", "id", "text", "The evaluation"),
    ("record_id", "record_id", "text", "The record it judged"),
    ("seq", "seq", "integer", "Position in the evaluations ledger"),
    ("current", "current", "boolean", "Whether it holds the record's current verdicts"),
    ("job_id", "job_id", "text", "The re-audit job that made it (empty: live scoring)"),
    ("evaluator_version", "evaluator_version", "text", "Validator code version"),
    ("rule_pack_version", "rule_pack_version", "text", "Rule-pack version"),
    ("rule_pack_hash", "rule_pack_hash", "text", "Rule-pack hash"),
    ("kg_version", "kg_version", "text", "Knowledge-graph version"),
    ("status", "status", "text", "done or failed"),
    ("failure_reason", "failure_reason", "text", "Why it failed"),
    ("fer", "fer", "number", "Factual error rate"),
    ("citation_confidence", "citation_confidence", "number", "Share of citations that resolve"),
    ("joint_score", "joint_score", "number", "(1 - FER) x citation confidence"),
    ("created_at", "created_at", "time", "When it was made"),
    ("record_hash", "record_hash", "text", "Its hash in the evaluations ledger"),
)
REVIEW_COLUMNS: Columns = (
    ("id", "id", "text", "The review (an event in the events ledger)"),
    ("seq", "seq", "integer", "Position in the events ledger"),
    ("at", "at", "time", "When it was made"),
    ("record_id", "record_id", "text", "The record reviewed"),
    ("reviewer_key_id", "key_id", "text", "The reviewer's API key"),
    ("reviewer_tenant", "tenant", "text", "The reviewer's tenant"),
    ("reviewer_role", "role", "text", "reviewer, auditor or admin"),
    ("verdict_set", "payload.verdict_ref", "text", "The evaluation (or inline verdicts) reviewed"),
    ("disputed", "payload.disputed", "integer", "How many claims were disputed"),
    ("items", "payload.items", "json", "Per claim: index, decision (confirm / false_positive / false_negative)"),
    ("note", "note", "json", "The reviewer's notes (JSON text)"),
    ("record_hash", "record_hash", "text", "Its hash in the events ledger"),
)
TABLES: dict[str, Columns] = {"records": RECORD_COLUMNS, "claims": CLAIM_COLUMNS, "evidence": EVIDENCE_COLUMNS,
                              "gate_decisions": DECISION_COLUMNS, "evaluations": EVALUATION_COLUMNS,
                              "reviews": REVIEW_COLUMNS}


