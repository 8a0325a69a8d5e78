"""Per-request sampling parameters (vLLM's names, so anyone who knows vLLM can read them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class InvalidRequestError(ValueError):
    """A request the engine refuses at `add_request`, before any compute."""


@dataclass(slots=True)
class SamplingParams:
    temperature: float = 1.0          # 0 -> greedy
    top_p: float = 1.0                # in (0, 1]
    top_k: int = 0                    # 0 or -1 -> disabled
    min_p: float = 0.0                # in [0, 1]
    repetition_penalty: float = 1.0   # > 0, 1 -> disabled (HF semantics, over prompt + output)
    presence_penalty: float = 0.0     # OpenAI semantics, over output tokens
    frequency_penalty: float = 0.0    # OpenAI semantics, over output tokens
    seed: int | None = None           # same seed -> same output whatever else is in the batch
    max_tokens: int = 16
    stop: list[str] = field(default_factory=list)
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    logprobs: int | None = None       # top-N logprobs per generated token (0 -> only the sampled token's)
    # Structured output: {"type": "json_object"}, {"type": "json_schema", "json_schema": {...}} or
    # {"type": "structural_tag", "format": {...}} (XGrammar's structural tag, e.g. tool calls)
    response_format: dict[str, Any] | None = None
    # Free-form per-request arguments for logits processors, keyed by processor name,
    # e.g. {"kg_constraint": {...}}. The engine never reads them itself.
    extra_args: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        """Raise InvalidRequestError naming the first bad field."""
        if self.temperature < 0:
            raise InvalidRequestError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise InvalidRequestError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < -1:
            raise InvalidRequestError(f"top_k must be -1, 0 or positive, got {self.top_k}")
        if not 0 <= self.min_p <= 1:
            raise InvalidRequestError(f"min_p must be in [0, 1], got {self.min_p}")
        if self.repetition_penalty <= 0:
            raise InvalidRequestError(f"repetition_penalty must be > 0, got {self.repetition_penalty}")
        if not -2 <= self.presence_penalty <= 2:
            raise InvalidRequestError(f"presence_penalty must be in [-2, 2], got {self.presence_penalty}")
        if not -2 <= self.frequency_penalty <= 2:
            raise InvalidRequestError(f"frequency_penalty must be in [-2, 2], got {self.frequency_penalty}")
        if self.max_tokens < 1:
            raise InvalidRequestError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.logprobs is not None and not 0 <= self.logprobs <= 20:
            raise InvalidRequestError(f"logprobs must be in [0, 20], got {self.logprobs}")
        if self.response_format is not None:
            kind = self.response_format.get("type")
            if kind not in ("text", "json_object", "json_schema", "structural_tag"):
                raise InvalidRequestError(
                    f"response_format.type must be text, json_object, json_schema or structural_tag, got {kind!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0
