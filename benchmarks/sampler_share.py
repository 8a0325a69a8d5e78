"""Where a decode step's time goes: forward pass, logits processors, sampler, bookkeeping.

Batch 32 (default) of random prompts decoded to a fixed length (ignore_eos) at temperature 1.0 on a
random-weight checkpoint; with `--tokenizer-from DIR` the checkpoint carries a released model's
tokenizer (e.g. Qwen3's 151,669 ids padded to 151,680), so the sampler works over a real vocabulary.
Each phase is timed inside `LLMEngine.step` by wrapping the runner, the processors and the sampler;
`sampler_share` is the sampler's share of the summed step time. The warm-up run is not counted.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks._common import BENCH_MODEL, add_common_args, bench_checkpoint, emit, log, random_prompt, setup
from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from engine.synthetic import write_checkpoint_with_tokenizer

PROMPT_TOKENS = 32


class PhaseClock:
    """Seconds spent in each wrapped callable."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def wrap(self, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        self.seconds.setdefault(name, 0.0)

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - start

        return timed


def checkpoint_for(tokenizer_dir: Path | None, scratch: Path) -> Path:
    if tokenizer_dir is None:
        return bench_checkpoint()
    shape = {k: v for k, v in BENCH_MODEL.items() if k != "model_vocab_size"}
    return write_checkpoint_with_tokenizer(scratch / "ckpt", tokenizer_dir, **shape)  # type: ignore[arg-type]


def measure(engine: LLMEngine, prompts: list[list[int]], params: SamplingParams, repeats: int) -> dict[str, float]:
    clock = PhaseClock()
    engine.runner.execute = clock.wrap("forward", engine.runner.execute)          # type: ignore[method-assign]
    engine.post.apply_processors = clock.wrap("processors", engine.post.apply_processors)  # type: ignore[method-assign]
    engine.sampler = clock.wrap("sampler", engine.sampler)                       # type: ignore[assignment]
    engine.step = clock.wrap("step", engine.step)                                # type: ignore[method-assign]
    engine.generate(prompts[:4], SamplingParams(temperature=params.temperature, max_tokens=4, ignore_eos=True))
    clock.seconds = dict.fromkeys(clock.seconds, 0.0)
    for _ in range(repeats):
        engine.generate(prompts, params)
    return clock.seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)
    parser.add_argument("--tokenizer-from", type=Path, default=None,
                        help="folder with a released model's tokenizer.json and tokenizer_config.json")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--logprobs", type=int, default=None)
    args = setup(parser)
    scratch = Path(tempfile.mkdtemp(prefix="sampler-share-"))
    try:
        path = checkpoint_for(args.tokenizer_from, scratch)
        engine = LLMEngine.from_pretrained(path, EngineConfig(max_num_seqs=args.batch, dtype=args.dtype))
        vocab = engine.model.config.vocab_size
        rng = torch.Generator().manual_seed(0)
        prompts = [random_prompt(rng, PROMPT_TOKENS, high=min(vocab, 100_000)) for _ in range(args.batch)]
        params = SamplingParams(temperature=args.temperature, top_p=args.top_p, top_k=args.top_k,
                                logprobs=args.logprobs, max_tokens=args.max_tokens, ignore_eos=True)
        repeats = args.repeats or 1
        seconds = measure(engine, prompts, params, repeats)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    step = seconds["step"]
    tokens = repeats * args.batch * args.max_tokens
    log(", ".join(f"{name} {value:.2f}s" for name, value in seconds.items()))
    emit({
        "sampler_share": round(seconds["sampler"] / step, 4),
        "forward_share": round(seconds["forward"] / step, 4),
        "processors_share": round(seconds["processors"] / step, 4),
        "other_share": round(1 - (seconds["sampler"] + seconds["forward"] + seconds["processors"]) / step, 4),
        "step_s": round(step, 3),
        "sampler_s": round(seconds["sampler"], 3),
        "forward_s": round(seconds["forward"], 3),
        "sampler_ms_per_step": round(1e3 * seconds["sampler"] / (repeats * args.max_tokens), 2),
        "tok_s": round(tokens / step, 1),
        "tokens": tokens,
        "vocab_size": vocab,
        "tokenizer": str(args.tokenizer_from) if args.tokenizer_from else "synthetic 8k",
        "dtype": str(next(engine.model.parameters()).dtype).removeprefix("torch."),
        "batch": args.batch,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "top_k": args.top_k,
        "logprobs": args.logprobs,
        "repeats": repeats,
        "torch_threads": torch.get_num_threads(),
    }, args.json)


if __name__ == "__main__":
    main()
