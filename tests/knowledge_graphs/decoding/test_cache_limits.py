"""The KG constraint's caches stay within their limits under traffic that keeps bringing new allowed sets and
new decoding states, and a request whose view was dropped from the cache keeps decoding correctly."""

from __future__ import annotations

import torch

from engine.sampling_params import SamplingParams
from knowledge_graphs.decoding.constraint import KGConstraintProcessor
from knowledge_graphs.decoding.constraint_masks import CacheLimits

ALLOWED_SETS = [["drug:metformin"], ["drug:aspirin", "drug:warfarin"], ["drug:metoprolol", "condition:htn"],
                ["drug:ibuprofen"], ["condition:t2d", "drug:metformin"]]


def _params(allowed: list[str]) -> SamplingParams:
    return SamplingParams(extra_args={"kg_constraint": {"domain": "medical", "allowed_entity_ids": allowed}})


def _decode(processor: KGConstraintProcessor, tokenizer, request_id: str, text: str) -> list[list[float]]:
    rows = []
    for token_id in tokenizer.encode(text, add_special_tokens=False).ids:
        logits = torch.zeros(1, tokenizer.get_vocab_size())
        processor.apply(logits, [request_id])
        rows.append(logits[0].tolist())
        processor.accept_token(request_id, token_id)
    return rows


def test_views_and_masks_stay_within_their_limits(kg, tokenizer) -> None:
    limits = CacheLimits(views=2, masks_per_view=16, memo_bytes=64 * 2**10)
    processor = KGConstraintProcessor(tokenizer, vocab_size=tokenizer.get_vocab_size(), eos_token_ids=[0],
                                      kgs={"medical": kg}, limits=limits)
    domain = processor.domains["medical"]
    text = " Metformin, metoprolol and warfarin with aspirin for type 2 diabetes; ibuprofen later. " * 3
    for i, allowed in enumerate(ALLOWED_SETS):
        processor.prepare(_params(allowed))
        processor.add_request(f"r{i}", _params(allowed), [1], [])
        _decode(processor, tokenizer, f"r{i}", text)
        processor.remove_request(f"r{i}")
        assert domain.cached_views <= 2
        for memo in (domain.guard._shared, domain.guard._lazy_records, domain._plain_steps):
            assert len(memo) >= 1 and memo.bytes <= 64 * 2**10
        for view in list(domain._views.values()):
            assert len(view._masks) <= 16 and len(view._transitions) <= 16
            assert len(view.allowed_nodes.walks) <= 17


def test_a_request_outlives_the_eviction_of_its_view(kg, tokenizer) -> None:
    text = " Metoprolol or metformin for diabetes and aspirin"
    reference = KGConstraintProcessor(tokenizer, vocab_size=tokenizer.get_vocab_size(), eos_token_ids=[0],
                                      kgs={"medical": kg})
    reference.add_request("r", _params(ALLOWED_SETS[0]), [1], [])
    expected = _decode(reference, tokenizer, "r", text)

    processor = KGConstraintProcessor(tokenizer, vocab_size=tokenizer.get_vocab_size(), eos_token_ids=[0],
                                      kgs={"medical": kg}, limits=CacheLimits(views=1, masks_per_view=16))
    processor.add_request("r", _params(ALLOWED_SETS[0]), [1], [])
    for other in ALLOWED_SETS[1:]:   # push its view out of the cache
        processor.prepare(_params(other))
    assert _decode(processor, tokenizer, "r", text) == expected


def test_views_stay_within_their_byte_budget_whatever_their_count_limit(kg, tokenizer) -> None:
    """Views of a large KG's allowed sets are large: a generous count must not let them outgrow the budget."""
    probe = KGConstraintProcessor(tokenizer, vocab_size=tokenizer.get_vocab_size(), eos_token_ids=[0],
                                  kgs={"medical": kg})
    sizes = [probe.domains["medical"].view(allowed).approx_bytes for allowed in ALLOWED_SETS]
    assert all(size > 0 for size in sizes)
    budget = sorted(sizes)[-2] + sorted(sizes)[-1]   # room for about two views
    processor = KGConstraintProcessor(tokenizer, vocab_size=tokenizer.get_vocab_size(), eos_token_ids=[0],
                                      kgs={"medical": kg}, limits=CacheLimits(views=1000, view_bytes=budget))
    domain = processor.domains["medical"]
    for _ in range(3):
        for allowed in ALLOWED_SETS:
            processor.prepare(_params(allowed))
            assert domain.cached_view_bytes <= budget
            assert domain.cached_view_bytes == sum(view.approx_bytes for view in domain._views.values())
    assert 1 <= domain.cached_views < len(ALLOWED_SETS)


