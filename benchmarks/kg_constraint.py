"""KG-constrained decoding: throughput cost, per-step mask cost and violation rates, batch 32.

A tiny random model cannot name drugs by chance, so both runs register the same `EntityPlan`
processor: it adds a large bias to the next token of a per-request plan, a text that names allowed
*and* forbidden entities of the real medical KG ("... Lisinopril and Ibuprofen, then ..."), and to
EOS once the plan is spent. Without the KG constraint the model follows the plan and writes the
forbidden names; with it, each forbidden name is blocked wherever it starts. Outputs are linked
with the exact linker (drug and condition types) to count mentions outside each request's allowed
set (the anchors named in the prompt plus their neighbourhood, `allowed_entities`).
Violations are counted on runs that end by EOS. Decode throughput is measured on fixed-length runs
(ignore_eos), so both sides decode the same batch shapes, with the engines without and with the
constraint stepping in turn; `time_overhead_frac` is the constrained engine's extra decode time,
on / off - 1 (median over runs), and `on_tok_s`/`off_tok_s` the throughputs. Three regimes, in the
order they run (each key without a suffix is the warm regime):
- `_cold`: the first constrained run after start-up, nothing computed yet beyond what registration
  precomputes (one run: there is only one first time);
- `_new_set`: every allowed set widened by an unrelated entity, another one per run, so every
  request brings an allowed set not seen before: views and masks are built afresh while the
  per-domain walk records are warm (a server whose requests each bring a new allowed set);
- warm: the same requests again, every decoding state's mask already cached (a server seeing the
  same allowed sets again).
Mask cost (`mask_us_p50/p99` per regime): wall time of KGConstraintProcessor.apply per call divided
by the rows it constrained (the audit event naming what a blocked favourite token headed for is
built later, in accept_token, once per intervention).
`--tokenizer-from DIR` puts a released model's tokenizer (e.g. Qwen3's 151k, Llama 3's 128k ids) on
the random-weight checkpoint; `register_s` and the `rss_mb_*` keys say what building the constraint
for the domain costs at that vocabulary.
"""

from __future__ import annotations

import argparse
import gc
import random
import shutil
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from benchmarks._common import add_common_args, emit, log, median, rss_mb, setup, step_in_turn
from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.loader import generation_eos_ids, load_model_config
from engine.outputs import RequestOutput
from engine.processors.logits_process import LogitsProcessor
from engine.sampling_params import SamplingParams
from engine.synthetic import write_checkpoint_with_tokenizer, write_tiny_checkpoint
from engine.tokenizer import Tokenizer
from knowledge_graphs import load_kg
from knowledge_graphs.decoding.constraint import DOMAIN_DEFAULTS, KGConstraintProcessor, allowed_entities
from knowledge_graphs.linking import EntityLinker
from knowledge_graphs.model import KnowledgeGraph

BATCH = 32
PLAN_BIAS = 30.0
EXTRA_TOKENS = 24          # room after the plan for EOS to become allowed
DOMAIN = "medical"


class EntityPlan(LogitsProcessor):
    """extra_args["entity_plan"] = token ids to push, one per generated position; then EOS."""

    name = "entity_plan"

    def __init__(self, eos_token_ids: Sequence[int]) -> None:
        self.eos = list(eos_token_ids)
        self.plans: dict[str, list[int]] = {}
        self.positions: dict[str, int] = {}

    def validate_params(self, params: SamplingParams) -> None:
        plan = params.extra_args.get(self.name)
        if plan is not None and not isinstance(plan, list):
            raise ValueError("entity_plan must be a list of token ids")

    def add_request(self, request_id, params, prompt_token_ids, output_token_ids) -> bool:  # type: ignore[no-untyped-def]
        plan = params.extra_args.get(self.name)
        if plan is None:
            return False
        self.plans[request_id] = plan
        self.positions[request_id] = len(output_token_ids)
        return True

    def remove_request(self, request_id: str) -> None:
        self.plans.pop(request_id, None)
        self.positions.pop(request_id, None)

    def apply(self, logits: torch.Tensor, request_ids: Sequence[str | None]) -> None:
        for row, request_id in enumerate(request_ids):
            plan = self.plans.get(request_id) if request_id is not None else None
            if plan is None:
                continue
            position = self.positions[request_id]  # type: ignore[index]
            if position < len(plan):
                logits[row, plan[position]] += PLAN_BIAS
            else:
                logits[row, self.eos] += PLAN_BIAS

    def accept_token(self, request_id: str, token_id: int) -> None:
        if request_id in self.positions:
            self.positions[request_id] += 1


