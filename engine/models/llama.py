"""Llama-family decoder (Llama, Mistral, Qwen2) on the paged KV cache.

q/k/v and gate/up projections are fused into one matmul each; weights keep Hugging Face's names
otherwise so `load_weights` is a short rename table.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import nn

from engine.config import ModelConfig, ModelLoadError
from engine.layers.attention import AttentionMetadata, PagedAttention
from engine.layers.linear import BucketedLinear, warm_up_buckets
from engine.layers.rms_norm import RMSNorm
from engine.layers.rotary import RotaryEmbedding


class LlamaAttention(nn.Module):
    def __init__(self, config: ModelConfig, rotary: RotaryEmbedding, dtype: torch.dtype) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        self.qkv_proj = BucketedLinear(
            config.hidden_size, self.q_size + 2 * self.kv_size, bias=config.attention_bias, dtype=dtype
        )
        self.o_proj = BucketedLinear(self.q_size, config.hidden_size, bias=False, dtype=dtype)
        self.rotary = rotary
        self.attn = PagedAttention(self.num_heads, self.num_kv_heads, self.head_dim)

    def forward(self, positions: torch.Tensor, x: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        n = x.shape[0]
        qkv = self.qkv_proj(x)                                           # [N, (H + 2 Hkv) * D]
        heads = self.num_heads + self.num_kv_heads
        # q and k heads are adjacent in the fused projection: rotate them in one call
        qk = self.rotary(positions, qkv[:, : self.q_size + self.kv_size].view(n, heads, self.head_dim))
        q, k = qk.split([self.num_heads, self.num_kv_heads], dim=1)     # [N, H, D], [N, Hkv, D]
        v = qkv[:, self.q_size + self.kv_size :].view(n, self.num_kv_heads, self.head_dim)
        out = self.attn(q, k, v, meta)                   # [N, H, D]
        return self.o_proj(out.reshape(n, self.q_size))


class LlamaMLP(nn.Module):
    def __init__(self, config: ModelConfig, dtype: torch.dtype) -> None:
        super().__init__()
        self.intermediate_size = config.intermediate_size
        self.gate_up_proj = BucketedLinear(config.hidden_size, 2 * config.intermediate_size, bias=False, dtype=dtype)
        self.down_proj = BucketedLinear(config.intermediate_size, config.hidden_size, bias=False, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).split(self.intermediate_size, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class LlamaDecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig, rotary: RotaryEmbedding, dtype: torch.dtype) -> None:
        super().__init__()
        self.self_attn = LlamaAttention(config, rotary, dtype)
        self.mlp = LlamaMLP(config, dtype)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps, dtype)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps, dtype)

    def forward(self, positions: torch.Tensor, x: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        x = x + self.self_attn(positions, self.input_layernorm(x), meta)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaForCausalLM(nn.Module):
    def __init__(self, config: ModelConfig, max_positions: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.config = config
        rotary = RotaryEmbedding(config.head_dim, max_positions, config.rope_theta, config.rope_scaling, dtype)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, dtype=dtype)
        self.layers = nn.ModuleList(LlamaDecoderLayer(config, rotary, dtype) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps, dtype)
        self.lm_head = BucketedLinear(config.hidden_size, config.vocab_size, bias=False, dtype=dtype)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        """input_ids, positions int64 [N] -> hidden states [N, hidden]."""
        x = self.embed_tokens(input_ids)
        for layer in self.layers:
            x = layer(positions, x, meta)
        return self.norm(x)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """[M, hidden] -> fp32 logits [M, vocab]."""
        return self.lm_head(hidden).float()

    def warm_up_matmuls(self, max_step_tokens: int, max_sampled_rows: int) -> int:
        """Meet every matmul shape a step can run (`engine.layers.linear.warm_up_buckets`): the layers see up to a
        step's tokens, the LM head only the rows that sample (one per running sequence)."""
        body = [m for m in self.layers.modules() if isinstance(m, BucketedLinear)]
        return (warm_up_buckets(body, max_step_tokens)
                + warm_up_buckets([self.lm_head], min(max_sampled_rows, max_step_tokens)))

    def attention_layers(self) -> list[PagedAttention]:
        return [layer.self_attn.attn for layer in self.layers]

    @torch.inference_mode()
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]], source: str) -> None:
        """Copy Hugging Face-named tensors in, fusing q/k/v and gate/up; `source` names the files in errors."""
        params = dict(self.named_parameters())
        fused = {  # HF name part -> (our name part, shard index)
            "q_proj": ("qkv_proj", 0), "k_proj": ("qkv_proj", 1), "v_proj": ("qkv_proj", 2),
            "gate_proj": ("gate_up_proj", 0), "up_proj": ("gate_up_proj", 1),
        }
        loaded: set[str] = set()
        for hf_name, tensor in weights:
            if "rotary_emb.inv_freq" in hf_name:
                continue
            name = hf_name.removeprefix("model.")
            if name == "lm_head.weight" and self.config.tie_word_embeddings:
                continue
            shard = None
            for part, (ours, index) in fused.items():
                if f".{part}." in name:
                    name, shard = name.replace(f".{part}.", f".{ours}."), index
                    break
            if name not in params:
                raise ModelLoadError(f"unexpected tensor {hf_name!r} in {source}")
            param = params[name]
            target = param.data if shard is None else self._shard_view(param.data, name, shard)
            if target.shape != tensor.shape:
                raise ModelLoadError(
                    f"tensor {hf_name!r} in {source} has shape {tuple(tensor.shape)}, expected {tuple(target.shape)}"
                )
            target.copy_(tensor.to(target.dtype))
            loaded.add(name if shard is None else f"{name}#{shard}")
        expected = {n for n in params if "qkv_proj" not in n and "gate_up_proj" not in n}
        expected |= {f"{n}#{i}" for n in params if "qkv_proj" in n for i in range(3)}
        expected |= {f"{n}#{i}" for n in params if "gate_up_proj" in n for i in range(2)}
        if self.config.tie_word_embeddings:
            expected.discard("lm_head.weight")
        missing = sorted(expected - loaded)
        if missing:
            raise ModelLoadError(f"{source} lacks {len(missing)} tensors, e.g. {missing[:3]}")

    def _shard_view(self, data: torch.Tensor, name: str, shard: int) -> torch.Tensor:
        """The rows of a fused weight/bias that one HF projection fills."""
        if "qkv_proj" in name:
            attn = self.layers[0].self_attn
            sizes = [attn.q_size, attn.kv_size, attn.kv_size]
        else:
            sizes = [self.config.intermediate_size] * 2
        start = sum(sizes[:shard])
        return data[start : start + sizes[shard]]