def test_the_masks_a_view_caches_count_against_the_byte_budget(kg, tokenizer) -> None:
    """A view reused by request after request caches a mask and a transition per decoding state it meets: those
    count in its size, so a few busy views cannot hold more than the budget (their entry counts alone would let
    64 views per domain keep thousands of masks each)."""
    text = " Metformin, metoprolol and warfarin with aspirin for type 2 diabetes; ibuprofen later. "
    probe = KGConstraintProcessor(tokenizer, vocab_size=tokenizer.get_vocab_size(), eos_token_ids=[0],
                                  kgs={"medical": kg})
    probe.add_request("p", _params(ALLOWED_SETS[1]), [1], [])
    built = probe.domains["medical"].view(ALLOWED_SETS[1]).approx_bytes
    _decode(probe, tokenizer, "p", text * 4)
    view = probe.domains["medical"].view(ALLOWED_SETS[1])
    assert view.approx_bytes > built + 10 * 600            # its masks and transitions are counted
    assert probe.domains["medical"].cached_view_bytes == sum(v.approx_bytes for v in probe.domains["medical"]._views.values())

    fresh = KGConstraintProcessor(tokenizer, vocab_size=tokenizer.get_vocab_size(), eos_token_ids=[0],
                                  kgs={"medical": kg})
    budget = sum(fresh.domains["medical"].view(allowed).approx_bytes for allowed in ALLOWED_SETS) + 2_000
    # room for every view as built, little for what they cache
    processor = KGConstraintProcessor(tokenizer, vocab_size=tokenizer.get_vocab_size(), eos_token_ids=[0],
                                      kgs={"medical": kg}, limits=CacheLimits(views=1000, view_bytes=budget))
    domain = processor.domains["medical"]
    for i, allowed in enumerate(ALLOWED_SETS):
        processor.add_request(f"r{i}", _params(allowed), [1], [])
        _decode(processor, tokenizer, f"r{i}", text)
        processor.remove_request(f"r{i}")
        assert domain.cached_view_bytes <= budget
        assert domain.cached_view_bytes == sum(v.approx_bytes for v in domain._views.values())
    assert domain.cached_views < len(ALLOWED_SETS)   # what they cached while decoding pushed the oldest out


def test_the_service_sizes_the_constraint_caches_from_its_settings() -> None:
    from auditor.serving.engine_loading import engine_options
    from auditor.settings import Settings

    limits = engine_options(Settings(kg_constraint_views=7, kg_constraint_view_mb=3, kg_constraint_memo_mb=2))["limits"]
    assert limits.views == 7 and limits.view_bytes == 3 * 2**20 and limits.memo_bytes == 2 * 2**20


def test_the_shared_memos_are_bounded_by_bytes_whatever_their_entry_count(kg, tokenizer) -> None:
    """A budget too small for more than a few guard results holds a few; the same traffic under a large budget
    keeps them all, and the masks come out the same either way (a memo is only a shortcut)."""
    text = " Metformin, metoprolol and warfarin with aspirin for type 2 diabetes; ibuprofen later. "

    def run(memo_bytes: int) -> tuple[KGConstraintProcessor, list[list[list[float]]]]:
        processor = KGConstraintProcessor(tokenizer, vocab_size=tokenizer.get_vocab_size(), eos_token_ids=[0],
                                          kgs={"medical": kg}, limits=CacheLimits(memo_bytes=memo_bytes))
        rows = []
        for i, allowed in enumerate(ALLOWED_SETS):
            processor.add_request(f"r{i}", _params(allowed), [1], [])
            rows.append(_decode(processor, tokenizer, f"r{i}", text))
            processor.remove_request(f"r{i}")
        return processor, rows

    small, small_rows = run(4 * 2**10)
    large, large_rows = run(64 * 2**20)
    assert small_rows == large_rows
    small_guard, large_guard = small.domains["medical"].guard, large.domains["medical"].guard
    assert 1 <= len(small_guard._shared) < len(large_guard._shared)
    assert small_guard._shared.bytes <= 4 * 2**10 < large_guard._shared.bytes
    assert len(small.domains["medical"]._plain_steps) < len(large.domains["medical"]._plain_steps)


def test_the_processor_reports_what_each_domain_caches_against_its_budget(kg, tokenizer) -> None:
    """An operator reads the caches' fill on /metrics (through the engine's stats): the numbers follow the caches
    as they fill and as they evict, and never pass the budget reported beside them."""
    limits = CacheLimits(views=2, view_bytes=2 * 2**20, memo_bytes=64 * 2**10)
    processor = KGConstraintProcessor(tokenizer, vocab_size=tokenizer.get_vocab_size(), eos_token_ids=[0],
                                      kgs={"medical": kg}, limits=limits)
    domain = processor.domains["medical"]
    empty = processor.stats()
    assert empty["kg_constraint_views"] == {"medical": 0}
    assert empty["kg_constraint_budget_bytes"] == {"medical": 2 * 2**20 + 3 * 64 * 2**10}
    text = " Metformin, metoprolol and warfarin with aspirin for type 2 diabetes; ibuprofen later. "
    seen = []
    for i, allowed in enumerate(ALLOWED_SETS):
        processor.add_request(f"r{i}", _params(allowed), [1], [])
        _decode(processor, tokenizer, f"r{i}", text)
        processor.remove_request(f"r{i}")
        stats = processor.stats()
        seen.append(stats)
        assert stats["kg_constraint_views"]["medical"] == domain.cached_views <= 2
        assert stats["kg_constraint_view_bytes"]["medical"] == sum(v.approx_bytes for v in domain._views.values())
        memos = (domain.guard._shared, domain.guard._lazy_records, domain._plain_steps)
        assert stats["kg_constraint_memo_bytes"]["medical"] == sum(m.bytes for m in memos) > 0
        assert stats["kg_constraint_memo_bytes"]["medical"] <= 3 * 64 * 2**10
    assert seen[0]["kg_constraint_view_bytes"]["medical"] > 0
    assert max(s["kg_constraint_views"]["medical"] for s in seen) == 2   # the count bound evicted older views

