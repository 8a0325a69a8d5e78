"""dtype="auto": bf16 where the CPU runs it fast, the checkpoint's dtype elsewhere, fp32 one setting away."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine import precision
from engine.config import EngineConfig, ModelLoadError
from engine.llm_engine import LLMEngine
from engine.precision import cpu_bf16_feature, resolve_dtype
from engine.sampling_params import SamplingParams

CPU = torch.device("cpu")


@pytest.fixture
def bf16_cpu(monkeypatch):
    monkeypatch.setattr(precision, "cpu_bf16_feature", lambda: "amx_bf16")


@pytest.fixture
def plain_cpu(monkeypatch):
    monkeypatch.setattr(precision, "cpu_bf16_feature", lambda: None)


def test_auto_picks_bf16_for_fp32_and_fp16_checkpoints_on_a_bf16_cpu(bf16_cpu):
    assert resolve_dtype("auto", torch.float32, CPU) == torch.bfloat16
    assert resolve_dtype("auto", torch.float16, CPU) == torch.bfloat16
    assert resolve_dtype("auto", torch.bfloat16, CPU) == torch.bfloat16


def test_auto_keeps_the_checkpoint_dtype_without_bf16_hardware(plain_cpu):
    assert resolve_dtype("auto", torch.float32, CPU) == torch.float32
    assert resolve_dtype("auto", torch.float16, CPU) == torch.float16


def test_an_explicit_dtype_and_none_are_obeyed(bf16_cpu):
    assert resolve_dtype("float32", torch.float32, CPU) == torch.float32
    assert resolve_dtype("fp32", torch.bfloat16, CPU) == torch.float32
    assert resolve_dtype(None, torch.float32, CPU) == torch.float32
    with pytest.raises(ModelLoadError, match="unsupported dtype 'bf8'"):
        resolve_dtype("bf8", torch.float32, CPU)


def test_engine_default_is_auto_and_fp32_is_one_setting_away(tiny_llama, bf16_cpu):
    assert EngineConfig().dtype == "auto"
    auto = LLMEngine.from_pretrained(tiny_llama)
    fp32 = LLMEngine.from_pretrained(tiny_llama, EngineConfig(dtype="float32"))
    assert (auto.dtype, fp32.dtype) == ("bfloat16", "float32")
    assert next(auto.model.parameters()).dtype == torch.bfloat16
    assert auto.model.layers[0].self_attn.attn.k_cache.dtype == torch.bfloat16   # the KV cache follows
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    assert len(auto.generate(["Hello world"], params)[0].token_ids) == 6


def test_engine_on_a_cpu_without_bf16_stays_fp32(tiny_llama, plain_cpu):
    assert LLMEngine.from_pretrained(tiny_llama).dtype == "float32"


def test_detection_agrees_with_the_kernel_s_cpu_flags():
    """On Linux the kernel lists what the CPU offers: a feature reported here must be among its flags."""
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.is_file():
        pytest.skip("no /proc/cpuinfo")
    flags = {f for line in cpuinfo.read_text().splitlines() if line.split(":")[0].strip() in ("flags", "Features")
             for f in line.split(":", 1)[1].split()}
    feature = cpu_bf16_feature()
    assert feature is None or feature in flags
    if not flags & {"amx_bf16", "avx512_bf16", "bf16", "sve_bf16"}:
        assert feature is None


def test_teacher_forced_answer_logprob_matches_transformers(tiny_llama):
    """benchmarks.precision scores answers through the engine's own forward pass: the same numbers
    transformers computes for the same checkpoint in fp32."""
    transformers = pytest.importorskip("transformers")
    from benchmarks.precision import answer_logprob

    engine = LLMEngine.from_pretrained(tiny_llama, EngineConfig(dtype="float32", enable_prefix_caching=False))
    prompt = engine.tokenizer.encode("The patient was prescribed")
    answer = engine.tokenizer.encode(" 500 mg of amoxicillin twice daily.", add_special_tokens=False)
    hf = transformers.AutoModelForCausalLM.from_pretrained(tiny_llama, dtype=torch.float32).eval()
    with torch.no_grad():
        logprobs = torch.log_softmax(hf(torch.tensor([prompt + answer])).logits[0], -1)
    expected = sum(float(logprobs[len(prompt) - 1 + i, token]) for i, token in enumerate(answer))
    assert answer_logprob(engine, prompt, answer) == pytest.approx(expected, abs=1e-3)
