"""KG constraint: allowed sets, request validation, steering, events, cached masks, replay."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer

from engine.kernels.bitmask import apply_token_bitmask_torch, pack_bool_mask, unpack_bitmask
from engine.sampling_params import InvalidRequestError, SamplingParams
from knowledge_graphs.decoding import constraint_masks
from knowledge_graphs.decoding.constraint import KGConstraintError, KGConstraintProcessor, allowed_entities
from knowledge_graphs.decoding.constraint_masks import pack_allowed
from knowledge_graphs.decoding.surface_guard import MIN_DEAD_WORD_CHARS
from knowledge_graphs.linking import EntityLinker
from knowledge_graphs.model import Entity, KnowledgeGraph
from tests.knowledge_graphs.conftest import SRC, byte_level_bpe
from tests.knowledge_graphs.decoding.decode_sim import decode_loop, eos_id


def _processor(tokenizer: Tokenizer, kg: KnowledgeGraph) -> KGConstraintProcessor:
    return KGConstraintProcessor(tokenizer, vocab_size=tokenizer.get_vocab_size(),
                                 eos_token_ids=[eos_id(tokenizer)], kgs={"medical": kg})


def _params(allowed: list[str], domain: str = "medical") -> SamplingParams:
    return SamplingParams(extra_args={"kg_constraint": {"domain": domain, "allowed_entity_ids": allowed}})


def _follow(tokenizer: Tokenizer, text: str, bonus: dict[int, float] | None = None):
    plan = tokenizer.encode(text, add_special_tokens=False).ids

    def logits_fn(ids: list[int]) -> torch.Tensor:
        logits = torch.zeros(tokenizer.get_vocab_size())
        for token_id, value in (bonus or {}).items():
            logits[token_id] += value
        if len(ids) < len(plan):
            logits[plan[len(ids)]] += 50.0
        return logits

    return plan, logits_fn


# -- allowed set --------------------------------------------------------------------------------
def test_allowed_entities_follow_domain_relations_and_types(kg: KnowledgeGraph) -> None:
    assert allowed_entities(kg, ["drug:metformin"]) == {"drug:metformin", "condition:t2d"}
    # warfarin -interacts_with-> aspirin; the icd10 code is not a constrained type
    assert allowed_entities(kg, ["drug:warfarin", "condition:t2d"]) == {
        "drug:warfarin", "drug:aspirin", "condition:t2d", "drug:metformin"}
    assert allowed_entities(kg, ["condition:t2d"], types={"icd10cm_code"}, relations={"has_icd10cm_code"}) == {
        "icd10cm:E11.9"}
    assert allowed_entities(kg, ["drug:metformin"], hops=0) == {"drug:metformin"}
    assert allowed_entities(kg, ["drug:metformin"], extra_filter=lambda i: i.startswith("drug:")) == {"drug:metformin"}
    assert allowed_entities(kg, ["drug:nope"]) == frozenset()
    with pytest.raises(ValueError):
        allowed_entities(kg, ["drug:metformin"], hops=-1)


# -- request validation -------------------------------------------------------------------------
@pytest.mark.parametrize("args, message", [
    ({"domain": "legal", "allowed_entity_ids": []}, "domain"),
    ({"domain": "medical", "allowed_entity_ids": "drug:metformin"}, "list"),
    ({"domain": "medical", "allowed_entity_ids": ["drug:nope"]}, "drug:nope"),
    ("medical", "object"),
])
def test_bad_requests_are_refused_before_compute(kg: KnowledgeGraph, args: object, message: str) -> None:
    processor = _processor(byte_level_bpe(), kg)
    params = SamplingParams(extra_args={"kg_constraint": args})
    with pytest.raises(KGConstraintError, match=message):
        processor.validate_params(params)
    assert issubclass(KGConstraintError, InvalidRequestError)


def test_requests_without_arguments_are_not_constrained(kg: KnowledgeGraph) -> None:
    processor = _processor(byte_level_bpe(), kg)
    assert processor.add_request("r", SamplingParams(), [1, 2], []) is False
    logits = torch.randn(3, processor.vocab_size)
    before = logits.clone()
    processor.apply(logits, ["r", None, "other"])
    assert torch.equal(logits, before)


# -- allowed names pass, forbidden continuations are steered ----------------------------------------
def test_allowed_names_come_out_unchanged(tokenizer: Tokenizer, kg: KnowledgeGraph) -> None:
    """No over-blocking: allowed names, including one that ends in a forbidden name ("type 2 diabetes"
    with "diabetes" forbidden), are written exactly as without the constraint."""
    processor = _processor(tokenizer, kg)
    text = "Take Metformin for type 2 diabetes. Estradiol (ESTRADIOL) too, t2dm!"
    plan, logits_fn = _follow(tokenizer, text)
    allowed = ["drug:metformin", "condition:t2d", "drug:estradiol"]
    constrained = decode_loop(processor, tokenizer, logits_fn, allowed=allowed, steps=len(plan))
    free = decode_loop(None, tokenizer, logits_fn, steps=len(plan))
    assert constrained.ids == free.ids == plan
    found = {m.entity_id for m in EntityLinker(kg, types={"drug", "condition"}).link(constrained.text)}
    assert found == {"drug:metformin", "condition:t2d", "drug:estradiol"}
    assert constrained.events == []


def test_a_mention_heading_for_a_forbidden_entity_is_steered_and_recorded(tokenizer: Tokenizer, kg: KnowledgeGraph) -> None:
    processor = _processor(tokenizer, kg)
    context = len(tokenizer.encode("Take", add_special_tokens=False).ids)

    def encode(name: str) -> list[int]:
        return tokenizer.encode(f"Take {name}", add_special_tokens=False).ids

    def shared_tokens(a: list[int], b: list[int]) -> int:
        return next(i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)

    # two drugs whose encodings share their first name token(s) (" Met" ...): one allowed, one not
    names = {e.id: e.name for e in kg.entities("drug")}
    pairs = [(shared_tokens(encode(names[a]), encode(names[f])), a, f)
             for a in sorted(names) for f in sorted(names) if a != f and not names[a].startswith(names[f])]
    # the shared tokens must reach into the name itself, not just a bare space piece
    pairs = [p for p in pairs if tokenizer.decode(encode(names[p[1]])[: p[0]]).strip() != "Take"]
    # steering blocks a dead word from MIN_DEAD_WORD_CHARS characters on ("As" toward Aspirin is
    # still ordinary text): the forbidden continuation must reach that far
    pairs = [p for p in pairs
             if len(tokenizer.decode(encode(names[p[2]])[: p[0] + 1]).strip()) - len("Take ") >= MIN_DEAD_WORD_CHARS]
    shared, allowed_id, forbidden_id = max(pairs)
    assert shared > context
    toward_allowed, toward_forbidden = encode(names[allowed_id]), encode(names[forbidden_id])
    prefix = toward_allowed[:shared]   # "Take" and the name tokens both names start with
    bad_next, good_next = toward_forbidden[shared], toward_allowed[shared]
    # the model wants the forbidden continuation most, the allowed one second
    plan, logits_fn = _follow(tokenizer, tokenizer.decode(prefix), bonus={bad_next: 40.0, good_next: 30.0})
    assert plan == prefix
    result = decode_loop(processor, tokenizer, logits_fn, allowed=[allowed_id], steps=len(plan) + 1,
                         finish_steps=0)
    assert result.ids == [*prefix, good_next]
    blocked = [e for e in result.events if e.data["blocked_entity_ids"]]
    assert blocked and blocked[0].processor == "kg_constraint" and blocked[0].kind == "blocked"
    assert blocked[0].position == len(prefix)
    assert blocked[0].data == {"blocked_entity_ids": [forbidden_id], "chosen_entity_id": allowed_id}


def test_a_single_token_holding_a_whole_forbidden_name_and_its_boundary_is_blocked(kg: KnowledgeGraph) -> None:
    tokenizer = byte_level_bpe()
    tokenizer.add_tokens(["aspirin!", "Take ASA,"])   # literal (non-special) added tokens
    processor = _processor(tokenizer, kg)
    for text in ["aspirin!", "Take ASA,"]:
        token_id = tokenizer.token_to_id(text)
        plan, logits_fn = _follow(tokenizer, text)
        assert plan == [token_id]
        result = decode_loop(processor, tokenizer, logits_fn, allowed=["drug:metformin"], steps=1, finish_steps=0)
        assert result.ids != [token_id]
        free = decode_loop(None, tokenizer, logits_fn, steps=1, finish_steps=0)
        assert free.ids == [token_id]


def test_one_and_two_letter_aliases_stay_writable(tokenizer: Tokenizer, kg: KnowledgeGraph) -> None:
    """'He' is an alias of Helium in the fixture (as in the real drug data); the word stays usable."""
    processor = _processor(tokenizer, kg)
    plan, logits_fn = _follow(tokenizer, "He said he took Helium.")
    result = decode_loop(processor, tokenizer, logits_fn, allowed=["drug:metformin"], steps=len(plan))
    assert result.text.startswith("He said he took")
    assert "Helium" not in result.text


# -- masks ---------------------------------------------------------------------------------------
def test_masks_are_cached_packed_bitmasks(kg: KnowledgeGraph) -> None:
    tokenizer = byte_level_bpe()
    processor = _processor(tokenizer, kg)
    processor.add_request("a", _params(["drug:metformin"]), [], [])
    processor.add_request("b", _params(["drug:metformin"]), [], [])
    view = processor._requests["a"].view
    assert view is processor._requests["b"].view          # one view per allowed set, shared
    first = view.mask(processor._requests["a"].state)
    again = view.mask(processor._requests["b"].state)
    assert first is again and first.dtype == torch.int32
    assert first.shape == ((processor.vocab_size + 31) // 32,)


def test_preempted_request_replays_to_the_same_state(kg: KnowledgeGraph) -> None:
    tokenizer = byte_level_bpe()
    processor = _processor(tokenizer, kg)
    generated = tokenizer.encode("We switched from Met", add_special_tokens=False).ids
    processor.add_request("live", _params(["drug:metformin"]), [], [])
    for token_id in generated:
        processor.accept_token("live", token_id)
    processor.add_request("replayed", _params(["drug:metformin"]), [], generated)
    live, replayed = processor._requests["live"], processor._requests["replayed"]
    assert live.state == replayed.state and live.position == replayed.position == len(generated)
    assert live.state.trie_node is not None      # inside the mention "Met..."
    logits = torch.randn(2, processor.vocab_size)
    processor.apply(logits, ["live", "replayed"])
    assert torch.equal(torch.isinf(logits[0]), torch.isinf(logits[1]))
    assert torch.isinf(logits[0]).any()


def test_logits_wider_than_the_vocabulary_are_masked_past_it(kg: KnowledgeGraph) -> None:
    tokenizer = byte_level_bpe()
    processor = _processor(tokenizer, kg)
    processor.add_request("r", _params(["drug:metformin"]), [], [])
    logits = torch.zeros(1, processor.vocab_size + 64)
    processor.apply(logits, ["r"])
    assert torch.isinf(logits[0, processor.vocab_size :]).all()
    assert torch.isfinite(logits[0, : processor.vocab_size]).any()


@pytest.mark.parametrize("vocab_size", [1, 31, 33, 1000, 8192])
def test_fast_packing_matches_the_bitmask_reference(vocab_size: int) -> None:
    allowed = torch.rand(vocab_size, generator=torch.Generator().manual_seed(vocab_size)) < 0.5
    assert torch.equal(pack_allowed(allowed, vocab_size), pack_bool_mask(allowed, vocab_size))


def test_sparse_and_dense_application_match_the_packed_masks(
    tokenizer: Tokenizer, kg: KnowledgeGraph, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rows are masked either through cached blocked ids or the bitmask kernel: same result."""
    # Steering inside a mention only blocks dead words now, so on these small vocabularies no state
    # may block 1/16 of them: put the threshold between the fewest and the most tokens a state of
    # this text blocks, so that both application paths are exercised.
    text = "Take Metformin for type 2 diabetes, not Metoprolol"
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    request_ids = [f"r{i}" for i in range(len(ids))]

    def entries_with(fraction: float) -> tuple[KGConstraintProcessor, list]:
        monkeypatch.setattr(constraint_masks, "SPARSE_FRACTION", fraction)
        processor = _processor(tokenizer, kg)
        for i, request_id in enumerate(request_ids):   # request i has generated the first i tokens
            processor.add_request(request_id, _params(["drug:metformin", "condition:t2d"]), [], ids[:i])
        return processor, [processor._requests[r].view.entry(processor._requests[r].state) for r in request_ids]

    counts = sorted(e.blocked_ids.numel() for e in entries_with(1.0)[1])
    assert counts[0] < counts[-1]
    processor, entries = entries_with((counts[0] + 0.5) / processor_vocab(tokenizer))
    assert any(e.blocked_ids is None for e in entries) and any(e.blocked_ids is not None for e in entries)
    logits = torch.randn(len(ids), processor.vocab_size, generator=torch.Generator().manual_seed(0))
    expected = logits.clone()
    apply_token_bitmask_torch(expected, torch.stack([e.packed for e in entries]))
    processor.apply(logits, request_ids)
    assert torch.equal(logits, expected)


