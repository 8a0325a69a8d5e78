"""What the engine hands back per request and per step."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
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
    # this request's share of the engine's busy time: each step's wall time split over the batch's
    # requests by the tokens each computed in it (what per-engine-second pricing charges)
    engine_time_seconds: float = 0.0


# finish_reason values: "stop" (EOS, stop string or stop token), "length" (max_tokens or context),
# "abort", "constraint_dead_end" (a logits processor left no token allowed).
FINISH_REASONS = ("stop", "length", "abort", "constraint_dead_end")


# (sampled token id, its logprob, [(top token id, logprob), ...] best first): what the core sends; the
# output processor adds the token texts on the other side of the process boundary.
RawLogprob = tuple[int, float, list[tuple[int, float]]]


@dataclass(slots=True)
class EngineCoreOutput:
    """One request's delta from one engine step: only what is new, never a copy of what came before.

    Text is not here: detokenisation and stop strings belong to the output processor
    (`engine.output_processor`), which runs beside the core (in the API process when the core has its own)."""

    request_id: str
    new_token_ids: list[int]
    new_logprobs: list[RawLogprob] | None = None
    new_events: list[ProcessorEvent] = field(default_factory=list)
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    stats: RequestStats | None = None        # on the first and the final output only

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass(slots=True)
class RequestOutput:
    """A request's progress as its caller sees it.

    output_kind "cumulative" (the default): `token_ids`, `text`, `logprobs` and `events` hold everything so far.
    output_kind "delta" (streaming consumers, e.g. the service): they hold only what is new since the previous
    output, like `new_token_ids` and `new_text`, so a long answer costs O(n) in all, not O(n^2)."""

    request_id: str
    prompt_token_ids: list[int]
    token_ids: list[int]          # generated tokens: all so far (cumulative) or the new ones (delta)
    text: str                     # generated text, stop string excluded: all so far or the new part
    new_token_ids: list[int]      # generated since the previous output of this request
    new_text: str                 # text delta since the previous output (streaming)
    finished: bool
    finish_reason: str | None = None
    stop_reason: str | int | None = None  # the stop string or stop token id that ended it
    logprobs: list[TokenLogprob] | None = None
    events: list[ProcessorEvent] = field(default_factory=list)  # processor events: all so far, or the new ones
    stats: RequestStats = field(default_factory=RequestStats)


OUTPUT_KINDS = ("cumulative", "delta")


def merge_deltas(earlier: RequestOutput, later: RequestOutput) -> RequestOutput:
    """Two consecutive delta outputs of one request as one: a consumer that fell behind by several engine
    steps takes them in a single wake-up (as vLLM's output collector does). The later one's state wins."""
    logprobs = None if earlier.logprobs is None and later.logprobs is None else \
        [*(earlier.logprobs or []), *(later.logprobs or [])]
    return replace(later, token_ids=earlier.token_ids + later.token_ids, text=earlier.text + later.text,
                   new_token_ids=earlier.new_token_ids + later.new_token_ids, new_text=earlier.new_text + later.new_text,
                   logprobs=logprobs, events=earlier.events + later.events)
