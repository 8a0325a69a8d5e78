"""BucketedLinear: bf16 / fp16 matmuls on CPU meet few row counts (oneDNN builds a kernel per shape), same outputs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import engine.layers.linear as linear_module
from engine.layers.linear import BucketedLinear, bucketed_rows


def test_bucketed_rows_cover_every_count_with_few_shapes():
    counts = range(1, 2049)
    padded = [bucketed_rows(n) for n in counts]
    assert all(p >= n for p, n in zip(padded, counts, strict=True))
    assert padded == sorted(padded)                       # never fewer rows for more tokens
    assert [bucketed_rows(n) for n in range(1, 17)] == list(range(1, 17))   # small decode batches run as they are
    assert len(set(padded)) == 54
    assert max(p / n for p, n in zip(padded, counts, strict=True) if n > 128) <= 1.25
    assert bucketed_rows(2049) == 2560 and bucketed_rows(5000) == 5120


def _spy_on_matmul_rows(monkeypatch) -> set[int]:
    """The row counts that reach F.linear from BucketedLinear from now on (filled as calls happen)."""
    seen: set[int] = set()
    real_linear = F.linear

    def spy(x, weight, bias=None):
        seen.add(x.shape[0])
        return real_linear(x, weight, bias)

    monkeypatch.setattr(linear_module.F, "linear", spy)
    return seen


def _shapes_reaching_the_matmul(monkeypatch, layer: BucketedLinear, dtype: torch.dtype, rows: range) -> set[int]:
    seen = _spy_on_matmul_rows(monkeypatch)
    for n in rows:
        out = layer(torch.randn(n, layer.in_features, dtype=dtype))
        assert out.shape == (n, layer.out_features)
    monkeypatch.undo()
    return seen


def test_bf16_rows_are_padded_to_buckets_and_fp32_rows_are_not(monkeypatch):
    rows = range(1, 301)
    bf16 = BucketedLinear(64, 96, bias=True, dtype=torch.bfloat16)
    assert len(_shapes_reaching_the_matmul(monkeypatch, bf16, torch.bfloat16, rows)) == 16 + 14 + 6
    fp32 = BucketedLinear(64, 96, bias=True)
    assert _shapes_reaching_the_matmul(monkeypatch, fp32, torch.float32, rows) == set(rows)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rows", [1, 17, 129, 300, 700])
def test_padded_rows_leave_the_real_rows_unchanged(dtype, rows):
    torch.manual_seed(rows)
    layer = BucketedLinear(128, 80, bias=True, dtype=dtype)
    x = torch.randn(rows, 128, dtype=dtype)
    got = layer(x)
    assert got.shape == (rows, 80) and got.is_contiguous()
    torch.testing.assert_close(got, F.linear(x, layer.weight, layer.bias))


def test_a_bf16_engine_runs_every_projection_at_bucketed_row_counts(monkeypatch, tiny_llama):
    from engine.config import EngineConfig  # noqa: PLC0415
    from engine.llm_engine import LLMEngine  # noqa: PLC0415
    from engine.sampling_params import SamplingParams  # noqa: PLC0415

    engine = LLMEngine.from_pretrained(tiny_llama, EngineConfig(dtype="bfloat16", max_num_batched_tokens=64))
    linears = [m for m in engine.model.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and all(isinstance(m, BucketedLinear) for m in linears)
    seen = _spy_on_matmul_rows(monkeypatch)
    prompts = [[5 + (i * 7 + j) % 200 for j in range(3 + 11 * i)] for i in range(9)]   # 3-91 tokens: chunked
    engine.generate(prompts, [SamplingParams(temperature=0, max_tokens=4 + i, ignore_eos=True) for i in range(9)])
    assert seen and all(bucketed_rows(n) == n for n in seen)
    assert any(n > 16 for n in seen)    # the prefill chunks were padded, not only small decode batches


def test_the_benchmark_sweep_runs_both_variants():
    from benchmarks.bucketed_linear import sweep  # noqa: PLC0415

    for bucketed in (False, True):
        result = sweep(bucketed, max_rows=20, dtype=torch.bfloat16)
        assert set(result) == {"rss_growth_mb", "first_pass_s", "second_pass_s"} and result["first_pass_s"] > 0


def test_warm_up_runs_each_weight_shape_once_per_bucket(monkeypatch):
    from engine.layers.linear import row_buckets, warm_up_buckets  # noqa: PLC0415

    same_a, same_b = (BucketedLinear(64, 96, bias=False, dtype=torch.bfloat16) for _ in range(2))
    other = BucketedLinear(96, 64, bias=False, dtype=torch.bfloat16)
    with_bias = BucketedLinear(64, 96, bias=True, dtype=torch.bfloat16)   # a bias is another oneDNN kernel
    calls: list[tuple[int, tuple[int, ...]]] = []
    real_linear = F.linear
    monkeypatch.setattr(linear_module.F, "linear",
                        lambda x, w, b=None: calls.append((x.shape[0], tuple(w.shape))) or real_linear(x, w, b))
    runs = warm_up_buckets([same_a, same_b, other, with_bias], max_rows=300)
    buckets = row_buckets(300)
    assert buckets == sorted({bucketed_rows(n) for n in range(1, 301)}) and len(buckets) == 16 + 14 + 6
    assert runs == len(calls) == 3 * len(buckets)
    assert sorted(rows for rows, shape in calls if shape == (64, 96)) == [*buckets]   # once: the other layer shares it
    assert warm_up_buckets([BucketedLinear(64, 96, bias=False)], max_rows=300) == 0   # fp32: MKL, nothing to warm


def test_a_bf16_engine_meets_every_matmul_shape_at_start_and_no_new_one_while_serving(monkeypatch, tiny_llama):
    """After start, no step runs a (rows, weight) shape the start did not: oneDNN builds no kernel while serving."""
    from engine.config import EngineConfig  # noqa: PLC0415
    from engine.llm_engine import LLMEngine  # noqa: PLC0415
    from engine.sampling_params import SamplingParams  # noqa: PLC0415

    calls: set[tuple[int, tuple[int, ...], int]] = set()   # (rows, weight shape, weight storage)
    real_linear = F.linear
    monkeypatch.setattr(linear_module.F, "linear",
                        lambda x, w, b=None: calls.add((x.shape[0], tuple(w.shape), w.data_ptr())) or real_linear(x, w, b))
    config = EngineConfig(dtype="bfloat16", max_num_batched_tokens=96, max_num_seqs=6)
    engine = LLMEngine.from_pretrained(tiny_llama, config)
    lm_head = engine.model.lm_head.weight.data_ptr()

    def kernels() -> set[tuple[int, tuple[int, ...], bool]]:   # layers of one weight shape share a kernel
        return {(rows, shape, ptr == lm_head) for rows, shape, ptr in calls}

    at_start = kernels()
    assert max(rows for rows, _, head in at_start if head) == 6        # the LM head: sampled rows only
    assert max(rows for rows, _, head in at_start if not head) == bucketed_rows(96)
    calls.clear()
    prompts = [[5 + (i * 7 + j) % 200 for j in range(3 + 13 * i)] for i in range(9)]   # 3-107 tokens: chunked
    engine.generate(prompts, [SamplingParams(temperature=0, max_tokens=3 + i, ignore_eos=True) for i in range(9)])
    served = kernels()
    assert any(rows > 16 for rows, _, _ in served)   # prefill chunks ran, not only small decode batches
    assert served <= at_start
