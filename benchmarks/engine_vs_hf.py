"""Throughput of our engine vs transformers `generate` (sequential and padded batches), one dtype, one device.

Workload: 64 seeded requests, prompt lengths 16-512, output lengths 16-256, ignore_eos, greedy.
Every timed run draws a fresh workload (its own seed) that both contenders decode: nothing any run
computes was computed before, so the engine's prefix cache has nothing to reuse (the hit fraction
is reported) and both sides do the same work. The pair's contender that goes first alternates; each
ratio is the median over pairs of (engine tok/s) / (HF tok/s) on the same workload.
tok/s counts only each request's own output tokens (padding and over-generation in HF batches are
not counted). HF sequential runs on a subsample of the pair's workload (tok/s is a per-request rate).
HF loads the checkpoint in the dtype the engine resolved (`--dtype`, default auto: bf16 here). On fresh requests:
`greedy_exact_match`, our greedy tokens equal HF's; `greedy_match`, each request matches or parts
from HF only at a near-tie (`greedy_agreement`), which in bf16 on this random-weight model (logits
within a few hundredths of each other) happens within a few tokens; `greedy_token_match_frac`, the
tokens that agree before any divergence. `--device cuda` runs both contenders on the GPU (CPU threads then
only drive it).
"""

from __future__ import annotations

import argparse
import statistics

import torch

from benchmarks._common import (
    add_common_args,
    bench_checkpoint,
    count_params,
    emit,
    log,
    random_prompt,
    setup,
    timed,
)
from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams

NUM_REQUESTS = 64
SEQUENTIAL_SAMPLE = 6
BATCH_SIZES = (8, 16, 32)
GREEDY_CHECKS = 4
Request = tuple[list[int], int]   # (prompt ids, output tokens)


def workload(seed: int, num_requests: int = NUM_REQUESTS) -> list[Request]:
    rng = torch.Generator().manual_seed(seed)
    prompt_lens = torch.randint(16, 513, (num_requests,), generator=rng).tolist()
    output_lens = torch.randint(16, 257, (num_requests,), generator=rng).tolist()
    return [(random_prompt(rng, p), o) for p, o in zip(prompt_lens, output_lens, strict=True)]


def output_tokens(requests: list[Request]) -> int:
    return sum(o for _, o in requests)


def run_engine(engine: LLMEngine, requests: list[Request]) -> list[list[int]]:
    params = [SamplingParams(temperature=0, max_tokens=o, ignore_eos=True) for _, o in requests]
    return [out.token_ids for out in engine.generate([p for p, _ in requests], params)]


def hf_generate_batch(model, batch: list[Request], *, scores: bool = False):
    """Left-padded batch generate up to the longest requested output; each request keeps its own length.
    With `scores`, also each step's logits ([steps, rows, vocab])."""
    width = max(len(p) for p, _ in batch)
    ids = torch.zeros(len(batch), width, dtype=torch.long)
    mask = torch.zeros(len(batch), width, dtype=torch.long)
    for row, (prompt, _) in enumerate(batch):
        ids[row, width - len(prompt):] = torch.tensor(prompt)
        mask[row, width - len(prompt):] = 1
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids.to(model.device), attention_mask=mask.to(model.device), max_new_tokens=max(o for _, o in batch), do_sample=False,
            pad_token_id=0, output_logits=scores, return_dict_in_generate=scores,
        )
    sequences = out.sequences if scores else out
    tokens = [sequences[row, width : width + o].tolist() for row, (_, o) in enumerate(batch)]
    return (tokens, torch.stack(out.logits)) if scores else tokens


def run_hf_batched(model, requests: list[Request], batch_size: int) -> None:
    # sorted by prompt length so padding is as small as HF batching can make it
    ordered = sorted(requests, key=lambda r: len(r[0]))
    for start in range(0, len(ordered), batch_size):
        hf_generate_batch(model, ordered[start : start + batch_size])


