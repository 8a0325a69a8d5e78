"""Scheduler: priority classes from intents, aging against starvation, preemption, abort."""

from __future__ import annotations

from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from engine.scheduler import Scheduler
from engine.sequence import Sequence, SequenceStatus


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _first_token_order(engine: LLMEngine) -> list[str]:
    order: list[str] = []
    while engine.has_unfinished():
        for out in engine.step():
            if out.token_ids and out.request_id not in order:
                order.append(out.request_id)
    return order


def test_intents_map_to_priority_classes_and_urgent_runs_first(tiny_llama):
    config = EngineConfig(
        max_num_seqs=1, aging_seconds=1e9,
        intent_priorities={"medical-diagnosis": 0, "code-completion": 5}, default_priority=2,
    )
    engine = LLMEngine.from_pretrained(tiny_llama, config)
    params = SamplingParams(max_tokens=2)
    engine.add_request("low", "hello", params, intent="code-completion")
    engine.add_request("unknown", "hello", params, intent="astrology")
    engine.add_request("none", "hello", params)
    engine.add_request("urgent", "hello", params, intent="medical-diagnosis")
    assert engine.scheduler.priority_of("astrology") == engine.scheduler.priority_of(None) == 2
    # unknown intent and no intent share the default class; within a class, arrival order
    assert _first_token_order(engine) == ["urgent", "unknown", "none", "low"]


def _scheduler(num_blocks: int, aging_seconds: float, max_num_seqs: int = 1) -> tuple[Scheduler, FakeClock]:
    clock = FakeClock()
    config = EngineConfig(block_size=4, max_num_seqs=max_num_seqs, aging_seconds=aging_seconds)
    return Scheduler(config, BlockManager(num_blocks, 4, True), clock), clock


def _seq(request_id: str, priority: int, length: int = 6) -> Sequence:
    return Sequence(request_id, list(range(1, length + 1)), SamplingParams(), priority, 0.0)


def _rounds_until_scheduled(aging_seconds: float, target: str, rounds: int) -> int | None:
    """A steady stream of urgent requests; one low-priority request waits. When does it run?"""
    scheduler, clock = _scheduler(num_blocks=16, aging_seconds=aging_seconds)
    scheduler.add(_seq("background", priority=3))
    for i in range(rounds):
        scheduler.add(_seq(f"urgent-{i}", priority=0))
        batch = scheduler.schedule()
        if any(s.request_id == target for s in batch.seqs):
            return i
        for seq in batch.seqs:  # each runs to completion within its round
            scheduler.finish(seq)
        clock.now += 1.0
    return None


def test_aging_prevents_starvation():
    assert _rounds_until_scheduled(aging_seconds=1e9, target="background", rounds=30) is None
    waited = _rounds_until_scheduled(aging_seconds=1.0, target="background", rounds=30)
    assert waited is not None and waited <= 4


def test_preemption_picks_the_least_urgent_newest_sequence():
    scheduler, clock = _scheduler(num_blocks=6, aging_seconds=1e9, max_num_seqs=8)
    old_low, new_low, high = _seq("old-low", 2, 8), _seq("new-low", 2, 8), _seq("high", 0, 8)
    for seq in (old_low, new_low, high):
        scheduler.add(seq)
        clock.now += 1.0
    batch = scheduler.schedule()
    assert [s.request_id for s in batch.seqs] == ["high", "old-low", "new-low"]
    for seq in batch.seqs:  # prompts computed; each sampled a token and needs a 9th slot = 3rd block
        seq.num_computed_tokens = seq.num_tokens
        seq.output_token_ids.append(1)
    batch = scheduler.schedule()
    assert [s.request_id for s in batch.preempted] == ["new-low"]
    assert new_low.status is SequenceStatus.WAITING and new_low.block_table == []
    assert new_low.stats.num_preemptions == 1 and scheduler.num_preemptions == 1
    assert {s.request_id for s in batch.seqs} == {"high", "old-low"}


def test_abort_frees_blocks_at_once(tiny_llama):
    engine = LLMEngine.from_pretrained(tiny_llama, EngineConfig(block_size=4, num_kv_blocks=40))
    free_before = engine.block_manager.num_free_blocks
    engine.add_request("a", list(range(10, 40)), SamplingParams(max_tokens=50))
    engine.add_request("b", list(range(50, 70)), SamplingParams(max_tokens=50))
    engine.step()
    engine.step()
    held_by_a = len(engine.requests["a"].block_table)
    assert held_by_a > 0
    used = free_before - engine.block_manager.num_free_blocks
    engine.abort("a")
    assert free_before - engine.block_manager.num_free_blocks == used - held_by_a
    assert engine.stats()["num_requests_running"] == 1
    engine.abort("b")
    engine.abort("never-existed")  # ignored
    assert engine.block_manager.num_free_blocks == free_before
    assert not engine.has_unfinished()
    assert engine.stats()["kv_cache_usage_perc"] == 0.0
    assert engine.step() == []


def test_abort_of_a_waiting_request(tiny_llama):
    engine = LLMEngine.from_pretrained(tiny_llama, EngineConfig(max_num_seqs=1))
    engine.add_request("running", "hello", SamplingParams(max_tokens=4))
    engine.add_request("queued", "hello", SamplingParams(max_tokens=4))
    engine.step()
    assert engine.stats()["num_requests_waiting"] == 1
    engine.abort("queued")
    assert engine.stats()["num_requests_waiting"] == 0
    outputs = engine.generate(["hi"], SamplingParams(max_tokens=2))
    assert outputs[0].finished


def test_chunked_prefill_respects_the_token_budget_with_decodes_first(tiny_llama):
    engine = LLMEngine.from_pretrained(tiny_llama, EngineConfig(max_num_batched_tokens=8, block_size=4))
    engine.add_request("short", [5, 6, 7], SamplingParams(max_tokens=20, ignore_eos=True))
    engine.step()  # short prefilled, now decoding
    engine.add_request("long", list(range(10, 40)), SamplingParams(max_tokens=2, ignore_eos=True))
    batch = engine.scheduler.schedule()
    assert [s.request_id for s in batch.seqs] == ["short", "long"]
    assert batch.num_new_tokens == [1, 7]
    assert batch.num_decodes == 1
