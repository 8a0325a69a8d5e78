"""What the engine hands back per request and per step."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class ProcessorEvent:
    """Something a logits processor did to one request, e.g. a KG-constraint intervention.

    `position` is the index of the generated token (0 = first output token) the event belongs to.
    """

    processor: str
    position: int
    kind: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class TokenLogprob:
    token_id: int
    token: str
    logprob: float
    top: list[tuple[int, str, float]] = field(default_factory=list)  # (token_id, token, logprob), best first


@dataclass(slots=True)
class RequestStats:
    """Per-request timings and counts; names follow vLLM's metrics."""

    arrival_time: float = 0.0
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    finished_time: float | None = None
    request_queue_time_seconds: float | None = None
    time_to_first_token_seconds: float | None = None
    e2e_request_latency_seconds: float | None = None
    inter_token_latency_seconds: list[float] = field(default_factory=list)
    num_prompt_tokens: int = 0
    num_cached_tokens: int = 0
    num_generated_tokens: int = 0
    num_preemptions: int = 0


# finish_reason values: "stop" (EOS, stop string or stop token), "length" (max_tokens or context),
# "abort", "constraint_dead_end" (a logits processor left no token allowed).
FINISH_REASONS = ("stop", "length", "abort", "constraint_dead_end")


@dataclass(slots=True)
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    token_ids: list[int]          # all generated tokens so far
    text: str                     # all generated text so far (stop string excluded)
    new_token_ids: list[int]      # generated since the previous output of this request
    new_text: str                 # text delta since the previous output (streaming)
    finished: bool
    finish_reason: str | None = None
    stop_reason: str | int | None = None  # the stop string or stop token id that ended it
    logprobs: list[TokenLogprob] | None = None
    events: list[ProcessorEvent] = field(default_factory=list)  # all processor events so far
    stats: RequestStats = field(default_factory=RequestStats)
