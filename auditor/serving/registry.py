"""The model registry: which served model id runs where.

Each id maps to the local engine (today's behaviour) or to an OpenAI-compatible upstream (a vLLM
cluster, a hosted API). Both go through the same input gate, output gate, validators and audit
record (`auditor.serving.inference`); only the local engine can constrain decoding with the KG.

Configured in a YAML file (`AUDITOR_MODELS_FILE`) and/or as JSON in `AUDITOR_MODELS`, same shape:

    models:
      llama-70b:                        # the id clients send as "model"
        upstream:
          base_url: http://vllm-1:8000/v1
          model: meta-llama/Llama-3.1-70B-Instruct
          api_key_env: VLLM_API_KEY     # the key is read from this variable, never stored
        domain: medical                 # optional default domain (X-Domain or "id:domain" override it)
        regenerate_on_block: 2          # optional: ask again up to 2 times when the output gate blocks

The local engine answers to its model id, "auditor", and "auditor-<domain>" as before; any id also
takes a ":<domain>" suffix ("llama-70b:legal").
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from engine.outputs import RequestOutput
from engine.sampling_params import SamplingParams

LOCAL_ALIAS = "auditor"
MAX_REGENERATIONS = 5


class RegistryError(ValueError):
    """A model registry that cannot be used (bad file, missing key variable, duplicate id)."""


class UnknownModel(LookupError):
    """A model id the registry does not serve (404)."""


class DomainConflict(ValueError):
    """X-Domain disagrees with the domain the model id names, or names an unknown domain (400)."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


# -- configuration ----------------------------------------------------------------------------------------


class UpstreamConfig(BaseModel):
    """An OpenAI-compatible endpoint. Timeouts in seconds."""

    model_config = ConfigDict(extra="forbid")

    base_url: str = Field(min_length=8, max_length=2048)   # e.g. http://vllm:8000/v1 (…/chat/completions is added)
    model: str = Field(min_length=1, max_length=256)      # the upstream's own model name
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    stream: bool = True               # read the upstream as a stream (sentence-by-sentence gating, stall detection)
    connect_timeout_s: float = Field(default=5.0, gt=0, le=120)
    read_timeout_s: float = Field(default=60.0, gt=0, le=3600)    # longest silence between two chunks
    total_timeout_s: float = Field(default=300.0, gt=0, le=7200)  # whole answer
    connect_retries: int = Field(default=2, ge=0, le=10)          # only for connections that never opened
    max_connections: int = Field(default=64, ge=1, le=10_000)     # pooled, kept alive, per upstream
    # What one answer may hold (past any of them: 502 upstream_too_large): a JSON body, one line of an event
    # stream, and the answer's text, at most this many characters per max_tokens token (a token is rarely
    # over 16 characters). A compliant upstream stays far inside all three; a hostile one cannot fill memory.
    max_body_bytes: int = Field(default=8 * 2**20, ge=4096, le=2**30)
    max_line_bytes: int = Field(default=2**20, ge=4096, le=2**30)
    max_chars_per_token: int = Field(default=32, ge=1, le=1024)

    @field_validator("base_url")
    @classmethod
    def _plain_http_url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base_url must be an http(s) URL, got {value!r}")
        if parts.username or parts.password or parts.query or parts.fragment:
            # records name the base URL: credentials belong in api_key_env, never in the URL
            raise ValueError("base_url must not carry credentials, a query or a fragment (use api_key_env)")
        return value.rstrip("/")


class ModelEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    engine: Literal["local"] | None = None
    upstream: UpstreamConfig | None = None
    domain: str | None = Field(default=None, max_length=64)
    regenerate_on_block: int = Field(default=0, ge=0, le=MAX_REGENERATIONS)

    @model_validator(mode="after")
    def _one_backend(self) -> ModelEntry:
        if (self.engine is None) == (self.upstream is None):
            raise ValueError("give exactly one of 'engine: local' or 'upstream: {...}'")
        return self


def read_entries(path: Path | None, inline: Mapping[str, Any] | None) -> dict[str, ModelEntry]:
    """Entries from the YAML file and the inline mapping (inline wins on the same id); RegistryError names
    the file and the entry at fault."""
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except OSError as exc:
            raise RegistryError(f"{path}: cannot read the model registry ({exc.strerror or exc})") from exc
        except yaml.YAMLError as exc:
            raise RegistryError(f"{path}: invalid YAML: {exc}") from exc
        if not isinstance(loaded, dict) or not isinstance(loaded.get("models", {}), dict):
            raise RegistryError(f"{path}: expected a mapping with a 'models:' mapping of id -> entry")
        raw.update(loaded.get("models") or {})
    raw.update(inline or {})
    entries = {}
    for model_id, body in raw.items():
        where = f"{path or 'AUDITOR_MODELS'}: model {model_id!r}"
        if not isinstance(model_id, str) or not model_id or ":" in model_id or len(model_id) > 200:
            raise RegistryError(f"{where}: ids are 1-200 characters without ':'")
        try:
            entries[model_id] = ModelEntry.model_validate(body)
        except ValidationError as exc:
            first = exc.errors()[0]
            field_name = ".".join(str(p) for p in first["loc"]) or "entry"
            raise RegistryError(f"{where}: {field_name}: {first['msg']}") from exc
    return entries


# -- backends ---------------------------------------------------------------------------------------------


class Backend(Protocol):
    """What the inference path needs from whatever generates the text."""

    model_id: str | None
    checkpoint_hash: str | None
    kg_constrained: bool         # can it apply the KG constraint at the logits?

    def render(self, messages: list[dict[str, Any]], **template_kwargs: Any) -> Any: ...

    def generate(self, prompt: Any, params: SamplingParams, *, request_id: str, trace: dict[str, Any],
                 **kwargs: Any) -> AsyncIterator[RequestOutput]: ...

    def record_details(self) -> dict[str, Any] | None: ...


