"""The native CPU decode-attention kernel: against a naive reference over the shapes models use, the dispatch
that picks it, and how it is built, cached, rebuilt and done without."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from engine.kernels import cpu_paged_attention, native_build
from engine.kernels import paged_attention as paged
from engine.kernels.cpu_paged_attention import paged_attention_decode_native
from engine.kernels.paged_attention import paged_attention_decode, paged_attention_decode_torch

pytestmark = pytest.mark.skipif(not cpu_paged_attention.native_decode_available(),
                                reason="no C compiler: the native kernel is off and the torch path serves")


def _reference(q, k_cache, v_cache, tables, lens, scale):
    """Per sequence, per query head, in float64, from the pools token by token."""
    out = torch.empty(q.shape, dtype=torch.float64)
    block_size, kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = q.shape[1] // kv_heads
    for b, length in enumerate(lens):
        slots = [(tables[b][i // block_size], i % block_size) for i in range(length)]
        keys = torch.stack([k_cache[blk, pos] for blk, pos in slots]).double()      # [L, Hkv, D]
        values = torch.stack([v_cache[blk, pos] for blk, pos in slots]).double()
        for h in range(q.shape[1]):
            probs = (keys[:, h // group] @ q[b, h].double() * scale).softmax(0)
            out[b, h] = probs @ values[:, h // group]
    return out


def _case(dtype, head_dim, heads, kv_heads, block_size, lens, seed=0):
    gen = torch.Generator().manual_seed(seed)
    width = max(-(-n // block_size) for n in lens) + 1          # one spare column: padding the kernel must skip
    num_blocks = len(lens) * width + 3
    k_cache = torch.randn(num_blocks, block_size, kv_heads, head_dim, generator=gen).to(dtype)
    v_cache = torch.randn(num_blocks, block_size, kv_heads, head_dim, generator=gen).to(dtype)
    order = torch.randperm(num_blocks, generator=gen).tolist()   # blocks scattered over the pool
    tables = []
    for b, n in enumerate(lens):
        used = -(-n // block_size)
        tables.append(order[b * width : b * width + used] + [-1] * (width - used))
    q = torch.randn(len(lens), heads, head_dim, generator=gen).to(dtype)
    return q, k_cache, v_cache, tables


SHAPES = [  # head_dim, heads, kv_heads, block_size, context lengths
    (32, 8, 2, 16, [1, 16, 17, 300]),          # the bundled model; a first token, a full block, one past it
    (64, 8, 8, 4, [5, 64, 129]),               # no GQA
    (128, 28, 4, 16, [33, 250]),               # Qwen-like: 7 query heads per KV head
    (48, 6, 2, 8, [7, 40, 41]),                # a head size without its own instance
    (16, 4, 1, 8, [3, 8, 27]),                 # ... small enough for the eight-keys-at-once path
    (32, 8, 8, 16, [2, 31, 70]),               # instances for a group of 1, 2 and 8 at each head size
    (128, 16, 8, 16, [9, 100]),
    (64, 32, 4, 16, [17, 80]),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("shape", SHAPES, ids=[f"d{s[0]}-h{s[1]}-kv{s[2]}-bs{s[3]}" for s in SHAPES])
@pytest.mark.parametrize("threads", [1, 3])
def test_native_decode_matches_the_reference(dtype, shape, threads, monkeypatch) -> None:
    head_dim, heads, kv_heads, block_size, lens = shape
    q, k_cache, v_cache, tables = _case(dtype, head_dim, heads, kv_heads, block_size, lens)
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    scale = head_dim**-0.5
    out = paged_attention_decode_native(q, k_cache, v_cache, torch.tensor(tables, dtype=torch.int32),
                                        torch.tensor(lens, dtype=torch.int32), scale)
    expected = _reference(q, k_cache, v_cache, tables, lens, scale)
    assert out.dtype == dtype and out.shape == q.shape
    if dtype == torch.float32:
        torch.testing.assert_close(out.double(), expected, atol=2e-6, rtol=1e-5)
    else:   # computed in fp32, then rounded once to bf16: within half a bf16 step of the exact value
        torch.testing.assert_close(out.double(), expected, atol=1e-6, rtol=2**-8)


def test_bf16_is_at_least_as_close_to_exact_as_the_torch_path() -> None:
    q, k_cache, v_cache, tables = _case(torch.bfloat16, 32, 8, 2, 16, [40, 200, 513, 700], seed=3)
    args = (torch.tensor(tables, dtype=torch.int32).clamp(min=0), torch.tensor([40, 200, 513, 700], dtype=torch.int32),
            32**-0.5)
    expected = _reference(q, k_cache, v_cache, tables, [40, 200, 513, 700], 32**-0.5)
    native_error = (paged_attention_decode_native(q, k_cache, v_cache, *args).double() - expected).abs().mean()
    torch_error = (paged_attention_decode_torch(q, k_cache, v_cache, *args).double() - expected).abs().mean()
    assert native_error <= torch_error * 1.05


def test_dispatch_takes_the_native_kernel_on_cpu_and_the_torch_path_where_it_does_not_apply(monkeypatch) -> None:
    calls = []
    real = paged.paged_attention_decode_native
    monkeypatch.setattr(paged, "paged_attention_decode_native", lambda *a: calls.append(a[0].dtype) or real(*a))
    lens = [9, 30]
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        q, k_cache, v_cache, tables = _case(dtype, 32, 4, 2, 8, lens)
        args = (torch.tensor(tables, dtype=torch.int32), torch.tensor(lens, dtype=torch.int32), 0.2)
        out = paged_attention_decode(q, k_cache, v_cache, *args)
        tolerance = 1e-5 if dtype == torch.float32 else 2e-2      # fp16's torch path computes in fp16
        torch.testing.assert_close(out.double(), _reference(q, k_cache, v_cache, tables, lens, 0.2),
                                   atol=tolerance, rtol=tolerance)
    assert calls == [torch.float32, torch.bfloat16]     # fp16: no native instance, the torch path ran


@pytest.fixture
def fresh_build(tmp_path, monkeypatch):
    """An empty kernel cache and nothing loaded yet in this process; restored afterwards."""
    monkeypatch.setenv(native_build.CACHE_ENV, str(tmp_path / "kernels"))
    monkeypatch.setattr(native_build, "_loaded", {})
    cpu_paged_attention._kernel.cache_clear()
    yield tmp_path / "kernels"
    cpu_paged_attention._kernel.cache_clear()


def test_the_kernel_is_built_once_then_loaded_from_the_cache(fresh_build, monkeypatch) -> None:
    assert native_build.load_library("paged_decode") is not None
    built = list(fresh_build.glob("paged_decode-*.so"))
    assert len(built) == 1 and not list(fresh_build.glob(".*"))      # no temporary file left behind
    monkeypatch.setattr(native_build, "_loaded", {})
    monkeypatch.setattr(native_build, "_compile", lambda *a: pytest.fail("rebuilt a cached kernel"))
    assert native_build.load_library("paged_decode") is not None


def _load_in_a_new_process(cache: Path) -> subprocess.CompletedProcess:
    """A fresh process (dlopen hands this one back the library it already has) loading the kernel."""
    script = ("import logging, sys; logging.basicConfig(); from engine.kernels.native_build import load_library; "
              "sys.exit(0 if load_library('paged_decode') is not None else 1)")
    env = {**os.environ, native_build.CACHE_ENV: str(cache), "PYTHONPATH": str(Path(native_build.__file__).parents[2])}
    return subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)


def test_a_corrupt_cached_library_is_rebuilt(fresh_build) -> None:
    assert _load_in_a_new_process(fresh_build).returncode == 0
    [cached] = fresh_build.glob("paged_decode-*.so")
    cached.write_bytes(b"\x7fELF truncated")
    reload = _load_in_a_new_process(fresh_build)
    assert reload.returncode == 0, reload.stderr
    assert "does not load; rebuilding" in reload.stderr and cached.stat().st_size > 1000


def test_without_a_compiler_or_when_turned_off_the_torch_path_serves(fresh_build, monkeypatch, caplog) -> None:
    monkeypatch.setenv("CC", "/nonexistent/cc")
    with caplog.at_level(logging.WARNING, logger="engine.kernels"):
        assert not cpu_paged_attention.native_decode_available()
    assert "no C compiler" in caplog.text
    lens = [3, 20]
    q, k_cache, v_cache, tables = _case(torch.float32, 32, 4, 2, 8, lens)
    out = paged_attention_decode(q, k_cache, v_cache, torch.tensor(tables, dtype=torch.int32).clamp(min=0),
                                 torch.tensor(lens, dtype=torch.int32), 0.2)
    torch.testing.assert_close(out.double(), _reference(q, k_cache, v_cache, tables, lens, 0.2), atol=1e-5, rtol=1e-5)

    monkeypatch.delenv("CC")
    monkeypatch.setattr(native_build, "_loaded", {})
    cpu_paged_attention._kernel.cache_clear()
    monkeypatch.setenv(native_build.DISABLE_ENV, "0")
    assert not cpu_paged_attention.native_decode_available()
    assert not list(fresh_build.glob("*.so"))


def test_a_failed_build_is_a_warning_not_a_crash(fresh_build, monkeypatch, caplog) -> None:
    broken = fresh_build.parent / "cc"
    broken.write_text("#!/bin/sh\n[ \"$1\" = --version ] && exit 0\necho 'internal compiler error' >&2\nexit 4\n")
    broken.chmod(0o755)
    monkeypatch.setenv("CC", str(broken))
    with caplog.at_level(logging.WARNING, logger="engine.kernels"):
        assert native_build.load_library("paged_decode") is None
    assert "could not be built" in caplog.text and "internal compiler error" in caplog.text


def test_processes_building_at_once_all_load_a_whole_library(fresh_build) -> None:
    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(lambda _: _load_in_a_new_process(fresh_build), range(3)))
    assert [r.returncode for r in results] == [0, 0, 0], [r.stderr for r in results]
    assert len(list(fresh_build.glob("paged_decode-*.so"))) == 1 and not list(fresh_build.glob(".*"))


def test_an_engine_decodes_through_the_native_kernel_with_the_torch_paths_tokens(tiny_llama, monkeypatch) -> None:
    from engine.config import EngineConfig  # noqa: PLC0415
    from engine.llm_engine import LLMEngine  # noqa: PLC0415
    from engine.sampling_params import SamplingParams  # noqa: PLC0415

    engine = LLMEngine.from_pretrained(tiny_llama, EngineConfig(dtype="float32", enable_prefix_caching=False))
    assert engine.runner.native_decode
    prompts = ["the patient takes", "aspirin and", "a contract is", "revenue of the"]
    params = SamplingParams(temperature=0, max_tokens=24, ignore_eos=True, logprobs=3)
    native_calls = []
    real = paged.paged_attention_decode_native
    monkeypatch.setattr(paged, "paged_attention_decode_native", lambda *a: native_calls.append(1) or real(*a))
    native = engine.generate(prompts, params)
    assert len(native_calls) == len(engine.model.layers) * 23      # every layer of every decode step
    monkeypatch.setattr(paged, "native_supports", lambda *a: False)
    plain = engine.generate(prompts, params)
    for ours, theirs in zip(native, plain, strict=True):
        assert ours.token_ids == theirs.token_ids
        for step_ours, step_theirs in zip(ours.logprobs, theirs.logprobs, strict=True):
            assert max(abs(a[2] - b[2]) for a, b in zip(step_ours.top, step_theirs.top, strict=True)) < 1e-4


def test_the_benchmark_times_both_paths_on_the_same_inputs() -> None:
    from benchmarks.native_attention import measure  # noqa: PLC0415

    result = measure(torch.float32, heads=4, kv_heads=2, head_dim=32, batch=4, max_context=64, repeats=2, seed=0)
    assert result["native_us"] > 0 and result["torch_us"] > 0 and result["speedup"] > 0
    assert result["max_abs_error_native"] < 1e-5 and result["max_abs_error_torch"] < 1e-5


def test_a_library_in_a_folder_others_can_write_is_not_loaded(fresh_build, caplog) -> None:
    assert native_build.load_library("paged_decode") is not None
    fresh_build.chmod(0o777)          # anyone could have put this file here: it is not run
    native_build._loaded.clear()
    with caplog.at_level(logging.WARNING, logger="engine.kernels"):
        assert native_build.load_library("paged_decode") is None
    assert "not this user's alone" in caplog.text
    [planted] = fresh_build.glob("paged_decode-*.so")
    planted.unlink()                  # and it is not rebuilt into such a folder either
    native_build._loaded.clear()
    with caplog.at_level(logging.WARNING, logger="engine.kernels"):
        assert native_build.load_library("paged_decode") is None
    assert "writable by other users" in caplog.text and not list(fresh_build.glob("*.so"))


def test_a_missing_kernel_source_is_a_warning_not_a_crash(fresh_build, monkeypatch, caplog) -> None:
    monkeypatch.setattr(native_build, "SOURCE_DIR", fresh_build.parent / "not-installed")
    with caplog.at_level(logging.WARNING, logger="engine.kernels"):
        assert native_build.load_library("paged_decode") is None
    assert "could not be built" in caplog.text


def _native(q, k_cache, v_cache, tables, lens, threads, monkeypatch):
    monkeypatch.setattr(torch, "get_num_threads", lambda: threads)
    return paged_attention_decode_native(q, k_cache, v_cache, torch.tensor(tables, dtype=torch.int32),
                                         torch.tensor(lens, dtype=torch.int32), q.shape[-1] ** -0.5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_a_batch_split_over_helper_threads_gives_the_same_bits(dtype, monkeypatch) -> None:
    """Enough work that the kernel splits it (more than MIN_WORK_PER_THREAD per thread); each sequence's
    result is computed by one thread whatever the split, so the bits cannot depend on it."""
    lens = [1500, 700, 1200, 900, 1300, 40]
    q, k_cache, v_cache, tables = _case(dtype, 32, 8, 2, 16, lens, seed=5)
    alone = _native(q, k_cache, v_cache, tables, lens, 1, monkeypatch)
    for threads in (2, 3, 4):
        assert torch.equal(_native(q, k_cache, v_cache, tables, lens, threads, monkeypatch), alone)
    expected = _reference(q, k_cache, v_cache, tables, lens, 32**-0.5)
    torch.testing.assert_close(alone.double(), expected, atol=1e-5, rtol=2**-8)


def test_calls_from_several_threads_at_once_each_get_their_own_result(monkeypatch) -> None:
    """One call holds the helper pool; a call that meets it busy runs on its own thread. Either way each
    caller's output is its own and exact."""
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    cases = []
    for seed in range(4):
        lens = [1200 + 100 * seed, 900, 1100]
        q, k_cache, v_cache, tables = _case(torch.bfloat16, 32, 8, 2, 16, lens, seed=seed)
        args = (q, k_cache, v_cache, torch.tensor(tables, dtype=torch.int32), torch.tensor(lens, dtype=torch.int32),
                32**-0.5)
        cases.append((args, paged_attention_decode_native(*args)))

    def hammer(case):
        args, expected = case
        return all(torch.equal(paged_attention_decode_native(*args), expected) for _ in range(25))

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(hammer, cases))


