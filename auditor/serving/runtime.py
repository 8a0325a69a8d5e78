"""What the lifespan loads once: the engine (with its JSON-mode and KG-constraint logits processors),
the domain KGs (for entity linking) and the rule-pack validators (the output gate)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from auditor.gate.gate import GateDecision, Verification
from auditor.serving.engine_loading import (  # noqa: F401 - where callers have always found them
    EngineLoadError,
    build_engine,
    engine_options,
    load_engine,
)
from auditor.serving.knowledge import KgConstraint
from knowledge_graphs import KnowledgeGraph, keep_snapshots, load_kg
from knowledge_graphs.detection import DomainDetector
from knowledge_graphs.linking import get_linker
from knowledge_graphs.neighbourhood import DOMAIN_DEFAULTS, allowed_entities
from rules import EmptyTextError, Report, load_pack
from rules import verify as rules_verify

logger = logging.getLogger("auditor")


def load_kgs(domains: Iterable[str], *, snapshot_dir: Path | None = None) -> dict[str, KnowledgeGraph]:
    """The shared KGs (`load_kg`: the embedded worker's scoring finds the same objects). snapshot_dir: read
    them, and the linkers and mention automata built from them, from snapshots there (written when absent)."""
    if snapshot_dir is not None:
        keep_snapshots(snapshot_dir)
    return {domain: load_kg(domain) for domain in domains}


def load_detector(kgs: Mapping[str, KnowledgeGraph], *, threshold: float) -> DomainDetector:
    """The domain detector over these KGs, warmed once (MiniLM load, linkers) so no request pays for it."""
    detector = DomainDetector(kgs, threshold=threshold)
    detector.detect("Warm-up question?", "Warm-up answer.")
    return detector


class KgKnowledge:
    """Links the prompt's entities in the domain KG; their neighbourhood is what the output may name."""

    def __init__(self, kgs: Mapping[str, KnowledgeGraph]) -> None:
        self.kgs = dict(kgs)

    def warm_up(self) -> None:
        """Build (or read back) each domain's linker now, not inside the first request that names the domain."""
        for domain in self.kgs:
            self._linker(domain)

    def _linker(self, domain: str) -> Any:
        defaults = DOMAIN_DEFAULTS.get(domain)
        return get_linker(self.kgs[domain], defaults.types if defaults else None)

    def kg_version(self, domain: str) -> str | None:
        kg = self.kgs.get(domain)
        return kg.version if kg is not None else None

    def constraint_for(self, domain: str, prompt: str) -> KgConstraint | None:
        kg = self.kgs.get(domain)
        if kg is None:
            return None
        anchors = list(dict.fromkeys(m.entity_id for m in self._linker(domain).link(prompt)))
        allowed = sorted(allowed_entities(kg, anchors)) if anchors else []
        return KgConstraint(domain, kg.version, anchors, allowed)


class RulesVerifier:
    """The output gate's validators: the domain's rule pack via `rules.verify`, one sentence at a time."""

    def __init__(self, kgs: Mapping[str, KnowledgeGraph]) -> None:
        self.kgs = dict(kgs)
        self.packs = {domain: load_pack(domain) for domain in self.kgs}

    def warm_up(self) -> None:
        """Run each pack once so the first request does not pay for loading validators and registries."""
        for domain in self.packs:
            self.verify("Warm-up sentence.", domain=domain, prompt=None)

    def rule_pack_hash(self, domain: str | None) -> str | None:
        pack = self.packs.get(domain or "")
        return pack.hash if pack is not None else None

    def verify(self, text: str, *, domain: str | None, prompt: str | None, intent: str | None = None) -> Verification:
        if domain not in self.packs:
            return Verification()
        try:
            report = rules_verify(text, domain, prompt=prompt, pack=self.packs[domain], intent=intent,
                                  kg=self.kgs[domain])
        except EmptyTextError:
            return Verification()
        return _verification(text, report)


def _verification(text: str, report: Report) -> Verification:
    claims: list[dict[str, Any]] = [claim.model_dump(mode="json") for claim in report.claims]
    for claim in claims:
        claim["versions"] = {"kg": report.versions.kg, "rule_pack": report.versions.rule_pack,
                             "evaluator": report.versions.evaluator}
    decisions = []
    redact_spans = []
    for action in report.gate_actions:
        claim = report.claims[action.claim_index]
        decisions.append(GateDecision(
            "output", action.rule_id, action.on_fail,
            f"{claim.kind} claim {claim.text!r} is {claim.verdict} ({action.severity})",
            {"claim_index": action.claim_index, "severity": action.severity},
        ))
        if action.on_fail == "redact":
            redact_spans.append(claim.span)
    redacted = None
    if redact_spans:
        pieces, cursor = [], 0
        for start, end in sorted(redact_spans):
            if start >= cursor:
                pieces += [text[cursor:start], "[redacted]"]
                cursor = end
        redacted = "".join(pieces) + text[cursor:]
    return Verification(claims=claims, decisions=decisions, redacted_text=redacted)
