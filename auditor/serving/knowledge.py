"""KG wiring for a request: link entities in the prompt, compute the allowed neighbourhood, and hand
the engine's KG-constraint processor its per-request arguments (`extra_args["kg_constraint"]`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(slots=True)
class KgConstraint:
    domain: str
    kg_version: str | None
    anchor_ids: list[str] = field(default_factory=list)
    allowed_entity_ids: list[str] = field(default_factory=list)

    @property
    def applied(self) -> bool:
        """Constrain only when the prompt names entities: with no anchors there is no neighbourhood."""
        return bool(self.anchor_ids)

    def extra_args(self) -> dict[str, Any]:
        return {"kg_constraint": {"domain": self.domain, "allowed_entity_ids": self.allowed_entity_ids,
                                  "kg_version": self.kg_version}}


class Knowledge(Protocol):
    def constraint_for(self, domain: str, prompt: str) -> KgConstraint | None: ...

    def kg_version(self, domain: str) -> str | None: ...

    def violations(self, domain: str, text: str, allowed_entity_ids: list[str]) -> list[str]:
        """Entities of the constrained types `text` names none of whose readings is allowed (their ids)."""
        ...


class NoKnowledge:
    """No KG available: requests run unconstrained and records carry no KG version."""

    def constraint_for(self, domain: str, prompt: str) -> KgConstraint | None:
        return None

    def kg_version(self, domain: str) -> str | None:
        return None

    def violations(self, domain: str, text: str, allowed_entity_ids: list[str]) -> list[str]:
        return []
