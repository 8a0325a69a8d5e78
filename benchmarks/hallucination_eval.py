"""Hallucinations with and without the KG constraint: the bundled model on >= 200 KG questions.

Each prompt of benchmarks/data/hallucination_prompts.jsonl (held-out phrasings of questions about KG
facts, with gold answers from the KG; written by `python -m scripts.demo_corpus --eval-prompts ...`)
is generated twice through the engine with the same seed: once free ("off") and once with the
`kg_constraint` logits processor restricted to the prompt's KG neighbourhood ("on"). The anchors are
the entities linked in the prompt and the allowed set their KG neighbourhood, computed by the
service's own `auditor.serving.runtime.KgKnowledge`; like the service, a prompt that names no entity runs
unconstrained (reported as `unanchored_prompts`; such outputs are not judged for violations).

Scores per output:
- entity violation: exact alias linking (constrained entity types) finds a mention none of whose
  readings is in the allowed set. Rate = outputs with a violation / outputs.
- FER: `rules.verify(output, domain)`, pooled over outputs: contradicted / (supported + contradicted).
- task accuracy: the output names every gold entity (linked) and contains every gold literal
  (a number, code or citation; for yes/no questions the answer's first word).

Latency: prompts run in chunks, off and on interleaved, the mode that goes first alternating from
chunk to chunk; each mode keeps its own prefix cache (a cache salt per mode), so the mode that runs
second never finds the first one's prompts cached. `time_overhead_frac` is the median over chunks of
on-time / off-time, minus 1 (the README's key convention); `total_time_overhead_frac` the summed
on-time over the summed off-time, minus 1, which weighs the chunks whose new allowed sets cost most.
`--dtype` as the engine's (default auto: bf16 on a CPU with AMX / AVX512-BF16, as the service runs);
run it with `--dtype float32` and `--dtype bfloat16` to compare FER and accuracy across precisions.

    python -m benchmarks.hallucination_eval --json
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
import zlib
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PROMPTS = REPO_ROOT / "benchmarks" / "data" / "hallucination_prompts.jsonl"
DEFAULT_MODEL = REPO_ROOT / "auditor" / "bundled_model"


@dataclass(slots=True)
class Scored:
    prompt_id: str
    domain: str
    text: str
    finish_reason: str
    violations: list[str]          # surface forms naming entities outside the allowed set
    supported: int
    contradicted: int
    correct: bool


@dataclass(slots=True)
class Totals:
    outputs: int = 0
    violating_outputs: int = 0
    violating_mentions: int = 0
    supported: int = 0
    contradicted: int = 0
    correct: int = 0
    seconds: list[float] = field(default_factory=list)

    def add(self, scored: Scored) -> None:
        self.outputs += 1
        self.violating_outputs += bool(scored.violations)
        self.violating_mentions += len(scored.violations)
        self.supported += scored.supported
        self.contradicted += scored.contradicted
        self.correct += scored.correct

    @property
    def violation_rate(self) -> float:
        return self.violating_outputs / max(1, self.outputs)

    @property
    def fer(self) -> float | None:
        verified = self.supported + self.contradicted
        return self.contradicted / verified if verified else None

    @property
    def accuracy(self) -> float:
        return self.correct / max(1, self.outputs)


def read_prompts(path: Path) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not rows:
        raise ValueError(f"{path}: no prompts")
    return rows


def prompt_seed(prompt_id: str) -> int:
    """A stable per-prompt seed (crc32, not hash(): hash() is salted per process)."""
    return zlib.crc32(prompt_id.encode())


# -- KG side ------------------------------------------------------------------------------------------
class DomainKG:
    """One domain's KG, the service's own prompt -> allowed-set wiring, and the linkers the scoring needs."""

    def __init__(self, kg: Any, knowledge: Any) -> None:
        from knowledge_graphs.decoding.constraint import DOMAIN_DEFAULTS
        from knowledge_graphs.linking import get_linker

        self.kg = kg
        self.knowledge = knowledge                                        # auditor.serving.runtime.KgKnowledge
        self.constrained_types: frozenset[str] = DOMAIN_DEFAULTS[kg.domain].types
        self.output_linker = get_linker(kg, self.constrained_types)       # what the constraint governs
        self.any_linker = get_linker(kg)                                  # every entity type, for gold answers

    def constraint(self, prompt: str) -> dict[str, Any] | None:
        """`extra_args["kg_constraint"]` exactly as the service sends it; None when the prompt names no entity."""
        kg_constraint = self.knowledge.constraint_for(self.kg.domain, prompt)
        if kg_constraint is None or not kg_constraint.applied:
            return None
        return kg_constraint.extra_args()["kg_constraint"]

    def violations(self, text: str, allowed: Collection[str]) -> list[str]:
        return [m.text for m in self.output_linker.link(text) if not set(m.candidate_ids) & set(allowed)]

    def named_entities(self, text: str) -> set[str]:
        return {i for m in self.any_linker.link(text) for i in m.candidate_ids}


def is_correct(text: str, gold_entities: Sequence[str], gold_literals: Sequence[str], named: set[str]) -> bool:
    """Every gold entity named and every gold literal present (yes/no: the answer's first word)."""
    if any(entity_id not in named for entity_id in gold_entities):
        return False
    folded = text.casefold()
    for literal in gold_literals:
        if literal in ("yes", "no"):
            words = folded.replace(",", " ").replace(".", " ").split()
            if not words or words[0] != literal:
                return False
        elif literal.casefold() not in folded:
            return False
    return True


# -- generation ---------------------------------------------------------------------------------------
def load_engine(model: Path, kgs: Mapping[str, Any], threads: int | None, dtype: str = "auto",
                kv_cache_dtype: str = "auto") -> Any:
    from engine.config import EngineConfig
    from engine.llm_engine import LLMEngine
    from engine.loader import generation_eos_ids, load_model_config
    from engine.tokenizer import Tokenizer
    from knowledge_graphs.decoding.constraint import KGConstraintProcessor

    model_config = load_model_config(model)
    eos_ids = list(dict.fromkeys(generation_eos_ids(model) + model_config.eos_token_ids))
    tokenizer = Tokenizer.from_dir(model, eos_ids)
    processor = KGConstraintProcessor(tokenizer, vocab_size=model_config.vocab_size,
                                      eos_token_ids=tokenizer.eos_token_ids, kgs=kgs)
    config = EngineConfig(num_threads=threads, kv_cache_memory_bytes=64 * 2**20, dtype=dtype,
                          kv_cache_dtype=kv_cache_dtype)
    return LLMEngine.from_pretrained(model, config, [processor])


def sampling(prompt_id: str, args: argparse.Namespace, constraint: dict[str, Any] | None) -> Any:
    from engine.sampling_params import SamplingParams

    extra = {"kg_constraint": constraint} if constraint is not None else {}
    return SamplingParams(temperature=args.temperature, top_p=args.top_p, seed=prompt_seed(prompt_id),
                          max_tokens=args.max_tokens, extra_args=extra)


def evaluate(args: argparse.Namespace) -> tuple[dict[str, Any], list[tuple[Scored, Scored]]]:
    from knowledge_graphs import load_kg

    prompts = read_prompts(args.prompts)[: args.limit or None]
    domains = sorted({p["domain"] for p in prompts})
    log(f"loading KGs {domains} ...")
    kgs = {d: load_kg(d) for d in domains}
    from auditor.serving.runtime import KgKnowledge  # the service's wiring: measure what it does

    knowledge = KgKnowledge(kgs)
    domain_kgs = {d: DomainKG(kg, knowledge) for d, kg in kgs.items()}
    log("loading engine ...")
    engine = load_engine(args.model, kgs, args.threads, args.dtype, args.kv_cache_dtype)

    chat = [engine.tokenizer.apply_chat_template([{"role": "user", "content": p["prompt"]}]) for p in prompts]
    constraints = [domain_kgs[p["domain"]].constraint(p["prompt"]) for p in prompts]
    outputs, ratios, seconds = generate_off_on(engine, args, prompts, chat, constraints)
    totals, pairs = score(prompts, outputs, constraints, domain_kgs)
    result = {
        "prompts": len(prompts),
        "unanchored_prompts": sum(c is None for c in constraints),
        "domains": domains,
        "entity_violation_rate_off": round(totals["off"].violation_rate, 4),
        "entity_violation_rate_on": round(totals["on"].violation_rate, 4),
        "violating_mentions_off": totals["off"].violating_mentions,
        "violating_mentions_on": totals["on"].violating_mentions,
        "fer_off": _round(totals["off"].fer),
        "fer_on": _round(totals["on"].fer),
        "verified_claims_off": totals["off"].supported + totals["off"].contradicted,
        "verified_claims_on": totals["on"].supported + totals["on"].contradicted,
        "task_accuracy_off": round(totals["off"].accuracy, 4),
        "task_accuracy_on": round(totals["on"].accuracy, 4),
        "time_overhead_frac": round(statistics.median(ratios) - 1, 4),
        "total_time_overhead_frac": round(seconds["on"] / seconds["off"] - 1, 4),
        "seconds_off": round(seconds["off"], 2),
        "seconds_on": round(seconds["on"], 2),
        "sampling": {"temperature": args.temperature, "top_p": args.top_p, "max_tokens": args.max_tokens,
                     "seed": "crc32(prompt id)"},
        "model": str(args.model.relative_to(REPO_ROOT) if args.model.is_relative_to(REPO_ROOT) else args.model),
        "dtype": engine.dtype,
        "kv_cache_dtype": args.kv_cache_dtype,
        "torch_threads": torch.get_num_threads(),
    }
    result.update(per_domain(domains, pairs))
    return result, pairs


def generate_off_on(engine: Any, args: argparse.Namespace, prompts: list[dict[str, Any]], chat: list[Any],
                    constraints: list[dict[str, Any] | None]) -> tuple[dict[str, list[Any]], list[float], dict[str, float]]:
    """Every prompt off and on, in chunks, the mode that goes first alternating: the outputs per mode,
    the on/off time ratio per chunk and the seconds per mode."""
    outputs: dict[str, list[Any]] = {"off": [None] * len(prompts), "on": [None] * len(prompts)}
    ratios: list[float] = []
    seconds = {"off": 0.0, "on": 0.0}
    for chunk_index, start in enumerate(range(0, len(prompts), args.chunk)):
        rows = list(range(start, min(start + args.chunk, len(prompts))))
        order = ("off", "on") if chunk_index % 2 == 0 else ("on", "off")
        took: dict[str, float] = {}
        for mode in order:
            params = [sampling(prompts[r]["id"], args, None if mode == "off" else constraints[r]) for r in rows]
            began = time.perf_counter()
            generated = generate_salted(engine, [chat[r] for r in rows], params, salt=mode)
            took[mode] = time.perf_counter() - began
            for r, output in zip(rows, generated, strict=True):
                outputs[mode][r] = output
        seconds["off"] += took["off"]
        seconds["on"] += took["on"]
        ratios.append(took["on"] / took["off"])
        log(f"chunk {chunk_index + 1}: {len(rows)} prompts, off {took['off']:.1f}s, on {took['on']:.1f}s")
    return outputs, ratios, seconds


def generate_salted(engine: Any, prompts: list[str], params: list[Any], *, salt: str) -> list[Any]:
    """`engine.generate` with a prefix-cache salt: requests share cached blocks only with requests of the
    same salt."""
    ids = [f"{salt}-{next(_request_numbers)}" for _ in prompts]
    for request_id, prompt, request_params in zip(ids, prompts, params, strict=True):
        engine.add_request(request_id, prompt, request_params, cache_salt=salt)
    final: dict[str, Any] = {}
    while engine.has_unfinished():
        final.update((out.request_id, out) for out in engine.step() if out.finished)
    return [final[request_id] for request_id in ids]


_request_numbers = itertools.count()


def score(prompts: list[dict[str, Any]], outputs: dict[str, list[Any]], constraints: list[dict[str, Any] | None],
          domain_kgs: Mapping[str, DomainKG]) -> tuple[dict[str, Totals], list[tuple[Scored, Scored]]]:
    """Each output scored (violations, verified claims, correctness): totals per mode and the
    (off, on) pair per prompt."""
    from rules import verify

    totals = {"off": Totals(), "on": Totals()}
    pairs: list[tuple[Scored, Scored]] = []
    for r, prompt in enumerate(prompts):
        domain_kg = domain_kgs[prompt["domain"]]
        scored_pair = []
        for mode in ("off", "on"):
            output = outputs[mode][r]
            text = output.text.strip()
            report = verify(text, prompt["domain"], prompt=prompt["prompt"], kg=domain_kg.kg) if text else None
            counts = report.counts() if report else {"supported": 0, "contradicted": 0}
            # no anchors in the prompt -> no neighbourhood, nothing to violate (the service does not constrain)
            allowed = constraints[r]["allowed_entity_ids"] if constraints[r] else None
            scored = Scored(
                prompt["id"], prompt["domain"], text, output.finish_reason,
                domain_kg.violations(text, allowed) if allowed is not None else [],
                counts["supported"], counts["contradicted"],
                is_correct(text, prompt["gold_entities"], prompt["gold_literals"], domain_kg.named_entities(text)),
            )
            totals[mode].add(scored)
            scored_pair.append(scored)
        pairs.append((scored_pair[0], scored_pair[1]))
    return totals, pairs


def per_domain(domains: list[str], pairs: list[tuple[Scored, Scored]]) -> dict[str, float | None]:
    """Task accuracy, entity violation rate and FER per domain and mode."""
    result: dict[str, float | None] = {}
    for domain in domains:
        for mode in ("off", "on"):
            chosen = [pair[0 if mode == "off" else 1] for pair in pairs if pair[0].domain == domain]
            result[f"{domain}_task_accuracy_{mode}"] = round(sum(s.correct for s in chosen) / max(1, len(chosen)), 4)
            result[f"{domain}_entity_violation_rate_{mode}"] = round(
                sum(bool(s.violations) for s in chosen) / max(1, len(chosen)), 4)
            verified = sum(s.supported + s.contradicted for s in chosen)
            result[f"{domain}_fer_{mode}"] = round(sum(s.contradicted for s in chosen) / verified, 4) if verified else None
    return result


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def print_table(result: dict[str, Any], pairs: list[tuple[Scored, Scored]], examples: int) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"KG constraint off vs on ({result['prompts']} prompts, {', '.join(result['domains'])})")
    table.add_column("metric")
    table.add_column("off", justify="right")
    table.add_column("on", justify="right")
    table.add_column("target")
    table.add_row("entity violation rate", str(result["entity_violation_rate_off"]),
                  str(result["entity_violation_rate_on"]), "on = 0")
    table.add_row("FER (pooled)", str(result["fer_off"]), str(result["fer_on"]), "on <= 0.5 x off")
    table.add_row("task accuracy", str(result["task_accuracy_off"]), str(result["task_accuracy_on"]), "on >= off")
    table.add_row("seconds", str(result["seconds_off"]), str(result["seconds_on"]),
                  f"+{result['total_time_overhead_frac']:.0%} summed, +{result['time_overhead_frac']:.0%} median chunk")
    for domain in result["domains"]:
        table.add_row(f"{domain}: accuracy", str(result[f"{domain}_task_accuracy_off"]),
                      str(result[f"{domain}_task_accuracy_on"]), "")
        table.add_row(f"{domain}: violation rate", str(result[f"{domain}_entity_violation_rate_off"]),
                      str(result[f"{domain}_entity_violation_rate_on"]), "")
        table.add_row(f"{domain}: FER", str(result[f"{domain}_fer_off"]), str(result[f"{domain}_fer_on"]), "")
    console.print(table)
    changed = [(off, on) for off, on in pairs if off.violations and not on.violations][:examples]
    for off, on in changed:
        console.print(f"[bold]{off.prompt_id}[/bold] off: {off.text}\n   violations {off.violations}\n   on: {on.text}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Hallucination rate with and without the KG constraint.")
    parser.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    parser.add_argument("--prompts", type=Path, default=DEFAULT_PROMPTS)
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    parser.add_argument("--limit", type=int, default=0, help="only the first N prompts (0: all)")
    parser.add_argument("--chunk", type=int, default=16, help="prompts per engine batch (one latency sample)")
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--top-p", type=float, default=0.95)
    parser.add_argument("--max-tokens", type=int, default=160)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"],
                        help="engine dtype (default auto, as the service runs)")
    parser.add_argument("--kv-cache-dtype", choices=("auto", "int8", "int4"), default="auto",
                        help="the engine's KV cache precision (benchmarks.kv_cache compares them)")
    parser.add_argument("--examples", type=int, default=5, help="off/on pairs to print (table mode)")
    parser.add_argument("--dump", type=Path, help="write every off/on output as JSONL here")
    args = parser.parse_args(argv)
    args.model = args.model.resolve()
    try:
        result, pairs = evaluate(args)
    except (ValueError, OSError) as exc:
        print(f"hallucination_eval: error: {exc}", file=sys.stderr)
        return 2
    if args.dump:
        args.dump.write_text("".join(json.dumps({"off": vars_of(off), "on": vars_of(on)}) + "\n" for off, on in pairs))
    if args.json:
        sys.stdout.write(json.dumps(result) + "\n")
    else:
        print_table(result, pairs, args.examples)
    return 0


def vars_of(scored: Scored) -> dict[str, Any]:
    return {name: getattr(scored, name) for name in Scored.__slots__}  # type: ignore[attr-defined]


if __name__ == "__main__":
    sys.exit(main())
