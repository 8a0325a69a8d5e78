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
