"""Cost accounting: what each request cost to serve, and how many of its tokens delivered value.

Billed tokens are every token the engine processed for the request: prompt (with the chat template) and
completion. Cost = billed prompt tokens / 1000 x the model's prompt price + completion tokens / 1000 x its
completion price + the request's engine-seconds x the per-engine-second price (a model may have either kind of
price, or both). Engine-seconds are the request's share of the engine's busy time: each step's wall time split
over the requests in it by the tokens each computed (`engine.outputs.RequestStats.engine_time_seconds`).

Effective tokens are the billed ones less what delivered nothing:
- template tokens: the prompt tokens the chat template adds around the messages (BOS, role markers, the
  generation prompt, a default system text): the tokens of the same conversation rendered with every message
  content empty and no tools. Excluded from every request's effective prompt tokens; a raw completions prompt
  has only what the tokenizer adds (BOS).
- failed requests (status "error": the engine or the store failed, the client went away): no effective tokens.
- empty responses: the client got no answer: a refusal (status "refused", by the input or the output gate), or
  blank delivered content and no tool calls (an answer the gate withheld entirely, a model that stopped at
  once): no effective tokens.
- retries: an attempt that repeats one already delivered, that is the same tenant, X-Request-Id and choice as a
  request this process delivered among its last `RETRY_WINDOW`: no effective tokens. (A failed first attempt is
  excluded as failed, so the retry that delivers is the one that counts.) Requests without X-Request-Id are
  never retries.
- n > 1: the prompt is billed and counted once, with choice 0.

Each record keeps its usage in `details.usage` (a hashed field of the records ledger); `GET /v1/usage`
(`auditor.serving.usage`) sums it per tenant, intent and model, and /metrics counts it.
"""

from __future__ import annotations

import functools
import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

RETRY_WINDOW = 10_000   # delivered (tenant, request id, choice) keys remembered per API process


class PriceTableError(ValueError):
    """A price table that cannot be used (unreadable, or prices that are not non-negative numbers)."""


