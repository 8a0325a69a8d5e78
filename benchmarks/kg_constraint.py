"""KG-constrained decoding: throughput cost, per-step mask cost and violation rates, batch 32.

A tiny random model cannot name drugs by chance, so both runs register the same `EntityPlan`
processor: it adds a large bias to the next token of a per-request plan, a text that names allowed
*and* forbidden entities of the real medical KG ("... Lisinopril and Ibuprofen, then ..."), and to
EOS once the plan is spent. Without the KG constraint the model follows the plan and writes the
forbidden names; with it, each forbidden name is blocked wherever it starts. Outputs are linked
with the exact linker (drug and condition types) to count mentions outside each request's allowed
set (the anchors named in the prompt plus their neighbourhood, `allowed_entities`).
Violations are counted on runs that end by EOS; decode throughput (generated tokens / wall time,
constraint off vs on, the two engines stepping in turn, median of the repeats' ratios) on
fixed-length runs (ignore_eos), so both sides decode the same batch shapes.
Mask cost: wall time of KGConstraintProcessor.apply per call divided by the rows it constrained
(the audit event naming what a blocked favourite token headed for is built later, in
accept_token, once per intervention), in three regimes:
- mask_us_p50/p99: the timed runs, every decoding state's mask already cached by the warm-up (a
  server seeing the same allowed sets again);
- mask_us_p50_new_set/p99_new_set: the prompts again, each allowed set widened by one unrelated
  entity, so every mask is computed afresh while the per-domain walk records are warm (a server
  whose requests each bring a new allowed set);
- mask_us_p50_cold/p99_cold: the first constrained run after start-up, nothing computed yet
  beyond what registration precomputes.
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

from benchmarks._common import emit, log, median, parse_args, step_in_turn
from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.outputs import RequestOutput
from engine.processors.logits_process import LogitsProcessor
from engine.sampling_params import SamplingParams
from engine.synthetic import write_tiny_checkpoint
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


def _unrelated_entity(kg: KnowledgeGraph, allowed: Sequence[Sequence[str]]) -> str:
    """A constrained entity outside every request's allowed set, with a long name the plans never write."""
    used = {i for ids in allowed for i in ids}
    return next(e.id for e in sorted(kg.entities("condition"), key=lambda e: e.id)
                if e.id not in used and len(e.name) > 30)


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
    args = parse_args(__doc__.splitlines()[0])
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
    engines = _load_engines(kg, work, ckpt)
    load = _Workload.of(work, engines.tokenizer)
    outputs, cold_us, new_set_us = _violation_runs(kg, engines, load)
    repeats = args.repeats or 5
    timed, new_states, per_row_us = _throughput_runs(engines, load, repeats)
    tokens = BATCH * load.longest   # fixed length: every request decodes `longest` tokens
    tok_s = {name: [tokens / seconds[name] for seconds in timed] for name in ("off", "on")}
    linker = EntityLinker(kg, types=DOMAIN_DEFAULTS[DOMAIN].types)
    rate_on, mentions_on = violation_rate(linker, [o.text for o in outputs["on"]], load.allowed)
    rate_off, mentions_off = violation_rate(linker, [o.text for o in outputs["off"]], load.allowed)
    events = sum(len(o.events) for o in outputs["on"])
    emit({
        "overhead_frac": round(1 - median([t["off"] / t["on"] for t in timed]), 4),
        "mask_us_p50": round(statistics.median(per_row_us), 2),
        "mask_us_p99": _p99(per_row_us),
        "mask_us_p50_new_set": round(statistics.median(new_set_us), 2),
        "mask_us_p99_new_set": _p99(new_set_us),
        "mask_us_p50_cold": round(statistics.median(cold_us), 2),
        "mask_us_p99_cold": _p99(cold_us),
        "violation_rate_constrained": round(rate_on, 4),
        "violation_rate_unconstrained": round(rate_off, 4),
        "mentions_constrained": mentions_on,
        "mentions_unconstrained": mentions_off,
        "kg_events_constrained": events,
        "mask_cache_misses_timed": new_states,
        "apply_calls_timed": len(engines.kg_processor.calls),
        "finish_reasons_constrained": sorted({o.finish_reason or "" for o in outputs["on"]}),
        "off_tok_s": round(median(tok_s["off"]), 1),
        "on_tok_s": round(median(tok_s["on"]), 1),
        "surface_forms": surface_forms,
        "kg_version": kg.version,
        "register_s": round(engines.register_s, 2),
        "batch": BATCH,
        "vocab_size": engines.vocab,
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


def _load_engines(kg: KnowledgeGraph, work: list[tuple[str, list[str], str]], ckpt: Path) -> _Engines:
    """Write the benchmark checkpoint and load it twice, constraint off and on."""
    # the tokenizer learns the plan texts' words, so names tokenize like a real model's would
    texts = [p for p, _, plan in work for p in (p, plan)] + _names(kg, sorted(e.id for e in kg.entities("drug")))[:3000]
    write_tiny_checkpoint(ckpt, vocab_from_texts=texts, vocab_size=4096, hidden_size=256, intermediate_size=768,
                          num_layers=6, num_heads=8, num_kv_heads=4, model_vocab_size=8192, tie_word_embeddings=True,
                          init_std=0.05)
    config = EngineConfig(max_num_seqs=BATCH)
    off = LLMEngine.from_pretrained(ckpt, config, [EntityPlan([])])
    tokenizer = off.tokenizer
    vocab = off.model.config.vocab_size
    eos = tokenizer.eos_token_ids
    off = LLMEngine.from_pretrained(ckpt, config, [EntityPlan(eos)])
    start = time.perf_counter()
    kg_processor = TimedKGConstraint(tokenizer, vocab_size=vocab, eos_token_ids=eos, kgs={DOMAIN: kg})
    register_s = time.perf_counter() - start
    on = LLMEngine.from_pretrained(ckpt, config, [EntityPlan(eos), kg_processor])
    gc.freeze()   # as the service does once loaded (auditor.app): long-lived KG data out of the GC's scans
    log(f"constraint registered in {register_s:.1f}s; vocab {vocab}")
    return _Engines(off, on, kg_processor, tokenizer, vocab, register_s)


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


def _violation_runs(kg: KnowledgeGraph, engines: _Engines, load: _Workload,
                    ) -> tuple[dict[str, list[RequestOutput]], list[float], list[float]]:
    """Runs that end by EOS (the guarantee's premise): outputs off and on, and the per-row mask
    microseconds of the first constrained run (every state new) and of one with every allowed set
    widened by an unrelated entity (fresh mask caches, warm walk records), which must not change
    the outputs."""
    kg_processor = engines.kg_processor
    outputs = {"off": engines.off.generate(load.prompts, load.params(False, False)),
               "on": engines.on.generate(load.prompts, load.params(True, False))}
    cold_us = sorted(1e6 * seconds / rows for seconds, rows in kg_processor.calls)
    kg_processor.calls.clear()
    widened = engines.on.generate(load.prompts, load.params(True, False, extra_entity=_unrelated_entity(kg, load.allowed)))
    new_set_us = sorted(1e6 * seconds / rows for seconds, rows in kg_processor.calls)
    kg_processor.calls.clear()
    assert [o.text for o in widened] == [o.text for o in outputs["on"]], "an unrelated allowed entity changed the output"
    return outputs, cold_us, new_set_us


def _throughput_runs(engines: _Engines, load: _Workload, repeats: int) -> tuple[list[dict[str, float]], int, list[float]]:
    """Fixed-length runs, off and on stepping in turn after a warm-up that fills the mask cache:
    seconds per engine per repeat, mask cache misses and per-row mask microseconds of the timed runs."""
    kg_processor = engines.kg_processor
    contenders = {"off": (engines.off, load.params(False, True)), "on": (engines.on, load.params(True, True))}
    tokens = BATCH * load.longest
    step_in_turn(contenders, load.prompts, "warmup")   # first visits of decoding states fill the mask cache
    kg_processor.calls.clear()
    cached_before = _cached_masks(kg_processor)
    # the engines step in turn (`step_in_turn`), so drifts in this shared machine's speed hit both alike
    timed = [step_in_turn(contenders, load.prompts, f"r{repeat}") for repeat in range(repeats)]
    for repeat, seconds in enumerate(timed):
        log(f"[{repeat}] off {tokens / seconds['off']:.0f} tok/s, on {tokens / seconds['on']:.0f} tok/s")
    new_states = _cached_masks(kg_processor) - cached_before
    per_row_us = sorted(1e6 * seconds / rows for seconds, rows in kg_processor.calls)
    return timed, new_states, per_row_us


if __name__ == "__main__":
    main()