class TimedKGConstraint(KGConstraintProcessor):
    """Records (seconds, constrained rows) per apply call."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[float, int]] = []

    def apply(self, logits: torch.Tensor, request_ids: Sequence[str | None]) -> None:
        start = time.perf_counter()
        super().apply(logits, request_ids)
        rows = sum(1 for r in request_ids if r is not None and r in self._requests)
        if rows:
            self.calls.append((time.perf_counter() - start, rows))


def _cached_masks(processor: KGConstraintProcessor) -> int:
    return sum(len(view._masks) for domain in processor.domains.values() for view in domain._views.values())


def _names(kg: KnowledgeGraph, ids: Sequence[str]) -> list[str]:
    return [kg.entity(i).name for i in ids if kg.entity(i) is not None]  # type: ignore[union-attr]


def build_workload(kg: KnowledgeGraph, seed: int) -> list[tuple[str, list[str], str]]:
    """(prompt, allowed ids, plan text) per request: the prompt names an anchor drug; the plan names
    two allowed entities and two forbidden drugs."""
    rng = random.Random(seed)
    anchors = sorted({f.subject for f in kg.facts(relation="indicated_for")})
    types = DOMAIN_DEFAULTS[DOMAIN].types
    drugs = sorted(e.id for e in kg.entities("drug") if 5 <= len(e.name) <= 14 and e.name.isalpha())
    work = []
    for i in range(BATCH):
        anchor = anchors[i % len(anchors)]
        anchor_name = kg.entity(anchor).name  # type: ignore[union-attr]
        prompt = f"Patient {i} takes {anchor_name}. Plan:"
        allowed = sorted(allowed_entities(kg, [anchor]))
        candidates = [a for a in allowed if a != anchor] or [anchor]
        allowed_names = _names(kg, rng.sample(candidates, k=min(2, len(candidates))))
        forbidden_names = _names(kg, [d for d in rng.sample(drugs, k=6) if d not in allowed][:2])
        first, second = (allowed_names * 2)[:2]
        plan = f" Continue {first} and {forbidden_names[0]}, then {forbidden_names[1].lower()} or {second}."
        assert all(kg.entity(a).type in types for a in allowed)  # type: ignore[union-attr]
        work.append((prompt, allowed, plan))
    return work


def _unrelated_entities(kg: KnowledgeGraph, allowed: Sequence[Sequence[str]], count: int) -> list[str]:
    """Constrained entities outside every request's allowed set, with long names the plans never write."""
    used = {i for ids in allowed for i in ids}
    found = [e.id for e in sorted(kg.entities("condition"), key=lambda e: e.id) if e.id not in used and len(e.name) > 30]
    return found[:count]


def _p99(values: Sequence[float]) -> float:
    return round(values[min(len(values) - 1, int(0.99 * len(values)))], 2)


def violation_rate(linker: EntityLinker, texts: Sequence[str], allowed: Sequence[Sequence[str]]) -> tuple[float, int]:
    mentions = violations = 0
    for text, ids in zip(texts, allowed, strict=True):
        allowed_set = set(ids)
        for mention in linker.link(text):
            mentions += 1
            violations += not (set(mention.candidate_ids) & allowed_set)
    return (violations / mentions if mentions else 0.0), mentions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser)
    parser.add_argument("--tokenizer-from", type=Path, default=None,
                        help="folder with a released model's tokenizer.json and tokenizer_config.json, used on a "
                             "random-weight checkpoint (default: a 4k BPE tokenizer trained on the plan texts)")
    args = setup(parser)
    started = time.perf_counter()
    kg = load_kg(DOMAIN)
    types = DOMAIN_DEFAULTS[DOMAIN].types
    surface_forms = sum(len(e.surface_forms) for t in types for e in kg.entities(t))
    work = build_workload(kg, seed=0)
    log(f"KG {DOMAIN} v{kg.version}: {surface_forms} constrained surface forms; loaded in {time.perf_counter() - started:.1f}s")

    ckpt = Path(tempfile.mkdtemp(prefix="kg-constraint-bench-"))
    try:
        _run(args, kg, work, ckpt, surface_forms)
    finally:
        shutil.rmtree(ckpt, ignore_errors=True)


