"""What the engine reports for the service's metrics and cost accounting: queue depth per intent priority
class (also across the engine-core process boundary), and each request's share of the engine's busy time."""

from __future__ import annotations

import asyncio
import functools
import time

import pytest

from engine.config import EngineConfig
from engine.core_client import EngineCoreClient
from engine.llm_engine import LLMEngine, load_tokenizer
from engine.processors.logits_process import LogitsProcessor
from engine.sampling_params import SamplingParams

GREEDY = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)


def test_queue_depth_per_priority_class(tiny_llama) -> None:
    engine = LLMEngine.from_pretrained(tiny_llama, EngineConfig(max_num_seqs=1))
    for request_id, intent in (("low", "code-completion"), ("mid", None), ("high", "medical-diagnosis"),
                               ("low2", "code-completion")):
        engine.add_request(request_id, "The patient was", GREEDY, intent=intent)
    before = engine.stats()
    assert before["num_requests_waiting_by_priority"] == {"0": 1, "1": 1, "2": 2}
    assert before["num_requests_running_by_priority"] == {"0": 0, "1": 0, "2": 0}
    engine.step()   # one seat: the most urgent class takes it
    after = engine.stats()
    assert after["num_requests_running_by_priority"] == {"0": 1, "1": 0, "2": 0}
    assert after["num_requests_waiting_by_priority"] == {"0": 0, "1": 1, "2": 2}
    assert sum(after["num_requests_waiting_by_priority"].values()) == after["num_requests_waiting"]


def test_engine_time_shares_add_up_to_the_busy_time(tiny_llama) -> None:
    engine = LLMEngine.from_pretrained(tiny_llama)
    prompts = {"short": "Hi", "long": "The patient was prescribed metformin twice daily after the visit, " * 3}
    for request_id, prompt in prompts.items():
        engine.add_request(request_id, prompt, GREEDY)
    busy, finals = 0.0, {}
    while engine.has_unfinished():
        started = time.perf_counter()
        outputs = engine.step_core()
        busy += time.perf_counter() - started
        finals.update({out.request_id: out.stats for out in outputs if out.finished})
    shares = {request_id: stats.engine_time_seconds for request_id, stats in finals.items()}
    assert all(share > 0 for share in shares.values())
    # the shares split the steps' time: together no more than the time spent in them, and most of it
    assert 0.7 * busy <= sum(shares.values()) <= busy
    # same decode steps, but the long prompt's prefill weighs more in the step both were prefilled in
    assert shares["long"] > shares["short"]


def test_priority_queue_depth_crosses_the_process_boundary(tiny_llama) -> None:
    client = EngineCoreClient(functools.partial(LLMEngine.from_pretrained, tiny_llama, EngineConfig(max_num_seqs=1)),
                              load_tokenizer(tiny_llama))
    slow = SamplingParams(temperature=0, max_tokens=240, ignore_eos=True)   # long enough to outlast a stats report

    async def run() -> tuple[dict, float]:
        await client.start()
        try:
            async def one(request_id: str, intent: str) -> float:
                async for out in client.generate("The patient was", slow, request_id=request_id, intent=intent):
                    if out.finished:
                        return out.stats.engine_time_seconds
                return 0.0

            tasks = [asyncio.create_task(one(f"r{i}", intent)) for i, intent in
                     enumerate(("fin-risk", "code-completion", "code-completion", "legal-advice"))]
            seen: dict = {}
            # the core reports twice a second while it works; on a loaded host the first report can come late,
            # so watch for as long as the requests run (three of them wait behind max_num_seqs=1 most of that time)
            deadline = time.monotonic() + 30
            while not all(task.done() for task in tasks) and time.monotonic() < deadline:
                waiting = client.stats().get("num_requests_waiting_by_priority") or {}
                if sum(waiting.values()) >= 2:
                    seen = dict(waiting)
                    break
                await asyncio.sleep(0.02)
            shares = await asyncio.gather(*tasks)
            return seen, min(shares)
        finally:
            await client.shutdown()

    seen, smallest_share = asyncio.run(run())
    assert seen and set(seen) == {"0", "1", "2"} and seen["2"] >= 1
    assert smallest_share > 0



class _Counting(LogitsProcessor):
    """Reports how many requests it has seen, and per kind: the gauges of a processor's own caches."""

    name = "counting"

    def __init__(self) -> None:
        self.seen: dict[str, float] = {}

    def validate_params(self, params) -> None:
        pass

    def add_request(self, request_id, params, prompt_token_ids, output_token_ids) -> bool:
        self.seen[request_id[:3]] = self.seen.get(request_id[:3], 0) + 1
        return False

    def remove_request(self, request_id) -> None:
        pass

    def apply(self, logits, request_ids) -> None:
        pass

    def accept_token(self, request_id, token_id) -> None:
        pass

    def stats(self) -> dict[str, float | dict[str, float]]:
        return {"counting_requests": float(sum(self.seen.values())), "counting_by_kind": dict(self.seen)}


def test_the_engine_reports_its_processors_gauges_beside_its_own(tiny_llama) -> None:
    from engine.core_proc import _scalar_stats

    engine = LLMEngine.from_pretrained(tiny_llama, logits_processors=[_Counting()])
    assert engine.stats()["counting_requests"] == 0
    engine.generate(["The patient was", "A bond is"], GREEDY)
    stats = engine.stats()
    assert stats["counting_requests"] == 2 and sum(stats["counting_by_kind"].values()) == 2
    assert "kv_cache_usage_perc" in stats   # the engine's own gauges stay
    crossing = _scalar_stats(stats)          # what the core process sends the API (maps of numbers pass)
    assert crossing["counting_requests"] == 2 and crossing["counting_by_kind"] == stats["counting_by_kind"]


class _Failing(_Counting):
    name = "failing"

    def stats(self) -> dict[str, float | dict[str, float]]:
        raise RuntimeError("a bug in a processor's gauges")


class _DuckTyped:
    """A processor that does not subclass LogitsProcessor and reports no gauges (as the engine allows)."""

    name = "duck"

    def prepare(self, params) -> None:
        pass

    def validate_params(self, params) -> None:
        pass

    def add_request(self, request_id, params, prompt_token_ids, output_token_ids) -> bool:
        return False

    def remove_request(self, request_id) -> None:
        pass


def test_a_processor_without_gauges_or_with_failing_ones_costs_its_gauges_not_the_engine(tiny_llama, caplog) -> None:
    # the core reports its stats as its heartbeat: a processor's broken stats() must not end the step loop
    engine = LLMEngine.from_pretrained(tiny_llama, logits_processors=[_DuckTyped(), _Failing(), _Counting()])
    engine.generate(["The patient was"], GREEDY)
    with caplog.at_level("ERROR", logger="engine"):
        stats = engine.stats()
    assert stats["counting_requests"] == 1 and "kv_cache_usage_perc" in stats
    assert not any(name.startswith(("failing", "duck")) for name in stats)
    assert "stats() failed" in caplog.text
    assert engine.generate(["A bond is"], GREEDY)[0].finished


pytestmark = pytest.mark.timeout(180)
