"""Turns a scheduled batch into tensors, runs the model over the paged KV cache, returns logits."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.block_manager import BlockManager
from engine.kernels.cpu_paged_attention import native_decode_available
from engine.kv_cache import KVCache
from engine.layers.attention import AttentionMetadata
from engine.models.llama import LlamaForCausalLM
from engine.scheduler import ScheduledBatch


@dataclass(slots=True)
class StepLogits:
    logits: torch.Tensor          # fp32 [M, vocab], one row per sequence that samples this step
    sample_rows: list[int]        # index into batch.seqs of each logits row


class ModelRunner:
    def __init__(self, model: LlamaForCausalLM, kv_cache: KVCache, block_manager: BlockManager) -> None:
        self.model = model
        self.kv_cache = kv_cache
        self.block_manager = block_manager
        self.block_size = kv_cache.spec.block_size
        self.num_full_blocks = kv_cache.num_full
        self.device = kv_cache.layers[0].k.device
        # each layer reads and writes its own pools: k, v [num_full, block_size, Hkv, D] (+ quantized blocks)
        for attention, pools in zip(model.attention_layers(), kv_cache.layers, strict=True):
            attention.k_cache, attention.v_cache, attention.quantized = pools.k, pools.v, pools.quantized
            attention.residual_tokens = kv_cache.spec.residual_tokens
        # build or load the native CPU decode kernel now, at engine start, not in the first request's step
        self.native_decode = self.device.type == "cpu" and native_decode_available()

    def _to_device(self, values: list[int], dtype: torch.dtype = torch.int64) -> torch.Tensor:
        return torch.tensor(values, dtype=dtype).to(self.device, non_blocking=True)

    def _block_table_tensor(self, tables: list[list[int]]) -> torch.Tensor:
        width = max((len(t) for t in tables), default=0)
        padded = [t + [0] * (width - len(t)) for t in tables]
        return torch.tensor(padded, dtype=torch.int32).reshape(len(tables), width).to(self.device)

    @torch.inference_mode()
    def execute(self, batch: ScheduledBatch) -> StepLogits:
        """Copy between tiers what the scheduler's allocations asked for, then run the batch."""
        ops = self.block_manager.take_ops()
        if ops:
            self.kv_cache.apply(ops)
        return self._forward(batch)

    def _forward(self, batch: ScheduledBatch) -> StepLogits:
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
        quantized = _QuantizedWrites(batch.num_decodes, self.num_full_blocks, bs, self.device)
        for row in range(batch.num_decodes, len(batch.seqs)):
            seq = batch.seqs[row]
            start, chunk = seq.num_computed_tokens, batch.num_new_tokens[row]
            tokens = seq.token_slice(start, start + chunk)
            input_ids.extend(tokens)
            pos = torch.arange(start, start + chunk, device=self.device)
            table = self._to_device(seq.block_table)
            prefill_pos.append(pos)
            if self.kv_cache.num_quantized:
                pos = quantized.split(seq.block_table, start, chunk, offset, pos)   # tokens of full-precision blocks
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
            **quantized.metadata(),
        )
        all_positions = torch.cat(prefill_pos) if len(prefill_pos) > 1 else positions_t
        hidden = self.model(self._to_device(input_ids), all_positions, meta)   # [N, hidden]
        if len(sample_token_index) != hidden.shape[0]:
            hidden = hidden[self._to_device(sample_token_index)]                  # [M, hidden]
        return StepLogits(self.model.compute_logits(hidden), sample_rows)


class _QuantizedWrites:
    """Which prefill tokens go into blocks quantized on the way in (the block manager's choice, read
    from the block table: a quantized id inside a chunk means the chunk writes that block whole)."""

    def __init__(self, num_decodes: int, num_full: int, block_size: int, device: torch.device) -> None:
        self.num_decodes = num_decodes
        self.num_full = num_full
        self.block_size = block_size
        self.device = device
        self.first_tokens: list[int] = []
        self.block_ids: list[int] = []
        self.chunks: list[tuple[int, int, torch.Tensor | None]] = []   # (offset, length, full-precision mask)

    def split(self, table: list[int], start: int, chunk: int, offset: int, positions: torch.Tensor) -> torch.Tensor:
        """Record the chunk's quantized blocks; return the positions of its full-precision tokens."""
        bs = self.block_size
        blocks = [i for i in range(start // bs, (start + chunk - 1) // bs + 1) if table[i] >= self.num_full]
        if not blocks:
            self.chunks.append((offset, chunk, None))
            return positions
        keep = torch.ones(chunk, dtype=torch.bool, device=self.device)
        for index in blocks:
            first = index * bs - start
            assert 0 <= first and first + bs <= chunk, "a quantized block must be written whole"
            self.first_tokens.append(offset + first)
            self.block_ids.append(table[index] - self.num_full)
            keep[first : first + bs] = False
        self.chunks.append((offset, chunk, keep))
        return positions[keep]

    def metadata(self) -> dict[str, torch.Tensor]:
        if not self.first_tokens:
            return {}
        full_index = [torch.arange(self.num_decodes, device=self.device)]
        for offset, length, keep in self.chunks:
            local = torch.arange(length, device=self.device) if keep is None else keep.nonzero().squeeze(1)
            full_index.append(offset + local)
        return {
            "full_token_index": torch.cat(full_index),
            "quantized_first_tokens": torch.tensor(self.first_tokens, dtype=torch.int64, device=self.device),
            "quantized_block_ids": torch.tensor(self.block_ids, dtype=torch.int64, device=self.device),
        }