@pytest.mark.parametrize("path", ["sparse", "dense"])
def test_a_masked_favourite_is_noticed_on_both_paths_in_a_mixed_batch(
    tokenizer: Tokenizer, kg: KnowledgeGraph, monkeypatch: pytest.MonkeyPatch, path: str,
) -> None:
    """Whichever way a row is masked, and with unconstrained rows in between, a row whose best logit the
    mask removed has that token noted as its blocked favourite, and no other row has one."""
    monkeypatch.setattr(constraint_masks, "SPARSE_FRACTION", 1.0 if path == "sparse" else 0.0)
    processor = _processor(tokenizer, kg)
    ids = tokenizer.encode("Take Metformin for type 2 diabetes, not Metoprolol", add_special_tokens=False).ids
    request_ids: list[str | None] = []
    for i in range(len(ids)):
        processor.add_request(f"r{i}", _params(["drug:metformin", "condition:t2d"]), [], ids[:i])
        request_ids += [f"r{i}", None]          # an unconstrained row after each constrained one
    masks = [processor._requests[r].view.entry(processor._requests[r].state).packed for r in request_ids if r]
    allowed = unpack_bitmask(torch.stack(masks), processor.vocab_size)                  # [k, vocab]
    logits = torch.randn(len(request_ids), processor.vocab_size, generator=torch.Generator().manual_seed(1))
    for k in range(0, len(masks), 2):           # every other constrained row: its favourite is a blocked token
        blocked = (~allowed[k]).nonzero().flatten()
        if len(blocked):
            logits[2 * k, blocked[len(blocked) // 2]] = 50.0
    favourites = logits.argmax(-1)
    processor.apply(logits, request_ids)
    for k, request_id in enumerate(r for r in request_ids if r):
        favourite = int(favourites[2 * k])
        expected = None if allowed[k, favourite] else favourite
        assert processor._requests[request_id].blocked == expected, request_id
    assert sum(processor._requests[r].blocked is not None for r in request_ids if r) >= 3
    assert torch.isfinite(logits[1::2]).all()   # unconstrained rows untouched


def processor_vocab(tokenizer: Tokenizer) -> int:
    return tokenizer.get_vocab_size()


def test_a_forbidden_name_with_a_character_split_over_byte_tokens_is_blocked() -> None:
    tokenizer = byte_level_bpe()
    kg = KnowledgeGraph("medical", [
        Entity("condition:sjogren", "condition", "Sjögren syndrome", ["Sjögren"], provenance=SRC),
        Entity("drug:metformin", "drug", "Metformin", provenance=SRC),
    ], [])
    processor = _processor(tokenizer, kg)
    text = "Dx: Sjögren. Then sjögren syndrome!"
    plan, logits_fn = _follow(tokenizer, text)
    assert any(not processor.token_complete[t] for t in plan)      # "ö" really is split over tokens
    free = decode_loop(None, tokenizer, logits_fn, steps=len(plan))
    linker = EntityLinker(kg, types={"drug", "condition"})
    assert {m.entity_id for m in linker.link(free.text)} == {"condition:sjogren"}
    result = decode_loop(processor, tokenizer, logits_fn, allowed=["drug:metformin"], steps=len(plan))
    assert result.finish_reason == "stop"
    assert linker.link(result.text) == []


# -- ordinary words and citations stay writable ---------------------------------------------------
def test_words_that_leave_the_name_index_are_not_steered(tokenizer: Tokenizer, kg: KnowledgeGraph) -> None:
    """A word that starts like a name ("Met...") but is no prefix of any name ("metals", "Metro",
    "metadata") ends the mention: steering lets it through."""
    processor = _processor(tokenizer, kg)
    text = "Take Metformin. Metro estate metadata: the metals meet the standard of care."
    plan, logits_fn = _follow(tokenizer, text)
    result = decode_loop(processor, tokenizer, logits_fn, allowed=["drug:metformin"], steps=len(plan))
    assert result.finish_reason == "stop"
    assert result.text == tokenizer.decode(plan)


BUNDLED_TOKENIZER = Path(__file__).resolve().parents[3] / "auditor" / "bundled_model" / "tokenizer.json"


@pytest.mark.skipif(not BUNDLED_TOKENIZER.exists(), reason="bundled model tokenizer not present")
@pytest.mark.parametrize("anchors, text", [
    (["case:brandenburg-v-ohio"], "Brandenburg v. Ohio, 395 U.S. 444 (1969) (United States Reports)."),
    (["statute:28-usc-1331"], "28 U.S.C. § 1331 gives district courts federal question jurisdiction (28 U.S.C. 1331)."),
    (["fabricated:varghese-v-china-southern-airlines-co-ltd"],
     "No. Varghese v. China Southern Airlines is fabricated; it is documented in Mata v. Avianca, Inc., "
     "678 F. Supp. 3d 443 (S.D.N.Y. 2023)."),
    (["fabricated:bourguignon-v-coordinated-behavioral-health-services"],
     "No. It does not exist: it is documented in Park v. Kim, 91 F.4th 610 (2d Cir. 2024)."),
])
def test_legal_citations_are_written_unchanged(anchors: list[str], text: str) -> None:
    """Real legal KG and the bundled model's tokenizer: case names holding state names, "NNN U.S. NNN"
    citations, "U.S.C." and the decision that documented a fabricated citation all stay writable."""
    from knowledge_graphs import load_kg

    kg = load_kg("legal")
    tokenizer = Tokenizer.from_file(str(BUNDLED_TOKENIZER))
    eos = tokenizer.token_to_id("</s>") or 0
    processor = KGConstraintProcessor(tokenizer, vocab_size=tokenizer.get_vocab_size(), eos_token_ids=[eos],
                                      kgs={"legal": kg})
    allowed = sorted(allowed_entities(kg, anchors))
    plan = tokenizer.encode(text, add_special_tokens=False).ids
    params = _params(allowed, domain="legal")
    processor.validate_params(params)
    assert processor.add_request("r", params, [], [])
    for token_id in plan:
        logits = torch.zeros(1, processor.vocab_size)
        processor.apply(logits, ["r"])
        assert torch.isfinite(logits[0, token_id]), (tokenizer.decode(plan[: plan.index(token_id) + 1]), allowed)
        processor.accept_token("r", token_id)
    logits = torch.zeros(1, processor.vocab_size)
    processor.apply(logits, ["r"])
    assert torch.isfinite(logits[0, eos])
