"""Service settings (pydantic-settings, env prefix AUDITOR_), behind a cached `get_settings()`."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from engine.affinity import check_setting

# Only acceptable in development: anyone reading this file could forge checkpoint signatures.
DEVELOPMENT_HMAC_KEY = "development-only-insecure-hmac-key"

ContentMode = Literal["raw", "redacted", "hash"]
MIN_HMAC_KEY_BYTES = 32


class SettingsError(ValueError):
    """Settings that must not be used (e.g. the development HMAC key in production)."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AUDITOR_", env_nested_delimiter="__", extra="ignore")

    environment: Literal["development", "test", "production"] = "development"
    database_url: str = "sqlite:///./var/audit.db"
    # SQLite only: FULL fsyncs every commit (audit-grade); NORMAL is durable except on power loss.
    sqlite_synchronous: Literal["FULL", "NORMAL"] = "FULL"
    auto_migrate: bool = True            # run `alembic upgrade head` when the app starts
    redis_url: str | None = None         # None -> background tasks run in-process
    model_path: Path | None = None       # None -> auditor/bundled_model/
    # The engine's KV cache (engine/kv_spec.py): int8/int4 keep more requests in the same memory at a small
    # accuracy cost; "tiered" keeps evicted prefix blocks in a bounded file under kv_cache_cold_dir. Every
    # audit record names both settings, since they can change outputs.
    kv_cache_dtype: Literal["auto", "int8", "int4"] = "auto"
    kv_cache_strategy: Literal["static", "tiered"] = "static"
    kv_cache_cold_dir: Path = Path("var/kv_cache")
    kv_cache_cold_bytes: int = Field(default=256 * 2**20, ge=1)
    local_engine: bool = True            # False: an API replica that only forwards to upstream models
    # The model registry (see auditor.serving.registry): a YAML file and/or inline JSON, id -> entry.
    models_file: Path | None = None
    models: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # How often a process checks the store for a new KG version (imports, rollbacks); 0: only on reload.
    kg_refresh_s: float = Field(default=5.0, ge=0, le=3600)
    # "auto": bf16 where the CPU has AMX / AVX512-BF16 (about 1.9x the fp32 throughput on the bundled model),
    # else the checkpoint's dtype. Every audit record names the dtype it was generated in.
    engine_dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    hmac_key: SecretStr = SecretStr(DEVELOPMENT_HMAC_KEY)
    # The Ed25519 key (PEM, PKCS#8) that signs regulator bundles beside the HMAC, so they can be checked with the
    # public key alone (`auditor audits bundle-keys` prints it). None: made on first use in the data directory in
    # development and test; production refuses to sign without it (see auditor.store.signing_key).
    signing_key_file: Path | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    # Log lines (auditor.logs): JSON lines with audit_id, request_id, tenant and trace_id for a log pipeline;
    # "auto" writes readable text on a terminal and JSON elsewhere.
    log_format: Literal["auto", "json", "text"] = "auto"
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    checkpoint_interval: int = Field(default=100, ge=1)   # a signed checkpoint every N records
    max_body_bytes: int = Field(default=1_000_000, ge=1024)
    domains: list[str] = Field(default_factory=lambda: ["medical", "finance", "legal"])
    default_max_tokens: int = Field(default=256, ge=1)
    # The engine core runs in its own process (its step loop shares no GIL with HTTP, validation and SQL) and is
    # restarted if it dies; False runs it on a thread of this process (tests, debugging).
    engine_process: bool = True
    # `auditor serve` with its own engine core: the API process's threads run this many nice values below the
    # core, as SCHED_BATCH, so where they share CPUs the core's step loop goes first (`engine.priority`, measured
    # there). 0: the same priority as the core.
    api_nice: int = Field(default=5, ge=0, le=19)
    # The engine core's malloc (`engine.allocator`): "jemalloc" preloads it into the core, which then keeps fewer
    # freed heap pages resident under sustained load (README, soak); "system" keeps glibc's; "auto" takes jemalloc
    # where the system has it (Debian: libjemalloc2) and glibc's elsewhere.
    engine_allocator: Literal["auto", "jemalloc", "system"] = "auto"
    # Join an engine core that runs on its own (`auditor engine-core`, shared by several API processes) at this
    # ZeroMQ address, e.g. "ipc:///run/auditor/engine", instead of starting one. Same model path on both sides.
    engine_address: str | None = None
    engine_threads: int | None = Field(default=None, ge=1)   # torch CPU threads of the engine; None: torch's default
    # The engine core's CPUs (`engine.affinity`, measured there): "off" leaves the core and the API process to the
    # scheduler; "auto" gives the core `engine_threads` CPUs (all but one when that is unset) and the API process
    # the others, where there are two or more; a CPU list ("2-7", "1,3") names the core's. Its torch threads then
    # default to its CPU count.
    engine_cpus: str = "off"
    # The most requests the engine runs at once (its batch); more wait in its priority queue. None: the engine's 64.
    engine_max_num_seqs: int | None = Field(default=None, ge=1, le=4096)
    # A waiting request gains one priority class per this many seconds waited, so none starves; waits much
    # longer than (classes x this) erase the intent priorities at the tail. None: the engine's 2 s.
    engine_aging_seconds: float | None = Field(default=None, gt=0, le=3600)
    # False: prompts are still linked to the KG and outputs checked for entities outside the allowed set (both
    # recorded), but decoding is not constrained. For measuring what the constraint buys (`auditor loadgen --sweep`).
    kg_constraint: bool = True
    # KG-constraint caches, least recently used dropped first: allowed sets kept per domain, and decoding states
    # (masks, transitions) kept per allowed set. Memory stays flat under traffic that keeps linking new sets.
    kg_constraint_views: int = Field(default=64, ge=1)
    kg_constraint_view_mb: float = Field(default=48.0, gt=0)   # and at most about this much of them per domain
    kg_constraint_masks_per_view: int = Field(default=4096, ge=16)
    # each memo a domain shares across its allowed sets (guard results, walk records, plain guard steps), in MB:
    # by bytes, as their entries grow with the vocabulary (thousands of token ids per entry at 152k)
    kg_constraint_memo_mb: float = Field(default=8.0, gt=0)
    # Where the compiled KG-constraint indices are kept between starts (keyed by KG version, tokenizer and code),
    # so a warm start skips most of the compile. None: no disk cache.
    index_cache_dir: Path | None = Path("./var/cache/kg-index")
    # How often freed heap pages are handed back to the OS (glibc malloc_trim) in the API process; the engine
    # core does the same in its own. 0: never.
    malloc_trim_interval_s: float = Field(default=30.0, ge=0)
    # The three glibc settings below reach the engine core only while it runs on glibc's malloc (see
    # engine_allocator): on jemalloc they set an allocator nothing uses there, harmlessly.
    # glibc malloc arenas per process (the API process and the engine core). glibc's default, 8 per core, gives
    # each of the many worker threads a heap of its own, whose freed pages fragment and stay resident; a few
    # shared arenas keep RSS flat under sustained load at no measurable throughput cost. 0: glibc's default.
    malloc_arena_max: int = Field(default=2, ge=0)
    # Heap blocks of at least this many kB get pages of their own, returned to the OS when freed (glibc's
    # M_MMAP_THRESHOLD, pinned: otherwise it rises to the largest block ever freed, up to 32 MB, and the allowed-set
    # views' arrays and dict tables fragment the heap as they come and go). 0: glibc's default.
    malloc_mmap_threshold_kb: int = Field(default=128, ge=0)
    # Per-domain retention of record content, in days (None/absent -> default_retention_days).
    retention_days: dict[str, int] = Field(default_factory=dict)
    default_retention_days: int | None = None             # None -> keep forever
    # How prompts/outputs are stored per domain: raw text, PII-redacted text, or only their SHA-256.
    content_mode: dict[str, ContentMode] = Field(default_factory=dict)
    default_content_mode: ContentMode = "redacted"
    injection_refuse_score: float = Field(default=0.8, gt=0, le=1)
    injection_annotate_score: float = Field(default=0.4, gt=0, le=1)
    # Where signed ledger heads and checkpoints are copied outside the database (see auditor.trail.witness):
    # "file:/other/volume/witness.jsonl" or "redis://host:6379/0?stream=auditor:witness". None: no witness.
    chain_witness: str | None = None
    witness_interval_s: float = Field(default=1.0, gt=0, le=3600)
    # A stuck store fails a request within this bound (503) instead of hanging: PostgreSQL lock and statement
    # timeouts on the request path, SQLite's busy timeout for writers.
    store_timeout_s: float = Field(default=5.0, gt=0, le=600)
    # /ready (auditor.serving.readiness) says "degraded", still 200, when scoring lags: no worker heartbeat within
    # ready_max_heartbeat_age_s (Celery mode), a pending outbox row older than ready_max_outbox_age_s, or an
    # upstream whose last ready_upstream_failures requests all failed. Redis is pinged at most every ready_cache_s.
    ready_max_outbox_age_s: float = Field(default=300.0, gt=0)
    ready_max_heartbeat_age_s: float = Field(default=60.0, gt=0)
    ready_upstream_failures: int = Field(default=3, ge=1)
    ready_cache_s: float = Field(default=5.0, ge=0, le=3600)
    # /metrics: "open" (no key), "key" (any valid API key; admin or auditor), or "off" here because a separate
    # listener serves it (`metrics_port`, bound to `metrics_host`).
    metrics_access: Literal["open", "key", "off"] = "key"
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = None
    # Intents that get their own label on /metrics (X-Intent is free-form: any other reads "other", none "none").
    # None: the intents the engine's scheduler ranks (engine.config's intent priorities).
    metrics_intents: list[str] | None = None
    # Tenants and models that get their own label on the cost metrics, first come first served; the rest "other".
    metrics_max_tenants: int = Field(default=100, ge=1, le=10_000)
    metrics_max_models: int = Field(default=20, ge=1, le=1000)
    # Prices for cost accounting (YAML; see deploy/prices.example.yaml): per 1k prompt and completion tokens per
    # model, or per engine-second. None: usage is still recorded, without a cost.
    price_table: Path | None = None
    # Output-gate PII rule: what to do with PII in model output, per domain (default for the rest).
    output_pii_action: dict[str, Literal["allow", "annotate", "redact", "block"]] = Field(default_factory=dict)
    default_output_pii_action: Literal["allow", "annotate", "redact", "block"] = "redact"
    # Rule packs: the folder of <domain>.yaml files (None: the bundled packs), how often each process re-reads
    # which pack is active (and, with the watch on, whether a file changed), see `auditor.packs`.
    rule_pack_dir: Path | None = None
    rule_pack_refresh_s: float = Field(default=2.0, gt=0, le=3600)
    rule_pack_watch: bool = True
    # Review queue: records with a claim judged less confident than this need a person.
    review_min_confidence: float = Field(default=0.5, ge=0, le=1)
    # Alerts: how often rules are checked, and the webhook retry schedule (seconds before each retry; after the
    # last retry fails the alert is "dead").
    alert_check_interval_s: float = Field(default=30.0, gt=0, le=86_400)
    alert_retry_delays_s: list[float] = Field(default_factory=lambda: [10.0, 30.0, 120.0, 600.0, 1800.0])
    # Where people reach this service (e.g. https://auditor.example.org): alert webhooks link each record to
    # <public_url>/console/records/<id>. None: alerts carry record ids without links.
    public_url: str | None = None
    # Gate policies on tool calls (YAML, see auditor/gate/tool_policies.yaml); None: the built-in ones.
    tool_policy_file: Path | None = None
    # Requests (and imported outputs) that name no domain: "detect" it from prompt and output, "require" one
    # (400), or leave them unverified ("off"). The default for tenants without their own choice, which lives
    # in the tenant_settings table (`auditor tenants set-detection`).
    domain_detection: Literal["detect", "require", "off"] = "detect"
    # A domain is detected when the classifier's probability reaches this (see docs/domain-detection.md).
    domain_detection_threshold: float = Field(default=0.6, gt=0, le=1)
    # Sentence vectors the detector keeps (least recently used dropped first; ~1.5 KB each), so the in-process
    # scoring of a record re-detects its domain without embedding again what the request embedded. 0: none.
    domain_detection_embedding_cache: int = Field(default=1024, ge=0, le=1_000_000)
    # MiniLM's precision (domain detection and /v1/embeddings). auto: bf16 on OpenVINO where the CPU computes
    # bf16 natively (AMX, AVX512-BF16; 1.3-1.9x less CPU a sentence), else fp32 on ONNX Runtime. Vectors differ from
    # fp32's by a cosine under 1e-4; texts scored within ~0.005 of the detection threshold may be decided
    # differently (docs/domain-detection.md). Records say which ran ("embedding_dtype").
    embedding_dtype: Literal["auto", "float32", "bfloat16"] = "auto"

    @field_validator("engine_cpus")
    @classmethod
    def _readable_cpu_setting(cls, value: str) -> str:
        return check_setting(value.strip())

    @model_validator(mode="after")
    def _refuse_weak_secret(self) -> Settings:
        key = self.hmac_key.get_secret_value()
        if self.environment != "development" and key == DEVELOPMENT_HMAC_KEY:
            raise SettingsError(
                f"AUDITOR_HMAC_KEY must be set when AUDITOR_ENVIRONMENT={self.environment} "
                "(the default key is for development only)"
            )
        if self.environment == "production" and (len(key.encode()) < MIN_HMAC_KEY_BYTES or len(set(key)) < 8):
            raise SettingsError(
                f"AUDITOR_HMAC_KEY must hold at least {MIN_HMAC_KEY_BYTES} bytes of varied key material in production "
                f"(it has {len(key.encode())} bytes, {len(set(key))} distinct characters); "
                "`auditor keys gen-hmac` prints a random one"
            )
        return self

    def output_pii_action_for(self, domain: str | None) -> str:
        return self.output_pii_action.get(domain or "", self.default_output_pii_action)

    def content_mode_for(self, domain: str | None) -> ContentMode:
        return self.content_mode.get(domain or "", self.default_content_mode)

    def retention_days_for(self, domain: str | None) -> int | None:
        return self.retention_days.get(domain or "", self.default_retention_days)

    def resolved_model_path(self) -> Path:
        return self.model_path or Path(__file__).parent / "bundled_model"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
