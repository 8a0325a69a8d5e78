"""AsyncLLMEngine: streaming, early exit aborts, errors before compute, a responsive event loop."""

from __future__ import annotations

import asyncio

import pytest

from engine.async_engine import AsyncLLMEngine
from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.sampling_params import InvalidRequestError, SamplingParams

PARAMS = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)


def test_concurrent_streams_match_the_sync_engine(tiny_llama):
    prompts = ["The patient was", "Revenue grew", "def add(a, b):"]
    expected = [o.token_ids for o in LLMEngine.from_pretrained(tiny_llama).generate(prompts, PARAMS)]

    async def main():
        engine = AsyncLLMEngine.from_pretrained(tiny_llama)
        await engine.start()
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.001)

        async def consume(i):
            chunks, tokens, last = [], [], None
            async for out in engine.generate(prompts[i], PARAMS, request_id=f"r{i}"):
                chunks.append(out.new_text)
                tokens.extend(out.new_token_ids)
                last = out
            assert "".join(chunks) == last.text and tokens == last.token_ids
            return last

        tick_task = asyncio.create_task(ticker())
        results = await asyncio.gather(*(consume(i) for i in range(3)))
        tick_task.cancel()
        assert engine.model_id == tiny_llama.name and len(engine.checkpoint_hash) == 64
        assert engine.stats()["num_requests_finished"] == 3
        await engine.shutdown()
        return results, ticks

    results, ticks = asyncio.run(main())
    assert [r.token_ids for r in results] == expected
    assert all(r.finished and r.finish_reason == "length" for r in results)
    assert ticks > 3  # the loop kept running while steps computed


def test_leaving_the_iterator_aborts_and_frees_blocks(tiny_llama):
    async def main():
        engine = AsyncLLMEngine.from_pretrained(tiny_llama, EngineConfig(block_size=4))
        await engine.start()
        stream = engine.generate("The patient was", SamplingParams(max_tokens=200, ignore_eos=True), request_id="x")
        seen = 0
        async for _ in stream:
            seen += 1
            if seen == 2:
                break
        await stream.aclose()
        for _ in range(100):
            if engine.stats()["num_requests_running"] == 0:
                break
            await asyncio.sleep(0.01)
        stats = engine.stats()
        await engine.shutdown()
        return stats

    stats = asyncio.run(main())
    assert stats["num_requests_running"] == 0 and stats["num_requests_waiting"] == 0
    assert stats["kv_cache_usage_perc"] == 0.0
    assert stats["num_requests_aborted"] == 1


def test_bad_request_raises_before_compute(tiny_llama):
    async def main():
        engine = AsyncLLMEngine.from_pretrained(tiny_llama)
        with pytest.raises(InvalidRequestError, match="temperature"):
            async for _ in engine.generate("hi", SamplingParams(temperature=-1), request_id="bad"):
                pass
        stats = engine.stats()
        await engine.shutdown()
        return stats

    assert asyncio.run(main())["num_requests_finished"] == 0


def test_restart_after_shutdown(tiny_llama):
    async def main():
        engine = AsyncLLMEngine.from_pretrained(tiny_llama)
        results = []
        for round_ in range(2):
            await engine.start()
            async for out in engine.generate("hello", PARAMS, request_id=f"r{round_}"):
                last = out
            results.append(last.token_ids)
            await engine.shutdown()
        return results

    first, second = asyncio.run(main())
    assert first == second and len(first) == 12
