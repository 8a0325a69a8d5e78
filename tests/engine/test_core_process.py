"""The engine core in its own process: same tokens as in-process, deltas only, errors across the boundary,
and a core that is killed mid-request: requests in flight fail at once, the core restarts, nothing hangs."""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import time

import pytest

from engine.core_client import EngineCoreClient
from engine.errors import EngineDeadError
from engine.llm_engine import LLMEngine, load_tokenizer
from engine.sampling_params import InvalidRequestError, SamplingParams

pytestmark = pytest.mark.timeout(180)

GREEDY = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)


def _client(path, **kwargs) -> EngineCoreClient:
    return EngineCoreClient(functools.partial(LLMEngine.from_pretrained, path), load_tokenizer(path), **kwargs)


async def _collect(client, prompt, params, request_id, output_kind="delta"):
    outs = []
    async for out in client.generate(prompt, params, request_id=request_id, output_kind=output_kind):
        outs.append(out)
    return outs


def test_outputs_match_the_in_process_engine_and_arrive_as_deltas(tiny_llama):
    prompts = ["The patient was", "Revenue grew", "def add(a, b):"]
    in_process = LLMEngine.from_pretrained(tiny_llama)
    expected = in_process.generate(prompts, GREEDY)

    crossed: dict[str, list[int]] = {}   # request id -> new tokens in each output that crossed the boundary

    async def main():
        client = _client(tiny_llama)
        process = client._processor.process

        def recording(core_outputs, *args, **kwargs):
            processed = process(core_outputs, *args, **kwargs)
            for out in processed.outputs:
                crossed.setdefault(out.request_id, []).append(len(out.token_ids))
            return processed
        client._processor.process = recording
        await client.start()
        try:
            results = await asyncio.gather(*(_collect(client, p, GREEDY, f"r{i}") for i, p in enumerate(prompts)))
            cumulative = await _collect(client, prompts[0], GREEDY, "cumulative", output_kind="cumulative")
            for _ in range(100):   # the core reports its counters when it goes idle
                if client.stats().get("num_requests_finished") == 4:
                    break
                await asyncio.sleep(0.05)
            return results, cumulative, client.stats(), client.model_id, client.checkpoint_hash, client.dtype
        finally:
            await client.shutdown()

    results, cumulative, stats, model_id, checkpoint, dtype = asyncio.run(main())
    for index, (outs, want) in enumerate(zip(results, expected, strict=True)):
        # deltas cross the boundary, one step's new token each (not the whole answer so far) ...
        assert crossed[f"r{index}"] == [1] * 12
        # ... and reach the caller as deltas: each holds only what is new (the ones a busy consumer had not read
        # yet go out merged, so how many there are depends on the machine's load); together they are the answer
        assert [t for o in outs for t in o.token_ids] == want.token_ids
        assert "".join(o.text for o in outs) == want.text
        assert all(len(o.token_ids) < 12 for o in outs[:-1])
        assert outs[-1].finished and outs[-1].finish_reason == "length"
        assert outs[-1].stats.num_generated_tokens == 12 and outs[-1].stats.num_prompt_tokens > 0
    assert cumulative[-1].token_ids == expected[0].token_ids and cumulative[-1].text == expected[0].text
    assert stats["num_requests_finished"] == 4 and stats["num_requests_running"] == 0
    assert model_id == tiny_llama.name and len(checkpoint) == 64
    assert dtype == in_process.dtype   # the core's resolved dtype (dtype=auto) reaches the audit records' side


def test_shutdown_removes_the_socket_folder_and_a_later_start_makes_it_again(tiny_llama):
    """One folder per server run used to stay in /tmp for good (only the client's `__del__` removed it)."""
    async def main():
        client = _client(tiny_llama)
        folder = client._dir
        for _ in range(2):   # a client shut down can start again
            await client.start()
            try:
                assert os.path.isdir(folder)
                outs = await _collect(client, "The patient was", GREEDY, "r")
            finally:
                await client.shutdown()
            assert outs[-1].finished and not os.path.exists(folder)

    asyncio.run(main())


