"""Something the service needs, but not to answer `/ready`: loaded once, by the warm-up thread after ready or by
the first request that needs it, whichever comes first; everyone else waits for that one load.

The domain detector is the case in point: MiniLM, the classifier and a linker per domain (~0.5 CPU s of a warm
start) serve only requests that name no domain. Such a request that comes before the warm-up thread has loaded it
waits for the load and is then served exactly as later ones are: never as if there were no detector (which would
leave it unverified). A load that fails raises in the caller (and is tried again by the next one).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class OnDemand(Generic[T]):
    """Stands in for the object `load()` returns: attribute access loads it first (once, from any thread)."""

    def __init__(self, load: Callable[[], T]) -> None:
        self._load = load
        self._loaded: T | None = None
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._loaded is not None

    def get(self) -> T:
        found = self._loaded
        if found is not None:
            return found
        with self._lock:   # a second caller waits here for the first one's load
            if self._loaded is None:
                self._loaded = self._load()
            return self._loaded

    def __getattr__(self, name: str) -> Any:   # only for names the stand-in itself lacks
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return getattr(self.get(), name)
