"""The batched, stateful logits-processor protocol (in the spirit of vLLM V1).

The engine owns one instance of each registered processor for its whole life. State follows
requests: `add_request` when a request joins the running batch (also after a preemption, with
the tokens generated so far so that the processor can replay its state), `remove_request` when it
leaves (finished, aborted, preempted). Each step the engine calls `apply` once per processor with
the batch logits and the row -> request mapping; `apply` works in place and must only touch the rows
of requests it constrains. After sampling, `accept_token` advances each constrained request.

Processors that mask build packed int32 bitmasks (see `engine.kernels.bitmask`) or cached tensors;
they never rebuild Python lists of token ids per step. A request whose row has no allowed token
left is finished by the engine with finish_reason "constraint_dead_end": a constraint is never
silently dropped.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import torch

from engine.outputs import ProcessorEvent
from engine.sampling_params import SamplingParams


class LogitsProcessor(ABC):
    #: Key of this processor's per-request arguments in `SamplingParams.extra_args`.
    name: str = "processor"

    @abstractmethod
    def validate_params(self, params: SamplingParams) -> None:
        """Raise InvalidRequestError if this processor's arguments in `params` are unusable.

        Called from `add_request`, before any compute (e.g. an invalid JSON schema)."""

    def prepare(self, params: SamplingParams) -> None:
        """Validate and build what a request will need before it is admitted (e.g. a KG constraint's view
        of its allowed set), so the step that admits it does not stall the batch. Called off the step
        thread: it may only add to caches the step also reads, never change what the step is using."""
        self.validate_params(params)

    @abstractmethod
    def add_request(
        self, request_id: str, params: SamplingParams, prompt_token_ids: Sequence[int],
        output_token_ids: Sequence[int],
    ) -> bool:
        """Start tracking a request; return True if this processor constrains it.

        `output_token_ids` is non-empty when a preempted request comes back: replay them."""

    @abstractmethod
    def remove_request(self, request_id: str) -> None:
        """Forget a request (finished, aborted or preempted). Unknown ids are ignored."""

    @abstractmethod
    def apply(self, logits: torch.Tensor, request_ids: Sequence[str | None]) -> None:
        """Mask `logits` [num_rows, vocab] in place. Row i belongs to request_ids[i] (None: padding)."""

    @abstractmethod
    def accept_token(self, request_id: str, token_id: int) -> None:
        """Advance the state of a constrained request by its sampled token."""

    def is_finished(self, request_id: str) -> bool:
        """True when the constraint is complete (e.g. the JSON value is closed): the engine stops it."""
        return False

    def pop_events(self, request_id: str) -> list[ProcessorEvent]:
        """Events recorded for this request since the last call (returned in RequestOutput.events)."""
        return []

    def stats(self) -> dict[str, float | dict[str, float]]:
        """Gauges the engine reports beside its own (`LLMEngine.stats`): numbers, or maps of numbers by a label
        such as the domain. Names start with the processor's `name`. Called on the step thread."""
        return {}
