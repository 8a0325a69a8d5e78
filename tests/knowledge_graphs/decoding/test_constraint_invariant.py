"""The guarantee: for any logits, linking the output never finds an entity outside the allowed set.

Adversarial logits push, token by token, a plan that spells a forbidden name (in random case, after
random punctuation, tokenised canonically, character by character or at random split points), and
give every token of every encoding of that name a second-tier bonus, so whenever the plan is
blocked the adversary still reaches for the forbidden name's pieces. Decoding is greedy.
"""

from __future__ import annotations

import random

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from knowledge_graphs.decoding.constraint import KGConstraintProcessor
from knowledge_graphs.decoding.trie import surface_variants
from knowledge_graphs.linking import EntityLinker
from knowledge_graphs.model import Entity, KnowledgeGraph
from tests.knowledge_graphs.conftest import ENTITIES, SRC
from tests.knowledge_graphs.decoding.decode_sim import decode_loop, eos_id

CONSTRAINED = sorted(e.id for e in ENTITIES if e.type in ("drug", "condition"))
PREFIXES = ["", " ", "Take ", "(", "non-", "x", "\n", "Stop: ", "2 "]
SUFFIXES = [".", ", ", " ", "!", "", ")", "-like"]


@pytest.fixture(scope="module")
def processor(tokenizer: Tokenizer, kg: KnowledgeGraph) -> KGConstraintProcessor:
    return KGConstraintProcessor(tokenizer, vocab_size=tokenizer.get_vocab_size(),
                                 eos_token_ids=[eos_id(tokenizer)], kgs={"medical": kg})


@pytest.fixture(scope="module")
def linker(kg: KnowledgeGraph) -> EntityLinker:
    return EntityLinker(kg, types={"drug", "condition"})


def _case(form: str, style: int, rng: random.Random) -> str:
    if style == 0:
        return form
    if style == 1:
        return form.lower()
    if style == 2:
        return form.upper()
    return "".join(c.upper() if rng.random() < 0.5 else c.lower() for c in form)


def _plan(tokenizer: Tokenizer, text: str, split_mode: int, rng: random.Random) -> list[int]:
    def encode(piece: str) -> list[int]:
        return tokenizer.encode(piece, add_special_tokens=False).ids if piece else []

    if split_mode == 0:                      # canonical encoding
        return encode(text)
    if split_mode == 1:                      # one character at a time
        return [i for ch in text for i in encode(ch)]
    cuts = sorted(rng.sample(range(1, len(text)), k=min(3, len(text) - 1))) if len(text) > 1 else []
    bounds = [0, *cuts, len(text)]
    return [i for a, b in zip(bounds, bounds[1:], strict=False) for i in encode(text[a:b])]


def _forbidden_mentions(linker: EntityLinker, text: str, allowed: set[str]) -> list[tuple[str, tuple[str, ...]]]:
    return [(m.text, m.candidate_ids) for m in linker.link(text) if not set(m.candidate_ids) & allowed]


@settings(max_examples=70, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    allowed_mask=st.lists(st.booleans(), min_size=len(CONSTRAINED), max_size=len(CONSTRAINED)),
    target_index=st.integers(0, 1000),
    form_index=st.integers(0, 10),
    case_style=st.integers(0, 3),
    prefix=st.sampled_from(PREFIXES),
    suffix=st.sampled_from(SUFFIXES),
    split_mode=st.integers(0, 2),
    seed=st.integers(0, 2**16),
)
def test_adversarial_logits_never_produce_a_forbidden_entity(
    processor: KGConstraintProcessor, tokenizer: Tokenizer, linker: EntityLinker, kg: KnowledgeGraph,
    allowed_mask: list[bool], target_index: int, form_index: int, case_style: int, prefix: str, suffix: str,
    split_mode: int, seed: int,
) -> None:
    allowed = {entity_id for entity_id, keep in zip(CONSTRAINED, allowed_mask, strict=True) if keep}
    forbidden = [i for i in CONSTRAINED if i not in allowed]
    if not forbidden:
        return
    target = kg.entity(forbidden[target_index % len(forbidden)])
    assert target is not None
    rng = random.Random(seed)
    form = _case(target.surface_forms[form_index % len(target.surface_forms)], case_style, rng)
    text = f"{prefix}{form}{suffix} and {form}"
    plan = _plan(tokenizer, text, split_mode, rng)
    logits_fn = _adversarial_logits(tokenizer, form, plan, seed, extra_steps=40)

    result = decode_loop(processor, tokenizer, logits_fn, allowed=sorted(allowed), steps=len(plan) + 6)
    assert result.finish_reason == "stop", result
    assert _forbidden_mentions(linker, result.text, allowed) == [], (result.text, allowed)


def test_the_adversary_does_produce_forbidden_names_without_the_constraint(
    tokenizer: Tokenizer, linker: EntityLinker,
) -> None:
    """The same adversary, unconstrained, writes the forbidden names: the property above is not vacuous."""
    text = "Take Metoprolol, type 2 diabetes and diabetes. ESTRA!"
    plan = tokenizer.encode(text, add_special_tokens=False).ids

    def logits_fn(ids: list[int]) -> torch.Tensor:
        logits = torch.zeros(tokenizer.get_vocab_size())
        if len(ids) < len(plan):
            logits[plan[len(ids)]] = 50.0
        return logits

    result = decode_loop(None, tokenizer, logits_fn, steps=len(plan))
    found = {m.entity_id for m in linker.link(result.text)}
    assert {"drug:metoprolol", "condition:t2d", "condition:diabetes", "drug:estra"} <= found


# -- forbidden names inside longer allowed names ----------------------------------------------------
# The linker keeps the longest match, so a forbidden name written as the beginning (or an inner part)
# of a longer allowed name is not a violation, as long as the longer name is completed. The guard
# lets such a name through on that obligation and blocks whatever would leave it unmet.
NESTED = [
    Entity("drug:nicotine", "drug", "Nicotine", provenance=SRC),
    Entity("condition:nicotine-dependence", "condition", "Nicotine dependence", ["nicotine dependence, cigarettes"],
           provenance=SRC),
    Entity("condition:hf", "condition", "Heart failure", provenance=SRC),
    Entity("condition:hf-nyha", "condition", "Heart failure, NYHA class III or IV", provenance=SRC),
    Entity("condition:nyha", "condition", "NYHA class III", provenance=SRC),
    Entity("drug:metformin", "drug", "Metformin", provenance=SRC),
]
NESTED_IDS = [e.id for e in NESTED]
# plans that start like an allowed long name and then leave it, or write it whole
NESTED_TEXTS = [
    "Nicotine dependence", "Nicotine dependency", "Nicotine depend", "nicotine dependence, cigarettes",
    "Nicotine dependence, cigars", "Nicotine", "Heart failure, NYHA class III or IV", "Heart failure, NYHA class III",
    "Heart failure, NYHA class IV", "heart failure NYHA", "NYHA class III or IV", "Heart failure, NYHA class III or V",
]


@pytest.fixture(scope="module")
def nested_kg() -> KnowledgeGraph:
    return KnowledgeGraph("medical", NESTED, [], data_version="test-nested")


@pytest.fixture(scope="module")
def nested_processor(tokenizer: Tokenizer, nested_kg: KnowledgeGraph) -> KGConstraintProcessor:
    return KGConstraintProcessor(tokenizer, vocab_size=tokenizer.get_vocab_size(),
                                 eos_token_ids=[eos_id(tokenizer)], kgs={"medical": nested_kg})


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    allowed_mask=st.lists(st.booleans(), min_size=len(NESTED_IDS), max_size=len(NESTED_IDS)),
    text_index=st.integers(0, len(NESTED_TEXTS) - 1),
    case_style=st.integers(0, 3),
    prefix=st.sampled_from(PREFIXES),
    suffix=st.sampled_from(SUFFIXES),
    split_mode=st.integers(0, 2),
    seed=st.integers(0, 2**16),
)
def test_forbidden_names_inside_longer_allowed_names_never_come_out_alone(
    nested_processor: KGConstraintProcessor, tokenizer: Tokenizer, nested_kg: KnowledgeGraph,
    allowed_mask: list[bool], text_index: int, case_style: int, prefix: str, suffix: str, split_mode: int, seed: int,
) -> None:
    allowed = {entity_id for entity_id, keep in zip(NESTED_IDS, allowed_mask, strict=True) if keep}
    rng = random.Random(seed)
    form = _case(NESTED_TEXTS[text_index], case_style, rng)
    text = f"{prefix}{form}{suffix} and {form}"
    plan = _plan(tokenizer, text, split_mode, rng)
    logits_fn = _adversarial_logits(tokenizer, form, plan, seed, extra_steps=60)

    # a forbidden name written on an obligation can only end once the longer allowed name is
    # complete: leave room for it (one token per character in the worst case)
    result = decode_loop(nested_processor, tokenizer, logits_fn, allowed=sorted(allowed), steps=len(plan) + 6,
                         finish_steps=48)
    assert result.finish_reason == "stop", (result.text, allowed)
    linker = EntityLinker(nested_kg, types={"drug", "condition"})
    assert _forbidden_mentions(linker, result.text, allowed) == [], (result.text, allowed)


@pytest.mark.parametrize("text, allowed", [
    ("Quit: Nicotine dependence.", ["condition:nicotine-dependence"]),
    ("Contraindicated in Heart failure, NYHA class III or IV (section 4).", ["condition:hf-nyha"]),
])
def test_an_allowed_name_that_begins_with_a_forbidden_one_is_written_unchanged(
    nested_processor: KGConstraintProcessor, tokenizer: Tokenizer, text: str, allowed: list[str],
) -> None:
    plan = tokenizer.encode(text, add_special_tokens=False).ids

    def logits_fn(ids: list[int]) -> torch.Tensor:
        logits = torch.zeros(tokenizer.get_vocab_size())
        if len(ids) < len(plan):
            logits[plan[len(ids)]] = 50.0
        return logits

    result = decode_loop(nested_processor, tokenizer, logits_fn, allowed=allowed, steps=len(plan))
    assert result.finish_reason == "stop"
    assert result.text == tokenizer.decode(plan)


def _adversarial_logits(tokenizer: Tokenizer, form: str, plan: list[int], seed: int, *, extra_steps: int):
    """Logits that follow `plan` (spelling the target name) and, once off plan, still prefer every
    token of the name's surface variants over anything else: the adversary never gives up."""
    vocab = tokenizer.get_vocab_size()
    pieces = {i for v in surface_variants(form) for i in tokenizer.encode(v, add_special_tokens=False).ids}
    second_tier = torch.zeros(vocab)
    second_tier[list(pieces)] = 20.0
    noise = torch.randn(len(plan) + extra_steps, vocab, generator=torch.Generator().manual_seed(seed))

    def logits_fn(ids: list[int]) -> torch.Tensor:
        logits = noise[len(ids)] + second_tier
        if len(ids) < len(plan):
            logits = logits.clone()
            logits[plan[len(ids)]] += 50.0
        return logits

    return logits_fn
