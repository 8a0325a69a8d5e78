"""How many requests this API process is serving right now, so background work can yield to them.

The embedded worker (`auditor.jobs.inprocess`) shares this process's GIL and CPUs with the requests: while
any is in flight it holds back scoring, up to a bounded lag, and catches up when traffic pauses."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class LiveTraffic:
    def __init__(self) -> None:
        self._in_flight = 0
        self._lock = threading.Lock()

    @contextmanager
    def serving(self) -> Iterator[None]:
        with self._lock:
            self._in_flight += 1
        try:
            yield
        finally:
            with self._lock:
                self._in_flight -= 1

    def busy(self) -> bool:
        return self._in_flight > 0
