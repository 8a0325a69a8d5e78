"""Loading the inference engine: in an engine-core process of its own (the default), in this process, or as a
client of a core that runs on its own (`auditor engine-core`).

Both sides of the process boundary import this module, so it imports nothing heavy at the top. torch, the model
and the KG constraint are imported by whoever builds the engine (the core process, or this one in in-process
mode); an API process that talks to a core tokenises with the `tokenizers` package and never loads torch.
"""

from __future__ import annotations

import functools
import gc
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from auditor.settings import Settings
from engine.affinity import CpuSplit, split_cpus
from engine.allocator import AllocatorUnavailable, preload_for
from engine.checkpoint import load_tokenizer
from engine.core_client import EngineCoreClient
from engine.errors import ModelLoadError

if TYPE_CHECKING:
    from engine.async_engine import AsyncLLMEngine
    from engine.config import EngineConfig
    from engine.llm_engine import LLMEngine
    from knowledge_graphs import KnowledgeGraph
    from knowledge_graphs.decoding.constraint import KGConstraintProcessor
    from knowledge_graphs.decoding.constraint_masks import CacheLimits

logger = logging.getLogger("auditor")


class EngineLoadError(RuntimeError):
    """The inference engine could not be loaded (no model at the configured path, unreadable checkpoint)."""


def engine_options(settings: Settings) -> dict[str, Any]:
    """build_engine's keyword arguments from the settings: cache limits, the index cache, the engine config
    (threads, dtype, batch size, priority aging, KV cache)."""
    from knowledge_graphs.decoding.constraint_masks import CacheLimits

    return {"limits": CacheLimits(views=settings.kg_constraint_views,
                                  view_bytes=int(settings.kg_constraint_view_mb * 2**20),
                                  masks_per_view=settings.kg_constraint_masks_per_view,
                                  memo_bytes=int(settings.kg_constraint_memo_mb * 2**20)),
            "index_cache_dir": settings.index_cache_dir, "config": engine_config(settings)}


def engine_config(settings: Settings) -> EngineConfig:
    from engine.config import EngineConfig

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
    from engine.config import load_model_config
    from engine.kernels.kv_layout import value_group_size

    config = engine_config(settings)
    config.validate()
    engine_cpu_split(settings)   # a CPU list this process may not use
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
        value_group_size(load_model_config(path), config)


@dataclass(frozen=True, slots=True)
class KgStoreFollow:
    """Where an engine core in its own process follows the store's KG versions (imports, rollbacks), so that its
    KG-constraint processor gets them without a restart, as the API process's linking and validators do."""

    database_url: str
    refresh_s: float
    hmac_key: str | None = field(default=None, repr=False)   # checks the KG rows (auditor.kg.anchors)


def core_kg_store(settings: Settings) -> KgStoreFollow:
    return KgStoreFollow(settings.database_url, settings.kg_refresh_s or 5.0, settings.hmac_key.get_secret_value())