def test_prompts_tokenised_on_a_thread_or_inline_send_the_same_tokens(tiny_llama, monkeypatch):
    """Short prompts are tokenised on the event loop, long ones on a thread: the same ids either way."""
    import engine.core_client as core_client

    prompt = "The patient was given"
    expected = LLMEngine.from_pretrained(tiny_llama).generate([prompt], GREEDY)[0]

    async def main():
        client = _client(tiny_llama)
        await client.start()
        try:
            results = []
            for limit in (len(prompt), len(prompt) - 1):   # inline, then on a thread
                monkeypatch.setattr(core_client, "INLINE_TOKENIZE_CHARS", limit)
                results.append(await _collect(client, prompt, GREEDY, f"limit{limit}"))
            return results
        finally:
            await client.shutdown()

    for outs in asyncio.run(main()):
        assert [t for o in outs for t in o.token_ids] == expected.token_ids
        assert outs[-1].stats.num_prompt_tokens == len(expected.prompt_token_ids)


def test_a_consumer_that_falls_behind_gets_the_queued_deltas_merged(tiny_llama):
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True, logprobs=1)
    expected = LLMEngine.from_pretrained(tiny_llama).generate(["The patient was"], params)[0]

    async def main():
        client = _client(tiny_llama)
        await client.start()
        try:
            outs = []
            async for out in client.generate("The patient was", params, request_id="slow", output_kind="delta"):
                outs.append(out)
                await asyncio.sleep(0.05)   # busy elsewhere while the core keeps stepping
            return outs
        finally:
            await client.shutdown()

    outs = asyncio.run(main())
    assert len(outs) < 24 and any(len(o.token_ids) > 1 for o in outs)   # fewer wake-ups than tokens
    assert [t for o in outs for t in o.token_ids] == [t for o in outs for t in o.new_token_ids] == expected.token_ids
    assert "".join(o.text for o in outs) == "".join(o.new_text for o in outs) == expected.text
    assert [lp.token_id for o in outs for lp in o.logprobs] == expected.token_ids
    assert outs[-1].finished and outs[-1].stats.num_generated_tokens == 24


def test_refusals_cross_the_boundary_and_stop_strings_free_the_core(tiny_llama):
    sync = LLMEngine.from_pretrained(tiny_llama)
    free_run = sync.generate(["The patient was"], SamplingParams(temperature=0, max_tokens=30, ignore_eos=True))[0]
    stop = free_run.text[5:8]
    assert stop and stop in free_run.text

    async def main():
        client = _client(tiny_llama)
        await client.start()
        try:
            with pytest.raises(InvalidRequestError, match="vocabulary"):   # refused by the core, not here
                await _collect(client, [10**6], GREEDY, "bad-ids")
            with pytest.raises(InvalidRequestError, match="temperature"):
                await _collect(client, "hi", SamplingParams(temperature=-1), "bad-temp")
            params = SamplingParams(temperature=0, max_tokens=30, ignore_eos=True, stop=[stop])
            outs = await _collect(client, "The patient was", params, "stopped")
            for _ in range(100):
                if client.stats().get("num_requests_running", 1) == 0:
                    break
                await asyncio.sleep(0.05)
            return outs, client.stats()
        finally:
            await client.shutdown()

    outs, stats = asyncio.run(main())
    assert outs[-1].finish_reason == "stop" and outs[-1].stop_reason == stop
    assert "".join(o.text for o in outs) == free_run.text[: free_run.text.index(stop)]
    assert stats["num_requests_running"] == 0 and stats["kv_cache_usage_perc"] == 0.0
    assert stats["finish_reasons"].get("stop") == 1