def _run(args: argparse.Namespace, kg: KnowledgeGraph, work: list[tuple[str, list[str], str]], ckpt: Path,
         surface_forms: int) -> None:
    engines = _load_engines(kg, work, ckpt, args)
    load = _Workload.of(work, engines.tokenizer)
    repeats = args.repeats or 5
    regimes, new_set_changed = _throughput_runs(kg, engines, load, repeats)
    outputs = _violation_runs(engines, load)
    linker = EntityLinker(kg, types=DOMAIN_DEFAULTS[DOMAIN].types)
    rate_on, mentions_on = violation_rate(linker, [o.text for o in outputs["on"]], load.allowed)
    rate_off, mentions_off = violation_rate(linker, [o.text for o in outputs["off"]], load.allowed)
    tokens = BATCH * load.longest   # fixed length: every request decodes `longest` tokens
    result: dict = {}
    for regime in ("warm", "new_set", "cold"):
        timed, mask_us = regimes[regime]
        suffix = "" if regime == "warm" else f"_{regime}"
        result |= {
            f"time_overhead_frac{suffix}": round(median([t["on"] / t["off"] for t in timed]) - 1, 4),
            f"on_tok_s{suffix}": round(median([tokens / t["on"] for t in timed]), 1),
            f"off_tok_s{suffix}": round(median([tokens / t["off"] for t in timed]), 1),
            f"mask_us_p50{suffix}": round(statistics.median(mask_us), 2),
            f"mask_us_p99{suffix}": _p99(mask_us),
        }
    emit({
        **result,
        "violation_rate_constrained": round(rate_on, 4),
        "violation_rate_unconstrained": round(rate_off, 4),
        "mentions_constrained": mentions_on,
        "mentions_unconstrained": mentions_off,
        "kg_events_constrained": sum(len(o.events) for o in outputs["on"]),
        "new_set_changed_outputs": new_set_changed,
        "finish_reasons_constrained": sorted({o.finish_reason or "" for o in outputs["on"]}),
        "surface_forms": surface_forms,
        "kg_version": kg.version,
        "register_s": round(engines.register_s, 2),
        "rss_mb_before_register": engines.rss_mb[0],
        "rss_mb_after_register": engines.rss_mb[1],
        "rss_mb_end": rss_mb(),
        "tokenizer": str(args.tokenizer_from) if args.tokenizer_from else "bpe-4k trained on the plans",
        "vocab_size": engines.vocab,
        "dtype": engines.on.dtype,
        "batch": BATCH,
        "steps_per_run": load.longest,
        "repeats": repeats,
        "torch_threads": torch.get_num_threads(),
        "sample_constrained": outputs["on"][0].text,
        "sample_unconstrained": outputs["off"][0].text,
    }, args.json)


@dataclass(slots=True)
class _Engines:
    off: LLMEngine                      # the plan alone
    on: LLMEngine                       # the plan, then the KG constraint
    kg_processor: TimedKGConstraint     # the constraint `on` runs
    tokenizer: Tokenizer
    vocab: int
    register_s: float                   # seconds to build the constraint for the domain
    rss_mb: tuple[float, float]         # resident memory before and after building it


def _write_checkpoint(kg: KnowledgeGraph, work: list[tuple[str, list[str], str]], ckpt: Path,
                      tokenizer_from: Path | None) -> None:
    shape = dict(hidden_size=256, intermediate_size=768, num_layers=6, num_heads=8, num_kv_heads=4,
                 tie_word_embeddings=True, init_std=0.05)
    if tokenizer_from is not None:
        write_checkpoint_with_tokenizer(ckpt, tokenizer_from, **shape)  # type: ignore[arg-type]
        return
    # the tokenizer learns the plan texts' words, so names tokenize like a real model's would
    texts = [p for p, _, plan in work for p in (p, plan)] + _names(kg, sorted(e.id for e in kg.entities("drug")))[:3000]
    write_tiny_checkpoint(ckpt, vocab_from_texts=texts, vocab_size=4096, model_vocab_size=8192, **shape)  # type: ignore[arg-type]


def _load_engines(kg: KnowledgeGraph, work: list[tuple[str, list[str], str]], ckpt: Path,
                  args: argparse.Namespace) -> _Engines:
    """Write the benchmark checkpoint and load it twice, constraint off and on."""
    _write_checkpoint(kg, work, ckpt, args.tokenizer_from)
    config = EngineConfig(max_num_seqs=BATCH, dtype=args.dtype)
    model_config = load_model_config(ckpt)
    eos_ids = list(dict.fromkeys(generation_eos_ids(ckpt) + model_config.eos_token_ids))
    tokenizer = Tokenizer.from_dir(ckpt, eos_ids)
    vocab = model_config.vocab_size
    eos = tokenizer.eos_token_ids
    off = LLMEngine.from_pretrained(ckpt, config, [EntityPlan(eos)])
    gc.collect()
    rss_before = rss_mb()
    start = time.perf_counter()
    kg_processor = TimedKGConstraint(tokenizer, vocab_size=vocab, eos_token_ids=eos, kgs={DOMAIN: kg})
    register_s = time.perf_counter() - start
    gc.collect()
    rss_after = rss_mb()
    on = LLMEngine.from_pretrained(ckpt, config, [EntityPlan(eos), kg_processor])
    gc.freeze()   # as the service does once loaded (auditor.app): long-lived KG data out of the GC's scans
    log(f"constraint registered in {register_s:.1f}s (RSS {rss_before:.0f} -> {rss_after:.0f} MB); vocab {vocab}")
    return _Engines(off, on, kg_processor, tokenizer, vocab, register_s, (rss_before, rss_after))


