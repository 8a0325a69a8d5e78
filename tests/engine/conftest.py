"""Tiny checkpoints shared by the engine tests (session-scoped: written once per run)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine.synthetic import write_tiny_checkpoint

torch.set_num_threads(2)


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Our own writer: safetensors + tokenizers only."""
    return write_tiny_checkpoint(tmp_path_factory.mktemp("tiny_llama"), max_position_embeddings=256)


def _write_hf_checkpoint(path: Path, arch: str, **overrides) -> Path:
    """A random checkpoint written by transformers' save_pretrained, with our BPE tokenizer beside it."""
    transformers = pytest.importorskip("transformers")
    from engine.synthetic import CHAT_TEMPLATE, DEFAULT_TEXTS, build_bpe_tokenizer  # noqa: PLC0415

    tokenizer = build_bpe_tokenizer(DEFAULT_TEXTS, 400)
    common = dict(
        vocab_size=tokenizer.get_vocab_size(), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, initializer_range=0.1,
        bos_token_id=tokenizer.token_to_id("<s>"), eos_token_id=tokenizer.token_to_id("</s>"),
    )
    common.update(overrides)
    config_cls, model_cls = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
    }[arch]
    torch.manual_seed(0)
    model = model_cls(config_cls(**common))
    with torch.no_grad():  # random norms and biases too, so a mis-loaded one shows up
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.add_(torch.randn_like(param) * 0.1)
            elif name.endswith("bias"):
                param.normal_(0.0, 0.1)
    model.save_pretrained(path, safe_serialization=True)
    tokenizer.save(str(path / "tokenizer.json"))
    import json  # noqa: PLC0415

    (path / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": "<s>", "eos_token": "</s>", "chat_template": CHAT_TEMPLATE})
    )
    return path


@pytest.fixture(scope="session", params=["llama", "mistral", "qwen2"])
def hf_checkpoint(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    arch = request.param
    overrides = {}
    if arch == "llama":  # exercise llama3 rope scaling and tied embeddings on one of them
        overrides = dict(
            tie_word_embeddings=True,
            rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
        )
    return arch, _write_hf_checkpoint(tmp_path_factory.mktemp(f"hf_{arch}"), arch, **overrides)