def test_a_killed_core_fails_requests_in_flight_and_restarts(tiny_llama):
    long = SamplingParams(temperature=0, max_tokens=200, ignore_eos=True)

    async def main():
        client = _client(tiny_llama, restart_backoff_s=0.2)
        await client.start()
        try:
            first_pid = client.pid
            started = asyncio.Event()

            async def in_flight(i):
                async for _ in client.generate("The patient was", long, request_id=f"long-{i}", output_kind="delta"):
                    started.set()

            tasks = [asyncio.create_task(in_flight(i)) for i in range(3)]
            await asyncio.wait_for(started.wait(), 30)
            os.kill(first_pid, signal.SIGKILL)
            killed_at = time.monotonic()
            results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)
            failed_after = time.monotonic() - killed_at
            with pytest.raises(EngineDeadError, match="restarting"):   # at once, while the new core starts
                await _collect(client, "hello", GREEDY, "during-restart")
            for _ in range(1200):
                if client.available:
                    break
                await asyncio.sleep(0.1)
            after = await _collect(client, "The patient was", GREEDY, "after-restart")
            return results, failed_after, first_pid, client.pid, client.restarts, after
        finally:
            await client.shutdown()

    results, failed_after, first_pid, second_pid, restarts, after = asyncio.run(main())
    assert all(isinstance(r, EngineDeadError) for r in results), results
    assert "exit code -9" in str(results[0])
    assert failed_after < 5
    assert restarts == 1 and second_pid != first_pid
    assert after[-1].finished and sum(len(o.token_ids) for o in after) == 12


def test_a_core_that_cannot_start_says_why(tiny_llama, tmp_path):
    async def main():
        client = EngineCoreClient(functools.partial(LLMEngine.from_pretrained, tmp_path / "missing"),
                                  load_tokenizer(tiny_llama))
        try:
            with pytest.raises(EngineDeadError, match="checkpoint folder not found"):
                await client.start()
        finally:
            await client.shutdown()

    asyncio.run(main())


def _serve_shared_core(path, address) -> None:
    """A core on its own, as `auditor engine-core` runs one (module level: the spawned process imports it)."""
    from engine.core_proc import EngineCoreProc

    EngineCoreProc(LLMEngine.from_pretrained(path), address).run()


def test_two_api_clients_share_a_standalone_core_and_survive_its_restart(tiny_llama, tmp_path):
    import multiprocessing

    address = f"ipc://{tmp_path}/core"
    context = multiprocessing.get_context("spawn")
    expected = LLMEngine.from_pretrained(tiny_llama).generate(["The patient was", "Revenue grew"], GREEDY)
    long = SamplingParams(temperature=0, max_tokens=200, ignore_eos=True)

    async def main():
        core = context.Process(target=_serve_shared_core, args=(tiny_llama, address), daemon=True)
        core.start()
        clients = [EngineCoreClient.connect(address, load_tokenizer(tiny_llama), heartbeat_timeout_s=2.0)
                   for _ in range(2)]
        try:
            await asyncio.gather(*(c.start() for c in clients))
            both = await asyncio.gather(_collect(clients[0], "The patient was", GREEDY, "a"),
                                        _collect(clients[1], "Revenue grew", GREEDY, "b"))
            started = asyncio.Event()

            async def in_flight(client, name):
                async for _ in client.generate("The patient was", long, request_id=name, output_kind="delta"):
                    started.set()

            tasks = [asyncio.create_task(in_flight(c, f"long-{i}")) for i, c in enumerate(clients)]
            await asyncio.wait_for(started.wait(), 30)
            os.kill(core.pid, signal.SIGKILL)
            failures = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 15)
            unavailable = [not c.available for c in clients]
            second = context.Process(target=_serve_shared_core, args=(tiny_llama, address), daemon=True)
            second.start()
            for _ in range(600):
                if all(c.available for c in clients):
                    break
                await asyncio.sleep(0.1)
            again = await asyncio.gather(*(_collect(c, "Revenue grew", GREEDY, f"again-{i}")
                                           for i, c in enumerate(clients)))
            second.kill()
            return both, failures, unavailable, again, [c.restarts for c in clients]
        finally:
            for client in clients:
                await client.shutdown()   # leaves a shared core running: not ours to stop
            core.kill()

    both, failures, unavailable, again, restarts = asyncio.run(main())
    assert [t for o in both[0] for t in o.token_ids] == expected[0].token_ids
    assert [t for o in both[1] for t in o.token_ids] == expected[1].token_ids
    assert all(isinstance(f, EngineDeadError) for f in failures), failures
    assert unavailable == [True, True] and restarts == [1, 1]
    assert all([t for o in outs for t in o.token_ids] == expected[1].token_ids for outs in again)