def build_engine(path: Path, kgs: Mapping[str, KnowledgeGraph] | Sequence[str], *,
                 limits: CacheLimits | None = None, index_cache_dir: Path | None = None,
                 config: EngineConfig | None = None, kg_store: KgStoreFollow | None = None) -> LLMEngine:
    """The engine for a checkpoint folder, with JSON mode and one KG-constraint processor for all domains.

    Module-level and picklable with its arguments: it is what the engine-core process runs to build its
    engine. `kgs` may be domain names, loaded here (in that process) rather than sent across: from their
    snapshots in `index_cache_dir` when there are any (`_register_from_disk`), and never through `load_kg`'s
    cache, so that they are freed once compiled. With `kg_store` (an engine core in its own process) the
    constraint follows the store's KG versions from here."""
    from engine.llm_engine import LLMEngine
    from engine.loader import load_model_config
    from engine.memory import malloc_trim
    from engine.processors.json_mode import JsonModeProcessor
    from engine.processors.logit_bias import LogitBiasProcessor
    from knowledge_graphs.decoding.constraint import KGConstraintProcessor

    _require_model(path)
    model_config = load_model_config(path)
    tokenizer = load_tokenizer(path, model_config)
    constraint = KGConstraintProcessor(tokenizer, vocab_size=model_config.vocab_size,
                                       eos_token_ids=tokenizer.eos_token_ids, kgs=dict(kgs) if isinstance(kgs, Mapping)
                                       else None, limits=limits, index_cache_dir=index_cache_dir)
    domains = list(kgs)
    read_whole_kgs = isinstance(kgs, Mapping)
    if not isinstance(kgs, Mapping):
        for domain in domains:
            read_whole_kgs |= _register_from_disk(constraint, domain, index_cache_dir)
    del kgs
    processors = [
        JsonModeProcessor(tokenizer.backend, vocab_size=model_config.vocab_size, eos_token_ids=tokenizer.eos_token_ids),
        constraint,
        LogitBiasProcessor(model_config.vocab_size),
    ]
    if kg_store is not None:
        _follow_kg_versions_in_core(kg_store, domains, constraint)
    engine = LLMEngine.from_pretrained(path, config, logits_processors=processors)
    if read_whole_kgs:   # what building or reading the KGs and compiling left behind (~0.3 CPU s to collect)
        gc.collect()
    malloc_trim()
    return engine


def _register_from_disk(constraint: KGConstraintProcessor, domain: str, index_cache_dir: Path | None) -> bool:
    """Register `domain` with the constraint, from its KG's outline when the snapshot has one (a warm start: the
    whole KG is read only if the compiled index is not on disk). True when the whole KG was read or built."""
    from knowledge_graphs import build_kg, load_snapshot
    from knowledge_graphs.registry import load_snapshot_outline

    if index_cache_dir is None:
        constraint.register(build_kg(domain), domain=domain)
        return True
    outline = load_snapshot_outline(domain, index_cache_dir)
    if outline is None:
        constraint.register(load_snapshot(domain, index_cache_dir), domain=domain)   # writes the outline
        return True
    read: list[bool] = []

    def whole_kg() -> KnowledgeGraph:
        read.append(True)
        return load_snapshot(domain, index_cache_dir)

    constraint.register_outline(outline, whole_kg, domain=domain)
    return bool(read)


def configure_malloc_for(settings: Settings) -> None:
    """glibc's malloc as the settings ask (arenas, mmap threshold), in the process that calls it: the API process
    and the engine core each call it before their threads allocate."""
    from engine.memory import configure_malloc

    configure_malloc(arena_max=settings.malloc_arena_max, mmap_threshold_bytes=settings.malloc_mmap_threshold_kb * 1024)


@dataclass(frozen=True, slots=True)
class EngineRecipe:
    """`build_engine` as the settings ask for it, run where it is called: what `start_engine_core` hands the
    process it spawns (picklable), so that the option objects, and torch with them, exist only there."""

    settings: Settings

    def __call__(self) -> LLMEngine:
        # No cyclic GC while building (torch's import and the KGs are millions of long-lived objects, and
        # build_engine collects once at its end); what is built is frozen out of the GC's view for the step loop.
        from auditor.logs import configure as configure_logging

        # a spawned core starts with no handlers: its lines take the service's format (a host's stay as they are)
        configure_logging(self.settings.log_format, level=self.settings.log_level)
        configure_malloc_for(self.settings)   # before the step loop's threads allocate
        enabled = gc.isenabled()
        gc.disable()
        try:
            engine = build_engine(self.settings.resolved_model_path(), list(self.settings.domains),
                                  kg_store=core_kg_store(self.settings), **engine_options(self.settings))
            gc.freeze()
            return engine
        finally:
            if enabled:
                gc.enable()


