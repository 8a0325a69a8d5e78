"""Prefix caching: exact cached-token counts, tenant salts, identical outputs, LRU eviction."""

from __future__ import annotations

import pytest

from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from engine.sequence import Sequence

BLOCK = 4
CACHED_PROMPT = list(range(10, 50))  # 40 tokens = 10 full blocks
ONE_TOKEN = SamplingParams(temperature=0, max_tokens=1)


@pytest.fixture()
def engine(tiny_llama) -> LLMEngine:
    return LLMEngine.from_pretrained(tiny_llama, EngineConfig(block_size=BLOCK, num_kv_blocks=64))


def _run(engine: LLMEngine, request_id: str, prompt: list[int], salt: str | None = None, params=ONE_TOKEN):
    engine.add_request(request_id, prompt, params, cache_salt=salt)
    final = None
    while engine.has_unfinished():
        for out in engine.step():
            if out.request_id == request_id and out.finished:
                final = out
    assert final is not None
    return final


@pytest.mark.parametrize(("matched", "length"), [(0, 20), (3, 20), (4, 20), (13, 20), (20, 20), (16, 16), (17, 30), (40, 40), (40, 45)])
def test_cached_tokens_follow_the_block_formula(engine, matched, length):
    _run(engine, "warm", CACHED_PROMPT)
    # diverge right after `matched` tokens, with ids the cached prompt never uses
    prompt = CACHED_PROMPT[:matched] + list(range(300, 300 + length - matched))
    out = _run(engine, "probe", prompt)
    assert out.stats.num_cached_tokens == BLOCK * (min(matched, length - 1) // BLOCK)
    stats = engine.stats()
    assert stats["prefix_cache_hits"] == out.stats.num_cached_tokens
    assert stats["prefix_cache_queries"] == len(CACHED_PROMPT) + length


def test_salted_requests_never_share_blocks(engine):
    _run(engine, "a", CACHED_PROMPT, salt="tenant-a")
    assert _run(engine, "b", CACHED_PROMPT, salt="tenant-b").stats.num_cached_tokens == 0
    assert _run(engine, "plain", CACHED_PROMPT).stats.num_cached_tokens == 0
    assert _run(engine, "a2", CACHED_PROMPT, salt="tenant-a").stats.num_cached_tokens == 36


def test_concurrent_salted_requests_hold_disjoint_blocks(engine):
    engine.add_request("a", CACHED_PROMPT, SamplingParams(max_tokens=4), cache_salt="x")
    engine.step()
    engine.add_request("b", CACHED_PROMPT, SamplingParams(max_tokens=4), cache_salt="y")
    engine.step()
    a, b = engine.requests["a"], engine.requests["b"]
    assert a.block_table and b.block_table
    assert not set(a.block_table) & set(b.block_table)


def test_outputs_identical_with_cache_on_and_off(tiny_llama):
    prompts = [CACHED_PROMPT + [60 + i, 70 + i, 80 + i] for i in range(4)] + [CACHED_PROMPT[:23]]
    params = [SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)] * 3 + [
        SamplingParams(temperature=0.9, top_p=0.9, seed=7, max_tokens=12, ignore_eos=True)] * 2
    results = []
    for caching in (True, False):
        engine = LLMEngine.from_pretrained(
            # fp32: in bf16 a prefill chunk and a cached block round differently, so outputs may part
            tiny_llama, EngineConfig(block_size=BLOCK, enable_prefix_caching=caching, max_num_batched_tokens=16,
                                     dtype="float32")
        )
        engine.generate(prompts[:1], params[:1])  # warm the cache (when on)
        results.append([o.token_ids for o in engine.generate(prompts, params)])
        assert (engine.stats()["prefix_cache_hits"] > 0) == caching
    assert results[0] == results[1]


def _seq(tokens: list[int], request_id: str) -> Sequence:
    return Sequence(request_id, tokens, ONE_TOKEN, priority=1, arrival_time=0.0)


def _compute_all(manager: BlockManager, seq: Sequence) -> None:
    assert manager.allocate_prompt(seq, seq.num_tokens)
    seq.num_computed_tokens = seq.num_tokens
    manager.register_full_blocks(seq)


def test_lru_evicts_the_least_recently_freed_blocks_first():
    manager = BlockManager(num_blocks=6, block_size=BLOCK, enable_prefix_caching=True)
    first, second = _seq(list(range(100, 109)), "first"), _seq(list(range(200, 209)), "second")
    for seq in (first, second):   # 3 blocks each (2 full + 1 partial), freed in this order
        _compute_all(manager, seq)
        manager.free(seq)
    assert len(manager.find_cached_prefix(_seq(list(range(100, 109)), "q"))) == 2
    newcomer = _seq(list(range(300, 310)), "new")  # needs 3 blocks: takes all of `first`'s
    assert manager.allocate_prompt(newcomer, newcomer.num_tokens)
    assert manager.find_cached_prefix(_seq(list(range(100, 109)), "q1")) == []
    assert len(manager.find_cached_prefix(_seq(list(range(200, 209)), "q2"))) == 2


def test_a_hit_on_a_free_cached_block_revives_it():
    manager = BlockManager(num_blocks=4, block_size=BLOCK, enable_prefix_caching=True)
    seq = _seq(list(range(100, 109)), "a")
    _compute_all(manager, seq)
    manager.free(seq)
    assert manager.num_free_blocks == 4
    again = _seq(list(range(100, 109)), "b")
    assert manager.allocate_prompt(again, 9)
    assert again.num_computed_tokens == 8
    assert [manager.blocks[b].ref_count for b in again.block_table] == [1, 1, 1]
    assert manager.num_free_blocks == 1
