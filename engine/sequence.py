"""One request's state inside the engine: tokens, KV blocks, progress, output bookkeeping."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import torch

from engine.outputs import ProcessorEvent, RawLogprob, RequestStats
from engine.sampling_params import SamplingParams


class SequenceStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(slots=True, eq=False)
class Sequence:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    priority: int                       # class from the intent table; lower = more urgent
    arrival_time: float
    cache_salt: str | None = None
    status: SequenceStatus = SequenceStatus.WAITING
    output_token_ids: list[int] = field(default_factory=list)
    # KV cache
    block_table: list[int] = field(default_factory=list)
    block_hashes: list[int] = field(default_factory=list)  # chained hashes of the full blocks registered so far
    num_computed_tokens: int = 0        # tokens whose K/V are in the cache
    # waiting-queue order: arrival for new requests, kept across preemption so they return first
    queued_since: float = 0.0
    # sampling
    generator: torch.Generator | None = None
    constrained_by: list[int] = field(default_factory=list)  # indices of processors constraining it
    # output: what the next EngineCoreOutput carries (deltas; text is made beside the core, not here)
    emitted_token_count: int = 0
    logprobs: list[RawLogprob] | None = None              # not yet sent (None: not asked for)
    events: list[ProcessorEvent] = field(default_factory=list)   # not yet sent
    last_token_time: float = 0.0
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    stats: RequestStats = field(default_factory=RequestStats)

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    def token_at(self, index: int) -> int:
        n = len(self.prompt_token_ids)
        return self.prompt_token_ids[index] if index < n else self.output_token_ids[index - n]

    def all_token_ids(self) -> list[int]:
        return self.prompt_token_ids + self.output_token_ids

    def token_slice(self, start: int, end: int | None = None) -> list[int]:
        """all_token_ids()[start:end] without building the whole list when the slice is in the output."""
        n = len(self.prompt_token_ids)
        if start >= n:
            return self.output_token_ids[start - n : None if end is None else end - n]
        return self.all_token_ids()[start:end]

    @property
    def num_uncomputed_tokens(self) -> int:
        return self.num_tokens - self.num_computed_tokens

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED
