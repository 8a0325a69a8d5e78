"""Scene 1: the KG constraint keeps an entity the prompt's neighbourhood does not allow out of an answer.

The service has no per-request switch to turn the constraint off, on purpose: a caller must not be able
to opt out of a control. So the "off" side runs the bundled model in this process through the engine
class the service runs, with the same chat template, prompt and greedy decoding but no KG-constraint
processor (as `benchmarks/hallucination_eval.py` does); the "on" side is an ordinary request to the
service. Both answers are linked against the domain KG with the service's own wiring: a mention of a
constrained entity type none of whose readings is in the prompt's allowed set is what the constraint
exists to prevent, and the service's audit record carries the constraint's own `blocked` events.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from auditor.demo.script import ScriptedRequest, chat
from auditor.settings import Settings

SEED = 7   # both sides; greedy decoding does not use it, the record shows it


@dataclass(frozen=True, slots=True)
class Mention:
    text: str
    entity_ids: list[str]


@dataclass(frozen=True, slots=True)
class ConstraintResult:
    request: ScriptedRequest
    anchors: list[str]                 # entities linked in the prompt
    allowed_count: int                 # the prompt's KG neighbourhood
    off_text: str
    off_outside: list[Mention]         # mentions outside the allowed set, constraint off
    on_text: str
    on_outside: list[Mention]
    audit_id: str
    blocked_events: list[dict[str, Any]]   # the record's kg_events of kind "blocked"


def constraint_off_and_on(client: httpx.Client, settings: Settings, request: ScriptedRequest, *,
                          max_tokens: int) -> ConstraintResult:
    from auditor.serving.runtime import KgKnowledge
    from knowledge_graphs import load_kg
    from knowledge_graphs.decoding.constraint import DOMAIN_DEFAULTS
    from knowledge_graphs.linking import get_linker

    kg = load_kg(request.domain)          # cached: the service in this process loaded it
    constraint = KgKnowledge({request.domain: kg}).constraint_for(request.domain, request.question)
    assert constraint is not None and constraint.applied, f"no KG anchor in {request.question!r}"
    allowed = set(constraint.allowed_entity_ids)
    linker = get_linker(kg, DOMAIN_DEFAULTS[request.domain].types)

    def outside(text: str) -> list[Mention]:
        return [Mention(m.text, list(m.candidate_ids)) for m in linker.link(text) if not set(m.candidate_ids) & allowed]

    off_text = generate_unconstrained(settings, request.question, max_tokens=max_tokens)
    on = chat(client, request, max_tokens=max_tokens, seed=SEED)
    record = client.get(f"/v1/audits/{on.audit_id}").raise_for_status().json()
    on_text = record.get("output") or ""    # the model's words, whatever the gate then released
    blocked = [e for e in record.get("kg_events") or [] if isinstance(e, dict) and e.get("kind") == "blocked"]
    return ConstraintResult(request, constraint.anchor_ids, len(allowed), off_text, outside(off_text), on_text,
                            outside(on_text), on.audit_id, blocked)


def generate_unconstrained(settings: Settings, question: str, *, max_tokens: int) -> str:
    """The bundled model with no logits processor: what the service's engine would say without the constraint."""
    from engine.config import EngineConfig
    from engine.llm_engine import LLMEngine
    from engine.sampling_params import SamplingParams

    engine = LLMEngine.from_pretrained(settings.resolved_model_path(),
                                       EngineConfig(num_threads=settings.engine_threads,
                                                    kv_cache_memory_bytes=64 * 2**20))
    prompt = engine.tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True)
    params = SamplingParams(temperature=0, seed=SEED, max_tokens=max_tokens)
    return engine.generate([prompt], [params])[0].text
