"""The engine on a CUDA device against the same engine on the CPU: greedy decoding, quantized KV blocks, the
sampler's distribution, and a packed-bitmask constraint through the Triton kernels. Skipped without CUDA;
run them on a GPU host (`python -m pytest tests/engine/test_cuda.py`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
import torch

from engine.config import EngineConfig
from engine.kernels import dispatch
from engine.kernels import paged_attention as attention
from engine.kernels.bitmask import pack_bool_mask
from engine.llm_engine import LLMEngine
from engine.processors.logit_bias import LogitBiasProcessor
from engine.processors.logits_process import LogitsProcessor
from engine.sampler import Sampler
from engine.sampling_params import SamplingParams
from engine.sequence import Sequence as EngineSequence
from tests.engine.test_sampler_math import _assert_follows, _reference_probs

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")

BUNDLED_MODEL = Path(__file__).parents[2] / "auditor" / "bundled_model"
PROMPTS = [
    "The patient was prescribed",
    "Revenue grew 12% year over year while operating margin fell to 8.5 percent and",
    "def add(a, b):",
    "Hello world! How are you today? I am fine, thank you. The court held that the statute",
]


def _greedy(engine: LLMEngine, prompts: Sequence[str] = PROMPTS, max_tokens: int = 24) -> list[list[int]]:
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    return [out.token_ids for out in engine.generate(list(prompts), params)]


def _count_calls(monkeypatch: pytest.MonkeyPatch, module, name: str) -> list[int]:
    """Wrap a kernel-picking function so that each use of the kernel it returns is counted."""
    calls: list[int] = []
    original = getattr(module, name)
    kernel = original()
    assert kernel is not None, f"{name}: Triton did not import on this CUDA host"

    def counted(*args, **kwargs):
        calls.append(1)
        return kernel(*args, **kwargs)

    monkeypatch.setattr(module, name, lambda: counted)
    return calls


@pytest.mark.parametrize("kv_cache_dtype", ["auto", "int8"])
def test_fp32_greedy_on_cuda_matches_the_cpu(tiny_llama, monkeypatch, kv_cache_dtype):
    config = dict(dtype="float32", block_size=32 if kv_cache_dtype == "int8" else 8, kv_cache_dtype=kv_cache_dtype,
                  kv_cache_residual_tokens=32)
    expected = _greedy(LLMEngine.from_pretrained(tiny_llama, EngineConfig(**config)), max_tokens=80)
    decode_calls = _count_calls(monkeypatch, attention, "_triton_decode")
    on_gpu = LLMEngine.from_pretrained(tiny_llama, EngineConfig(device="cuda", **config))

    assert next(on_gpu.model.parameters()).is_cuda
    assert _greedy(on_gpu, max_tokens=80) == expected
    assert decode_calls, "decode attention did not run the Triton kernel"


def test_penalised_greedy_on_cuda_matches_the_cpu(tiny_llama):
    """Repetition, presence and frequency penalties index the logits on the logits' device."""
    params = [SamplingParams(temperature=0, max_tokens=40, ignore_eos=True, **penalties) for penalties in (
        dict(repetition_penalty=1.3), dict(presence_penalty=1.5, frequency_penalty=0.5), dict(frequency_penalty=2.0),
        dict(repetition_penalty=0.8, presence_penalty=-0.5),
    )]
    on_cpu = LLMEngine.from_pretrained(tiny_llama, EngineConfig(dtype="float32"))
    on_gpu = LLMEngine.from_pretrained(tiny_llama, EngineConfig(device="cuda", dtype="float32"))
    expected = [out.token_ids for out in on_cpu.generate(PROMPTS, params)]
    assert [out.token_ids for out in on_gpu.generate(PROMPTS, params)] == expected