class Price(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prompt_per_1k: float = Field(default=0.0, ge=0)
    completion_per_1k: float = Field(default=0.0, ge=0)
    engine_second: float = Field(default=0.0, ge=0)

    @model_validator(mode="after")
    def _priced(self) -> Price:
        if not (self.prompt_per_1k or self.completion_per_1k or self.engine_second):
            raise ValueError("a price needs prompt_per_1k / completion_per_1k, or engine_second")
        return self

    def cost(self, *, prompt_tokens: int, completion_tokens: int, engine_seconds: float) -> float:
        return (prompt_tokens / 1000 * self.prompt_per_1k + completion_tokens / 1000 * self.completion_per_1k
                + engine_seconds * self.engine_second)


class PriceTable(BaseModel):
    """Prices per model id; "*" prices every model not named."""

    model_config = ConfigDict(extra="forbid")

    currency: str = Field(default="USD", min_length=1, max_length=16)
    models: dict[str, Price] = Field(default_factory=dict)

    @property
    def version(self) -> str:
        """A digest of the table, so a record names the prices it was costed under."""
        canonical = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    def price_for(self, model_id: str | None) -> Price | None:
        return self.models.get(model_id or "") or self.models.get("*")

    @classmethod
    def load(cls, path: Path | None) -> PriceTable:
        """The table in a YAML file; no file: an empty table (usage is recorded, cost is not)."""
        if path is None:
            return cls()
        try:
            raw = yaml.safe_load(Path(path).read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise PriceTableError(f"cannot read the price table {path}: {exc}") from exc
        try:
            return cls.model_validate(raw or {})
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise PriceTableError(f"price table {path}: {where}: {first['msg']}") from exc


class _Tokenizer(Protocol):
    def encode(self, text: str) -> list[int]: ...

    def apply_chat_template(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> str: ...


class TemplateTokens:
    """Counts the template's tokens for a conversation shape (its roles), cached: the scaffold depends on the
    roles only, so one tokenisation per shape."""

    def __init__(self, tokenizer: _Tokenizer, *, cache_size: int = 1024) -> None:
        self._tokenizer = tokenizer
        self._for_roles = functools.lru_cache(maxsize=cache_size)(self._count)

    def for_messages(self, messages: Sequence[Mapping[str, Any]]) -> int:
        return self._for_roles(tuple(str(m.get("role", "")) for m in messages))

    def for_prompt(self) -> int:
        """A raw prompt (completions): what the tokenizer adds to any text."""
        return self._for_roles(None)

    def _count(self, roles: tuple[str, ...] | None) -> int:
        try:
            if roles is None:
                return len(self._tokenizer.encode(""))
            scaffold = [{"role": role, "content": ""} for role in roles]
            return len(self._tokenizer.encode(self._tokenizer.apply_chat_template(scaffold, add_generation_prompt=True)))
        except Exception:   # noqa: BLE001 - a template that refuses an empty turn: count no template tokens
            return 0


class DeliveredRequests:
    """The (tenant, request id, choice) keys this process delivered, least recent dropped past `window`."""

    def __init__(self, window: int = RETRY_WINDOW) -> None:
        self._keys: OrderedDict[tuple[str, str, int], None] = OrderedDict()
        self._window = window
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._keys)

    def seen_before(self, key: tuple[str, str, int]) -> bool:
        with self._lock:
            if key in self._keys:
                self._keys.move_to_end(key)
                return True
            return False

    def remember(self, key: tuple[str, str, int]) -> None:
        with self._lock:
            self._keys[key] = None
            self._keys.move_to_end(key)
            while len(self._keys) > self._window:
                self._keys.popitem(last=False)


@dataclass(slots=True)
class Usage:
    prompt_tokens: int                 # billed: every prompt token the engine processed for this request
    completion_tokens: int
    template_tokens: int
    engine_seconds: float
    effective_prompt_tokens: int
    effective_completion_tokens: int
    excluded: str | None               # why none of its tokens are effective: failed | empty | retry
    cost: float | None                 # None: no price for this model
    currency: str | None
    price_table: str | None            # the price table's version

    def to_record(self) -> dict[str, Any]:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "template_tokens": self.template_tokens, "engine_seconds": round(self.engine_seconds, 6),
                "effective_prompt_tokens": self.effective_prompt_tokens,
                "effective_completion_tokens": self.effective_completion_tokens, "excluded": self.excluded,
                "cost": None if self.cost is None else round(self.cost, 9), "currency": self.currency,
                "price_table": self.price_table}


def excluded_reason(*, status: str, delivered: str, tool_calls: bool, retry: bool) -> str | None:
    """Why a request's tokens are not effective (see the module docstring), or None."""
    if status == "error":
        return "failed"
    if status == "refused" or (not delivered.strip() and not tool_calls):
        return "empty"
    if retry:
        return "retry"
    return None


def usage_for(*, prices: PriceTable, model_id: str | None, prompt_tokens: int, completion_tokens: int,
              template_tokens: int, engine_seconds: float, excluded: str | None, prompt_billed: bool = True) -> Usage:
    """One request's usage; `prompt_billed` False for choices after the first of an n > 1 request."""
    billed_prompt = prompt_tokens if prompt_billed else 0
    effective = excluded is None
    price = prices.price_for(model_id)
    cost = None if price is None else price.cost(prompt_tokens=billed_prompt, completion_tokens=completion_tokens,
                                                 engine_seconds=engine_seconds)
    return Usage(
        prompt_tokens=billed_prompt, completion_tokens=completion_tokens,
        template_tokens=min(template_tokens, billed_prompt), engine_seconds=engine_seconds,
        effective_prompt_tokens=max(0, billed_prompt - template_tokens) if effective else 0,
        effective_completion_tokens=completion_tokens if effective else 0, excluded=excluded, cost=cost,
        currency=prices.currency if price is not None else None,
        price_table=prices.version if price is not None else None,
    )
