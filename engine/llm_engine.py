"""The synchronous engine: add requests, call `step()` until done, read incremental outputs.

`step_core()` is the engine core's step: it returns per-request deltas (`EngineCoreOutput`, token ids
only) and is what the engine-core process runs (`engine.core_proc`). `step()` adds the output processor
(text, stop strings, logprob texts) for callers in the same process, such as tests and benchmarks."""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Sequence as Seq
from pathlib import Path
from typing import Any

import torch

from engine.checkpoint import load_tokenizer
from engine.config import EngineConfig, ModelConfig, ModelLoadError
from engine.errors import ContextLengthExceeded
from engine.kv_cache import create_kv_cache
from engine.kv_spec import KVCacheSpec
from engine.loader import checkpoint_hash, iter_weights, load_model_config, weight_files
from engine.metrics import EngineMetrics
from engine.model_runner import ModelRunner
from engine.models.llama import LlamaForCausalLM
from engine.output_processor import OutputProcessor
from engine.outputs import EngineCoreOutput, RequestOutput
from engine.postprocess import StepPostprocessor
from engine.precision import dtype_name, resolve_dtype
from engine.processors.logits_process import LogitsProcessor
from engine.sampler import Sampler
from engine.sampling_params import InvalidRequestError, SamplingParams
from engine.scheduler import ScheduledBatch, Scheduler
from engine.sequence import Sequence
from engine.tokenizer import Tokenizer

logger = logging.getLogger("engine")


