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
    # Per-domain retention of record content, in days (None/absent -> default_retention_days).
    retention_days: dict[str, int] = Field(default_factory=dict)
    default_retention_days: int | None = None             # None -> keep forever
    # How prompts/outputs are stored per domain: raw text, PII-redacted text, or only their SHA-256.
    content_mode: dict[str, ContentMode] = Field(default_factory=dict)
    default_content_mode: ContentMode = "redacted"
    injection_refuse_score: float = Field(default=0.8, gt=0, le=1)
    injection_annotate_score: float = Field(default=0.4, gt=0, le=1)

    @model_validator(mode="after")
    def _refuse_default_secret(self) -> Settings:
        if self.environment != "development" and self.hmac_key.get_secret_value() == DEVELOPMENT_HMAC_KEY:
            raise SettingsError(
                f"AUDITOR_HMAC_KEY must be set when AUDITOR_ENVIRONMENT={self.environment} "
                "(the default key is for development only)"
            )
        return self

    def content_mode_for(self, domain: str | None) -> ContentMode:
        return self.content_mode.get(domain or "", self.default_content_mode)

    def retention_days_for(self, domain: str | None) -> int | None:
        return self.retention_days.get(domain or "", self.default_retention_days)

    def resolved_model_path(self) -> Path:
        return self.model_path or Path(__file__).parent / "bundled_model"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
