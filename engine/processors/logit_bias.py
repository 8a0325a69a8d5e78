"""OpenAI's `logit_bias`: add a per-request bias to chosen tokens' logits before sampling.

The request carries `extra_args["logit_bias"] = {token_id: bias}` (bias in [-100, 100], OpenAI's range:
-100 all but bans a token, 100 all but forces it). Each step adds the biases of every biased row in one
`index_put_` over the batch, so the cost is the number of biased tokens, not the vocabulary. The bias
is applied to the logits the sampler sees, before temperature, as OpenAI and vLLM do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from engine.outputs import ProcessorEvent
from engine.processors.logits_process import LogitsProcessor
from engine.sampling_params import InvalidRequestError, SamplingParams

MAX_BIASED_TOKENS = 300   # OpenAI's limit per request
BIAS_RANGE = (-100.0, 100.0)


def parse_logit_bias(value: Any, vocab_size: int) -> dict[int, float]:
    """{token id: bias} from the request's mapping (keys may be strings, as JSON writes them)."""
    if not isinstance(value, Mapping):
        raise InvalidRequestError("logit_bias must map token ids to biases")
    if len(value) > MAX_BIASED_TOKENS:
        raise InvalidRequestError(f"logit_bias may name at most {MAX_BIASED_TOKENS} tokens, got {len(value)}")
    biases: dict[int, float] = {}
    for key, bias in value.items():
        try:
            token_id = int(key)
        except (TypeError, ValueError):
            raise InvalidRequestError(f"logit_bias key {key!r} is not a token id") from None
        if not 0 <= token_id < vocab_size:
            raise InvalidRequestError(f"logit_bias token id {token_id} is outside the vocabulary [0, {vocab_size})")
        if isinstance(bias, bool) or not isinstance(bias, int | float) or not BIAS_RANGE[0] <= bias <= BIAS_RANGE[1]:
            raise InvalidRequestError(f"logit_bias for token {token_id} must be a number in [-100, 100], got {bias!r}")
        biases[token_id] = float(bias)
    return biases


class LogitBiasProcessor(LogitsProcessor):
    name = "logit_bias"

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size
        self._biases: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}  # request -> (token ids [k], biases [k])
        self._events: dict[str, list[ProcessorEvent]] = {}

    def validate_params(self, params: SamplingParams) -> None:
        if self.name in params.extra_args:
            parse_logit_bias(params.extra_args[self.name], self.vocab_size)

    def add_request(self, request_id: str, params: SamplingParams, prompt_token_ids: Sequence[int],
                    output_token_ids: Sequence[int]) -> bool:
        biases = parse_logit_bias(params.extra_args.get(self.name) or {}, self.vocab_size)
        if not biases:
            return False
        self._biases[request_id] = (torch.tensor(list(biases), dtype=torch.int64),
                                    torch.tensor(list(biases.values()), dtype=torch.float32))
        if not output_token_ids:  # first admission, not a return after preemption
            self._events[request_id] = [ProcessorEvent(self.name, 0, "biased", {"tokens": len(biases)})]
        return True

    def remove_request(self, request_id: str) -> None:
        self._biases.pop(request_id, None)

    def apply(self, logits: torch.Tensor, request_ids: Sequence[str | None]) -> None:
        rows, tokens, values = [], [], []
        for row, request_id in enumerate(request_ids):
            entry = self._biases.get(request_id) if request_id is not None else None
            if entry is not None:
                rows.append(torch.full_like(entry[0], row))
                tokens.append(entry[0])
                values.append(entry[1])
        if not rows:
            return
        index = (torch.cat(rows).to(logits.device), torch.cat(tokens).to(logits.device))
        logits.index_put_(index, torch.cat(values).to(device=logits.device, dtype=logits.dtype), accumulate=True)

    def accept_token(self, request_id: str, token_id: int) -> None:
        return None

    def pop_events(self, request_id: str) -> list[ProcessorEvent]:
        return self._events.pop(request_id, [])
