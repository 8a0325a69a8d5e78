"""Errors a caller of the engine (in-process or across the engine-core process boundary) may see."""

from __future__ import annotations

from engine.sampling_params import InvalidRequestError


class EngineDeadError(RuntimeError):
    """The engine's step loop (or its process) failed: requests in flight end with this error.

    An engine-core client restarts its core; until the new one is ready, requests fail at once with it too."""


class ModelLoadError(InvalidRequestError):
    """A checkpoint the engine cannot load: unknown architecture, missing or corrupt files."""
