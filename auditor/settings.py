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
    # "auto": bf16 where the CPU has AMX / AVX512-BF16 (about 1.9x the fp32 throughput on the bundled model),
    # else the checkpoint's dtype. Every audit record names the dtype it was generated in.
    engine_dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    hmac_key: SecretStr = SecretStr(DEVELOPMENT_HMAC_KEY)
    host: str = "127.0.0.1"
    port: int = 8000
    checkpoint_interval: int = Field(default=100, ge=1)   # a signed checkpoint every N records
    max_body_bytes: int = Field(default=1_000_000, ge=1024)
    domains: list[str] = Field(default_factory=lambda: ["medical", "finance", "legal"])
    default_max_tokens: int = Field(default=256, ge=1)
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
