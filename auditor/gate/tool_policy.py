"""Gate policies on tool calls: allow-lists per intent or tenant, and argument rules.

A policy file (YAML; built in: `tool_policies.yaml`, or `AUDITOR_TOOL_POLICY_FILE`) lists policies:

- `allow_list`: for requests whose intent is in `intents` (or whose tenant is in `tenants`), a call to a
  function not in `functions` takes the policy's action;
- `argument_threshold`: a call to one of `functions` ("*": any) whose `argument` (a dotted path into the
  arguments) is a number above `above` takes the action unless the request's intent is in `unless_intents`.
  The schema may not be strict and the tool downstream may be lenient, so the rule fails closed: the path
  matches keys in any casing ("Amount", "AMOUNT") and goes through lists; a number written as a string counts
  in its common forms ("$50,000", "50 000 USD", "50k", "1e999"; `auditor.gate.amounts`), and a value that
  cannot be read as a number at all (null, true, "fifty thousand", an object) counts as above the threshold.

Actions: `block` (the call is withheld from the client) or `annotate` (delivered, with the policy's message).
Each decision is a `GateDecision` of stage "tool", kept in the record like every other gate decision.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from auditor.gate.amounts import amount_of
from auditor.gate.gate import GateDecision

BUILT_IN_POLICIES = Path(__file__).with_name("tool_policies.yaml")


class ToolPolicy(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    rule_id: str = Field(min_length=1)
    kind: Literal["allow_list", "argument_threshold"]
    action: Literal["block", "annotate"] = "block"
    message: str = ""
    intents: list[str] = Field(default_factory=list)       # allow_list: who it applies to
    tenants: list[str] = Field(default_factory=list)
    functions: list[str] | Literal["*"] = "*"
    argument: str | None = None                              # argument_threshold
    above: float | None = None
    unless_intents: list[str] = Field(default_factory=list)

    def applies_to_function(self, name: str) -> bool:
        return self.functions == "*" or name in self.functions


class ToolPolicyFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: str
    source: str
    as_of: str
    policies: list[ToolPolicy]

    def provenance(self) -> dict[str, str]:
        return {"version": self.version, "source": self.source, "as_of": self.as_of}


@lru_cache(maxsize=8)
def load_tool_policies(path: Path | None = None) -> ToolPolicyFile:
    """The policy file (built-in when `path` is None); raises ValueError when it is malformed."""
    source = path or BUILT_IN_POLICIES
    with source.open() as handle:
        return ToolPolicyFile.model_validate(yaml.safe_load(handle))


@dataclass(frozen=True, slots=True)
class CallDecision:
    call_index: int
    decision: GateDecision


def check_calls(calls: Iterable[dict[str, Any]], *, intent: str | None, tenant: str,
                policies: ToolPolicyFile) -> list[CallDecision]:
    """The decisions the policies take on each call ({"id", "function": {"name", "arguments" (JSON text)}},
    with `parsed_arguments` beside them)."""
    found = []
    for index, call in enumerate(calls):
        name = call["function"]["name"]
        for policy in policies.policies:
            reason = _violation(policy, name, call.get("parsed_arguments") or {}, intent=intent, tenant=tenant)
            if reason is not None:
                found.append(CallDecision(index, GateDecision(
                    "tool", policy.rule_id, policy.action, f"tool call {name!r}: {reason}",
                    {"tool_call_id": call["id"], "function": name, "intent": intent,
                     "provenance": policies.provenance()})))
    return found


def _violation(policy: ToolPolicy, name: str, arguments: dict[str, Any], *, intent: str | None,
               tenant: str) -> str | None:
    if policy.kind == "allow_list":
        covered = (intent is not None and intent in policy.intents) or tenant in policy.tenants
        if covered and not policy.applies_to_function(name):
            who = f"intent {intent!r}" if intent in policy.intents else f"tenant {tenant!r}"
            return policy.message or f"{name!r} is not on the allow-list for {who}"
        return None
    if not policy.applies_to_function(name) or intent in policy.unless_intents:
        return None
    if policy.above is None:
        return None
    for value in values_at(arguments, policy.argument or ""):
        amount = amount_of(value)
        if amount is None:
            return policy.message or (f"{policy.argument} = {_shown(value)} cannot be read as a number, so it "
                                      f"counts as above {policy.above:g}")
        if amount > policy.above:
            return policy.message or f"{policy.argument} = {amount:g} is above {policy.above:g}"
    return None


def values_at(arguments: Any, path: str) -> list[Any]:
    """Every value at a dotted path: keys match in any casing or width ("Amount", "ＡＭＯＵＮＴ"), and a list
    on the way (or at the end) contributes each of its items."""
    found = [arguments]
    for part in path.split("."):
        wanted, step = _key(part), []
        for value in _items(found):
            if isinstance(value, dict):
                step += [item for key, item in value.items() if isinstance(key, str) and _key(key) == wanted]
        found = step
    return list(_items(found))


def _items(values: list[Any]) -> Iterable[Any]:
    for value in values:
        if isinstance(value, list):
            yield from _items(value)
        else:
            yield value


def _key(name: str) -> str:
    folded = unicodedata.normalize("NFKC", name).casefold()
    return "".join(c for c in folded if unicodedata.category(c) != "Cf").strip()


def _shown(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."
