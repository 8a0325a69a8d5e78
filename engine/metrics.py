"""Engine-wide statistics under vLLM's metric names, as plain Python values for the service to export."""

from __future__ import annotations

from collections import deque
from typing import Any

from engine.outputs import RequestStats


class EngineMetrics:
    def __init__(self, window: int) -> None:
        # latencies of the most recent `window` finished requests (histogram-ready lists)
        self.time_to_first_token: deque[float] = deque(maxlen=window)
        self.inter_token_latency: deque[float] = deque(maxlen=window * 16)
        self.e2e_request_latency: deque[float] = deque(maxlen=window)
        self.request_queue_time: deque[float] = deque(maxlen=window)
        # cumulative counters
        self.num_requests_finished = 0
        self.num_requests_aborted = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.finish_reasons: dict[str, int] = {}

    def record_finished(self, stats: RequestStats, finish_reason: str) -> None:
        self.finish_reasons[finish_reason] = self.finish_reasons.get(finish_reason, 0) + 1
        if finish_reason == "abort":
            self.num_requests_aborted += 1
            return
        self.num_requests_finished += 1
        self.prompt_tokens_total += stats.num_prompt_tokens
        self.generation_tokens_total += stats.num_generated_tokens
        if stats.time_to_first_token_seconds is not None:
            self.time_to_first_token.append(stats.time_to_first_token_seconds)
        if stats.e2e_request_latency_seconds is not None:
            self.e2e_request_latency.append(stats.e2e_request_latency_seconds)
        if stats.request_queue_time_seconds is not None:
            self.request_queue_time.append(stats.request_queue_time_seconds)
        self.inter_token_latency.extend(stats.inter_token_latency_seconds)

    def snapshot(self) -> dict[str, Any]:
        return {
            "time_to_first_token_seconds": list(self.time_to_first_token),
            "inter_token_latency_seconds": list(self.inter_token_latency),
            "e2e_request_latency_seconds": list(self.e2e_request_latency),
            "request_queue_time_seconds": list(self.request_queue_time),
            "num_requests_finished": self.num_requests_finished,
            "num_requests_aborted": self.num_requests_aborted,
            "prompt_tokens_total": self.prompt_tokens_total,
            "generation_tokens_total": self.generation_tokens_total,
            "finish_reasons": dict(self.finish_reasons),
        }
