"""What a quantized KV cache does to outputs (benchmarks.kv_cache): greedy match, perplexity on held text,
and FER on the hallucination prompts, each against the full-precision cache on the same model.

Held text: the reference answers of benchmarks/data/hallucination_prompts.jsonl (written from the KGs by
scripts/demo_corpus, not by this benchmark), packed as multi-turn chats up to the model's context and
teacher-forced after the first question: every forced token is a decode step that reads the cache, so
later answers attend to earlier turns stored quantized.
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from benchmarks import hallucination_eval as halu
from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.processors.logits_process import LogitsProcessor
from engine.sampling_params import SamplingParams

DTYPES = ("auto", "int8", "int4")


class TeacherForcing(LogitsProcessor):
    """Forces `extra_args["teacher_forcing"]` (token ids) and records each one's log-probability under
    the logits the engine produced before forcing, and which token those logits ranked first."""

    name = "teacher_forcing"

    def __init__(self) -> None:
        self.targets: dict[str, list[int]] = {}
        self.logprobs: dict[str, list[float]] = {}
        self.top1: dict[str, list[int]] = {}

    def validate_params(self, params: SamplingParams) -> None:
        return None

    def add_request(self, request_id: str, params: SamplingParams, prompt_token_ids: Sequence[int],
                    output_token_ids: Sequence[int]) -> bool:
        targets = params.extra_args.get(self.name)
        if targets is None:
            return False
        self.targets[request_id] = list(targets)
        # after a preemption the engine replays the output: keep what those tokens scored
        self.logprobs[request_id] = self.logprobs.get(request_id, [])[: len(output_token_ids)]
        self.top1[request_id] = self.top1.get(request_id, [])[: len(output_token_ids)]
        return True

    def remove_request(self, request_id: str) -> None:
        self.targets.pop(request_id, None)

    def apply(self, logits: torch.Tensor, request_ids: Sequence[str | None]) -> None:
        for row, request_id in enumerate(request_ids):
            if request_id not in self.targets:
                continue
            scored = self.logprobs[request_id]
            target = self.targets[request_id][len(scored)]
            scored.append(logits[row].float().log_softmax(-1)[target].item())
            self.top1[request_id].append(int(logits[row].argmax()))
            logits[row].fill_(float("-inf"))
            logits[row, target] = 0.0

    def accept_token(self, request_id: str, token_id: int) -> None:
        return None


def held_conversations(engine: LLMEngine, rows: list[dict[str, Any]], context: int) -> list[tuple[list[int], list[int]]]:
    """(prompt, forced continuation) per chat of question/reference-answer turns that fits `context`."""
    tokenizer = engine.tokenizer
    chats: list[tuple[list[int], list[int]]] = []
    turns: list[dict[str, str]] = []

    def close() -> None:
        if len(turns) < 2:
            return
        full = tokenizer.apply_chat_template(turns, add_generation_prompt=False, tokenize=True)
        first = tokenizer.apply_chat_template(turns[:1], add_generation_prompt=True, tokenize=True)
        assert isinstance(full, list) and isinstance(first, list) and full[: len(first)] == first
        chats.append((first, full[len(first):]))

    for row in rows:
        candidate = turns + [{"role": "user", "content": row["prompt"]},
                             {"role": "assistant", "content": row["reference_answer"]}]
        if len(tokenizer.apply_chat_template(candidate, add_generation_prompt=False, tokenize=True)) >= context:
            close()
            candidate = candidate[-2:]
            if len(tokenizer.apply_chat_template(candidate, add_generation_prompt=False, tokenize=True)) >= context:
                turns = []
                continue
        turns = candidate
    close()
    return chats


def perplexity(path: Path, dtype: str, rows: list[dict[str, Any]], threads: int | None) -> tuple[float, list[int]]:
    """exp(mean negative log-likelihood) of the forced tokens, and the top-ranked token at each of them."""
    forcing = TeacherForcing()
    engine = LLMEngine.from_pretrained(path, EngineConfig(kv_cache_dtype=dtype, num_threads=threads), [forcing])
    chats = held_conversations(engine, rows, engine.max_model_len)
    params = [SamplingParams(temperature=0, max_tokens=len(forced), ignore_eos=True,
                             extra_args={TeacherForcing.name: forced}) for _, forced in chats]
    outputs = engine.generate([prompt for prompt, _ in chats], params)
    scores = [lp for output in outputs for lp in forcing.logprobs[output.request_id]]
    top1 = [token for output in outputs for token in forcing.top1[output.request_id]]
    assert len(scores) == len(top1) == sum(len(forced) for _, forced in chats)
    return math.exp(-statistics.fmean(scores)), top1


def hallucination_runs(path: Path, rows: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """Greedy match and FER with the KG constraint on (as the service runs): every dtype, same prompts."""
    from auditor.serving.runtime import KgKnowledge  # the service's wiring, as hallucination_eval uses it
    from knowledge_graphs import load_kg

    domains = sorted({row["domain"] for row in rows})
    kgs = {domain: load_kg(domain) for domain in domains}
    knowledge = KgKnowledge(kgs)
    domain_kgs = {domain: halu.DomainKG(kg, knowledge) for domain, kg in kgs.items()}
    constraints = [domain_kgs[row["domain"]].constraint(row["prompt"]) for row in rows]
    sampled = argparse.Namespace(temperature=0.8, top_p=0.95, max_tokens=args.max_tokens)
    greedy: dict[str, list[list[int]]] = {}
    outputs: dict[str, list[Any]] = {}
    for dtype in DTYPES:
        engine = halu.load_engine(path, kgs, args.threads, kv_cache_dtype=dtype)
        chat = [engine.tokenizer.apply_chat_template([{"role": "user", "content": row["prompt"]}]) for row in rows]
        greedy_params = [SamplingParams(temperature=0, max_tokens=args.max_tokens,
                                        extra_args={"kg_constraint": c} if c else {}) for c in constraints]
        greedy[dtype] = [o.token_ids for o in engine.generate(chat, greedy_params)]
        outputs[dtype] = engine.generate(chat, [halu.sampling(row["id"], sampled, c)
                                                for row, c in zip(rows, constraints, strict=True)])
        halu.log(f"  {dtype}: generated {len(rows)} greedy and {len(rows)} sampled answers")
    result: dict[str, Any] = {}
    for dtype in ("int8", "int4"):
        same = sum(a == b for a, b in zip(greedy["auto"], greedy[dtype], strict=True))
        result[f"greedy_match_{dtype}"] = round(same / len(rows), 4)
        totals, pairs = halu.score(rows, {"off": outputs["auto"], "on": outputs[dtype]}, constraints, domain_kgs)
        result["fer_auto"] = _round(totals["off"].fer)
        result[f"fer_{dtype}"] = _round(totals["on"].fer)
        result["verified_claims_auto"] = totals["off"].supported + totals["off"].contradicted
        result[f"verified_claims_{dtype}"] = totals["on"].supported + totals["on"].contradicted
        worse = sum(on.contradicted > off.contradicted for off, on in pairs)
        better = sum(on.contradicted < off.contradicted for off, on in pairs)
        # "no worse beyond one prompt": at most one more prompt got worse than got better
        result[f"fer_{dtype}_prompts_worse"], result[f"fer_{dtype}_prompts_better"] = worse, better
        result[f"fer_{dtype}_within_one_prompt"] = worse - better <= 1
    return result


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
