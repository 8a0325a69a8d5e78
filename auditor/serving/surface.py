"""The request surface beyond prompt and sampling: tools and their results, the caller's identifiers, logit
bias, echo, one of n choices; and what became of it, for the response's `audit` and the record's `details`.

The records ledger hashes a fixed list of fields, so all of this goes into `details` (hashed as one JSON
field). Text in it follows the request's content mode, like the prompt: raw, PII-redacted, or only its
SHA-256 ("hash").
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from auditor.gate.gate import GateDecision, OutputGate, Verifier, strongest
from auditor.gate.pii import redact_pii
from auditor.gate.tool_policy import ToolPolicyFile, check_calls
from auditor.serving.tools import ToolRequest, tool_results
from auditor.trail.chain import sha256_text


def stored_text(text: str, content_mode: str) -> dict[str, Any]:
    """A client- or model-written string as the record keeps it under the content mode."""
    digest = {"sha256": sha256_text(text)}
    if content_mode == "hash":
        return digest
    return {"text": text if content_mode == "raw" else redact_pii(text)[0], **digest}


def redacted_message(message: dict[str, Any]) -> dict[str, Any]:
    """A chat message as the "redacted" content mode stores it: PII out of its content and tool-call arguments."""
    redacted = {**message, "content": redact_pii(message.get("content") or "")[0]}
    if message.get("tool_calls"):
        redacted["tool_calls"] = [{**call, "function": {**call["function"], "arguments": _redacted_arguments(
            call["function"]["arguments"])}} for call in message["tool_calls"]]
    return redacted


def _redacted_arguments(arguments: Any) -> Any:
    if isinstance(arguments, str):
        return redact_pii(arguments)[0]
    if isinstance(arguments, dict):
        return {key: _redacted_arguments(value) for key, value in arguments.items()}
    if isinstance(arguments, list):
        return [_redacted_arguments(value) for value in arguments]
    return arguments


@dataclass(slots=True)
class RequestSurface:
    tools: ToolRequest | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)   # for the tool results they carry
    user: str | None = None
    safety_identifier: str | None = None
    metadata: dict[str, str] | None = None
    logit_bias: dict[int, float] | None = None
    echo: bool = False
    choice_index: int = 0
    n: int = 1
    group_id: str | None = None          # the audit id of choice 0, which names the response
    # filled while the request runs
    tool_result_checks: list[dict[str, Any]] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)      # what the model called (parsed)
    delivered_call_ids: list[str] = field(default_factory=list)
    structured: dict[str, Any] | None = None

    # -- before generation ----------------------------------------------------------------------
    def template_kwargs(self) -> dict[str, Any]:
        return self.tools.template_kwargs() if self.tools is not None else {}

    def check_tool_results(self, verifier: Verifier, *, domain: str | None) -> list[GateDecision]:
        """Tool results are claims like any other text: validated in the request's domain, their verdicts
        kept in the record; a contradicted claim in a result annotates the response."""
        decisions = []
        for result in tool_results(self.messages):
            found = verifier.verify(result["content"], domain=domain, prompt=None) if domain and result["content"] \
                else None
            claims = found.claims if found is not None else []
            counts = {verdict: sum(1 for c in claims if c.get("verdict") == verdict)
                      for verdict in ("supported", "contradicted", "unverifiable")}
            self.tool_result_checks.append({**result, "claims": claims, "verdicts": counts})
            if counts["contradicted"]:
                decisions.append(GateDecision(
                    "input", "tool.result.contradicted", "annotate",
                    f"the result of tool call {result['tool_call_id']!r} holds {counts['contradicted']} "
                    f"contradicted claim(s)", {"tool_call_id": result["tool_call_id"], "domain": domain}))
        return decisions

    # -- after generation -----------------------------------------------------------------------
    def finish_tools(self, text: str, *, audit_id: str, intent: str | None, tenant: str,
                     policies: ToolPolicyFile) -> tuple[str | None, list[dict[str, Any]], list[GateDecision]]:
        """(content, calls delivered to the client, the policies' decisions) from the gated output."""
        assert self.tools is not None
        content, calls = self.tools.parse(text, call_id_seed=audit_id)
        for call in calls:
            call["parsed_arguments"] = json.loads(call["function"]["arguments"])
        self.tool_calls = calls
        verdicts = check_calls(calls, intent=intent, tenant=tenant, policies=policies)
        blocked = {v.call_index for v in verdicts if v.decision.action == "block"}
        delivered = [{key: value for key, value in call.items() if key != "parsed_arguments"}
                     for index, call in enumerate(calls) if index not in blocked]
        self.delivered_call_ids = [call["id"] for call in delivered]
        return content, delivered, [v.decision for v in verdicts]

    def note_structured(self, events: list[dict[str, Any]], finish_reason: str, *, parses: bool) -> str:
        """Whether a constrained output was closed for the budget or cut; returns the finish_reason to report
        ("length" whenever max_tokens ended the value, even when the processor closed it so that it parses)."""
        closed = next((e for e in events if e.get("kind") == "closed_for_budget"), None)
        cut = finish_reason in ("length", "constraint_dead_end") or closed is not None
        self.structured = {"truncated": cut, "closed_for_budget": closed is not None, "parses": parses} \
            if cut else None
        return "length" if closed is not None else finish_reason

    # -- the record -------------------------------------------------------------------------------
    def record_details(self, content_mode: str, decisions: list[GateDecision]) -> dict[str, Any]:
        details: dict[str, Any] = {}
        if self.tools is not None:
            details["tools"] = self._tools_details(content_mode, decisions)
        if self.tool_result_checks:
            details["tool_results"] = [{
                "tool_call_id": r["tool_call_id"], "name": r["name"], "content": stored_text(r["content"], content_mode),
                "verdicts": r["verdicts"], "claims": r["claims"] if content_mode != "hash" else None,
            } for r in self.tool_result_checks]
        for key in ("user", "safety_identifier"):
            value = getattr(self, key)
            if value is not None:
                details[key] = stored_text(value, content_mode)
        if self.metadata is not None:
            details["metadata"] = {k: stored_text(v, content_mode) for k, v in self.metadata.items()}
        if self.logit_bias:
            details["logit_bias"] = {str(token): bias for token, bias in sorted(self.logit_bias.items())}
        if self.echo:
            details["echo"] = True
        if self.n > 1:
            details["choice"] = {"index": self.choice_index, "n": self.n, "group": self.group_id}
        if self.structured is not None:
            details["structured_output"] = self.structured
        return details

    def _tools_details(self, content_mode: str, decisions: list[GateDecision]) -> dict[str, Any]:
        assert self.tools is not None
        offered = [{"name": tool["function"]["name"],
                    "definition": stored_text(json.dumps(tool, ensure_ascii=False, sort_keys=True), content_mode)}
                   for tool in self.tools.tools]
        by_call: dict[str, list[str]] = {}
        for decision in decisions:
            if decision.stage == "tool":
                by_call.setdefault(decision.detail.get("tool_call_id", ""), []).append(decision.rule_id)
        calls = [{"id": call["id"], "name": call["function"]["name"],
                  "arguments": stored_text(call["function"]["arguments"], content_mode),
                  "delivered": call["id"] in self.delivered_call_ids, "rule_ids": by_call.get(call["id"], [])}
                 for call in self.tool_calls]
        return {"offered": offered, "tool_choice": self.tools.choice, "parallel_tool_calls": self.tools.parallel,
                "dialect": self.tools.dialect.name, "calls": calls}

    def audit_extras(self) -> dict[str, Any]:
        """What the response's `audit` adds for this surface."""
        extras: dict[str, Any] = {}
        if self.structured is not None:
            extras["structured_output"] = self.structured
        if self.tools is not None and self.tool_calls:
            extras["tool_calls"] = {"made": len(self.tool_calls), "delivered": len(self.delivered_call_ids)}
        return extras


def parses_as_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def apply_tool_decisions(gate: OutputGate, decisions: list[GateDecision]) -> str:
    """Add the tool policies' decisions to the output gate's (so the record and metrics see them); return the
    gate's strongest action after them."""
    gate.decisions.extend(decisions)
    gate.annotations.extend(d.reason for d in decisions if d.action == "annotate")
    return strongest([d.action for d in gate.decisions])
