"""Scene 2: a wrong answer, contradicted by the KG and blocked by the output gate.

An ordinary request to the service, with a question the bundled model answers wrongly under greedy
decoding (it is a 5M-parameter model: it gets about half of such questions wrong). The record holds
what the model said, what the client got instead, and each contradicted claim with its rule and evidence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from auditor.demo.script import ScriptedRequest, chat


@dataclass(frozen=True, slots=True)
class BlockedResult:
    request: ScriptedRequest
    audit_id: str
    gate_action: str
    model_output: str            # what the model said (the record keeps it: the demo stores raw content)
    delivered: str               # what the client received
    contradicted: list[dict[str, Any]]
    rule_ids: list[str]          # the output-stage gate decisions that blocked it


def ask_and_show_block(client: httpx.Client, request: ScriptedRequest, *, max_tokens: int) -> BlockedResult:
    reply = chat(client, request, max_tokens=max_tokens)
    record = client.get(f"/v1/audits/{reply.audit_id}").raise_for_status().json()
    claims = [c for c in record.get("claims") or [] if isinstance(c, dict) and c.get("verdict") == "contradicted"]
    rules = [d.get("rule_id") or "" for d in record.get("gate_decisions") or []
             if isinstance(d, dict) and d.get("stage") == "output" and d.get("action") == "block"]
    return BlockedResult(request, reply.audit_id, record.get("gate_action") or "none", record.get("output") or "",
                         record.get("delivered_output") or reply.answer, claims, [r for r in rules if r])
