"""Per-step bookkeeping around sampling: logits processors, stop checks, stats, the core's output deltas.

No text is made here: stop strings, detokenisation and logprob texts belong to the output processor
(`engine.output_processor`), so the step loop never decodes."""

from __future__ import annotations

import time
from collections.abc import Sequence as Seq

import torch

from engine.metrics import EngineMetrics
from engine.outputs import EngineCoreOutput
from engine.processors.logits_process import LogitsProcessor
from engine.sequence import Sequence
from engine.tokenizer import Tokenizer


class StepPostprocessor:
    def __init__(
        self, tokenizer: Tokenizer, processors: Seq[LogitsProcessor], metrics: EngineMetrics, max_model_len: int
    ) -> None:
        self.tokenizer = tokenizer
        self.processors = list(processors)
        self.metrics = metrics
        self.max_model_len = max_model_len
        self.eos_ids = frozenset(tokenizer.eos_token_ids)

    # ---- logits processors ---------------------------------------------------------------------

    def attach_processors(self, seq: Sequence) -> None:
        """The request (re)enters the running batch: processors replay its output so far."""
        seq.constrained_by = [
            i for i, processor in enumerate(self.processors)
            if processor.add_request(seq.request_id, seq.params, seq.prompt_token_ids, list(seq.output_token_ids))
        ]

    def detach_processors(self, seq: Sequence) -> None:
        for processor in self.processors:
            processor.remove_request(seq.request_id)
        seq.constrained_by = []

    def apply_processors(self, logits: torch.Tensor, seqs: list[Sequence]) -> set[int]:
        """Let each processor mask the rows it constrains; return rows left with no allowed token."""
        constrained_rows = [row for row, seq in enumerate(seqs) if seq.constrained_by]
        if not constrained_rows:  # idle processors cost nothing
            return set()
        request_ids = [seq.request_id for seq in seqs]
        for index, processor in enumerate(self.processors):
            if any(index in seqs[row].constrained_by for row in constrained_rows):
                processor.apply(logits, request_ids)
        if len(constrained_rows) < logits.shape[0]:
            logits_rows = logits.index_select(0, torch.tensor(constrained_rows, device=logits.device))
        else:
            logits_rows = logits
        # a row is alive if its best logit is finite; amax is one pass (isfinite().any() costs ~30x more)
        alive = (logits_rows.amax(dim=-1) > float("-inf")).tolist()
        return {row for row, ok in zip(constrained_rows, alive, strict=True) if not ok}

    # ---- one sampled token ---------------------------------------------------------------------

    def append_token(
        self, seq: Sequence, token_id: int, logprob: tuple[float, list[tuple[int, float]]] | None, now: float,
    ) -> None:
        stats = seq.stats
        if stats.first_token_time is None:
            stats.first_token_time = now
        elif seq.output_token_ids:
            stats.inter_token_latency_seconds.append(now - seq.last_token_time)
        seq.last_token_time = now
        seq.output_token_ids.append(token_id)
        stats.num_generated_tokens = len(seq.output_token_ids)
        if logprob is not None and seq.logprobs is not None:
            token_lp, top = logprob
            seq.logprobs.append((token_id, token_lp, top))
        for index in seq.constrained_by:
            processor = self.processors[index]
            processor.accept_token(seq.request_id, token_id)
            seq.events.extend(processor.pop_events(seq.request_id))
        self._check_stop(seq, token_id)

    def _check_stop(self, seq: Sequence, token_id: int) -> None:
        params = seq.params
        if token_id in params.stop_token_ids:
            seq.finish_reason, seq.stop_reason = "stop", token_id
            return
        if token_id in self.eos_ids and not params.ignore_eos:
            seq.finish_reason = "stop"
            return
        if any(self.processors[i].is_finished(seq.request_id) for i in seq.constrained_by):
            seq.finish_reason = "stop"
            return
        if len(seq.output_token_ids) >= params.max_tokens or seq.num_tokens >= self.max_model_len:
            seq.finish_reason = "length"

    # ---- leaving and reporting -----------------------------------------------------------------

    def release(self, seq: Sequence, finish_reason: str, now: float | None = None) -> None:
        """The request left the engine (finished or aborted): processors forget it, stats close."""
        for index in seq.constrained_by:
            seq.events.extend(self.processors[index].pop_events(seq.request_id))
        self.detach_processors(seq)
        seq.finish_reason = finish_reason
        stats = seq.stats
        stats.finished_time = now or time.time()
        if stats.first_scheduled_time is not None:
            stats.request_queue_time_seconds = stats.first_scheduled_time - stats.arrival_time
        if stats.first_token_time is not None:
            stats.time_to_first_token_seconds = stats.first_token_time - stats.arrival_time
        stats.e2e_request_latency_seconds = stats.finished_time - stats.arrival_time
        self.metrics.record_finished(stats, finish_reason)

    def make_output(self, seq: Sequence) -> EngineCoreOutput:
        """What is new since this request's previous output; the pending logprobs and events move out."""
        first = seq.emitted_token_count == 0
        new_tokens = seq.output_token_ids[seq.emitted_token_count :]
        seq.emitted_token_count = len(seq.output_token_ids)
        logprobs = None
        if seq.logprobs is not None:
            logprobs, seq.logprobs = seq.logprobs, []
        events, seq.events = seq.events, []
        return EngineCoreOutput(
            request_id=seq.request_id, new_token_ids=new_tokens, new_logprobs=logprobs, new_events=events,
            finish_reason=seq.finish_reason, stop_reason=seq.stop_reason,
            # the first output carries the queue time and cached prefix, the final one everything
            stats=seq.stats if first or seq.finish_reason is not None else None,
        )