@dataclass(slots=True)
class _Workload:
    prompts: list[str]
    plans: list[list[int]]              # token ids EntityPlan pushes, per request
    allowed: list[list[str]]            # allowed entity ids, per request
    longest: int                        # steps of a fixed-length run

    @classmethod
    def of(cls, work: list[tuple[str, list[str], str]], tokenizer: Tokenizer) -> _Workload:
        plans = [tokenizer.backend.encode(plan, add_special_tokens=False).ids for _, _, plan in work]
        return cls([prompt for prompt, _, _ in work], plans, [ids for _, ids, _ in work],
                   max(map(len, plans)) + EXTRA_TOKENS)

    def params(self, constrained: bool, fixed_length: bool, extra_entity: str | None = None) -> list[SamplingParams]:
        """fixed_length: every request runs `longest` steps (ignore_eos), so both runs decode the same
        batch shapes and throughput compares the processors, not where each request happened to stop."""
        out = []
        for plan, ids in zip(self.plans, self.allowed, strict=True):
            extra: dict = {"entity_plan": plan}
            if constrained:
                extra["kg_constraint"] = {"domain": DOMAIN, "allowed_entity_ids": ids + ([extra_entity] if extra_entity else [])}
            out.append(SamplingParams(temperature=0, max_tokens=self.longest if fixed_length else len(plan) + EXTRA_TOKENS,
                                      ignore_eos=fixed_length, extra_args=extra))
        return out


def _violation_runs(engines: _Engines, load: _Workload) -> dict[str, list[RequestOutput]]:
    """Runs that end by EOS (the guarantee's premise): the outputs off and on."""
    return {"off": engines.off.generate(load.prompts, load.params(False, False)),
            "on": engines.on.generate(load.prompts, load.params(True, False))}


Regime = tuple[list[dict[str, float]], list[float]]   # seconds per engine per run, per-row mask microseconds


def _throughput_runs(kg: KnowledgeGraph, engines: _Engines, load: _Workload, repeats: int,
                     ) -> tuple[dict[str, Regime], int]:
    """Fixed-length runs, off and on stepping in turn (`step_in_turn`: drifts in this shared machine's speed
    hit both alike), in three regimes, in this order:
    - cold: the first constrained run after start-up (one run: there is only one first time);
    - new_set: each run widens every allowed set by another unrelated entity, so every request brings an
      allowed set not seen before (views and masks built afresh, the domain's walk records warm);
    - warm: the prompts again, every decoding state's mask already cached.
    Also: how many constrained outputs of the new_set runs differ from the cold run's. An extra allowed
    entity may legitimately steer differently where its names share a beginning with what is written
    ("Perioperative pain ..." opens a live path at " Po"); the work stays the same length either way."""
    kg_processor = engines.kg_processor
    unrelated = _unrelated_entities(kg, load.allowed, repeats)

    def run(tag: str, extra_entity: str | None = None) -> tuple[dict[str, float], list[float], list[str]]:
        contenders = {"off": (engines.off, load.params(False, True)),
                      "on": (engines.on, load.params(True, True, extra_entity))}
        kg_processor.calls.clear()
        finished: dict[str, list[RequestOutput]] = {}
        seconds = step_in_turn(contenders, load.prompts, tag, finished)
        log(f"[{tag}] off {BATCH * load.longest / seconds['off']:.0f} tok/s, "
            f"on {BATCH * load.longest / seconds['on']:.0f} tok/s")
        return seconds, [1e6 * s / rows for s, rows in kg_processor.calls], [o.text for o in finished["on"]]

    cold_seconds, cold_us, cold_texts = run("cold")
    new_set: list[dict[str, float]] = []
    new_set_us: list[float] = []
    changed = 0
    for repeat, entity in enumerate(unrelated):
        seconds, mask_us, texts = run(f"new_set{repeat}", entity)
        new_set.append(seconds)
        new_set_us += mask_us
        changed += sum(a != b for a, b in zip(texts, cold_texts, strict=True))
    warm: list[dict[str, float]] = []
    warm_us: list[float] = []
    for repeat in range(repeats):
        seconds, mask_us, _ = run(f"warm{repeat}")
        warm.append(seconds)
        warm_us += mask_us
    return {"cold": ([cold_seconds], sorted(cold_us)), "new_set": (new_set, sorted(new_set_us)),
            "warm": (warm, sorted(warm_us))}, changed


if __name__ == "__main__":
    main()
