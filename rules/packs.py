"""Rule packs: versioned YAML files that say which validators run, how severe a failure is and what to do.

A pack is `rules/packs/<domain>.yaml`:

    domain: medical
    version: "2026.12.1"
    rules:
      - id: med.dose.max_daily
        description: Stated doses must not exceed the labelled maximum daily dose.
        validator: medical.dose
        parameters: {}
        severity: high                 # low | medium | high | critical
        on_fail: block                 # annotate | redact | block | refuse
        intents: ["*"]                 # or a list such as ["medical-diagnosis"]

The pack hash (sha256 of the canonical JSON of the validated pack) travels with every report so an
audit record names exactly which rules judged it.
"""

from __future__ import annotations

import hashlib
import json
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from rules.report import OnFail, Severity
from rules.validators import VALIDATORS

PACK_DIR = Path(__file__).parent / "packs"
DOMAINS = ("finance", "medical", "legal")


class PackError(ValueError):
    """A rule pack that cannot be loaded; the message names the rule and the field."""


class Rule(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1, pattern=r"^[a-z0-9_]+(\.[a-z0-9_]+)+$")
    description: str = Field(min_length=1)
    validator: str
    parameters: dict[str, Any] = Field(default_factory=dict)
    severity: Severity
    on_fail: OnFail
    intents: list[str] | str = "*"

    @field_validator("validator")
    @classmethod
    def _known_validator(cls, name: str) -> str:
        if name not in VALIDATORS:
            raise ValueError(f"unknown validator {name!r} (known: {', '.join(sorted(VALIDATORS))})")
        return name

    @field_validator("intents")
    @classmethod
    def _intents_shape(cls, intents: list[str] | str) -> list[str] | str:
        if isinstance(intents, str) and intents != "*":
            raise ValueError('intents must be "*" or a list of intent names')
        return intents

    def applies_to(self, intent: str | None) -> bool:
        if intent is None or self.intents == "*":
            return True
        return "*" in self.intents or intent in self.intents


class RulePack(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    domain: str
    version: str = Field(min_length=1)
    rules: list[Rule]

    @field_validator("domain")
    @classmethod
    def _known_domain(cls, domain: str) -> str:
        if domain not in DOMAINS:
            raise ValueError(f"unknown domain {domain!r} (known: {', '.join(DOMAINS)})")
        return domain

    @cached_property   # a frozen pack's hash never changes; verify() reads it for every sentence
    def hash(self) -> str:
        canonical = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    def rules_for(self, intent: str | None) -> list[Rule]:
        return [rule for rule in self.rules if rule.applies_to(intent)]

    def rule(self, rule_id: str) -> Rule:
        for rule in self.rules:
            if rule.id == rule_id:
                return rule
        raise KeyError(rule_id)


def parse_pack(data: Any, *, origin: str = "<pack>") -> RulePack:
    """Validate raw pack data; errors name the rule (index and id) and the field."""
    if not isinstance(data, dict):
        raise PackError(f"{origin}: a rule pack must be a mapping with domain, version and rules")
    try:
        pack = RulePack.model_validate(data)
    except ValidationError as exc:
        raise PackError(f"{origin}: {_describe(exc, data)}") from None
    seen: set[str] = set()
    for index, rule in enumerate(pack.rules):
        if rule.id in seen:
            raise PackError(f"{origin}: rules[{index}] (id {rule.id!r}): field 'id': duplicate rule id")
        seen.add(rule.id)
    return pack


def _describe(exc: ValidationError, data: dict[str, Any]) -> str:
    first = exc.errors()[0]
    loc = list(first["loc"])
    if len(loc) >= 2 and loc[0] == "rules" and isinstance(loc[1], int):
        index = loc[1]
        raw_rules = data.get("rules") or []
        rule_id = raw_rules[index].get("id") if index < len(raw_rules) and isinstance(raw_rules[index], dict) else None
        field = ".".join(str(part) for part in loc[2:]) or "<rule>"
        return f"rules[{index}] (id {rule_id!r}): field {field!r}: {first['msg']}"
    field = ".".join(str(part) for part in loc) or "<pack>"
    return f"field {field!r}: {first['msg']}"


def load_pack(domain_or_path: str | Path) -> RulePack:
    """Load the bundled pack of a domain ("medical") or a pack file at a path; bundled packs are cached."""
    if isinstance(domain_or_path, str) and domain_or_path in DOMAINS:
        return _bundled_pack(domain_or_path)
    path = Path(domain_or_path)
    if not path.is_file():
        raise PackError(f"no rule pack at {path} (bundled domains: {', '.join(DOMAINS)})")
    return _read_pack(path)


@lru_cache(maxsize=len(DOMAINS))
def _bundled_pack(domain: str) -> RulePack:
    return _read_pack(PACK_DIR / f"{domain}.yaml")


def _read_pack(path: Path) -> RulePack:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise PackError(f"{path}: not valid YAML: {str(exc).splitlines()[0]}") from None
    return parse_pack(data, origin=str(path))