_POOL_SCRIPT = """
import os, signal, torch
from engine.kernels.cpu_paged_attention import paged_attention_decode_native
torch.get_num_threads = lambda: 4      # the kernel's thread count, as torch would report it; also in the child
def tasks():
    return len(os.listdir("/proc/self/task"))
def call(lens):
    gen = torch.Generator().manual_seed(len(lens))
    widths = [-(-n // 16) for n in lens]
    q = torch.randn(len(lens), 8, 32, generator=gen)
    pool = torch.randn(sum(widths), 16, 2, 32, generator=gen)
    starts = [sum(widths[:b]) for b in range(len(lens))]
    tables = [list(range(s, s + w)) + [0] * (max(widths) - w) for s, w in zip(starts, widths)]
    return paged_attention_decode_native(q, pool, pool, torch.tensor(tables, dtype=torch.int32),
                                         torch.tensor(lens, dtype=torch.int32), 0.2)
base = tasks()
call([10, 20])                      # too little work to wake a helper
small = tasks() - base
expected = call([1000] * 8)         # enough for all four threads: three helpers
big = tasks() - base
for _ in range(20):
    call([1000] * 8)
again = tasks() - base
child = os.fork()
if child == 0:                      # the parent's helpers are not in the child: it must start its own, not wait
    signal.alarm(60)
    os._exit(0 if torch.equal(call([1000] * 8), expected) else 1)
_, status = os.waitpid(child, 0)
print(small, big, again, os.waitstatus_to_exitcode(status))
"""


def test_helper_threads_start_once_only_where_work_pays_and_survive_a_fork() -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(native_build.__file__).parents[2])}
    run = subprocess.run([sys.executable, "-c", _POOL_SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    small, big, again, child_exit = map(int, run.stdout.split())
    assert small == 0          # a few tokens run on the calling thread
    assert big == 3            # four threads asked for and paid for: three helpers
    assert again == 3          # reused by later calls, not started again
    assert child_exit == 0     # a forked child runs the kernel (no wait on the parent's helpers)
