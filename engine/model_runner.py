"""Turns a scheduled batch into tensors, runs the model over the paged KV cache, returns logits."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.config import ModelConfig
from engine.layers.attention import AttentionMetadata
from engine.models.llama import LlamaForCausalLM
from engine.scheduler import ScheduledBatch


@dataclass(slots=True)
class StepLogits:
    logits: torch.Tensor          # fp32 [M, vocab], one row per sequence that samples this step
    sample_rows: list[int]        # index into batch.seqs of each logits row


def kv_bytes_per_block(config: ModelConfig, block_size: int, dtype: torch.dtype) -> int:
    per_token = 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim
    return per_token * block_size * torch.empty(0, dtype=dtype).element_size()


class ModelRunner:
    def __init__(
        self, model: LlamaForCausalLM, num_blocks: int, block_size: int, dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        self.model = model
        self.block_size = block_size
        self.device = device
        config = model.config
        shape = (num_blocks, block_size, config.num_key_value_heads, config.head_dim)
        # one k and one v pool per layer: [num_blocks, block_size, Hkv, D]
        for layer in model.attention_layers():
            layer.k_cache = torch.zeros(shape, dtype=dtype, device=device)
            layer.v_cache = torch.zeros(shape, dtype=dtype, device=device)

    def _to_device(self, values: list[int], dtype: torch.dtype = torch.int64) -> torch.Tensor:
        return torch.tensor(values, dtype=dtype).to(self.device, non_blocking=True)

    def _block_table_tensor(self, tables: list[list[int]]) -> torch.Tensor:
        width = max((len(t) for t in tables), default=0)
        padded = [t + [0] * (width - len(t)) for t in tables]
        return torch.tensor(padded, dtype=torch.int32).reshape(len(tables), width).to(self.device)

    @torch.inference_mode()
    def execute(self, batch: ScheduledBatch) -> StepLogits:
        bs = self.block_size
        input_ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        decode_tables: list[list[int]] = []
        decode_context: list[int] = []
        sample_rows: list[int] = []
        sample_token_index: list[int] = []

        # decodes sorted by context length: the torch decode path groups similar lengths together
        decode_rows = sorted(range(batch.num_decodes), key=lambda r: batch.seqs[r].num_computed_tokens)
        for row in decode_rows:
            seq = batch.seqs[row]
            pos = seq.num_computed_tokens
            input_ids.append(seq.token_at(pos))
            positions.append(pos)
            slots.append(seq.block_table[pos // bs] * bs + pos % bs)
            decode_tables.append(seq.block_table)
            decode_context.append(pos + 1)
            sample_token_index.append(len(sample_rows))
            sample_rows.append(row)

        positions_t = self._to_device(positions)
        slots_t = self._to_device(slots)
        prefill_tables: list[list[int]] = []
        query_lens: list[int] = []
        context_lens: list[int] = []
        prefill_pos: list[torch.Tensor] = [positions_t]
        prefill_slots: list[torch.Tensor] = [slots_t]
        offset = batch.num_decodes
        for row in range(batch.num_decodes, len(batch.seqs)):
            seq = batch.seqs[row]
            start, chunk = seq.num_computed_tokens, batch.num_new_tokens[row]
            tokens = seq.token_slice(start, start + chunk)
            input_ids.extend(tokens)
            pos = torch.arange(start, start + chunk, device=self.device)
            table = self._to_device(seq.block_table)
            prefill_pos.append(pos)
            prefill_slots.append(table[pos // bs] * bs + pos % bs)  # vectorised slot mapping
            prefill_tables.append(seq.block_table)
            query_lens.append(chunk)
            context_lens.append(start + chunk)
            offset += chunk
            if start + chunk == seq.num_tokens:  # prompt complete: its last token gives the next logits
                sample_rows.append(row)
                sample_token_index.append(offset - 1)

        meta = AttentionMetadata(
            slot_mapping=torch.cat(prefill_slots) if len(prefill_slots) > 1 else slots_t,
            num_decode_tokens=batch.num_decodes,
            decode_block_tables=self._block_table_tensor(decode_tables),
            decode_context_lens=self._to_device(decode_context, torch.int32),
            prefill_block_tables=self._block_table_tensor(prefill_tables),
            prefill_query_lens=query_lens,
            prefill_context_lens=context_lens,
        )
        all_positions = torch.cat(prefill_pos) if len(prefill_pos) > 1 else positions_t
        hidden = self.model(self._to_device(input_ids), all_positions, meta)   # [N, hidden]
        if len(sample_token_index) != hidden.shape[0]:
            hidden = hidden[self._to_device(sample_token_index)]                  # [M, hidden]
        return StepLogits(self.model.compute_logits(hidden), sample_rows)
