"""Throughput of our engine vs transformers `generate` (sequential and padded batches), CPU.

Workload: 64 seeded requests, prompt lengths 16-512, output lengths 16-256, ignore_eos, greedy.
tok/s counts only each request's own output tokens (padding and over-generation in HF batches
are not counted). HF sequential runs on a subsample (tok/s is per-request rate, so it scales).
"""

from __future__ import annotations

import torch

from benchmarks._common import (
    bench_checkpoint,
    count_params,
    emit,
    log,
    median,
    parse_args,
    random_prompt,
    timed,
)
from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams

NUM_REQUESTS = 64
SEQUENTIAL_SAMPLE = 6
BATCH_SIZES = (8, 16, 32)
GREEDY_CHECKS = 4


def workload(seed: int = 0) -> list[tuple[list[int], int]]:
    rng = torch.Generator().manual_seed(seed)
    prompt_lens = torch.randint(16, 513, (NUM_REQUESTS,), generator=rng).tolist()
    output_lens = torch.randint(16, 257, (NUM_REQUESTS,), generator=rng).tolist()
    return [(random_prompt(rng, p), o) for p, o in zip(prompt_lens, output_lens, strict=True)]


def run_engine(engine: LLMEngine, requests: list[tuple[list[int], int]]) -> list[list[int]]:
    params = [SamplingParams(temperature=0, max_tokens=o, ignore_eos=True) for _, o in requests]
    return [out.token_ids for out in engine.generate([p for p, _ in requests], params)]


def hf_generate_batch(model, batch: list[tuple[list[int], int]]) -> list[list[int]]:
    """Left-padded batch generate up to the longest requested output; each request keeps its own length."""
    width = max(len(p) for p, _ in batch)
    ids = torch.zeros(len(batch), width, dtype=torch.long)
    mask = torch.zeros(len(batch), width, dtype=torch.long)
    for row, (prompt, _) in enumerate(batch):
        ids[row, width - len(prompt):] = torch.tensor(prompt)
        mask[row, width - len(prompt):] = 1
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=max(o for _, o in batch), do_sample=False,
            pad_token_id=0,
        )
    return [out[row, width : width + o].tolist() for row, (_, o) in enumerate(batch)]


def run_hf_batched(model, requests: list[tuple[list[int], int]], batch_size: int) -> None:
    # sorted by prompt length so padding is as small as HF batching can make it
    ordered = sorted(requests, key=lambda r: len(r[0]))
    for start in range(0, len(ordered), batch_size):
        hf_generate_batch(model, ordered[start : start + batch_size])


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    import transformers  # noqa: PLC0415 - benchmark-only dependency

    transformers.logging.set_verbosity_error()
    path = bench_checkpoint()
    requests = workload()
    total_tokens = sum(o for _, o in requests)
    engine = LLMEngine.from_pretrained(path, EngineConfig(max_num_seqs=64, max_num_batched_tokens=1024))
    hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    hf.generation_config.eos_token_id = None  # ignore_eos, like the engine's requests

    # warm-up both paths on a few small requests
    run_engine(engine, [(p[:32], 8) for p, _ in requests[:4]])
    hf_generate_batch(hf, [(p[:32], 8) for p, _ in requests[:4]])

    repeats = args.repeats or 2
    engine_times, sequential_rates = [], []
    batched_times: dict[int, list[float]] = {b: [] for b in BATCH_SIZES}
    sample = requests[:SEQUENTIAL_SAMPLE]
    sample_tokens = sum(o for _, o in sample)

    def engine_run(tag: str) -> None:
        seconds, _ = timed(lambda: run_engine(engine, requests))
        engine_times.append(seconds)
        log(f"[{tag}] engine {total_tokens / seconds:.1f} tok/s")

    # interleaved: an engine run next to every HF run, so load swings on a shared machine hit both
    for repeat in range(repeats):
        for batch_size in BATCH_SIZES:
            engine_run(str(repeat))
            seconds, _ = timed(lambda b=batch_size: run_hf_batched(hf, requests, b))
            batched_times[batch_size].append(seconds)
            log(f"[{repeat}] hf batch={batch_size} {total_tokens / seconds:.1f} tok/s")
        engine_run(str(repeat))
        seconds, _ = timed(lambda: [hf_generate_batch(hf, [r]) for r in sample])
        sequential_rates.append(sample_tokens / seconds)
        log(f"[{repeat}] hf sequential {sample_tokens / seconds:.1f} tok/s")

    engine_tok_s = total_tokens / median(engine_times)
    best_batch = min(BATCH_SIZES, key=lambda b: median(batched_times[b]))
    hf_batched_tok_s = total_tokens / median(batched_times[best_batch])
    hf_sequential_tok_s = median(sequential_rates)

    checks = requests[:GREEDY_CHECKS]
    ours = run_engine(engine, checks)
    greedy_match = all(ours[i] == hf_generate_batch(hf, [checks[i]])[0] for i in range(len(checks)))
    emit({
        "engine_tok_s": round(engine_tok_s, 1),
        "hf_sequential_tok_s": round(hf_sequential_tok_s, 1),
        "hf_batched_tok_s": round(hf_batched_tok_s, 1),
        "hf_best_batch_size": best_batch,
        "ratio_vs_sequential": round(engine_tok_s / hf_sequential_tok_s, 2),
        "ratio_vs_batched": round(engine_tok_s / hf_batched_tok_s, 2),
        "greedy_match": greedy_match,
        "greedy_checked_requests": len(checks),
        "num_requests": len(requests),
        "output_tokens": total_tokens,
        "model_params": count_params(path),
        "hf_sequential_sampled_requests": SEQUENTIAL_SAMPLE,
        "repeats": repeats,
        "torch_threads": torch.get_num_threads(),
    }, args.json)


if __name__ == "__main__":
    main()
