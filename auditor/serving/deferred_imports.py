"""Modules whose import is expensive and that no request needs before it names them, imported after the rest of
the service has loaded rather than on the way to `/ready`.

simple-icd-10-cm parses the whole ICD-10-CM XML table when it is imported (1.4 CPU seconds, a third of an API
process's start), and the validators use it only for sentences that quote an ICD-10-CM code. `defer()` puts a
stand-in into `sys.modules` before the validators import it; the stand-in imports the real module on its first
attribute access (whichever thread asks first, the others wait on the same lock), and `load_deferred()`, run by
`auditor serve` on a background thread once its ready path is done, does it ahead of most requests; `/ready` does
not wait for it, so a request that needs one of them in the first second or two after ready waits for its import
(and is served as it would be later).

eyecite (~1 CPU second of regex compiling on import) is imported inside the functions that use it, through
`rules.validators.legal.eyecite_import.load` (one thread imports it, the others wait: its modules import each other
in a cycle, which Python's per-module import locks do not make safe between threads); `PRELOADED` names such
modules, whose `load()` `load_deferred` calls. importlib's LazyLoader does what `defer` does but is not
thread-safe in Python 3.11.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import sys
import threading
import types
from collections.abc import Callable, Iterable
from typing import Any

DEFERRED = ("simple_icd_10_cm",)
PRELOADED = ("rules.validators.legal.eyecite_import",)   # modules whose `load()` imports what they guard

logger = logging.getLogger("auditor")


class _Deferred(types.ModuleType):
    """Stands in for module `name` until its first attribute access, then delegates to the real one."""

    def __init__(self, spec: importlib.machinery.ModuleSpec) -> None:
        super().__init__(spec.name)
        # what finding the module or a submodule reads, without loading it (find_spec, `import name.sub`)
        self.__spec__, self.__file__ = spec, spec.origin
        if spec.submodule_search_locations is not None:
            self.__path__ = list(spec.submodule_search_locations)
        self._real: types.ModuleType | None = None
        self._lock = threading.Lock()

    def __getattr__(self, attribute: str) -> Any:   # only for attributes the stand-in itself lacks
        if attribute.startswith("__") and attribute.endswith("__"):
            raise AttributeError(attribute)   # import machinery and introspection: not worth a load
        return getattr(self.load(), attribute)

    def load(self) -> types.ModuleType:
        real = self._real
        if real is not None:
            return real
        with self._lock:
            if self._real is None:
                if sys.modules.get(self.__name__) is self:
                    del sys.modules[self.__name__]   # so that the import below runs the real module
                self._real = importlib.import_module(self.__name__)
            return self._real


def defer(names: Iterable[str] = DEFERRED) -> None:
    """Stand-ins for `names` (those not imported yet), so that importing them costs nothing until first use."""
    for name in names:
        spec = importlib.util.find_spec(name) if name not in sys.modules else None
        if spec is not None:
            sys.modules[name] = _Deferred(spec)


def load_deferred(preloaded: Iterable[str] = PRELOADED) -> None:
    """Import every deferred module now (`defer`'s stand-ins; a module imported for real is left alone), and the
    modules named in `preloaded`."""
    for module in list(sys.modules.values()):
        if isinstance(module, _Deferred):
            module.load()
    for name in preloaded:
        importlib.import_module(name).load()


def start_loading_deferred(then: Callable[[], None] | None = None, *,
                           first: Iterable[Callable[[], object]] = ()) -> threading.Thread:
    """`first` (e.g. loading what requests that name no domain need), `load_deferred`, then `then` (e.g. building
    the validators' registries), on a daemon thread (it holds the GIL most of the time: start it once the ready
    path of this process is done). The thread ending means the process is fully warm. A step that fails is logged
    and the next one runs: whatever needs what it loads tries again itself."""
    def run() -> None:
        for step in [*first, load_deferred, *([then] if then is not None else [])]:
            try:
                step()
            except Exception:   # noqa: BLE001 - one failed load must not leave the rest unloaded
                logger.exception("loading after ready: %s failed", getattr(step, "__name__", step))

    thread = threading.Thread(target=run, name="auditor-deferred-imports", daemon=True)
    thread.start()
    return thread