class _FailsToPrepare:
    """A logits processor with a bug in `prepare` for requests that name it (module level: the core pickles it)."""

    name = "fails_to_prepare"

    def prepare(self, params):
        if self.name in params.extra_args:
            raise RuntimeError("a bug in a processor")

    def validate_params(self, params):
        pass

    def add_request(self, request_id, params, prompt_token_ids, output_token_ids):
        return False

    def remove_request(self, request_id):
        pass


def _engine_with_a_buggy_processor(path):
    return LLMEngine.from_pretrained(path, logits_processors=[_FailsToPrepare()])


def test_a_bug_preparing_one_request_fails_that_request_not_the_core(tiny_llama):
    async def main():
        client = EngineCoreClient(functools.partial(_engine_with_a_buggy_processor, tiny_llama),
                                  load_tokenizer(tiny_llama))
        await client.start()
        try:
            with pytest.raises(RuntimeError, match="a bug in a processor"):
                await _collect(client, "hi", SamplingParams(extra_args={"fails_to_prepare": {}}), "buggy")
            return await _collect(client, "The patient was", GREEDY, "fine"), client.available
        finally:
            await client.shutdown()

    outs, available = asyncio.run(main())
    assert available and outs[-1].finished and sum(len(o.token_ids) for o in outs) == 12


class _SlowToPrepare:
    """Prepares requests that name it slowly (`seconds`), and notes in `log` every request the step loop
    admits (module level: the core pickles it)."""

    name = "slow_to_prepare"

    def prepare(self, params):
        if self.name in params.extra_args:
            time.sleep(params.extra_args[self.name]["seconds"])

    def validate_params(self, params):
        pass

    def add_request(self, request_id, params, prompt_token_ids, output_token_ids):
        with open(params.extra_args[self.name]["log"], "a") as log:
            log.write(request_id + "\n")
        return False

    def remove_request(self, request_id):
        pass


def _engine_with_a_slow_processor(path):
    return LLMEngine.from_pretrained(path, logits_processors=[_SlowToPrepare()])


def _slow_client(path) -> EngineCoreClient:
    return EngineCoreClient(functools.partial(_engine_with_a_slow_processor, path), load_tokenizer(path))


def _slow_params(log, seconds: float, max_tokens: int = 12) -> SamplingParams:
    return SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True,
                          extra_args={"slow_to_prepare": {"seconds": seconds, "log": str(log)}})


def test_a_slow_preparation_holds_up_only_its_own_request(tiny_llama, tmp_path):
    log = tmp_path / "admitted.log"

    async def timed(client, params, request_id):
        outs = await _collect(client, "The patient was", params, request_id)
        return time.monotonic(), outs

    async def main():
        client = _slow_client(tiny_llama)
        await client.start()
        try:
            slow = asyncio.create_task(timed(client, _slow_params(log, 2.0), "slow"))
            await asyncio.sleep(0.2)    # the slow one is being prepared
            fast_done, fast = await timed(client, _slow_params(log, 0.0), "fast")
            slow_done, slow_outs = await slow
            return fast_done, fast, slow_done, slow_outs
        finally:
            await client.shutdown()

    fast_done, fast, slow_done, slow_outs = asyncio.run(main())
    assert fast[-1].finished and slow_outs[-1].finished
    assert log.read_text().split() == ["fast", "slow"]      # admitted while the slow one was still preparing
    assert slow_done - fast_done > 1.0


def test_an_abort_during_preparation_keeps_the_request_out_of_the_engine(tiny_llama, tmp_path):
    log = tmp_path / "admitted.log"

    async def main():
        client = _slow_client(tiny_llama)
        await client.start()
        try:
            slow = asyncio.create_task(_collect(client, "The patient was", _slow_params(log, 1.0, 64), "gone"))
            await asyncio.sleep(0.3)    # in preparation: the client leaves, and its abort reaches the core first
            slow.cancel()
            with pytest.raises(asyncio.CancelledError):
                await slow
            await asyncio.sleep(1.2)    # its preparation has ended by now
            after = await _collect(client, "The patient was", _slow_params(log, 0.0), "after")
            return after, client.available
        finally:
            await client.shutdown()

    after, available = asyncio.run(main())
    assert available and after[-1].finished
    assert log.read_text().split() == ["after"]             # the aborted one never reached the step loop
