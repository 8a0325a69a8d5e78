"""Errors a caller of the engine (in-process or across the engine-core process boundary) may see."""

from __future__ import annotations

from typing import Any

from engine.sampling_params import InvalidRequestError


class EngineDeadError(RuntimeError):
    """The engine's step loop (or its process) failed: requests in flight end with this error.

    An engine-core client restarts its core; until the new one is ready, requests fail at once with it too."""


class ModelLoadError(InvalidRequestError):
    """A checkpoint the engine cannot load: unknown architecture, missing or corrupt files."""


class ContextLengthExceeded(InvalidRequestError):
    """A prompt that leaves no room in the model's context for one generated token."""

    def __init__(self, prompt_tokens: int, max_model_len: int) -> None:
        super().__init__(f"prompt has {prompt_tokens} tokens; this model's context holds {max_model_len} "
                         "(prompt plus at least one generated token)")
        self.prompt_tokens, self.max_model_len = prompt_tokens, max_model_len


def refusal_to_wire(exc: InvalidRequestError) -> list[Any]:
    """The tail of an "err" message: the text, and the structured reason a client rebuilds the error from."""
    if isinstance(exc, ContextLengthExceeded):
        return [str(exc), {"context_length": [exc.prompt_tokens, exc.max_model_len]}]
    return [str(exc)]


def refusal_from_wire(tail: list[Any]) -> InvalidRequestError:
    """The error an "err" message's tail (`refusal_to_wire`) stands for."""
    reason = tail[1] if len(tail) > 1 and isinstance(tail[1], dict) else {}
    if "context_length" in reason:
        prompt_tokens, max_model_len = reason["context_length"]
        return ContextLengthExceeded(int(prompt_tokens), int(max_model_len))
    return InvalidRequestError(tail[0])
