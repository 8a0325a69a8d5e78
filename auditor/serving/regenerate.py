"""Regenerate on block: when the output gate blocks an answer, ask again (up to N more times) with a
corrective system message that lists the contradicted claims and their evidence.

Every attempt is a request of its own in the trail: its own record, committed before the next attempt
starts, whose `details.regeneration` names the attempt number, the first and previous attempt's audit
ids and the claims it was told to avoid. The client gets the last attempt (and its audit id); the
response's `audit.attempts` lists every attempt's id. Applies to non-streaming requests only: a stream has
already delivered the sentences before the blocked one, and they cannot be taken back.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from auditor.serving.inference import InferenceService, Outcome, Prepared

MAX_LISTED_CLAIMS = 10
_HEADER = ("Your previous answer was withheld by a compliance check because these statements contradict "
           "authoritative sources:")
_FOOTER = ("Answer the question again without these errors. Where you are not sure of a fact, say so "
           "instead of stating it.")

# corrective message -> a freshly prepared request carrying it
Reprepare = Callable[[str], Awaitable[Prepared]]


def corrective_message(contradicted: list[dict[str, Any]]) -> str:
    """The system message of the next attempt: each contradicted claim with what contradicts it."""
    lines = [_HEADER]
    for claim in contradicted[:MAX_LISTED_CLAIMS]:
        evidence = next((e for e in claim.get("evidence") or [] if isinstance(e, dict) and e.get("description")), None)
        why = f": {evidence['description']}" if evidence else ""
        source = f" (source: {evidence['source']})" if evidence and evidence.get("source") else ""
        lines.append(f"- \"{str(claim.get('text', '')).strip()}\"{why}{source}")
    if len(contradicted) > MAX_LISTED_CLAIMS:
        lines.append(f"- and {len(contradicted) - MAX_LISTED_CLAIMS} more")
    lines.append(_FOOTER)
    return "\n".join(lines)


def with_correction(inputs: dict[str, Any], correction: str) -> dict[str, Any]:
    """The request's inputs with the correction as (or merged into) the leading system message; for a text
    prompt, placed before it."""
    if "messages" not in inputs:
        return {**inputs, "prompt": f"{correction}\n\n{inputs['prompt']}"}
    messages = [dict(m) for m in inputs["messages"]]
    if messages and messages[0]["role"] in ("system", "developer"):
        messages[0]["content"] = f"{messages[0]['content']}\n\n{correction}"
    else:
        messages.insert(0, {"role": "system", "content": correction})
    return {**inputs, "messages": messages}


async def complete_with_regeneration(inference: InferenceService, prepared: Prepared, *, retries: int,
                                     reprepare: Reprepare) -> Outcome:
    """Run `prepared`; while the gate blocks and retries remain, prepare a corrected request and run it."""
    first_id = prepared.audit_id
    prepared.details["regeneration"] = {"attempt": 1, "max_attempts": retries + 1}
    outcome = await inference.complete(prepared)
    attempts = [outcome.audit_id]
    while outcome.status == "blocked" and len(attempts) <= retries:
        claims = outcome.contradicted
        prepared = await reprepare(corrective_message(claims))
        prepared.details["regeneration"] = {
            "attempt": len(attempts) + 1, "max_attempts": retries + 1, "first_audit_id": first_id,
            "previous_audit_id": attempts[-1],
            "corrected_claims": [{"text": c.get("text"), "rule_ids": c.get("rule_ids")} for c in claims[:MAX_LISTED_CLAIMS]],
        }
        outcome = await inference.complete(prepared)
        attempts.append(outcome.audit_id)
    if len(attempts) > 1:
        outcome.audit_extras["attempts"] = attempts
    return outcome
