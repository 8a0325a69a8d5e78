"""Resident memory of a KG-constrained engine over a long run in which every batch brings new allowed sets.

One engine with the KG constraint (and `kg_constraint`'s `EntityPlan`, so the constraint really
intervenes: the plans name forbidden drugs), batch 32, temperature 1.0 with a fresh seed per request.
Each run anchors its 32 requests on drugs the previous runs did not use (cycling through the medical
KG's indicated drugs) and widens every allowed set by an entity no earlier run named, so views and
masks are built afresh all along, as on a server whose every request brings its own prompt entities.
Freed heap pages are handed back to the OS on the engine-core process's schedule
(`engine.memory.malloc_trim` every `--trim-every-s`, 30 s as in `engine/core_proc.py`; 0: never), and malloc
arenas and the mmap threshold are set as the core sets them (`AUDITOR_MALLOC_ARENA_MAX`, `AUDITOR_MALLOC_MMAP_THRESHOLD_KB`).

RSS is sampled after every run. `rss_growth_frac` = last sample / the sample after the first minute - 1
(the issue's target is within +10%); `rss_slope_mb_per_min` is a least-squares slope after the first
minute. The trims make single samples saw-tooth by tens of MB, so `rss_peak_growth_frac` compares the
highest sample of the last whole minute with that of the second minute (`rss_peaks_per_min`).

Run: python -m benchmarks.kg_constraint_rss --tokenizer-from DIR --minutes 10 --json
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from pathlib import Path

from auditor.serving.engine_loading import configure_malloc_for
from auditor.settings import Settings
from benchmarks._common import add_common_args, emit, log, rss_mb, setup
from benchmarks.kg_constraint import BATCH, DOMAIN, EXTRA_TOKENS, EntityPlan, _names
from benchmarks.soak import slope_per_minute, window_peaks
from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.loader import generation_eos_ids, load_model_config
from engine.memory import malloc_trim
from engine.sampling_params import SamplingParams
from engine.synthetic import write_checkpoint_with_tokenizer
from engine.tokenizer import Tokenizer
from knowledge_graphs import load_kg
from knowledge_graphs.decoding.constraint import KGConstraintProcessor, allowed_entities
from knowledge_graphs.model import KnowledgeGraph

SHAPE = dict(hidden_size=256, intermediate_size=768, num_layers=6, num_heads=8, num_kv_heads=4,
             tie_word_embeddings=True, init_std=0.05)


def _run_requests(kg: KnowledgeGraph, tokenizer: Tokenizer, run: int, anchors: list[str], extras: list[str],
                  drugs: list[str]) -> tuple[list[str], list[SamplingParams]]:
    """The run's 32 prompts and params: new anchors, one new widening entity, fresh seeds."""
    rng = random.Random(run)
    extra = extras[run % len(extras)]
    prompts, params = [], []
    for i in range(BATCH):
        anchor = anchors[(run * BATCH + i) % len(anchors)]
        allowed = sorted(allowed_entities(kg, [anchor])) + [extra]
        forbidden = _names(kg, [d for d in rng.sample(drugs, k=6) if d not in allowed][:2])
        plan_text = f" Continue with {forbidden[0]} or {forbidden[1].lower()}."
        plan = tokenizer.backend.encode(plan_text, add_special_tokens=False).ids
        prompts.append(f"Patient {run}-{i} takes {kg.entity(anchor).name}. Plan:")  # type: ignore[union-attr]
        params.append(SamplingParams(temperature=1.0, seed=run * BATCH + i, max_tokens=len(plan) + EXTRA_TOKENS,
                                     extra_args={"entity_plan": plan,
                                                 "kg_constraint": {"domain": DOMAIN, "allowed_entity_ids": allowed}}))
    return prompts, params


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)
    parser.add_argument("--tokenizer-from", type=Path, required=True,
                        help="folder with a released model's tokenizer.json and tokenizer_config.json")
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--trim-every-s", type=float, default=30.0)
    args = setup(parser)
    configure_malloc_for(Settings())   # as the engine core sets malloc up before its threads allocate
    kg = load_kg(DOMAIN)
    anchors = sorted({f.subject for f in kg.facts(relation="indicated_for")})
    drugs = sorted(e.id for e in kg.entities("drug") if 5 <= len(e.name) <= 14 and e.name.isalpha())
    extras = sorted(e.id for e in kg.entities("condition") if len(e.name) > 30)
    ckpt = Path(tempfile.mkdtemp(prefix="kg-constraint-rss-"))
    try:
        write_checkpoint_with_tokenizer(ckpt, args.tokenizer_from, **SHAPE)  # type: ignore[arg-type]
        model_config = load_model_config(ckpt)
        eos = list(dict.fromkeys(generation_eos_ids(ckpt) + model_config.eos_token_ids))
        tokenizer = Tokenizer.from_dir(ckpt, eos)
        rss_start = rss_mb()
        constraint = KGConstraintProcessor(tokenizer, vocab_size=model_config.vocab_size,
                                           eos_token_ids=tokenizer.eos_token_ids, kgs={DOMAIN: kg})
        engine = LLMEngine.from_pretrained(ckpt, EngineConfig(max_num_seqs=BATCH, dtype=args.dtype),
                                           [EntityPlan(tokenizer.eos_token_ids), constraint])
        rss_loaded = rss_mb()
        log(f"vocab {model_config.vocab_size}: RSS {rss_start:.0f} -> {rss_loaded:.0f} MB after loading")
        started = last_trim = time.monotonic()
        samples: list[tuple[float, float]] = []
        run = tokens = 0
        while time.monotonic() - started < args.minutes * 60:
            prompts, params = _run_requests(kg, tokenizer, run, anchors, extras, drugs)
            outputs = engine.generate(prompts, params)
            tokens += sum(len(o.token_ids) for o in outputs)
            if args.trim_every_s and time.monotonic() - last_trim >= args.trim_every_s:
                malloc_trim()
                last_trim = time.monotonic()
            elapsed_s = time.monotonic() - started
            samples.append((elapsed_s, rss_mb()))
            run += 1
            if run % 10 == 0:
                log(f"run {run}, {elapsed_s / 60:.1f} min: RSS {samples[-1][1]:.0f} MB")
    finally:
        shutil.rmtree(ckpt, ignore_errors=True)
    after_first = [(t, m) for t, m in samples if t >= 60.0] or samples
    baseline = after_first[0][1]
    # the heap is trimmed every 30 s, so single samples saw-tooth: compare whole minutes' highest samples
    peaks = [(t, mb) for t, mb in window_peaks(samples) if t + 30.0 <= samples[-1][0]]
    emit({
        "benchmark": "kg_constraint_rss", "vocab_size": model_config.vocab_size, "batch": BATCH,
        "temperature": 1.0, "minutes": round(samples[-1][0] / 60, 2), "runs": run, "tokens": tokens,
        "new_allowed_sets": run * BATCH, "trim_every_s": args.trim_every_s,
        "rss_mb_loaded": rss_loaded, "rss_mb_after_first_minute": baseline,
        "rss_mb_max": max(m for _, m in samples), "rss_mb_end": samples[-1][1],
        "rss_growth_frac": round(samples[-1][1] / baseline - 1, 4),
        "rss_slope_mb_per_min": round(slope_per_minute(after_first) or 0.0, 2),
        "rss_peaks_per_min": [round(mb, 1) for _, mb in peaks],
        "rss_peak_growth_frac": round(peaks[-1][1] / peaks[1][1] - 1, 4) if len(peaks) > 2 else None,
        "tokenizer": str(args.tokenizer_from), "dtype": engine.dtype,
    }, args.json)


if __name__ == "__main__":
    main()