def greedy_agreement(engine: LLMEngine, hf, requests: list[Request]) -> dict[str, object]:
    """Our greedy tokens against HF's on the same requests. Where they part, HF's logits for the shared
    prefix say how far apart the two tokens were: a divergence is a near-tie when that gap is within
    the two implementations' own logit difference at that step (max |ours - HF| over our top-20
    log-probabilities), i.e. rounding, not a bug, picked the other token."""
    params = [SamplingParams(temperature=0, max_tokens=o, ignore_eos=True, logprobs=20) for _, o in requests]
    outputs = engine.generate([p for p, _ in requests], params)
    exact = ties = agreed = total = 0
    divergences = []
    for request, out in zip(requests, outputs, strict=True):
        reference, logits = hf_generate_batch(hf, [request], scores=True)                # logits [steps, 1, V]
        reference = reference[0]
        total += len(reference)
        split = next((i for i, (a, b) in enumerate(zip(out.token_ids, reference, strict=True)) if a != b), len(reference))
        agreed += split
        if split == len(reference):
            exact += 1
            continue
        hf_logprobs = torch.log_softmax(logits[split, 0].float(), dim=-1)
        noise = max(abs(lp - float(hf_logprobs[token_id])) for token_id, _, lp in out.logprobs[split].top)
        gap = float(hf_logprobs[reference[split]] - hf_logprobs[out.token_ids[split]])
        ties += gap <= noise
        divergences.append({"step": split, "of": len(reference), "hf_gap": round(gap, 4), "logit_noise": round(noise, 4)})
        log(f"greedy divergence at step {split}/{len(reference)}: HF's gap {gap:.4f}, logit noise {noise:.4f}")
    return {"greedy_match": exact + ties == len(requests), "greedy_exact_match": exact == len(requests),
            "greedy_token_match_frac": round(agreed / total, 4), "greedy_divergences": divergences}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)
    parser.add_argument("--device", default="cpu", help="torch device of both contenders (cpu, cuda)")
    args = setup(parser)
    import transformers  # noqa: PLC0415 - benchmark-only dependency

    transformers.logging.set_verbosity_error()
    path = bench_checkpoint()
    engine = LLMEngine.from_pretrained(path, EngineConfig(max_num_seqs=64, max_num_batched_tokens=1024,
                                                          dtype=args.dtype, device=args.device))
    dtype = next(engine.model.parameters()).dtype        # "auto" resolved: HF runs in the same one
    hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(args.device).eval()
    hf.generation_config.eos_token_id = None  # ignore_eos, like the engine's requests

    warm = [(p[:32], 8) for p, _ in workload(seed=10_000, num_requests=4)]   # warm-up both paths alike
    run_engine(engine, warm)
    hf_generate_batch(hf, warm)

    repeats = args.repeats or 2
    seeds = iter(range(1, 1_000))
    engine_rates: list[float] = []
    batched: dict[int, list[tuple[float, float]]] = {b: [] for b in BATCH_SIZES}   # (engine, hf) tok/s per pair
    sequential: list[tuple[float, float]] = []
    stats_before = engine.stats()

    def engine_rate(requests: list[Request]) -> float:
        seconds, _ = timed(lambda: run_engine(engine, requests))
        engine_rates.append(output_tokens(requests) / seconds)
        return engine_rates[-1]

    def hf_rate(requests: list[Request], batch_size: int | None) -> float:
        if batch_size is None:
            requests = requests[:SEQUENTIAL_SAMPLE]
            seconds, _ = timed(lambda: [hf_generate_batch(hf, [r]) for r in requests])
        else:
            seconds, _ = timed(lambda: run_hf_batched(hf, requests, batch_size))
        return output_tokens(requests) / seconds

    pair = 0
    for repeat in range(repeats):
        for batch_size in (*BATCH_SIZES, None):
            requests = workload(next(seeds))
            if pair % 2 == 0:   # who goes first alternates, so a drift in machine speed hits both alike
                ours = engine_rate(requests)
                theirs = hf_rate(requests, batch_size)
            else:
                theirs = hf_rate(requests, batch_size)
                ours = engine_rate(requests)
            pair += 1
            (batched[batch_size] if batch_size else sequential).append((ours, theirs))
            log(f"[{repeat}] engine {ours:.1f} tok/s vs hf {'sequential' if batch_size is None else f'batch={batch_size}'} "
                f"{theirs:.1f} tok/s")
    stats_after = engine.stats()

    def ratio(pairs: list[tuple[float, float]]) -> float:
        return statistics.median(ours / theirs for ours, theirs in pairs)

    best_batch = max(BATCH_SIZES, key=lambda b: statistics.median(theirs for _, theirs in batched[b]))
    queries = stats_after["prefix_cache_queries"] - stats_before["prefix_cache_queries"]
    hits = stats_after["prefix_cache_hits"] - stats_before["prefix_cache_hits"]
    greedy = greedy_agreement(engine, hf, workload(next(seeds))[:GREEDY_CHECKS])
    emit({
        "ratio_vs_sequential": round(ratio(sequential), 2),
        "ratio_vs_batched": round(ratio(batched[best_batch]), 2),
        **greedy,
        "engine_tok_s": round(statistics.median(engine_rates), 1),
        "hf_sequential_tok_s": round(statistics.median(theirs for _, theirs in sequential), 1),
        "hf_batched_tok_s": round(statistics.median(theirs for _, theirs in batched[best_batch]), 1),
        "hf_best_batch_size": best_batch,
        "ratio_vs_batched_by_size": {b: round(ratio(batched[b]), 2) for b in BATCH_SIZES},
        "prefix_cache_hit_frac_timed": round(hits / queries, 4) if queries else 0.0,
        "dtype": engine.dtype,
        "device": args.device,
        "greedy_checked_requests": GREEDY_CHECKS,
        "num_requests_per_run": NUM_REQUESTS,
        "timed_pairs": pair,
        "model_params": count_params(path),
        "hf_sequential_sampled_requests": SEQUENTIAL_SAMPLE,
        "repeats": repeats,
        "torch_threads": torch.get_num_threads(),
    }, args.json)


if __name__ == "__main__":
    main()