class LocalBackend:
    """The service's own engine: renders the chat template here, constrains decoding with the KG."""

    kg_constrained = True

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    @property
    def model_id(self) -> str | None:
        return getattr(self.engine, "model_id", None)

    @property
    def checkpoint_hash(self) -> str | None:
        return getattr(self.engine, "checkpoint_hash", None)

    def render(self, messages: list[dict[str, Any]], **template_kwargs: Any) -> Any:
        return self.engine.tokenizer.apply_chat_template(messages, add_generation_prompt=True, **template_kwargs)

    def generate(self, prompt: Any, params: SamplingParams, *, request_id: str, trace: dict[str, Any],
                 **kwargs: Any) -> AsyncIterator[RequestOutput]:
        return self.engine.generate(prompt, params, request_id=request_id, **kwargs)

    def record_details(self) -> dict[str, Any] | None:
        """The weights' dtype and the KV cache's precision can change outputs, so the record's (hashed)
        details name them."""
        details = {"kv_cache": getattr(self.engine, "kv_cache_settings", None),
                   "model_dtype": getattr(self.engine, "dtype", None)}
        return {name: value for name, value in details.items() if value is not None} or None


@dataclass(frozen=True, slots=True)
class ModelRoute:
    id: str
    backend: Any                              # a Backend
    domain: str | None = None                 # the domain this id implies, if any
    regenerate_on_block: int = 0

    @property
    def is_upstream(self) -> bool:
        return not self.backend.kg_constrained


@dataclass(slots=True)
class ModelRegistry:
    """Served ids -> routes. `resolve` turns a request's model and X-Domain into a route and a domain."""

    routes: dict[str, ModelRoute]
    domains: tuple[str, ...]
    local_ids: frozenset[str] = field(default_factory=frozenset)   # ids of the local engine

    def ids(self) -> list[str]:
        domain_aliases = [f"{LOCAL_ALIAS}-{domain}" for domain in self.domains] if self.local_ids else []
        return [*self.routes, *domain_aliases]

    def upstreams(self) -> list[Any]:
        return list({id(r.backend): r.backend for r in self.routes.values() if r.is_upstream}.values())

    def resolve(self, model: str, header_domain: str | None) -> tuple[ModelRoute, str | None]:
        route, model_domain = self._route(model)
        domain = header_domain.strip().lower() if header_domain else None
        if domain and model_domain and domain != model_domain:
            raise DomainConflict(f"X-Domain {domain!r} contradicts the model's domain {model_domain!r}",
                                 "domain_mismatch")
        domain = domain or model_domain
        if domain is not None and domain not in self.domains:
            raise DomainConflict(f"unknown domain {domain!r}; known: {', '.join(self.domains) or 'none'}",
                                 "unknown_domain")
        return route, domain

    def _route(self, model: str) -> tuple[ModelRoute, str | None]:
        if model in self.routes:
            return self.routes[model], self.routes[model].domain
        local = next((self.routes[i] for i in self.local_ids if i in self.routes), None)
        if local is not None and model.startswith(f"{LOCAL_ALIAS}-"):
            return local, model.removeprefix(f"{LOCAL_ALIAS}-")
        base, sep, suffix = model.rpartition(":")
        if sep and base in self.routes:
            return self.routes[base], suffix
        raise UnknownModel(f"the model {model!r} does not exist (see GET /v1/models)")


def build_registry(*, engine: Any, entries: Mapping[str, ModelEntry], domains: Iterable[str],
                   environ: Mapping[str, str] | None = None) -> ModelRegistry:
    """Routes for the local engine (when there is one) and every configured entry; upstream clients are
    created here and opened by `start_upstreams`. Raises RegistryError for an unusable configuration."""
    from auditor.serving.upstream import UpstreamBackend

    environ = os.environ if environ is None else environ
    domains = tuple(domains)
    routes: dict[str, ModelRoute] = {}
    local_ids: set[str] = set()
    if engine is not None:
        local = LocalBackend(engine)
        for model_id in dict.fromkeys([engine.model_id, LOCAL_ALIAS]):
            routes[model_id] = ModelRoute(model_id, local)
            local_ids.add(model_id)
    for model_id, entry in entries.items():
        if entry.domain is not None and entry.domain not in domains:
            raise RegistryError(f"model {model_id!r}: domain {entry.domain!r} is not served (AUDITOR_DOMAINS)")
        if entry.upstream is not None:
            backend: Any = UpstreamBackend(model_id, entry.upstream, api_key=_api_key(model_id, entry.upstream, environ))
        elif engine is None:
            raise RegistryError(f"model {model_id!r} names the local engine, but AUDITOR_LOCAL_ENGINE is off")
        else:
            backend = routes[engine.model_id].backend
            local_ids.add(model_id)
        routes[model_id] = ModelRoute(model_id, backend, entry.domain, entry.regenerate_on_block)
    if not routes:
        raise RegistryError("no model to serve: the local engine is off and no upstream is configured")
    return ModelRegistry(routes, domains, frozenset(local_ids))


def _api_key(model_id: str, config: UpstreamConfig, environ: Mapping[str, str]) -> str | None:
    if config.api_key_env is None:
        return None
    key = environ.get(config.api_key_env, "")
    if not key:
        raise RegistryError(f"model {model_id!r}: the environment variable {config.api_key_env} holding its "
                            "upstream key is not set")
    return key
