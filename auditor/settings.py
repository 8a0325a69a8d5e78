"""Service settings (pydantic-settings, env prefix AUDITOR_), behind a cached `get_settings()`."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

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
    hmac_key: SecretStr = SecretStr(DEVELOPMENT_HMAC_KEY)
    host: str = "127.0.0.1"
    port: int = 8000
    checkpoint_interval: int = Field(default=100, ge=1)   # a signed checkpoint every N records
    max_body_bytes: int = Field(default=1_000_000, ge=1024)
    domains: list[str] = Field(default_factory=lambda: ["medical", "finance", "legal"])
    default_max_tokens: int = Field(default=256, ge=1)
    # The engine core runs in its own process (its step loop shares no GIL with HTTP, validation and SQL) and is
    # restarted if it dies; False runs it on a thread of this process (tests, debugging).
    engine_process: bool = True
    # Join an engine core that runs on its own (`auditor engine-core`, shared by several API processes) at this
    # ZeroMQ address, e.g. "ipc:///run/auditor/engine", instead of starting one. Same model path on both sides.
    engine_address: str | None = None
    engine_threads: int | None = Field(default=None, ge=1)   # torch CPU threads of the engine; None: torch's default
    # KG-constraint caches, least recently used dropped first: allowed sets kept per domain, and decoding states
    # (masks, transitions) kept per allowed set. Memory stays flat under traffic that keeps linking new sets.
    kg_constraint_views: int = Field(default=64, ge=1)
    kg_constraint_masks_per_view: int = Field(default=4096, ge=16)
    kg_constraint_shared_per_domain: int = Field(default=65_536, ge=16)
    # Where the compiled KG-constraint indices are kept between starts (keyed by KG version, tokenizer and code),
    # so a warm start skips most of the compile. None: no disk cache.
    index_cache_dir: Path | None = Path("./var/cache/kg-index")
    # How often freed heap pages are handed back to the OS (glibc malloc_trim) in the API process; the engine
    # core does the same in its own. 0: never.
    malloc_trim_interval_s: float = Field(default=30.0, ge=0)
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
    # /metrics: "open" (no key), "key" (any valid API key; admin or auditor), or "off" here because a separate
    # listener serves it (`metrics_port`, bound to `metrics_host`).
    metrics_access: Literal["open", "key", "off"] = "key"
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = None
    # Output-gate PII rule: what to do with PII in model output, per domain (default for the rest).
    output_pii_action: dict[str, Literal["allow", "annotate", "redact", "block"]] = Field(default_factory=dict)
    default_output_pii_action: Literal["allow", "annotate", "redact", "block"] = "redact"
    # Gate policies on tool calls (YAML, see auditor/gate/tool_policies.yaml); None: the built-in ones.
    tool_policy_file: Path | None = None
    # Requests (and imported outputs) that name no domain: "detect" it from prompt and output, "require" one
    # (400), or leave them unverified ("off"). The default for tenants without their own choice, which lives
    # in the tenant_settings table (`auditor tenants set-detection`).
    domain_detection: Literal["detect", "require", "off"] = "detect"
    # A domain is detected when the classifier's probability reaches this (see docs/domain-detection.md).
    domain_detection_threshold: float = Field(default=0.6, gt=0, le=1)

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