class LLMEngine:
    def __init__(
        self, model: LlamaForCausalLM, tokenizer: Tokenizer, config: EngineConfig, *,
        model_id: str, checkpoint_hash: str, logits_processors: Seq[LogitsProcessor] = (),
    ) -> None:
        config.validate()
        self.config = config
        self.model = model
        self.tokenizer = tokenizer
        self.model_id = model_id
        self.checkpoint_hash = checkpoint_hash
        self.processors = list(logits_processors)
        model_config: ModelConfig = model.config
        self.max_model_len = _max_model_len(model_config, config)
        dtype = next(model.parameters()).dtype
        device = next(model.parameters()).device
        self.kv_cache, self.block_manager = create_kv_cache(model_config, config, dtype, device, self.max_model_len)
        self.scheduler = Scheduler(config, self.block_manager)
        self.runner = ModelRunner(model, self.kv_cache, self.block_manager)
        # every matmul shape a step can run, met now: the memory at ready is the memory under any traffic
        model.warm_up_matmuls(config.max_num_batched_tokens, config.max_num_seqs)
        self.sampler = Sampler(torch.Generator(device=device).manual_seed(config.seed))
        self.metrics = EngineMetrics(config.stats_window)
        self.post = StepPostprocessor(tokenizer, self.processors, self.metrics, self.max_model_len)
        self.output_processor = OutputProcessor(tokenizer)   # used by step(); the core process has none
        self.requests: dict[str, Sequence] = {}
        self._device = device
        self._ids = itertools.count()

    @classmethod
    def from_pretrained(
        cls, path: str | Path, config: EngineConfig | None = None,
        logits_processors: Seq[LogitsProcessor] = (), *, model_id: str | None = None,
    ) -> LLMEngine:
        """Load a Hugging Face checkpoint folder (config.json, safetensors, tokenizer.json)."""
        config = config or EngineConfig()
        config.validate()
        path = Path(path)
        if not path.is_dir():
            raise ModelLoadError(f"checkpoint folder not found: {path}")
        model_config = load_model_config(path)
        files = weight_files(path)
        if config.num_threads:
            torch.set_num_threads(config.num_threads)
        device = torch.device(config.device)
        dtype = resolve_dtype(config.dtype, model_config.torch_dtype, device)
        KVCacheSpec.from_configs(model_config, config, dtype)   # a KV setting this model cannot use fails before loading
        with torch.device(device):
            model = LlamaForCausalLM(model_config, _max_model_len(model_config, config), dtype)
        model.load_weights(iter_weights(files), source=", ".join(f.name for f in files))
        model.eval().requires_grad_(False)
        tokenizer = load_tokenizer(path, model_config)
        return cls(
            model, tokenizer, config, model_id=model_id or path.name,
            checkpoint_hash=checkpoint_hash(path, files), logits_processors=logits_processors,
        )

    @property
    def dtype(self) -> str:
        """The dtype the weights and KV cache are held in ("bfloat16", "float32", ...)."""
        return dtype_name(next(self.model.parameters()).dtype)

    # ---- requests ------------------------------------------------------------------------------

    def add_request(
        self, request_id: str, prompt: str | list[int], params: SamplingParams | None = None, *,
        intent: str | None = None, cache_salt: str | None = None, output_kind: str = "cumulative",
    ) -> None:
        """Queue a request; raises InvalidRequestError (a ValueError) before any compute if unusable."""
        seq = self.prepare_request(request_id, prompt, params, intent=intent, cache_salt=cache_salt)
        self.enqueue(seq, output_kind=output_kind)

    def prepare_request(
        self, request_id: str, prompt: str | list[int], params: SamplingParams | None = None, *,
        intent: str | None = None, cache_salt: str | None = None,
    ) -> Sequence:
        """Validate, tokenize and let the processors build what the request needs (a KG constraint's
        allowed-set view), without touching engine state: safe while a step runs on another thread."""
        params = params or SamplingParams()
        if request_id in self.requests:
            raise InvalidRequestError(f"request id {request_id!r} is already in use")
        params.validate()
        for processor in self.processors:
            processor.prepare(params)
        token_ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        self._validate_prompt(token_ids, params)
        seq = Sequence(request_id, token_ids, params, self.scheduler.priority_of(intent), time.time(), cache_salt)
        seq.stats.arrival_time = seq.arrival_time
        seq.stats.num_prompt_tokens = len(token_ids)
        if params.seed is not None:
            seq.generator = torch.Generator(device=self._device).manual_seed(params.seed)
        if params.logprobs is not None:
            seq.logprobs = []
        return seq

    def enqueue(self, seq: Sequence, *, output_kind: str | None = "cumulative") -> None:
        """Hand a prepared request to the scheduler. output_kind: how `step()` reports it ("cumulative" or
        "delta"); None when the caller reads `step_core()`'s deltas itself (the engine-core process)."""
        if seq.request_id in self.requests:
            raise InvalidRequestError(f"request id {seq.request_id!r} is already in use")
        if output_kind is not None:
            self.output_processor.add_request(seq.request_id, seq.prompt_token_ids, seq.params,
                                              output_kind=output_kind, arrival_time=seq.arrival_time)
        self.requests[seq.request_id] = seq
        self.scheduler.add(seq)

    def _validate_prompt(self, token_ids: list[int], params: SamplingParams) -> None:
        if not token_ids:
            raise InvalidRequestError("prompt is empty")
        vocab = self.model.config.vocab_size
        if any(not 0 <= t < vocab for t in token_ids):
            raise InvalidRequestError(f"prompt holds token ids outside the vocabulary [0, {vocab})")
        if len(token_ids) >= self.max_model_len:
            raise ContextLengthExceeded(len(token_ids), self.max_model_len)
        longest = min(len(token_ids) + params.max_tokens, self.max_model_len)
        if not self.block_manager.fits(longest):
            raise InvalidRequestError(
                f"prompt + max_tokens = {longest} tokens exceeds the KV cache "
                f"({self.block_manager.max_seq_tokens} tokens)"
            )

    def abort(self, request_id: str, reason: str = "abort") -> None:
        """Stop a request and free its KV blocks at once; unknown or finished ids are ignored.

        reason "stop": a stop string, found beside the core, ended it (counted as a finish, not an abort)."""
        self.output_processor.remove(request_id)
        seq = self.requests.pop(request_id, None)
        if seq is None:
            return
        self.scheduler.finish(seq)
        self.post.release(seq, reason)

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    @property
    def kv_cache_settings(self) -> dict[str, Any]:
        """KV cache dtype, strategy and layout: they can change outputs, so records and /health name them."""
        return self.kv_cache.settings

    # ---- the step loop -------------------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        """Run one scheduled batch; return an output for every request that advanced or finished."""
        processed = self.output_processor.process(self.step_core())
        for request_id in processed.stopped:
            self.abort(request_id, "stop")
        return processed.outputs

    @torch.inference_mode()
    def step_core(self) -> list[EngineCoreOutput]:
        """Run one scheduled batch; return the delta of every request that advanced or finished.

        Runs under inference_mode as a whole, so processors may edit the logits in place."""
        started = time.perf_counter()
        batch = self.scheduler.schedule()
        for seq in batch.preempted:
            self.post.detach_processors(seq)
        for seq in batch.admitted:
            self.post.attach_processors(seq)
        if batch.is_empty:
            return []
        step_logits = self.runner.execute(batch)
        for seq, num_new in zip(batch.seqs, batch.num_new_tokens, strict=True):
            seq.num_computed_tokens += num_new
            self.block_manager.register_full_blocks(seq)  # publish before a finished seq frees them
        sample_seqs = [batch.seqs[row] for row in step_logits.sample_rows]
        self.post.apply_processors(step_logits.logits, sample_seqs)
        sampled = self.sampler(step_logits.logits, sample_seqs)
        _charge_step(batch, time.perf_counter() - started)
        outputs: list[EngineCoreOutput] = []
        now = time.time()
        for row, seq in enumerate(sample_seqs):
            if row in sampled.dead_rows and seq.constrained_by:   # the processors left no token
                seq.finish_reason = "constraint_dead_end"
            else:
                self.post.append_token(seq, sampled.token_ids[row], sampled.logprobs[row], now)
            if seq.finish_reason is not None:
                self.scheduler.finish(seq)
                self.requests.pop(seq.request_id, None)
                self.post.release(seq, seq.finish_reason, now)
            outputs.append(self.post.make_output(seq))
        return outputs

    def generate(
        self, prompts: Seq[str | list[int]], params: SamplingParams | Seq[SamplingParams] | None = None,
    ) -> list[RequestOutput]:
        """Run prompts to completion; final outputs in prompt order."""
        params_list = list(params) if isinstance(params, list | tuple) else [params or SamplingParams()] * len(prompts)
        if len(params_list) != len(prompts):
            raise InvalidRequestError(f"{len(prompts)} prompts but {len(params_list)} sampling params")
        ids = [f"generate-{next(self._ids)}" for _ in prompts]
        # validate every prompt before queueing any, so a bad one leaves nothing half-submitted
        seqs = [self.prepare_request(i, prompt, p) for i, prompt, p in zip(ids, prompts, params_list, strict=True)]
        for seq in seqs:
            self.enqueue(seq)   # cumulative: the final output holds everything
        final: dict[str, RequestOutput] = {}
        while self.has_unfinished():
            for output in self.step():
                if output.finished:
                    final[output.request_id] = output
        return [final[i] for i in ids]

    def stats(self) -> dict[str, Any]:
        snapshot = self.metrics.snapshot()
        snapshot.update(
            prefix_cache_queries=self.block_manager.prefix_cache_queries,
            prefix_cache_hits=self.block_manager.prefix_cache_hits,
            num_preemptions=self.scheduler.num_preemptions,
            kv_cache_usage_perc=self.block_manager.usage(),
            num_requests_running=len(self.scheduler.running),
            num_requests_waiting=len(self.scheduler.waiting),
            num_requests_waiting_by_priority=_count_by_priority(self.scheduler.waiting, self.config),
            num_requests_running_by_priority=_count_by_priority(self.scheduler.running, self.config),
        )
        snapshot.update(self.kv_cache.stats(self.block_manager))
        for processor in self.processors:
            snapshot.update(_processor_stats(processor))
        return snapshot


