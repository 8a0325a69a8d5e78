"""Synthetic checkpoints: random-weight Llama-family models with a small BPE tokenizer trained on
given texts, written to disk in the Hugging Face layout the engine loads.

This ships with the engine rather than living under tests/ because the shipped benchmarks write
their models with it: `benchmarks/_common.py` a ~6.6M-parameter model with a padded 8k vocab, and
`benchmarks/kg_constraint.py` one whose tokenizer is trained on the texts it decodes, so entity
names split into pieces as a real tokenizer's would. The tests of every layer use it too, for the
engine's tiny checkpoints and the service's real-engine runs.

Written with `safetensors` + `tokenizers` only (no transformers): config.json, model.safetensors
(or shards + index), tokenizer.json, tokenizer_config.json (with a chat template),
generation_config.json.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

BOS, EOS, PAD = "<s>", "</s>", "<pad>"
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
DEFAULT_TEXTS = [
    "The patient was prescribed 500 mg of amoxicillin twice daily for seven days.",
    "Revenue grew 12% year over year while operating margin fell to 8.5 percent.",
    "The court held that the statute did not apply retroactively to the contract.",
    "def add(a, b):\n    return a + b\n\nprint(add(2, 3))",
    "Hello world! How are you today? I am fine, thank you. 0123456789",
    '{"name": "aspirin", "dose_mg": 81, "daily": true, "notes": null}',
]
_ARCHITECTURES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen2": "Qwen2ForCausalLM"}


def build_bpe_tokenizer(texts: list[str], vocab_size: int) -> Tokenizer:
    """A byte-level BPE tokenizer trained on `texts` (every byte is representable)."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[PAD, BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def random_weights(config: dict[str, Any], seed: int, std: float, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Hugging Face-named random tensors for a Llama-family config (norm weights near 1)."""
    gen = torch.Generator().manual_seed(seed)
    hidden, inter = config["hidden_size"], config["intermediate_size"]
    head_dim = config["head_dim"]
    q_size = config["num_attention_heads"] * head_dim
    kv_size = config["num_key_value_heads"] * head_dim

    def rand(*shape: int) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen) * std).to(dtype)

    def norm() -> torch.Tensor:
        return (1.0 + torch.randn(hidden, generator=gen) * 0.1).to(dtype)

    weights = {"model.embed_tokens.weight": rand(config["vocab_size"], hidden), "model.norm.weight": norm()}
    for i in range(config["num_hidden_layers"]):
        p = f"model.layers.{i}."
        weights |= {
            p + "self_attn.q_proj.weight": rand(q_size, hidden),
            p + "self_attn.k_proj.weight": rand(kv_size, hidden),
            p + "self_attn.v_proj.weight": rand(kv_size, hidden),
            p + "self_attn.o_proj.weight": rand(hidden, q_size),
            p + "mlp.gate_proj.weight": rand(inter, hidden),
            p + "mlp.up_proj.weight": rand(inter, hidden),
            p + "mlp.down_proj.weight": rand(hidden, inter),
            p + "input_layernorm.weight": norm(),
            p + "post_attention_layernorm.weight": norm(),
        }
        if config["model_type"] == "qwen2":
            weights |= {
                p + "self_attn.q_proj.bias": rand(q_size),
                p + "self_attn.k_proj.bias": rand(kv_size),
                p + "self_attn.v_proj.bias": rand(kv_size),
            }
    if not config["tie_word_embeddings"]:
        weights["lm_head.weight"] = rand(config["vocab_size"], hidden)
    return weights


def write_tiny_checkpoint(
    path: str | Path, *, vocab_from_texts: list[str] | None = None, arch: str = "llama",
    vocab_size: int = 512, hidden_size: int = 64, intermediate_size: int = 128, num_layers: int = 2,
    num_heads: int = 4, num_kv_heads: int = 2, max_position_embeddings: int = 1024,
    tie_word_embeddings: bool = False, rope_scaling: dict[str, Any] | None = None,
    dtype: str = "float32", seed: int = 0, init_std: float = 0.1, num_shards: int = 1,
    model_vocab_size: int | None = None,
) -> Path:
    """Write a random `arch` ("llama", "mistral", "qwen2") checkpoint with a BPE tokenizer to `path`.

    The tokenizer is trained on `vocab_from_texts` (default: a few domain sentences), so those
    texts tokenize compactly. The model's vocab is the tokenizer's, padded up to `model_vocab_size`
    if given (as real checkpoints pad theirs; benchmarks use it for a realistic lm_head). Returns `path`.
    """
    if arch not in _ARCHITECTURES:
        raise ValueError(f"arch must be one of {sorted(_ARCHITECTURES)}, got {arch!r}")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_bpe_tokenizer(vocab_from_texts or DEFAULT_TEXTS, vocab_size)
    tokenizer.save(str(path / "tokenizer.json"))
    bos_id, eos_id = tokenizer.token_to_id(BOS), tokenizer.token_to_id(EOS)
    config: dict[str, Any] = {
        "architectures": [_ARCHITECTURES[arch]], "model_type": arch,
        "vocab_size": max(tokenizer.get_vocab_size(), model_vocab_size or 0), "hidden_size": hidden_size,
        "intermediate_size": intermediate_size, "num_hidden_layers": num_layers,
        "num_attention_heads": num_heads, "num_key_value_heads": num_kv_heads,
        "head_dim": hidden_size // num_heads, "hidden_act": "silu", "rms_norm_eps": 1e-6,
        "max_position_embeddings": max_position_embeddings, "tie_word_embeddings": tie_word_embeddings,
        "rope_theta": 10000.0, "rope_scaling": rope_scaling, "torch_dtype": dtype,
        "bos_token_id": bos_id, "eos_token_id": eos_id,
    }
    if arch == "mistral":
        config["sliding_window"] = None
    (path / "config.json").write_text(json.dumps(config, indent=2))
    (path / "generation_config.json").write_text(json.dumps({"bos_token_id": bos_id, "eos_token_id": eos_id}))
    (path / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD, "add_bos_token": True, "chat_template": CHAT_TEMPLATE},
        indent=2,
    ))
    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    weights = random_weights(config, seed, init_std, torch_dtype)
    _save_weights(path, weights, num_shards)
    return path


def _save_weights(path: Path, weights: dict[str, torch.Tensor], num_shards: int) -> None:
    if num_shards <= 1:
        save_file(weights, str(path / "model.safetensors"), metadata={"format": "pt"})
        return
    names = sorted(weights)
    weight_map: dict[str, str] = {}
    for shard in range(num_shards):
        file = f"model-{shard + 1:05d}-of-{num_shards:05d}.safetensors"
        part = {n: weights[n] for n in names[shard::num_shards]}
        save_file(part, str(path / file), metadata={"format": "pt"})
        weight_map |= dict.fromkeys(part, file)
    index = {"metadata": {"total_size": sum(t.numel() * t.element_size() for t in weights.values())},
             "weight_map": weight_map}
    (path / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
