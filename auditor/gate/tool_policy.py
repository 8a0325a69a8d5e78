"""Gate policies on tool calls: allow-lists per intent or tenant, and argument rules.

A policy file (YAML; built in: `tool_policies.yaml`, or `AUDITOR_TOOL_POLICY_FILE`) lists policies:

- `allow_list`: for requests whose intent is in `intents` (or whose tenant is in `tenants`), a call to a
  function not in `functions` takes the policy's action;
- `argument_threshold`: a call to one of `functions` ("*": any) whose `argument` (a dotted path into the
  arguments) is a number above `above` takes the action unless the request's intent is in `unless_intents`.
  A number written as a string counts too ("20,000", "1e999", "nan" above any threshold): the schema may not
  be strict, and a string must not slip past.

Actions: `block` (the call is withheld from the client) or `annotate` (delivered, with the policy's message).
Each decision is a `GateDecision` of stage "tool", kept in the record like every other gate decision.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

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
    value = _number(_lookup(arguments, policy.argument or ""))
    if value is not None and policy.above is not None and value > policy.above:
        return policy.message or f"{policy.argument} = {value:g} is above {policy.above:g}"
    return None


def _lookup(arguments: Any, path: str) -> Any:
    value = arguments
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            number = float(value.replace(",", "").replace("_", "").strip())
        except ValueError:
            return None
        return math.inf if math.isnan(number) else number   # "nan" must not compare its way past a threshold
    return None
