"""What the lifespan loads once: the engine (with its JSON-mode and KG-constraint logits processors),
the domain KGs (for entity linking) and the rule-pack validators (the output gate)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from auditor.gate.gate import GateDecision, Verification
from auditor.packs.source import PackSource
from auditor.serving.engine_loading import (  # noqa: F401 - where callers have always found them
    EngineLoadError,
    KgStoreFollow,
    build_engine,
    check_engine_settings,
    core_kg_store,
    engine_config,
    engine_options,
    load_engine,
)
from auditor.serving.knowledge import KgConstraint
from knowledge_graphs import KnowledgeGraph, keep_snapshots, load_kg
from knowledge_graphs.detection import DomainDetector
from knowledge_graphs.linking import get_linker
from knowledge_graphs.minilm import load_encoder
from knowledge_graphs.neighbourhood import DOMAIN_DEFAULTS, allowed_entities
from rules import EmptyTextError, Report, RulePack, load_pack
from rules import verify as rules_verify
from rules.warm_up import WARM_UP_TEXTS

logger = logging.getLogger("auditor")


def load_kgs(domains: Iterable[str], *, snapshot_dir: Path | None = None) -> dict[str, KnowledgeGraph]:
    """The shared KGs (`load_kg`: the embedded worker's scoring finds the same objects). snapshot_dir: read
    them, and the linkers and mention automata built from them, from snapshots there (written when absent)."""
    if snapshot_dir is not None:
        keep_snapshots(snapshot_dir)
    return {domain: load_kg(domain) for domain in domains}


def load_detector(kgs: Mapping[str, KnowledgeGraph], *, threshold: float, embedding_cache: int,
                  embedding_dtype: str = "auto") -> DomainDetector:
    """The domain detector over these KGs, warmed once (MiniLM load, linkers) so no request pays for it."""
    detector = DomainDetector(kgs, threshold=threshold, embedding_cache=embedding_cache,
                              embedding_dtype=embedding_dtype)
    detector.detect("Warm-up question?", "Warm-up answer.")
    load_encoder(embedding_dtype).warm_up()   # the shapes most forwards have, before any request needs them
    detector.evidence.warm_up()   # the warm-up texts name no entity, so they never reach wordfreq
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

    def use_kg(self, kg: KnowledgeGraph) -> None:
        """Serve another version of a domain's KG from now on (`auditor.kg.live`)."""
        self.kgs[kg.domain] = kg

    def constraint_for(self, domain: str, prompt: str) -> KgConstraint | None:
        kg = self.kgs.get(domain)
        if kg is None:
            return None
        anchors = list(dict.fromkeys(m.entity_id for m in self._linker(domain).link(prompt)))
        allowed = sorted(allowed_entities(kg, anchors)) if anchors else []
        return KgConstraint(domain, kg.version, anchors, allowed)

    def violations(self, domain: str, text: str, allowed_entity_ids: list[str]) -> list[str]:
        """As `benchmarks.hallucination_eval` judges them: a mention (exact alias linking over the constrained
        entity types) none of whose candidate readings is in the allowed set."""
        kg = self.kgs.get(domain)
        if kg is None:
            return []
        defaults = DOMAIN_DEFAULTS.get(domain)
        allowed = set(allowed_entity_ids)
        mentions = get_linker(kg, defaults.types if defaults else None).link(text)
        return list(dict.fromkeys(m.entity_id for m in mentions if not allowed.intersection(m.candidate_ids)))


class RulesVerifier:
    """The output gate's validators: the domain's rule pack via `rules.verify`, one sentence at a time.

    With a pack source (`auditor.packs.source.StorePacks`) the pack is the store's active one, so a reload
    reaches the gate within seconds; without one, the bundled packs."""

    def __init__(self, kgs: Mapping[str, KnowledgeGraph], packs: PackSource | None = None) -> None:
        self.kgs = dict(kgs)
        self.source = packs
        self.bundled = {domain: load_pack(domain) for domain in self.kgs}

    def pack(self, domain: str | None) -> RulePack | None:
        if domain not in self.bundled:
            return None
        active = self.source.pack_for(domain) if self.source is not None else None
        return active or self.bundled[domain]

    def _active_packs(self) -> dict[str, RulePack]:
        return {domain: pack for domain in self.bundled if (pack := self.pack(domain)) is not None}

    def warm_up(self) -> None:
        """Run each pack once so the first request does not pay for loading validators and registries."""
        for domain in self.bundled:
            self.verify("Warm-up sentence.", domain=domain, prompt=None)

    def warm_registries(self) -> None:
        """Build what each pack's validators build on first use (the ICD-10-CM index, the drug dictionary,
        citation parsing), which takes seconds: after ready, on a background thread (`auditor.app`)."""
        for domain in self.bundled:
            if domain in WARM_UP_TEXTS:
                self.verify(WARM_UP_TEXTS[domain], domain=domain, prompt=None)

    def rule_pack_hash(self, domain: str | None) -> str | None:
        pack = self.pack(domain)
        return pack.hash if pack is not None else None

    def use_kg(self, kg: KnowledgeGraph) -> None:
        """Judge with another version of a domain's KG from now on (`auditor.kg.live`)."""
        if kg.domain in self.kgs:
            self.kgs[kg.domain] = kg

    def verify(self, text: str, *, domain: str | None, prompt: str | None, intent: str | None = None) -> Verification:
        pack = self.pack(domain)
        if pack is None or domain is None:
            return Verification()
        try:
            # the other domains an answer touches are judged under their own active packs and served KGs
            report = rules_verify(text, domain, prompt=prompt, pack=pack, intent=intent, kg=self.kgs[domain],
                                  packs=self._active_packs(), kgs=self.kgs)
        except EmptyTextError:
            return Verification()
        return _verification(text, report)


def _verification(text: str, report: Report) -> Verification:
    claims: list[dict[str, Any]] = [claim.model_dump(mode="json") for claim in report.claims]
    for claim in claims:
        # a claim judged in another domain the answer touched names that domain's KG and pack
        judged_under = report.versions.other_domains.get(claim.get("domain") or report.domain)
        claim["versions"] = {"kg": judged_under.kg if judged_under else report.versions.kg,
                             "rule_pack": judged_under.rule_pack if judged_under else report.versions.rule_pack,
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


# Texts that make each domain's validators build what they index per KG version (mentions, case index).
_WARM_TEXTS = {"legal": "See Brown v. Board of Education, 347 U.S. 483 (1954).",
               "medical": "Metformin 500 mg twice daily treats type 2 diabetes.",
               "finance": "Iran is on the FATF black list; the sanctions list names Acme Ltd."}


def kg_listeners(engine: Any, verifier: Any, knowledge: Any) -> list[Callable[[KnowledgeGraph], None]]:
    """What a new KG version must reach in this process, in order: its indexes built (linker, validators),
    the decoding constraint's masks when the engine runs in this process, then linking and the output gate.
    An engine core in its own process follows the store itself (`KgStoreFollow`)."""
    in_process = getattr(getattr(engine, "engine", None), "processors", None)
    processors = []
    if in_process:   # an engine in this process (torch is loaded already): its constraint gets new versions
        from knowledge_graphs.decoding.constraint import KGConstraintProcessor

        processors = [p for p in in_process if isinstance(p, KGConstraintProcessor)]

    def warm(kg: KnowledgeGraph) -> None:
        defaults = DOMAIN_DEFAULTS.get(kg.domain)
        get_linker(kg, defaults.types if defaults else None)
        if kg.domain in _WARM_TEXTS:
            rules_verify(_WARM_TEXTS[kg.domain], kg.domain, kg=kg)

    def constrain(kg: KnowledgeGraph) -> None:
        for processor in processors:
            processor.register(kg, domain=kg.domain)

    def serve(kg: KnowledgeGraph) -> None:
        for target in (knowledge, verifier):
            use = getattr(target, "use_kg", None)
            if callable(use):
                use(kg)

    return [warm, constrain, serve]
