"""Model configuration (parsed from a Hugging Face config.json) and engine configuration.

torch-free at import, and so is parsing a config.json: an API process reads both (the engine settings it checks
before launching its engine core, the intent priorities of its metrics) and never loads torch; the dtype becomes
a torch.dtype only where the engine is built (`ModelConfig.torch_dtype`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.checkpoint import read_json, token_ids
from engine.errors import ModelLoadError

if TYPE_CHECKING:
    import torch

SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM")

# KV cache settings (engine/kv_spec.py turns them into a layout): storage precision and tiers
KV_CACHE_DTYPES = ("auto", "int8", "int4")      # auto: the model dtype
KV_CACHE_STRATEGIES = ("static", "tiered")      # tiered: evicted prefix blocks go to a cold file on disk
KV_CACHE_GROUP_SIZES = (32, 64)
DEFAULT_BLOCK_SIZE = 16

# accepted spellings -> torch's name for the dtype
_DTYPES = {
    "float32": "float32", "fp32": "float32",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float16": "float16", "fp16": "float16", "half": "float16",
}


def canonical_dtype(name: str) -> str:
    """The canonical name ("float32", "bfloat16", "float16") of a dtype spelling, without importing torch."""
    try:
        return _DTYPES[name]
    except KeyError:
        raise ModelLoadError(f"unsupported dtype {name!r}; use one of {sorted(_DTYPES)}") from None


def parse_dtype(name: str | torch.dtype) -> torch.dtype:
    import torch

    if isinstance(name, torch.dtype):
        return name
    return getattr(torch, canonical_dtype(name))


@dataclass(slots=True)
class ModelConfig:
    """The fields of a Llama-family config.json the model needs."""

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict[str, Any] | None
    max_position_embeddings: int
    tie_word_embeddings: bool
    attention_bias: bool
    checkpoint_dtype: str         # canonical name ("float32", "bfloat16", ...)
    bos_token_id: int | None
    eos_token_ids: list[int]
    sliding_window: int | None

    @classmethod
    def from_hf_dict(cls, raw: dict[str, Any]) -> ModelConfig:
        architectures = raw.get("architectures") or []
        arch = architectures[0] if architectures else f"<none; model_type={raw.get('model_type')!r}>"
        if arch not in SUPPORTED_ARCHITECTURES:
            raise ModelLoadError(
                f"unsupported architecture {arch!r}; supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
            )
        heads = int(raw["num_attention_heads"])
        hidden = int(raw["hidden_size"])
        # transformers 5 writes rope settings under rope_parameters; older files use rope_theta/rope_scaling
        rope_params = dict(raw.get("rope_parameters") or {})
        rope_theta = float(rope_params.pop("rope_theta", raw.get("rope_theta", 10000.0)))
        rope_scaling = raw.get("rope_scaling") or rope_params or None
        if rope_scaling is not None:
            rope_type = rope_scaling.get("rope_type", rope_scaling.get("type", "default"))
            if rope_type not in ("default", "llama3"):
                raise ModelLoadError(f"unsupported rope_scaling type {rope_type!r}; supported: default, llama3")
            rope_scaling = None if rope_type == "default" else dict(rope_scaling, rope_type=rope_type)
        eos_ids = token_ids(raw.get("eos_token_id"))
        use_sliding = raw.get("use_sliding_window", arch == "MistralForCausalLM")
        return cls(
            architecture=arch,
            vocab_size=int(raw["vocab_size"]),
            hidden_size=hidden,
            intermediate_size=int(raw["intermediate_size"]),
            num_hidden_layers=int(raw["num_hidden_layers"]),
            num_attention_heads=heads,
            num_key_value_heads=int(raw.get("num_key_value_heads") or heads),
            head_dim=int(raw.get("head_dim") or hidden // heads),
            rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
            rope_theta=rope_theta,
            rope_scaling=rope_scaling,
            max_position_embeddings=int(raw.get("max_position_embeddings", 2048)),
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
            # Qwen2 always has q/k/v biases; Llama may via attention_bias
            attention_bias=arch == "Qwen2ForCausalLM" or bool(raw.get("attention_bias", False)),
            checkpoint_dtype=canonical_dtype(raw.get("torch_dtype") or raw.get("dtype") or "float32"),
            bos_token_id=raw.get("bos_token_id"),
            eos_token_ids=eos_ids,
            sliding_window=int(raw["sliding_window"]) if use_sliding and raw.get("sliding_window") else None,
        )

    @property
    def torch_dtype(self) -> torch.dtype:
        """The checkpoint's dtype as torch's (imports torch)."""
        return parse_dtype(self.checkpoint_dtype)


def load_model_config(path: Path) -> ModelConfig:
    try:
        return ModelConfig.from_hf_dict(read_json(path / "config.json"))
    except KeyError as exc:
        raise ModelLoadError(f"{path / 'config.json'} lacks required field {exc.args[0]!r}") from exc


def _default_intent_priorities() -> dict[str, int]:
    # lower = more urgent; interactive clinical / trading work before batch-like code completion
    return {"medical-diagnosis": 0, "fin-risk": 0, "legal-advice": 1, "code-completion": 2}


@dataclass(slots=True)
class EngineConfig:
    # "auto": bf16 for an fp32/fp16 checkpoint where the hardware runs bf16 fast (engine.precision), else
    # the checkpoint's; None: the checkpoint's torch_dtype; or a name ("float32", "bfloat16", ...)
    dtype: str | None = "auto"
    device: str = "cpu"
    max_model_len: int | None = None         # None: the model's max_position_embeddings (capped below)
    max_model_len_cap: int = 4096            # keeps the default KV pool small for huge-context models
    # None: 16 for kv_cache_dtype=auto; kv_cache_group_size for int8/int4 (keys are quantized per channel
    # over one block of tokens, so a block is exactly one key group)
    block_size: int | None = None
    num_kv_blocks: int | None = None         # None: fit kv_cache_memory_bytes, capped at max_num_seqs full-length seqs
    kv_cache_memory_bytes: int = 512 * 2**20
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048       # per-step token budget (decodes + prefill chunks)
    enable_prefix_caching: bool = True
    intent_priorities: dict[str, int] = field(default_factory=_default_intent_priorities)
    default_priority: int = 1
    # a waiting request gains one priority class per `aging_seconds` waited, so none starves
    aging_seconds: float = 2.0
    num_threads: int | None = None           # torch CPU threads; None: leave torch's default
    seed: int = 0                            # for requests without their own seed
    stats_window: int = 1000                 # recent requests kept for latency lists in stats()
    # KV cache (see engine/kv_spec.py, engine/block_manager.py, engine/kv_cold.py)
    kv_cache_dtype: str = "auto"             # auto (model dtype) | int8 | int4: how blocks older than the window are kept
    kv_cache_strategy: str = "static"        # static | tiered (adds the cold tier on disk for evicted prefix blocks)
    kv_cache_group_size: int = 32            # int8/int4: tokens per key group (= block_size), channels per value group
    # int8/int4: KIVI's residual. Tokens are quantized this many at a time, so the newest (n mod this) tokens of
    # a sequence are always in the model dtype; a multiple of kv_cache_group_size
    kv_cache_residual_tokens: int = 32
    kv_cache_cold_dir: str | None = None     # tiered: folder of the cold file (e.g. under the service's data directory)
    kv_cache_cold_bytes: int = 256 * 2**20   # tiered: size bound of the cold file

    @property
    def kv_block_size(self) -> int:
        """Tokens per KV block: `block_size`, or its default for the KV cache dtype when unset."""
        if self.block_size is not None:
            return self.block_size
        return DEFAULT_BLOCK_SIZE if self.kv_cache_dtype == "auto" else self.kv_cache_group_size

    def validate(self) -> None:
        if self.block_size is not None and (self.block_size < 1 or self.block_size & (self.block_size - 1)):
            raise ValueError(f"block_size must be a power of two, got {self.block_size}")
        if self.max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be >= 1, got {self.max_num_seqs}")
        if self.max_num_batched_tokens < 1:
            raise ValueError(f"max_num_batched_tokens must be >= 1, got {self.max_num_batched_tokens}")
        if self.num_kv_blocks is not None and self.num_kv_blocks < 1:
            raise ValueError(f"num_kv_blocks must be >= 1, got {self.num_kv_blocks}")
        if self.aging_seconds <= 0:
            raise ValueError(f"aging_seconds must be > 0, got {self.aging_seconds}")
        self._validate_kv_cache()

    def _validate_kv_cache(self) -> None:
        """Reject settings that cannot work together, naming the fix (model-dependent checks: kv_spec)."""
        if self.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ValueError(f"kv_cache_dtype must be one of {', '.join(KV_CACHE_DTYPES)}, got {self.kv_cache_dtype!r}")
        if self.kv_cache_strategy not in KV_CACHE_STRATEGIES:
            raise ValueError(
                f"kv_cache_strategy must be one of {', '.join(KV_CACHE_STRATEGIES)}, got {self.kv_cache_strategy!r}")
        if self.kv_cache_dtype != "auto":
            if self.kv_cache_group_size not in KV_CACHE_GROUP_SIZES:
                raise ValueError(f"kv_cache_group_size must be 32 or 64, got {self.kv_cache_group_size}")
            if self.kv_block_size != self.kv_cache_group_size:
                raise ValueError(
                    f"kv_cache_dtype={self.kv_cache_dtype} quantizes keys per channel over one block of tokens, so "
                    f"block_size must equal kv_cache_group_size ({self.kv_cache_group_size}), got {self.block_size}; "
                    "leave block_size unset to get it")
            residual = self.kv_cache_residual_tokens
            if residual < self.kv_cache_group_size or residual % self.kv_cache_group_size:
                raise ValueError(f"kv_cache_residual_tokens must be a positive multiple of kv_cache_group_size "
                                 f"({self.kv_cache_group_size}), got {residual}")
        if self.kv_cache_strategy == "tiered":
            if not self.enable_prefix_caching:
                raise ValueError("kv_cache_strategy=tiered keeps evicted prefix-cache blocks on disk: "
                                 "it needs enable_prefix_caching=True")
            if not self.kv_cache_cold_dir:
                raise ValueError("kv_cache_strategy=tiered needs kv_cache_cold_dir (a folder for the cold file)")
            if self.kv_cache_cold_bytes < 1:
                raise ValueError(f"kv_cache_cold_bytes must be > 0, got {self.kv_cache_cold_bytes}")
