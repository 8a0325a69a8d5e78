"""bf16 against fp32 on the bundled model: greedy agreement, perplexity, decode throughput.

What `dtype="auto"` changes for the model the service ships (an fp32 checkpoint, run in bf16 on CPUs
with AMX or AVX512-BF16):
- greedy: every prompt of benchmarks/data/hallucination_prompts.jsonl (chat template applied) decoded
  greedily in both dtypes, up to `--max-tokens`, stopping at EOS as the service does. `greedy_match_rate`
  is the share of prompts whose outputs are identical; `greedy_token_agreement` the share of fp32's
  tokens that bf16 reproduces before the two part (or end).
- perplexity: of each prompt's reference answer (written from the KG, not by the model) after its
  chat-rendered question, teacher-forced through the engine's own forward pass in each dtype;
  `perplexity_delta_frac` = bf16 / fp32 - 1. The answer tokens alone are scored.
- throughput: both engines decode the same batch of chat prompts (fixed length, ignore_eos) stepping
  in turn (`step_in_turn`), so machine load hits both alike; median over repeats.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

import torch

from benchmarks._common import add_common_args, emit, log, setup, step_in_turn
from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams

REPO_ROOT = Path(__file__).resolve().parent.parent
PROMPTS = REPO_ROOT / "benchmarks" / "data" / "hallucination_prompts.jsonl"
MODEL = REPO_ROOT / "auditor" / "bundled_model"
DTYPES = ("float32", "bfloat16")


def answer_logprob(engine: LLMEngine, prompt_ids: list[int], answer_ids: list[int]) -> float:
    """Sum of log p(answer token | everything before it), from one prefill of prompt + answer."""
    hidden: list[torch.Tensor] = []
    forward = engine.model.forward

    def keep_hidden(*args, **kwargs):  # type: ignore[no-untyped-def]
        hidden.append(forward(*args, **kwargs))
        return hidden[-1]

    engine.model.forward = keep_hidden  # type: ignore[method-assign]
    try:
        engine.generate([prompt_ids + answer_ids], SamplingParams(temperature=0, max_tokens=1))
    finally:
        del engine.model.forward
    states = torch.cat(hidden)                                                       # [prompt + answer, hidden]
    # position i predicts token i + 1: the answer's tokens are predicted from len(prompt) - 1 on
    logits = engine.model.compute_logits(states[len(prompt_ids) - 1 : -1])           # [answer, vocab] fp32
    logprobs = torch.log_softmax(logits, dim=-1)
    return float(logprobs.gather(1, torch.tensor(answer_ids)[:, None]).sum())


def perplexities(engines: dict[str, LLMEngine], rows: list[dict]) -> dict[str, float]:
    tokenizer = engines[DTYPES[0]].tokenizer
    totals = dict.fromkeys(engines, 0.0)
    count = 0
    for row in rows:
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": row["prompt"]}], tokenize=True)
        answer = tokenizer.encode(row["reference_answer"], add_special_tokens=False) + tokenizer.eos_token_ids[:1]
        count += len(answer)
        for name, engine in engines.items():
            totals[name] += answer_logprob(engine, list(prompt), answer)
    return {name: math.exp(-total / count) for name, total in totals.items()}


def greedy_agreement(engines: dict[str, LLMEngine], chats: list[str], max_tokens: int) -> tuple[float, float]:
    params = SamplingParams(temperature=0, max_tokens=max_tokens)
    outputs = {name: [o.token_ids for o in engine.generate(chats, params)] for name, engine in engines.items()}
    identical = agreed = total = 0
    for reference, other in zip(outputs["float32"], outputs["bfloat16"], strict=True):
        identical += reference == other
        agreed += next((i for i, (a, b) in enumerate(zip(reference, other, strict=False)) if a != b),
                       min(len(reference), len(other)))
        total += len(reference)
    return identical / len(chats), agreed / total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)
    parser.add_argument("--model", type=Path, default=MODEL)
    parser.add_argument("--limit", type=int, default=0, help="only the first N prompts (0: all 240)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--batch", type=int, default=32, help="requests per throughput run")
    args = setup(parser)
    rows = [json.loads(line) for line in PROMPTS.read_text().splitlines() if line.strip()][: args.limit or None]
    # no prefix cache: the teacher-forced pass must compute every position of prompt + answer
    config = {"kv_cache_memory_bytes": 64 * 2**20, "enable_prefix_caching": False}
    engines = {dtype: LLMEngine.from_pretrained(args.model, EngineConfig(dtype=dtype, **config)) for dtype in DTYPES}
    tokenizer = engines["float32"].tokenizer
    chats = [tokenizer.apply_chat_template([{"role": "user", "content": r["prompt"]}]) for r in rows]

    match_rate, token_agreement = greedy_agreement(engines, chats, args.max_tokens)
    log(f"greedy: {match_rate:.1%} of outputs identical, {token_agreement:.1%} of tokens before parting")
    ppl = perplexities(engines, rows)
    log(f"perplexity of the reference answers: fp32 {ppl['float32']:.4f}, bf16 {ppl['bfloat16']:.4f}")

    fixed = SamplingParams(temperature=0, max_tokens=args.max_tokens, ignore_eos=True)
    batch = chats[: args.batch]
    contenders = {name: (engine, [fixed] * len(batch)) for name, engine in engines.items()}
    step_in_turn(contenders, batch, "warmup")
    repeats = args.repeats or 3
    runs = [step_in_turn(contenders, batch, f"r{repeat}") for repeat in range(repeats)]
    tokens = len(batch) * args.max_tokens
    tok_s = {name: statistics.median(tokens / run[name] for run in runs) for name in engines}
    emit({
        "greedy_match_rate": round(match_rate, 4),
        "greedy_token_agreement": round(token_agreement, 4),
        "perplexity_fp32": round(ppl["float32"], 4),
        "perplexity_bf16": round(ppl["bfloat16"], 4),
        "perplexity_delta_frac": round(ppl["bfloat16"] / ppl["float32"] - 1, 4),
        "tok_s_fp32": round(tok_s["float32"], 1),
        "tok_s_bf16": round(tok_s["bfloat16"], 1),
        "bf16_speedup": round(statistics.median(run["float32"] / run["bfloat16"] for run in runs), 3),
        "prompts": len(rows),
        "max_tokens": args.max_tokens,
        "batch": len(batch),
        "repeats": repeats,
        "torch_threads": torch.get_num_threads(),
    }, args.json)


if __name__ == "__main__":
    main()
