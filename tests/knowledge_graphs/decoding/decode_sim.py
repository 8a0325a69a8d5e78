"""A simulated decode loop for driving KGConstraintProcessor without an engine (greedy over masked logits)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from tokenizers import Tokenizer

from engine.outputs import ProcessorEvent
from engine.sampling_params import SamplingParams
from knowledge_graphs.decoding.constraint import KGConstraintProcessor


@dataclass(slots=True)
class DecodeResult:
    ids: list[int]
    text: str
    finish_reason: str
    events: list[ProcessorEvent]


LogitsFn = Callable[[list[int]], torch.Tensor]   # generated ids so far -> logits [vocab]


def eos_id(tokenizer: Tokenizer) -> int:
    found = tokenizer.token_to_id("</s>")
    assert found is not None
    return found


def decode_loop(
    processor: KGConstraintProcessor | None, tokenizer: Tokenizer, logits_fn: LogitsFn, *,
    allowed: list[str] | None = None, steps: int = 24, finish_steps: int = 16, request_id: str = "r",
) -> DecodeResult:
    """Greedy decoding for `steps` tokens, then up to `finish_steps` more with EOS strongly preferred
    (a text must end by EOS for the guarantee)."""
    eos = eos_id(tokenizer)
    if processor is not None:
        params = SamplingParams(extra_args={"kg_constraint": {"domain": "medical", "allowed_entity_ids": allowed or []}})
        processor.validate_params(params)
        assert processor.add_request(request_id, params, [], [])
    ids: list[int] = []
    reason = "length"
    for step in range(steps + finish_steps):
        logits = logits_fn(ids).clone().unsqueeze(0)          # [1, vocab]
        if step >= steps:
            logits[0, eos] = logits.max() + 100.0
        else:
            logits[0, eos] = float("-inf")
        if processor is not None:
            processor.apply(logits, [request_id])
        if not torch.isfinite(logits.max()):
            reason = "constraint_dead_end"
            break
        token = int(logits[0].argmax())
        if token == eos:
            reason = "stop"
            break
        ids.append(token)
        if processor is not None:
            processor.accept_token(request_id, token)
    events = []
    if processor is not None:
        events = processor.pop_events(request_id)
        processor.remove_request(request_id)
    return DecodeResult(ids, tokenizer.decode(ids), reason, events)
