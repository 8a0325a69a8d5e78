"""Engine-core deltas -> RequestOutputs: detokenisation, stop strings, logprob texts, per-request stats.

After vLLM V1's OutputProcessor. The core sends each request's new token ids (and new logprobs and
processor events) per step; this keeps the text and the running totals and hands each caller either
everything so far ("cumulative") or only what is new ("delta"). A stop string is found here, so the
caller must then finish the request in the core (`ProcessedOutputs.stopped`)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from engine.detokenizer import IncrementalDetokenizer
from engine.outputs import (
    OUTPUT_KINDS,
    EngineCoreOutput,
    ProcessorEvent,
    RequestOutput,
    RequestStats,
    TokenLogprob,
)
from engine.sampling_params import InvalidRequestError, SamplingParams
from engine.tokenizer import Tokenizer


@dataclass(slots=True)
class _RequestState:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    output_kind: str
    detokenizer: IncrementalDetokenizer
    stats: RequestStats
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] | None = None
    events: list[ProcessorEvent] = field(default_factory=list)
    emitted_text_len: int = 0
    emitted_tokens: int = 0
    emitted_logprobs: int = 0
    emitted_events: int = 0
    last_token_time: float = 0.0


@dataclass(slots=True)
class ProcessedOutputs:
    outputs: list[RequestOutput]
    stopped: list[str]           # requests a stop string finished here: finish them in the core ("stop")


class OutputProcessor:
    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.eos_ids = frozenset(tokenizer.eos_token_ids)
        self.requests: dict[str, _RequestState] = {}

    def add_request(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams, *,
                    output_kind: str = "cumulative", arrival_time: float | None = None) -> None:
        if output_kind not in OUTPUT_KINDS:
            raise InvalidRequestError(f"output_kind must be one of {OUTPUT_KINDS}, got {output_kind!r}")
        stats = RequestStats(arrival_time=arrival_time or time.time(), num_prompt_tokens=len(prompt_token_ids))
        self.requests[request_id] = _RequestState(
            request_id, prompt_token_ids, params, output_kind,
            IncrementalDetokenizer(self.tokenizer, prompt_token_ids, params.stop), stats,
            logprobs=[] if params.logprobs is not None else None)

    def remove(self, request_id: str) -> None:
        self.requests.pop(request_id, None)

    def process(self, core_outputs: list[EngineCoreOutput], now: float | None = None) -> ProcessedOutputs:
        now = now or time.time()
        outputs: list[RequestOutput] = []
        stopped: list[str] = []
        for core in core_outputs:
            state = self.requests.get(core.request_id)
            if state is None:   # aborted or stopped here while the core was still stepping it
                continue
            finish_reason, stop_reason = core.finish_reason, core.stop_reason
            stop = self._absorb(state, core, now)
            if stop is not None:
                finish_reason, stop_reason = "stop", stop
                if not core.finished:
                    stopped.append(core.request_id)
            if finish_reason is not None:
                self._close_stats(state, core.stats, now)
                del self.requests[core.request_id]
            outputs.append(self._make_output(state, finish_reason, stop_reason))
        return ProcessedOutputs(outputs, stopped)

    def _absorb(self, state: _RequestState, core: EngineCoreOutput, now: float) -> str | None:
        """Take the step's new tokens; return the stop string one of them completed, if any."""
        stats = state.stats
        if core.stats is not None and not core.finished:   # the first output: what the core knows at admission
            stats.first_scheduled_time = core.stats.first_scheduled_time
            stats.num_cached_tokens = core.stats.num_cached_tokens
            if stats.first_scheduled_time is not None:
                stats.request_queue_time_seconds = stats.first_scheduled_time - stats.arrival_time
        new_ids = core.new_token_ids
        if new_ids:
            if stats.first_token_time is None:
                stats.first_token_time = now
            elif state.token_ids:
                stats.inter_token_latency_seconds.append(now - state.last_token_time)
            state.last_token_time = now
        if core.new_events:
            state.events.extend(core.new_events)
        for k, token_id in enumerate(new_ids):
            state.token_ids.append(token_id)
            if state.logprobs is not None and core.new_logprobs is not None and k < len(core.new_logprobs):
                sampled, logprob, top = core.new_logprobs[k]
                token_text = self.tokenizer.token_text
                state.logprobs.append(TokenLogprob(sampled, token_text(sampled), logprob,
                                                   [(t, token_text(t), lp) for t, lp in top]))
            if self._ends_without_text(state, core, k == len(new_ids) - 1, token_id):
                break
            stop = state.detokenizer.append(token_id)
            if stop is not None:
                return stop
        stats.num_generated_tokens = len(state.token_ids)
        return None

    def _ends_without_text(self, state: _RequestState, core: EngineCoreOutput, last: bool, token_id: int) -> bool:
        """The token that stopped the request (EOS, a stop token) adds no text."""
        if not (last and core.finish_reason == "stop"):
            return False
        params = state.params
        return token_id in params.stop_token_ids or (token_id in self.eos_ids and not params.ignore_eos)

    @staticmethod
    def _close_stats(state: _RequestState, core_stats: RequestStats | None, now: float) -> None:
        """The core's timings when it finished the request; ours when a stop string finished it here."""
        stats = state.stats
        stats.num_generated_tokens = len(state.token_ids)
        if core_stats is not None:
            core_stats.num_generated_tokens = len(state.token_ids)
            core_stats.inter_token_latency_seconds = core_stats.inter_token_latency_seconds or stats.inter_token_latency_seconds
            state.stats = core_stats
            return
        stats.finished_time = now
        if stats.first_token_time is not None:
            stats.time_to_first_token_seconds = stats.first_token_time - stats.arrival_time
        stats.e2e_request_latency_seconds = now - stats.arrival_time

    def _make_output(self, state: _RequestState, finish_reason: str | None,
                     stop_reason: str | int | None) -> RequestOutput:
        finished = finish_reason is not None
        detok = state.detokenizer
        text_end = detok.streamable_length(finished)
        new_text = detok.text[state.emitted_text_len : text_end]
        new_tokens = state.token_ids[state.emitted_tokens :]
        new_logprobs = state.logprobs[state.emitted_logprobs :] if state.logprobs is not None else None
        new_events = state.events[state.emitted_events :]
        state.emitted_text_len = max(state.emitted_text_len, text_end)
        state.emitted_tokens = len(state.token_ids)
        state.emitted_logprobs = len(state.logprobs) if state.logprobs is not None else 0
        state.emitted_events = len(state.events)
        if state.output_kind == "delta":
            token_ids, text, logprobs, events = new_tokens, new_text, new_logprobs, new_events
        else:
            token_ids, text = list(state.token_ids), detok.text[:text_end]
            logprobs = list(state.logprobs) if state.logprobs is not None else None
            events = list(state.events)
        return RequestOutput(
            request_id=state.request_id, prompt_token_ids=state.prompt_token_ids, token_ids=token_ids, text=text,
            new_token_ids=new_tokens, new_text=new_text, finished=finished, finish_reason=finish_reason,
            stop_reason=stop_reason, logprobs=logprobs, events=events, stats=state.stats,
        )
