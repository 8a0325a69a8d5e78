"""What the lifespan loads once: the engine (with its JSON-mode and KG-constraint logits processors),
the domain KGs (for entity linking) and the rule-pack validators (the output gate)."""

from __future__ import annotations

import functools
import gc
import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from auditor.gate.gate import GateDecision, Verification
from auditor.packs.source import PackSource
from auditor.serving.knowledge import KgConstraint
from auditor.settings import Settings
from engine.async_engine import AsyncLLMEngine
from engine.config import EngineConfig
from engine.core_client import EngineCoreClient
from engine.kv_spec import KVCacheSpec
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
from rules import EmptyTextError, Report, RulePack, load_pack
from rules import verify as rules_verify

logger = logging.getLogger("auditor")


class EngineLoadError(RuntimeError):
    """The inference engine could not be loaded (no model at the configured path, unreadable checkpoint)."""


def load_kgs(domains: Iterable[str]) -> dict[str, KnowledgeGraph]:
    return {domain: load_kg(domain) for domain in domains}


def engine_options(settings: Settings) -> dict[str, Any]:
    """build_engine's keyword arguments from the settings: cache limits, the index cache, the engine config
    (threads, dtype, batch size, priority aging, KV cache)."""
    return {"limits": CacheLimits(views=settings.kg_constraint_views,
                                  masks_per_view=settings.kg_constraint_masks_per_view,
                                  shared_per_domain=settings.kg_constraint_shared_per_domain),
            "index_cache_dir": settings.index_cache_dir, "config": engine_config(settings)}


def engine_config(settings: Settings) -> EngineConfig:
    config = EngineConfig(num_threads=settings.engine_threads, dtype=settings.engine_dtype,
                          kv_cache_dtype=settings.kv_cache_dtype,
                          kv_cache_strategy=settings.kv_cache_strategy, kv_cache_cold_dir=str(settings.kv_cache_cold_dir),
                          kv_cache_cold_bytes=settings.kv_cache_cold_bytes)
    if settings.engine_max_num_seqs is not None:
        config.max_num_seqs = settings.engine_max_num_seqs
    if settings.engine_aging_seconds is not None:
        config.aging_seconds = settings.engine_aging_seconds
    return config


def check_engine_settings(settings: Settings) -> None:
    """Raise ValueError naming the setting when the engine settings cannot work (with this model), so that
    `auditor serve` refuses them in one line before it starts. A missing checkpoint is the engine's to report."""
    config = engine_config(settings)
    config.validate()
    if config.kv_cache_strategy == "tiered":
        cold_dir = settings.kv_cache_cold_dir
        try:
            cold_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ValueError(f"kv_cache_cold_dir {cold_dir}: cannot create it ({exc.strerror})") from None
        if not os.access(cold_dir, os.W_OK):
            raise ValueError(f"kv_cache_cold_dir {cold_dir} is not writable")
    path = settings.resolved_model_path()
    if (path / "config.json").is_file():
        model_config = load_model_config(path)
        KVCacheSpec.from_configs(model_config, config, model_config.torch_dtype)


@dataclass(frozen=True, slots=True)
class KgStoreFollow:
    """Where an engine core in its own process follows the store's KG versions (imports, rollbacks), so that its
    KG-constraint processor gets them without a restart, as the API process's linking and validators do."""

    database_url: str
    refresh_s: float


def core_kg_store(settings: Settings) -> KgStoreFollow:
    return KgStoreFollow(settings.database_url, settings.kg_refresh_s or 5.0)


def build_engine(path: Path, kgs: Mapping[str, KnowledgeGraph] | Sequence[str], *,
                 limits: CacheLimits | None = None, index_cache_dir: Path | None = None,
                 config: EngineConfig | None = None, kg_store: KgStoreFollow | None = None) -> LLMEngine:
    """The engine for a checkpoint folder, with JSON mode and one KG-constraint processor for all domains.

    Module-level and picklable with its arguments: it is what the engine-core process runs to build its
    engine. `kgs` may be domain names, loaded here (in that process) rather than sent across. With `kg_store`
    (an engine core in its own process) the constraint follows the store's KG versions from here."""
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
    domains = list(kgs)
    del kgs
    if kg_store is not None:
        _follow_kg_versions_in_core(kg_store, domains, processors[1])
    engine = LLMEngine.from_pretrained(path, config, logits_processors=processors)
    gc.collect()
    malloc_trim()   # what building the KGs and compiling left behind
    return engine