def start_engine_core(settings: Settings) -> EngineCoreClient | None:
    """The engine core the settings ask for, launched now (it loads while the caller loads other things) and
    ready once `await client.start()` returns; or a client of the core at `AUDITOR_ENGINE_ADDRESS`; None when
    the engine runs in this process (`AUDITOR_ENGINE_PROCESS=false`: see `load_engine`)."""
    if not settings.local_engine:   # an API replica that only forwards to upstream models
        return None
    path = settings.resolved_model_path()
    _require_model(path)
    if settings.engine_address is None and not settings.engine_process:
        return None
    try:   # before any process is launched: a folder without a readable tokenizer is the caller's error
        tokenizer = load_tokenizer(path)
    except ModelLoadError as exc:
        raise EngineLoadError(f"cannot load the model at {path}: {exc}") from exc
    if settings.engine_address is not None:
        return EngineCoreClient.connect(settings.engine_address, tokenizer)
    try:
        preload = preload_for(settings.engine_allocator)
    except AllocatorUnavailable as exc:
        raise EngineLoadError(str(exc)) from exc
    cpus = engine_cpu_split(settings)
    client = EngineCoreClient(EngineRecipe(with_core_threads(settings, cpus)), tokenizer, preload=preload, cpus=cpus)
    client.launch()
    return client


def engine_cpu_split(settings: Settings) -> CpuSplit | None:
    """The core's CPUs and the API process's, of those this process may use (`engine.affinity`); None: no split.
    ValueError for a CPU list that cannot be used."""
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
    return split_cpus(settings.engine_cpus, allowed, engine_threads=settings.engine_threads)


def with_core_threads(settings: Settings, cpus: CpuSplit | None) -> Settings:
    """The settings the core builds its engine from: torch threads, when not set, one per CPU of its own."""
    if cpus is None or settings.engine_threads is not None:
        return settings
    return settings.model_copy(update={"engine_threads": len(cpus.core)})


def load_engine(path: Path, kgs: Mapping[str, KnowledgeGraph] | Sequence[str], *, process: bool = False,
                address: str | None = None, limits: CacheLimits | None = None, index_cache_dir: Path | None = None,
                config: EngineConfig | None = None,
                kg_store: KgStoreFollow | None = None) -> AsyncLLMEngine | EngineCoreClient:
    """The async engine: in this process (`process=False`); an engine core in its own process, launched now
    and ready once `await engine.start()` returns (meanwhile the caller may load other things); or, with
    `address`, a client of a core that runs on its own there (`auditor engine-core`)."""
    _require_model(path)
    if address is not None:
        return EngineCoreClient.connect(address, load_tokenizer(path))
    build = functools.partial(build_engine, path, kgs, limits=limits, index_cache_dir=index_cache_dir, config=config)
    if not process:   # in this process: the API's own KG follower reaches the processor (`kg_listeners`)
        from engine.async_engine import AsyncLLMEngine

        return AsyncLLMEngine(build())
    client = EngineCoreClient(functools.partial(build, kg_store=kg_store), load_tokenizer(path))
    client.launch()
    return client


def _require_model(path: Path) -> None:
    if not path.is_dir():
        raise EngineLoadError(f"no model at {path}: set AUDITOR_MODEL_PATH to a Hugging Face-style model folder")


def _follow_kg_versions_in_core(store: KgStoreFollow, domains: list[str], processor: KGConstraintProcessor) -> None:
    """In an engine core's own process: register each new KG version with the constraint processor. Until it
    has, requests linked under the newer version carry entity ids it does not hold; it drops those
    (`kg_version` differs) instead of refusing the request."""
    from auditor.kg.live import LiveKnowledgeGraphs
    from auditor.store.database import ChainKey, Database

    key = ChainKey(store.hmac_key.encode()) if store.hmac_key else None
    live = LiveKnowledgeGraphs(Database(store.database_url, chain_key=key), domains, refresh_s=store.refresh_s,
                               listeners=[lambda kg: processor.register(kg, domain=kg.domain)])
    try:
        live.refresh()
    except Exception:   # the store may not be migrated yet: the follower retries
        logger.exception("engine core: could not read the KG versions in the store yet")
    live.start()
