"""What the gate withheld, said in OpenAI's standard fields: the `refusal` text (naming the rules and the audit
id) and `finish_reason: "content_filter"`, for input refusals and for output the gate withheld wholly or in part;
and the `context_length_exceeded` message, worded as OpenAI words it.

Withheld means the client did not get what the model wrote: an output decision that blocks (a sentence or a tool
call removed), redacts (text replaced) or refuses. Annotations withhold nothing, and input-stage redaction applies
to the stored prompt only."""

from __future__ import annotations

from collections.abc import Iterable

from auditor.gate.gate import GateDecision

WITHHOLDING_ACTIONS = frozenset({"redact", "block", "refuse"})


def withheld_rules(decisions: Iterable[GateDecision]) -> list[str]:
    """The rule ids of the output decisions that withheld text, each once, in the order they were taken."""
    rules: list[str] = []
    for decision in decisions:
        if decision.stage == "output" and decision.action in WITHHOLDING_ACTIONS and decision.rule_id not in rules:
            rules.append(decision.rule_id)
    return rules


def _rules(rule_ids: list[str]) -> str:
    return f"rule{'s' if len(rule_ids) > 1 else ''} {', '.join(rule_ids)}"


def output_refusal(rule_ids: list[str], audit_id: str, *, whole: bool) -> str:
    """The refusal text of an answer the output gate withheld, wholly or in part."""
    what = "This answer was" if whole else "Part of this answer was"
    return f"{what} withheld by the audit gate ({_rules(rule_ids)}); audit id {audit_id}."


def input_refusal(decision: GateDecision, audit_id: str) -> str:
    """The refusal text of a request the input gate refused."""
    return f"This request was refused by the audit gate ({_rules([decision.rule_id])}: {decision.reason}); " \
           f"audit id {audit_id}."


def context_length_message(*, endpoint: str, prompt_tokens: int, max_model_len: int) -> str:
    """OpenAI's wording for a prompt the model's context cannot hold ("messages" for chat, "prompt" otherwise)."""
    what = "messages" if endpoint == "chat" else "prompt"
    return (f"This model's maximum context length is {max_model_len} tokens. However, your {what} resulted in "
            f"{prompt_tokens} tokens, which leaves no room for the completion. Please reduce the length of the "
            f"{what}.")
