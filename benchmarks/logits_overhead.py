"""Cost of logits processors on decode throughput: batch 32, every request bitmask-masked, and idle.

Three engines on one checkpoint: no processors; a bitmask processor registered but constraining
nothing (idle); the same processor constraining every request. The three step in turn (step-level
interleaving, rotating who goes first), so machine load hits them alike; each engine's time is the
sum of its own step times. Repeats, medians of the per-repeat ratios: `time_overhead_frac` is the
masked engine's extra decode time over the plain one's (masked / plain - 1; see the README on key names).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from benchmarks._common import bench_checkpoint, emit, log, median, parse_args, random_prompt, step_in_turn
from engine.config import EngineConfig
from engine.kernels.bitmask import bitmask_from_token_ids, bitmask_words
from engine.kernels.dispatch import apply_token_bitmask
from engine.llm_engine import LLMEngine
from engine.processors.logits_process import LogitsProcessor
from engine.sampling_params import SamplingParams

BATCH = 32
PROMPT_TOKENS = 64
OUTPUT_TOKENS = 128


class AllowListProcessor(LogitsProcessor):
    """extra_args["allow"] = a name of a cached allow-list mask; per step: one gather + one apply."""

    name = "allow"

    def __init__(self, vocab_size: int, masks: dict[str, list[int]]) -> None:
        self.vocab_size = vocab_size
        # masks are packed once at start-up; a request only points at one
        self.masks = {name: bitmask_from_token_ids(ids, vocab_size) for name, ids in masks.items()}
        self.rows: dict[str, torch.Tensor] = {}
        self.full = torch.full((bitmask_words(vocab_size),), -1, dtype=torch.int32)

    def validate_params(self, params: SamplingParams) -> None:
        name = params.extra_args.get(self.name)
        if name is not None and name not in self.masks:
            raise ValueError(f"unknown allow-list {name!r}")

    def add_request(self, request_id, params, prompt_token_ids, output_token_ids) -> bool:
        name = params.extra_args.get(self.name)
        if name is None:
            return False
        self.rows[request_id] = self.masks[name]
        return True

    def remove_request(self, request_id: str) -> None:
        self.rows.pop(request_id, None)

    def apply(self, logits: torch.Tensor, request_ids: Sequence[str | None]) -> None:
        masks = torch.stack([self.rows.get(r, self.full) if r is not None else self.full for r in request_ids])
        apply_token_bitmask(logits, masks)  # [rows, words] over [rows, vocab]

    def accept_token(self, request_id: str, token_id: int) -> None:
        pass


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    path = bench_checkpoint()
    config = EngineConfig(max_num_seqs=BATCH, dtype=args.dtype)
    plain = LLMEngine.from_pretrained(path, config)
    vocab = plain.model.config.vocab_size
    allow = {"even": list(range(0, vocab, 2))}
    idle = LLMEngine.from_pretrained(path, config, [AllowListProcessor(vocab, allow)])
    masked = LLMEngine.from_pretrained(path, config, [AllowListProcessor(vocab, allow)])
    rng = torch.Generator().manual_seed(0)
    prompts = [random_prompt(rng, PROMPT_TOKENS) for _ in range(BATCH)]
    free = SamplingParams(temperature=0, max_tokens=OUTPUT_TOKENS, ignore_eos=True)
    constrained = SamplingParams(temperature=0, max_tokens=OUTPUT_TOKENS, ignore_eos=True, extra_args={"allow": "even"})
    engines = {"plain": (plain, [free] * BATCH), "idle": (idle, [free] * BATCH),
               "masked": (masked, [constrained] * BATCH)}
    names = list(engines)

    check = masked.generate(prompts[:2], constrained)
    assert all(t % 2 == 0 for o in check for t in o.token_ids), "mask not applied"
    step_in_turn(engines, prompts, "warmup")
    repeats = args.repeats or 5
    totals: dict[str, list[float]] = {name: [] for name in names}
    for repeat in range(repeats):
        seconds = step_in_turn(engines, prompts, f"r{repeat}")   # all three decode the batch in turn
        for name in names:
            totals[name].append(seconds[name])
        log(f"[{repeat}] " + ", ".join(f"{n} {seconds[n]:.2f}s" for n in names))
    time_overhead = median([m / p for m, p in zip(totals["masked"], totals["plain"], strict=True)]) - 1
    idle_time_overhead = median([i / p for i, p in zip(totals["idle"], totals["plain"], strict=True)]) - 1
    tokens = BATCH * OUTPUT_TOKENS
    emit({
        "time_overhead_frac": round(time_overhead, 4),
        "idle_time_overhead_frac": round(idle_time_overhead, 4),
        "plain_tok_s": round(tokens / median(totals["plain"]), 1),
        "masked_tok_s": round(tokens / median(totals["masked"]), 1),
        "idle_tok_s": round(tokens / median(totals["idle"]), 1),
        "batch": BATCH,
        "output_tokens_per_request": OUTPUT_TOKENS,
        "vocab_size": vocab,
        "dtype": plain.dtype,
        "repeats": repeats,
        "torch_threads": torch.get_num_threads(),
    }, args.json)


if __name__ == "__main__":
    main()