_FAILED_STATS: set[int] = set()   # processors whose stats() failure was logged (the core reports twice a second)


def _processor_stats(processor: LogitsProcessor) -> dict[str, Any]:
    """A processor's gauges. One that does not subclass `LogitsProcessor` may have no `stats`, and one whose
    `stats` fails loses its gauges for this report, not the engine: the stats double as the core's heartbeat."""
    report = getattr(processor, "stats", None)
    if report is None:
        return {}
    try:
        return dict(report())
    except Exception:   # noqa: BLE001 - a gauge is never worth a step loop
        if id(processor) not in _FAILED_STATS:
            _FAILED_STATS.add(id(processor))
            logger.exception("logits processor %r: stats() failed (logged once)", getattr(processor, "name", processor))
        return {}


def _charge_step(batch: ScheduledBatch, seconds: float) -> None:
    """Split one step's wall time over its requests by the tokens each computed (prefill chunks weigh more
    than one decode token), so the shares of concurrent requests add up to the time the engine was busy."""
    total = sum(batch.num_new_tokens)
    for seq, num_new in zip(batch.seqs, batch.num_new_tokens, strict=True):
        seq.stats.engine_time_seconds += seconds * num_new / total


def _count_by_priority(seqs: list[Sequence], config: EngineConfig) -> dict[str, int]:
    """Requests per intent priority class, every configured class present (an empty queue reads 0, not absent);
    keys are strings, as they cross the process boundary in a map."""
    classes = sorted({*config.intent_priorities.values(), config.default_priority})
    counts = {str(priority): 0 for priority in classes}
    for seq in seqs:
        counts[str(seq.priority)] = counts.get(str(seq.priority), 0) + 1
    return counts



def _max_model_len(model_config: ModelConfig, config: EngineConfig) -> int:
    limit = config.max_model_len or min(model_config.max_position_embeddings, config.max_model_len_cap)
    if model_config.sliding_window:  # no sliding-window attention here: stay inside the window
        limit = min(limit, model_config.sliding_window)
    return limit
