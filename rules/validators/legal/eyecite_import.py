"""eyecite, imported for the first time by one thread only.

eyecite is imported lazily (its reporter regexes compile on import, ~1 CPU second). Its modules import each other
in a cycle (`eyecite.models` -> the package's `__init__` -> `find` -> `helpers` -> `models`), and when two threads
import it for the first time at once (two legal requests just after start, or one beside the loader that
`auditor serve` runs after `/ready`), each can hold a module lock the other needs: Python then hands one of them
the half-initialised module, and that request fails (ImportError "partially initialized module", or
KeyError 'eyecite'; seen as a 500 in tests/auditor/kg/test_live.py). Every first import goes through `load`.
"""

from __future__ import annotations

import threading

_lock = threading.Lock()
_loaded = False


def load() -> None:
    """Import eyecite's modules the validators use, once; threads that ask meanwhile wait for that import."""
    global _loaded
    if _loaded:
        return
    with _lock:
        if not _loaded:
            import eyecite.models  # noqa: F401
            import eyecite.tokenizers  # noqa: F401
            _loaded = True
