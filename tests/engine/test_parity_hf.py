"""Our model and engine against transformers on the same random checkpoints."""

from __future__ import annotations

import pytest
import torch

from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams

transformers = pytest.importorskip("transformers")

PROMPTS = [
    "The patient was prescribed",
    "Revenue grew 12% year over year while operating margin fell to 8.5 percent and",
    "def add(a, b):",
    "Hello world! How are you today? I am fine, thank you. The court held that the statute",
]


def _hf_model(path):
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    # like our ignore_eos: generate through EOS instead of stopping (min_new_tokens would mask EOS instead)
    model.generation_config.eos_token_id = None
    return model.eval()


def _hf_greedy(model, prompt_ids: list[int], max_new_tokens: int) -> list[int]:
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt_ids]), attention_mask=torch.ones(1, len(prompt_ids), dtype=torch.long),
            max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=0,
        )
    return out[0, len(prompt_ids):].tolist()


def _capture_logits(engine: LLMEngine) -> list[torch.Tensor]:
    """Record every step's logits rows (before sampling) for the one running request."""
    captured: list[torch.Tensor] = []
    original = engine.runner.execute

    def execute(batch):
        result = original(batch)
        captured.append(result.logits.clone())
        return result

    engine.runner.execute = execute  # type: ignore[method-assign]
    return captured


def test_prefill_and_decode_logits_match_transformers(hf_checkpoint):
    arch, path = hf_checkpoint
    engine = LLMEngine.from_pretrained(path, EngineConfig(block_size=4, max_num_batched_tokens=7, dtype="float32"))
    captured = _capture_logits(engine)
    prompt_ids = engine.tokenizer.encode(PROMPTS[1])
    out = engine.generate([prompt_ids], SamplingParams(temperature=0, max_tokens=6, ignore_eos=True))[0]
    full = prompt_ids + out.token_ids
    with torch.no_grad():
        reference = _hf_model(path)(torch.tensor([full])).logits[0]  # [T, vocab]
    # chunked prefill (budget 7) samples once the prompt is complete, then decodes one token a step
    ours = torch.cat([c for c in captured if c.shape[0]])
    expected = reference[len(prompt_ids) - 1 : len(full) - 1]
    assert ours.shape == expected.shape, arch
    torch.testing.assert_close(ours, expected, atol=2e-4, rtol=1e-4)


def test_greedy_matches_transformers_in_a_mixed_length_batch(hf_checkpoint):
    arch, path = hf_checkpoint
    engine = LLMEngine.from_pretrained(path, EngineConfig(block_size=8, dtype="float32"))
    hf = _hf_model(path)
    prompts = [engine.tokenizer.encode(p) for p in PROMPTS]
    lengths = [5, 12, 20, 9]
    params = [SamplingParams(temperature=0, max_tokens=n, ignore_eos=True) for n in lengths]
    outputs = engine.generate(prompts, params)
    for prompt_ids, n, out in zip(prompts, lengths, outputs, strict=True):
        assert out.token_ids == _hf_greedy(hf, prompt_ids, n), arch
        assert out.finish_reason == "length"


def test_greedy_matches_transformers_after_preemption(hf_checkpoint):
    arch, path = hf_checkpoint
    # 14 blocks of 4 tokens cannot hold four ~20-40-token sequences at once: some are preempted
    engine = LLMEngine.from_pretrained(path, EngineConfig(block_size=4, num_kv_blocks=14, dtype="float32"))
    hf = _hf_model(path)
    prompts = [engine.tokenizer.encode(p) for p in PROMPTS]
    params = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    outputs = engine.generate(prompts, params)
    assert engine.stats()["num_preemptions"] > 0
    assert sum(o.stats.num_preemptions for o in outputs) == engine.stats()["num_preemptions"]
    for prompt_ids, out in zip(prompts, outputs, strict=True):
        assert out.token_ids == _hf_greedy(hf, prompt_ids, 16), arch


def test_bf16_logits_stay_close_to_transformers(tiny_llama):
    engine = LLMEngine.from_pretrained(tiny_llama, EngineConfig(dtype="bfloat16"))
    captured = _capture_logits(engine)
    prompt_ids = engine.tokenizer.encode(PROMPTS[0])
    engine.generate([prompt_ids], SamplingParams(temperature=0, max_tokens=1))
    hf = transformers.AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.bfloat16).eval()
    with torch.no_grad():
        reference = hf(torch.tensor([prompt_ids])).logits[0, -1].float()
    assert captured[0].dtype == torch.float32
    torch.testing.assert_close(captured[0][0], reference, atol=0.05, rtol=0.02)
