"""The engine core's malloc: jemalloc preloaded into the core process where asked for (and only there), the same
tokens on either malloc, the choice resolved from the setting, and the environment left as it was."""

from __future__ import annotations

import asyncio
import functools
import os

import pytest

from engine import allocator
from engine.allocator import AllocatorUnavailable, active_allocator, find_jemalloc, preload_for, preloaded
from engine.core_client import EngineCoreClient
from engine.llm_engine import LLMEngine, load_tokenizer
from engine.sampling_params import SamplingParams

GREEDY = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
needs_jemalloc = pytest.mark.skipif(find_jemalloc() is None, reason="this system has no jemalloc library")


def _serve_once(path, preload: str | None) -> tuple[str | None, list[int], str]:
    async def main():
        client = EngineCoreClient(functools.partial(LLMEngine.from_pretrained, path), load_tokenizer(path),
                                  preload=preload)
        await client.start()
        try:
            tokens = [t async for out in client.generate("The patient was", GREEDY, request_id="a", output_kind="delta")
                      for t in out.token_ids]
            return client.allocator, tokens, open(f"/proc/{client.pid}/maps").read()
        finally:
            await client.shutdown()

    return asyncio.run(main())


@needs_jemalloc
@pytest.mark.timeout(180)
def test_the_core_runs_on_jemalloc_when_preloaded_and_gives_the_same_tokens(tiny_llama):
    before = os.environ.get("LD_PRELOAD")
    on_jemalloc, tokens, maps = _serve_once(tiny_llama, find_jemalloc())
    on_glibc, same_tokens, glibc_maps = _serve_once(tiny_llama, None)
    assert on_jemalloc == "jemalloc" and "libjemalloc" in maps      # the core process itself has it mapped
    assert on_glibc == "system" and "libjemalloc" not in glibc_maps
    assert tokens == same_tokens and len(tokens) == 8
    assert os.environ.get("LD_PRELOAD") == before                   # the API process's environment is untouched
    assert active_allocator() == "system"                           # and so is its own malloc


def test_the_setting_resolves_to_a_library_or_glibc(monkeypatch):
    assert preload_for("system") is None
    monkeypatch.setattr(allocator, "find_jemalloc", lambda: "libjemalloc.so.2")
    assert preload_for("auto") == preload_for("jemalloc") == "libjemalloc.so.2"
    monkeypatch.setattr(allocator, "find_jemalloc", lambda: None)
    assert preload_for("auto") is None                              # a system without it serves on glibc's
    with pytest.raises(AllocatorUnavailable, match="libjemalloc2"):
        preload_for("jemalloc")                                     # asked for by name: say so, do not fall back
    with pytest.raises(ValueError, match="auto, jemalloc, system"):
        preload_for("tcmalloc")


def test_preloading_comes_first_and_restores_the_environment(monkeypatch):
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    with preloaded("libjemalloc.so.2"):
        assert os.environ["LD_PRELOAD"] == "libjemalloc.so.2"
    assert "LD_PRELOAD" not in os.environ
    monkeypatch.setenv("LD_PRELOAD", "libfaketime.so.1")
    with preloaded("libjemalloc.so.2"):
        assert os.environ["LD_PRELOAD"] == "libjemalloc.so.2:libfaketime.so.1"
    assert os.environ["LD_PRELOAD"] == "libfaketime.so.1"
    with pytest.raises(RuntimeError), preloaded("libjemalloc.so.2"):
        raise RuntimeError("a start that fails")
    assert os.environ["LD_PRELOAD"] == "libfaketime.so.1"
    with preloaded(None):
        assert os.environ["LD_PRELOAD"] == "libfaketime.so.1"
