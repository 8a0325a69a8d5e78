"""The engine core on CPUs of its own and the API process on the others (`engine.affinity`): how the CPUs are
split, and that a core, first or restarted, runs on its CPUs with every thread while the API's threads stay off
them. The process tests run in a fresh interpreter: pytest's own process must keep every CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from engine.affinity import SUPPORTED, CpuSplit, check_setting, parse_cpu_list, split_cpus


@pytest.mark.parametrize(("text", "cpus"), [("0-3,6", {0, 1, 2, 3, 6}), ("5", {5}), (" 1 , 3", {1, 3}),
                                            ("2-2", {2}), ("0-1,1-2", {0, 1, 2})])
def test_cpu_lists_read_as_linux_writes_them(text: str, cpus: set[int]) -> None:
    assert parse_cpu_list(text) == cpus


@pytest.mark.parametrize("text", ["", "a", "1-", "-2", "3-1", "1,,2", "0x1", "1.5", "auto-2"])
def test_an_unreadable_cpu_list_is_refused_naming_the_bad_part(text: str) -> None:
    with pytest.raises(ValueError, match="engine_cpus"):
        parse_cpu_list(text)
    with pytest.raises(ValueError, match="engine_cpus"):
        check_setting(text)


@pytest.mark.skipif(not SUPPORTED, reason="per-thread CPU affinity is Linux's")
@pytest.mark.parametrize(("setting", "allowed", "threads", "core", "api"), [
    ("auto", {0, 1}, None, {1}, {0}),                  # two CPUs: one each
    ("auto", set(range(8)), None, set(range(1, 8)), {0}),   # all but one for the core
    ("auto", set(range(8)), 3, {5, 6, 7}, set(range(5))),   # as many as its torch threads
    ("auto", {2, 5, 9}, None, {5, 9}, {2}),            # whatever CPUs the process was given, not 0..n
    ("1", {0, 1}, None, {1}, {0}),
    ("0,2-3", set(range(4)), 8, {0, 2, 3}, {1}),       # a list is taken as given, whatever the threads
])
def test_the_core_gets_its_cpus_and_the_api_the_rest(setting, allowed, threads, core, api) -> None:
    assert split_cpus(setting, allowed, engine_threads=threads) == CpuSplit(frozenset(core), frozenset(api))


@pytest.mark.parametrize(("setting", "allowed", "threads"), [
    ("off", {0, 1, 2, 3}, None),
    ("auto", {0}, None),            # one CPU: nothing to split
    ("auto", {0, 1}, 2),            # the core's threads want every CPU: pinning would only crowd them
    ("auto", {0, 1, 2, 3}, 9),
])
def test_no_split_where_it_is_off_or_cannot_help(setting, allowed, threads) -> None:
    assert split_cpus(setting, allowed, engine_threads=threads) is None


@pytest.mark.skipif(not SUPPORTED, reason="per-thread CPU affinity is Linux's")
def test_a_list_that_cannot_be_used_is_refused() -> None:
    with pytest.raises(ValueError, match="CPUs 4,7 are not among"):
        split_cpus("1,4,7", {0, 1, 2, 3}, engine_threads=None)
    with pytest.raises(ValueError, match="leaves no CPU for the API process"):
        split_cpus("0-3", {0, 1, 2, 3}, engine_threads=None)


def _run(script: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args], capture_output=True, text=True,
                         timeout=150, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.timeout(180)
@pytest.mark.skipif(not SUPPORTED or len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs and Linux affinity")
def test_the_core_first_and_restarted_runs_on_its_cpus_and_the_api_stays_off_them(tiny_llama) -> None:
    allowed = sorted(os.sched_getaffinity(0))
    seen = _run("""
        import asyncio, functools, glob, json, os, sys
        from engine.affinity import CpuSplit
        from engine.core_client import EngineCoreClient
        from engine.llm_engine import LLMEngine, load_tokenizer
        from tests.engine.core_restart import kill_and_await_restart

        path, core, api = sys.argv[1], frozenset({int(sys.argv[2])}), frozenset({int(sys.argv[3])})
        def threads(pid):
            return sorted({tuple(sorted(os.sched_getaffinity(int(t.rsplit("/", 1)[1]))))
                           for t in glob.glob(f"/proc/{pid}/task/*")})

        async def main():
            client = EngineCoreClient(functools.partial(LLMEngine.from_pretrained, path), load_tokenizer(path),
                                      restart_backoff_s=0.1, cpus=CpuSplit(core, api))
            client.launch()
            client.yield_cpu(5)      # as `auditor serve` does once the core is launched
            await client.start()
            first = client.pid
            result = {"api": threads(os.getpid()), "first_core": threads(first), "reported": client.core_cpus}
            out = [o async for o in client.generate("hello", request_id="r1")]
            result["served"] = out[-1].finished
            await kill_and_await_restart(client)
            result["restarted_core"] = threads(client.pid)
            result["api_after_restart"] = threads(os.getpid())
            await client.shutdown()
            print(json.dumps(result))

        asyncio.run(main())
    """, str(tiny_llama), str(allowed[-1]), str(allowed[0]))
    assert seen["api"] == [[allowed[0]]] and seen["api_after_restart"] == [[allowed[0]]]
    assert seen["first_core"] == [[allowed[-1]]] and seen["restarted_core"] == [[allowed[-1]]]
    assert seen["reported"] == [allowed[-1]] and seen["served"] is True
