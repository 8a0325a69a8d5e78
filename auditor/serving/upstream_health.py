"""What an upstream's recent requests say about it: consecutive failures and the last failure's code, kept in
memory from the requests the service makes anyway (no probe of its own), read by `/ready`; each outcome and its
latency also go to the metrics (`auditor_upstream_requests_total`, `auditor_upstream_request_seconds`)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

OK = "ok"
CANCELLED = "cancelled"   # the service closed the request early (a client gone, a gate refusal): no verdict on it
# Outcomes that are the client's (a rejected request) or back-pressure (rate limits): the upstream is not failing.
_NOT_FAULTS = frozenset({OK, CANCELLED, "upstream_rejected_request", "upstream_rate_limited"})

# observe(outcome, seconds): outcome is "ok", "cancelled" or the UpstreamError code
Listener = Callable[[str, float], None]


@dataclass(frozen=True, slots=True)
class UpstreamHealthView:
    consecutive_failures: int
    last_failure: str | None


class UpstreamHealth:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._consecutive_failures = 0
        self._last_failure: str | None = None
        self.listeners: list[Listener] = []

    def observe(self, outcome: str, seconds: float) -> None:
        if outcome != CANCELLED:
            with self._lock:
                if outcome in _NOT_FAULTS:
                    self._consecutive_failures = 0
                else:
                    self._consecutive_failures += 1
                    self._last_failure = outcome
        for listener in self.listeners:
            listener(outcome, seconds)

    def view(self) -> UpstreamHealthView:
        with self._lock:
            return UpstreamHealthView(self._consecutive_failures, self._last_failure)