def test_bundled_model_in_bf16_on_cuda_follows_fp32_on_the_cpu():
    """bf16 rounds differently on the GPU than on the CPU: most greedy tokens still agree with fp32."""
    reference = _greedy(LLMEngine.from_pretrained(BUNDLED_MODEL, EngineConfig(dtype="float32")), max_tokens=32)
    engine = LLMEngine.from_pretrained(BUNDLED_MODEL, EngineConfig(device="cuda", dtype="auto"))
    assert engine.dtype == "bfloat16"
    got = _greedy(engine, max_tokens=32)
    agreed = sum(next((i for i, (a, b) in enumerate(zip(x, y, strict=True)) if a != b), len(x)) for x, y in zip(got, reference, strict=True))
    assert agreed / sum(map(len, reference)) >= 0.5, (got, reference)


class AllowedTokens(LogitsProcessor):
    """A fixed allowed set per request as a packed bitmask, the way the KG constraint masks its rows."""

    name = "allowed_tokens"

    def __init__(self, vocab: int, allowed: torch.Tensor) -> None:
        self.vocab = vocab
        self.bitmask = pack_bool_mask(allowed[None], vocab)   # [1, words] int32
        self.rows: set[str] = set()

    def validate_params(self, params: SamplingParams) -> None:
        pass

    def add_request(self, request_id, params, prompt_token_ids, output_token_ids) -> bool:
        if params.extra_args.get(self.name):
            self.rows.add(request_id)
            return True
        return False

    def remove_request(self, request_id: str) -> None:
        self.rows.discard(request_id)

    def apply(self, logits: torch.Tensor, request_ids: Sequence[str | None]) -> None:
        rows = [i for i, request_id in enumerate(request_ids) if request_id in self.rows]
        if rows:
            index = torch.tensor(rows, dtype=torch.long, device=logits.device)
            dispatch.apply_token_bitmask(logits[:, : self.vocab], self.bitmask.expand(len(rows), -1).contiguous(), index)

    def accept_token(self, request_id: str, token_id: int) -> None:
        pass


def test_a_bitmask_constraint_holds_on_cuda_under_adversarial_bias(tiny_llama, monkeypatch):
    probe = LLMEngine.from_pretrained(tiny_llama, EngineConfig(dtype="float32"))
    vocab = probe.model.config.vocab_size
    allowed = torch.rand(vocab, generator=torch.Generator().manual_seed(1)) < 0.1
    forbidden = int((~allowed).nonzero()[0])
    bitmask_calls = _count_calls(monkeypatch, dispatch, "_triton_bitmask")
    engine = LLMEngine.from_pretrained(tiny_llama, EngineConfig(device="cuda", dtype="float32"),
                                       logits_processors=[LogitBiasProcessor(vocab), AllowedTokens(vocab, allowed)])
    bias = {"logit_bias": {forbidden: 100.0}}
    constrained = SamplingParams(temperature=1.0, seed=5, max_tokens=48, ignore_eos=True,
                                 extra_args={**bias, "allowed_tokens": True})
    free = SamplingParams(temperature=1.0, seed=5, max_tokens=48, ignore_eos=True, extra_args=bias)

    outputs = engine.generate(PROMPTS * 2, [constrained, free] * len(PROMPTS))

    for out in outputs[0::2]:
        assert all(allowed[token] for token in out.token_ids), out.token_ids
    for out in outputs[1::2]:   # the unconstrained rows of the same batches took the bias
        assert out.token_ids.count(forbidden) > len(out.token_ids) // 2
    assert bitmask_calls, "the bitmask did not go through the Triton kernel"


@pytest.mark.parametrize("params", [
    dict(temperature=1.0), dict(temperature=0.7, top_p=0.9), dict(temperature=1.3, top_k=40), dict(min_p=0.05),
])
def test_cuda_draws_follow_the_distribution_at_a_real_vocabulary(params):
    vocab, draws = 151_936, 10_000
    row = torch.randn(vocab, generator=torch.Generator().manual_seed(2)) * 3
    seqs = [EngineSequence(str(i), [1], SamplingParams(**params), 1, 0.0) for i in range(draws)]
    out = Sampler(torch.Generator(device="cuda").manual_seed(0))(row.cuda().repeat(draws, 1), seqs)
    counts = torch.bincount(torch.tensor(out.token_ids), minlength=vocab)
    _assert_follows(counts, _reference_probs(row, SamplingParams(**params)))
