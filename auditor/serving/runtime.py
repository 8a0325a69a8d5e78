"""What the lifespan loads once: the engine (with its JSON-mode and KG-constraint logits processors),
the domain KGs (for entity linking) and the rule-pack validators (the output gate)."""

from __future__ import annotations

import functools
import gc
import logging
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from auditor.gate.gate import GateDecision, Verification
from auditor.serving.knowledge import KgConstraint
from auditor.settings import Settings
from engine.async_engine import AsyncLLMEngine
from engine.config import EngineConfig
from engine.core_client import EngineCoreClient
from engine.llm_engine import LLMEngine, load_tokenizer
from engine.loader import load_model_config
from engine.memory import malloc_trim
from engine.processors.json_mode import JsonModeProcessor
from engine.processors.logit_bias import LogitBiasProcessor
from knowledge_graphs import KnowledgeGraph, load_kg
from knowledge_graphs.decoding.constraint import DOMAIN_DEFAULTS, KGConstraintProcessor, allowed_entities
from knowledge_graphs.decoding.constraint_masks import CacheLimits
from knowledge_graphs.detection import DomainDetector
from knowledge_graphs.linking import get_linker
from knowledge_graphs.registry import build_kg
from rules import EmptyTextError, Report, load_pack
from rules import verify as rules_verify

logger = logging.getLogger("auditor")


class EngineLoadError(RuntimeError):
    """The inference engine could not be loaded (no model at the configured path, unreadable checkpoint)."""


def load_kgs(domains: Iterable[str]) -> dict[str, KnowledgeGraph]:
    return {domain: load_kg(domain) for domain in domains}


def engine_options(settings: Settings) -> dict[str, Any]:
    """build_engine's keyword arguments from the settings: cache limits, the index cache, threads."""
    return {"limits": CacheLimits(views=settings.kg_constraint_views,
                                  masks_per_view=settings.kg_constraint_masks_per_view,
                                  shared_per_domain=settings.kg_constraint_shared_per_domain),
            "index_cache_dir": settings.index_cache_dir, "config": EngineConfig(num_threads=settings.engine_threads)}


def build_engine(path: Path, kgs: Mapping[str, KnowledgeGraph] | Sequence[str], *,
                 limits: CacheLimits | None = None, index_cache_dir: Path | None = None,
                 config: EngineConfig | None = None) -> LLMEngine:
    """The engine for a checkpoint folder, with JSON mode and one KG-constraint processor for all domains.

    Module-level and picklable with its arguments: it is what the engine-core process runs to build its
    engine. `kgs` may be domain names, loaded here (in that process) rather than sent across."""
    if not path.is_dir():
        raise EngineLoadError(f"no model at {path}: set AUDITOR_MODEL_PATH to a Hugging Face-style model folder")
    if not isinstance(kgs, Mapping):   # built, not taken from load_kg's cache: freed once compiled
        kgs = {domain: build_kg(domain) for domain in kgs}
    model_config = load_model_config(path)
    tokenizer = load_tokenizer(path, model_config)
    processors = [
        JsonModeProcessor(tokenizer.backend, vocab_size=model_config.vocab_size, eos_token_ids=tokenizer.eos_token_ids),
        KGConstraintProcessor(tokenizer, vocab_size=model_config.vocab_size, eos_token_ids=tokenizer.eos_token_ids,
                              kgs=dict(kgs), limits=limits, index_cache_dir=index_cache_dir),
        LogitBiasProcessor(model_config.vocab_size),
    ]
    del kgs
    engine = LLMEngine.from_pretrained(path, config, logits_processors=processors)
    gc.collect()
    malloc_trim()   # what building the KGs and compiling left behind
    return engine


def load_engine(path: Path, kgs: Mapping[str, KnowledgeGraph] | Sequence[str], *, process: bool = False,
                address: str | None = None, limits: CacheLimits | None = None, index_cache_dir: Path | None = None,
                config: EngineConfig | None = None) -> AsyncLLMEngine | EngineCoreClient:
    """The async engine: in this process (`process=False`); an engine core in its own process, launched now
    and ready once `await engine.start()` returns (meanwhile the caller may load other things); or, with
    `address`, a client of a core that runs on its own there (`auditor engine-core`)."""
    if not path.is_dir():
        raise EngineLoadError(f"no model at {path}: set AUDITOR_MODEL_PATH to a Hugging Face-style model folder")
    if address is not None:
        return EngineCoreClient.connect(address, load_tokenizer(path))
    build = functools.partial(build_engine, path, kgs, limits=limits, index_cache_dir=index_cache_dir, config=config)
    if not process:
        return AsyncLLMEngine(build())
    client = EngineCoreClient(build, load_tokenizer(path))
    client.launch()
    return client


def load_detector(kgs: Mapping[str, KnowledgeGraph], *, threshold: float) -> DomainDetector:
    """The domain detector over these KGs, warmed once (MiniLM load, linkers) so no request pays for it."""
    detector = DomainDetector(kgs, threshold=threshold)
    detector.detect("Warm-up question?", "Warm-up answer.")
    return detector


class KgKnowledge:
    """Links the prompt's entities in the domain KG; their neighbourhood is what the output may name."""

    def __init__(self, kgs: Mapping[str, KnowledgeGraph]) -> None:
        self.kgs = dict(kgs)

    def kg_version(self, domain: str) -> str | None:
        kg = self.kgs.get(domain)
        return kg.version if kg is not None else None

    def constraint_for(self, domain: str, prompt: str) -> KgConstraint | None:
        kg = self.kgs.get(domain)
        if kg is None:
            return None
        defaults = DOMAIN_DEFAULTS.get(domain)
        linker = get_linker(kg, defaults.types if defaults else None)
        anchors = list(dict.fromkeys(m.entity_id for m in linker.link(prompt)))
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
