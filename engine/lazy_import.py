"""A module imported on its first attribute access, for imports that cost seconds and are needed by few requests
(XGrammar, which imports transformers: ~1 CPU second that an engine core would otherwise spend before it is
ready). Thread-safe: Python's per-module import lock makes a second thread wait for the first one's import."""

from __future__ import annotations

import importlib
import types
from typing import Any


class LazyModule:
    def __init__(self, name: str) -> None:
        self._name = name
        self._module: types.ModuleType | None = None

    def __getattr__(self, attribute: str) -> Any:   # only for names this object lacks: the module's
        module = self._module
        if module is None:
            module = self._module = importlib.import_module(self._name)
        return getattr(module, attribute)

    @property
    def loaded(self) -> bool:
        return self._module is not None
