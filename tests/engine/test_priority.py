"""The API process yields the CPU to its engine core: its threads lowered, the core (first or restarted) not.

Each test runs in a fresh interpreter: a process cannot raise its threads' priority again, and pytest's must stay."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from engine.priority import SUPPORTED

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(not SUPPORTED, reason="thread priorities and SCHED_BATCH are Linux's")]


def _run(script: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(script), *args], capture_output=True, text=True,
                         timeout=100, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_threads_are_lowered_once_and_what_the_launch_thread_starts_is_not():
    seen = _run("""
        import json, os, subprocess, threading
        from engine.priority import LaunchThread, lower_process_priority

        def state(who):
            return [os.getpriority(os.PRIO_PROCESS, who), os.sched_getscheduler(who)]

        launcher = LaunchThread("launcher")
        base = os.getpriority(os.PRIO_PROCESS, 0)
        changed = lower_process_priority(5, keep={launcher.native_id})
        lower_process_priority(5, keep={launcher.native_id})   # twice: still 5 below, not 10
        later = {}
        thread = threading.Thread(target=lambda: later.update(state=state(threading.get_native_id())))
        thread.start(); thread.join()
        from_launcher = launcher.run(lambda: subprocess.Popen(["sleep", "5"]))
        from_main = subprocess.Popen(["sleep", "5"])
        result = {"base": base, "changed": changed, "main": state(0), "launcher": state(launcher.native_id),
                  "later_thread": later["state"], "child_of_launcher": state(from_launcher.pid),
                  "child_of_main": state(from_main.pid)}
        for child in (from_launcher, from_main):
            child.kill()
        print(json.dumps(result))
    """)
    base, batch, normal = seen["base"], os.SCHED_BATCH, os.SCHED_OTHER
    lowered = [min(19, base + 5), batch]
    assert seen["changed"] >= 1
    assert seen["main"] == lowered and seen["later_thread"] == lowered and seen["child_of_main"] == lowered
    assert seen["launcher"] == [base, normal] and seen["child_of_launcher"] == [base, normal]


def test_serve_lowers_the_api_and_a_restarted_core_starts_at_the_first_priority(tiny_llama):
    seen = _run("""
        import asyncio, functools, json, os, sys
        from engine.core_client import EngineCoreClient
        from engine.llm_engine import LLMEngine, load_tokenizer
        from tests.engine.core_restart import kill_and_await_restart

        path = sys.argv[1]
        def state(who):
            return [os.getpriority(os.PRIO_PROCESS, who), os.sched_getscheduler(who)]

        async def main():
            base = os.getpriority(os.PRIO_PROCESS, 0)
            client = EngineCoreClient(functools.partial(LLMEngine.from_pretrained, path), load_tokenizer(path),
                                      restart_backoff_s=0.1)
            client.launch()
            client.yield_cpu(5)      # as `auditor serve` does once the core is launched
            await client.start()
            first = client.pid
            result = {"base": base, "api": state(0), "first_core": state(first)}
            await kill_and_await_restart(client)
            result["restarted_core"] = state(client.pid)
            result["external"] = EngineCoreClient.connect("ipc:///nowhere", load_tokenizer(path)).yield_cpu(5)
            await client.shutdown()
            print(json.dumps(result))

        asyncio.run(main())
    """, str(tiny_llama))
    base = seen["base"]
    assert seen["api"] == [min(19, base + 5), os.SCHED_BATCH]
    assert seen["first_core"] == [base, os.SCHED_OTHER] and seen["restarted_core"] == [base, os.SCHED_OTHER]
    assert seen["external"] == 0   # a core this process did not start: nothing to yield to