def load_engine(path: Path, kgs: Mapping[str, KnowledgeGraph] | Sequence[str], *, process: bool = False,
                address: str | None = None, limits: CacheLimits | None = None, index_cache_dir: Path | None = None,
                config: EngineConfig | None = None,
                kg_store: KgStoreFollow | None = None) -> AsyncLLMEngine | EngineCoreClient:
    """The async engine: in this process (`process=False`); an engine core in its own process, launched now
    and ready once `await engine.start()` returns (meanwhile the caller may load other things); or, with
    `address`, a client of a core that runs on its own there (`auditor engine-core`)."""
    if not path.is_dir():
        raise EngineLoadError(f"no model at {path}: set AUDITOR_MODEL_PATH to a Hugging Face-style model folder")
    if address is not None:
        return EngineCoreClient.connect(address, load_tokenizer(path))
    build = functools.partial(build_engine, path, kgs, limits=limits, index_cache_dir=index_cache_dir, config=config)
    if not process:   # in this process: the API's own KG follower reaches the processor (`kg_listeners`)
        return AsyncLLMEngine(build())
    build = functools.partial(build, kg_store=kg_store)
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

    def use_kg(self, kg: KnowledgeGraph) -> None:
        """Serve another version of a domain's KG from now on (`auditor.kg.live`)."""
        self.kgs[kg.domain] = kg

    def constraint_for(self, domain: str, prompt: str) -> KgConstraint | None:
        kg = self.kgs.get(domain)
        if kg is None:
            return None
        defaults = DOMAIN_DEFAULTS.get(domain)
        linker = get_linker(kg, defaults.types if defaults else None)
        anchors = list(dict.fromkeys(m.entity_id for m in linker.link(prompt)))
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

    def warm_up(self) -> None:
        """Run each pack once so the first request does not pay for loading validators and registries."""
        for domain in self.bundled:
            self.verify("Warm-up sentence.", domain=domain, prompt=None)

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
            report = rules_verify(text, domain, prompt=prompt, pack=pack, intent=intent, kg=self.kgs[domain])
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


# Texts that make each domain's validators build what they index per KG version (mentions, case index).
_WARM_TEXTS = {"legal": "See Brown v. Board of Education, 347 U.S. 483 (1954).",
               "medical": "Metformin 500 mg twice daily treats type 2 diabetes.",
               "finance": "Iran is on the FATF black list; the sanctions list names Acme Ltd."}


def kg_listeners(engine: Any, verifier: Any, knowledge: Any) -> list[Callable[[KnowledgeGraph], None]]:
    """What a new KG version must reach in this process, in order: its indexes built (linker, validators),
    the decoding constraint's masks when the engine runs in this process, then linking and the output gate.
    An engine core in its own process follows the store itself (`KgStoreFollow`)."""
    processors = [p for p in getattr(getattr(engine, "engine", None), "processors", [])
                  if isinstance(p, KGConstraintProcessor)]

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


def _follow_kg_versions_in_core(store: KgStoreFollow, domains: list[str], processor: KGConstraintProcessor) -> None:
    """In an engine core's own process: register each new KG version with the constraint processor. Until it
    has, requests linked under the newer version carry entity ids it does not hold; it drops those
    (`kg_version` differs) instead of refusing the request."""
    from auditor.kg.live import LiveKnowledgeGraphs
    from auditor.store.database import Database

    live = LiveKnowledgeGraphs(Database(store.database_url), domains, refresh_s=store.refresh_s,
                               listeners=[lambda kg: processor.register(kg, domain=kg.domain)])
    try:
        live.refresh()
    except Exception:   # the store may not be migrated yet: the follower retries
        logger.exception("engine core: could not read the KG versions in the store yet")
    live.start()
